"""A synthetic task that needs attention, and a short training loop for the tiny decoder.

The task: a random segment of L distinct tokens, repeated until the sequence is full, with the
period L drawn per sequence. Once a token has been seen, the next one is whatever followed it last
time: "… A B … A → B". No fixed offset solves it (L varies), so the model has to learn an
induction circuit: a previous-token head, then a head that attends to the token after the earlier
occurrence of the current one.

Introduced in 07_kv_cache.
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass, field

import torch
import torch.nn.functional as F
from tqdm.auto import tqdm

from attn_course.decoder import TinyDecoder
from attn_course.device import torch_threads


@dataclass(frozen=True)
class InductionBatch:
    """Inputs, next-token targets, and which targets the context determines."""

    tokens: torch.Tensor
    """(b, T) input tokens."""
    targets: torch.Tensor
    """(b, T) the token that follows each input token."""
    predictable: torch.Tensor
    """(b, T) bool: True where the current token occurred before, so induction gives the target."""
    periods: torch.Tensor
    """(b,) the period L of each sequence."""


def induction_batch(
    batch: int,
    seq_len: int,
    vocab_size: int,
    periods: tuple[int, int] = (4, 12),
    generator: torch.Generator | None = None,
) -> InductionBatch:
    """`batch` sequences of a random segment of distinct tokens repeated, periods drawn in [lo, hi].

    >>> g = torch.Generator().manual_seed(0)
    >>> data = induction_batch(2, 10, vocab_size=8, periods=(3, 3), generator=g)
    >>> data.tokens.shape, data.predictable[0].tolist()
    (torch.Size([2, 10]), [False, False, False, True, True, True, True, True, True, True])

    Introduced in 07_kv_cache.
    """
    lo, hi = periods
    if hi > vocab_size:
        raise ValueError(f"a period of {hi} distinct tokens needs vocab_size >= {hi}, got {vocab_size}")
    lengths = torch.randint(lo, hi + 1, (batch,), generator=generator)  # (b,)
    segments = torch.rand(batch, vocab_size, generator=generator).argsort(dim=-1)[:, :hi]  # (b, hi): distinct
    where = torch.arange(seq_len + 1) % lengths[:, None]  # (b, T + 1): index into each segment
    sequence = segments.gather(1, where)  # (b, T + 1)
    predictable = torch.arange(seq_len) >= lengths[:, None]  # (b, T)
    return InductionBatch(sequence[:, :-1], sequence[:, 1:], predictable, lengths)


def induction_loss(model: TinyDecoder, data: InductionBatch) -> torch.Tensor:
    """Mean cross-entropy of the predictable next tokens.

    Introduced in 07_kv_cache.
    """
    logits = model(data.tokens)  # (b, T, vocab_size)
    return F.cross_entropy(logits[data.predictable], data.targets[data.predictable])


@torch.no_grad()
def induction_accuracy(model: TinyDecoder, data: InductionBatch) -> float:
    """Fraction of the predictable next tokens the model's argmax gets right.

    Introduced in 07_kv_cache.
    """
    guesses = model(data.tokens).argmax(dim=-1)  # (b, T)
    return (guesses == data.targets)[data.predictable].float().mean().item()


@dataclass
class TrainingRun:
    """What a training run did: the loss at every step, and how long it took."""

    losses: list[float] = field(default_factory=list)
    """Training loss of each step."""
    seconds: float = 0.0
    """Wall time of the whole run."""


def train_induction(
    model: TinyDecoder,
    steps: int,
    *,
    batch: int = 64,
    seq_len: int = 32,
    periods: tuple[int, int] = (4, 12),
    lr: float = 3e-3,
    seed: int = 0,
    progress: bool = True,
    threads: int | None = 1,
) -> TrainingRun:
    """Train `model` on fresh induction batches with AdamW, a short warm-up and a cosine decay.

    torch runs on `threads` threads meanwhile (restored afterwards, also when interrupted; None keeps
    the current setting). One, because this model's operations are too small to share out: on a
    2-core laptop two threads saved a third of the time when nothing else ran and took 4 to 6 times
    as long beside two busy processes, where a thread waits for a core at every operation.

    Introduced in 07_kv_cache.
    """
    with torch_threads(threads):
        generator = torch.Generator().manual_seed(seed)
        optimizer = torch.optim.AdamW(model.parameters(), lr=lr, betas=(0.9, 0.98), weight_decay=0.01)
        warmup = max(1, steps // 20)
        schedule = torch.optim.lr_scheduler.LambdaLR(
            optimizer, lambda s: min(1.0, (s + 1) / warmup) * 0.5 * (1 + math.cos(math.pi * s / steps))
        )
        run = TrainingRun()
        start = time.perf_counter()
        model.train()
        bar = tqdm(range(steps), desc="training", disable=not progress)
        for step in bar:
            data = induction_batch(batch, seq_len, model.config.vocab_size, periods, generator)
            loss = induction_loss(model, data)
            optimizer.zero_grad(set_to_none=True)
            loss.backward()
            torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
            optimizer.step()
            schedule.step()
            run.losses.append(loss.item())
            if step % 50 == 0:
                bar.set_postfix(loss=f"{loss.item():.3f}")
        model.eval()
        run.seconds = time.perf_counter() - start
        return run


@torch.no_grad()
def head_scores(maps: torch.Tensor, periods: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """How much each head looks at the previous token, and at the token after the earlier occurrence.

    maps (n_layers, b, h, T, T) are attention weights on induction sequences of the given periods (b,).
    The previous-token score is the mean weight of query t on key t - 1; the induction score the
    mean weight of query t ≥ L on key t - L + 1, the token that followed the current one last time.
    Returns both, (n_layers, h) each.

    >>> maps = torch.eye(6).roll(-1, dims=1).tril().expand(2, 3, 4, 6, 6)  # every query on key t - 1
    >>> previous, induction = head_scores(maps, torch.tensor([3, 3, 3]))
    >>> previous.shape, previous[0, 0].item(), induction[0, 0].item()
    (torch.Size([2, 4]), 1.0, 0.0)

    Introduced in 07_kv_cache.
    """
    t = maps.shape[-1]
    rows = torch.arange(1, t)  # (T - 1,)
    previous = maps[..., rows, rows - 1].mean(dim=(1, -1))  # (n_layers, h)
    scores = []
    for i, period in enumerate(periods.tolist()):
        queries = torch.arange(period, t)  # (T - L,)
        scores.append(maps[:, i, :, queries, queries - period + 1].mean(dim=-1))  # (n_layers, h)
    return previous, torch.stack(scores).mean(dim=0)  # (n_layers, h) each
