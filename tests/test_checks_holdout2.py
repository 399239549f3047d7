"""The second hold-out (tests/learner_mistakes_holdout2.py): 30 learner mistakes written blind.

The mistakes were written from the solution notebooks and the topic modules only, before reading
any check or any test of a check, and committed before they were run (commit 15b21b9). Each is a
text edit of the solution notebook's own exercise cell, loaded the way the notebook defines it.

First measurement, before any check was changed for them: caught 30/30, named 26/30. Not named
then: the lse without the running max (flash_attention: "the log-sum-exp is wrong" and numbers),
the causal loop bound without the offset (triton_flash_attention: blamed on a bound "from the
block's FIRST query"), D summed over the whole tensor (softmax_backward: numbers only), and
probabilities renormalised within each tile (flash_attention_backward: "wrong in every query row").
Judged by the idea, not by a matching word. `NAMED_WHEN_FIRST_RUN` records it per mistake;
`PHRASES` are what the checks say now.

After the checks were changed for them (a log(l)-only lse, a causal bound without T_k - T_q told
apart from one taken at the block's first query by a case whose offset spans two key blocks, D
summed over the whole tensor, P renormalised per tile; and, for the inverted mask, a message that
no longer only lists it among the causes of NaN rows): caught 30/30, named 30/30. These 30 are no
longer a hold-out: the next measurement needs a fresh set, written blind again.
"""

from __future__ import annotations

import pytest
from check_assertions import assert_accepted, assert_rejected
from learner_mistakes_holdout2 import HOLDOUT2, load

import attn_course.checks

NAMED_WHEN_FIRST_RUN = (
    True, True, True, True, True, True, True, True, True, True,  # 0-9
    True, True, True, True, True, False, True, True, True, True,  # 10-19
    True, False, False, True, False, True, True, True, True, True,  # 20-29
)  # fmt: skip

PHRASES = (
    "They are transposed: rows are queries and columns keys",
    "changed one of its input tensors in place",
    "normalised over the queries (softmax over dim=-2)",
    "Dividing by d_k makes it ≈ 1/d_k",
    "scaled by the square root of the number of keys",
    "is aligned top-left",
    "marks one position too many in each row",
    "the mask used the wrong way round",
    "groups the features as (d h)",
    "without moving the heads back behind the tokens",
    "insert a head axis just before the last two",
    "uses the exponent -i/d",
    "rotates the wrong way",
    "also rotates the values v",
    "does not rescale the running sum when the maximum grows",
    "is log(l) alone, without the running maximum",
    "aligns the causal mask top-left",
    "every instance shares the same dicts or lists",
    "rotates the new tokens as if they started at position 0",
    "n // BLOCK rounds down and leaves the tail out",
    "counts the padding of the last block",
    "stops the causal key loop at the block's own rows, without T_k - T_q",
    "subtracts one sum over the whole tensor",
    "forgets the 1/√d scale in dK",
    "normalises P within each tile",
    "returned an incorrect number of gradients",
    "repeats the heads interleaved instead of grouped",
    "lets each query see window + 1 keys (off by one)",
    "adds the bias with the wrong sign",
    "leaves out the diagonal",
)
"""The phrase each mistake's message must contain, in HOLDOUT2's order."""

TRITON = {"triton_add", "triton_softmax", "triton_flash_attention"}


@pytest.fixture(scope="module")
def folder(tmp_path_factory):
    return tmp_path_factory.mktemp("holdout2")


def _check(exercise):
    return getattr(attn_course.checks, f"check_{exercise}")


# Notebook 06's skeleton masks only the tiles that cross the diagonal; with that, a top-left mask
# equals stopping the loop one block early whenever T_k - T_q is a multiple of the block. The check
# now tries a ragged offset first, so none is misnamed; the set stays for a future known misnaming.
MISNAMED_SINCE_THE_SKELETON: set[int] = set()


def _cases():
    for index, (mistake, phrase) in enumerate(zip(HOLDOUT2, PHRASES, strict=True)):
        marks = (
            [pytest.mark.xfail(strict=True, reason="named as a loop stopped early")]
            if index in MISNAMED_SINCE_THE_SKELETON
            else []
        )
        yield pytest.param(mistake, phrase, id=f"{index}-{mistake.exercise}", marks=marks)


@pytest.mark.parametrize(("mistake", "phrase"), list(_cases()))
def test_blind_mistakes_are_named(mistake, phrase, folder, capsys):
    if mistake.exercise in TRITON:
        pytest.importorskip("triton")
    assert_rejected(_check(mistake.exercise), load(mistake, folder), phrase, capsys)


@pytest.mark.parametrize("exercise", sorted({m.exercise for m in HOLDOUT2}))
def test_the_solution_cells_they_were_made_from_pass(exercise, folder, capsys):
    if exercise in TRITON:
        pytest.importorskip("triton")
    assert_accepted(_check(exercise), load((exercise, None, "", ""), folder), capsys)


def test_the_set_spans_notebooks_01_to_10_and_its_first_measurement_is_recorded():
    stems = {stem for stem, names in attn_course.reference.EXERCISES.items()
             for m in HOLDOUT2 if m.exercise in names}  # fmt: skip
    assert len(stems) == 10
    assert (len(HOLDOUT2), sum(NAMED_WHEN_FIRST_RUN)) == (30, 26)
