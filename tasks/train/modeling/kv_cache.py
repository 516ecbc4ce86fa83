"""A key/value cache for generation with `Transformer(ids, position_ids=..., cache=...)`.

Layout: per block, keys and values [B, Hkv, S, hd] (S = capacity slots). Slot s of row b holds the token at
position s of that row, so every row keeps its own positions (no left padding): prompts of different lengths are
right-padded for the prefill, and a row's next token is written at its own next slot, overwriting the padding's
garbage before any real query can see that slot. K is stored after RoPE (rotated at its own position once) and
before the GQA repeat (the cache stays n_heads / n_kv_heads times smaller than the attention's K).

Masking (`KVCache.begin`, once per forward): a query at position p of row b sees slot j iff j ≤ p — and, with a
sliding window w (Mistral), p - j < w. The diagonal is always allowed, so padding queries stay finite. Rows can
be dropped between steps (`KVCache.keep`) when their continuation has finished.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F


def grouped_attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, mask: torch.Tensor,
                      dropout_p: float = 0.0) -> torch.Tensor:
    """SDPA of q [B, h, T, hd] over cached k, v [B, Hkv, n, hd] under mask [B, 1, T, n], without repeating K/V
    per query head (that copy grows with the cache): the rep = h / Hkv query heads of kv head j (heads
    j·rep .. j·rep + rep - 1, repeat_kv's order) become rep·T queries of that one head, row r·T + t."""
    B, h, T, hd = q.shape
    rep = h // k.size(1)
    folded = q.reshape(B, k.size(1), rep * T, hd)                                      # [B, Hkv, rep·T, hd]
    mask = mask.repeat(1, 1, rep, 1) if rep > 1 else mask                              # [B, 1, rep·T, n]
    y = F.scaled_dot_product_attention(folded, k, v, attn_mask=mask, dropout_p=dropout_p)
    return y.reshape(B, h, T, hd)                                                      # [B, h, T, hd]


class LayerCache:
    """One block's keys and values [B, Hkv, S, hd], allocated on the first write (dtype / device / heads of K)."""

    def __init__(self, batch: int, capacity: int):
        self.batch, self.capacity = batch, capacity
        self.k: torch.Tensor | None = None
        self.v: torch.Tensor | None = None

    def update(self, k: torch.Tensor, v: torch.Tensor, positions: torch.Tensor, n: int
               ) -> tuple[torch.Tensor, torch.Tensor]:
        """Write k, v [B, Hkv, T, hd] at the slots `positions` [B, T]; return slots 0..n-1 (n = the largest
        position + 1, from `KVCache.begin`), [B, Hkv, n, hd] each; slots past a row's own position are masked."""
        if self.k is None:
            B, H, _, hd = k.shape
            self.k = k.new_zeros(B, H, self.capacity, hd)                              # [B, Hkv, S, hd]
            self.v = v.new_zeros(B, H, self.capacity, hd)
        rows = torch.arange(k.size(0), device=k.device)[:, None]                        # [B, 1]
        # Advanced indices on dims 0 and 2 around a slice: the indexed view is [B, T, Hkv, hd].
        self.k[rows, :, positions] = k.transpose(1, 2)
        self.v[rows, :, positions] = v.transpose(1, 2)
        return self.k[:, :, :n], self.v[:, :, :n]                                      # [B, Hkv, n, hd]

    def keep(self, rows: torch.Tensor) -> None:
        if self.k is not None:
            self.k, self.v = self.k[rows], self.v[rows]
        self.batch = int(rows.numel())


class KVCache:
    """The cache of every block of one model for `batch` rows of at most `capacity` positions each."""

    def __init__(self, n_layers: int, batch: int, capacity: int):
        self.capacity = capacity
        self.layers = [LayerCache(batch, capacity) for _ in range(n_layers)]

    def begin(self, positions: torch.Tensor, window: int | None) -> torch.Tensor:
        """The boolean SDPA mask [B, 1, T, n] (True = may attend) of one forward whose new tokens sit at
        `positions` [B, T]; n = the largest position + 1. Built once per forward, shared by every block."""
        n = int(positions.max()) + 1
        if n > self.capacity:
            raise IndexError(f"position {n - 1} is past the cache's {self.capacity} slots")
        slots = torch.arange(n, device=positions.device)                               # [n]
        dist = positions[:, None, :, None] - slots                                      # [B, 1, T, n] p - j
        allowed = dist >= 0
        return allowed & (dist < window) if window else allowed

    def keep(self, rows: list[int]) -> None:
        """Keep only these rows (in this order): finished continuations stop costing compute."""
        if not self.layers:
            return
        first = self.layers[0]
        index = torch.tensor(rows, dtype=torch.long, device=None if first.k is None else first.k.device)
        for layer in self.layers:
            layer.keep(index)
