"""Every mistake a check can name is named, in some test, for a wrong answer written as a learner writes it.

The mistakes are collected from the checks' source: each `Mistake(message, ...)` call and each
module-level `_..._MISTAKES` table of (message, knobs). The learner cases are the tables of wrong
answers in the check tests (learner code with text edits, hand-written wrong functions, Triton
kernels with one edit), each with the phrase its check's message must contain; a mistake is covered
when one of those phrases is part of its message (the message's fixed text, for a formatted one).
"""

from __future__ import annotations

import ast
import importlib
from pathlib import Path
from typing import Any

import pytest

import attn_course.checks

CHECKS_DIR = Path(attn_course.checks.__file__).parent
HOLE = "\0"  # stands for a formatted value in a message

LEARNER_TABLES = {
    "test_checks_learner_mistakes": ["DEVELOPMENT", "HOLD_OUT", "SOLUTION_CELL_EDITS"],
    "test_checks_holdout2": ["PHRASES"],
    "test_checks_masking": ["WRONG", "LEARNER_WRONG", "CONTRACT_WRONG"],
    "test_checks_heads": ["WRONG", "LEARNER_WRONG", "REASONED_WRONG", "CONTRACT_WRONG"],
    "test_checks_rope": ["WRONG", "LEARNER_WRONG", "REASONED_WRONG", "CONTRACT_WRONG"],
    "test_checks_kv_cache": ["WRONG", "LEARNER_WRONG"],
    "test_checks_decoder": ["WRONG"],
    "test_checks_generation": ["WRONG"],
    "test_checks_attention": ["WRONG", "CONTRACT_WRONG"],
    "test_checks_modern": ["WRONG"],
    "test_checks_flash": [
        "ONLINE_SOFTMAX_MISTAKES", "FLASH_MISTAKES", "LSE_MISTAKES", "QUERY_BLOCK_MISTAKES",
        "SKELETON_MISTAKES",
    ],
    "test_checks_backward": [
        "FLASH_REJECTED", "SOFTMAX_BACKWARD_WRONG", "ATTENTION_BACKWARD_WRONG", "FUNCTION_WRONG",
    ],
    "test_checks_triton": [
        "ADD_REJECTED", "SOFTMAX_REJECTED", "FLASH_REJECTED", "FLASH_LSE_REJECTED", "UNTRACED_REJECTED",
        "TRITON_HOLD_OUT", "SCORES_REJECTED",
    ],
    "test_checks_triton_backward": ["REJECTED", "KERNELS_REJECTED", "WRAPPER_REJECTED"],
    "test_checks_rotary_window": ["WRONG"],
    "test_checks_rolling_window": ["WRONG"],
    "test_checks_paged_cache": ["WRONG"],
    "test_checks_blind_a": ["BLIND_A"],
    "test_checks_merging": ["WRONG"],
    "test_checks_latent": ["PLAIN_WRONG", "ABSORBED_WRONG"],
    "test_checks_ring": ["WRONG"],
}  # fmt: skip
"""Test module -> its tables of wrong answers written as learners write them."""


def _text(node: ast.AST) -> str | None:
    """A message's fixed text, with HOLE for each formatted value; None when it is not a literal."""
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return node.value
    if isinstance(node, ast.JoinedStr):
        return "".join(v.value if isinstance(v, ast.Constant) else HOLE for v in node.values)
    if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Add):
        left, right = _text(node.left), _text(node.right)
        return None if left is None and right is None else (left or HOLE) + (right or HOLE)
    if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == "format":
        base = _text(node.func.value)
        return None if base is None else HOLE.join(part.split("}")[-1] for part in base.split("{"))
    return None


