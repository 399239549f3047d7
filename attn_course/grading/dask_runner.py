"""Grade notebooks on a Dask cluster: each notebook a task, sent and returned as bytes.

`attn-course grade SUBMISSIONS --out DIR --scheduler ADDRESS` calls `grade_on_cluster`. Each
learner's folder travels to the workers as one tar archive (scattered once per learner), each
notebook as its bytes as read at discovery, and each result comes back as JSON bytes, so workers
need no shared file system. On the worker the notebook is graded exactly as locally (`execute`):
in a temporary copy of the folder, in a fresh kernel with the time and memory limits and the
file-system sandbox, which hides the unpacked folder and the worker's own directory. Each worker
process keeps one kernel factory (`kernel_factory`) for all its tasks. Workers need the same version of
attn-course as the client; a worker with another version grades nothing and says so.

Needs Dask's `distributed` (`pip install "attn-course[grading]"`).
"""

from __future__ import annotations

import atexit
import io
import json
import os
import tarfile
import tempfile
import threading
from collections import defaultdict
from dataclasses import asdict, replace
from pathlib import Path
from typing import TYPE_CHECKING, TypedDict

from attn_course import __version__
from attn_course.grading.discover import Learner, Submission, SubmissionsError
from attn_course.grading.execute import Limits
from attn_course.grading.report import ProgressBar
from attn_course.grading.results import ExerciseResult, NotebookResult
from attn_course.reference import EXERCISES

if TYPE_CHECKING:
    from distributed import Client, Future

    from attn_course.grading.grader import Zygote

_ZYGOTES: dict[str, Zygote] = {}
_ZYGOTE_LOCK = threading.Lock()


class SentLimits(TypedDict):
    """The grader's limits as sent to the workers with each task (timeout in seconds, memory in bytes)."""

    timeout: float
    memory: int
    hidden: list[str]


class SchedulerError(SubmissionsError):
    """The Dask scheduler cannot be reached or has no workers; the message names its address."""


def pack_folder(folder: Path) -> bytes:
    """The regular files under `folder` (symbolic links left out, as `execute` leaves them) as a tar."""
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w") as archive:
        for path in sorted(folder.rglob("*")):
            if path.is_symlink() or any(p.is_symlink() for p in path.parents if folder in p.parents):
                continue
            if path.is_file():
                info = tarfile.TarInfo(path.relative_to(folder).as_posix())
                data = path.read_bytes()
                info.size, info.mode = len(data), 0o644
                archive.addfile(info, io.BytesIO(data))
    return buffer.getvalue()


def _unpack(data: bytes, folder: Path) -> None:
    folder.mkdir(parents=True)
    with tarfile.open(fileobj=io.BytesIO(data), mode="r") as archive:
        for member in archive.getmembers():
            target = (folder / member.name).resolve()
            if not member.isfile() or folder.resolve() not in target.parents:
                continue  # only plain files inside the folder
            target.parent.mkdir(parents=True, exist_ok=True)
            source = archive.extractfile(member)
            if source is not None:
                target.write_bytes(source.read())


def result_to_bytes(result: NotebookResult) -> bytes:
    """A notebook's result as JSON bytes (what a worker sends back)."""
    return json.dumps(asdict(result)).encode("utf-8")


def result_from_bytes(data: bytes) -> NotebookResult:
    """The notebook result sent by `result_to_bytes`."""
    raw = json.loads(data.decode("utf-8"))
    exercises = tuple(ExerciseResult(**e) for e in raw.pop("exercises"))
    return NotebookResult(**raw, exercises=exercises)


def _failed(stem: str, status: str, problem: str) -> NotebookResult:
    zeros = tuple(ExerciseResult.failed(n, f"not graded: {problem}") for n in EXERCISES[stem])
    return NotebookResult(stem, status, problem, zeros)


def _worker_zygote(limits: Limits) -> str | None:
    """The socket of this worker process's kernel factory for `limits.threads`, started on first use."""
    from attn_course.grading.grader import _start_zygote

    key = str(limits.threads)
    with _ZYGOTE_LOCK:
        if key not in _ZYGOTES:
            zygote = _start_zygote(limits)
            if zygote is None:
                return None
            _ZYGOTES[key] = zygote
            atexit.register(zygote.close)
        return _ZYGOTES[key].socket


