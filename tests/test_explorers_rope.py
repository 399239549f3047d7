"""Tests of attn_course/explorers/rope.py: the compute part, and the display without a browser."""

from __future__ import annotations

import math

import matplotlib

matplotlib.use("Agg")

import matplotlib.pyplot as plt  # noqa: E402
import pytest  # noqa: E402
import torch  # noqa: E402

from attn_course.explorers.rope import RopeExplorer, pair_view, rope_pair_grid, score_curve  # noqa: E402
from attn_course.rope import apply_rope, rope_frequencies  # noqa: E402

PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"
D = 16


@pytest.fixture
def qk() -> tuple[torch.Tensor, torch.Tensor]:
    generator = torch.Generator().manual_seed(0)
    q = torch.randn(D, generator=generator, dtype=torch.float64)  # (d,)
    return q, q + 0.3 * torch.randn(D, generator=generator, dtype=torch.float64)  # a key that matches


@pytest.mark.parametrize("index", [0, 3, D // 2 - 1])
@pytest.mark.parametrize(("distance", "shift"), [(0, 0), (1, 0), (-5, 7), (40, 1000)])
def test_pair_view_is_pair_i_of_the_rotated_vectors(qk, index: int, distance: int, shift: int) -> None:
    q, k = qk
    view = pair_view(q, k, index, distance, shift)
    rotated_q = apply_rope(q[None], torch.tensor([shift + distance]))[0]  # (d,)
    rotated_k = apply_rope(k[None], torch.tensor([shift]))[0]  # (d,)
    torch.testing.assert_close(view.q_pair, rotated_q[2 * index : 2 * index + 2])
    torch.testing.assert_close(view.k_pair, rotated_k[2 * index : 2 * index + 2])
    assert view.score == pytest.approx(float(rotated_q @ rotated_k), abs=1e-9)
    assert view.pair_score == pytest.approx(float(view.q_pair @ view.k_pair), abs=1e-12)
    assert view.theta == pytest.approx(rope_frequencies(D)[index].item())
    assert view.angle == pytest.approx(distance * view.theta)


def test_pair_view_turns_the_query_pair_by_the_angle_relative_to_the_key_pair(qk) -> None:
    q, k = qk
    at_zero, at_distance = pair_view(q, k, 2, 0), pair_view(q, k, 2, 9)
    turned = math.atan2(at_distance.q_pair[1], at_distance.q_pair[0]) - math.atan2(
        at_zero.q_pair[1], at_zero.q_pair[0]
    )
    assert math.remainder(turned - at_distance.angle, 2 * math.pi) == pytest.approx(0.0, abs=1e-9)
    torch.testing.assert_close(at_distance.k_pair, at_zero.k_pair)  # the key stayed at position 0
    torch.testing.assert_close(at_distance.q_pair.norm(), at_zero.q_pair.norm())  # a rotation


def test_shifting_both_positions_changes_the_pairs_but_no_score(qk) -> None:
    q, k = qk
    here, there = pair_view(q, k, 1, 6, shift=0), pair_view(q, k, 1, 6, shift=500)
    assert (here.q_pair - there.q_pair).abs().max() > 1e-3
    assert there.pair_score == pytest.approx(here.pair_score, abs=1e-9)
    assert there.score == pytest.approx(here.score, abs=1e-9)


def test_pair_shares_sum_to_the_score(qk) -> None:
    q, k = qk
    views = [pair_view(q, k, i, 11) for i in range(D // 2)]
    assert sum(v.pair_score for v in views) == pytest.approx(views[0].score, abs=1e-9)


def test_score_curve_matches_pair_view(qk) -> None:
    q, k = qk
    distances = torch.arange(-20, 21)  # (n,)
    scores = score_curve(q, k, distances)  # (n,)
    share = score_curve(q, k, distances, index=3)  # (n,)
    assert scores.shape == share.shape == (41,)
    for j, distance in enumerate(distances.tolist()):
        view = pair_view(q, k, 3, distance)
        assert scores[j].item() == pytest.approx(view.score, abs=1e-9)
        assert share[j].item() == pytest.approx(view.pair_score, abs=1e-9)


def test_score_curve_peaks_at_zero_for_a_matching_key(qk) -> None:
    q, _ = qk
    scores = score_curve(q, q, torch.arange(-30, 31))  # (61,)
    assert int(scores.argmax()) == 30
    assert scores[30].item() == pytest.approx(float(q @ q))


def test_compute_part_rejects_bad_inputs(qk) -> None:
    q, k = qk
    with pytest.raises(ValueError, match="pair index"):
        pair_view(q, k, D // 2, 1)
    with pytest.raises(ValueError, match="even size"):
        pair_view(q[:-1], k[:-1], 0, 1)
    with pytest.raises(ValueError, match="same even size"):
        score_curve(q, k[:8], torch.arange(3))


def test_explorer_starts_on_the_first_pair_at_distance_one(qk) -> None:
    q, k = qk
    explorer = RopeExplorer(q, k)
    assert explorer.index_slider.max == D // 2 - 1
    assert (explorer.view.index, explorer.view.distance, explorer.view.shift) == (0, 1, 0)
    assert bytes(explorer.image.value).startswith(PNG_SIGNATURE)
    assert "pair 0" in explorer.readout.value
    for slider in (explorer.index_slider, explorer.distance_slider, explorer.shift_slider):
        assert slider in explorer.widget.children
    plt.close("all")


def test_moving_the_sliders_updates_the_view_and_the_pictures(qk) -> None:
    q, k = qk
    explorer = RopeExplorer(q, k)
    image_before = bytes(explorer.image.value)
    explorer.index_slider.value = 3
    explorer.distance_slider.value = -7
    assert (explorer.view.index, explorer.view.distance) == (3, -7)
    assert explorer.view.pair_score == pytest.approx(pair_view(q, k, 3, -7).pair_score)
    assert bytes(explorer.image.value) != image_before
    assert "pair 3" in explorer.readout.value
    share_line = explorer.curve_ax.get_lines()[1]
    torch.testing.assert_close(
        torch.tensor(share_line.get_ydata(), dtype=torch.float64),
        score_curve(q, k, explorer.distances, index=3),
    )
    score_before = explorer.view.score
    explorer.shift_slider.value = 321
    assert explorer.view.shift == 321
    assert explorer.view.score == pytest.approx(score_before, abs=1e-9)
    assert "n = 321" in explorer.readout.value


def test_explorer_does_not_leave_pyplot_figures_behind(qk) -> None:
    plt.close("all")
    RopeExplorer(*qk).distance_slider.value = 2
    assert plt.get_fignums() == []


def test_rope_pair_grid_draws_one_panel_per_index_and_distance(qk) -> None:
    q, k = qk
    fig = rope_pair_grid(q, k, indices=(0, 5), distances=(0, 1, 8))
    assert len(fig.axes) == 6
    view = pair_view(q, k, 5, 8)
    assert f"{view.pair_score:+.2f}" in fig.axes[5].get_title()
    assert "i = 5, Δ = 8" in fig.axes[5].get_title()
    plt.close(fig)


def test_every_view_rotates_with_the_rope_it_is_given():
    """A notebook passes the learner's apply_rope: every view rotates with it."""
    calls = []

    def learners_rope(x, positions=None, base=10000.0):
        calls.append(base)
        return apply_rope(x, positions, base)

    q, k = torch.ones(8), torch.ones(8)
    view = pair_view(q, k, index=1, distance=3, rope=learners_rope)
    assert calls and view.score == pair_view(q, k, index=1, distance=3).score
    calls.clear()
    curve = score_curve(q, k, torch.arange(4), rope=learners_rope)  # (4,)
    assert torch.equal(curve, score_curve(q, k, torch.arange(4)))
    assert calls
    calls.clear()
    explorer = RopeExplorer(q, k, rope=learners_rope)
    explorer.distance_slider.value = 5
    assert len(calls) >= 6  # the curve, then the first and the moved view (2 each)
    calls.clear()
    plt.close(rope_pair_grid(q, k, indices=(0,), distances=(1,), rope=learners_rope))
    assert calls
