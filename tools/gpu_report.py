"""The GPU tier's report: the figures read off its benchmark rows, and its steps, as Markdown and JSON.

`tools.gpu_tier` runs the steps on a GPU and hands their results here; the dry run on a
CPU writes the same report with the plan and no figures, so every line of this module runs in
the CPU test suite too.
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

from attn_course.demos.attention_bench import BenchRow, find_row, measured_value

TRITON_SETTING = dict(dtype="float16", b=4, h=16, t=4096, d=64, causal=True)
"""Where the Triton kernel is held against SDPA's flash backend (forward, and backward with notebook 09)."""

NAIVE_SETTING = dict(dtype="float16", b=1, h=8, t=8192, d=64, causal=True)
"""Where SDPA's flash backend is held against naive attention."""

AIM = "≥ {}× the throughput of SDPA flash"

BACKWARD_MISSING = (
    "slot kept for notebook 09: attn_course.triton_flash.launchers.triton_flash_attention_backward is not in "
    "the package yet"
)


@dataclass(frozen=True)
class StepResult:
    """How one command of the tier went."""

    name: str
    """The step's name, e.g. "gpu tests" or "notebook 08_triton_flash_attention"."""
    kind: str
    """"tests", "bench" or "notebook"."""
    command: str
    """The command line, as a shell would show it."""
    status: str
    """"passed", "failed (exit N)", "timed out after N s", "not run: ..." or "planned (dry run)"."""
    seconds: float | None = None
    """Wall time of the command; None when it did not run."""
    detail: str = ""
    """Test counts and the first failures, or the last line the command printed."""


@dataclass(frozen=True)
class Figure:
    """One figure the README quotes, measured or with the reason it was not."""

    name: str
    """What is compared, e.g. "Triton forward / SDPA flash"."""
    setting: str
    """Sizes and dtype of the comparison."""
    value: str
    """The measured figure in words, or "not measured: <why>"."""
    target: str
    """The aim, e.g. "≥ 0.8× throughput"."""
    met: bool | None
    """Whether the aim was reached; None when not measured."""
    numbers: dict[str, float | None] = field(default_factory=dict)
    """The raw numbers behind `value` (seconds, TFLOP/s, bytes, ratios)."""


@dataclass(frozen=True)
class TierReport:
    """Everything `make test-gpu` found out, written to report.md and report.json."""

    date: str
    """When the tier ran (ISO 8601, UTC)."""
    device: str
    """The device summary: GPU name, compute capability, memory, torch, SDPA backends."""
    versions: dict[str, str]
    """Python, torch and triton versions."""
    dry_run: bool
    """True when only the plan was written (no command ran)."""
    budget_seconds: float
    """The wall time the tier may take."""
    total_seconds: float | None
    """The wall time it took; None in a dry run."""
    steps: list[StepResult]
    """Each command and how it went, in order."""
    figures: list[Figure]
    """The figures, measured or not."""


def _setting(s: dict) -> str:
    causal = ", causal" if s["causal"] else ""
    return f"{s['dtype']}, B={s['b']}, H={s['h']}, T={s['t']}, d={s['d']}{causal}"


def _why_missing(rows: Sequence[BenchRow], provider: str, setting: dict) -> str:
    """Why `provider` has no measured row at `setting`: its skip reason, or that it was not run."""
    for r in rows:
        if r.provider == provider and all(getattr(r, f) == v for f, v in setting.items()) and r.skipped:
            return f"{provider}: {r.skipped}"
    return f"{provider} was not run at this size"


def _flash_or_stand_in(rows: Sequence[BenchRow], setting: dict) -> tuple[BenchRow | None, str]:
    """SDPA flash's row at `setting`; where the GPU refused flash (a T4), the memory-efficient one's.

    The second item is "" for flash, else the words that say what stands in for it and why.
    """
    flash = find_row(rows, "sdpa-flash", **setting)
    if flash is not None or not _why_missing(rows, "sdpa-flash", setting).startswith("sdpa-flash: "):
        return flash, ""
    efficient = find_row(rows, "sdpa-efficient", **setting)
    if efficient is None:
        return None, ""
    return efficient, "against sdpa-efficient (this GPU has no flash backend, so the aim is not judged): "


def throughput_figure(
    rows: Sequence[BenchRow], name: str, provider: str, aim: float, setting: dict = TRITON_SETTING
) -> Figure:
    """`provider` against sdpa-flash at `setting`: throughput ratio (aim ≥ `aim`), TFLOP/s, share of peak.

    Where the GPU refuses flash (compute capability below 8.0, a T4), against sdpa-efficient, unjudged.
    """
    target = AIM.format(aim)
    mine, (flash, stand_in) = find_row(rows, provider, **setting), _flash_or_stand_in(rows, setting)
    if mine is None or flash is None:
        why = "; ".join(_why_missing(rows, p, setting) for p, r in ((provider, mine), ("sdpa-flash", flash))
                        if r is None)  # fmt: skip
        return Figure(name, _setting(setting), f"not measured: {why}", target, None)
    mine_seconds, flash_seconds = measured_value(mine.seconds), measured_value(flash.seconds)
    ratio = flash_seconds / mine_seconds

    def share(r: BenchRow) -> str:
        return f"{r.percent_of_peak:.0f}% of peak" if r.percent_of_peak is not None else "peak unknown"

    value = stand_in + (
        f"{ratio:.2f}×: {mine.tflops:.1f} TFLOP/s ({share(mine)}) against "
        f"{flash.tflops:.1f} TFLOP/s ({share(flash)}); "
        f"{mine_seconds * 1e3:.2f} / {flash_seconds * 1e3:.2f} ms"
    )
    numbers = {
        "ratio": ratio, f"{provider}_seconds": mine.seconds, f"{provider}_tflops": mine.tflops,
        f"{provider}_percent_of_peak": mine.percent_of_peak, "flash_seconds": flash.seconds,
        "flash_tflops": flash.tflops, "flash_percent_of_peak": flash.percent_of_peak,
    }  # fmt: skip
    return Figure(name, _setting(setting), value, target, None if stand_in else ratio >= aim, numbers)


