"""Run one learner's notebook in a fresh, limited kernel, then grade it with the grader's own checks.

The notebook runs in a temporary copy of its learner's folder (in its own temporary directory,
away from SUBMISSIONS and the output folder), in a kernel of this Python environment started
under a memory limit, with a time limit for the learner's cells and another for the checks.
The kernel and every process it started are killed at the end and the copy is deleted.
"""

from __future__ import annotations

import os
import re
import secrets
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import nbformat
from jupyter_client.manager import AsyncKernelManager
from nbclient import NotebookClient
from nbclient.exceptions import CellTimeoutError, DeadKernelError

import attn_course
from attn_course.grading import sandbox
from attn_course.grading.discover import Learner, Submission
from attn_course.grading.kernel_checks import MARKER
from attn_course.grading.results import ExerciseResult, NotebookResult
from attn_course.quick_run import QUICK_VARIABLE
from attn_course.reference import EXERCISES

PACKAGE_PARENT = str(Path(attn_course.__file__).resolve().parents[1])
LAUNCHER = str(Path(__file__).with_name("_launch.py"))
MAX_OUTPUT_BYTES = 1_000_000
"""Output kept from a notebook's cells; the rest is dropped (outputs are never graded)."""


@dataclass(frozen=True)
class Limits:
    """What one notebook may use."""

    timeout: float = 180.0
    """Seconds for the learner's cells, and again for the grader's checks."""
    memory: int = 4 * 2**30
    """Bytes of address space of the kernel process (0: no limit)."""
    threads: int = 1
    """Threads for torch and BLAS in the kernel."""
    zygote: str | None = None
    """Socket of a kernel factory (`kernel_factory`) to fork kernels from; None: start each from scratch."""
    hidden: tuple[str, ...] = ()
    """Folders a kernel may not read or write, even by absolute path (the submissions, the grades);
    enforced where the system has Landlock (see `sandbox`)."""

    @property
    def memory_text(self) -> str:
        return f"{self.memory / 2**30:g} GiB"


class LimitedKernelManager(AsyncKernelManager):
    """A python3 kernel of this environment, started through the memory-limiting launcher."""

    memory_limit = 0
    zygote: str | None = None

    def format_kernel_cmd(self, extra_arguments: list[str] | None = None) -> list[str]:
        isolate = ["-P"] if sys.version_info >= (3, 11) else []  # no learner module shadows a startup one
        if self.zygote:
            connection_file = os.path.realpath(self.connection_file)
            return [
                sys.executable,
                *isolate,
                LAUNCHER,
                "--zygote",
                self.zygote,
                str(self.memory_limit),
                connection_file,
            ]
        kernel = [sys.executable, *isolate, "-m", "ipykernel_launcher"]
        connection = ["-f", os.path.realpath(self.connection_file)]
        return [sys.executable, *isolate, LAUNCHER, str(self.memory_limit), *kernel, *connection]


class _CappedClient(NotebookClient):
    """A notebook client that keeps at most MAX_OUTPUT_BYTES of output (errors always kept)."""

    kept = 0

    def output(self, outs: list[Any], msg: dict[str, Any], display_id: Any, cell_index: int) -> Any:
        size = len(str(msg.get("content", "")))
        if msg.get("msg_type") != "error" and self.kept + size > MAX_OUTPUT_BYTES:
            return None
        self.kept += size
        return super().output(outs, msg, display_id, cell_index)


_DEFINES = (
    r"^(?:(?:async\s+)?def\s+{0}\s*\(|class\s+{0}\b|{0}\s*(?::[^=\n]*)?=(?!=)"
    r"|(?:from\s+\S+\s+)?import\s.*\b{0}\b)"
)


def defining_cells(notebook: nbformat.NotebookNode, name: str) -> list[int]:
    """Indices of the code cells that define `name` at top level (def, class, assignment, import)."""
    pattern = re.compile(_DEFINES.format(re.escape(name)), re.M)
    return [i for i, c in enumerate(notebook.cells) if c.cell_type == "code" and pattern.search(c.source)]


