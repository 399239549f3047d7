"""Run one learner's notebook in a fresh, limited kernel, then grade it with the grader's own checks.

The notebook runs in a temporary copy of its learner's folder (in its own temporary directory,
away from SUBMISSIONS and the output folder), in a kernel of this Python environment started
under a memory limit. Each exercise is checked as soon as the last cell that defines it has run,
and its result is kept at once: a later timeout, crash or memory kill marks only the exercises
not yet reached. The learner's own check cells (`check_NAME(NAME)`, whose result never
counts) and cells tagged `demonstration` that nothing graded needs are not run (`demonstrations`).
Time is counted in the kernel's CPU time (its processes', read from /proc), one
budget for the learner's cells and another for the checks, so that a busy machine costs no
points; a generous wall-clock backstop stops a kernel that waits or starves, and says so.
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
import threading
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
from attn_course.grading.demonstrations import skippable
from attn_course.grading.discover import Learner, Submission
from attn_course.grading.kernel_checks import MARKER
from attn_course.grading.kernel_factory import STASH
from attn_course.grading.results import ExerciseResult, NotebookResult
from attn_course.quick_run import QUICK_VARIABLE
from attn_course.reference import EXERCISES

PACKAGE_PARENT = str(Path(attn_course.__file__).resolve().parents[1])
LAUNCHER = str(Path(__file__).with_name("_launch.py"))
MAX_OUTPUT_BYTES = 1_000_000
"""Output kept from a notebook's cells; the rest is dropped (outputs are never graded)."""
SKIPPED = "[not run by the grader: a demonstration that nothing graded needs]\n"
"""The output of a skipped demonstration cell in the instructor's executed copy (`--keep-executed`)."""
CHECKED = "[not run by the grader, which checks each exercise itself after the cell that defines it]\n"
"""The output of a learner's own check cell (`check_NAME(NAME)` alone) in the executed copy."""


@dataclass(frozen=True)
class Limits:
    """What one notebook may use."""

    timeout: float = 180.0
    """Seconds of CPU time (per thread in `threads`) for the learner's cells, and again for the checks."""
    memory: int = 4 * 2**30
    """Bytes of address space of the kernel process (0: no limit)."""
    threads: int = 1
    """Threads for torch and BLAS in the kernel."""
    zygote: str | None = None
    """Socket of a kernel factory (`kernel_factory`) to fork kernels from; None: start each from scratch."""
    hidden: tuple[str, ...] = ()
    """Folders a kernel may not read or write, even by absolute path (the submissions, the grades);
    enforced where the system has Landlock (see `sandbox`)."""
    check: float = 60.0
    """Seconds of CPU time (per thread in `threads`) one exercise's check may spend, the learner's code
    it calls included: a loop in one exercise costs this, and the exercises after it are still
    graded (0: only the notebook's limit)."""
    keep: str = ""
    """A folder to write each executed notebook to, as `<learner>/<stem>.ipynb` (the learner's cells
    with their outputs, the grader's cells left out); "" keeps none. Written by the process that
    grades it (on a Dask cluster, on the worker's machine)."""
    wall: float = 0.0
    """Wall-clock seconds for the learner's cells, and again for the checks, however little CPU they
    got (the backstop); 0: WALL_FACTOR times `timeout`."""

    @property
    def memory_text(self) -> str:
        return f"{self.memory / 2**30:g} GiB"

    @property
    def cpu_limit(self) -> float:
        """CPU seconds for the learner's cells (and again for the checks): `timeout` per thread."""
        return self.timeout * max(1, self.threads)

    @property
    def cpu_text(self) -> str:
        """The CPU time limit in words: "180 s of CPU time" (per thread, where there are several)."""
        threads = f" per thread ({self.threads} threads)" if self.threads > 1 else ""
        return f"{self.timeout:g} s of CPU time{threads}"

    @property
    def check_cpu(self) -> float:
        """CPU seconds of one check (all threads); 0 (none of its own) unless less than the checks'
        whole budget, which otherwise stops the notebook first."""
        return self.check * max(1, self.threads) if 0 < self.check < self.timeout else 0.0

    @property
    def wall_limit(self) -> float:
        return self.wall or WALL_FACTOR * self.timeout


