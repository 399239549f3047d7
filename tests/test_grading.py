"""`attn-course grade` on a class of submissions made from solutions/ and notebooks/ (notebook 02).

The class is graded once per module (and a second time through the CLI, to compare the bytes),
so the whole file costs about thirty notebook runs (frank's and leo's each spend the 6 s CPU limit).
"""

from __future__ import annotations

import csv
import hashlib
import json
import shutil
from pathlib import Path
from urllib.parse import quote

import nbformat
import pytest
from instructor_class import copy_class, keep_cells, needs_class

from attn_course.cli import build_parser, main
from attn_course.grading.discover import SubmissionsError
from attn_course.grading.grader import grade
from attn_course.grading.report import gradebook_rows
from attn_course.grading.sandbox import landlock_abi

ROOT = Path(__file__).resolve().parents[1]
STEM = "02_scaling"
TIMEOUT = 6.0
"""CPU seconds per notebook: a correct 02 needs under 1 (demonstrations and check cells left out)."""
MEMORY_GIB = 2.0
ZOE = "Zoë Ångström"
SDPA = "scaled_dot_product_attention"
COLUMNS = ["score_variance", "scaled_dot_product_attention", "causal_mask", "padding_mask", "attention"]
SANDBOXED = landlock_abi() > 0
"""Whether kernels run in the file-system sandbox here; kim_absolute is only in the class where they do."""

ALSO = "03_causal_masking: not handed in"
"""Zoë's class hands in a broken 03_causal_masking, so the gradebook has its columns for everyone."""
NOTEBOOKS = ["02_scaling points", "02_scaling status", "03_causal_masking points", "03_causal_masking status"]
NONE03 = ["", "", ""]  # 03's exercises: blank, nothing handed in
GRADED = "graded"


def _row(
    learner: str, scores02: list[str], status02: str, total: str, status03: str = "not handed in"
) -> list[str]:
    subtotal = "" if not scores02[0] else str(sum(int(x) for x in scores02))
    status = status02 if status02 == status03 else f"02_scaling: {status02}; 03_causal_masking: {status03}"
    return [learner, *scores02, *NONE03, subtotal, status02, "", status03, total, "5", status]


EXPECTED_GRADEBOOK = [
    ["learner", *COLUMNS, *NOTEBOOKS, "total", "max", "status"],
    _row(ZOE, ["1", "1"], GRADED, "2", "not a notebook"),
    _row("alice_full", ["1", "1"], GRADED, "2"),
    _row("bob_untouched", ["0", "0"], GRADED, "0"),
    _row("carol_wrong", ["0", "0"], GRADED, "0"),
    _row("dave_tampered", ["0", "0"], GRADED, "0"),
    _row("erin_reference", ["0", "0"], GRADED, "0"),
    _row("frank_loop", ["0", "0"], "timed out", "0"),  # it ran: a real 0
    _row("grace_memory", ["0", "0"], "out of memory", "0"),
    _row("heidi_malformed", ["", ""], "not a notebook", ""),  # nothing graded: blank
    _row("ivan_escape", ["0", "1"], GRADED, "1"),
    _row("judy_empty", ["", ""], "not handed in", ""),
    *([_row("kim_absolute", ["0", "1"], GRADED, "1")] if SANDBOXED else []),
    _row("leo_late_hang", ["1", "1"], GRADED, "2"),
    _row("mia_mid_crash", ["1", "0"], "partly graded (crashed)", "1"),
    _row("nina_misnamed", ["", ""], "misnamed", ""),
    _row("otto_subfolder", ["", ""], "in a subfolder", ""),
]
"""Scores blank where no work was graded (not handed in, misnamed, in a subfolder, not a notebook)."""
LEARNERS = len(EXPECTED_GRADEBOOK) - 1
MEAN = sum(int(row[-3] or 0) for row in EXPECTED_GRADEBOOK[1:]) / LEARNERS

