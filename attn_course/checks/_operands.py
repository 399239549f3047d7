"""Which two operands of the learner's failing line clash, read from the line and its frame.

torch says "the size of tensor a (2) must match the size of tensor b (4) at non-singleton
dimension 0" without naming a or b. The tensors a line names are not always what an operation
got: `q @ k.T` multiplies `k.T`, not `k`, and `allowed & causal_mask(t)` a tensor no name holds.
This module finds the operations of the line (`@`, `*`, `&`, `masked_fill`, `torch.where`, ...),
works out each operand's value where that needs nothing of the learner's to run (a name, an
attribute, an index made of names and numbers, a transpose or unsqueeze), and keeps the pairs whose
sizes are the two torch reports, so that a message describes the operands actually combined.
"""

from __future__ import annotations

import ast
import io
import operator
import tokenize
import warnings
from typing import Any

import torch

_BINARY = {
    ast.Add: operator.add,
    ast.Sub: operator.sub,
    ast.Mult: operator.mul,
    ast.FloorDiv: operator.floordiv,
}
_ELEMENTWISE = (ast.Add, ast.Sub, ast.Mult, ast.Div, ast.FloorDiv, ast.Mod, ast.Pow, ast.MatMult,
                ast.BitAnd, ast.BitOr, ast.BitXor)  # fmt: skip
_PAIRED_METHODS = {"masked_fill", "masked_fill_", "add", "sub", "mul", "div", "matmul", "logical_and",
                   "logical_or", "maximum", "minimum", "where", "expand_as"}  # fmt: skip
_SHAPE_METHODS = {"transpose", "swapaxes", "permute", "unsqueeze", "squeeze", "t", "float", "double",
                  "bool", "contiguous", "clone", "detach", "flatten"}  # fmt: skip
_LONGEST = 70


def without_comment(line: str) -> str:
    """The line without its comment: a name in `# v is not rotated` is not on the line."""
    try:
        for token in tokenize.generate_tokens(io.StringIO(line).readline):
            if token.type == tokenize.COMMENT:
                return line[: token.start[1]]
    except (tokenize.TokenError, SyntaxError):  # a line of a longer statement: its comment came first
        pass
    return line


def index_value(node: ast.AST, scope: dict[str, Any]) -> Any:
    """The value of an index made of names, numbers, slices and arithmetic (ValueError otherwise)."""
    if isinstance(node, ast.Constant) and (node.value is Ellipsis or node.value is None or
                                           isinstance(node.value, int)):  # fmt: skip
        return node.value
    if isinstance(node, ast.Name) and isinstance(scope.get(node.id), int):
        return scope[node.id]
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.USub):
        return -index_value(node.operand, scope)
    if isinstance(node, ast.BinOp) and type(node.op) in _BINARY:
        return _BINARY[type(node.op)](index_value(node.left, scope), index_value(node.right, scope))
    if isinstance(node, ast.Slice):
        parts = (node.lower, node.upper, node.step)
        return slice(*(None if part is None else index_value(part, scope) for part in parts))
    if isinstance(node, ast.Tuple):
        return tuple(index_value(element, scope) for element in node.elts)
    raise ValueError("not a plain index")


def operand_value(node: ast.AST, scope: dict[str, Any]) -> Any:
    """What an operand expression gives, where working it out runs nothing of the learner's, or None."""
    with warnings.catch_warnings():  # torch's warnings about `k.T` are the learner's line's, not ours
        warnings.simplefilter("ignore")
        return _operand_value(node, scope)


def _operand_value(node: ast.AST, scope: dict[str, Any]) -> Any:
    try:
        if isinstance(node, ast.Name):
            return scope.get(node.id)
        if isinstance(node, ast.UnaryOp) and isinstance(node.op, (ast.Invert, ast.USub)):
            base = _operand_value(node.operand, scope)
            return base if isinstance(base, torch.Tensor) else None  # same shape
        if isinstance(node, ast.Attribute):
            base = _operand_value(node.value, scope)
            if isinstance(base, torch.Tensor):
                return getattr(base, node.attr) if node.attr in ("T", "mT", "H", "mH") else None
            if isinstance(base, torch.nn.Module):  # its tensors live in _parameters and _buffers
                value = getattr(base, node.attr, None)
                return value if isinstance(value, torch.Tensor) else None
            return None
        if isinstance(node, ast.Subscript):
            base = _operand_value(node.value, scope)
            return base[index_value(node.slice, scope)] if isinstance(base, torch.Tensor) else None
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute):
            if node.func.attr not in _SHAPE_METHODS:
                return None
            base = _operand_value(node.func.value, scope)
            if not isinstance(base, torch.Tensor):
                return None
            args = [index_value(a, scope) for a in node.args]
            kwargs = {k.arg: index_value(k.value, scope) for k in node.keywords if k.arg}
            return getattr(base, node.func.attr)(*args, **kwargs)
    except Exception:  # noqa: BLE001 - an expression this cannot follow is an unknown operand
        return None
    return None


