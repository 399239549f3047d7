"""Kernel launcher, run as a script by path: starting a kernel imports nothing from the learner's folder.

`python _launch.py MEMORY_BYTES CMD...` limits memory (address space, inherited by everything the
kernel starts) and applies the file-system sandbox (`sandbox.py`), then becomes CMD.
`python _launch.py --zygote SOCKET MEMORY_BYTES CONNECTION_FILE` asks the kernel factory
(kernel_factory.py) for a kernel instead and stands in for it.
"""

import os
import resource
import sys


def main() -> None:
    if sys.argv[1] == "--zygote":
        sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
        from kernel_factory import stand_in

        stand_in(sys.argv[2], sys.argv[4], int(sys.argv[3]))
        return
    memory, command = int(sys.argv[1]), sys.argv[2:]
    if memory > 0:
        resource.setrlimit(resource.RLIMIT_AS, (memory, memory))
    resource.setrlimit(resource.RLIMIT_CORE, (0, 0))
    from attn_course.grading.sandbox import apply_from_env

    apply_from_env(readable=[command[command.index("-f") + 1]])  # the kernel reads its connection file
    os.execv(command[0], command)


if __name__ == "__main__":
    main()
