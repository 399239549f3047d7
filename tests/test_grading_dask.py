"""`attn-course grade --scheduler`: a real `distributed.LocalCluster` of two worker processes.

Two learners of notebook 02 (one reading an exercise from a file of her folder, which must travel
to the worker, and leaving the other unfinished) are graded locally and on the cluster; the
outputs must be the same bytes.
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import tarfile
import time
from io import BytesIO
from pathlib import Path

import nbformat
import pytest

from attn_course.cli import main
from attn_course.grading.dask_runner import pack_folder, result_from_bytes, result_to_bytes
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


def _files(folder: Path) -> dict[str, bytes]:
    return {str(p.relative_to(folder)): p.read_bytes() for p in sorted(folder.rglob("*")) if p.is_file()}


@pytest.fixture(scope="module")
def both(tmp_path_factory):
    root = tmp_path_factory.mktemp("dask")
    subs = _class(root)
    before = _files(subs)
    local = grade(subs, root / "local", jobs=2, timeout=60, memory_gib=2)
    with distributed.LocalCluster(
        n_workers=2, threads_per_worker=1, processes=True, dashboard_address=None
    ) as cluster:
        remote = grade(subs, root / "cluster", timeout=60, memory_gib=2, scheduler=cluster.scheduler_address)
    if landlock_abi() > 0:
        assert _files(subs) == before
    return root, local, remote


def test_the_cluster_writes_the_same_gradebook_and_feedback_bytes_as_a_local_run(both):
    root, local, remote = both
    assert _files(root / "cluster") == _files(root / "local")
    assert not remote.failures
    assert {lr.learner: lr.total for lr in remote.learners} == {"alice": 2, "carol": 1}


def test_a_learners_own_files_travel_to_the_worker(both):
    _, _, remote = both
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


def test_an_unreachable_scheduler_is_named_and_exits_non_zero(tmp_path, capsys):
    import dask

    with socket.socket() as probe:  # a port nothing listens on
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    (tmp_path / "subs" / "alice").mkdir(parents=True)
    notebook = (ROOT / "notebooks" / f"{STEM}.ipynb").read_bytes()
    (tmp_path / "subs" / "alice" / f"{STEM}.ipynb").write_bytes(notebook)
    address = f"tcp://127.0.0.1:{port}"
    with dask.config.set({"distributed.comm.timeouts.connect": "2s"}):
        code = main(["grade", str(tmp_path / "subs"), "--out", str(tmp_path / "out"), "--scheduler", address])
    assert code == 2
    assert f"cannot reach the Dask scheduler at {address}" in capsys.readouterr().err


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