BUSY_SHARE = 0.5
"""A kernel stopped by the wall-clock backstop with less CPU time than this share of it was starved
or waiting, and its message says so."""
WALL_FACTOR = 5.0
"""The wall-clock backstop, in multiples of `Limits.timeout`: a kernel that gets a fifth of a core
on a busy machine still finishes."""


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


_CHECK_CELL = re.compile(r"^\s*check_\w+\(\s*\w+\s*\)\s*;?\s*$")
"""A learner's check cell as the notebooks ship it: `check_NAME(NAME)` alone."""

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
    for _ in range(40):  # written as the kernel starts: there by the time it answers, but wait a little
        try:
            pid = int(path.read_text())
            path.unlink()
            return pid
        except (OSError, ValueError):
            time.sleep(0.05)
    return None


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


_HEADING = re.compile(r"^ {0,3}#{1,6}\s+(.+?)\s*#*\s*$", re.M)
_ORDINALS = ("first", "second", "third", "fourth", "fifth", "sixth", "seventh", "eighth", "ninth")


def _heading(markdown: str) -> str:
    """The last heading of a Markdown cell, in plain words ("" when it has none)."""
    found = _HEADING.findall(markdown)
    return " ".join(found[-1].replace("`", "").replace("*", "").split())[:80] if found else ""


def _ordinal(n: int) -> str:
    return _ORDINALS[n - 1] if n <= len(_ORDINALS) else f"{n}th"


def _describe_cell(index: int, notebook: nbformat.NotebookNode) -> str:
    """A learner's cell as JupyterLab shows it: by the nearest heading above it (never by a number).

    >>> nb = nbformat.v4.new_notebook(cells=[nbformat.v4.new_markdown_cell("## 6 · Train with it"),
    ...     nbformat.v4.new_code_cell("x = 1"), nbformat.v4.new_code_cell("y = 2")])
    >>> _describe_cell(1, nb), _describe_cell(2, nb)
    ('the cell under *6 · Train with it*', 'the second code cell under *6 · Train with it*')
    """
    above = 0
    for cell in reversed(notebook.cells[:index]):
        if cell.cell_type == "markdown" and _heading(cell.source):
            where = f"*{_heading(cell.source)}*"
            return (
                f"the {_ordinal(above + 1)} code cell under {where}" if above else f"the cell under {where}"
            )
        if cell.cell_type == "code" and cell.source.strip():
            above += 1
    first = (notebook.cells[index].source.strip().splitlines() or [""])[0]
    if first.startswith("#"):  # a comment, such as the setup cell's `# @title Setup`: not learner code
        return f"the cell that starts `{first.lstrip('# ')[:60]}`"
    return f"the {_ordinal(above + 1)} code cell of the notebook, above its first heading"


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


_TICKS = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100


def process_cpu(pid: int) -> float | None:
    """CPU seconds of process `pid` (all its threads) and its descendants, the children it reaped
    included, from /proc; None where /proc cannot tell (not Linux, or the process is gone)."""
    total, found = 0.0, False
    todo, seen = [pid], set()
    while todo:
        current = todo.pop()
        if current in seen:
            continue
        seen.add(current)
        try:
            with open(f"/proc/{current}/stat", "rb") as file:
                data = file.read()
            fields = data[data.rindex(b")") + 2 :].split()
            total += sum(int(x) for x in fields[11:15]) / _TICKS  # utime stime cutime cstime
            found = True
            for task in os.listdir(f"/proc/{current}/task"):
                with open(f"/proc/{current}/task/{task}/children", "rb") as file:
                    todo += [int(child) for child in file.read().split()]
        except (OSError, ValueError):
            continue
    return total if found else None