ESCAPE = """
for target in ("../alice_full/02_scaling.ipynb", "../alice_full/planted.txt", "../../out/gradebook.csv",
               "../../out/feedback/alice_full.md", "../../submissions/alice_full/02_scaling.ipynb"):
    try:
        with open(target, "w") as file:
            file.write("overwritten by ivan")
    except OSError:
        pass
"""
ABSOLUTE = """
import json

try:  # copy a classmate's answer, found by absolute path
    with open("{subs}/alice_full/02_scaling.ipynb", encoding="utf-8") as file:
        cells = json.load(file)["cells"]
    exec(next("".join(c["source"]) for c in cells if "def score_" + "variance" in "".join(c["source"])))
except OSError:
    pass
for target in ("{subs}/alice_full/02_scaling.ipynb", "{subs}/alice_full/planted.txt",
               "{out}/gradebook.csv", "{out}/feedback/alice_full.md", "{subs}/kim_absolute/02_scaling.ipynb"):
    try:
        with open(target, "w") as file:
            file.write("overwritten by kim")
    except OSError:
        pass
"""
TAMPER = """
import attn_course.checks
import attn_course.checks.attention

class CheckFailed(Exception):
    pass

def check_score_variance(candidate):
    print("check_score_variance passed: tampered")

def check_scaled_dot_product_attention(candidate):
    print("check_scaled_dot_product_attention passed: tampered")

attn_course.checks.check_score_variance = check_score_variance
attn_course.checks.attention.check_score_variance = check_score_variance
attn_course.checks.check_scaled_dot_product_attention = check_scaled_dot_product_attention
attn_course.checks.CheckFailed = CheckFailed
"""


def _read(folder: str) -> nbformat.NotebookNode:
    return nbformat.read(ROOT / folder / f"{STEM}.ipynb", as_version=4)


def _cell(notebook: nbformat.NotebookNode, starts: str) -> int:
    return next(i for i, c in enumerate(notebook.cells) if c.source.startswith(starts))


def _check_cells(notebook: nbformat.NotebookNode) -> list[int]:
    return [i for i, c in enumerate(notebook.cells) if c.source.startswith("check_")]


def _write(folder: Path, notebook: nbformat.NotebookNode, name: str = f"{STEM}.ipynb") -> None:
    folder.mkdir(parents=True, exist_ok=True)
    nbformat.write(notebook, folder / name)


def _insert_after_setup(notebook: nbformat.NotebookNode, source: str) -> nbformat.NotebookNode:
    notebook.cells.insert(2, nbformat.v4.new_code_cell(source))
    return notebook


def build_class(root: Path) -> Path:
    """A SUBMISSIONS folder with one learner per case (see EXPECTED_GRADEBOOK)."""
    subs = root / "submissions"
    _write(subs / "alice_full", _read("solutions"))
    _write(subs / "bob_untouched", _read("notebooks"))

    carol = _read("solutions")  # score_variance: its cell raises; attention: scaled by d_k
    carol.cells[_cell(carol, "def score_variance")].source += '\n\nraise ValueError("oops, a stray test")'
    sdpa = carol.cells[_cell(carol, "def scaled_dot_product_attention")]
    sdpa.source = sdpa.source.replace("/ math.sqrt(d_k)", "/ d_k")
    _write(subs / "carol_wrong", carol)

    dave = _read("notebooks")  # check cells deleted, replaced, tagged; checks redefined and patched
    first, second = _check_cells(dave)
    dave.cells[first].source = "pass"
    dave.cells[first].metadata["tags"] = ["raises-exception", "NBVAL_SKIP"]
    dave.cells[second].source = TAMPER + "\ncheck_scaled_dot_product_attention(scaled_dot_product_attention)"
    dave.cells[second].metadata["tags"] = ["NBVAL_SKIP", "skip-execution"]
    _write(subs / "dave_tampered", dave)

    erin = _read("solutions")  # the reference itself, and a function that merely calls it
    erin.cells[_cell(erin, "def score_variance")].source = "from attn_course.reference import score_variance"
    erin.cells[_cell(erin, "def scaled_dot_product_attention")].source = (
        "import attn_course.reference\n\n"
        "def scaled_dot_product_attention(q, k, v):\n"
        "    return attn_course.reference.scaled_dot_product_attention(q, k, v)"
    )
    _write(subs / "erin_reference", erin)

    _write(subs / "frank_loop", _insert_after_setup(_read("solutions"), "while True:\n    pass"))
    hungry = "hoard = []\nwhile True:\n    hoard.append(bytearray(10**8))"
    _write(subs / "grace_memory", _insert_after_setup(_read("solutions"), hungry))
    (subs / "heidi_malformed").mkdir()
    (subs / "heidi_malformed" / f"{STEM}.ipynb").write_text('{"cells": [ this is not json', encoding="utf-8")

    ivan = _insert_after_setup(_read("solutions"), ESCAPE)  # writes outside; deletes one exercise
    del ivan.cells[_cell(ivan, "def score_variance")]
    _write(subs / "ivan_escape", ivan)
    (subs / "judy_empty").mkdir()
    if SANDBOXED:
        kim = _read("solutions")  # absolute paths: copies alice's answer, writes over others' files
        code = ABSOLUTE.format(subs=subs.resolve(), out=(root / "out").resolve())
        kim.cells[_cell(kim, "def score_variance")].source = code
        _write(subs / "kim_absolute", kim)

    leo = _read("solutions")  # every check passed, then the last cell hangs
    leo.cells.append(nbformat.v4.new_code_cell("while True:\n    pass"))
    _write(subs / "leo_late_hang", leo)
    mia = _read("solutions")  # the kernel dies between the two exercises
    mia.cells.insert(_check_cells(mia)[0] + 1, nbformat.v4.new_code_cell("import os\n\nos._exit(1)"))
    _write(subs / "mia_mid_crash", mia)
    _write(subs / "nina_misnamed", _read("solutions"), name=f"Copy of {STEM} (1).ipynb")
    _write(subs / "otto_subfolder" / "homework", _read("solutions"))

    _write(subs / ZOE, _read("solutions"))
    _write(subs / ZOE, _read("notebooks"), name="notes ü.ipynb")
    (subs / ZOE / "03_causal_masking.ipynb").write_bytes(b'{"cells": [], "x": "\xff\xfe caf\xe9"}')
    (subs / "README.txt").write_text("not a learner", encoding="utf-8")
    return subs


