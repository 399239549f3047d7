"""Grade notebooks on a Dask cluster: each notebook a task that carries all it needs, as bytes.

`attn-course grade SUBMISSIONS --out DIR --scheduler ADDRESS` calls `grade_on_cluster`. Each task
carries its learner's folder as a tar archive and the notebook's bytes as read at discovery, and
its result comes back as JSON bytes: no data is scattered or held on one worker, so workers need no
shared file system, and a task whose worker dies is run again on another worker (the scheduler
does this by itself; `retries` covers a task that raised). Each (learner, notebook) is one task
with its own key, so each is graded, and written to the gradebook, exactly once. On the worker the
notebook is graded exactly as locally (`tasks.grade_one`): in a temporary copy of the folder, in a
fresh kernel with the time and memory limits and the file-system sandbox, which hides the
unpacked folder and the worker's own directory. Each worker process keeps one kernel factory
(`kernel_factory`) for all its tasks; kernels die with the worker that started them (`_launch`).
Workers need the same version of attn-course as the client; a worker with another version grades
nothing and says so. An address that is malformed or where no scheduler answers is reported in
one line (`SchedulerError`) within seconds.

Needs Dask's `distributed` (`pip install "attn-course[grading]"`).
"""

from __future__ import annotations

import io
import json
import os
import socket
import sys
import tarfile
import tempfile
from collections import defaultdict
from dataclasses import asdict, replace
from pathlib import Path
from typing import TYPE_CHECKING, TypedDict

from attn_course import __version__
from attn_course.grading.discover import Learner, Submission, SubmissionsError
from attn_course.grading.execute import Limits
from attn_course.grading.report import ProgressBar
from attn_course.grading.results import ExerciseResult, NotebookResult
from attn_course.grading.tasks import Results, failed, grade_one, shared_zygote

if TYPE_CHECKING:
    from distributed import Client, Future


RETRIES = 2
"""Times a task that raised is run again (a task whose worker died is rerun by the scheduler itself)."""
CONNECT_SECONDS = 5.0
"""Seconds to wait for the scheduler's port to answer, then again for the Dask client to connect."""


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
    exercises = tuple(ExerciseResult.from_dict(e) for e in raw.pop("exercises"))
    return NotebookResult(**raw, exercises=exercises)


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

    stem = notebook["stem"]
    if version != __version__:
        problem = f"the Dask worker has attn-course {__version__}, the grader {version}: install {version}"
        return result_to_bytes(failed(stem, "grader_error", problem))
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
        zygote = shared_zygote(local)  # this worker process's, started on its first task
        local = replace(local, zygote=zygote.socket if zygote is not None else None)
        submission = Submission(stem, where / notebook["file"], data, notebook["problem"])
        result = grade_one(Learner(learner, where, (submission,), ()), submission, local)
    return result_to_bytes(result)


def _threads_by_host(workers: dict[str, dict]) -> dict[str, int]:
    """Threads of all workers on each host: kernels on one host share its cores."""
    found: dict[str, int] = defaultdict(int)
    for address, info in workers.items():
        found[address.split("://")[-1].rsplit(":", 1)[0]] += int(info.get("nthreads", 1))
    return dict(found)


def _check_address(address: str) -> None:
    """SchedulerError unless `address` is a scheduler address whose port answers within CONNECT_SECONDS."""
    from distributed.comm.addressing import get_address_host_port, parse_address

    try:
        scheme, _ = parse_address(address)
        host, port = get_address_host_port(address)
    except (ValueError, TypeError) as error:
        raise SchedulerError(
            f"{address!r} is not a Dask scheduler address ({error}): give one as tcp://HOST:PORT, "
            "for example tcp://127.0.0.1:8786"
        ) from None
    if scheme not in ("tcp", "tls"):
        return  # another transport: the client says whether it can connect
    try:
        with socket.create_connection((host, port), timeout=CONNECT_SECONDS):
            pass
    except OSError as error:
        why = "no answer" if isinstance(error, TimeoutError) else (error.strerror or str(error))
        raise SchedulerError(
            f"cannot reach the Dask scheduler at {address} ({why}): is `dask scheduler` running there?"
        ) from None


def connect(address: str) -> Client:
    """A Dask client of the scheduler at `address`; SchedulerError naming it when it cannot be reached."""
    try:
        from distributed import Client
    except ImportError as error:
        raise SchedulerError(
            f"--scheduler needs Dask's distributed package ({error}): pip install 'attn-course[grading]'"
        ) from None
    _check_address(address)
    hook = sys.unraisablehook
    sys.unraisablehook = lambda unraisable: None  # a client that failed to connect complains as it goes
    try:
        return Client(address, set_as_default=False, timeout=CONNECT_SECONDS)
    except (OSError, TimeoutError, ValueError) as error:
        raise SchedulerError(f"cannot reach the Dask scheduler at {address}: {error}") from None
    finally:
        import gc

        gc.collect()
        sys.unraisablehook = hook


def grade_on_cluster(
    address: str, tasks: list[tuple[Learner, Submission]], limits: Limits, *, progress: bool = False
) -> Results:
    """Grade each (learner, notebook) as a task on the Dask cluster at `address`; results as locally."""
    from distributed import as_completed

    client = connect(address)
    try:
        workers = client.scheduler_info().get("workers", {})
        if not workers:
            raise SchedulerError(f"the Dask scheduler at {address} has no workers")
        threads = _threads_by_host(workers)
        sent: SentLimits = {"timeout": limits.timeout, "memory": limits.memory, "hidden": list(limits.hidden)}
        folders: dict[str, bytes] = {}
        futures: dict[Future, tuple[str, str]] = {}
        for learner, submission in tasks:
            if learner.name not in folders:  # sent with each of the learner's tasks, never held by one worker
                folders[learner.name] = pack_folder(learner.folder)
            notebook = {"stem": submission.stem, "file": submission.path.name, "problem": submission.problem}
            future = client.submit(
                grade_packed, folders[learner.name], learner.name, notebook, submission.data, sent,
                threads, __version__, pure=False, retries=RETRIES,
                key=f"attn-grade-{len(futures)}-{submission.stem}",
            )  # fmt: skip
            futures[future] = (learner.name, submission.stem)
        bar = ProgressBar(len(tasks)) if progress else None
        results: Results = {}
        for future in as_completed(list(futures), loop=client.loop):
            learner_name, stem = futures[future]
            try:
                results[(learner_name, stem)] = result_from_bytes(future.result())
            except Exception as error:  # its workers kept dying, or it kept failing: the grader's failure
                problem = f"the Dask cluster could not grade this notebook ({type(error).__name__}: {error})"
                results[(learner_name, stem)] = failed(stem, "grader_error", " ".join(problem.split())[:300])
            if bar:
                bar.advance()
        return results
    finally:
        client.close()
