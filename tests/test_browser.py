"""The explorers in a real browser: JupyterLab started by the README's `make lab`, driven by Playwright.

`make lab` opens the learner's working copy: here a temporary one, holding a notebook a learner
already worked on (which must come out untouched) and, in solutions/, the solutions of notebooks
02, 07, 08 and 09 (the versions in which every cell must run clean; at their quick-run budgets, which
the test suite sets; 07, 08 and 09 cut after the cells whose widgets and messages the tests look at,
`CUT_AFTER`, since nbval runs them whole); `make lab` copies the other student notebooks in. Nothing
here writes into the repository except the screenshots, which go to test-output/browser/ (git-ignored; set
ATTN_COURSE_TEST_OUTPUT to put them elsewhere). The browser is Debian's chromium, never a
download. Without it the tests skip, unless ATTN_COURSE_REQUIRE_BROWSER=1 (as in CI) makes
them fail.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import nbformat
import pytest

from attn_course.tooling.release import RUN_ON_TAG, clean, student_version

ROOT = Path(__file__).resolve().parents[1]
CHROMIUM = Path(os.environ.get("ATTN_COURSE_CHROMIUM", "/usr/bin/chromium"))
CHROMIUM_ARGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]
OUTPUT = Path(os.environ.get("ATTN_COURSE_TEST_OUTPUT", ROOT / "test-output")) / "browser"
PORT = int(os.environ.get("ATTN_COURSE_LAB_PORT", "18888"))
TOKEN = "attn-course-browser-test"
TOKENS = ("The", "bank", "of", "the", "river", "was", "muddy")
SETTINGS = {  # user settings of the test's JupyterLab: every cell in the page, no network calls
    "@jupyterlab/notebook-extension/tracker.jupyterlab-settings": {"windowingMode": "none"},
    "@jupyterlab/apputils-extension/notification.jupyterlab-settings": {
        "fetchNews": "false",
        "checkForUpdates": False,
    },
}
# Every code cell's prompt shows an execution count: none is waiting ([ ]:) or running ([*]:).
# (A cell whose source is collapsed, like the setup cell, shows no prompt: save_and_read checks it.)
ALL_PROMPTS_NUMBERED = """() => {
  const prompts = [...document.querySelectorAll('.jp-CodeCell .jp-InputPrompt')]
    .map(p => p.textContent.trim()).filter(text => text !== '');
  return prompts.length > 0 && prompts.every(text => /^\\[\\d+\\]:$/.test(text));
}"""
SOME_PROMPT_NUMBERED = """() => [...document.querySelectorAll('.jp-CodeCell .jp-InputPrompt')]
  .some(p => /^\\[\\d+\\]:$/.test(p.textContent.trim()))"""
IDLE = ".jp-Notebook-ExecutionIndicator[data-status='idle']"
STUB = 'raise NotImplementedError("Exercise: replace this line with your code.")'
LEARNER_SOFTMAX = "return x.exp() / x.exp().sum(dim=dim, keepdim=True)  # my own softmax"


def _missing() -> str | None:
    if not CHROMIUM.exists():
        return f"no chromium at {CHROMIUM} (Debian: apt-get install chromium)"
    try:
        import playwright.sync_api  # noqa: F401
    except ImportError:
        return "the playwright package is not installed (pip install -e '.[dev]')"
    if shutil.which("make") is None:
        return "no `make` to start JupyterLab the README's way"
    return None


MISSING = _missing()
if MISSING and os.environ.get("ATTN_COURSE_REQUIRE_BROWSER") == "1":
    raise RuntimeError(f"ATTN_COURSE_REQUIRE_BROWSER=1 but {MISSING}")
pytestmark = pytest.mark.skipif(MISSING is not None, reason=MISSING or "")


@dataclass(frozen=True)
class Lab:
    """A running JupyterLab."""

    url: str
    """Its address, e.g. http://127.0.0.1:18888."""
    root: Path
    """The folder it serves (a temporary working copy)."""
    learner_work: dict[Path, bytes]
    """Files a learner had in the working copy before `make lab`, with their bytes."""

    def page_url(self, path: str) -> str:
        return f"{self.url}/lab/tree/{path}?reset&token={TOKEN}"  # reset: no tabs of earlier tests


