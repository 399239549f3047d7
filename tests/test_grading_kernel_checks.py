"""The grader's in-kernel side on classes and wrappers: the reference is refused, own code passes.

Runs in a subprocess, because `kernel_checks.setup` re-imports `attn_course` the way it does in a
learner's kernel, and the learner's code must live outside the package (here: a script file).
"""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

import attn_course
from attn_course.grading.kernel_checks import MARKER

PACKAGE_PARENT = str(Path(attn_course.__file__).resolve().parents[1])

LEARNER = textwrap.dedent(
    """
    import functools
    import sys

    import torch
    from einops import rearrange
    from torch import nn

    from attn_course import heads, reference, rope
    from attn_course.attention import attention
    from attn_course.grading import kernel_checks

    kernel_checks.setup(sys.argv[1], "n0nce")


    class OwnMultiHeadAttention(nn.Module):
        def __init__(self, d_model, n_heads, bias=True):
            super().__init__()
            self.n_heads = n_heads
            self.qkv = nn.Linear(d_model, 3 * d_model, bias=bias)
            self.out = nn.Linear(d_model, d_model, bias=bias)

        def forward(self, x, mask=None, is_causal=False, context=None):
            q, k, v = self.qkv(x).chunk(3, dim=-1)  # each (b, t, d_model)
            if context is not None:  # cross-attention: keys and values from the context
                _, k, v = self.qkv(context).chunk(3, dim=-1)  # each (b, t_k, d_model)
            q, k, v = (rearrange(z, "b t (h d) -> b h t d", h=self.n_heads) for z in (q, k, v))
            mask = None if mask is None else mask.unsqueeze(-3)  # (b, 1, t, t)
            out, _ = attention(q, k, v, mask=mask, is_causal=is_causal)  # (b, h, t, d_k)
            return self.out(rearrange(out, "b h t d -> b t (h d)"))  # (b, t, d_model)


    class SubclassOfTheReference(heads.MultiHeadAttention):
        pass


    class WrapsTheReference(nn.Module):
        def __init__(self, d_model, n_heads, bias=True):
            super().__init__()
            self.inner = heads.MultiHeadAttention(d_model, n_heads, bias)
            self.qkv, self.out = self.inner.qkv, self.inner.out

        def forward(self, x, mask=None, is_causal=False, context=None):
            return self.inner(x, mask=mask, is_causal=is_causal, context=context)


    class OwnRotary(heads.MultiHeadAttention):  # builds on notebook 04's layer: allowed
        def __init__(self, d_model, n_heads, bias=True, base=10000.0):
            super().__init__(d_model, n_heads, bias=bias)
            self.base = base

        def forward(self, x, mask=None, is_causal=False, positions=None):
            q, k, v = self.project(x)  # each (b, h, t, d_k)
            q, k = rope.apply_rope(q, positions, self.base), rope.apply_rope(k, positions, self.base)
            mask = None if mask is None else mask.unsqueeze(-3)  # (b, 1, t, t)
            out, _ = attention(q, k, v, mask=mask, is_causal=is_causal)  # (b, h, t, d_k)
            return self.out(rearrange(out, "b h t d -> b t (h d)"))  # (b, t, d_model)


    class SubclassOfTheRotaryReference(rope.RotaryMultiHeadAttention):
        pass


    CASES = {
        "own MultiHeadAttention": ("MultiHeadAttention", OwnMultiHeadAttention),
        "the reference class": ("MultiHeadAttention", reference.MultiHeadAttention),
        "a subclass of the reference": ("MultiHeadAttention", SubclassOfTheReference),
        "a wrapper around the reference": ("MultiHeadAttention", WrapsTheReference),
        "own RotaryMultiHeadAttention": ("RotaryMultiHeadAttention", OwnRotary),
        "a subclass of the rotary reference": ("RotaryMultiHeadAttention", SubclassOfTheRotaryReference),
        "a lambda calling the reference": ("split_heads", lambda x, n: reference.split_heads(x, n)),
        "a later exercise's reference": (
            "scaled_dot_product_attention",
            functools.partial(reference.attention, mask=None),
        ),
    }
    for label, (name, candidate) in CASES.items():
        print("CASE", label)
        kernel_checks.grade_exercise(name, {name: candidate})

    def failing_through(upstream):
        def check_attention(candidate):  # the checks' side: right with the course's `upstream`
            failure = kernel_checks._state["checks"].CheckFailed(
                f"`attention` is right, but fails through your `{upstream}`: compare them."
            )
            failure.upstream = upstream
            raise failure

        return check_attention


    for upstream in ("causal_mask", "MultiHeadAttention", "no_such_exercise"):
        kernel_checks._state["checks"].check_attention = failing_through(upstream)
        print("CASE failing through", upstream)
        kernel_checks.grade_exercise("attention", {"attention": lambda q, k, v, mask=None: q})

    from attn_course.checks._harness import check


    @check
    def check_softmax(candidate):  # a bug in the course's checker
        return {}["missing"]


    kernel_checks._state["checks"].check_softmax = check_softmax
    print("CASE a checker that fails")
    kernel_checks.grade_exercise("softmax", {"softmax": lambda x, dim=-1: x.softmax(dim)})
    """
)