def snapshot(folder: Path) -> dict[str, tuple[str, int]]:
    """Hash and mtime of every file under `folder`, by relative path."""
    return {
        str(p.relative_to(folder)): (hashlib.sha256(p.read_bytes()).hexdigest(), p.stat().st_mtime_ns)
        for p in sorted(folder.rglob("*"))
        if p.is_file()
    }


@pytest.fixture(scope="module")
def graded(tmp_path_factory):
    root = tmp_path_factory.mktemp("grading")
    subs = build_class(root)
    before = snapshot(subs)
    report = grade(subs, root / "out", jobs=2, timeout=TIMEOUT, memory_gib=MEMORY_GIB)
    return root, subs, before, report


def feedback(graded, learner: str) -> str:
    root = graded[0]
    return (root / "out" / "feedback" / f"{learner}.md").read_text(encoding="utf-8")


def test_gradebook_is_exact(graded):
    root, _, _, report = graded
    with (root / "out" / "gradebook.csv").open(encoding="utf-8", newline="") as file:
        assert list(csv.reader(file)) == EXPECTED_GRADEBOOK
    assert gradebook_rows(report) == EXPECTED_GRADEBOOK
    assert not report.failures


def test_full_solution_passes_with_the_checks_pass_lines(graded):
    text = feedback(graded, "alice_full")
    assert "Score: 2 / 5" in text
    assert "- `score_variance` passed: Var(q·k) ≈ d_k unscaled and ≈ 1 scaled" in text  # the check's detail
    assert "- `scaled_dot_product_attention` passed" in text
    assert "03_causal_masking.ipynb was not handed in" in text


def test_untouched_and_tampered_notebooks_get_the_checks_own_messages(graded):
    for learner in ("bob_untouched", "dave_tampered"):
        text = feedback(graded, learner)
        assert "- `score_variance` **not passed**: `score_variance` is not implemented yet" in text, learner
        assert "- `scaled_dot_product_attention` **not passed**: `scaled_dot_product_attention` is" in text


def test_wrong_exercise_gets_the_mistake_and_a_raising_cell_its_error(graded):
    text = feedback(graded, "carol_wrong")
    assert "are divided by d_k instead of √d_k" in text
    where = "the cell under *Exercise 1: score_variance*"
    raised = f"the cell that defines `score_variance` ({where}) raised ValueError: oops, a stray test"
    assert raised in text


def test_the_reference_and_calls_to_it_score_zero(graded):
    text = feedback(graded, "erin_reference")
    assert "`score_variance` is the course's reference implementation" in text
    assert "`scaled_dot_product_attention` calls the course's reference implementation" in text


def test_infinite_loop_and_unbounded_memory_are_stopped_and_recorded(graded):
    where = "the second code cell of the notebook, above its first heading"  # no heading above it
    frank = feedback(graded, "frank_loop")
    assert f"the notebook timed out after {TIMEOUT:g} s of CPU time, in {where}" in frank
    assert "Status: timed out." in frank and "- `score_variance` **not graded**: 0 points" in frank
    assert f"ran out of memory (limit {MEMORY_GIB:g} GiB) in {where}" in feedback(graded, "grace_memory")
    statuses = {r.learner: r.notebooks[0].status for r in graded[3].learners}
    assert statuses["frank_loop"] == "timeout" and statuses["grace_memory"] == "out_of_memory"


