"""`attn-course grade --scheduler` on a real cluster: `dask scheduler` and two `dask worker` processes.

Four learners of notebook 02 (alice the solution; carol reading an exercise from a file of her
folder, which must travel with the task, and leaving the other unfinished; bob a wrong scale; dave
the notebook as released) are graded locally and on the cluster, where one worker's whole process
group is killed (SIGKILL) while it grades a notebook: its task runs again on the other worker, no
notebook is lost, the outputs are the same bytes as the local run's, and none of the killed
worker's kernels stays running.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import tarfile
import threading
import time
from io import BytesIO
from pathlib import Path

import nbformat
import pytest

from attn_course.grading.dask_runner import (
    CONNECT_SECONDS,
    SchedulerError,
    connect,
    pack_folder,
    result_from_bytes,
    result_to_bytes,
)
from attn_course.grading.grader import grade
from attn_course.grading.results import ExerciseResult, NotebookResult
from attn_course.grading.sandbox import landlock_abi

distributed = pytest.importorskip("distributed", reason="Dask is a test dependency: pip install -e '.[dev]'")

ROOT = Path(__file__).resolve().parents[1]
STEM = "02_scaling"


def _class(root: Path) -> Path:
    """alice hands in the solution; carol the student notebook with score_variance read from her file."""
    subs = root / "submissions"
    (subs / "alice").mkdir(parents=True)
    (subs / "alice" / f"{STEM}.ipynb").write_bytes((ROOT / "solutions" / f"{STEM}.ipynb").read_bytes())
    solution = nbformat.read(ROOT / "solutions" / f"{STEM}.ipynb", as_version=4)
    answer = next(c.source for c in solution.cells if c.source.startswith("def score_variance"))
    carol = nbformat.read(ROOT / "notebooks" / f"{STEM}.ipynb", as_version=4)
    cell = next(c for c in carol.cells if c.source.startswith("def score_variance"))
    cell.source = 'with open("mine.py", encoding="utf-8") as file:\n    exec(file.read())'
    planted = (subs / "carol" / "planted.txt").resolve()  # the sandbox applies on the worker too
    carol.cells.insert(
        3, nbformat.v4.new_code_cell(f"try:\n    open({str(planted)!r}, 'w')\nexcept OSError:\n    pass")
    )
    (subs / "carol").mkdir()
    (subs / "carol" / "mine.py").write_text("import torch\n\n" + answer, encoding="utf-8")
    nbformat.write(carol, subs / "carol" / f"{STEM}.ipynb")
    return subs


TIMED = {"report.json", "report.html", "results.json"}
"""The files that hold each notebook's wall and CPU time, so differ from run to run."""


def _files(folder: Path) -> dict[str, bytes]:
    """Every file the grader wrote but those holding timings (`TIMED`), by path."""
    found = sorted(p for p in folder.rglob("*") if p.is_file() and p.name not in TIMED)
    return {str(p.relative_to(folder)): p.read_bytes() for p in found}


def _more(subs: Path) -> None:
    """bob: score_variance that never scales; dave: the notebook as released."""
    bob = nbformat.read(ROOT / "solutions" / f"{STEM}.ipynb", as_version=4)
    cell = next(c for c in bob.cells if c.source.startswith("def score_variance"))
    cell.source = (
        "def score_variance(d_k, n_samples=20_000, scaled=False):\n"
        "    q, k = torch.randn(n_samples, d_k), torch.randn(n_samples, d_k)\n"
        "    return (q * k).sum(-1).var().item()"
    )
    (subs / "bob").mkdir()
    nbformat.write(bob, subs / "bob" / f"{STEM}.ipynb")
    (subs / "dave").mkdir()
    (subs / "dave" / f"{STEM}.ipynb").write_bytes((ROOT / "notebooks" / f"{STEM}.ipynb").read_bytes())