def _tables_of(tree: ast.Module, iterable: ast.AST) -> list[ast.AST]:
    """The list and tuple literals a comprehension's iterable may come from, by name or by function."""
    name = iterable.id if isinstance(iterable, ast.Name) else None
    called = isinstance(iterable, ast.Call) and isinstance(iterable.func, ast.Name)
    function = iterable.func.id if called else None
    found: list[ast.AST] = []
    for node in ast.walk(tree):
        if name and isinstance(node, ast.Assign | ast.AnnAssign):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            if any(getattr(t, "id", None) == name for t in targets) and node.value is not None:
                found.append(node.value)
        if function and isinstance(node, ast.FunctionDef) and node.name == function:
            found.append(node)
    return found or [tree]  # a parameter: any table of the module with elements of the right shape


def check_mistakes() -> dict[str, str]:
    """Every mistake message of the checks' source, by 'module:line'."""
    found: dict[str, str] = {}
    for path in sorted(CHECKS_DIR.glob("*.py")):
        tree = ast.parse(path.read_text())
        constants = {
            target.id: _text(node.value)
            for node in tree.body
            if isinstance(node, ast.Assign)
            for target in node.targets
            if isinstance(target, ast.Name) and _text(node.value) is not None
        }
        for node in ast.walk(tree):
            if not isinstance(node, ast.ListComp | ast.GeneratorExp | ast.Call):
                continue
            if isinstance(node, ast.Call):
                if getattr(node.func, "id", None) == "Mistake" and node.args:
                    argument = node.args[0]
                    text = _text(argument)
                    if text is None and isinstance(argument, ast.Name):
                        text = constants.get(argument.id)
                    if text is not None:
                        found[f"{path.stem}:{node.lineno}"] = text
                continue
            call = node.elt
            if not (isinstance(call, ast.Call) and getattr(call.func, "id", None) == "Mistake" and call.args):
                continue
            argument, target = call.args[0], node.generators[0].target
            if not (isinstance(argument, ast.Name) and isinstance(target, ast.Tuple)):
                continue  # e.g. m.message of Mistakes made elsewhere: collected where they are made
            names = [getattr(t, "id", None) for t in target.elts]
            index = names.index(argument.id)
            for table in _tables_of(tree, node.generators[0].iter):
                for element in ast.walk(table):
                    if isinstance(element, ast.Tuple) and len(element.elts) == len(names):
                        text = _text(element.elts[index])
                        if text is not None and len(text) >= 30:
                            found[f"{path.stem}:{element.lineno}"] = text
    return found


def _phrases(case: Any) -> list[str]:
    """The one-line strings at the top level of a case: its phrase (edits are nested, code spans lines)."""
    values = getattr(case, "values", case)  # a pytest.param, or the case itself
    if isinstance(values, str):
        values = (values,)
    if not isinstance(values, tuple | list):
        return []
    return [v for v in values if isinstance(v, str) and "\n" not in v and len(v) >= 8]


def learner_phrases() -> list[str]:
    phrases: list[str] = []
    for module_name, tables in LEARNER_TABLES.items():
        try:
            module = importlib.import_module(module_name)
        except pytest.skip.Exception:  # Triton missing: its kernels' cases are not available
            continue
        for table in tables:
            cases = getattr(module, table)
            for case in cases.values() if isinstance(cases, dict) else cases:
                phrases += _phrases(case)
    return phrases


def _covered(message: str, phrases: list[str]) -> bool:
    return any(phrase in part for phrase in phrases for part in message.split(HOLE))


def test_every_mistake_a_check_names_has_a_learner_written_wrong_case():
    pytest.importorskip("triton")
    phrases = learner_phrases()
    mistakes = check_mistakes()
    uncovered = {where: message for where, message in mistakes.items() if not _covered(message, phrases)}
    assert not uncovered, "mistakes no learner-written case gets named:\n" + "\n".join(
        f"  {where}: {message[:100]!r}" for where, message in uncovered.items()
    )


def test_the_collector_finds_the_mistakes_of_every_checks_module_that_has_them():
    modules = {where.split(":")[0] for where in check_mistakes()}
    assert {"attention", "masking", "heads", "rope", "kv_cache", "flash", "modern", "_simulate"} <= modules
    assert len(check_mistakes()) >= 160  # 163 when written: a collector that loses tables fails here
