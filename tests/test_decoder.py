"""The tiny decoder: cached and uncached generation agree; the induction task and its training loop;
the block's forward, ablation, generation with the cache and sampling as the package runs them."""

from __future__ import annotations

import pytest
import torch

from attn_course.ablation import ablate_heads
from attn_course.decoder import (
    DecoderConfig,
    TinyDecoder,
    block_forward,
    generate,
    parameter_count,
    tokens_per_second,
)
from attn_course.demos.induction import induction_accuracy, induction_batch, train_induction
from attn_course.generation import generate_with_cache, greedy, next_token_probs, sample_next, sampler
from attn_course.kv_cache import KVCache, cached_attention

SMALL = DecoderConfig(vocab_size=16, n_layers=2, n_heads=2, d_model=16, d_mlp=32)


@pytest.mark.parametrize(("batch", "prompt_len", "n_new"), [(1, 1, 20), (3, 7, 30)])
@pytest.mark.parametrize("seed", [0, 1])
def test_cached_and_uncached_greedy_generation_agree(batch, prompt_len, n_new, seed):
    torch.manual_seed(seed)
    model = TinyDecoder(SMALL).double().eval()
    prompt = torch.randint(0, SMALL.vocab_size, (batch, prompt_len))
    tokens, logits = generate(model, prompt, n_new, use_cache=False)
    cached_tokens, cached_logits = generate(model, prompt, n_new, use_cache=True)
    assert torch.equal(tokens, cached_tokens)
    assert torch.equal(tokens[:, :prompt_len], prompt)
    torch.testing.assert_close(cached_logits, logits, atol=1e-10, rtol=1e-10)


def test_generating_no_tokens_returns_the_prompt():
    model = TinyDecoder(SMALL).eval()
    prompt = torch.zeros(2, 3, dtype=torch.long)
    for use_cache in (True, False):
        tokens, logits = generate(model, prompt, 0, use_cache=use_cache)
        assert torch.equal(tokens, prompt) and logits.shape == (2, 0, SMALL.vocab_size)


def test_generation_takes_the_attention_function_and_cache_it_is_given():
    torch.manual_seed(0)
    model = TinyDecoder(SMALL).eval()
    calls = []

    def counting(attn, x, cache, layer):
        calls.append((layer, x.shape[1]))
        return cached_attention(attn, x, cache, layer)

    made = []

    def make_cache():
        made.append(KVCache())
        return made[-1]

    generate(model, torch.zeros(1, 4, dtype=torch.long), 3, attend=counting, make_cache=make_cache)
    assert calls == [(0, 4), (1, 4), (0, 1), (1, 1), (0, 1), (1, 1)]
    assert len(made) == 1 and made[0].length(0) == made[0].length(1) == 6


def test_step_over_chunks_matches_forward():
    torch.manual_seed(0)
    model = TinyDecoder(SMALL).double().eval()
    idx = torch.randint(0, SMALL.vocab_size, (2, 9))
    cache = KVCache()
    with torch.no_grad():
        stepped = torch.cat([model.step(idx[:, a:b], cache) for a, b in [(0, 5), (5, 6), (6, 9)]], dim=1)
        torch.testing.assert_close(stepped, model(idx), atol=1e-10, rtol=1e-10)


def test_parameter_count_and_attention_maps():
    model = TinyDecoder(SMALL)
    d, m, v, n = SMALL.d_model, SMALL.d_mlp, SMALL.vocab_size, SMALL.n_layers
    per_block = 4 * d * d + 4 * d + 2 * d * m + m + d + 4 * d  # attention, MLP, two LayerNorms
    assert parameter_count(model) == v * d + n * per_block + 2 * d + d * v
    maps = model.attention_maps(torch.zeros(3, 6, dtype=torch.long))
    assert maps.shape == (n, 3, SMALL.n_heads, 6, 6)
    torch.testing.assert_close(maps.sum(-1), torch.ones(n, 3, SMALL.n_heads, 6))
    assert torch.all(maps.triu(diagonal=1) == 0)


def test_tokens_per_second_is_positive():
    model = TinyDecoder(SMALL).eval()
    assert tokens_per_second(model, torch.zeros(2, 3, dtype=torch.long), 5, use_cache=True, repeats=1) > 0


def test_induction_batch_repeats_distinct_segments():
    data = induction_batch(64, 20, vocab_size=16, periods=(3, 9), generator=torch.Generator().manual_seed(0))
    for tokens, targets, predictable, period in zip(
        data.tokens, data.targets, data.predictable, data.periods, strict=True
    ):
        p = int(period)
        assert 3 <= p <= 9 and len(set(tokens[:p].tolist())) == p
        assert torch.equal(tokens[p:], tokens[:-p]) and torch.equal(targets[:-1], tokens[1:])
        assert predictable.tolist() == [t >= p for t in range(20)]


def test_a_short_training_run_learns_something():
    torch.manual_seed(0)
    model = TinyDecoder(DecoderConfig(vocab_size=16, n_layers=2, n_heads=2, d_model=32, d_mlp=64))
    test = induction_batch(256, 16, 16, periods=(3, 6), generator=torch.Generator().manual_seed(1))
    before = induction_accuracy(model, test)
    run = train_induction(model, 60, batch=32, seq_len=16, periods=(3, 6), progress=False)
    assert len(run.losses) == 60 and run.losses[-1] < run.losses[0]
    assert induction_accuracy(model, test) > before