def test_checks_passed_before_a_hang_or_a_crash_keep_their_points(graded):
    leo = feedback(graded, "leo_late_hang")  # the checks all ran before the last cell hung
    assert "Score: 2 / 5" in leo and "Status: graded." in leo
    assert (
        f"**Stopped**: the notebook timed out after {TIMEOUT:g} s of CPU time, in the cell under *Summary*"
        in leo
    )
    mia = feedback(graded, "mia_mid_crash")
    assert "Status: partly graded (crashed)." in mia
    assert "the kernel died while running the third code cell under *Exercise 1: score_variance*" in mia
    assert "- `score_variance` passed" in mia
    assert "- `scaled_dot_product_attention` **not reached**: 0 points" in mia
    assert "code cell 1" not in mia and "os._exit" not in mia


def test_misnamed_notebooks_and_notebooks_in_subfolders_are_found_and_named(graded):
    nina = feedback(graded, "nina_misnamed")
    assert (
        f"`Copy of {STEM} (1).ipynb` looks like it but is misnamed" in nina
        and f"rename it {STEM}.ipynb" in nina
    )
    otto = feedback(graded, "otto_subfolder")
    assert f"it is in a subfolder, as `homework/{STEM}.ipynb`" in otto and "Status: in a subfolder." in otto


def test_a_deleted_exercise_is_never_defined_and_the_rest_still_graded(graded):
    text = feedback(graded, "ivan_escape")
    assert "`score_variance` was never defined: no cell defines it" in text
    assert "- `scaled_dot_product_attention` passed" in text


def test_bad_files_names_and_folders_are_reported_not_fatal(graded):
    assert "not valid JSON" in feedback(graded, "heidi_malformed")
    assert "the folder is empty" in feedback(graded, "judy_empty")
    zoe = feedback(graded, ZOE)
    assert "Score: 2 / 5" in zoe
    assert "not UTF-8" in zoe
    assert "`notes ü.ipynb` is not a course notebook name" in zoe
    assert any("README.txt" in p for p in graded[3].problems)


def test_feedback_never_shows_the_learners_code(graded):
    assert "hoard" not in feedback(graded, "grace_memory")
    assert "while True" not in feedback(graded, "frank_loop")
    assert "overwritten by ivan" not in feedback(graded, "ivan_escape")


def test_submissions_are_untouched_and_escapes_change_nothing(graded):
    root, subs, before, _ = graded
    assert snapshot(subs) == before
    assert not (subs / "alice_full" / "planted.txt").exists()
    assert "overwritten" not in feedback(graded, "alice_full")
    assert sorted(p.name for p in (root / "out" / "feedback").iterdir()) == sorted(
        f"{row[0]}.{kind}" for row in EXPECTED_GRADEBOOK[1:] for kind in ("md", "html")
    )


AGAIN = (ZOE, "alice_full", "carol_wrong", "dave_tampered", "heidi_malformed", "judy_empty")
"""The learners the CLI grades a second time: one of each status that needs no time limit to pass
(the hanging and hungry learners are graded once, by the fixture), Zoë's broken second notebook
keeping the gradebook's columns."""


def test_cli_grades_again_to_the_same_bytes_and_exits_zero(graded, capsys):
    root, subs, before, _ = graded
    again_subs = root / "again_submissions"
    for learner in AGAIN:
        shutil.copytree(subs / learner, again_subs / learner, copy_function=shutil.copy2)
    again = root / "again"
    args = ["grade", str(again_subs), "--out", str(again), "--jobs", "2", "--timeout", str(TIMEOUT)]
    assert main([*args, "--memory", str(MEMORY_GIB)]) == 0
    first = (root / "out" / "gradebook.csv").read_text(encoding="utf-8").splitlines(keepends=True)
    kept = [line for line in first[1:] if line.split(",", 1)[0].strip('"') in AGAIN]
    assert len(kept) == len(AGAIN)
    regraded = (again / "gradebook.csv").read_text(encoding="utf-8").splitlines(keepends=True)
    assert regraded == [first[0], *kept]
    for learner in ("alice_full", "carol_wrong", ZOE):
        assert (again / "feedback" / f"{learner}.md").read_bytes() == (
            root / "out" / "feedback" / f"{learner}.md"
        ).read_bytes()
    mean = sum(int(row[-3] or 0) for row in EXPECTED_GRADEBOOK[1:] if row[0] in AGAIN) / len(AGAIN)
    printed = capsys.readouterr()
    assert f"Graded {len(AGAIN)} learner(s)" in printed.out and f"Mean score: {mean:.2f} / 5" in printed.out
    assert "scaled_dot_product_attention" in printed.out.split("failed by")[1]
    assert "notebooks" in printed.err  # the progress bar
    assert snapshot(subs) == before


