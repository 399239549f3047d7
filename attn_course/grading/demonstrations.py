"""Which of a submitted notebook's cells the grader may leave unrun: demonstrations nothing graded needs.

The course's notebooks tag their look, measure and train cells `demonstration` (in the cell's
metadata; `DEMONSTRATIONS` names them by cell id too, for notebooks saved without the tags): they
show the learner what their code does, and no grade depends on what they print. A learner's
notebook runs them as any other cell; the grader skips a tagged cell unless something it does run
may need it. It runs every cell that defines an exercise, every untagged cell (but the learner's
own check cells: see `execute`), and every tagged cell that binds a name one of those later cells
reads (in the learner's source as handed in, function bodies and default values included), and so
on backwards:
a learner who used a demonstration's variable in their own code is graded as their notebook runs.
A cell it cannot read (not Python, a star import) is run, and so is every tagged cell above a
cell that reads names it cannot see (`globals()`, `eval`, `exec`).

>>> nb = nbformat.v4.new_notebook(cells=[
...     nbformat.v4.new_code_cell("import math"),
...     nbformat.v4.new_code_cell("scale = 2\\nplot(scale)", metadata={"tags": [TAG]}),
...     nbformat.v4.new_code_cell("def f(x):\\n    return math.sqrt(x)"),
...     nbformat.v4.new_code_cell("check_f(f)"),
...     nbformat.v4.new_code_cell("show(f(4))", metadata={"tags": [TAG]})])
>>> sorted(skippable(nb, ("f",)))
[1, 4]
>>> nb.cells[2].source = "def f(x):\\n    return math.sqrt(x) * scale"  # the learner used `scale`
>>> sorted(skippable(nb, ("f",)))
[4]
"""

from __future__ import annotations

import ast
import builtins
import re
import symtable
import threading
from collections.abc import Iterable, Iterator

import nbformat

TAG = "demonstration"
"""The cell tag of a demonstration the grader may skip."""

DEMONSTRATIONS: dict[str, frozenset[str]] = {
    "01_dot_product_attention": frozenset({
        "sentence", "sentence-plot", "one-query", "one-query-plot", "three-ways", "ex1-look",
        "naive-softmax", "ex2-cases", "ex2-look", "ex3-look", "ex3-bank", "convex-check", "convex-plot",
        "perm-check", "perm-plot", "cost-formula", "cost-run", "cost-plot", "recurrence-measure",
    }),
    "02_scaling": frozenset({
        "problem", "hist", "variance", "sentence-look", "saturation", "jacobian", "gradient",
        "explorer", "grid", "explorer-measure",
    }),
    "03_causal_masking": frozenset({
        "look-unmasked", "look-causal", "measure-causal", "inf-vs-1e9-demo", "inf-vs-1e9-measure",
        "padded-batch", "combine-look", "bert-mlm", "look-attention", "mask-explorer", "mask-grid",
        "mask-explorer-measure", "heads-shapes", "measure-padding", "left-padding", "leakage-layer",
        "leakage-jacobian", "perturb", "bottom-right-look", "bottom-right-measure", "vs-torch-shapes",
        "timing",
    }),
    "04_multi_head_attention": frozenset({
        "block-identities", "einops-grammar", "bug-values", "bug-leak", "loop", "torch-compare",
        "cross-compare", "hand-made", "param-count", "flops",
    }),
    "05_rope": frozenset({
        "dda356a0", "3a36185c", "1aa6d0ba", "c7d14734", "b010512e", "aa260b9f", "e8fe4f98", "b30af150",
        "67e338e4", "8015d0bd", "e26e35f0", "d29d97fe", "6a4c03b8", "9ba63a68", "7dbbe1cd", "44178d1b",
    }),
    "06_flash_attention": frozenset({
        "38e770d2", "ff1a84e9", "21bfd93c", "8ec63af8", "9b3502b0", "0d229a74", "450b028d", "when-not",
        "profile-code",
    }),
    "07_kv_cache": frozenset({
        "0dcecc50", "c0f9935a", "9efb07d7", "1a98e6ce", "5780aa3d", "43f77b28", "1386ffe2", "7520c99f",
        "08c294fd", "ex4-colleague-test", "6762fddb", "2062fdc7", "60c25d83", "4c8c6a59", "9831df85",
    }),
    "08_triton_flash_attention": frozenset({
        "b5796fc3", "8ef0e7ff", "db9650df", "3bd1e38e", "99fc24b2", "36223e93", "b814607d", "fc31f0e2",
        "7b316b24", "93d5985e", "09f461f9",
    }),
    "09_backward": frozenset({
        "0d48a647", "b52a432a", "403e8cf0", "084c06b3", "bc5cb255", "44cf23ce", "7e65755c",
    }),
    "10_modern_attention": frozenset({
        "9c894859", "3f3764d0", "9b11c6d4", "3c4df506", "534373cc", "f0af8710", "3789f6f0", "4006ccbb",
        "d9244f38", "aeda18cb", "6e10d42f", "b1137bc4", "af405a4b", "aafa566f", "50f4e058",
        "54e03ef9",
    }),
    "11_attention_at_scale": frozenset({
        "b1a70006", "b2a70006", "b2a70008", "b3a10005", "b3a10006", "b3a10008", "c4a10006", "c4a1000b",
        "c4a1000d", "c4a1000f", "d5a10002", "d5a1000b", "d5a1000d", "d5a1000f",
    }),
}  # fmt: skip
"""The cells (by id) the course tags `demonstration`, per notebook: a notebook downloaded before the tags
were added, or saved by an editor that drops cell metadata but keeps ids, is graded as fast.
tests/test_grading_demonstrations.py keeps this equal to the tags in solutions/."""