def _free(port: int) -> bool:
    with socket.socket() as probe:
        return probe.connect_ex(("127.0.0.1", port)) != 0


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def _get(url: str) -> dict:
    with urllib.request.urlopen(url, timeout=5) as response:
        return json.load(response)


CUT_AFTER = {
    "07_kv_cache": "1a98e6ce",  # the training (its progress bar) and the probe's figure
    "08_triton_flash_attention": "36223e93",  # the four kernels and their checks, then a look cell
    "09_backward": "fe85514e",  # the five checks, the last one's Triton kernels interpreted
}
"""The id of the last cell the browser runs of a solution notebook that nbval also runs whole."""


@pytest.fixture(scope="module")
def lab(tmp_path_factory) -> Iterator[Lab]:
    """`make lab` on a copy of notebooks/, with a fixed port and token, stopped afterwards."""
    base = tmp_path_factory.mktemp("lab")
    root = base / "my-work"
    (root / "solutions").mkdir(parents=True)
    mine = root / "01_dot_product_attention.ipynb"
    notebook = nbformat.read(ROOT / "notebooks" / mine.name, as_version=4)
    (exercise,) = [cell for cell in notebook.cells if cell.get("id") == "ex2-solution"]
    exercise.source = exercise.source.replace(STUB, LEARNER_SOFTMAX)
    nbformat.write(notebook, mine)
    learner_work = {mine: mine.read_bytes()}
    for stem in ("02_scaling", "07_kv_cache", "08_triton_flash_attention", "09_backward"):
        notebook = nbformat.read(ROOT / "solutions" / f"{stem}.ipynb", as_version=4)
        if stem in CUT_AFTER:  # nbval runs them whole; here, what only a browser shows
            ids = [cell.get("id") for cell in notebook.cells]
            notebook.cells = notebook.cells[: ids.index(CUT_AFTER[stem]) + 1]
        nbformat.write(notebook, root / "solutions" / f"{stem}.ipynb")
    for name, values in SETTINGS.items():
        (base / "settings" / name).parent.mkdir(parents=True, exist_ok=True)
        (base / "settings" / name).write_text(json.dumps(values))
    env = {
        **os.environ,
        "JUPYTER_CONFIG_DIR": str(base / "config"),
        "JUPYTER_DATA_DIR": str(base / "data"),
        "JUPYTER_RUNTIME_DIR": str(base / "runtime"),
        "JUPYTERLAB_SETTINGS_DIR": str(base / "settings"),
        "JUPYTERLAB_WORKSPACES_DIR": str(base / "workspaces"),
        "IPYTHONDIR": str(base / "ipython"),
    }
    env.pop("TRITON_INTERPRET", None)  # as on a learner's machine: notebook 08's setup_triton() sets it
    port = PORT if _free(PORT) else _free_port()
    venv = sys.prefix  # the environment running the tests, which `make` would have created
    extra = f"--no-browser --ServerApp.ip=127.0.0.1 --IdentityProvider.token={TOKEN}"
    command = [
        "make", "--no-print-directory", "-o", f"{venv}/.installed-lab", "-o", f"{venv}/.installed-torch",
        "lab",
        f"VENV={venv}", f"PORT={port}", f"WORK={root}", f"LAB_EXTRA={extra}",
    ]  # fmt: skip
    log = (base / "lab.log").open("w")
    server = subprocess.Popen(
        command, cwd=ROOT, env=env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True
    )
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 60
        while True:
            try:
                _get(f"{url}/api/status?token={TOKEN}")
                break
            except (urllib.error.URLError, ConnectionError, TimeoutError):
                if server.poll() is not None or time.monotonic() > deadline:
                    pytest.fail(f"JupyterLab did not start: {(base / 'lab.log').read_text()[-3000:]}")
                time.sleep(0.25)
        yield Lab(url, root, learner_work)
    finally:
        try:  # shuts down the kernels too
            request = urllib.request.Request(f"{url}/api/shutdown?token={TOKEN}", method="POST")
            urllib.request.urlopen(request, timeout=5).close()
            server.wait(timeout=20)
        except (OSError, subprocess.TimeoutExpired):
            os.killpg(server.pid, signal.SIGTERM)
            server.wait(timeout=20)
        log.close()