class _Clock:
    """The kernel's CPU time, and a watchdog thread that kills the kernel when a CPU budget is spent.

    Where /proc cannot tell a process's CPU time, wall-clock time stands in for it.
    """

    POLL = 0.25

    def __init__(self) -> None:
        self.pid: int | None = None
        self.proc = False
        self.last = 0.0
        self.kill_at = float("inf")
        self.fired = False
        self._done = threading.Event()
        self._thread = threading.Thread(target=self._watch, daemon=True)
        self._thread.start()

    def attach(self, pid: int | None) -> None:
        self.pid = pid
        self.proc = pid is not None and process_cpu(pid) is not None

    def cpu(self) -> float:
        """The kernel's CPU seconds so far (the last reading once it is gone)."""
        if not self.proc or self.pid is None:
            return time.monotonic()
        now = process_cpu(self.pid)
        if now is not None:
            self.last = max(self.last, now)
        return self.last

    def arm(self, kill_at: float) -> None:
        self.kill_at = kill_at

    def disarm(self) -> None:
        self.kill_at = float("inf")

    def close(self) -> None:
        self._done.set()
        self._thread.join()

    def _watch(self) -> None:
        while not self._done.wait(self.POLL):
            if self.pid is None:
                continue
            cpu = self.cpu()
            if cpu >= self.kill_at:
                self.fired = True
                self.kill_at = float("inf")
                _kill_group(self.pid)


def _exercise_results(
    stem: str,
    notebook: nbformat.NotebookNode,
    errors: dict[int, tuple[str, str]],
    graded: dict[str, Any],
    stopped: str = "",
) -> tuple[ExerciseResult, ...]:
    """One result per exercise; with `stopped` (why the notebook stopped), those never checked are
    marked not reached."""
    results = []
    for name in EXERCISES[stem]:
        cells = defining_cells(notebook, name)
        raised = [(i, errors[i]) for i in cells if i in errors]
        payload = graded.get(name)
        if isinstance(payload, str):  # why the grader could not check it
            results.append(ExerciseResult.failed(name, payload))
        elif isinstance(payload, dict) and payload.get("stopped"):  # its check was running when it stopped
            results.append(ExerciseResult.stopped_in_check(name, str(payload.get("message", ""))))
        elif payload is None and stopped and cells:
            results.append(ExerciseResult.not_reached(name, f"not reached: {stopped}"))
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
            upstream = str(payload.get("upstream") or "")
            results.append(ExerciseResult.success(name, str(payload.get("message", "passed")), upstream))
        else:
            message, finding = str(payload.get("message", "failed")), payload.get("finding")
            slips = payload.get("slips") if isinstance(payload.get("slips"), list) else []
            idea = (finding if isinstance(finding, str) else "", tuple(str(s) for s in slips))
            results.append(ExerciseResult.failed(name, message, *idea))
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
        status, problem, errors, graded, cpu = _execute(stem, notebook, work, limits)
    if limits.keep and status != "grader_error":
        _keep(notebook, Path(limits.keep) / learner.name / f"{stem}.ipynb")
    if status == "grader_error":
        exercises = _zeros(stem, f"not graded: {problem}")
    else:
        exercises = _exercise_results(stem, notebook, errors, graded, problem if status != "graded" else "")
    return NotebookResult(stem, status, problem, exercises, time.perf_counter() - start, cpu)


def _keep(notebook: nbformat.NotebookNode, path: Path) -> None:
    """Write the executed notebook to `path` for the instructor; a failure to write costs no grade."""
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        nbformat.write(notebook, path)
    except (OSError, ValueError):
        pass