_OPAQUE = frozenset({"globals", "locals", "vars", "eval", "exec", "get_ipython", "__import__"})
"""Names whose use reads variables no source names: no tagged cell above it is skipped."""

_CHECK_CELL = re.compile(r"^\s*check_\w+\(\s*\w+\s*\)\s*;?\s*$")


_PARSING = threading.Lock()
"""One cell parsed at a time in this process: the grader reads notebooks on several threads, and CPython
3.11 keeps the AST constructor's recursion depth in state its threads share (gh-106905), so two cells
converted at once can raise "SystemError: AST constructor recursion depth mismatch"."""


def _python(source: str) -> tuple[str, ast.Module] | None:
    """The cell's source as Python (IPython's magics and shell escapes translated), and its syntax
    tree; None if unreadable."""
    try:
        from IPython.core.inputtransformer2 import TransformerManager

        source = TransformerManager().transform_cell(source)
    except Exception:  # IPython absent or the transform failed: read the source as it is
        pass
    try:
        with _PARSING:
            tree = ast.parse(source)
            symtable.symtable(source, "<cell>", "exec")  # the same errors now, not later
    except (SyntaxError, ValueError):
        return None
    return source, tree


def _root(node: ast.expr) -> ast.expr:
    """`model` of `model.blocks[0].weight`."""
    while isinstance(node, (ast.Attribute, ast.Subscript)):
        node = node.value
    return node


def _scopes(table: symtable.SymbolTable) -> Iterator[symtable.SymbolTable]:
    yield table
    for child in table.get_children():
        yield from _scopes(child)


def _bound(source: str, tree: ast.Module) -> set[str] | None:
    """Global names a cell binds or changes by assignment (`x = `, `x.a = `, `x[i] += `, `global x`
    in a function, conservatively: `x.a = ` on a local `x` counts too); None for a star import."""
    names: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and any(alias.name == "*" for alias in node.names):
            return None
        if isinstance(node, (ast.Attribute, ast.Subscript)) and isinstance(node.ctx, (ast.Store, ast.Del)):
            root = _root(node)
            if isinstance(root, ast.Name):
                names.add(root.id)
    for scope in _scopes(symtable.symtable(source, "<cell>", "exec")):
        module = scope.get_type() == "module"
        for symbol in scope.get_symbols():
            if (module or symbol.is_declared_global()) and (symbol.is_assigned() or symbol.is_imported()):
                names.add(symbol.get_name())
    return names


def _read(source: str) -> set[str]:
    """Global names a cell reads, in its top level, function bodies, default values and classes."""
    names = set()
    for scope in _scopes(symtable.symtable(source, "<cell>", "exec")):
        module = scope.get_type() == "module"
        for symbol in scope.get_symbols():
            if symbol.is_referenced() and (module or symbol.is_global()):
                names.add(symbol.get_name())
    return names


def tagged(cell: nbformat.NotebookNode, stem: str = "") -> bool:
    """Whether `cell` is a demonstration: tagged so, or (for course notebook `stem`) with the id of one."""
    return TAG in (cell.get("metadata", {}).get("tags") or []) or cell.get("id") in DEMONSTRATIONS.get(
        stem, ()
    )


def skippable(notebook: nbformat.NotebookNode, exercises: Iterable[str], stem: str = "") -> set[int]:
    """Indices of the code cells the grader need not run: demonstrations (`tagged`) needed by no cell
    it runs after them."""
    exercises = tuple(exercises)
    builtin = set(dir(builtins))
    needed: set[str] = set()
    opaque = False
    skip: set[int] = set()
    for index in range(len(notebook.cells) - 1, -1, -1):
        cell = notebook.cells[index]
        if cell.cell_type != "code" or not cell.source.strip():
            continue
        python = _python(cell.source)
        if python is not None and tagged(cell, stem) and not opaque and not _CHECK_CELL.match(cell.source):
            bound = _bound(*python)
            if bound is not None and not bound & set(exercises) and not bound & needed:
                skip.add(index)
                continue
        if python is None:
            opaque = True  # a cell we cannot read may read anything above it
            continue
        read = _read(python[0])
        opaque = opaque or bool(read & _OPAQUE)
        needed |= read - builtin
    return skip