def test_training_runs_on_one_thread_and_gives_back_the_threads_also_when_interrupted():
    """One torch thread while training (two wait for a busy core at every step), restored after."""
    seen = []

    def interrupted(block, x):
        seen.append(torch.get_num_threads())
        if len(seen) == 5:
            raise KeyboardInterrupt  # the learner stops the cell
        return block_forward(block, x)

    before = torch.get_num_threads()
    torch.set_num_threads(2)
    try:
        model = TinyDecoder(SMALL, block_forward=interrupted)
        with pytest.raises(KeyboardInterrupt):
            train_induction(model, 10, batch=4, seq_len=16, progress=False)
        assert seen == [1] * 5 and torch.get_num_threads() == 2
        train_induction(TinyDecoder(SMALL), 1, batch=4, seq_len=16, progress=False, threads=None)
        assert torch.get_num_threads() == 2
    finally:
        torch.set_num_threads(before)


# ---------------------------------------------------------------------------------------------
# The learner's pieces as the package runs them: the block's forward, ablation, generation, sampling


def test_the_model_runs_the_block_forward_it_is_given_in_every_block_and_in_its_maps():
    calls = []

    def recorded(block, x):
        calls.append(block)
        return block_forward(block, x)

    torch.manual_seed(0)
    default = TinyDecoder(SMALL).double().eval()
    model = TinyDecoder(SMALL, block_forward=recorded).double().eval()
    model.load_state_dict(default.state_dict())
    tokens = torch.randint(0, SMALL.vocab_size, (2, 6))
    torch.testing.assert_close(model(tokens), default(tokens), atol=0, rtol=0)
    assert calls == list(model.blocks)
    model.attention_maps(tokens)
    assert len(calls) == 2 * SMALL.n_layers
    block = default.blocks[0]
    x = torch.randn(2, 6, SMALL.d_model, dtype=torch.float64)
    torch.testing.assert_close(block(x), block_forward(block, x), atol=0, rtol=0)


def test_ablating_a_head_zeroes_its_columns_in_a_copy_and_changes_the_logits():
    torch.manual_seed(0)
    model = TinyDecoder(SMALL).eval()
    before = {name: p.clone() for name, p in model.state_dict().items()}
    ablated = ablate_heads(model, [(1, 1)])
    d_k = SMALL.d_model // SMALL.n_heads
    weight = ablated.blocks[1].attn.out.weight
    assert weight[:, d_k:].abs().sum() == 0 and weight[:, :d_k].abs().sum() > 0
    assert all(torch.equal(p, before[name]) for name, p in model.state_dict().items())
    tokens = torch.randint(0, SMALL.vocab_size, (2, 6))
    assert not torch.allclose(ablated(tokens), model(tokens))
    torch.testing.assert_close(ablate_heads(model, [])(tokens), model(tokens), atol=0, rtol=0)


@pytest.mark.parametrize(("batch", "prompt_len", "n_new"), [(1, 1, 5), (3, 7, 9), (2, 4, 1)])
def test_generate_with_cache_and_greedy_give_the_packages_greedy_tokens(batch, prompt_len, n_new):
    torch.manual_seed(1)
    model = TinyDecoder(SMALL).double().eval()
    prompt = torch.randint(0, SMALL.vocab_size, (batch, prompt_len))
    cache = KVCache()
    tokens = generate_with_cache(model, prompt, n_new, greedy, cache, cached_attention)
    assert torch.equal(tokens, generate(model, prompt, n_new, use_cache=False)[0])
    assert cache.length(0) == prompt_len + n_new - 1  # the last token is picked, never fed


def test_next_token_probs_temperature_and_top_k():
    logits = torch.tensor([[2.0, 1.0, 0.0, -1.0], [0.0, 3.0, 1.0, 1.0]])
    torch.testing.assert_close(next_token_probs(logits), torch.softmax(logits, dim=-1))
    torch.testing.assert_close(next_token_probs(logits, 0.5), torch.softmax(2 * logits, dim=-1))
    top2 = next_token_probs(logits, 1.0, top_k=2)
    assert (top2 > 0).sum(dim=-1).tolist() == [2, 3]  # row 2 ties at its 2nd largest: both kept
    torch.testing.assert_close(top2.sum(dim=-1), torch.ones(2))
    assert next_token_probs(logits, 1.0, top_k=1).argmax(dim=-1).tolist() == [0, 1]
    torch.testing.assert_close(next_token_probs(logits, 1.0, top_k=4), next_token_probs(logits))


def test_sampling_follows_the_probabilities_and_its_generator():
    logits = torch.tensor([[1.0, 0.0, -1.0, 0.5]]).repeat(20_000, 1)
    draws = sample_next(logits, 2.0, 3, torch.Generator().manual_seed(0))
    assert draws.shape == (20_000, 1) and draws.dtype == torch.long
    frequencies = torch.bincount(draws.flatten(), minlength=4) / 20_000
    torch.testing.assert_close(frequencies, next_token_probs(logits[:1], 2.0, 3)[0], atol=0.02, rtol=0)
    again = sample_next(logits, 2.0, 3, torch.Generator().manual_seed(0))
    assert torch.equal(draws, again)
    model = TinyDecoder(SMALL).eval()
    prompt = torch.zeros(2, 3, dtype=torch.long)
    pick = sampler(1.0, None, torch.Generator().manual_seed(3))
    assert generate_with_cache(model, prompt, 4, pick, KVCache()).shape == (2, 7)