def test_cli_parses_the_grade_command():
    args = build_parser().parse_args(["grade", "subs", "--out", "o", "--jobs", "3", "--timeout", "9"])
    assert (args.submissions, args.out, args.jobs, args.timeout, args.memory) == (
        Path("subs"), Path("o"), 3, 9.0, 4.0
    )  # fmt: skip
    with pytest.raises(SystemExit):
        build_parser().parse_args(["grade", "subs"])  # --out is required
    with pytest.raises(SystemExit):
        build_parser().parse_args(["grade", "subs", "--out", "o", "--jobs", "0"])


def test_cli_exits_non_zero_when_it_cannot_grade(tmp_path, capsys):
    assert main(["grade", str(tmp_path / "missing"), "--out", str(tmp_path / "out")]) == 2
    assert "does not exist" in capsys.readouterr().err
    (tmp_path / "subs").mkdir()
    assert main(["grade", str(tmp_path / "subs"), "--out", str(tmp_path / "subs" / "out")]) == 2
    assert "inside" in capsys.readouterr().err
    with pytest.raises(SubmissionsError):
        grade(tmp_path / "subs" / "nothing", tmp_path / "out")
    assert not (tmp_path / "out").exists()


def test_an_empty_submissions_folder_gives_an_empty_gradebook(tmp_path):
    (tmp_path / "subs").mkdir()
    report = grade(tmp_path / "subs", tmp_path / "out")
    assert (tmp_path / "out" / "gradebook.csv").read_text(encoding="utf-8") == "learner,total,max,status\n"
    assert report.learners == ()
    shutil.rmtree(tmp_path / "out")


def test_without_the_kernel_factory_each_kernel_starts_fresh_under_the_memory_limit(tmp_path):
    _write(tmp_path / "subs" / "alice_full", _read("solutions"))
    report = grade(tmp_path / "subs", tmp_path / "out", jobs=1, timeout=60, memory_gib=MEMORY_GIB, fork=False)
    assert gradebook_rows(report)[1] == ["alice_full", "1", "1", "2", "graded", "2", "2", "graded"]
    assert report.learners[0].notebooks[0].cpu > 0  # the kernel's CPU time, read from /proc


@pytest.mark.skipif(not SANDBOXED, reason="no Landlock here: kernels run without the file-system sandbox")
def test_absolute_paths_reach_neither_classmates_nor_grades(graded):
    root, subs, before, report = graded
    assert report.sandboxed
    assert "`score_variance` was never defined" in feedback(graded, "kim_absolute")  # alice's was unreadable
    assert "overwritten" not in (root / "out" / "gradebook.csv").read_text(encoding="utf-8")
    assert snapshot(subs) == before


def test_the_class_report_counts_the_class_and_names_its_mistakes(graded):
    root = graded[0]
    data = json.loads((root / "out" / "report.json").read_text(encoding="utf-8"))
    by_name = {e["exercise"]: e for e in data["exercises"]}
    sdpa = by_name["scaled_dot_product_attention"]
    assert (sdpa["passed"], sdpa["handed_in"]) == (
        sum(row[2] == "1" for row in EXPECTED_GRADEBOOK[1:]),
        sum(row[6] != "" for row in EXPECTED_GRADEBOOK[1:]),  # 02_scaling points: blank, not handed in
    )
    assert sdpa["not_attempted"] == 2  # bob, dave: paperwork, not a mistake
    (scaling,) = [n for n in data["notebooks"] if n["notebook"] == STEM]
    paperwork = (scaling["misnamed or in a subfolder"], scaling["not a notebook"], scaling["timed out"])
    assert paperwork == (2, 1, 2)  # nina, otto; heidi; frank, and leo after his checks
    made = {(m["mistake"], made["learner"]) for m in data["mistakes"] for made in m["made_by"]}
    assert any("are divided by d_k instead of √d_k" in text and who == "carol_wrong" for text, who in made)
    # the check's finding goes from the kernel to results.json, and the report groups by its idea
    kept = json.loads((root / "out" / "results.json").read_text(encoding="utf-8"))
    carol = next(r for r in kept["learners"] if r["learner"] == "carol_wrong")
    (wrong,) = [e for n in carol["notebooks"] for e in n["exercises"] if e["exercise"] == SDPA]
    assert wrong["finding"] == "known-mistake" and wrong["slips"][0].startswith("are divided by d_k")
    group = next(m for m in data["mistakes"] if any(x["learner"] == "carol_wrong" for x in m["made_by"]))
    assert group["finding"] == "known-mistake" and group["mistake"] == wrong["slips"][0]
    assert group["made_by"][0]["message"].startswith("Your weights are divided by d_k")
    assert data["nobody_passed"] == []  # 03_causal_masking: handed in by nobody, so nobody failed it
    alice = next(c for c in data["class"] if c["learner"] == "alice_full")["notebooks"][0]
    assert alice["seconds"] > 0 and alice["cpu"] > 0  # each notebook's wall and CPU time
    page = (root / "out" / "report.html").read_text(encoding="utf-8")
    assert f'<a href="feedback/{quote(ZOE)}.html">{ZOE}</a>' in page and "data:image/png;base64," in page
    alice = (root / "out" / "feedback" / "alice_full.html").read_text(encoding="utf-8")
    assert "<li><code>score_variance</code> passed: Var(q·k) ≈ d_k unscaled and ≈ 1 scaled" in alice
    assert "<h1>Feedback for alice_full</h1>" in alice and "http" not in alice  # self-contained