@pytest.fixture(scope="module")
def browser():
    from playwright.sync_api import sync_playwright

    with sync_playwright() as playwright:
        chromium = playwright.chromium.launch(executable_path=str(CHROMIUM), args=CHROMIUM_ARGS)
        yield chromium
        chromium.close()


@pytest.fixture
def page(browser):
    page = browser.new_page(viewport={"width": 1400, "height": 1000})
    yield page
    page.close()


def wait_for_kernel(lab: Lab, path: str, timeout: float = 90) -> None:
    """Wait until the server reports the notebook's kernel started and idle."""
    deadline = time.monotonic() + timeout
    while True:
        sessions = _get(f"{lab.url}/api/sessions?token={TOKEN}")
        kernels = [s["kernel"] for s in sessions if s.get("path") == path and s.get("kernel")]
        states = [kernel["execution_state"] for kernel in kernels]
        if states == ["idle"]:
            return
        assert time.monotonic() < deadline, f"the kernel of {path} did not start: {sessions}"
        time.sleep(0.25)


def open_and_run_all(page, lab: Lab, path: str) -> None:
    """Open the notebook, wait for its kernel, run all cells from the Run menu, wait for the end."""
    page.goto(lab.page_url(path))
    wait_for_kernel(lab, path)
    page.get_by_text("Python 3 (ipykernel) | Idle").wait_for(timeout=30_000)  # the page is connected
    page.get_by_role("menuitem", name="Run", exact=True).click()
    page.get_by_role("menuitem", name="Run All Cells", exact=True).click()
    page.wait_for_function(ALL_PROMPTS_NUMBERED, timeout=180_000)
    page.wait_for_selector(IDLE, timeout=60_000)


def save_and_read(page, lab: Lab, path: str) -> nbformat.NotebookNode:
    """Save the notebook from the browser and read what JupyterLab wrote (in the temporary copy)."""
    before = (lab.root / path).stat().st_mtime_ns
    page.locator(".jp-NotebookPanel:not(.lm-mod-hidden) .jp-Notebook").click(position={"x": 5, "y": 5})
    page.keyboard.press("Control+s")
    deadline = time.monotonic() + 30
    while (lab.root / path).stat().st_mtime_ns == before:
        assert time.monotonic() < deadline, f"JupyterLab did not save {path}"
        time.sleep(0.2)
    while True:  # the file may be seen while it is being written
        try:
            return nbformat.read(lab.root / path, as_version=4)
        except (json.JSONDecodeError, nbformat.reader.NotJSONError):
            assert time.monotonic() < deadline, f"JupyterLab wrote an unreadable {path}"
            time.sleep(0.2)


def assert_no_errors_and_every_plot_shown(page, saved: nbformat.NotebookNode) -> None:
    errors = [
        f"cell {index}: {output.ename}: {output.evalue}"
        for index, cell in enumerate(saved.cells)
        if cell.cell_type == "code"
        for output in cell.outputs
        if output.output_type == "error"
    ]
    assert not errors, errors
    code = [(index, cell) for index, cell in enumerate(saved.cells) if cell.cell_type == "code"]
    not_run = [index for index, cell in code if cell.execution_count is None]
    assert not not_run, f"cells that did not run: {not_run}"
    stderr = page.locator(".jp-OutputArea-output[data-mime-type='application/vnd.jupyter.stderr']")
    assert stderr.count() == 0, stderr.all_inner_texts()
    outputs = [output for cell in saved.cells for output in cell.get("outputs", [])]
    pngs = sum("image/png" in output.get("data", {}) for output in outputs)
    shown = page.locator(".jp-OutputArea-output[data-mime-type='image/png'] img")
    assert shown.count() == pngs > 0
    decoded = shown.evaluate_all("images => images.map(i => i.complete && i.naturalWidth > 0)")
    assert all(decoded), decoded
    assert page.get_by_text("Error displaying widget").count() == 0


