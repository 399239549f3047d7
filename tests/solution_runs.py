"""One execution of each solution notebook per test session, shared by nbval and the swap test.

nbval runs every solution notebook cell by cell (pyproject.toml's `--nbval-lax`). The swap test
(`test_learner_code_used.py`) needs the same notebook run with a right learner solution of some
exercises in it. Both are served by one run: nbval is handed the solution notebook *with the swaps
inserted* (`swapped_solution`): after the check cell of each exercise of `SWAPS`, a cell defines the
learner's version (recording every call) and the check is called again, so the course's own solution
still passes its check first and every later cell runs the learner's version. `tests/conftest.py`
records what each nbval cell printed (`record_cell`); the swap test reads that record
(`recorded_run`) and runs the notebook itself only when nbval did not run it in this process (a test
file selected alone, `-k`).
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import nbformat
import pytest
import triton_variants
from forked_kernels import client_kwargs, nbval_forks
from learner_code import (
    ABLATE,
    ABSORBED_FOLDED,
    APPEND_DIVMOD,
    APPLY_ROPE,
    BLOCK,
    CACHED,
    CAUSAL,
    FLASH,
    FLASH_DECODE_PADDED,
    FREQUENCIES,
    GATHER_LOOP,
    GENERATE,
    KV_CACHE,
    LATENT_SDPA,
    MERGE,
    MERGE_ATTENTION_STACKED,
    MHA,
    ONLINE_SOFTMAX,
    PRELUDE,
    PROBS,
    RING_BLOCKING,
    ROLLING,
    ROTARY,
    SAMPLE_ONLY,
    SCALED,
    SOFTMAX,
    SPLIT,
)
from nbclient import NotebookClient
from nbval.plugin import IPyNbCell, IPyNbFile, find_comment_markers, find_metadata_tags

ROOT = Path(__file__).resolve().parents[1]
SOLUTIONS = ROOT / "solutions"

TRITON_FLASH_ANY_D = (
    triton_variants.FLASH
    + """

_flash_power_of_two = triton_flash_attention


def triton_flash_attention(q, k, v, is_causal=False, return_lse=False):
    d = q.shape[-1]
    width = max(16, triton.next_power_of_2(d))
    if width != d:  # pad the head dim with zeros (no score changes); the kernel scales by 1/sqrt(width)
        q = torch.nn.functional.pad(q * math.sqrt(width / d), (0, width - d))
        k, v = (torch.nn.functional.pad(x, (0, width - d)) for x in (k, v))
    out, lse = _flash_power_of_two(q, k, v, is_causal=is_causal, return_lse=True)
    return (out[..., :d], lse) if return_lse else out[..., :d]
"""
)
"""A learner's kernel for head dims that are powers of two, and a wrapper that pads any other."""
ROTARY_LAYER = ROTARY.removeprefix(APPLY_ROPE)
"""The learner's rotary layer alone, calling the notebook's (the learner's) apply_rope."""

SWAPS = [
    ("01_dot_product_attention", "softmax", SOFTMAX),
    ("02_scaling", "scaled_dot_product_attention", SCALED),
    ("03_causal_masking", "causal_mask", CAUSAL),
    ("04_multi_head_attention", "split_heads", SPLIT),
    ("04_multi_head_attention", "merge_heads", MERGE),
    ("04_multi_head_attention", "MultiHeadAttention", MHA),
    ("05_rope", "rope_frequencies", FREQUENCIES),
    ("05_rope", "apply_rope", APPLY_ROPE),
    ("05_rope", "RotaryMultiHeadAttention", ROTARY_LAYER),
    ("06_flash_attention", "online_softmax", ONLINE_SOFTMAX),
    ("06_flash_attention", "flash_attention", FLASH),
    ("07_kv_cache", "block_forward", BLOCK),
    ("07_kv_cache", "ablate_heads", ABLATE),
    ("07_kv_cache", "KVCache", KV_CACHE),
    ("07_kv_cache", "cached_attention", CACHED),
    ("07_kv_cache", "generate_with_cache", GENERATE),
    ("07_kv_cache", "next_token_probs", PROBS),
    ("07_kv_cache", "sample_next", SAMPLE_ONLY),
    ("08_triton_flash_attention", "triton_softmax", triton_variants.SOFTMAX),
    ("08_triton_flash_attention", "triton_scores", triton_variants.SCORES),
    ("08_triton_flash_attention", "triton_flash_attention", TRITON_FLASH_ANY_D),
    ("10_modern_attention", "rolling_window_step", ROLLING),
    ("11_attention_at_scale", "merge_attention", MERGE_ATTENTION_STACKED),
    ("11_attention_at_scale", "flash_decode", FLASH_DECODE_PADDED),
    ("11_attention_at_scale", "ring_attention", RING_BLOCKING),
    ("11_attention_at_scale", "gather_kv", GATHER_LOOP),
    ("11_attention_at_scale", "append_kv", APPEND_DIVMOD),
    ("11_attention_at_scale", "latent_attention", LATENT_SDPA),
    ("11_attention_at_scale", "absorbed_latent_attention", ABSORBED_FOLDED),
]
"""(notebook, exercise, a right learner solution that is not the course's reference)."""