@needs_class
def test_a_notebook_whose_last_check_hung_is_partly_graded_everywhere(tmp_path):
    """jonas's `sample_next` loops forever: his notebook is "partly graded (timed out)", never "graded",
    in gradebook.csv, report.json and his feedback. His 07 is cut to the setup and the exercises 1, 6
    and 7 (his code as he wrote it), so the run costs seconds, not the model's training."""
    subs = copy_class(tmp_path, ("jonas",))
    (subs / "jonas" / "03_causal_masking.ipynb").unlink()
    keep_cells(subs / "jonas" / "07_kv_cache.ipynb", [range(0, 9), range(50, 56)])
    out = tmp_path / "out"
    report = grade(subs, out, jobs=1, timeout=3.0, memory_gib=MEMORY_GIB, check_timeout=0)  # no own limit
    (notebook,) = report.learners[0].notebooks
    assert notebook.status == "timeout" and notebook.status_text == "partly graded (timed out)"
    row = gradebook_rows(report)[1]
    assert row[0] == "jonas" and row[-1] == "partly graded (timed out)"
    data = json.loads((tmp_path / "out" / "report.json").read_text(encoding="utf-8"))
    assert data["class"][0]["status"] == "partly graded (timed out)"
    text = (tmp_path / "out" / "feedback" / "jonas.md").read_text(encoding="utf-8")
    assert "Status: partly graded (timed out)." in text and "Status: graded." not in text
    assert "- `next_token_probs` passed" in text
    assert "- `sample_next` **stopped while checked**: 0 points: the grader's checks timed out" in text
    assert "(while the grader's check called your `sample_next`)" in text


def test_cli_takes_points_and_a_roster_and_writes_the_lms_export(tmp_path, capsys):
    """No kernel needed: one learner hands in a file that is not a notebook, one is on the roster only."""
    subs = tmp_path / "subs"
    (subs / "ann").mkdir(parents=True)
    (subs / "ann" / "03_causal_masking.ipynb").write_text("{truncated")
    (subs / "zed").mkdir()  # a folder not on the roster
    (tmp_path / "points.csv").write_text("exercise,points\nattention,2\n")
    (tmp_path / "roster.csv").write_text("Student,SIS User ID,learner\nAnn A.,s1,ann\nBea B.,s2,bea\n")
    args = ["grade", str(subs), "--out", str(tmp_path / "out"), "--points", str(tmp_path / "points.csv")]
    assert main([*args, "--roster", str(tmp_path / "roster.csv")]) == 0
    with (tmp_path / "out" / "gradebook.csv").open(encoding="utf-8", newline="") as file:
        rows = list(csv.reader(file))
    assert [row[0] for row in rows] == ["learner", "ann", "bea", "zed"]
    assert rows[0][-5:] == ["03_causal_masking points", "03_causal_masking status", "total", "max", "status"]
    assert rows[1][-5:] == ["", "not a notebook", "", "4", "not a notebook"]
    assert rows[2][-5:] == ["", "not handed in", "", "4", "not handed in"]
    with (tmp_path / "out" / "lms.csv").open(encoding="utf-8", newline="") as file:
        assert list(csv.reader(file)) == [
            ["Student", "SIS User ID", "03_causal_masking", "attn-course total"],
            ["Ann A.", "s1", "", ""],
            ["Bea B.", "s2", "", ""],
        ]  # zed: not on the roster, so no identity an LMS could match (the summary says so)
    assert "zed: a folder of SUBMISSIONS whose name is not on the roster" in capsys.readouterr().out
    (tmp_path / "points.csv").write_text("attention,lots\n")
    assert main([*args, "--roster", str(tmp_path / "roster.csv")]) == 2
    assert "line 1: 'lots' is not a number of points" in capsys.readouterr().err