def wait_for_new_picture(page, scope, old_src: str) -> None:
    image = scope.locator(".widget-image").element_handle()
    page.wait_for_function("([image, old]) => image.src !== old", arg=[image, old_src])


def widget_png_src(page, scope) -> str:
    image = scope.locator(".widget-image")
    page.wait_for_function("i => i.complete && i.naturalWidth > 0", arg=image.element_handle())
    return image.get_attribute("src")


def test_make_lab_opens_the_working_copy_and_keeps_the_learners_work(lab, page):
    copied = sorted(path.name for path in lab.root.glob("*.ipynb"))
    assert copied == sorted(path.name for path in (ROOT / "notebooks").glob("*.ipynb"))
    assert {path: path.read_bytes() for path in lab.learner_work} == lab.learner_work
    page.goto(f"{lab.url}/lab?reset&token={TOKEN}")
    listing = page.locator(".jp-DirListing-content")
    listing.get_by_text("08_triton_flash_attention.ipynb").wait_for(timeout=30_000)
    page.goto(lab.page_url("01_dot_product_attention.ipynb"))
    page.get_by_text("# my own softmax").first.wait_for(timeout=30_000)
    page.locator(".jp-RenderedMarkdown").get_by_text("Run All goes on past an exercise").wait_for()
    OUTPUT.mkdir(parents=True, exist_ok=True)
    page.screenshot(path=OUTPUT / "working_copy.png")


def test_notebook_02_runs_clean_and_the_scaling_explorer_responds(lab, page):
    started = time.monotonic()
    path = "solutions/02_scaling.ipynb"
    open_and_run_all(page, lab, path)
    saved = save_and_read(page, lab, path)
    assert_no_errors_and_every_plot_shown(page, saved)

    explorer = page.locator(".widget-vbox", has=page.locator(".widget-hslider"))
    assert explorer.count() == 1
    buttons = explorer.locator(".widget-toggle-button")
    assert buttons.all_text_contents() == list(TOKENS)  # the token picker
    handle = explorer.locator(".widget-hslider .noUi-handle")
    assert handle.is_visible()
    readout = explorer.locator(".widget-html-content")
    assert "factor 8.00" in readout.inner_text() and "largest weight 0.66 on 'river'" in readout.inner_text()
    image_before = widget_png_src(page, explorer)

    # Drag the slider's handle to the left end: factor 0.5, one-hot weights.
    handle.scroll_into_view_if_needed()
    grip, track = handle.bounding_box(), explorer.locator(".noUi-base").bounding_box()
    page.mouse.move(grip["x"] + grip["width"] / 2, grip["y"] + grip["height"] / 2)
    page.mouse.down()
    page.mouse.move(track["x"] - 20, grip["y"] + grip["height"] / 2, steps=8)
    page.mouse.up()
    page.wait_for_function("e => e.textContent.includes('factor 0.50')", arg=readout.element_handle())
    assert "largest weight 1.00 on 'river'" in readout.inner_text()
    wait_for_new_picture(page, explorer, image_before)
    assert explorer.locator(".widget-readout").inner_text() == "0.50"

    # Pick another query token: its own row is shown.
    buttons.nth(TOKENS.index("was")).click()
    page.wait_for_function("e => !e.textContent.includes(\"on 'river'\")", arg=readout.element_handle())

    OUTPUT.mkdir(parents=True, exist_ok=True)
    explorer.scroll_into_view_if_needed()
    page.screenshot(path=OUTPUT / "02_scaling_explorer_page.png")
    explorer.screenshot(path=OUTPUT / "02_scaling_explorer.png")
    print(f"notebook 02 in the browser: {time.monotonic() - started:.1f} s; screenshots in {OUTPUT}")


