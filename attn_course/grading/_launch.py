"""Kernel launcher, run as a script by path: starting a kernel imports nothing from the learner's folder.

`python _launch.py MEMORY_BYTES CMD...` limits memory (address space, inherited by everything the
kernel starts) and applies the file-system sandbox (`sandbox.py`), then becomes CMD.
`python _launch.py --zygote SOCKET MEMORY_BYTES CONNECTION_FILE` asks the kernel factory
(kernel_factory.py) for a kernel instead and stands in for it.

Either way the launcher dies with the process that started it (a grader or a Dask worker killed
with SIGKILL has no chance to clean up): the kernel it became is killed, and a stand-in gets
SIGTERM, on which it kills the kernel it stands in for.
"""

import os
import resource
import signal
import sys

PR_SET_PDEATHSIG = 1


def die_with_parent(signum: int) -> None:
    """Have Linux send `signum` to this process when its parent goes (kept across exec); elsewhere nothing."""
    if not sys.platform.startswith("linux"):
        return
    import ctypes

    try:
        ctypes.CDLL(None, use_errno=True).prctl(PR_SET_PDEATHSIG, signum, 0, 0, 0)
    except (OSError, AttributeError):
        return
    parent = os.environ.get("JPY_PARENT_PID", "")  # jupyter_client's pid, set as it started this process
    if parent.isdigit() and os.getppid() != int(parent):  # it went before the setting took effect
        os._exit(1)


def main() -> None:
    if sys.argv[1] == "--zygote":
        die_with_parent(signal.SIGTERM)  # the stand-in's SIGTERM handler kills the forked kernel
        sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
        from kernel_factory import stand_in

        stand_in(sys.argv[2], sys.argv[4], int(sys.argv[3]))
        return
    die_with_parent(signal.SIGKILL)
    memory, command = int(sys.argv[1]), sys.argv[2:]
    if memory > 0:
        resource.setrlimit(resource.RLIMIT_AS, (memory, memory))
    resource.setrlimit(resource.RLIMIT_CORE, (0, 0))
    from attn_course.grading.sandbox import apply_from_env

    apply_from_env(readable=[command[command.index("-f") + 1]])  # the kernel reads its connection file
    os.execv(command[0], command)


if __name__ == "__main__":
    main()