def naive_figure(rows: Sequence[BenchRow], setting: dict = NAIVE_SETTING) -> Figure:
    """SDPA flash against naive attention at `setting`: times faster (aim ≥ 5×), and naive's memory."""
    name, target = "SDPA flash / naive attention", "≥ 5× faster"
    naive, flash = find_row(rows, "naive", **setting), find_row(rows, "sdpa-flash", **setting)
    if naive is None or flash is None:
        why = "; ".join(_why_missing(rows, p, setting) for p, r in (("naive", naive), ("sdpa-flash", flash))
                        if r is None)  # fmt: skip
        return Figure(name, _setting(setting), f"not measured: {why}", target, None)
    naive_seconds, flash_seconds = measured_value(naive.seconds), measured_value(flash.seconds)
    naive_peak, flash_peak = measured_value(naive.peak_bytes), measured_value(flash.peak_bytes)
    speedup = naive_seconds / flash_seconds
    value = (
        f"{speedup:.1f}× faster ({naive_seconds * 1e3:.1f} / {flash_seconds * 1e3:.2f} ms); peak memory "
        f"naive {naive_peak / 2**20:.0f} MiB, flash {flash_peak / 2**20:.1f} MiB"
    )
    numbers = {
        "speedup": speedup, "naive_seconds": naive.seconds, "flash_seconds": flash.seconds,
        "naive_peak_bytes": naive.peak_bytes, "flash_peak_bytes": flash.peak_bytes,
    }  # fmt: skip
    return Figure(name, _setting(setting), value, target, speedup >= 5, numbers)


def backward_figure(rows: Sequence[BenchRow] | None) -> Figure:
    """Notebook 09's Triton backward against SDPA flash's backward; a marked slot while 09 is missing."""
    name = "Triton backward / SDPA flash backward"
    if rows is None:
        missing = f"not measured: {BACKWARD_MISSING}"
        return Figure(name, _setting(TRITON_SETTING), missing, AIM.format(0.6), None)
    return throughput_figure(rows, name, "triton", 0.6)


def not_measured(figure: Figure, why: str) -> Figure:
    """The same figure with its value replaced by "not measured: `why`"."""
    return dataclasses.replace(figure, value=f"not measured: {why}", met=None, numbers={})


def _cell(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", " ")


def to_markdown(report: TierReport) -> str:
    """The report as Markdown: device, figures, notebooks, steps and the commands run."""
    title = "GPU tier: plan (dry run)" if report.dry_run else "GPU tier"
    lines = [f"# {title}, {report.date}", ""]
    if report.dry_run:
        lines += ["Dry run: nothing ran; this is what `make test-gpu` runs on a machine with a CUDA GPU.", ""]
    lines += ["```", report.device, "```", ""]
    lines.append(", ".join(f"{k} {v}" for k, v in report.versions.items()))
    total = "—" if report.total_seconds is None else f"{report.total_seconds:.0f} s"
    lines += ["", f"Wall time: {total} (budget {report.budget_seconds:.0f} s).", "", "## Figures", ""]
    lines += ["| What | Setting | Measured | Target | Met |", "| --- | --- | --- | --- | --- |"]
    for f in report.figures:
        met = {True: "yes", False: "**no**", None: "—"}[f.met]
        lines.append(f"| {f.name} | {f.setting} | {_cell(f.value)} | {f.target} | {met} |")
    notebooks = [s for s in report.steps if s.kind == "notebook"]
    if notebooks:
        lines += ["", "## Notebooks on the GPU (full budgets, under nbval; kernel start included)", ""]
        lines += ["| Notebook | Seconds | Status |", "| --- | --- | --- |"]
        for s in notebooks:
            seconds = "—" if s.seconds is None else f"{s.seconds:.1f}"
            lines.append(f"| {s.name.removeprefix('notebook ')} | {seconds} | {_cell(s.status)} |")
    lines += ["", "## Steps", "", "| Step | Status | Seconds | Detail |", "| --- | --- | --- | --- |"]
    for s in report.steps:
        seconds = "—" if s.seconds is None else f"{s.seconds:.1f}"
        lines.append(f"| {s.name} | {_cell(s.status)} | {seconds} | {_cell(s.detail)} |")
    lines += ["", "## Commands", "", "```"] + [s.command for s in report.steps] + ["```", ""]
    return "\n".join(lines)


def write_report(report: TierReport, out: Path) -> tuple[Path, Path]:
    """Write report.md and report.json into `out`; return their paths."""
    out.mkdir(parents=True, exist_ok=True)
    markdown, data = out / "report.md", out / "report.json"
    markdown.write_text(to_markdown(report), encoding="utf-8")
    text = json.dumps(dataclasses.asdict(report), indent=1, ensure_ascii=False)
    data.write_text(text + "\n", encoding="utf-8")
    return markdown, data


def read_report(path: Path) -> TierReport:
    """A report written by `write_report` (its report.json)."""
    item = json.loads(path.read_text(encoding="utf-8"))
    item["steps"] = [StepResult(**s) for s in item["steps"]]
    item["figures"] = [Figure(**f) for f in item["figures"]]
    return TierReport(**item)


__all__ = [
    "Figure",
    "StepResult",
    "TierReport",
    "backward_figure",
    "naive_figure",
    "not_measured",
    "read_report",
    "throughput_figure",
    "to_markdown",
    "write_report",
]