def test_notebook_07_runs_clean_and_its_training_progress_bar_is_a_widget(lab, page):
    path = "solutions/07_kv_cache.ipynb"
    open_and_run_all(page, lab, path)
    saved = save_and_read(page, lab, path)
    assert_no_errors_and_every_plot_shown(page, saved)  # also: no text progress bar on stderr

    # tqdm.auto draws the training progress as ipywidgets: a label, a bar and the counts.
    bar = page.locator(".widget-hbox", has=page.locator(".widget-hprogress"))
    assert bar.count() == 1
    assert "training" in bar.inner_text() and "100%" in bar.inner_text()
    OUTPUT.mkdir(parents=True, exist_ok=True)
    bar.scroll_into_view_if_needed()
    page.screenshot(path=OUTPUT / "07_kv_cache_training.png")


def test_notebook_08_runs_its_triton_kernels_through_the_interpreter_in_jupyterlab(lab, page):
    path = "solutions/08_triton_flash_attention.ipynb"
    open_and_run_all(page, lab, path)
    saved = save_and_read(page, lab, path)
    assert_no_errors_and_every_plot_shown(page, saved)
    assert page.get_by_text("kernels are interpreted on the CPU (TRITON_INTERPRET=1)").count() == 1
    for name in ("triton_add", "triton_softmax", "triton_scores", "triton_flash_attention"):
        assert page.get_by_text(f"check_{name} passed", exact=True).count() == 1
    OUTPUT.mkdir(parents=True, exist_ok=True)
    page.get_by_text("check_triton_flash_attention passed", exact=True).scroll_into_view_if_needed()
    page.screenshot(path=OUTPUT / "08_triton_flash_attention.png")


def test_notebook_09_runs_its_gradient_checks_in_jupyterlab(lab, page):
    # Interpreted as on a learner's laptop (its first cell turns the interpreter on), at the quick budget.
    path = "solutions/09_backward.ipynb"
    open_and_run_all(page, lab, path)
    saved = save_and_read(page, lab, path)
    assert_no_errors_and_every_plot_shown(page, saved)
    names = ("softmax_backward", "attention_backward", "flash_attention_backward", "FlashAttentionFunction",
             "triton_flash_attention_backward")  # fmt: skip
    for name in names:
        assert page.get_by_text(f"check_{name} passed", exact=True).count() == 1, name
    OUTPUT.mkdir(parents=True, exist_ok=True)
    page.get_by_text("check_FlashAttentionFunction passed", exact=True).scroll_into_view_if_needed()
    page.screenshot(path=OUTPUT / "09_backward.png")


def open_scratch_notebook(page, lab: Lab, name: str, *sources: str) -> None:
    """Write a notebook of these cells into the lab's root, run it in the browser, see its widgets render."""
    scratch = nbformat.v4.new_notebook(
        cells=[nbformat.v4.new_code_cell(source) for source in sources],
        metadata={"kernelspec": {"name": "python3", "display_name": "Python 3", "language": "python"}},
    )
    nbformat.write(scratch, lab.root / name)
    open_and_run_all(page, lab, name)
    assert page.get_by_text("Error displaying widget").count() == 0


