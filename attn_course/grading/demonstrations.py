"""Which of a submitted notebook's cells the grader may leave unrun: demonstrations nothing graded needs.

The course's notebooks tag their look, measure and train cells `demonstration` (in the cell's
metadata): they show the learner what their code does, and no grade depends on what they print.
A learner's notebook runs them as any other cell; the grader skips a tagged cell unless something
it does run may need it. It runs every cell that defines an exercise, every check cell, every
untagged cell, and every tagged cell that binds a name one of those later cells reads (in the
learner's source as handed in, function bodies and default values included), and so on backwards:
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
from collections.abc import Iterable, Iterator

import nbformat

TAG = "demonstration"
"""The cell tag of a demonstration the grader may skip."""

_OPAQUE = frozenset({"globals", "locals", "vars", "eval", "exec", "get_ipython", "__import__"})
"""Names whose use reads variables no source names: no tagged cell above it is skipped."""

_CHECK_CELL = re.compile(r"^\s*check_\w+\(\s*\w+\s*\)\s*;?\s*$")


def _python(source: str) -> tuple[str, ast.Module] | None:
    """The cell's source as Python (IPython's magics and shell escapes translated), and its syntax
    tree; None if unreadable."""
    try:
        from IPython.core.inputtransformer2 import TransformerManager

        source = TransformerManager().transform_cell(source)
    except Exception:  # IPython absent or the transform failed: read the source as it is
        pass
    try:
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


def skippable(notebook: nbformat.NotebookNode, exercises: Iterable[str]) -> set[int]:
    """Indices of the code cells the grader need not run: tagged, and needed by no cell it runs after them."""
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
        tagged = TAG in (cell.get("metadata", {}).get("tags") or [])
        if python is not None and tagged and not opaque and not _CHECK_CELL.match(cell.source):
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
