"""A pre-forked kernel factory: one process imports torch, matplotlib and ipykernel once, then forks kernels.

Starting a fresh kernel per notebook costs about 2 s of CPU, most of it importing torch and
matplotlib; forking a process that has imported them already costs milliseconds. Each forked
kernel is still a fresh process: it gets its own session, memory limit, file-system sandbox,
working directory and environment, and has run no learner code before its notebook. The launcher
(`_launch.py --zygote`) asks for a kernel over a Unix socket and stands in for it towards
jupyter_client.

The factory also imports the grader's own copy of the course's checks (`prepare_grader`), which
each kernel's first grader cell takes instead of importing it afresh (`execute`, `kernel_checks`).

Run as a script by path with `python -P kernel_factory.py SOCKET [PACKAGE_PARENT]` (no module of any
folder shadows an import).
"""

from __future__ import annotations

import importlib
import json
import os
import resource
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
import types
from pathlib import Path

PRELOAD = (
    "torch", "numpy", "einops", "matplotlib", "matplotlib.pyplot",
    "ipykernel.kernelapp", "ipykernel.ipkernel", "ipywidgets", "IPython",
    "attn_course.reference", "attn_course.checks", "attn_course.plots.attention",
    "attn_course.plots.masking", "attn_course.plots.heads", "attn_course.explorers.scaling",
    "attn_course.demos.saturation", "attn_course.demos.sentence",
)  # fmt: skip
"""Modules imported once by the factory, so that no kernel pays for them again."""

GRADER_MODULES = (
    "attn_course.grading.kernel_checks", "attn_course.checks", "attn_course.checks._harness",
    "attn_course.reference",
)  # fmt: skip
"""The grader's own modules in each kernel (`kernel_checks.setup`), imported once by the factory."""
STASH = "_attn_course_grader"
"""The name in `sys.modules` under which a forked kernel finds the grader's modules: a module whose
`modules` maps names to the grader's `attn_course` modules, imported before any learner code ran."""


def prepare_grader(package_parent: str) -> None:
    """Import the grader's copy of the checks from `package_parent`, apart from the `attn_course`
    modules the learner's cells will import, and leave it under `STASH` in `sys.modules`."""
    learner = {n: sys.modules.pop(n) for n in list(sys.modules) if n.split(".")[0] == "attn_course"}
    path = list(sys.path)
    sys.path[:] = [package_parent] + [p for p in path if p not in ("", ".")]
    try:
        for name in GRADER_MODULES:
            importlib.import_module(name)
        stash = types.ModuleType(STASH)
        stash.modules = {n: m for n, m in sys.modules.items() if n.split(".")[0] == "attn_course"}  # type: ignore[attr-defined]
        sys.modules[STASH] = stash
    except Exception:  # each kernel imports the grader's modules itself, as without a factory
        pass
    finally:
        sys.path[:] = path
        for name in [n for n in sys.modules if n.split(".")[0] == "attn_course"]:
            del sys.modules[name]
        sys.modules.update(learner)


def _die_with_the_factory(factory: int) -> None:
    """Have Linux kill this kernel when the factory goes: the factory goes when its grader does, and a
    stand-in killed before it learned this kernel's pid cannot kill it (elsewhere: nothing)."""
    if sys.platform.startswith("linux"):
        import ctypes

        try:
            ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGKILL, 0, 0, 0)  # PR_SET_PDEATHSIG
        except (OSError, AttributeError):
            return
    if os.getppid() != factory:  # the factory went before the setting took effect
        os._exit(0)


def _child(request: dict, server: socket.socket, connection: socket.socket, factory: int) -> None:
    """Become the requested kernel (never returns)."""
    try:
        server.close()
        connection.close()
        signal.signal(signal.SIGCHLD, signal.SIG_DFL)
        os.setsid()
        _die_with_the_factory(factory)
        memory = int(request["memory"])
        if memory > 0:
            resource.setrlimit(resource.RLIMIT_AS, (memory, memory))
        resource.setrlimit(resource.RLIMIT_CORE, (0, 0))
        os.chdir(request["cwd"])
        os.environ.clear()
        os.environ.update(request["env"])
        torch = sys.modules.get("torch")
        if torch is not None:  # imported before the fork: its threads from this kernel's share
            torch.set_num_threads(max(1, int(os.environ.get("OMP_NUM_THREADS") or 1)))
        from attn_course.grading.sandbox import apply_from_env

        apply_from_env(readable=[request["connection_file"]])  # before any learner code
        null = os.open(os.devnull, os.O_RDWR)
        for fd in (0, 1, 2):
            os.dup2(null, fd)
        sys.argv = ["ipykernel_launcher", "-f", request["connection_file"]]
        from ipykernel import kernelapp

        kernelapp.launch_new_instance()
    finally:
        os._exit(0)


