"""The running example: "The bank of the river was muddy", with hand-made features.

Each token is a row of readable features. A query says what a token looks for, a key what it
offers: nouns look for water words (is this bank a river bank?), the other words look for nouns.
With `d_k` given, queries and keys are spread into d_k dimensions by a fixed orthogonal map,
which leaves every dot product as it was times a constant, so the story stays readable.

Introduced in 01_dot_product_attention.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

TOKENS = ("The", "bank", "of", "the", "river", "was", "muddy")
FEATURES = ("determiner", "noun", "preposition", "water", "verb", "adjective")

_EMBEDDINGS = [
    # det  noun  prep  water verb  adj
    [1.0, 0.0, 0.0, 0.0, 0.0, 0.0],  # The
    [0.0, 1.0, 0.0, 0.2, 0.0, 0.0],  # bank  (a little water: it could be a river bank)
    [0.0, 0.0, 1.0, 0.0, 0.0, 0.0],  # of
    [1.0, 0.0, 0.0, 0.0, 0.0, 0.0],  # the
    [0.0, 1.0, 0.0, 1.0, 0.0, 0.0],  # river
    [0.0, 0.0, 0.0, 0.0, 1.0, 0.0],  # was
    [0.0, 0.0, 0.0, 0.5, 0.0, 1.0],  # muddy
]

# LOOKS_FOR[f, g]: how strongly a token with feature f looks for feature g (the query map).
_LOOKS_FOR = torch.zeros(len(FEATURES), len(FEATURES), dtype=torch.float64)
_LOOKS_FOR[FEATURES.index("noun"), FEATURES.index("water")] = 3.0
for _feature in ("determiner", "preposition", "verb", "adjective"):
    _LOOKS_FOR[FEATURES.index(_feature), FEATURES.index("noun")] = 2.0


@dataclass(frozen=True)
class ExampleSentence:
    """Tokens of the example sentence with their embeddings, queries, keys and values."""

    tokens: tuple[str, ...]
    """The seven tokens, in order."""
    features: tuple[str, ...]
    """Names of the embedding's columns."""
    embeddings: torch.Tensor
    """(T, n_features) hand-made features of each token."""
    q: torch.Tensor
    """(T, d_k) queries: what each token looks for."""
    k: torch.Tensor
    """(T, d_k) keys: what each token offers."""
    v: torch.Tensor
    """(T, n_features) values: each token's content (its features)."""


def example_sentence(d_k: int | None = None, dtype: torch.dtype = torch.float32) -> ExampleSentence:
    """The example sentence; with d_k, queries and keys live in d_k dimensions.

    In d_k dimensions every raw score is sqrt(8) squared = 8 times the readable one, so dividing
    by the usual sqrt(64) = 8 for d_k = 64 gives back the readable scores.

    >>> example_sentence(d_k=64).q.shape
    torch.Size([7, 64])

    Introduced in 01_dot_product_attention.
    """
    x = torch.tensor(_EMBEDDINGS, dtype=torch.float64)  # (T, F)
    q = x @ _LOOKS_FOR  # (T, F)
    k = x.clone()  # (T, F): each token offers its own features
    if d_k is not None:
        if d_k < len(FEATURES):
            raise ValueError(f"d_k must be at least {len(FEATURES)}, got {d_k}")
        generator = torch.Generator().manual_seed(0)
        basis, _ = torch.linalg.qr(torch.randn(d_k, len(FEATURES), generator=generator, dtype=torch.float64))
        spread = basis.T * 8**0.5  # (F, d_k), orthogonal rows of squared norm 8
        q = q @ spread  # (T, d_k)
        k = k @ spread  # (T, d_k)
    return ExampleSentence(
        tokens=TOKENS,
        features=FEATURES,
        embeddings=x.to(dtype),
        q=q.to(dtype),
        k=k.to(dtype),
        v=x.to(dtype),
    )
