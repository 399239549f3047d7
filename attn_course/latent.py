"""Multi-head latent attention (MLA, DeepSeek-V2, arXiv 2405.04434 §2.1): cache one latent, not k and v.

Each token's keys and values come from one low-rank latent c_KV = W^DKV x (d_latent numbers), up-projected
per head: k^C_i = W^UK_i c_KV, v_i = W^UV_i c_KV. Positions enter through a small decoupled part: a RoPE
query per head, q^R_i = RoPE(W^QR_i x), and one RoPE key shared by all heads, k^R = RoPE(W^KR x), each
d_rope wide. Head i scores key j as (q^C_i·k^C_{j,i} + q^R_i·k^R_j) / sqrt(d_head + d_rope).

Decoding caches c_KV and k^R only: d_latent + d_rope numbers per token and layer, whatever the number of
heads. Since q^C_i·(W^UK_i c) = ((W^UK_i)^T q^C_i)·c, the query can be moved into the latent space and
scored against the cached latents directly; and since the weighted sum commutes with W^UV_i, the weights
sum the latents first and W^UV_i (then W^O) is applied once per query. The RoPE part cannot be moved so:
a rotation that depends on the key's position sits between W^KR and the score, which is why it is
decoupled and cached as it is.

Left out of DeepSeek-V2's layer: the low-rank compression of the queries (W^DQ, W^UQ; here one W^Q, as
DeepSeek-V2-Lite has), the RMSNorm of the latent, and YaRN's scaling of the RoPE frequencies. RoPE here is
notebook 05's interleaved-pair `apply_rope`.

Introduced in 11_attention_at_scale.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass

import torch
from einops import rearrange
from torch import nn

from attn_course.exercise import exercise
from attn_course.heads import merge_heads, split_heads
from attn_course.kv_cache import KVCache
from attn_course.masking import causal_mask
from attn_course.rope import apply_rope


class LatentAttention(nn.Module):
    """The weights of a multi-head latent attention layer, named after DeepSeek-V2's matrices (no bias).

    - `kv_down`: W^DKV, d_model -> d_latent, the latent c_KV that the cache keeps;
    - `k_up`, `v_up`: W^UK and W^UV, d_latent -> n_heads·d_head, head i's rows i·d_head … (i+1)·d_head - 1;
    - `q`: W^Q, d_model -> n_heads·d_head (DeepSeek-V2 compresses it too, W^UQ W^DQ; left out here);
    - `q_rope`: W^QR, d_model -> n_heads·d_rope, the decoupled RoPE query of each head;
    - `k_rope`: W^KR, d_model -> d_rope, the one RoPE key shared by every head;
    - `out`: W^O, n_heads·d_head -> d_model.

    The attention itself is the exercises: `latent_attention` (keys and values up-projected for every
    head) and `absorbed_latent_attention` (decoding from the cached latents).

    >>> attn = LatentAttention(d_model=32, n_heads=4, d_head=8, d_latent=12, d_rope=4)
    >>> attn.k_up.weight.shape, attn.k_rope.weight.shape
    (torch.Size([32, 12]), torch.Size([4, 32]))

    Introduced in 11_attention_at_scale.
    """

    def __init__(
        self, d_model: int, n_heads: int, d_head: int, d_latent: int, d_rope: int, base: float = 10000.0
    ) -> None:
        super().__init__()
        if d_rope % 2:
            raise ValueError(f"RoPE needs an even d_rope, got {d_rope}")
        self.d_model, self.n_heads, self.d_head = d_model, n_heads, d_head
        self.d_latent, self.d_rope, self.base = d_latent, d_rope, base
        self.kv_down = nn.Linear(d_model, d_latent, bias=False)
        self.k_up = nn.Linear(d_latent, n_heads * d_head, bias=False)
        self.v_up = nn.Linear(d_latent, n_heads * d_head, bias=False)
        self.q = nn.Linear(d_model, n_heads * d_head, bias=False)
        self.q_rope = nn.Linear(d_model, n_heads * d_rope, bias=False)
        self.k_rope = nn.Linear(d_model, d_rope, bias=False)
        self.out = nn.Linear(n_heads * d_head, d_model, bias=False)


@exercise("11_attention_at_scale", 6)
def latent_attention(
    attn: LatentAttention, x: torch.Tensor, positions: torch.Tensor | None = None
) -> torch.Tensor:
    """Causal multi-head latent attention of x (b, t, d_model) -> (b, t, d_model), the plain path.

    Keys and values are up-projected from the latent for every head; the compressed part and the RoPE
    part of each score are added, divided by sqrt(d_head + d_rope). `positions` (t,) are the tokens'
    absolute positions for RoPE, 0 … t-1 by default.

    >>> latent_attention(LatentAttention(32, 4, 8, 12, 4), torch.ones(2, 5, 32)).shape
    torch.Size([2, 5, 32])

    Introduced in 11_attention_at_scale.
    """
    h, t = attn.n_heads, x.shape[-2]
    latent = attn.kv_down(x)  # (b, t, d_latent): c_KV, what decoding caches
    q = split_heads(attn.q(x), h)  # (b, h, t, d_head)
    k = split_heads(attn.k_up(latent), h)  # (b, h, t, d_head)
    v = split_heads(attn.v_up(latent), h)  # (b, h, t, d_head)
    q_rope = apply_rope(split_heads(attn.q_rope(x), h), positions, attn.base)  # (b, h, t, d_rope)
    k_rope = apply_rope(attn.k_rope(x), positions, attn.base)  # (b, t, d_rope): one for all heads
    scores = q @ k.transpose(-2, -1) + q_rope @ k_rope.unsqueeze(1).transpose(-2, -1)  # (b, h, t, t)
    scores = scores / math.sqrt(attn.d_head + attn.d_rope)
    scores = scores.masked_fill(~causal_mask(t, device=x.device), float("-inf"))  # (b, h, t, t)
    weights = torch.softmax(scores, dim=-1)  # (b, h, t, t)
    return attn.out(merge_heads(weights @ v))  # (b, t, d_model)


class LatentCache:
    """What MLA caches per layer: the latents c_KV (b, t, d_latent) and the shared RoPE keys (b, t, d_rope).

    >>> cache = LatentCache()
    >>> latents, rope_keys = cache.append(0, torch.ones(2, 3, 12), torch.ones(2, 3, 4))
    >>> latents, rope_keys = cache.append(0, torch.ones(2, 1, 12), torch.ones(2, 1, 4))
    >>> cache.length(0), latents.shape, rope_keys.shape
    (4, torch.Size([2, 4, 12]), torch.Size([2, 4, 4]))

    Introduced in 11_attention_at_scale.
    """

    def __init__(self) -> None:
        self.latents: dict[int, torch.Tensor] = {}  # layer -> (b, t_past, d_latent)
        self.rope_keys: dict[int, torch.Tensor] = {}  # layer -> (b, t_past, d_rope)

    def length(self, layer: int) -> int:
        """How many positions `layer` has cached (0 before its first append)."""
        return self.latents[layer].shape[-2] if layer in self.latents else 0

    def append(
        self, layer: int, latent: torch.Tensor, rope_key: torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """Add this step's latents (b, t_new, d_latent) and rotated RoPE keys (b, t_new, d_rope) to
        `layer`; return all of its latents and RoPE keys so far."""
        if layer in self.latents:
            latent = torch.cat([self.latents[layer], latent], dim=-2)  # (b, t_past + t_new, d_latent)
            rope_key = torch.cat([self.rope_keys[layer], rope_key], dim=-2)  # (b, t_past + t_new, d_rope)
        self.latents[layer], self.rope_keys[layer] = latent, rope_key
        return latent, rope_key

    def nbytes(self) -> int:
        """Bytes held by the cached latents and RoPE keys of all layers."""
        tensors = [*self.latents.values(), *self.rope_keys.values()]
        return sum(t.numel() * t.element_size() for t in tensors)


@exercise("11_attention_at_scale", 7)
def absorbed_latent_attention(
    attn: LatentAttention, x: torch.Tensor, cache: LatentCache, layer: int
) -> torch.Tensor:
    """`attn`'s causal output (b, t_new, d_model) for new positions x, from a cache of latents only.

    As notebook 07's `cached_attention`: the new tokens sit at positions t_past … t_past + t_new - 1
    (t_past = cache.length(layer) before appending); their latents and rotated RoPE keys are appended.
    W^UK is absorbed into the query, (W^UK_i)^T q^C_i, scored against the cached latents themselves; the
    weights sum the latents, and W^UV_i, then W^O, map each head's sum out. No per-head key or value of
    a cached position is ever made.

    >>> attn, cache = LatentAttention(32, 4, 8, 12, 4), LatentCache()
    >>> absorbed_latent_attention(attn, torch.ones(2, 5, 32), cache, layer=0).shape, cache.length(0)
    (torch.Size([2, 5, 32]), 5)

    Introduced in 11_attention_at_scale.
    """
    h, t_past, t_new = attn.n_heads, cache.length(layer), x.shape[-2]
    positions = torch.arange(t_past, t_past + t_new, device=x.device)  # (t_new,): absolute positions
    k_rope = apply_rope(attn.k_rope(x), positions, attn.base)  # (b, t_new, d_rope)
    latents, rope_keys = cache.append(layer, attn.kv_down(x), k_rope)  # (b, t_k, d_latent), (b, t_k, d_rope)
    q = split_heads(attn.q(x), h)  # (b, h, t_new, d_head)
    q_rope = apply_rope(split_heads(attn.q_rope(x), h), positions, attn.base)  # (b, h, t_new, d_rope)
    w_uk = rearrange(attn.k_up.weight, "(h d) c -> h d c", h=h)  # (h, d_head, d_latent): W^UK_i
    q_latent = torch.einsum("bhtd,hdc->bhtc", q, w_uk)  # (b, h, t_new, d_latent): (W^UK_i)^T q_i
    scores = torch.einsum("bhtc,bsc->bhts", q_latent, latents)  # (b, h, t_new, t_k)
    scores = scores + torch.einsum("bhtr,bsr->bhts", q_rope, rope_keys)  # (b, h, t_new, t_k)
    scores = scores / math.sqrt(attn.d_head + attn.d_rope)
    allowed = causal_mask(t_new, latents.shape[-2], device=x.device)  # (t_new, t_k), bottom-right
    weights = torch.softmax(scores.masked_fill(~allowed, float("-inf")), dim=-1)  # (b, h, t_new, t_k)
    summed = torch.einsum("bhts,bsc->bhtc", weights, latents)  # (b, h, t_new, d_latent)
    w_uv = rearrange(attn.v_up.weight, "(h d) c -> h d c", h=h)  # (h, d_head, d_latent): W^UV_i
    out = torch.einsum("bhtc,hdc->bhtd", summed, w_uv)  # (b, h, t_new, d_head)
    return attn.out(merge_heads(out))  # (b, t_new, d_model)


# ---------------------------------------------------------------------------------------------
# For the measures of 11_attention_at_scale: what each design caches per token.


def per_head_keys_values(
    attn: LatentAttention, x: torch.Tensor, positions: torch.Tensor | None = None
) -> tuple[torch.Tensor, torch.Tensor]:
    """The keys [k^C_i; k^R] (b, h, t, d_head + d_rope) and values (b, h, t, d_head) of every head: what a
    KV cache of the decompressed layer holds (as DeepSeek-V2's first released code cached them).

    >>> [z.shape for z in per_head_keys_values(LatentAttention(32, 4, 8, 12, 4), torch.ones(2, 5, 32))]
    [torch.Size([2, 4, 5, 12]), torch.Size([2, 4, 5, 8])]

    Introduced in 11_attention_at_scale.
    """
    h = attn.n_heads
    latent = attn.kv_down(x)  # (b, t, d_latent)
    k = split_heads(attn.k_up(latent), h)  # (b, h, t, d_head)
    k_rope = apply_rope(attn.k_rope(x), positions, attn.base)  # (b, t, d_rope)
    k_rope = k_rope.unsqueeze(1).expand(-1, h, -1, -1)  # (b, h, t, d_rope): copied to every head
    keys = torch.cat([k, k_rope], dim=-1)  # (b, h, t, d_head + d_rope)
    return keys, split_heads(attn.v_up(latent), h)  # (b, h, t, d_head + d_rope), (b, h, t, d_head)


def measured_cache_bytes(
    attn: LatentAttention, x: torch.Tensor, step: Callable[..., torch.Tensor] | None = None
) -> tuple[int, int]:
    """(bytes of a LatentCache that `step` filled, bytes of notebook 07's KVCache holding the per-head keys
    and values) after caching the tokens x (b, t, d_model) of this layer, in x's dtype.

    `step(attn, x, cache, layer)` is a decoding step such as `absorbed_latent_attention` (the default).

    >>> latent, per_head = measured_cache_bytes(LatentAttention(32, 4, 8, 12, 4), torch.ones(1, 10, 32))
    >>> latent // 10, per_head // 10
    (64, 320)

    Introduced in 11_attention_at_scale.
    """
    attn = attn.to(x.dtype)
    with torch.no_grad():
        latents = LatentCache()
        (step or absorbed_latent_attention)(attn, x, latents, 0)
        per_head = KVCache()
        per_head.append(0, *(z.contiguous() for z in per_head_keys_values(attn, x)))
    return latents.nbytes(), per_head.nbytes()


@dataclass(frozen=True)
class LatentConfig:
    """The attention shape of a published MLA model: what sets its latent cache's size."""

    name: str
    n_layers: int
    n_heads: int
    d_head: int
    """qk_nope_head_dim (= v_head_dim in DeepSeek-V2)."""
    d_latent: int
    """kv_lora_rank: d_c."""
    d_rope: int
    """qk_rope_head_dim: d_h^R."""


DEEPSEEK_V2 = LatentConfig("DeepSeek-V2 (MLA)", n_layers=60, n_heads=128, d_head=128, d_latent=512, d_rope=64)
"""DeepSeek-V2, 236B (arXiv 2405.04434 §3.1.2: 60 layers, n_h = 128 heads of d_h = 128, d_c = 512,
d_h^R = 64). The same in DeepSeek-V2-Chat-0628's config.json (num_hidden_layers 60, num_attention_heads
128, qk_nope_head_dim 128, kv_lora_rank 512, qk_rope_head_dim 64, as in ModelCloud's GPTQ copy on Hugging
Face) and in the DeepSeek-V3 repository's inference/configs/config_236B.json."""


def latent_elements_per_token(config: LatentConfig) -> int:
    """Numbers MLA caches per token and layer: the latent and the shared RoPE key, d_latent + d_rope.

    >>> latent_elements_per_token(DEEPSEEK_V2)
    576

    Introduced in 11_attention_at_scale.
    """
    return config.d_latent + config.d_rope


def latent_bytes_per_token(config: LatentConfig, dtype: torch.dtype = torch.bfloat16) -> int:
    """Bytes MLA caches per token of one sequence, all layers: layers · (d_latent + d_rope) · bytes.

    >>> latent_bytes_per_token(DEEPSEEK_V2)
    69120

    Introduced in 11_attention_at_scale.
    """
    bytes_per_number = torch.empty((), dtype=dtype).element_size()
    return config.n_layers * latent_elements_per_token(config) * bytes_per_number


def equivalent_gqa_groups(config: LatentConfig) -> float:
    """The number of key/value heads of d_head a GQA cache would need to hold as much: (d_c + d_R) / (2 d_h).

    >>> equivalent_gqa_groups(DEEPSEEK_V2)
    2.25

    Introduced in 11_attention_at_scale.
    """
    return latent_elements_per_token(config) / (2 * config.d_head)