def serve(path: str, package_parent: str | None = None) -> None:
    """Preload (with `package_parent`, the grader's modules too: `prepare_grader`), then fork one kernel
    per request on the Unix socket `path`; print 'ready' first.

    Exits when the process that started it is gone (a grader or Dask worker killed without closing it).
    """
    parent = os.getppid()
    preloaded = threading.Event()

    def exit_with_the_parent() -> None:  # while preloading, which takes seconds on a busy machine
        while not preloaded.wait(0.25):
            if os.getppid() != parent:
                os._exit(0)

    watcher = threading.Thread(target=exit_with_the_parent, daemon=True)
    watcher.start()
    for name in PRELOAD:
        try:
            __import__(name)
        except ImportError:  # a module the course no longer has: its notebooks import it themselves
            continue
    if package_parent:
        prepare_grader(package_parent)
    preloaded.set()
    watcher.join()  # no thread but this one when kernels are forked
    signal.signal(signal.SIGCHLD, signal.SIG_IGN)  # forked kernels are reaped automatically
    server = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    server.bind(path)
    server.listen(16)
    server.settimeout(0.5)
    print("ready", flush=True)
    while True:
        try:
            connection, _ = server.accept()
        except TimeoutError:
            if os.getppid() != parent:
                return
            continue
        connection.settimeout(None)
        with connection:
            request = json.loads(connection.makefile("r").readline())
            factory = os.getpid()
            pid = os.fork()
            if pid == 0:
                _child(request, server, connection, factory)
            connection.sendall(f"{pid}\n".encode())


PACKAGE_PARENT = str(Path(__file__).resolve().parents[2])
"""The folder holding the `attn_course` package the grader runs (as `execute.PACKAGE_PARENT`)."""


class Zygote:
    """The host's handle on a kernel factory process."""

    def __init__(
        self, env: dict[str, str], script: str = __file__, package_parent: str | None = PACKAGE_PARENT
    ) -> None:
        """Start `script` (this file; the test suite's factory is another) on a socket of its own;
        with `package_parent`, the factory imports the grader's modules from there too."""
        self.folder = tempfile.mkdtemp(prefix="attn-grade-zygote-")
        self.socket = str(Path(self.folder, "zygote.sock"))
        isolate = ["-P"] if sys.version_info >= (3, 11) else []
        parent = [package_parent] if package_parent else []
        self.process = subprocess.Popen(
            [sys.executable, *isolate, str(Path(script)), self.socket, *parent],
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
            stdin=subprocess.DEVNULL,
            text=True,
            start_new_session=True,
        )
        assert self.process.stdout is not None
        if self.process.stdout.readline().strip() != "ready":
            self.close()
            raise RuntimeError("the kernel factory did not start")

    def close(self) -> None:

        self.process.kill()
        self.process.wait()
        if os.path.isdir(self.folder):
            for name in os.listdir(self.folder):
                os.unlink(os.path.join(self.folder, name))
            os.rmdir(self.folder)


def request_kernel(path: str, connection_file: str, memory: int) -> int:
    """Ask the factory at `path` for a kernel in this process's cwd and environment; its pid."""
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as client:
        client.connect(path)
        request = {
            "connection_file": connection_file,
            "memory": memory,
            "cwd": os.getcwd(),
            "env": dict(os.environ),
        }
        client.sendall((json.dumps(request) + "\n").encode())
        return int(client.makefile("r").readline())


def stand_in(path: str, connection_file: str, memory: int) -> None:
    """Launcher side: get a kernel, write its pid beside the connection file, live as long as it does."""
    stopping: list[int] = []  # a signal before the kernel's pid is known: acted on once it is
    signal.signal(signal.SIGINT, lambda signum, frame: stopping.append(signum))
    signal.signal(signal.SIGTERM, lambda signum, frame: stopping.append(signum))
    pid = request_kernel(path, connection_file, memory)
    Path(connection_file + ".kernel-pid").write_text(str(pid))

    def forward(signum: int, frame: object) -> None:
        try:
            os.killpg(pid, signal.SIGKILL if signum == signal.SIGTERM else signum)
        except OSError:
            pass
        if signum == signal.SIGTERM:
            os._exit(0)

    signal.signal(signal.SIGINT, forward)
    signal.signal(signal.SIGTERM, forward)
    for signum in stopping:
        forward(signum, None)
    while True:
        try:
            os.kill(pid, 0)
        except OSError:
            return
        time.sleep(0.05)


if __name__ == "__main__":
    serve(sys.argv[1], sys.argv[2] if len(sys.argv) > 2 else None)