RECORDER = '''
import functools as _swap_functools
import hashlib as _swap_hashlib

_SWAP_CALLS = globals().setdefault("_SWAP_CALLS", {})
_SWAP_CELL = globals().setdefault("_SWAP_CELL", [None])


def _swap_enter(info):
    _SWAP_CELL[0] = _swap_hashlib.sha1(info.raw_cell.encode()).hexdigest()


if not globals().get("_SWAP_WATCHING"):
    get_ipython().events.register("pre_run_cell", _swap_enter)
    _SWAP_WATCHING = True


def _swap_record(name):
    _SWAP_CALLS.setdefault(name, []).append(_SWAP_CELL[0])


def _swap_recorded(candidate, name):
    """`candidate` (a function or an nn.Module class) that records the cell of every call."""
    if isinstance(candidate, type):

        class Recorded(candidate):
            def __init__(self, *args, **kwargs):
                _swap_record(name)
                super().__init__(*args, **kwargs)

            def forward(self, *args, **kwargs):
                _swap_record(name)
                return super().forward(*args, **kwargs)

        Recorded.__name__ = Recorded.__qualname__ = candidate.__name__
        return Recorded

    @_swap_functools.wraps(candidate)
    def recorded(*args, **kwargs):
        _swap_record(name)
        return candidate(*args, **kwargs)

    return recorded
'''

REPORT = "import json\nprint(json.dumps(globals().get('_SWAP_CALLS', {})))"
"""The last cell of a swapped notebook: which cells each learner version ran in, as JSON."""
SWAP_TAG = "attn_course_swap"
"""Metadata key of the cells `swapped_solution` inserts: the exercise's name (or "report")."""

_records: dict[str, list[tuple[str, list[Any]]]] = {}
"""Solution notebook stem -> (source, outputs) of each code cell nbval has run, in order."""


def swapped_source(name: str, solution: str) -> str:
    """A cell that defines the learner's `solution` of `name`, recording its calls."""
    return f"{PRELUDE}\n{solution}\n{RECORDER}\n{name} = _swap_recorded({name}, {name!r})\n"


def swapped_solution(stem: str) -> nbformat.NotebookNode:
    """Solution notebook `stem`, with each swap of SWAPS (and the call report) inserted."""
    from test_notebooks import check_cells

    notebook = nbformat.read(SOLUTIONS / f"{stem}.ipynb", as_version=4)
    checks = {name: index for index, name in check_cells(notebook)}
    swaps = sorted(((checks[name], name, solution) for s, name, solution in SWAPS if s == stem), reverse=True)
    for index, name, solution in swaps:  # from the last, so that inserting keeps the earlier indices
        exercise = notebook.cells[index - 1]
        spellings = (f"def {name}(", f"class {name}(", f"class {name}:")
        defines = any(spelling in exercise.source for spelling in spellings)
        assert exercise.cell_type == "code" and defines, f"the cell before check_{name} should define {name}"
        solution_cell = nbformat.v4.new_code_cell(swapped_source(name, solution))
        check_cell = nbformat.v4.new_code_cell(notebook.cells[index].source)
        for cell in (solution_cell, check_cell):
            cell.metadata[SWAP_TAG] = name
        notebook.cells[index + 1 : index + 1] = [solution_cell, check_cell]
    if swaps:
        report = nbformat.v4.new_code_cell(REPORT)
        report.metadata[SWAP_TAG] = "report"
        notebook.cells.append(report)
    return notebook


def record_cell(stem: str, index: int, source: str, outputs: list[Any]) -> None:
    """Remember what nbval's run of notebook `stem` printed in its code cell `index` (from 0)."""
    cells = _records.setdefault(stem, [])
    if index == 0:
        cells.clear()
    if index == len(cells):
        cells.append((source, list(outputs)))


def recorded_run(stem: str) -> nbformat.NotebookNode | None:
    """The swapped notebook with the outputs of nbval's run of it in this process, if it ran whole."""
    notebook = swapped_solution(stem)
    code = [cell for cell in notebook.cells if cell.cell_type == "code"]
    cells = _records.get(stem, [])
    ran_whole = len(cells) == len(code)
    if not ran_whole or any(cell.source != source for cell, (source, _) in zip(code, cells, strict=True)):
        return None
    for cell, (_, outputs) in zip(code, cells, strict=True):
        cell.outputs = [nbformat.from_dict(output) for output in outputs]
    return notebook


def execute(notebook: nbformat.NotebookNode, timeout: int = 300) -> nbformat.NotebookNode:
    """Run `notebook` in a kernel of its own in solutions/ (as nbval does), errors kept as outputs."""
    NotebookClient(
        notebook,
        timeout=timeout,
        kernel_name="python3",
        allow_errors=True,
        resources={"metadata": {"path": str(SOLUTIONS)}},
        **client_kwargs(),
    ).execute()
    return notebook


class SwappedSolutionFile(IPyNbFile):
    """nbval's collector of a solution notebook, run on the notebook's `swapped_solution`."""

    def collect(self) -> Iterator[pytest.Item]:
        """One nbval item per code cell, as nbval's own collector makes them."""
        self.nb = swapped_solution(self.path.stem)
        code = [cell for cell in self.nb.cells if cell.cell_type == "code"]
        for number, cell in enumerate(code):
            options = defaultdict(bool, find_metadata_tags(cell.metadata))
            options.update(find_comment_markers(cell.source))
            options.setdefault("check", self.compare_outputs)
            name = f"Cell {number}"
            yield IPyNbCell.from_parent(self, name=name, cell_num=number, cell=cell, options=options)

    def setup(self) -> None:
        """nbval's setup, its kernel forked from this worker's kernel factory (tests/forked_kernels.py)."""
        with nbval_forks():
            super().setup()