def test_the_mask_and_rope_explorers_render_and_respond(lab, page):
    """03's mask explorer and 05's RoPE explorer, each in a cell of one notebook (one page, one kernel)."""
    open_scratch_notebook(
        page,
        lab,
        "explorers.ipynb",
        "from attn_course.explorers.masking import MaskExplorer\n"
        "from attn_course.demos.sentence import example_sentence\n\n"
        "s = example_sentence(d_k=64)\n"
        "MaskExplorer(s.q, s.k, s.tokens).widget",
        "import torch\n"
        "from attn_course.explorers.rope import RopeExplorer\n\n"
        "g = torch.Generator().manual_seed(0)\n"
        "q, k = torch.randn(2, 64, generator=g)  # (d,) each\n"
        "RopeExplorer(q, k).widget",
    )
    mask_cell, rope_cell = page.locator(".jp-CodeCell").nth(0), page.locator(".jp-CodeCell").nth(1)

    explorer = mask_cell.locator(".widget-vbox", has=page.locator(".widget-checkbox"))
    readout = explorer.locator(".widget-html-content")
    assert "49 of 49 pairs" in readout.inner_text()
    image_before = widget_png_src(page, explorer)

    explorer.get_by_label("causal mask").check()
    page.wait_for_function("e => e.textContent.includes('28 of 49 pairs')", arg=readout.element_handle())
    wait_for_new_picture(page, explorer, image_before)

    OUTPUT.mkdir(parents=True, exist_ok=True)
    explorer.screenshot(path=OUTPUT / "03_mask_explorer.png")

    explorer = rope_cell.locator(".widget-vbox", has=page.locator(".widget-hslider"))
    sliders = explorer.locator(".widget-hslider")
    assert sliders.count() == 3  # pair i, distance, shift
    readout = explorer.locator(".widget-html-content")
    assert "query at m = 1, key at n = 0" in readout.inner_text()
    score_at_distance_1 = readout.inner_text().split("· score ")[1]

    # One step right on the distance slider (keyboard): the query moves, the score changes.
    image_before = widget_png_src(page, explorer)
    sliders.nth(1).locator(".noUi-handle").focus()
    page.keyboard.press("ArrowRight")
    page.wait_for_function("e => e.textContent.includes('query at m = 2')", arg=readout.element_handle())
    wait_for_new_picture(page, explorer, image_before)
    assert readout.inner_text().split("· score ")[1] != score_at_distance_1

    # Back to Δ = 1, then shift both positions: the score is the same as before (relative positions).
    page.keyboard.press("ArrowLeft")
    page.wait_for_function("e => e.textContent.includes('query at m = 1')", arg=readout.element_handle())
    sliders.nth(2).locator(".noUi-handle").focus()
    for _ in range(3):
        page.keyboard.press("ArrowRight")
    page.wait_for_function("e => e.textContent.includes('key at n = 3')", arg=readout.element_handle())
    assert "query at m = 4" in readout.inner_text()
    assert readout.inner_text().split("· score ")[1] == score_at_distance_1

    explorer.scroll_into_view_if_needed()
    explorer.screenshot(path=OUTPUT / "05_rope_explorer.png")


@pytest.mark.parametrize("copy", ["working-copy", "as-released"])
def test_an_untouched_working_copy_opens_and_closes_unmodified(lab, page, copy):
    """JupyterLab writes the kernel's language_info into a notebook as it connects, and marks the
    notebook modified (asking to save on closing) unless that is what the file already held, the
    kernel's Python version included: the working copy `make lab` made names this Python and is
    left untouched; the release, which cannot know the learner's Python, is not."""
    modified = copy == "as-released"
    path = "04_multi_head_attention.ipynb"  # as `make lab` copied it, opened by no other test
    if modified:
        solution = nbformat.read(ROOT / "solutions" / path, as_version=4)
        student, _ = student_version(solution, path)
        path = "untouched-as-released.ipynb"
        nbformat.write(clean(student), lab.root / path)
    page.goto(lab.page_url(path))
    wait_for_kernel(lab, path)
    page.get_by_text("Python 3 (ipykernel) | Idle").wait_for(timeout=30_000)  # the page is connected
    page.wait_for_selector(IDLE, timeout=30_000)
    time.sleep(2)  # as long for both cases: the as-released one shows the change has arrived by then
    tab = page.locator(".lm-TabBar-tab", has_text=path)
    assert ("jp-mod-dirty" in tab.get_attribute("class")) is modified

    tab.locator(".lm-TabBar-tabCloseIcon").click()
    if modified:
        page.get_by_role("dialog").get_by_role("button", name="Discard").click()  # "Save your work"
    tab.wait_for(state="detached", timeout=10_000)
    assert page.get_by_role("dialog").count() == 0


