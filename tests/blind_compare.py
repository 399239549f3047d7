"""Compare a learner's function with the course's reference on inputs its contract allows.

For the blind sets of learner mistakes (tests/learner_mistakes_blind_a.py, _b.py): a mistake must
differ from `attn_course.reference.NAME` on some allowed input, an alternative must agree on all
of them. `differs(exercise, candidate)` returns a description of the first input where the two
disagree (an exception of the candidate counts), or None where they agree on every input tried.
The inputs are chosen from each exercise's docstring and notebook text, not from any check: batch
and head axes, T_q ≠ T_k with and without the causal mask, ragged blocks, head counts that are not
powers of two, non-contiguous views, float32 and float64.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Iterator
from typing import Any

import torch

from attn_course import reference as R

Inputs = Iterator[tuple[str, Callable[[Callable[..., Any]], Any]]]


def _close(a: Any, b: Any, atol: float, rtol: float) -> bool:
    if isinstance(a, (tuple, list)) or isinstance(b, (tuple, list)):
        if not isinstance(a, (tuple, list)) or not isinstance(b, (tuple, list)) or len(a) != len(b):
            return False
        return all(_close(x, y, atol, rtol) for x, y in zip(a, b, strict=True))
    if isinstance(b, torch.Tensor):
        if not isinstance(a, torch.Tensor) or a.shape != b.shape or a.dtype != b.dtype:
            return False
        if b.dtype == torch.bool or not b.is_floating_point():
            return bool(torch.equal(a, b))
        return bool(torch.allclose(a.double(), b.double(), atol=atol, rtol=rtol, equal_nan=True))
    if isinstance(b, float):
        return isinstance(a, (float, int)) and abs(a - b) <= atol + rtol * abs(b)
    return bool(a == b)


def _randn(*shape: int, dtype: torch.dtype = torch.float64, seed: int = 0) -> torch.Tensor:
    return torch.randn(*shape, dtype=dtype, generator=torch.Generator().manual_seed(seed))


def _qkv(
    batch: tuple[int, ...],
    t_q: int,
    t_k: int,
    d: int,
    d_v: int | None = None,
    seed: int = 0,
    dtype: torch.dtype = torch.float64,
) -> tuple[torch.Tensor, ...]:
    g = torch.Generator().manual_seed(seed)
    q = torch.randn(*batch, t_q, d, dtype=dtype, generator=g)
    k = torch.randn(*batch, t_k, d, dtype=dtype, generator=g)
    v = torch.randn(*batch, t_k, d if d_v is None else d_v, dtype=dtype, generator=g)
    return q, k, v


def _noncontig(x: torch.Tensor) -> torch.Tensor:
    """The same values as x, as a non-contiguous view (the last two axes stored transposed)."""
    return x.transpose(-1, -2).contiguous().transpose(-1, -2)


def _cases(exercise: str) -> Inputs:
    """(description, run(fn) -> result) pairs for `exercise`."""
    yield from CASES[exercise]()


@functools.cache
def _expected(exercise: str) -> tuple[Any, ...]:
    """The reference's result on each input of `exercise`, computed once per process: every
    mistake and alternative of every blind set is compared with the same ones."""
    ref = getattr(R, exercise)
    return tuple(run(ref) for _, run in _cases(exercise))


def differs(exercise: str, candidate: Any, atol: float = 1e-5, rtol: float = 1e-4) -> str | None:
    """The first allowed input where `candidate` disagrees with the reference, or None."""
    expected_by_case = _expected(exercise)
    for (what, run), expected in zip(_cases(exercise), expected_by_case, strict=True):
        try:
            actual = run(candidate)
        except Exception as error:  # noqa: BLE001 - a learner's exception is a difference
            return f"{what}: raised {type(error).__name__}: {str(error)[:120]}"
        if not _close(actual, expected, atol, rtol):
            return what
    return None


# ---------------------------------------------------------------------------------------------
# 01-03


def _dot_product_scores() -> Inputs:
    for batch, t_q, t_k, d in [((), 4, 4, 3), ((2,), 3, 5, 4), ((2, 3), 5, 2, 8)]:
        q, k, _ = _qkv(batch, t_q, t_k, d)
        yield f"q {tuple(q.shape)}, k {tuple(k.shape)}", lambda f, q=q, k=k: f(q, k)
    q, k, _ = _qkv((2, 3), 5, 6, 4, dtype=torch.float32)
    yield "non-contiguous float32", lambda f: f(_noncontig(q), _noncontig(k))


def _softmax() -> Inputs:
    x = _randn(3, 4, 5)
    for dim in (-1, 0, 1, 2, -2):
        yield f"x (3, 4, 5), dim={dim}", lambda f, dim=dim: f(x.clone(), dim=dim)
    big = _randn(2, 6) * 500
    yield "large scores (x·500)", lambda f: f(big.clone())
    apart = torch.tensor([[0.0, 1.0, 2.0], [1000.0, 1001.0, 1002.0]], dtype=torch.float64)
    yield "rows 1000 apart", lambda f: f(apart.clone())
    yield "default dim", lambda f: f(x.clone())
    yield "float32", lambda f: f(x.float())
    with_inf = x.clone()
    with_inf[..., 0] = float("-inf")
    yield "-inf entries", lambda f: f(with_inf.clone())
    yield "in place: input kept", lambda f: (f(t := x.clone()), t)[1]


def _dot_product_attention() -> Inputs:
    for batch, t_q, t_k, d, d_v in [((), 4, 4, 3, 3), ((2,), 3, 5, 4, 6), ((2, 3), 5, 2, 8, 3)]:
        q, k, v = _qkv(batch, t_q, t_k, d, d_v)
        yield (
            f"q {tuple(q.shape)}, k {tuple(k.shape)}, v {tuple(v.shape)}",
            lambda f, q=q, k=k, v=v: f(q, k, v),
        )


def _score_variance() -> Inputs:
    for d_k, scaled in [(1, False), (4, False), (64, False), (4, True), (64, True), (1, True)]:

        def run(f: Callable[..., Any], d_k: int = d_k, scaled: bool = scaled) -> Any:
            torch.manual_seed(0)
            value = f(d_k, n_samples=40_000, scaled=scaled)
            return round(float(value) / (1.0 if scaled else d_k), 1)  # the value up to sampling noise

        yield f"d_k={d_k}, scaled={scaled}", run
    yield "n_samples default, type float", lambda f: type(f(8))


def _scaled_dot_product_attention() -> Inputs:
    for batch, t_q, t_k, d, d_v in [((), 4, 4, 3, 3), ((2,), 3, 5, 16, 6), ((2, 3), 5, 2, 8, 3)]:
        q, k, v = _qkv(batch, t_q, t_k, d, d_v)
        yield (
            f"q {tuple(q.shape)}, k {tuple(k.shape)}, v {tuple(v.shape)}",
            lambda f, q=q, k=k, v=v: f(q, k, v),
        )


def _causal_mask() -> Inputs:
    for t_q, t_k in [(4, None), (1, None), (3, 5), (5, 5), (1, 6), (5, 3)]:
        yield f"t_q={t_q}, t_k={t_k}", lambda f, t_q=t_q, t_k=t_k: f(t_q, t_k)
    yield "t_q only, positional", lambda f: f(5)


def _padding_mask() -> Inputs:
    for lengths, t in [([3, 1, 4], 4), ([0, 2], 5), ([5], 5), ([2, 2, 2], 6)]:
        yield f"lengths={lengths}, t={t}", lambda f, lengths=lengths, t=t: f(torch.tensor(lengths), t)


def _attention() -> Inputs:
    for t_q, t_k in [(4, 4), (3, 6), (6, 3)]:
        q, k, v = _qkv((2, 3), t_q, t_k, 8, 5)
        yield f"{t_q}x{t_k} no mask", lambda f, q=q, k=k, v=v: f(q, k, v)
        if t_q <= t_k:
            yield f"{t_q}x{t_k} causal", lambda f, q=q, k=k, v=v: f(q, k, v, is_causal=True)
        mask = _randn(2, 1, t_q, t_k, seed=3) > -0.5
        mask[..., 0] = True
        yield f"{t_q}x{t_k} mask (2,1,q,k)", lambda f, q=q, k=k, v=v, mask=mask: f(q, k, v, mask=mask)
        key_mask = torch.ones(2, 1, 1, t_k, dtype=torch.bool)
        key_mask[0, ..., -1] = False
        yield f"{t_q}x{t_k} key mask (2,1,1,k)", lambda f, q=q, k=k, v=v, m=key_mask: f(q, k, v, mask=m)
        if t_q <= t_k:
            yield (
                f"{t_q}x{t_k} mask and causal",
                lambda f, q=q, k=k, v=v, m=key_mask: f(q, k, v, mask=m, is_causal=True),
            )
    q, k, v = _qkv((), 3, 3, 4)
    yield "no batch axes, causal", lambda f: f(q, k, v, is_causal=True)


# ---------------------------------------------------------------------------------------------
# 04-05


def _split_heads() -> Inputs:
    for b, t, h, d in [(2, 3, 4, 2), (1, 5, 3, 4), (3, 2, 6, 1), (2, 4, 1, 8)]:
        x = _randn(b, t, h * d)
        yield f"({b}, {t}, {h}·{d}), n_heads={h}", lambda f, x=x, h=h: f(x, h)
    x = _randn(2, 3, 12)
    yield "non-contiguous x", lambda f: f(x.transpose(0, 1).contiguous().transpose(0, 1), 3)
    y = _randn(2, 12, 3)
    yield "x with a strided last axis", lambda f: f(y.transpose(1, 2), 4)


def _merge_heads() -> Inputs:
    for b, h, t, d in [(2, 4, 3, 2), (1, 3, 5, 4), (3, 6, 2, 1), (2, 1, 4, 8)]:
        x = _randn(b, h, t, d)
        yield f"({b}, {h}, {t}, {d})", lambda f, x=x: f(x)
    x = _randn(2, 3, 4, 5)
    yield "non-contiguous x", lambda f: f(_noncontig(x))


def _module_pair(cls: Any, reference: Any, *args: Any, **kwargs: Any) -> Any:
    torch.manual_seed(0)
    ref = reference(*args, **kwargs).double()
    mine = cls(*args, **kwargs).double()
    mine.load_state_dict(ref.state_dict())
    return mine


def _mha_runs(make: Callable[[Any], Any], forward_cases: list[tuple[str, Callable[[Any], Any]]]) -> Inputs:
    for what, call in forward_cases:
        yield what, lambda cls, call=call: call(make(cls))


def _MultiHeadAttention() -> Inputs:
    for d_model, h, bias in [(12, 3, True), (16, 4, False), (12, 1, True), (18, 6, True)]:

        def make(cls: Any, d_model: int = d_model, h: int = h, bias: bool = bias) -> Any:
            return _module_pair(cls, R.MultiHeadAttention, d_model, h, bias=bias)

        x = _randn(3, 5, d_model, seed=1)
        ctx = _randn(3, 7, d_model, seed=2)
        mask = _randn(3, 5, 5, seed=3) > -0.3
        mask[..., 0] = True
        cmask = _randn(3, 5, 7, seed=4) > -0.3
        cmask[..., 0] = True
        tag = f"d_model={d_model}, h={h}, bias={bias}"
        cases: list[tuple[str, Callable[[Any], Any]]] = [
            (f"{tag}: self", lambda m, x=x: m(x)),
            (f"{tag}: causal", lambda m, x=x: m(x, is_causal=True)),
            (f"{tag}: mask (b, t, t)", lambda m, x=x, mask=mask: m(x, mask=mask)),
            (f"{tag}: cross, t_k=7", lambda m, x=x, ctx=ctx: m(x, context=ctx)),
            (
                f"{tag}: cross with mask (b, t, t_k)",
                lambda m, x=x, ctx=ctx, cm=cmask: m(x, mask=cm, context=ctx),
            ),
            (f"{tag}: cross, t_k=2", lambda m, x=x, ctx=ctx: m(x, context=ctx[:, :2])),
            (f"{tag}: non-contiguous x", lambda m, x=x: m(x.transpose(0, 1).contiguous().transpose(0, 1))),
        ]
        yield from _mha_runs(make, cases)
        yield f"{tag}: gradients", lambda cls, make=make, x=x, ctx=ctx: _grads(make(cls), x, ctx)


def _grads(module: Any, x: torch.Tensor, ctx: torch.Tensor | None) -> Any:
    x = x.clone().requires_grad_()
    out = module(x) if ctx is None else module(x, context=ctx)
    out.pow(2).sum().backward()
    return x.grad, [p.grad for p in module.parameters()]


def _rope_frequencies() -> Inputs:
    for d, base in [(2, 10000.0), (8, 10000.0), (16, 100.0), (6, 10000.0), (64, 500000.0)]:
        yield f"d={d}, base={base}", lambda f, d=d, base=base: f(d, base)
    yield "default base", lambda f: f(10)


def _apply_rope() -> Inputs:
    for shape in [(5, 4), (2, 3, 6, 8), (1, 7, 2)]:
        x = _randn(*shape)
        yield f"x {shape}", lambda f, x=x: f(x)
    x = _randn(2, 3, 6, 8)
    yield "positions 10..15", lambda f: f(x, torch.arange(10, 16))
    yield "positions 7, 3, 0, 1, 9, 2", lambda f: f(x, torch.tensor([7, 3, 0, 1, 9, 2]))
    yield "base 100", lambda f: f(x, None, 100.0)
    yield "float32", lambda f: f(x.float(), torch.arange(100, 106))
    yield "non-contiguous x", lambda f: f(x.transpose(-1, -3).contiguous().transpose(-1, -3))
    yield "input kept", lambda f: (f(t := x.clone()), t)[1]


def _RotaryMultiHeadAttention() -> Inputs:
    for d_model, h in [(16, 2), (24, 3), (8, 1)]:

        def make(cls: Any, d_model: int = d_model, h: int = h) -> Any:
            return _module_pair(cls, R.RotaryMultiHeadAttention, d_model, h, base=100.0)

        x = _randn(3, 6, d_model, seed=1)
        mask = _randn(3, 6, 6, seed=3) > -0.3
        mask[..., 0] = True
        tag = f"d_model={d_model}, h={h}"
        cases: list[tuple[str, Callable[[Any], Any]]] = [
            (f"{tag}: self", lambda m, x=x: m(x)),
            (f"{tag}: causal", lambda m, x=x: m(x, is_causal=True)),
            (f"{tag}: mask", lambda m, x=x, mask=mask: m(x, mask=mask)),
            (f"{tag}: positions 5..10", lambda m, x=x: m(x, positions=torch.arange(5, 11))),
            (
                f"{tag}: positions 0, 2, 3, 7, 8, 9",
                lambda m, x=x: m(x, positions=torch.tensor([0, 2, 3, 7, 8, 9])),
            ),
            (
                f"{tag}: causal (t, t) mask",
                lambda m, x=x: m(x, mask=torch.ones(6, 6, dtype=torch.bool).tril()),
            ),
            (
                f"{tag}: causal, positions 20..25",
                lambda m, x=x: m(x, is_causal=True, positions=torch.arange(20, 26)),
            ),
        ]
        yield from _mha_runs(make, cases)


# ---------------------------------------------------------------------------------------------
# 06


def _online_softmax() -> Inputs:
    x = _randn(3, 4, 10)
    for block in (1, 3, 4, 10, 16):
        yield f"x (3, 4, 10), block_size={block}", lambda f, block=block: f(x, block)
    yield "large scores", lambda f: f(x * 300, 3)
    y = x.clone()
    y[..., :4] = float("-inf")
    yield "-inf in the first block", lambda f: f(y, 4)
    yield "1-D x", lambda f: f(_randn(9), 2)
    yield "float32", lambda f: f(x.float(), 3)


def _flash_attention_query_block() -> Inputs:
    for bq, t_k, block, d, d_v in [(4, 10, 3, 8, 8), (1, 5, 8, 4, 6), (3, 7, 1, 16, 5), (5, 8, 4, 2, 2)]:
        q, k, v = _qkv((2, 3), bq, t_k, d, d_v)
        yield (
            f"Bq={bq}, T_k={t_k}, block={block}, d={d}, d_v={d_v}",
            lambda f, q=q, k=k, v=v, block=block: f(q, k, v, block_size=block),
        )
    q, k, v = _qkv((), 4, 9, 8)
    yield "no batch axes, default block", lambda f: f(q, k, v)
    yield "large scores", lambda f: f(q * 30, k * 30, v, block_size=4)


def _flash_attention() -> Inputs:
    for t_q, t_k, block in [
        (10, 10, 4),
        (5, 13, 4),
        (13, 5, 4),
        (7, 7, 16),
        (6, 11, 1),
        (9, 20, 3),
        (3, 8, 4),
    ]:
        q, k, v = _qkv((2, 3), t_q, t_k, 8, 5)
        for causal in (False, True):
            for lse in (False, True):
                yield (
                    f"T_q={t_q}, T_k={t_k}, block={block}, causal={causal}, lse={lse}",
                    lambda f, q=q, k=k, v=v, b=block, c=causal, r=lse: f(
                        q, k, v, is_causal=c, block_size=b, return_lse=r
                    ),
                )
    q, k, v = _qkv((), 70, 70, 4)
    yield "no batch axes, default block", lambda f: f(q, k, v, is_causal=True, return_lse=True)


# ---------------------------------------------------------------------------------------------
# 07


def _decoder(seed: int = 0, n_heads: int = 2, d_model: int = 16, n_layers: int = 2, vocab: int = 11) -> Any:
    from attn_course.decoder import DecoderConfig, TinyDecoder

    torch.manual_seed(seed)
    config = DecoderConfig(
        vocab_size=vocab, n_layers=n_layers, n_heads=n_heads, d_model=d_model, d_mlp=32, rope_base=100.0
    )
    return TinyDecoder(config).double().eval()


def _block_forward() -> Inputs:
    for seed, h, d_model in [(0, 2, 16), (1, 3, 24), (2, 1, 8)]:
        model = _decoder(seed, h, d_model)
        for p in model.parameters():  # LayerNorms away from the identity
            p.data.add_(0.1 * torch.randn_like(p))
        x = _randn(3, 7, d_model, seed=seed)
        yield f"h={h}, d_model={d_model}, block 0", lambda f, m=model, x=x: f(m.blocks[0], x.clone())
        yield f"h={h}, d_model={d_model}, block 1", lambda f, m=model, x=x: f(m.blocks[1], x.clone())
        yield "input kept", lambda f, m=model, x=x: (f(m.blocks[1], t := x.clone()), t)[1]


def _ablate_heads() -> Inputs:
    for seed, n_layers, h, heads in [
        (0, 2, 2, [(0, 1)]),
        (1, 3, 3, [(0, 0), (2, 2)]),
        (2, 2, 4, [(1, 1), (1, 2)]),
        (3, 2, 3, []),
        (4, 3, 3, [(1, 2), (1, 2)]),
        (5, 2, 4, [(1, 3), (0, 0)]),
    ]:
        model = _decoder(seed, h, 6 * h, n_layers)
        idx = torch.randint(0, 11, (2, 6), generator=torch.Generator().manual_seed(seed))

        def run(
            f: Callable[..., Any], model: Any = model, heads: list = heads, idx: torch.Tensor = idx
        ) -> Any:
            before = model(idx)
            ablated = f(model, list(heads))
            return ablated(idx), model(idx) - before, ablated is model

        yield f"{n_layers} layers, {h} heads, ablate {heads}", run


def _KVCache() -> Inputs:
    def run(cls: Any) -> Any:
        cache, other = cls(), cls()
        results: list[Any] = [cache.length(0), cache.length(3)]
        g = torch.Generator().manual_seed(0)
        for layer, t_new in [(0, 3), (1, 2), (0, 1), (2, 4), (0, 2), (1, 1)]:
            k = torch.randn(2, 3, t_new, 4, generator=g, dtype=torch.float64)
            v = torch.randn(2, 3, t_new, 4, generator=g, dtype=torch.float64)
            results.append(cache.append(layer, k, v))
            results.append([cache.length(i) for i in range(4)])
        results.append([other.length(i) for i in range(3)])
        k = torch.randn(1, 2, 5, 4, generator=g, dtype=torch.float64)
        results.append(other.append(1, k, k * 2))
        results.append([cache.length(i) for i in range(3)])
        return results

    yield "six appends over three layers, and a second cache", run


def _cached_attention() -> Inputs:
    from attn_course.kv_cache import KVCache

    for seed, h, d_model, chunks in [
        (0, 2, 16, [4, 1, 1, 3]),
        (1, 3, 24, [1, 1, 1]),
        (2, 1, 8, [5, 2]),
        (3, 2, 16, [3]),
    ]:
        model = _decoder(seed, h, d_model)
        idx = torch.randint(0, 11, (2, sum(chunks)), generator=torch.Generator().manual_seed(seed))

        def run(
            f: Callable[..., Any], model: Any = model, idx: torch.Tensor = idx, chunks: list = chunks
        ) -> Any:
            cache = KVCache()
            outs, start = [], 0
            for n in chunks:
                outs.append(model.step(idx[:, start : start + n], cache, f))
                start += n
            return outs, [cache.length(i) for i in range(2)]

        yield f"h={h}, chunks {chunks}", run


def _generate_with_cache() -> Inputs:
    from attn_course.generation import greedy, sampler
    from attn_course.kv_cache import KVCache

    for seed, b, t, n_new in [(0, 1, 3, 5), (1, 3, 4, 6), (2, 2, 1, 1), (3, 2, 5, 2)]:
        model = _decoder(seed)
        prompt = torch.randint(0, 11, (b, t), generator=torch.Generator().manual_seed(seed))

        def run(
            f: Callable[..., Any],
            model: Any = model,
            prompt: torch.Tensor = prompt,
            n_new: int = n_new,
            sampled: bool = False,
        ) -> Any:
            shapes: list[tuple[int, ...]] = []
            step = model.step

            def counted(idx: torch.Tensor, cache: Any, attend: Any = R.cached_attention) -> Any:
                shapes.append(tuple(idx.shape))
                return step(idx, cache, attend)

            model.step = counted
            try:
                pick = sampler(1.5, 4, torch.Generator().manual_seed(7)) if sampled else greedy
                cache = KVCache()
                tokens = f(model, prompt.clone(), n_new, pick, cache, R.cached_attention)
            finally:
                del model.step
            return tokens, shapes, cache.length(0)

        yield f"greedy b={b}, t={t}, n_new={n_new}", run
        yield f"sampled b={b}, t={t}, n_new={n_new}", lambda f, run=run: run(f, sampled=True)


def _next_token_probs() -> Inputs:
    logits = _randn(3, 8, seed=1) * 2
    for temperature, top_k in [(1.0, None), (0.5, None), (2.0, 3), (1.0, 1), (0.7, 8), (3.0, 5)]:
        yield (f"T={temperature}, top_k={top_k}", lambda f, t=temperature, k=top_k: f(logits.clone(), t, k))
    yield "defaults", lambda f: f(logits.clone())
    ties = torch.tensor([[1.0, 2.0, 2.0, 0.0, 3.0], [0.0, 0.0, 0.0, 0.0, 0.0]], dtype=torch.float64)
    yield "ties at the k-th, top_k=2", lambda f: f(ties.clone(), 1.0, 2)
    yield "one row", lambda f: f(logits[:1].clone(), 0.8, 2)
    yield "input kept", lambda f: (f(t := logits.clone(), 0.5, 3), t)[1]
    yield "float32", lambda f: f(logits.float(), 1.3, 4)


def _sample_next() -> Inputs:
    logits = _randn(2, 6, seed=2) * 1.5
    n = 40_000
    for temperature, top_k in [(1.0, None), (0.5, None), (2.0, 3), (1.0, 1), (0.8, 6)]:

        def run(f: Callable[..., Any], t: float = temperature, k: int | None = top_k) -> Any:
            rows = logits.repeat_interleave(n, dim=0)  # (2n, 6)
            draws = f(rows, t, k, torch.Generator().manual_seed(3))
            if draws.shape != (2 * n, 1) or draws.dtype != torch.long:
                return ("shape or dtype", tuple(draws.shape), draws.dtype)
            freq = (
                torch.stack([torch.bincount(draws[i * n : (i + 1) * n, 0], minlength=6) for i in range(2)])
                / n
            )
            probs = R.next_token_probs(logits, t, k)  # (2, 6)
            return bool((freq - probs).abs().max() < 0.012)  # 4.8 standard deviations at most

        yield f"T={temperature}, top_k={top_k}", run

    def same_seed(f: Callable[..., Any]) -> Any:
        a = f(logits, 1.0, None, torch.Generator().manual_seed(5))
        b = f(logits, 1.0, None, torch.Generator().manual_seed(5))
        return bool(torch.equal(a, b))

    yield "the same seed gives the same draws", same_seed

    def rows_differ(f: Callable[..., Any]) -> Any:
        rows = torch.zeros(200, 6, dtype=torch.float64)
        draws = f(rows, 1.0, None, torch.Generator().manual_seed(5))
        return bool(draws.unique().numel() > 1)

    yield "independent draws per row", rows_differ


# ---------------------------------------------------------------------------------------------
# 09-10


def _softmax_backward() -> Inputs:
    for shape, dim in [((3, 5), -1), ((2, 3, 4), 1), ((4, 6), 0), ((2, 3, 4), -1)]:
        x, g = _randn(*shape, seed=1), _randn(*shape, seed=2)
        p = torch.softmax(x, dim=dim)
        yield f"p {shape}, dim={dim}", lambda f, p=p, g=g, dim=dim: f(p.clone(), g.clone(), dim=dim)
    yield "default dim", lambda f: f(torch.softmax(_randn(3, 4), -1), _randn(3, 4, seed=5))


def _attention_backward() -> Inputs:
    for batch, t_q, t_k, d, d_v, causal in [
        ((2, 3), 4, 4, 8, 8, False),
        ((2,), 3, 6, 4, 5, True),
        ((2, 3), 6, 3, 4, 4, False),
        ((), 5, 5, 16, 3, True),
        ((2, 2), 4, 7, 8, 8, False),
    ]:
        q, k, v = _qkv(batch, t_q, t_k, d, d_v)
        g = _randn(*batch, t_q, d_v, seed=9)
        yield (
            f"q {tuple(q.shape)}, k {tuple(k.shape)}, v {tuple(v.shape)}, causal={causal}",
            lambda f, q=q, k=k, v=v, g=g, c=causal: f(q, k, v, g, is_causal=c),
        )


def _flash_backward_inputs(
    batch: tuple[int, ...], t_q: int, t_k: int, d: int, causal: bool
) -> tuple[Any, ...]:
    q, k, v = _qkv(batch, t_q, t_k, d)
    out, lse = R.flash_attention(q, k, v, is_causal=causal, return_lse=True)
    g = _randn(*batch, t_q, d, seed=9)
    return q, k, v, out, lse, g


def _flash_attention_backward() -> Inputs:
    for t_q, t_k, block, causal in [
        (8, 8, 4, False),
        (5, 13, 4, True),
        (13, 5, 4, False),
        (7, 7, 3, True),
        (6, 11, 1, True),
        (9, 20, 3, True),
        (4, 6, 16, False),
        (10, 10, 4, True),
    ]:
        args = _flash_backward_inputs((2, 3), t_q, t_k, 8, causal)
        yield (
            f"T_q={t_q}, T_k={t_k}, block={block}, causal={causal}",
            lambda f, a=args, b=block, c=causal: f(*a, is_causal=c, block_size=b),
        )


def _FlashAttentionFunction() -> Inputs:
    for t_q, t_k, block, causal in [(8, 8, 4, False), (5, 13, 4, True), (7, 7, 3, True), (13, 5, 4, False)]:
        q, k, v = _qkv((2, 3), t_q, t_k, 8)
        g = _randn(2, 3, t_q, 8, seed=9)

        def run(
            cls: Any, q: Any = q, k: Any = k, v: Any = v, g: Any = g, b: int = block, c: bool = causal
        ) -> Any:
            qs, ks, vs = (x.clone().requires_grad_() for x in (q, k, v))
            out = cls.apply(qs, ks, vs, c, b)
            out.backward(g)
            return out.detach(), qs.grad, ks.grad, vs.grad

        yield f"T_q={t_q}, T_k={t_k}, block={block}, causal={causal}", run


def _repeat_kv() -> Inputs:
    for shape, n_rep in [((2, 2, 3, 4), 2), ((1, 3, 2, 2), 3), ((2, 1, 4, 3), 4), ((2, 4, 3, 2), 1)]:
        x = _randn(*shape)
        yield f"x {shape}, n_rep={n_rep}", lambda f, x=x, n=n_rep: f(x, n)
    x = _randn(2, 3, 4, 5)
    yield "non-contiguous x", lambda f: f(_noncontig(x), 2)


def _GroupedQueryAttention() -> Inputs:
    for d_model, h, h_kv in [(16, 4, 2), (24, 6, 3), (16, 4, 1), (16, 4, 4), (24, 6, 2)]:

        def make(cls: Any, d_model: int = d_model, h: int = h, h_kv: int = h_kv) -> Any:
            return _module_pair(cls, R.GroupedQueryAttention, d_model, h, h_kv)

        x = _randn(3, 5, d_model, seed=1)
        mask = _randn(3, 5, 5, seed=3) > -0.3
        mask[..., 0] = True
        tag = f"d_model={d_model}, heads {h} of {h_kv}"
        cases: list[tuple[str, Callable[[Any], Any]]] = [
            (f"{tag}: self", lambda m, x=x: m(x)),
            (f"{tag}: causal", lambda m, x=x: m(x, is_causal=True)),
            (f"{tag}: mask", lambda m, x=x, mask=mask: m(x, mask=mask)),
        ]
        yield from _mha_runs(make, cases)


def _sliding_window_mask() -> Inputs:
    for t_q, t_k, window in [(5, 5, 2), (5, 5, 1), (3, 7, 3), (6, 6, 10), (4, 4, 4), (1, 6, 2), (6, 3, 2)]:
        yield f"t_q={t_q}, t_k={t_k}, window={window}", lambda f, a=(t_q, t_k, window): f(*a)


def _sliding_window_flash_attention() -> Inputs:
    for t_q, t_k, window, block in [
        (10, 10, 3, 4),
        (5, 13, 4, 4),
        (7, 7, 1, 2),
        (9, 9, 20, 4),
        (6, 11, 5, 1),
        (12, 12, 4, 4),
        (3, 10, 2, 16),
    ]:
        q, k, v = _qkv((2, 3), t_q, t_k, 8, 5)
        yield (
            f"T_q={t_q}, T_k={t_k}, window={window}, block={block}",
            lambda f, q=q, k=k, v=v, w=window, b=block: f(q, k, v, w, block_size=b),
        )


def _alibi_score_mod() -> Inputs:
    from attn_course.flex import evaluate_score_mod

    for n_heads, t in [(4, 5), (8, 3), (3, 4), (1, 6), (12, 2)]:
        scores = _randn(2, n_heads, t, t + 1)
        yield f"{n_heads} heads, T_q={t}", lambda f, n=n_heads, s=scores: evaluate_score_mod(f(n), s.float())


def _document_mask_mod() -> Inputs:
    from attn_course.flex import document_ids_from_lengths, evaluate_mask_mod

    for lengths in [[3, 2, 4], [1, 1, 1], [6], [2, 5, 1, 1]]:
        ids = document_ids_from_lengths(lengths)
        t = sum(lengths)
        yield f"documents {lengths}", lambda f, ids=ids, t=t: evaluate_mask_mod(f(ids), 2, t, t)


def _with_flex_names(f: Any) -> Any:
    """f, with the names notebook 10's cell before Exercise 7 imports, where f's module lacks them."""
    from torch.nn.attention.flex_attention import create_block_mask, flex_attention

    names = getattr(f, "__globals__", None)
    if names is not None and not str(names.get("__name__", "")).startswith("attn_course"):
        names.setdefault("create_block_mask", create_block_mask)
        names.setdefault("flex_attention", flex_attention)
    return f


def _rotary_window_attention() -> Inputs:
    import warnings

    from attn_course.flex import untraced

    for seed, d_model, h, h_kv, bias, b, t, window, positions, dtype in [
        (0, 16, 4, 2, False, 2, 7, 3, None, torch.float64),
        (1, 24, 6, 3, True, 3, 5, 1, None, torch.float64),
        (2, 16, 4, 1, False, 2, 6, 10, None, torch.float64),
        (3, 24, 6, 2, True, 2, 9, 4, torch.arange(5, 14), torch.float64),
        (4, 16, 4, 4, False, 1, 8, 2, torch.tensor([0, 2, 3, 7, 8, 9, 12, 13]), torch.float64),
        (5, 16, 4, 2, True, 2, 6, 3, None, torch.float32),
    ]:
        torch.manual_seed(seed)
        layer = R.GroupedQueryAttention(d_model, h, h_kv, bias=bias).to(dtype)
        x = _randn(b, t, d_model, dtype=dtype, seed=seed)

        def run(
            f: Callable[..., Any], layer: Any = layer, x: Any = x, w: int = window, p: Any = positions
        ) -> Any:
            with torch.no_grad(), warnings.catch_warnings(), untraced():  # as the check runs it
                warnings.simplefilter("ignore")  # flex_attention called without torch.compile
                return _with_flex_names(f)(layer, x, w) if p is None else _with_flex_names(f)(layer, x, w, p)

        where = "default" if positions is None else positions.tolist()
        tag = f"d_model={d_model}, heads {h} of {h_kv}, t={t}, window {window}, positions {where}"
        yield f"{tag}, {dtype}", run
    torch.manual_seed(6)
    layer = R.GroupedQueryAttention(16, 4, 2).double()
    x = _randn(3, 2, 16, seed=6).transpose(0, 1)  # (2, 3, 16), non-contiguous

    def noncontig(f: Callable[..., Any]) -> Any:
        with torch.no_grad(), warnings.catch_warnings():
            warnings.simplefilter("ignore")
            return _with_flex_names(f)(layer, x, 2)

    yield "non-contiguous x (2, 3, 16), window 2", noncontig


# ---------------------------------------------------------------------------------------------
# 08 and 09's Triton (the interpreter: few, small inputs)


def _triton_add() -> Inputs:
    for shape in [(1000,), (1024,), (3000,), (7, 300)]:
        x, y = _randn(*shape, dtype=torch.float32), _randn(*shape, dtype=torch.float32, seed=1)
        yield f"x {shape}", lambda f, x=x, y=y: f(x, y)
    x, y = _randn(40, 50, dtype=torch.float32), _randn(50, 40, dtype=torch.float32, seed=1)
    yield "non-contiguous y", lambda f: f(x, y.t())


def _triton_softmax() -> Inputs:
    for shape, block in [((3, 100), 64), ((4, 64), 64), ((2, 10), 16), ((5, 33), 8)]:
        x = _randn(*shape, dtype=torch.float32) * 3
        yield f"x {shape}, block {block}", lambda f, x=x, b=block: f(x, b)
    x = _randn(6, 40, dtype=torch.float32)
    yield "row-sliced x (stride 80)", lambda f: f(_randn(6, 80, dtype=torch.float32)[:, :40], 16)
    yield "transposed x", lambda f: f(x.t().contiguous().t(), 16)


def _triton_scores() -> Inputs:
    for b, h, t_q, t_k, d in [(1, 2, 40, 40, 16), (2, 3, 17, 50, 32), (1, 1, 70, 9, 16)]:
        q, k, _ = _qkv((b, h), t_q, t_k, d, dtype=torch.float32)
        yield f"({b}, {h}), T_q={t_q}, T_k={t_k}, d={d}", lambda f, q=q, k=k: f(q, k)
    q, k, _ = _qkv((2, 3), 20, 20, 16, dtype=torch.float32)
    yield "heads-transposed views", lambda f: f(q.transpose(1, 2).contiguous().transpose(1, 2), k)


def _triton_flash_attention() -> Inputs:
    for b, h, t_q, t_k, d, causal in [
        (1, 2, 40, 40, 16, False),
        (2, 2, 20, 70, 16, True),
        (1, 2, 70, 30, 32, False),
        (1, 3, 50, 50, 24, True),
        (1, 1, 33, 33, 16, True),
    ]:
        q, k, v = _qkv((b, h), t_q, t_k, d, dtype=torch.float32)
        yield (
            f"({b}, {h}), T_q={t_q}, T_k={t_k}, d={d}, causal={causal}",
            lambda f, q=q, k=k, v=v, c=causal: f(q, k, v, is_causal=c, return_lse=True),
        )


def _triton_flash_attention_backward() -> Inputs:
    for b, h, t_q, t_k, d, causal in [
        (1, 2, 40, 40, 16, False),
        (2, 2, 20, 70, 16, True),
        (1, 2, 70, 30, 32, False),
        (1, 2, 45, 45, 24, True),
    ]:
        q, k, v = _qkv((b, h), t_q, t_k, d, dtype=torch.float32)
        out, lse = R.flash_attention(q, k, v, is_causal=causal, return_lse=True)
        g = _randn(b, h, t_q, d, dtype=torch.float32, seed=9)
        yield (
            f"({b}, {h}), T_q={t_q}, T_k={t_k}, d={d}, causal={causal}",
            lambda f, a=(q, k, v, out, lse, g), c=causal: f(*a, is_causal=c),
        )


CASES: dict[str, Callable[[], Inputs]] = {
    name[1:]: value
    for name, value in dict(globals()).items()
    if name.startswith("_") and name[1:] in {n for names in R.EXERCISES.values() for n in names}
}
"""Exercise name -> its inputs."""

TOLERANCE = {name: (2e-3, 2e-3) for name in CASES if name.startswith("triton")}
"""Looser tolerances where the computation runs in float32 (Triton's kernels)."""


def verify(mistakes: Any, alternatives: Any, folder: Any, skip_triton: bool = False) -> list[str]:
    """The problems of a set: a mistake that agrees with the reference, an alternative that does not."""
    from learner_mistakes_blind_a import load

    problems = []
    for kind, edits, want_wrong in (("mistake", mistakes, True), ("alternative", alternatives, False)):
        for index, edit in enumerate(edits):
            if skip_triton and edit.exercise.startswith("triton"):
                continue
            atol, rtol = TOLERANCE.get(edit.exercise, (1e-5, 1e-4))
            try:
                found = differs(edit.exercise, load(edit, folder), atol, rtol)
            except Exception as error:  # noqa: BLE001 - a broken edit is a problem of the set
                found = f"does not load: {type(error).__name__}: {error}"
            print(f"{kind} {index} {edit.exercise} [{edit.idea}]: {found}", flush=True)
            if want_wrong and found is None:
                problems.append(f"{kind} {index} ({edit.exercise}, {edit.idea}) agrees with the reference")
            if not want_wrong and found is not None:
                problems.append(f"{kind} {index} ({edit.exercise}, {edit.idea}) differs: {found}")
    return problems


if __name__ == "__main__":  # python tests/blind_compare.py a|b [--no-triton]
    import os
    import sys
    import tempfile
    from pathlib import Path

    os.environ.setdefault("TRITON_INTERPRET", "1")
    sys.path.insert(0, str(Path(__file__).parent))
    which = sys.argv[1]
    module = __import__(f"learner_mistakes_blind_{which}")
    suffix = which.upper()
    found = verify(
        getattr(module, f"HOLDOUT_{suffix}"),
        getattr(module, f"ALTERNATIVES_{suffix}"),
        Path(tempfile.mkdtemp()),
        skip_triton="--no-triton" in sys.argv,
    )
    print("\n".join(["PROBLEMS:", *found]) if found else "all verified")
