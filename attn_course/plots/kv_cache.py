"""Pictures of notebook 07: the training loss, and generation speed with and without the KV cache.

Introduced in 07_kv_cache.
"""

from __future__ import annotations

from collections.abc import Sequence

import matplotlib.pyplot as plt
from matplotlib.axes import Axes
from matplotlib.ticker import FuncFormatter, LogFormatter


def loss_plot(losses: Sequence[float], *, ax: Axes | None = None, title: str | None = None) -> Axes:
    """Draw the training loss against the step, on a log scale, with a running mean.

    Introduced in 07_kv_cache.
    """
    if ax is None:
        _, ax = plt.subplots(figsize=(6, 3.2), layout="constrained")
    window = max(1, len(losses) // 50)
    smooth = [sum(losses[max(0, i - window + 1) : i + 1]) / len(losses[max(0, i - window + 1) : i + 1])
              for i in range(len(losses))]  # fmt: skip
    if window > 1:
        ax.plot(losses, color="tab:blue", alpha=0.3, label="each step")
        ax.plot(smooth, color="tab:blue", label=f"mean of {window} steps")
        ax.legend()
    else:
        ax.plot(losses, color="tab:blue")
    ax.set_yscale("log")
    ax.yaxis.set_major_formatter(FuncFormatter(lambda y, _: f"{y:g}"))  # 0.01, 0.1, 1 (not 1e-02)
    ax.yaxis.set_minor_formatter(LogFormatter())  # over a short range: 2.8, 3, 3.2, ...
    ax.set_xlabel("step")
    ax.set_ylabel("cross-entropy (nats)")
    if title:
        ax.set_title(title)
    return ax


def speed_plot(
    lengths: Sequence[int],
    uncached: Sequence[float],
    cached: Sequence[float],
    *,
    ax: Axes | None = None,
    title: str | None = None,
) -> Axes:
    """Draw generated tokens per second against the number of generated tokens, with and without a cache.

    Introduced in 07_kv_cache.
    """
    if ax is None:
        _, ax = plt.subplots(figsize=(6, 3.4), layout="constrained")
    ax.plot(lengths, uncached, "o-", label="without cache: the whole prefix every step")
    ax.plot(lengths, cached, "o-", label="with KV cache: the new token only")
    ax.set_xscale("log", base=2)
    ax.set_yscale("log")
    ax.set_xticks(list(lengths), labels=[str(n) for n in lengths])
    ax.set_xlabel("generated tokens")
    ax.set_ylabel("tokens per second")
    ax.legend()
    if title:
        ax.set_title(title)
    return ax
