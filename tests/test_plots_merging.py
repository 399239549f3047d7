"""attn_course/plots/merging.py: each plot returns its Axes, labelled, drawn from the data."""

from __future__ import annotations

import matplotlib

matplotlib.use("Agg")

import matplotlib.pyplot as plt
import pytest
import torch

from attn_course.plots.merging import occupancy_plot, share_plot


@pytest.fixture(autouse=True)
def close_figures():
    yield
    plt.close("all")


def test_share_plot_stacks_each_parts_share_and_marks_a_row_with_no_key() -> None:
    inf = float("inf")
    lse_a = torch.tensor([0.0, -inf, 1.0, -inf])
    lse_b = torch.tensor([0.0, 2.0, -inf, -inf])
    ax = share_plot(lse_a, lse_b, title="shares")
    assert ax.get_title() == "shares"
    assert ax.get_xlabel() == "query row"
    heights = [patch.get_height() for patch in ax.patches]
    assert heights == pytest.approx([0.5, 0.0, 1.0, 0.0, 0.5, 1.0, 0.0, 0.0])  # A's bars, then B's
    assert [text.get_text() for text in ax.texts] == ["no key"]
    assert [t.get_text() for t in ax.get_legend().get_texts()] == ["share of part A", "share of part B"]


def test_share_plot_rejects_lse_of_two_shapes() -> None:
    with pytest.raises(ValueError, match=r"\(T_q,\)"):
        share_plot(torch.zeros(3), torch.zeros(4))


def test_occupancy_plot_draws_one_line_per_gpu_from_the_waves() -> None:
    ax = occupancy_plot(32, {"H100": 132, "T4": 40}, 8)
    h100, t4 = ax.get_lines()
    assert list(h100.get_xdata()) == list(range(1, 9))
    assert h100.get_ydata()[0] == pytest.approx(32 / 132)  # one chunk: 32 programs on 132 SMs
    assert t4.get_ydata()[4] == pytest.approx(1.0)  # 5 chunks: 160 programs, 4 whole waves of 40
    assert [t.get_text() for t in ax.get_legend().get_texts()] == ["H100 (132 SMs)", "T4 (40 SMs)"]
    assert ax.get_ylabel() == "share of SMs busy"