@needs_class
def test_a_loop_in_one_check_costs_its_own_limit_and_the_exercises_after_it_are_graded(tmp_path):
    """jonas's `sample_next` loops forever inside its check: with a per-check CPU limit it fails
    with a message that says so, and `block_forward`, moved after it, is still graded. His 07 is cut
    to the setup and the exercises 6, 7 and then 1 (his code as he wrote it)."""
    subs = copy_class(tmp_path, ("jonas",))
    (subs / "jonas" / "03_causal_masking.ipynb").unlink()
    keep_cells(subs / "jonas" / "07_kv_cache.ipynb", [range(0, 7), range(50, 56), range(7, 9)])
    report = grade(subs, tmp_path / "out", jobs=1, timeout=60.0, memory_gib=MEMORY_GIB, check_timeout=2.0)
    (notebook,) = report.learners[0].notebooks
    assert notebook.status == "graded" and notebook.status_text == "graded"
    results = {e.exercise: e for e in notebook.exercises}
    assert results["next_token_probs"].passed and results["block_forward"].passed
    assert not results["sample_next"].passed and results["sample_next"].reached
    assert "the grader's check of `sample_next` stopped your code after" in results["sample_next"].message
    assert "s of CPU time: it did not finish" in results["sample_next"].message
    assert notebook.cpu < 40  # the loop cost its check's seconds, not the notebook's budget


@needs_class
def test_one_mistake_loses_one_point_for_dana(tmp_path):
    """dana's `attention` is right and calls her inverted `causal_mask`; her `sample_next` is right and
    calls her wrong `next_token_probs`: each earlier exercise alone loses its point, and the later
    one's feedback says what it failed through. Her 07 is cut to the setup and the exercises 1, 6 and
    7 (her code as she wrote it)."""
    subs = copy_class(tmp_path, ("dana",))
    keep_cells(subs / "dana" / "07_kv_cache.ipynb", [range(0, 9), range(50, 56)])
    report = grade(subs, tmp_path / "out", jobs=2, timeout=TIMEOUT * 4, memory_gib=MEMORY_GIB)
    results = {e.exercise: e for n in report.learners[0].notebooks for e in n.exercises}
    for right, wrong in (("attention", "causal_mask"), ("sample_next", "next_token_probs")):
        assert not results[wrong].passed and results[wrong].points == 0, results[wrong]
        assert results[right].upstream == wrong and results[right].points == 1, results[right]
        assert wrong in results[right].message
    assert results["padding_mask"].passed and results["block_forward"].passed
    text = (tmp_path / "out" / "feedback" / "dana.md").read_text(encoding="utf-8")
    assert "- `attention` right; failed through your `causal_mask`: " in text
    assert "- `sample_next` right; failed through your `next_token_probs`: " in text
    row = dict(zip(*gradebook_rows(report), strict=True))
    assert (row["attention"], row["causal_mask"], row["sample_next"], row["next_token_probs"]) == (
        "1",
        "0",
        "1",
        "0",
    )
    data = json.loads((tmp_path / "out" / "report.json").read_text(encoding="utf-8"))
    through = {e["exercise"]: e["through_earlier"] for e in data["exercises"]}
    assert through["attention"] == 1 and through["sample_next"] == 1