EXPECTED = {
    "own MultiHeadAttention": (True, "passed"),
    "the reference class": (False, "is the course's reference implementation"),
    "a subclass of the reference": (False, "is the course's reference implementation"),
    "a wrapper around the reference": (False, "calls the course's reference implementation"),
    "own RotaryMultiHeadAttention": (True, "passed"),
    "a subclass of the rotary reference": (False, "is the course's reference implementation"),
    "a lambda calling the reference": (False, "calls the course's reference implementation"),
    "a later exercise's reference": (False, "the reference of the later exercise `attention`"),
}


@pytest.fixture(scope="module")
def graded(tmp_path_factory) -> dict[str, dict]:
    script = tmp_path_factory.mktemp("learner") / "learner.py"
    script.write_text(LEARNER)
    run = subprocess.run(
        [sys.executable, str(script), PACKAGE_PARENT], capture_output=True, text=True, timeout=120
    )
    assert run.returncode == 0, run.stderr
    results, label = {}, None
    for line in run.stdout.splitlines():
        if line.startswith("CASE "):
            label = line.removeprefix("CASE ")
        elif line.startswith(f"{MARKER}-n0nce "):
            payload = json.loads(line.split(" ", 1)[1])
            if "exercise" in payload:
                results[label] = payload
            else:
                assert payload["ok"], payload  # setup found the package untampered
    return results


def test_a_check_failing_only_through_an_earlier_exercise_gives_the_points(graded):
    """One mistake, one point: `CheckFailed.upstream` names an earlier exercise (the checks' side)."""
    result = graded["failing through causal_mask"]
    assert result["passed"] is True and result["upstream"] == "causal_mask"
    assert result["message"] == "`attention` is right, but fails through your `causal_mask`: compare them."
    for later_or_unknown in ("MultiHeadAttention", "no_such_exercise"):  # never a later exercise
        result = graded[f"failing through {later_or_unknown}"]
        assert result["passed"] is False and result["upstream"] == "", result


def test_an_exercise_right_through_an_earlier_one_keeps_its_points_and_says_so():
    from attn_course.grading.report import feedback_text
    from attn_course.grading.results import ExerciseResult, LearnerResult, NotebookResult

    message = "`attention` is right, but fails through your `causal_mask`: compare them."
    through = ExerciseResult.success("attention", message, upstream="causal_mask")
    wrong = ExerciseResult.failed("causal_mask", "your mask is inverted")
    notebook = NotebookResult("03_causal_masking", "graded", "", (wrong, through))
    learner = LearnerResult("dana", (notebook,))
    assert learner.total == 1 and learner.score("attention") == 1
    text = feedback_text(learner, 2)
    assert f"- `attention` right; failed through your `causal_mask`: {message}" in text