def _pairs(tree: ast.AST, scope: dict[str, Any]) -> list[tuple[ast.AST, ast.AST]]:
    """The (left, right) operand expressions of each operation of the line that pairs two tensors."""
    found: list[tuple[ast.AST, ast.AST]] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.BinOp) and isinstance(node.op, _ELEMENTWISE):
            found.append((node.left, node.right))
        elif isinstance(node, ast.AugAssign) and isinstance(node.op, _ELEMENTWISE):
            found.append((node.target, node.value))
        elif isinstance(node, ast.Compare) and len(node.comparators) == 1:
            found.append((node.left, node.comparators[0]))
        elif isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute):
            if node.func.attr not in _PAIRED_METHODS:
                continue
            if isinstance(operand_value(node.func.value, scope), torch.Tensor):  # x.masked_fill(m, ...)
                found.extend((node.func.value, arg) for arg in node.args[:1])
            else:  # torch.where(c, x, y), torch.matmul(a, b)
                found.extend((x, y) for i, x in enumerate(node.args[:3]) for y in node.args[i + 1 : 3])
    return found


def _size_at(shape: tuple[int, ...], axis: int, ndim: int) -> int | None:
    """The size `shape` gives to axis `axis` of a broadcast result with `ndim` axes (None: none)."""
    position = axis - (ndim - len(shape))
    return shape[position] if 0 <= position < len(shape) else None


def clashes(x: tuple[int, ...], y: tuple[int, ...], a: int, b: int, axis: int) -> bool:
    """Whether shapes x and y meet with sizes a and b at axis `axis` of their broadcast (elementwise,
    or on the batch axes of a matrix product), as torch reports it."""
    for left, right in ((x, y), (x[:-2], y[:-2])):
        ndim = max(len(left), len(right))
        if {_size_at(left, axis, ndim), _size_at(right, axis, ndim)} == {a, b}:
            return True
    return False


def held_size(shape: tuple[int, ...], a: int, b: int, axis: int) -> int | None:
    """Which of a and b a tensor of `shape` holds at axis `axis` of the result, the other operand
    unseen (elementwise, with no axis added in front; or on the batch axes of a product)."""
    for sizes in (shape, shape[:-2]):
        if (size := _size_at(sizes, axis, len(sizes))) in (a, b):
            return size
    return None


def _root_name(node: ast.AST) -> str | None:
    """The name an operand is made of by indexing, an attribute or a shape method (`k.transpose(-2, -1)`
    is k's), or None for anything else (a call, a product)."""
    while True:
        if isinstance(node, ast.Name):
            return node.id
        if isinstance(node, ast.Attribute | ast.Subscript):
            node = node.value
        elif isinstance(node, ast.UnaryOp):
            node = node.operand
        elif (
            isinstance(node, ast.Call)
            and isinstance(node.func, ast.Attribute)
            and node.func.attr in _SHAPE_METHODS
        ):
            node = node.func.value
        else:
            return None


def operand_names(code: str, scope: dict[str, Any]) -> set[frozenset[str]] | None:
    """The pairs of names that some operation of the line combines directly (each maybe indexed or
    transposed): `q @ k.T + a @ b` combines {q, k} and {a, b}, never {q, b}. None where the line does
    not parse on its own (a line of a longer statement)."""
    try:
        tree = ast.parse(code.strip().removesuffix(":"), mode="exec")
    except SyntaxError:
        return None
    found = set()
    for left, right in _pairs(tree, scope):
        x, y = _root_name(left), _root_name(right)
        if x is not None and y is not None:
            found.add(frozenset((x, y)))
    return found


def _text(node: ast.AST) -> str:
    text = ast.unparse(node)
    return text if len(text) <= _LONGEST else text[: _LONGEST - 1] + "…"


def failing_operands(
    code: str, scope: dict[str, Any], a: int, b: int, axis: int
) -> tuple[str, torch.Tensor, str, torch.Tensor | None] | None:
    """The operands of the line's operation whose sizes meet as torch reports: (text, value) of each,
    both worked out, or the second one None where it cannot be without running the learner's code
    (then the first one holds a or b at `axis`). None where no operation of the line fits."""
    try:
        tree = ast.parse(code.strip().removesuffix(":"), mode="exec")
    except SyntaxError:
        return None
    half_known: list[tuple[str, torch.Tensor, str, None]] = []
    for left, right in _pairs(tree, scope):
        x, y = operand_value(left, scope), operand_value(right, scope)
        if isinstance(x, torch.Tensor) and isinstance(y, torch.Tensor):
            if clashes(tuple(x.shape), tuple(y.shape), a, b, axis):
                return _text(left), x, _text(right), y
            continue
        for node, known, other, unknown in ((left, x, right, y), (right, y, left, x)):
            if not isinstance(known, torch.Tensor) or unknown is not None or isinstance(other, ast.Constant):
                continue
            if held_size(tuple(known.shape), a, b, axis) is not None:
                half_known.append((_text(node), known, _text(other), None))
    return half_known[-1] if half_known else None  # the innermost: its operation runs first
