"""Kernels for the notebooks the suite runs (nbval's solutions, the student run-throughs), forked
from a kernel factory instead of started afresh.

A fresh kernel spends about 3.5 s of CPU importing torch, matplotlib, ipykernel and the course before
its first cell; the suite starts some 25 of them, a sixth of what its workers can do in its time.
Each worker starts one factory on first use: the grader's (`attn_course.grading.kernel_factory`),
run by this file as a script so that it imports only the third-party modules in `PRELOAD`, none of
the course and nothing that looks at IPython as it is imported (tqdm.auto picks its widget bar
that way, matplotlib.pyplot its backend, attn_course.checks its traceback-free failures): those the
notebook imports itself, inside its kernel, as a learner's does. Each notebook gets a kernel forked
from it: a fresh process with this worker's environment and the notebook's folder, that has run no
cell before. The browser tests and the grader's own tests (`test_grading_*`) still start kernels
afresh, and ATTN_COURSE_FRESH_KERNELS=1 makes these do so too.
"""

from __future__ import annotations

import atexit
import os
import signal
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from attn_course.grading.kernel_factory import Zygote

FRESH_VARIABLE = "ATTN_COURSE_FRESH_KERNELS"
"""Set to 1 to start every kernel afresh, as before."""
PRELOAD = (
    "torch", "numpy", "einops", "triton", "PIL.Image", "matplotlib", "IPython",
    "ipykernel.kernelapp", "ipykernel.ipkernel", "ipywidgets",
)  # fmt: skip
"""What the factory imports before it forks: third-party modules that do not look at IPython."""

_factory: list[Zygote] = []


def _socket() -> str | None:
    """The socket of this process's kernel factory, started on first use; None: start kernels afresh."""
    if os.environ.get(FRESH_VARIABLE) == "1":
        return None
    if not _factory:
        _factory.append(Zygote(dict(os.environ), script=__file__, package_parent=None))
        atexit.register(_factory[0].close)
    return _factory[0].socket


def _kill_forked(connection_file: str) -> None:
    """Kill the kernel the factory forked for this connection file, which jupyter_client's shutdown does
    not reach (it kills the launcher that stood in for it), and remove the pid file the launcher wrote."""
    path = Path(connection_file + ".kernel-pid")
    try:
        pid = int(path.read_text())
        path.unlink()
        os.killpg(pid, signal.SIGKILL)  # the kernel leads a session of its own (kernel_factory._child)
    except (OSError, ValueError):
        pass


def _managers() -> tuple[type, type]:
    """(sync, async) kernel managers whose kernels are forked (imported late: the factory script
    imports nothing of jupyter_client)."""
    from jupyter_client.manager import AsyncKernelManager, KernelManager

    from attn_course.grading.execute import LimitedKernelManager

    class ForkedKernelManager(KernelManager):
        """jupyter_client's kernel manager, its kernel forked from the factory (nbval's is this kind)."""

        memory_limit = 0
        zygote: str | None = None
        format_kernel_cmd = LimitedKernelManager.format_kernel_cmd

        def shutdown_kernel(self, now: bool = False, restart: bool = False) -> None:
            super().shutdown_kernel(now=now, restart=restart)
            _kill_forked(self.connection_file)

    class AsyncForkedKernelManager(AsyncKernelManager):
        """The same, for nbclient."""

        memory_limit = 0
        zygote: str | None = None
        format_kernel_cmd = LimitedKernelManager.format_kernel_cmd

        async def shutdown_kernel(self, now: bool = False, restart: bool = False) -> None:
            await super().shutdown_kernel(now=now, restart=restart)
            _kill_forked(self.connection_file)

    return ForkedKernelManager, AsyncForkedKernelManager


def client_kwargs() -> dict[str, Any]:
    """What to add to NotebookClient(...) for a forked kernel (nothing where kernels start afresh): the
    class of its kernel manager, not one made here, so that the client owns it and shuts its kernel down."""
    zygote = _socket()
    if zygote is None:
        return {}

    class Manager(_managers()[1]):  # type: ignore[misc]
        pass

    Manager.zygote = zygote
    return {"kernel_manager_class": Manager}


@contextmanager
def nbval_forks() -> Iterator[None]:
    """While nbval starts a notebook's kernel, its KernelManager is `ForkedKernelManager`."""
    zygote = _socket()
    if zygote is None:
        yield
        return
    import nbval.kernel

    class Manager(_managers()[0]):  # type: ignore[misc]
        pass

    Manager.zygote = zygote
    saved = nbval.kernel.KernelManager
    nbval.kernel.KernelManager = Manager
    try:
        yield
    finally:
        nbval.kernel.KernelManager = saved


if __name__ == "__main__":  # the factory: the grader's, with this file's PRELOAD and no grader modules
    from attn_course.grading import kernel_factory

    kernel_factory.PRELOAD = PRELOAD
    kernel_factory.serve(sys.argv[1])
