"""After an exercise's check passes, the look and measure cells run the learner's code, not the course's.

For each (notebook, exercise, right learner solution) of `SWAPS`, the solution notebook's exercise
cell is replaced by a right solution written as a learner writes it (`learner_code.py`: another
spelling than the course's, view/transpose for rearrange, stack and flatten for rearrange, its own
masked_fill), wrapped so that every call (for a class: every construction and forward) records the
cell it ran in. The notebook runs in quick mode, and every later cell that names the exercise in
`yours_if_passed("NAME")` must have called the learner's version (as the check did) and said
"Using your `NAME`".

Each notebook runs once, with all its swaps; adding an exercise is one line in `SWAPS`.
"""

from __future__ import annotations

import functools
import hashlib
import json
from pathlib import Path

import nbformat
import pytest
import triton_variants
from learner_code import (
    ABLATE,
    APPLY_ROPE,
    BLOCK,
    CACHED,
    CAUSAL,
    FLASH,
    FREQUENCIES,
    GENERATE,
    KV_CACHE,
    MERGE,
    MHA,
    ONLINE_SOFTMAX,
    PRELUDE,
    PROBS,
    ROTARY,
    SAMPLE_ONLY,
    SCALED,
    SOFTMAX,
    SPLIT,
)
from nbclient import NotebookClient
from test_notebooks import check_cells

ROOT = Path(__file__).resolve().parents[1]
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

REPORT = "import json\nprint(json.dumps(_SWAP_CALLS))"


def swapped_source(name: str, solution: str) -> str:
    """The exercise cell with the learner's `solution` of `name`, recording its calls."""
    return f"{PRELUDE}\n{solution}\n{RECORDER}\n{name} = _swap_recorded({name}, {name!r})\n"


@functools.cache
def run_swapped(stem: str) -> tuple[nbformat.NotebookNode, dict[str, list[str]]]:
    """Notebook `stem` run with every swap of SWAPS in it; the cells (`fingerprint`) each swap ran in."""
    path = ROOT / "solutions" / f"{stem}.ipynb"
    notebook = nbformat.read(path, as_version=4)
    checks = {name: index for index, name in check_cells(notebook)}
    for swap_stem, name, solution in SWAPS:
        if swap_stem != stem:
            continue
        exercise = notebook.cells[checks[name] - 1]
        spellings = (f"def {name}(", f"class {name}(", f"class {name}:")
        defines = any(spelling in exercise.source for spelling in spellings)
        assert exercise.cell_type == "code" and defines, f"the cell before check_{name} should define {name}"
        exercise.source = swapped_source(name, solution)
    notebook.cells.append(nbformat.v4.new_code_cell(REPORT))
    NotebookClient(
        notebook,
        timeout=300,
        kernel_name="python3",
        allow_errors=True,
        resources={"metadata": {"path": str(path.parent)}},
    ).execute()
    errors = [
        (index, out.ename, out.evalue[:200])
        for index, cell in enumerate(notebook.cells)
        if cell.cell_type == "code"
        for out in cell.outputs
        if out.output_type == "error"
    ]
    assert not errors, f"{stem} with the learner's versions swapped in: {errors}"
    report = "".join(out.get("text", "") for out in notebook.cells[-1].outputs if out.output_type == "stream")
    return notebook, json.loads(report)


def fingerprint(cell: nbformat.NotebookNode) -> str:
    """What the kernel records of the cell it runs (IPython gives no cell id here): its source's SHA-1."""
    return hashlib.sha1(cell.source.encode()).hexdigest()


def _stream(cell: nbformat.NotebookNode) -> str:
    return "".join(out.get("text", "") for out in cell.outputs if out.output_type == "stream")


@pytest.mark.parametrize(("stem", "name"), [(stem, name) for stem, name, _ in SWAPS], ids=lambda v: v)
def test_cells_after_the_check_run_the_learners_version(stem, name):
    notebook, calls = run_swapped(stem)
    check = next(index for index, checked in check_cells(notebook) if checked == name)
    assert f"check_{name} passed" in _stream(notebook.cells[check]), "the learner's right version must pass"
    looks = [
        index
        for index, cell in enumerate(notebook.cells)
        if index > check and cell.cell_type == "code" and f'yours_if_passed("{name}")' in cell.source
    ]
    assert looks, f'no cell of {stem} after check_{name} uses yours_if_passed("{name}")'
    ran_in = set(calls.get(name, []))
    assert fingerprint(notebook.cells[check]) in ran_in, f"check_{name} did not call the learner's version"
    for index in looks:
        cell = notebook.cells[index]
        assert fingerprint(cell) in ran_in, f"{stem} cell {index} did not call the learner's {name}"
        assert f"Using your `{name}`" in _stream(cell), (stem, index, _stream(cell)[:300])