def _copy_folder(learner: Learner, submission: Submission, work: Path) -> None:
    """Copy the learner's folder (symbolic links left out), then the notebook as discovered."""

    def ignore(folder: str, names: list[str]) -> list[str]:
        return [n for n in names if os.path.islink(os.path.join(folder, n))]

    shutil.copytree(learner.folder, work, ignore=ignore)
    (work / submission.path.name).write_bytes(submission.data)


def _kill_group(pgid: int | None) -> None:
    if pgid:
        try:
            os.killpg(pgid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass


def _forked_pid(connection_file: str) -> int | None:
    """The pid of a kernel forked by the zygote, from the file its launcher wrote (then removed)."""
    path = Path(connection_file + ".kernel-pid")
    try:
        pid = int(path.read_text())
        path.unlink()
    except (OSError, ValueError):
        return None
    return pid


def _error(cell: nbformat.NotebookNode) -> tuple[str, str] | None:
    for out in cell.get("outputs", []):
        if out.get("output_type") == "error":
            return out.get("ename", "Error"), " ".join(str(out.get("evalue", "")).split())[:300]
    return None


def _out_of_memory(error: tuple[str, str]) -> bool:
    ename, evalue = error
    return ename == "MemoryError" or "can't allocate memory" in evalue or "DefaultCPUAllocator" in evalue


def _stdout(cell: nbformat.NotebookNode) -> str:
    return "".join(o.get("text", "") for o in cell.get("outputs", []) if o.get("output_type") == "stream")


def _payloads(cell: nbformat.NotebookNode, nonce: str) -> list[dict[str, Any]]:
    import json

    prefix = f"{MARKER}-{nonce} "
    found = []
    for line in _stdout(cell).splitlines():
        if line.startswith(prefix):
            try:
                found.append(json.loads(line[len(prefix) :]))
            except ValueError:
                continue
    return found


class _Stop(Exception):
    """The notebook cannot go on: status and problem."""

    def __init__(self, status: str, problem: str) -> None:
        super().__init__(problem)
        self.status = status
        self.problem = problem


def _describe_cell(index: int, notebook: nbformat.NotebookNode) -> str:
    number = sum(1 for c in notebook.cells[: index + 1] if c.cell_type == "code")
    return f"code cell {number}"


def kernel_env(limits: Limits, private: Path | None = None) -> dict[str, str]:
    """The kernel's environment; with `private`, the notebook's own temporary tree, also its sandbox."""
    env = dict(os.environ)
    if private is not None:  # the only tree this kernel may write to (see `sandbox`)
        for name, folder in (("TMPDIR", "tmp"), ("IPYTHONDIR", "ipython")):
            (private / folder).mkdir(exist_ok=True)
            env[name] = str(private / folder)
        env[sandbox.ENV] = sandbox.policy([str(private)], list(limits.hidden))
    threads = str(limits.threads)
    env.update(
        MPLBACKEND="agg",
        OMP_NUM_THREADS=threads,
        MKL_NUM_THREADS=threads,
        OPENBLAS_NUM_THREADS=threads,
        PYTHONHASHSEED="0",
        PYDEVD_DISABLE_FILE_VALIDATION="1",
        # Grade on the CPU: the same scores on every machine, CPU-sized notebooks (DEVICE.pick), and
        # no GPU driver reserving more address space than the memory limit allows.
        CUDA_VISIBLE_DEVICES="",
        # ... where Triton kernels run through its interpreter (set before triton is imported).
        TRITON_INTERPRET="1",
    )
    # Grading needs every check called, not a model trained to its best or a full benchmark:
    # notebooks that train or measure use their reduced budgets (see attn_course.quick_run).
    env[QUICK_VARIABLE] = "1"
    return env


def _exercise_results(
    stem: str, notebook: nbformat.NotebookNode, errors: dict[int, tuple[str, str]], graded: dict[str, Any]
) -> tuple[ExerciseResult, ...]:
    results = []
    for name in EXERCISES[stem]:
        cells = defining_cells(notebook, name)
        raised = [(i, errors[i]) for i in cells if i in errors]
        payload = graded.get(name)
        if isinstance(payload, str):  # why the grader could not check it
            results.append(ExerciseResult.failed(name, payload))
        elif not payload or not payload.get("defined"):
            if raised:
                index, (ename, evalue) = raised[-1]
                why = f"the cell that defines it ({_describe_cell(index, notebook)}) raised {ename}: {evalue}"
            elif cells:
                why = "it was deleted or overwritten after the cell that defines it ran"
            else:
                why = f"no cell defines it (the exercise cell `{name}` was deleted or renamed)"
            results.append(ExerciseResult.failed(name, f"`{name}` was never defined: {why}."))
        elif cells and cells[-1] in errors:
            ename, evalue = errors[cells[-1]]
            results.append(
                ExerciseResult.failed(
                    name,
                    f"the cell that defines `{name}` ({_describe_cell(cells[-1], notebook)}) raised "
                    f"{ename}: {evalue}. Make that cell run without an error.",
                )
            )
        elif payload.get("not_graded"):
            results.append(ExerciseResult.not_graded(name, str(payload.get("message", ""))))
        elif payload.get("passed"):
            results.append(ExerciseResult.success(name, str(payload.get("message", "passed"))))
        else:
            results.append(ExerciseResult.failed(name, str(payload.get("message", "failed"))))
    return tuple(results)


def _zeros(stem: str, reason: str) -> tuple[ExerciseResult, ...]:
    return tuple(ExerciseResult.failed(name, reason) for name in EXERCISES[stem])


def run_notebook(learner: Learner, submission: Submission, limits: Limits) -> NotebookResult:
    """Execute one submitted notebook in a fresh kernel and grade its exercises with the course checks."""
    start = time.perf_counter()
    stem = submission.stem
    if submission.problem:
        reason = f"not graded: {submission.path.name}: {submission.problem}"
        return NotebookResult(
            stem, "invalid", f"{submission.path.name}: {submission.problem}", _zeros(stem, reason)
        )
    notebook = nbformat.reads(submission.data.decode("utf-8"), as_version=4)
    for cell in notebook.cells:
        if cell.cell_type == "code":
            cell.outputs, cell.execution_count = [], None  # submitted outputs never count
    with tempfile.TemporaryDirectory(prefix="attn-grade-") as temporary:
        work = Path(temporary, "grading", "submission")
        _copy_folder(learner, submission, work)
        status, problem, errors, graded = _execute(stem, notebook, work, limits)
    if status != "graded":
        exercises = _zeros(stem, f"not graded: {problem}")
    else:
        exercises = _exercise_results(stem, notebook, errors, graded)
    return NotebookResult(stem, status, problem, exercises, time.perf_counter() - start)


def _execute(
    stem: str, notebook: nbformat.NotebookNode, work: Path, limits: Limits
) -> tuple[str, str, dict[int, tuple[str, str]], dict[str, Any]]:
    """Run the learner's cells, then the grader's; (status, problem, cell errors, per-exercise payloads)."""
    client = _CappedClient(
        notebook,
        timeout=int(limits.timeout),
        allow_errors=True,
        kernel_name="python3",
        skip_cells_with_tag=f"never-skip-{secrets.token_hex(8)}",
        shutdown_kernel="immediate",
        record_timing=False,
        resources={"metadata": {"path": str(work)}},
    )
    client.km = LimitedKernelManager(kernel_name="python3")
    client.km.memory_limit = limits.memory
    client.km.zygote = limits.zygote
    errors: dict[int, tuple[str, str]] = {}
    graded: dict[str, Any] = {}
    pgid = None
    connection_file = ""
    learner_cells = len(notebook.cells)
    try:
        with client.setup_kernel(
            env=kernel_env(limits, work.parents[1]), stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
        ):
            pgid = getattr(client.km.provisioner, "pgid", None)
            connection_file = client.km.connection_file
            _run_learner_cells(client, notebook, limits, errors)
            _run_grader_cells(client, stem, notebook, work, limits, graded)
    except _Stop as stop:
        return stop.status, stop.problem, errors, graded
    except RuntimeError as error:  # the kernel did not start: the grader's failure, not the learner's
        return "grader_error", f"the grader could not run this notebook ({error})", errors, graded
    finally:
        _kill_group(pgid)
        _kill_group(_forked_pid(connection_file))
        del notebook.cells[learner_cells:]
    return "graded", "", errors, graded


def _run_cell(
    client: NotebookClient,
    cell: nbformat.NotebookNode,
    index: int,
    deadline: float,
    what: str,
    limits: Limits,
    notebook: nbformat.NotebookNode,
    learner_cell: bool = False,
) -> None:
    """Run one cell within the time left; a timeout or a dead kernel stops the notebook."""
    where = _describe_cell(index, notebook) if learner_cell else "the grader's checks"
    timed_out = f"{what} timed out after {limits.timeout:g} s" + (f", in {where}" if learner_cell else "")
    remaining = deadline - time.monotonic()
    if remaining <= 0:
        raise _Stop("timeout", timed_out)
    client.timeout = max(1, int(remaining + 0.999))
    try:
        client.execute_cell(cell, index)
    except CellTimeoutError:
        raise _Stop("timeout", timed_out) from None
    except DeadKernelError:
        raise _Stop(
            "crashed",
            f"the kernel died while running {where} (a crash, an exit, or memory beyond "
            f"the limit of {limits.memory_text})",
        ) from None


def _run_learner_cells(
    client: NotebookClient,
    notebook: nbformat.NotebookNode,
    limits: Limits,
    errors: dict[int, tuple[str, str]],
) -> None:
    deadline = time.monotonic() + limits.timeout
    for index, cell in enumerate(notebook.cells):
        if cell.cell_type != "code" or not cell.source.strip():
            continue
        _run_cell(client, cell, index, deadline, "the notebook", limits, notebook, learner_cell=True)
        error = _error(cell)
        if error:
            errors[index] = error
            if _out_of_memory(error):
                raise _Stop(
                    "out_of_memory",
                    f"the notebook ran out of memory (limit {limits.memory_text}) in "
                    f"{_describe_cell(index, notebook)}",
                )


def _run_grader_cells(
    client: NotebookClient,
    stem: str,
    notebook: nbformat.NotebookNode,
    work: Path,
    limits: Limits,
    graded: dict[str, Any],
) -> None:
    """Import the checks afresh in the kernel, then check each exercise in a cell of its own."""
    nonce = secrets.token_hex(16)
    setup = nbformat.v4.new_code_cell(
        "import sys as _attn_sys, importlib as _attn_importlib\n"
        f"_attn_sys.path[:] = [{PACKAGE_PARENT!r}] + [p for p in _attn_sys.path "
        f"if p not in ('', '.', {str(work)!r})]\n"
        "for _attn_name in [m for m in _attn_sys.modules if m.split('.')[0] == 'attn_course']:\n"
        "    del _attn_sys.modules[_attn_name]\n"
        "_attn_importlib.invalidate_caches()\n"
        "from attn_course.grading import kernel_checks as _attn_grader\n"
        f"_attn_grader.setup({PACKAGE_PARENT!r}, {nonce!r})\n"
    )
    index = len(notebook.cells)
    notebook.cells.append(setup)  # nbclient stores each executed cell back into the notebook
    deadline = time.monotonic() + limits.timeout
    _run_cell(client, setup, index, deadline, "the grader's checks", limits, notebook)
    ready = _payloads(setup, nonce)
    if not ready or not ready[-1].get("ok"):
        error = _error(setup)
        why = ready[-1].get("problem") if ready else "no answer from the grader's code in the kernel"
        if error:
            why = f"{error[0]}: {error[1]}"
        for name in EXERCISES[stem]:
            graded[name] = f"the grader could not check this notebook: {why}."
        return
    names = EXERCISES[stem]
    for offset, name in enumerate(names):
        cell = nbformat.v4.new_code_cell(f"_attn_grader.grade_exercise({name!r}, globals())")
        notebook.cells.append(cell)
        try:
            _run_cell(client, cell, index + 1 + offset, deadline, f"the check of `{name}`", limits, notebook)
        except _Stop as stop:
            graded[name] = f"{stop.problem} (while the grader's check called your `{name}`)"
            for rest in names[offset + 1 :]:
                graded[rest] = f"not checked: the check of `{name}` did not finish"
            return
        found = [p for p in _payloads(cell, nonce) if p.get("exercise") == name]
        error = _error(cell)
        if found:
            graded[name] = found[-1]
        else:
            graded[name] = "the grader could not check it" + (f": {error[0]}: {error[1]}" if error else "")
