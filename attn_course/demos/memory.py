"""How much memory a call needs: the largest tensor any torch operation made inside it.

The checks use it (memory is part of an exercise's contract), and notebook 11 shows with it what one
decoding step of latent attention holds at most.

A right answer whose intermediate is n × n where the exercise needs n numbers passes a small check and
then runs the grader (or the learner's laptop) out of memory at the exercise's real sizes: what a check
passes, the grader must pass, so memory is part of an exercise's contract.

>>> largest = LargestTensor()
>>> with largest:
...     _ = torch.ones(30, 1) @ torch.ones(1, 40)
>>> largest.numel, largest.shape
(1200, (30, 40))
"""

from __future__ import annotations

from typing import Any

import torch
from torch.overrides import TorchFunctionMode
from torch.utils._pytree import tree_flatten


class LargestTensor(TorchFunctionMode):
    """Note the largest tensor (by number of entries) that a torch function returns while it is active.

    A function mode, not a dispatch mode: it costs nothing to start (a dispatch mode's first use
    imports torch's compiler stack, seconds on a busy laptop), and sees every torch call the learner
    writes, methods and operators included."""

    def __init__(self) -> None:
        super().__init__()
        self.numel = 0
        self.shape: tuple[int, ...] = ()

    def __torch_function__(self, func: Any, types: Any, args: Any = (), kwargs: Any = None) -> Any:
        out = func(*args, **(kwargs or {}))
        for tensor in tree_flatten(out)[0]:
            if isinstance(tensor, torch.Tensor) and tensor.numel() > self.numel:
                self.numel, self.shape = tensor.numel(), tuple(tensor.shape)
        return out