def wait_until_quiet(lab: Lab, path: str, seconds: float = 3.0, timeout: float = 240) -> None:
    """Wait until the notebook's kernel has been idle for `seconds` on end (the server's view)."""
    deadline, idle_since = time.monotonic() + timeout, None
    while True:
        sessions = _get(f"{lab.url}/api/sessions?token={TOKEN}")
        states = [s["kernel"]["execution_state"] for s in sessions if s.get("path") == path]
        now = time.monotonic()
        idle_since = (idle_since or now) if states == ["idle"] else None
        if idle_since is not None and now - idle_since >= seconds:
            return
        assert now < deadline, f"the kernel of {path} did not settle: {states}"
        time.sleep(0.25)


@pytest.mark.parametrize("tagged", [True, False], ids=["as-released", "without-the-tag"])
def test_run_all_goes_on_past_an_unfinished_exercise(lab, page, tagged):
    """Issue 46: a learner who had done a later exercise pressed Run All and lost every output below
    the first unfinished one. Notebook 01 with only Exercise 2 (softmax) done: as released, Run All
    shows Exercise 1's CheckFailed in red and runs every cell below it, the learner's softmax
    included; without the release's `raises-exception` tags, JupyterLab stops at that check and the
    cells below stay empty (what the learner saw)."""
    notebook = nbformat.read(ROOT / "notebooks" / "01_dot_product_attention.ipynb", as_version=4)
    cells = {cell.get("id"): cell for cell in notebook.cells}
    done = "e = (x - x.max(dim=dim, keepdim=True).values).exp()\n    return e / e.sum(dim=dim, keepdim=True)"
    cells["ex2-solution"].source = cells["ex2-solution"].source.replace(STUB, done)
    for cell in notebook.cells if not tagged else []:
        cell.metadata["tags"] = [tag for tag in cell.metadata.get("tags", []) if tag != RUN_ON_TAG]
    path = f"run_all_{'tagged' if tagged else 'untagged'}.ipynb"
    nbformat.write(notebook, lab.root / path)

    page.goto(lab.page_url(path))
    wait_for_kernel(lab, path)
    page.get_by_text("Python 3 (ipykernel) | Idle").wait_for(timeout=30_000)  # the page is connected
    page.get_by_role("menuitem", name="Run", exact=True).click()
    page.get_by_role("menuitem", name="Run All Cells", exact=True).click()
    page.wait_for_function(SOME_PROMPT_NUMBERED, timeout=120_000)  # it has started; then it goes quiet
    wait_until_quiet(lab, path)
    if tagged:
        page.wait_for_function(ALL_PROMPTS_NUMBERED, timeout=30_000)
    saved = save_and_read(page, lab, path)

    index = {cell.get("id"): i for i, cell in enumerate(saved.cells)}
    code = [i for i, cell in enumerate(saved.cells) if cell.cell_type == "code"]
    below = [i for i in code if i > index["ex1-check"]]
    ran = [i for i in below if saved.cells[i].execution_count is not None]
    errors = {
        i: output
        for i, cell in enumerate(saved.cells)
        if cell.cell_type == "code"
        for output in cell.outputs
        if output.output_type == "error"
    }
    assert list(errors)[:1] == [index["ex1-check"]] and errors[index["ex1-check"]].ename == "CheckFailed"
    failed = page.locator(".jp-OutputArea-output[data-mime-type='application/vnd.jupyter.stderr']")
    if not tagged:  # what the learner saw: nothing below the first failed check ran
        assert ran == [] and all(saved.cells[i].outputs == [] for i in below), ran
        assert failed.count() == 1
        return
    assert ran == below, f"cells below the failed check that did not run: {sorted(set(below) - set(ran))}"
    shown = {i: error.evalue[:80] for i, error in errors.items()}
    assert sorted(errors) == [index["ex1-check"], index["ex3-check"]], shown  # the two unfinished ones
    assert all(error.ename == "CheckFailed" for error in errors.values())
    printed = {i: "".join(o.get("text", "") for o in saved.cells[i].outputs) for i in code}
    assert "check_softmax passed" in printed[index["ex2-check"]]  # the learner's own, below
    assert "Using your `softmax`" in "".join(printed.values())
    assert "Using the course's `dot_product_scores`" in printed[index["ex1-look"]]
    pngs = [i for i in below if any("image/png" in o.get("data", {}) for o in saved.cells[i].outputs)]
    assert index["ex2-look"] in pngs and index["ex3-look"] in pngs  # the plots below were drawn
    assert failed.count() == 2  # the two unfinished checks, in red, each with its message
    first = failed.first
    first.scroll_into_view_if_needed()
    assert first.is_visible() and first.inner_text().startswith("CheckFailed:")
    assert "not implemented yet" in first.inner_text()
    OUTPUT.mkdir(parents=True, exist_ok=True)
    page.screenshot(path=OUTPUT / "run_all_past_an_unfinished_exercise.png")