def grade_packed(
    folder: bytes,
    learner: str,
    notebook: dict[str, str],
    data: bytes,
    limits: SentLimits,
    threads_by_host: dict[str, int],
    version: str,
) -> bytes:
    """Worker side: grade one notebook of a packed learner folder; the result as JSON bytes."""
    from distributed import get_worker
    from jupyter_core.paths import jupyter_runtime_dir

    from attn_course.grading.grader import _grade_one

    stem = notebook["stem"]
    if version != __version__:
        problem = f"the Dask worker has attn-course {__version__}, the grader {version}: install {version}"
        return result_to_bytes(_failed(stem, "grader_error", problem))
    worker = get_worker()
    sharing = threads_by_host.get(worker.address.split("://")[-1].rsplit(":", 1)[0], worker.state.nthreads)
    with tempfile.TemporaryDirectory(prefix="attn-grade-worker-") as temporary:
        where = Path(temporary, "learner")
        _unpack(folder, where)
        local = Limits(
            timeout=float(limits["timeout"]),
            memory=int(limits["memory"]),
            threads=max(1, (os.cpu_count() or 1) // max(1, sharing)),
            # the grader's own folders too, where a worker shares the grader's machine (a LocalCluster)
            hidden=(temporary, str(worker.local_directory), jupyter_runtime_dir(), *limits["hidden"]),
        )
        local = replace(local, zygote=_worker_zygote(local))
        submission = Submission(stem, where / notebook["file"], data, notebook["problem"])
        result = _grade_one(Learner(learner, where, (submission,), ()), submission, local)
    return result_to_bytes(result)


def _threads_by_host(workers: dict[str, dict]) -> dict[str, int]:
    """Threads of all workers on each host: kernels on one host share its cores."""
    found: dict[str, int] = defaultdict(int)
    for address, info in workers.items():
        found[address.split("://")[-1].rsplit(":", 1)[0]] += int(info.get("nthreads", 1))
    return dict(found)


def connect(address: str) -> Client:
    """A Dask client of the scheduler at `address`; SchedulerError naming it when it cannot be reached."""
    try:
        from distributed import Client
    except ImportError as error:
        raise SchedulerError(
            f"--scheduler needs Dask's distributed package ({error}): pip install 'attn-course[grading]'"
        ) from error
    try:
        return Client(address, set_as_default=False)
    except (OSError, TimeoutError, ValueError) as error:
        raise SchedulerError(f"cannot reach the Dask scheduler at {address}: {error}") from error


def grade_on_cluster(
    address: str, tasks: list[tuple[Learner, Submission]], limits: Limits, *, progress: bool = False
) -> dict[tuple[str, str], NotebookResult]:
    """Grade each (learner, notebook) as a task on the Dask cluster at `address`; results as `grade_tasks`."""
    from distributed import as_completed

    client = connect(address)
    try:
        workers = client.scheduler_info().get("workers", {})
        if not workers:
            raise SchedulerError(f"the Dask scheduler at {address} has no workers")
        threads = _threads_by_host(workers)
        sent: SentLimits = {"timeout": limits.timeout, "memory": limits.memory, "hidden": list(limits.hidden)}
        folders = {}
        futures: dict[Future, tuple[str, str]] = {}
        for learner, submission in tasks:
            if learner.name not in folders:
                folders[learner.name] = client.scatter(pack_folder(learner.folder), hash=False)
            notebook = {"stem": submission.stem, "file": submission.path.name, "problem": submission.problem}
            future = client.submit(
                grade_packed, folders[learner.name], learner.name, notebook, submission.data, sent,
                threads, __version__, pure=False, key=f"attn-grade-{len(futures)}-{submission.stem}",
            )  # fmt: skip
            futures[future] = (learner.name, submission.stem)
        bar = ProgressBar(len(tasks)) if progress else None
        results: dict[tuple[str, str], NotebookResult] = {}
        for future in as_completed(list(futures), loop=client.loop):
            learner_name, stem = futures[future]
            try:
                results[(learner_name, stem)] = result_from_bytes(future.result())
            except Exception as error:  # a worker died or the task was lost: the grader's failure
                problem = f"the Dask worker failed on this notebook ({type(error).__name__}: {error})"
                results[(learner_name, stem)] = _failed(stem, "grader_error", problem)
            if bar:
                bar.advance()
        return results
    finally:
        client.close()