def _execute(
    stem: str, notebook: nbformat.NotebookNode, work: Path, limits: Limits
) -> tuple[str, str, dict[int, tuple[str, str]], dict[str, Any], float]:
    """Run the learner's cells, each exercise's check after its last defining cell, then a final pass
    over every exercise; (status, problem, cell errors, per-exercise payloads, CPU seconds of the cells)."""
    client = _CappedClient(
        notebook,
        timeout=int(limits.wall_limit),
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
    run = _Run(stem, notebook, work, limits, client)
    pgid = kernel = None
    learner_cells = len(notebook.cells)
    try:
        with client.setup_kernel(
            env=kernel_env(limits, work.parents[1]), stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
        ):
            pgid = getattr(client.km.provisioner, "pgid", None)
            kernel = _forked_pid(client.km.connection_file) if limits.zygote else pgid
            run.clock.attach(kernel)
            last: dict[int, list[str]] = {}  # cell index -> the exercises it is the last definition of
            for name in EXERCISES[stem]:
                cells = defining_cells(notebook, name)
                if cells:
                    last.setdefault(cells[-1], []).append(name)
            skip = skippable(notebook, EXERCISES[stem], stem)  # demonstrations nothing graded needs
            for index, cell in list(enumerate(notebook.cells))[:learner_cells]:
                if index in skip:
                    cell.outputs = [nbformat.v4.new_output("stream", name="stdout", text=SKIPPED)]
                elif cell.cell_type == "code" and _CHECK_CELL.match(cell.source):
                    cell.outputs = [nbformat.v4.new_output("stream", name="stdout", text=CHECKED)]
                elif cell.cell_type == "code" and cell.source.strip():
                    run.learner_cell(cell, index)
                if index in last:
                    run.check(last[index])
            run.check(list(EXERCISES[stem]))  # the final pass: rebound names only
    except _Stop as stop:
        return stop.status, stop.problem, run.errors, run.graded, run.cpu_seconds
    except RuntimeError as error:  # the kernel did not start: the grader's failure, not the learner's
        problem = f"the grader could not run this notebook ({error})"
        return "grader_error", problem, run.errors, run.graded, run.cpu_seconds
    finally:
        run.clock.close()
        _kill_group(pgid)
        _kill_group(kernel)
        del notebook.cells[learner_cells:]
    return "graded", "", run.errors, run.graded, run.cpu_seconds


class _Run:
    """One notebook's run in its kernel: the learner's cells and the grader's, each kind within its
    own CPU and wall-clock budget."""

    def __init__(
        self, stem: str, notebook: nbformat.NotebookNode, work: Path, limits: Limits, client: NotebookClient
    ) -> None:
        self.stem, self.notebook, self.work, self.limits, self.client = stem, notebook, work, limits, client
        self.clock = _Clock()
        self.errors: dict[int, tuple[str, str]] = {}
        self.graded: dict[str, Any] = {}
        self.cpu = {"learner": 0.0, "grader": 0.0}
        self.wall = {"learner": 0.0, "grader": 0.0}
        self.ready: bool | None = None  # None: the grader's modules not imported in the kernel yet

    @property
    def cpu_seconds(self) -> float:
        """CPU seconds the kernel spent in cells (0 where /proc cannot tell)."""
        return round(self.cpu["learner"] + self.cpu["grader"], 2) if self.clock.proc else 0.0

    def _execute(self, cell: nbformat.NotebookNode, index: int, kind: str, where: str) -> None:
        """Run one cell within its kind's budgets; a timeout or a dead kernel stops the notebook."""
        limits = self.limits
        what = "the notebook" if kind == "learner" else "the grader's checks"
        at = f", in {where}" if kind == "learner" else ""
        cpu_left = limits.cpu_limit - self.cpu[kind]
        wall_left = limits.wall_limit - self.wall[kind]
        if cpu_left <= 0 or wall_left <= 0:
            raise _Stop("timeout", f"{what} timed out after {limits.cpu_text}{at}")
        cpu_before, wall_before = self.clock.cpu(), time.monotonic()
        self.client.timeout = max(1, int(wall_left + 0.999))
        self.clock.arm(cpu_before + cpu_left)
        try:
            self.client.execute_cell(cell, index)
        except CellTimeoutError:
            cpu = self.cpu[kind] + self.clock.cpu() - cpu_before
            wall = f"{what} timed out after {limits.wall_limit:g} s of wall-clock time{at}"
            if self.clock.proc and cpu < BUSY_SHARE * limits.wall_limit:
                wall = (
                    f"{wall}, having had only {cpu:.0f} s of its {limits.cpu_text}: the "
                    "machine was too busy (grade with fewer --jobs or on a quieter machine), or the cell "
                    "waited without computing (input(), sleep)"
                )
            raise _Stop("timeout", wall) from None
        except DeadKernelError:
            if self.clock.fired:
                raise _Stop("timeout", f"{what} timed out after {limits.cpu_text}{at}") from None
            raise _Stop(
                "crashed",
                f"the kernel died while running {where} (a crash, an exit, or memory beyond "
                f"the limit of {limits.memory_text})",
            ) from None
        finally:
            self.clock.disarm()
            self.cpu[kind] += self.clock.cpu() - cpu_before
            self.wall[kind] += time.monotonic() - wall_before

    def learner_cell(self, cell: nbformat.NotebookNode, index: int) -> None:
        where = _describe_cell(index, self.notebook)
        self._execute(cell, index, "learner", where)
        error = _error(cell)
        if error:
            self.errors[index] = error
            if _out_of_memory(error):
                limit = self.limits.memory_text
                raise _Stop("out_of_memory", f"the notebook ran out of memory (limit {limit}) in {where}")

    def _setup_source(self, nonce: str) -> str:
        """Take the learner's `attn_course` modules out, import the grader's afresh (or take those a
        kernel factory imported before any learner code ran), put theirs back."""
        work = str(self.work)
        return (
            "import sys as _attn_sys, importlib as _attn_importlib\n"
            "_attn_path = list(_attn_sys.path)\n"
            f"_attn_sys.path[:] = [{PACKAGE_PARENT!r}] + [p for p in _attn_path\n"
            f"                     if p not in ('', '.', {work!r})]\n"
            "_attn_learner = {n: m for n, m in _attn_sys.modules.items()\n"
            "                 if n.split('.')[0] == 'attn_course'}\n"
            "for _attn_name in _attn_learner:\n"
            "    del _attn_sys.modules[_attn_name]\n"
            f"_attn_warm = _attn_sys.modules.pop({STASH!r}, None)  # imported by a kernel factory\n"
            "if _attn_warm is not None:\n"
            "    _attn_sys.modules.update(_attn_warm.modules)\n"
            "_attn_importlib.invalidate_caches()\n"
            "from attn_course.grading import kernel_checks as _attn_grader\n"
            f"_attn_grader.setup({PACKAGE_PARENT!r}, {nonce!r}, _attn_learner, _attn_path)\n"
            "del _attn_learner, _attn_path, _attn_warm\n"
        )

    def check(self, names: list[str]) -> None:
        """Check `names` now, in a grader's cell; each result is kept as soon as it is printed.

        An exercise checked before is checked again only if its name no longer holds the object checked.
        """
        if self.ready is False:
            return
        nonce = secrets.token_hex(16)
        same = {n: p["id"] for n in names if isinstance(p := self.graded.get(n), dict) and "id" in p}
        source = self._setup_source(nonce) if self.ready is None else ""
        cpu = self.limits.check_cpu
        source += f"_attn_grader.grade_exercises({names!r}, globals(), {nonce!r}, {same!r}, {cpu!r})\n"
        cell = nbformat.v4.new_code_cell(source)
        index = len(self.notebook.cells)
        self.notebook.cells.append(cell)  # nbclient stores each executed cell back into the notebook
        try:
            self._execute(cell, index, "grader", "the grader's checks")
        except _Stop as stop:
            self._collect(cell, names, nonce, fill=False)
            running = next((n for n in names if n not in self.graded), None)
            if running is not None:
                why = f"{stop.problem} (while the grader's check called your `{running}`)"
                self.graded[running] = {"exercise": running, "stopped": True, "message": why}
            raise
        self._collect(cell, names, nonce)

    def _collect(self, cell: nbformat.NotebookNode, names: list[str], nonce: str, fill: bool = True) -> None:
        payloads = _payloads(cell, nonce)
        if self.ready is None:
            ready = [p for p in payloads if "ok" in p]
            error = _error(cell)
            if not ready and not fill:
                return  # stopped before the grader's modules answered
            if not ready or not ready[-1].get("ok"):
                why = ready[-1].get("problem") if ready else "no answer from the grader's code in the kernel"
                if error and not ready:
                    why = f"{error[0]}: {error[1]}"
                for name in EXERCISES[self.stem]:
                    self.graded[name] = f"the grader could not check this notebook: {why}."
                self.ready = False
                return
            self.ready = True
        error = _error(cell)
        for name in names:
            found = [p for p in payloads if p.get("exercise") == name]
            if not found:
                if fill and name not in self.graded:
                    detail = f": {error[0]}: {error[1]}" if error else ""
                    self.graded[name] = f"the grader could not check it{detail}"
                continue
            payload = found[-1]
            if payload.get("same"):
                continue
            if "refused" in payload:
                self.graded[name] = f"the grader could not check this notebook: {payload['refused']}."
            else:
                self.graded[name] = payload