def test_a_failing_checker_leaves_the_exercise_not_graded(graded):
    result = graded["a checker that fails"]
    assert result["not_graded"] is True and result["passed"] is False
    assert "the checker for `softmax` itself failed" in result["message"]


def test_the_grader_lists_exercises_not_graded_and_feedback_says_so():
    from attn_course.grading.grader import checker_failures
    from attn_course.grading.report import feedback_text, summary
    from attn_course.grading.results import ExerciseResult, GradeReport, LearnerResult, NotebookResult

    broken = ExerciseResult.not_graded("softmax", "the checker for `softmax` itself failed (KeyError)")
    notebook = NotebookResult(
        "01_dot_product_attention", "graded", "", (ExerciseResult.success("dot_product_scores", "ok"), broken)
    )
    learner = LearnerResult("ada", (notebook,))
    failures = checker_failures((learner,))
    assert failures == (
        "ada/01_dot_product_attention.ipynb: `softmax` not graded: the checker for `softmax` itself "
        "failed (KeyError)",
    )
    report = GradeReport((learner,), ("dot_product_scores", "softmax"), 2, failures=failures)
    assert "`softmax` not graded" in summary(report)
    assert "`softmax` **not graded**: the checker" in feedback_text(learner, 2)


@pytest.mark.parametrize("label", sorted(EXPECTED))
def test_reference_use_is_refused_and_own_code_passes(graded, label):
    passed, phrase = EXPECTED[label]
    result = graded[label]
    assert result["passed"] is passed, result
    if not passed:
        assert phrase in result["message"], result["message"]


def test_an_autograd_function_reference_has_code_keys_and_is_refused():
    # A torch.autograd.Function subclass holds a generated _backward_cls that points back to it: the
    # reference of notebook 09's FlashAttentionFunction must not send the key search round in circles.
    from attn_course import reference
    from attn_course.grading import kernel_checks

    keys = kernel_checks._code_keys(reference.FlashAttentionFunction)
    assert {name for _, _, name in keys} == {"forward", "backward"}


def test_a_course_kernel_reference_has_the_code_keys_of_its_kernel():
    # Notebook 09's Exercises 5a and 5b are Triton kernels: the course's own, imported from
    # attn_course.triton_flash.kernels and handed in, must show the reference's code to be refused.
    pytest.importorskip("triton")
    from attn_course import reference
    from attn_course.grading import kernel_checks
    from attn_course.triton_flash import kernels

    for name in ("flash_attention_backward_dkdv_kernel", "flash_attention_backward_dq_kernel"):
        keys = kernel_checks._code_keys(getattr(reference, name))
        assert {key[2] for key in keys} == {name}
        assert kernel_checks._code_keys(getattr(kernels, name)) == keys


def test_an_installed_module_reached_through_a_link_is_not_a_shadow(tmp_path):
    """Debian's and Ubuntu's sitecustomize is a link from the stdlib to /etc: no learner file replaces it.
    A file of the same name in another folder that comes first on the path does replace it."""
    trusted, elsewhere, learner = tmp_path / "lib", tmp_path / "etc", tmp_path / "learner"
    for folder in (trusted, elsewhere, learner):
        folder.mkdir()
    (elsewhere / "linkedmod.py").write_text("X = 1\n")
    (trusted / "linkedmod.py").symlink_to(elsewhere / "linkedmod.py")
    (trusted / "ownmod.py").write_text("X = 1\n")
    (learner / "ownmod.py").write_text("X = 2\n")
    probe = textwrap.dedent(
        f"""
        import sys
        sys.path[:0] = [{str(learner)!r}, {str(trusted)!r}]
        import linkedmod, ownmod
        from attn_course.grading.kernel_checks import _shadowed_modules
        print(_shadowed_modules(({str(trusted)!r},)))
        """
    )
    done = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, cwd=tmp_path)
    assert done.stdout.split() == ["['ownmod']"], done.stderr
