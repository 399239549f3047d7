"""Tests of attn_course/explorers/masking.py: what the mask explorer computes and shows, without a browser."""

from __future__ import annotations

import matplotlib

matplotlib.use("Agg")

import matplotlib.pyplot as plt  # noqa: E402
import pytest  # noqa: E402
import torch  # noqa: E402

from attn_course.attention import scaled_dot_product_attention  # noqa: E402
from attn_course.demos.sentence import TOKENS, example_sentence  # noqa: E402
from attn_course.explorers.masking import PAD, MaskExplorer, mask_grid, masked_attention  # noqa: E402
from attn_course.masking import causal_mask  # noqa: E402

PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"
T = len(TOKENS)


@pytest.fixture
def sentence():
    return example_sentence(d_k=64)


def expected_mask(length: int, causal: bool, padding: bool) -> torch.Tensor:
    t = T if padding else length
    mask = torch.ones(t, t, dtype=torch.bool)  # (T_q, T_k)
    if padding:
        mask[:, length:] = False  # no query attends a pad key
    if causal:
        mask = mask & torch.ones(t, t, dtype=torch.bool).tril()
    return mask


@pytest.mark.parametrize("length", [1, 3, T])
@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("padding", [False, True])
def test_mask_and_weights_follow_the_controls(sentence, length: int, causal: bool, padding: bool) -> None:
    s = sentence
    view = masked_attention(s.q, s.k, s.tokens, length=length, causal=causal, padding=padding)
    t = T if padding else length
    assert view.labels == tuple(TOKENS[:length]) + (PAD,) * (t - length)
    assert view.length == length
    assert torch.equal(view.mask, expected_mask(length, causal, padding))
    assert view.weights.shape == (t, t)
    assert torch.equal(view.weights == 0, ~view.mask)  # zero exactly where forbidden
    torch.testing.assert_close(view.weights.sum(dim=-1), torch.ones(t), atol=1e-6, rtol=0)
    assert view.allowed_fraction == pytest.approx(view.mask.sum().item() / t**2)


@pytest.mark.parametrize("causal", [False, True])
def test_real_tokens_are_the_unpadded_sequence_of_the_reference(sentence, causal: bool) -> None:
    length = 4
    s = sentence
    padded = masked_attention(s.q, s.k, s.tokens, length=length, causal=causal, padding=True)
    q, k = sentence.q[:length], sentence.k[:length]  # (4, 64)
    mask = causal_mask(length) if causal else torch.ones(length, length, dtype=torch.bool)
    scores = q @ k.T / 8.0  # (4, 4)
    expected = torch.softmax(scores.masked_fill(~mask, float("-inf")), dim=-1)  # (4, 4)
    torch.testing.assert_close(padded.weights[:length, :length], expected, atol=1e-6, rtol=1e-5)


def test_without_masks_it_is_scaled_attention_on_the_sentence(sentence) -> None:
    view = masked_attention(sentence.q, sentence.k, sentence.tokens, length=T, causal=False, padding=False)
    _, weights = scaled_dot_product_attention(sentence.q, sentence.k, sentence.v)  # (T, T)
    torch.testing.assert_close(view.weights, weights, atol=1e-6, rtol=1e-5)


def test_pad_garbage_is_seeded(sentence) -> None:
    s = sentence
    first = masked_attention(s.q, s.k, s.tokens, length=3, causal=False, padding=True)
    again = masked_attention(s.q, s.k, s.tokens, length=3, causal=False, padding=True)
    other = masked_attention(s.q, s.k, s.tokens, length=3, causal=False, padding=True, seed=1)
    assert torch.equal(first.weights, again.weights)
    assert not torch.equal(first.weights[3:], other.weights[3:])  # pad queries are garbage...
    torch.testing.assert_close(first.weights[:3], other.weights[:3])  # ...real rows do not see it


@pytest.mark.parametrize(("length", "phrase"), [(0, "between 1 and 7"), (8, "between 1 and 7")])
def test_rejects_a_length_outside_the_sentence(sentence, length: int, phrase: str) -> None:
    with pytest.raises(ValueError, match=phrase):
        masked_attention(sentence.q, sentence.k, sentence.tokens, length=length, causal=False, padding=False)


def test_rejects_mismatched_tokens(sentence) -> None:
    with pytest.raises(ValueError, match="one token per query"):
        masked_attention(sentence.q, sentence.k, sentence.tokens[:-1], length=3, causal=False, padding=False)


def test_explorer_starts_with_its_arguments(sentence) -> None:
    explorer = MaskExplorer(sentence.q, sentence.k, sentence.tokens, length=5, causal=True, padding=True)
    assert (explorer.causal.value, explorer.padding.value, explorer.length.value) == (True, True, 5)
    assert (explorer.length.min, explorer.length.max) == (1, T)
    assert torch.equal(explorer.view.mask, expected_mask(5, True, True))
    assert bytes(explorer.image.value).startswith(PNG_SIGNATURE)
    assert "5 real, 2 pad" in explorer.readout.value
    assert explorer.image in explorer.widget.children
    plt.close("all")


def test_toggling_the_controls_updates_view_image_and_readout(sentence) -> None:
    explorer = MaskExplorer(sentence.q, sentence.k, sentence.tokens)
    assert explorer.view.mask.all() and "49 of 49" in explorer.readout.value
    images = {bytes(explorer.image.value)}

    explorer.causal.value = True
    assert torch.equal(explorer.view.mask, causal_mask(T))
    assert "28 of 49" in explorer.readout.value
    images.add(bytes(explorer.image.value))

    explorer.length.value = 3
    assert explorer.view.labels == tuple(TOKENS[:3])
    images.add(bytes(explorer.image.value))

    explorer.padding.value = True
    assert explorer.view.labels[3:] == (PAD,) * 4
    assert torch.equal(explorer.view.mask, expected_mask(3, True, True))
    images.add(bytes(explorer.image.value))
    assert len(images) == 4  # every change redrew the picture
    titles = [ax.get_title() for ax in explorer.figure.axes]
    assert "mask: padding & causal" in titles and "weights: padding & causal" in titles


def test_rejects_a_bad_start_before_making_widgets(sentence) -> None:
    with pytest.raises(ValueError, match="between 1 and 7"):
        MaskExplorer(sentence.q, sentence.k, sentence.tokens, length=9)


def test_explorer_does_not_leave_pyplot_figures_behind(sentence) -> None:
    plt.close("all")
    MaskExplorer(sentence.q, sentence.k, sentence.tokens).causal.value = True
    assert plt.get_fignums() == []


def test_mask_grid_draws_the_four_combinations(sentence) -> None:
    fig = mask_grid(sentence.q, sentence.k, sentence.tokens, length=4)
    titles = [ax.get_title() for ax in fig.axes if ax.get_title()]
    for name in ("no mask", "causal", "padding", "padding & causal"):
        assert f"mask: {name}" in titles and f"weights: {name}" in titles
    assert "first 4 tokens" in fig.get_suptitle()
    assert fig.get_figwidth() <= 10  # two panels a row: numbers stay readable on a laptop
    plt.close(fig)