@needs_class
def test_accept_misnamed_and_overrides_fix_one_learner_through_the_cli(tmp_path, capsys):
    """lena's correct work is `Copy of 03_causal_masking.ipynb` and `my-work/07_kv_cache.ipynb`: with
    --accept-misnamed both are graded, saying where they were found; an override sets one exercise.
    Her 07 is cut to the setup and Exercise 1 (her code as she wrote it)."""
    subs = copy_class(tmp_path, ("lena",))
    keep_cells(subs / "lena" / "my-work" / "07_kv_cache.ipynb", [range(0, 9)])
    overrides = tmp_path / "overrides.csv"
    overrides.write_text(
        'learner,exercise,points,note\nlena,attention,0.5,"Late: half points"\nmo,attention,1,\n'
    )
    out = tmp_path / "out"
    args = ["grade", str(subs), "--out", str(out), "--timeout", "60", "--memory", str(MEMORY_GIB)]
    assert main([*args, "--accept-misnamed", "--overrides", str(overrides), "--keep-executed"]) == 0
    row = dict(
        zip(*list(csv.reader((out / "gradebook.csv").open(encoding="utf-8", newline=""))), strict=True)
    )
    found = "graded (found misnamed or in a subfolder)"
    assert (row["03_causal_masking points"], row["03_causal_masking status"]) == ("2.5", found)
    assert (row["block_forward"], row["07_kv_cache status"]) == ("1", found)
    text = (out / "feedback" / "lena.md").read_text(encoding="utf-8")
    assert "Graded from `Copy of 03_causal_masking.ipynb`, accepted by your instructor" in text
    assert "Graded from `my-work/07_kv_cache.ipynb`" in text
    assert "- `attention` 0.5 point(s), set by your instructor: Late: half points" in text
    printed = capsys.readouterr().out
    assert "overrides: mo's attention is not in this gradebook" in printed
    assert "lena: 03_causal_masking.ipynb graded from `Copy of 03_causal_masking.ipynb`" in printed
    executed = nbformat.read(out / "executed" / "lena" / "03_causal_masking.ipynb", as_version=4)
    sources = [c.source for c in executed.cells if c.cell_type == "code"]
    assert not any("_attn_grader" in s for s in sources)  # the grader's cells left out
    assert any(c.get("outputs") for c in executed.cells if c.cell_type == "code")  # with the outputs
    assert (out / "executed" / "lena" / "07_kv_cache.ipynb").is_file()


def test_cli_regrades_one_learner_into_the_existing_gradebook(tmp_path, capsys):
    """ann hands in a broken file, then the untouched student notebook; bea's misnamed work is kept
    from the first run even after her folder is gone: only ann is graded again."""
    subs = tmp_path / "subs"
    (subs / "ann").mkdir(parents=True)
    (subs / "ann" / f"{STEM}.ipynb").write_text("{truncated")
    (subs / "bea").mkdir()
    _write(subs / "bea", _read("solutions"), name=f"Copy of {STEM}.ipynb")
    out = tmp_path / "out"
    assert main(["grade", str(subs), "--out", str(out)]) == 0
    first = (out / "gradebook.csv").read_text(encoding="utf-8").splitlines()
    shutil.copy(ROOT / "notebooks" / f"{STEM}.ipynb", subs / "ann" / f"{STEM}.ipynb")
    shutil.rmtree(subs / "bea")
    args = ["grade", str(subs), "--out", str(out), "--timeout", str(TIMEOUT), "--memory", str(MEMORY_GIB)]
    assert main([*args, "--only", "ann"]) == 0
    again = (out / "gradebook.csv").read_text(encoding="utf-8").splitlines()
    assert again[0] == first[0] and again[2] == first[2]  # bea's row as before
    assert first[1].startswith("ann,,,") and again[1].startswith("ann,0,0,0,graded,")
    assert "Graded 2 learner(s)" in capsys.readouterr().out
    assert (out / "feedback" / "bea.md").is_file()
    assert main([*args, "--only", "cy"]) == 2
    assert "--only: no learner folder cy" in capsys.readouterr().err


def test_cli_adds_hand_points_of_the_written_answers(tmp_path):
    """No kernel needed: ann's notebook is not one, her written answer still earned a point by hand."""
    (tmp_path / "subs" / "ann").mkdir(parents=True)
    (tmp_path / "subs" / "ann" / "03_causal_masking.ipynb").write_text("{truncated")
    (tmp_path / "answers.csv").write_text("learner,question,answer,points\nann,03.1,sent by e-mail,1\n")
    out = tmp_path / "out"
    assert (
        main(
            [
                "grade",
                str(tmp_path / "subs"),
                "--out",
                str(out),
                "--hand-points",
                str(tmp_path / "answers.csv"),
            ]
        )
        == 0
    )
    with (out / "gradebook.csv").open(encoding="utf-8", newline="") as file:
        header, ann = list(csv.reader(file))
    assert dict(zip(header, ann, strict=True))["written 03.1"] == "1"
    assert ann[-3:] == ["1", "4", "not a notebook"]  # total, max (3 exercises and one answer), status
    assert (
        "Written answers, graded by hand: 1 point(s) (03.1: 1)." in (out / "feedback" / "ann.md").read_text()
    )