def test_the_class_report_opens_in_the_browser_self_contained(page, tmp_path):
    """report.html from `attn-course grade`, opened from disk: histogram shown, links, nothing fetched."""
    from attn_course.grading.class_report import write_class_report
    from attn_course.grading.results import ExerciseResult, GradeReport, LearnerResult, NotebookResult

    slip = "Your attention_backward(q (2, 6, 8), k (2, 6, 8)) forgets the 1/√d scale in dK: dK = dSᵀ Q / √d."

    def learner(name: str, passed: bool) -> LearnerResult:
        second = (
            ExerciseResult.success("attention_backward", "ok")
            if passed
            else ExerciseResult.failed("attention_backward", slip)
        )
        exercises = (ExerciseResult.success("softmax_backward", "ok"), second)
        return LearnerResult(name, (NotebookResult("09_backward", "graded", "", exercises),))

    idea = "does not subtract the row's dot product of dO and O"  # one known mistake, two wordings

    def known(name: str, exercise: str) -> LearnerResult:
        said = f"Your {exercise}(shape of {name}) {idea}."
        wrong = ExerciseResult.failed(exercise, said, "known-mistake", (idea,))
        other = "attention_backward" if exercise == "softmax_backward" else "softmax_backward"
        results = sorted((wrong, ExerciseResult.success(other, "ok")), key=lambda e: e.exercise, reverse=True)
        return LearnerResult(name, (NotebookResult("09_backward", "graded", "", tuple(results)),))

    learners = tuple(
        learner(name, i % 3 == 0) for i, name in enumerate(["ann", "bob", "Zoë Ångström", "dee"])
    ) + (known("eve", "softmax_backward"), known("fay", "attention_backward"))
    write_class_report(GradeReport(learners, ("softmax_backward", "attention_backward"), 2), tmp_path)
    fetched: list[str] = []
    page.on("request", lambda request: fetched.append(request.url))
    page.goto((tmp_path / "report.html").as_uri())
    assert page.title() == "Class report"
    assert page.locator("text=3 of 6 who handed it in").count() == 1  # attention_backward: ann, dee, eve
    assert page.locator("td", has_text=slip).count() == 1  # the mistake named whole, once, by whom
    assert page.locator("tr", has_text=slip).locator("a").count() == 2  # bob, Zoë
    grouped = page.locator("tr", has_text=idea)  # one row for the idea, met in both exercises
    assert grouped.count() == 1 and grouped.locator("a").count() == 2  # eve, fay
    assert "known-mistake" in grouped.inner_text()
    wordings = grouped.locator("details li")
    assert not wordings.first.is_visible()  # the checks' own words, one click away
    grouped.locator("summary").click()
    assert wordings.count() == 2 and wordings.first.is_visible()
    width = page.eval_on_selector("img", "img => img.complete ? img.naturalWidth : 0")
    assert width > 300  # the histogram, decoded from the page itself
    link = page.locator("a", has_text="Zoë Ångström").first
    assert link.get_attribute("href") == "feedback/Zo%C3%AB%20%C3%85ngstr%C3%B6m.html"
    assert [url for url in fetched if not url.startswith(("file:", "data:"))] == []
    OUTPUT.mkdir(parents=True, exist_ok=True)
    page.screenshot(path=OUTPUT / "class_report.png", full_page=True)