def _marked(mark: str) -> dict[int, str]:
    """Processes whose environment holds ATTN_TEST_WORKER=mark: pid -> command line."""
    found = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            if f"ATTN_TEST_WORKER={mark}".encode() not in (entry / "environ").read_bytes().split(b"\0"):
                continue
            found[int(entry.name)] = (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode()
        except OSError:  # gone, or not ours
            continue
    return found


def _stop(process: subprocess.Popen) -> None:
    try:
        os.killpg(process.pid, signal.SIGKILL)
    except ProcessLookupError:
        pass
    process.wait()


def _dask(*args: str, env: dict[str, str], log: Path) -> subprocess.Popen:
    """`dask ARGS` in a process group of its own (what a worker starts, a nanny's worker, is in it)."""
    dask = str(Path(sys.executable).with_name("dask"))
    with log.open("w") as out:
        return subprocess.Popen([dask, *args], env=env, stdout=out, stderr=subprocess.STDOUT,
                                stdin=subprocess.DEVNULL, start_new_session=True)  # fmt: skip


@pytest.fixture(scope="module")
def both(tmp_path_factory):
    root = tmp_path_factory.mktemp("dask")
    subs = _class(root)
    _more(subs)
    before = _files(subs)
    local = grade(subs, root / "local", jobs=2, timeout=60, memory_gib=2)
    file = root / "scheduler.json"
    scheduler = ["scheduler", "--host", "127.0.0.1", "--port", "0", "--no-dashboard", "--scheduler-file"]
    processes = [_dask(*scheduler, str(file), env=dict(os.environ), log=root / "scheduler.log")]
    killed: dict[str, object] = {}
    try:
        deadline = time.monotonic() + 60
        while not file.exists() and time.monotonic() < deadline:
            time.sleep(0.2)
        address = json.loads(file.read_text())["address"]
        for mark in ("a", "b"):
            processes.append(_dask(
                "worker", address, "--nthreads", "1", "--host", "127.0.0.1", "--no-dashboard",
                "--local-directory", str(root / f"worker-{mark}"),
                env={**os.environ, "ATTN_TEST_WORKER": mark}, log=root / f"worker-{mark}.log",
            ))  # fmt: skip
        with distributed.Client(address, set_as_default=False) as client:
            client.wait_for_workers(2, timeout=60)

        def kill_worker_a_mid_notebook() -> None:
            deadline = time.monotonic() + 240
            while time.monotonic() < deadline:  # a kernel of worker a runs a learner's notebook
                if any("_launch.py" in command for command in _marked("a").values()):
                    break
                time.sleep(0.1)
            else:
                return
            time.sleep(1.0)
            killed["kernels"] = _marked("a")
            os.killpg(processes[1].pid, signal.SIGKILL)
            processes[1].wait()
            gone = time.monotonic() + 15
            while _marked("a") and time.monotonic() < gone:
                time.sleep(0.2)
            killed["left"] = _marked("a")

        killer = threading.Thread(target=kill_worker_a_mid_notebook)
        killer.start()
        remote = grade(subs, root / "cluster", timeout=60, memory_gib=2, scheduler=address)
        killer.join()
    finally:
        for process in processes:
            _stop(process)
    if landlock_abi() > 0:
        assert _files(subs) == before
    return root, local, remote, killed


def test_the_cluster_writes_the_same_gradebook_and_feedback_bytes_as_a_local_run(both):
    root, local, remote, _ = both
    assert _files(root / "cluster") == _files(root / "local")
    assert {"gradebook.csv", "lms.csv", "answers.csv", "feedback/alice.md"} <= set(_files(root / "local"))
    assert not remote.failures
    assert {lr.learner: lr.total for lr in remote.learners} == {"alice": 2, "bob": 1, "carol": 1, "dave": 0}


def test_a_worker_killed_mid_notebook_loses_nothing_and_leaves_no_kernel(both):
    root, _, remote, killed = both
    assert killed.get("kernels"), "worker a was never seen grading a notebook"
    assert killed["left"] == {}, f"still running after worker a was killed: {killed['left']}"
    assert [n.status for lr in remote.learners for n in lr.notebooks] == ["graded"] * 4
    lines = (root / "cluster" / "gradebook.csv").read_text(encoding="utf-8").splitlines()
    assert sorted(line.split(",")[0] for line in lines[1:]) == ["alice", "bob", "carol", "dave"]


def test_a_learners_own_files_travel_to_the_worker(both):
    _, _, remote, _ = both
    carol = next(learner for learner in remote.learners if learner.learner == "carol")
    first, second = carol.notebooks[0].exercises
    assert first.passed, carol
    assert not second.passed and "not implemented yet" in second.message


def test_folders_and_results_travel_as_bytes(tmp_path):
    (tmp_path / "a" / "b").mkdir(parents=True)
    (tmp_path / "a" / "b" / "x.txt").write_bytes(b"\xff\x00")
    (tmp_path / "link").symlink_to(tmp_path / "a")
    with tarfile.open(fileobj=BytesIO(pack_folder(tmp_path))) as archive:
        assert archive.getnames() == ["a/b/x.txt"]
    sent = NotebookResult(STEM, "graded", "", (ExerciseResult.success("score_variance", "ok ✅"),), 1.5)
    assert result_from_bytes(result_to_bytes(sent)) == sent


@pytest.mark.parametrize(
    ("address", "says"),
    [
        ("tcp://127.0.0.1:1", "cannot reach the Dask scheduler at tcp://127.0.0.1:1"),
        ("not an address", "'not an address' is not a Dask scheduler address"),
    ],
)
def test_an_unreachable_or_malformed_scheduler_is_one_line_and_exit_2(tmp_path, address, says):
    (tmp_path / "subs" / "alice").mkdir(parents=True)
    notebook = (ROOT / "notebooks" / f"{STEM}.ipynb").read_bytes()
    (tmp_path / "subs" / "alice" / f"{STEM}.ipynb").write_bytes(notebook)
    command = [sys.executable, "-m", "attn_course.cli", "grade", str(tmp_path / "subs"),
               "--out", str(tmp_path / "out"), "--scheduler", address]  # fmt: skip
    done = subprocess.run(command, capture_output=True, text=True, timeout=120)
    assert done.returncode == 2
    assert done.stderr.splitlines() == [done.stderr.strip()] and says in done.stderr, done.stderr
    assert "Traceback" not in done.stderr + done.stdout and not (tmp_path / "out").exists()


def test_an_unreachable_scheduler_is_given_up_within_the_connect_timeout():
    """Timed in this process, not through a fresh interpreter (whose start a busy machine slows)."""
    start = time.monotonic()
    with pytest.raises(SchedulerError, match="cannot reach the Dask scheduler at tcp://127.0.0.1:1"):
        connect("tcp://127.0.0.1:1")
    assert time.monotonic() - start < 2 * CONNECT_SECONDS


def test_a_kernel_factory_outlives_no_killed_worker(tmp_path):
    """A worker killed without closing its kernel factory (zygote) leaves none running."""
    script = (
        "import time\n"
        "from attn_course.grading.execute import Limits, kernel_env\n"
        "from attn_course.grading.kernel_factory import Zygote\n"
        "print(Zygote(kernel_env(Limits())).process.pid, flush=True)\n"
        "time.sleep(120)\n"
    )
    worker = subprocess.Popen([sys.executable, "-c", script], stdout=subprocess.PIPE, text=True)
    zygote = int(worker.stdout.readline())
    os.kill(zygote, 0)  # running
    worker.kill()
    worker.wait()
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        try:
            os.kill(zygote, 0)
        except ProcessLookupError:
            return
        time.sleep(0.2)
    os.kill(zygote, signal.SIGKILL)
    pytest.fail("the kernel factory kept running after its worker was killed")


def test_a_kernel_dies_with_the_process_that_launched_it():
    """What `_launch.py` becomes (the kernel) is killed when its parent is, as a killed Dask worker is."""
    from attn_course.grading.execute import LAUNCHER

    kernel = [sys.executable, "-c", "import time; time.sleep(120)", "-f", os.devnull]
    script = (
        "import os, subprocess, sys, time\n"
        f"child = subprocess.Popen([sys.executable, {LAUNCHER!r}, '0', *{kernel!r}],\n"
        "                         env={**os.environ, 'JPY_PARENT_PID': str(os.getpid())})\n"
        "print(child.pid, flush=True)\n"
        "time.sleep(120)\n"
    )
    parent = subprocess.Popen([sys.executable, "-c", script], stdout=subprocess.PIPE, text=True)
    child = int(parent.stdout.readline())
    time.sleep(0.5)
    os.kill(child, 0)  # running
    parent.kill()
    parent.wait()
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        if not _alive(child):
            return
        time.sleep(0.1)
    os.kill(child, signal.SIGKILL)
    pytest.fail("the kernel kept running after the process that launched it was killed")


def _alive(pid: int) -> bool:
    """Whether `pid` runs (a zombie, dead but not yet reaped by whoever adopted it, does not)."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] != "Z"
    except (OSError, IndexError):
        return False
