"""Attention masks and positions for packed rows and sliding windows (the model's `Attention` and `Transformer`):
boolean SDPA masks, True = may attend."""

from __future__ import annotations

import torch


def block_causal_mask(segment_ids: torch.Tensor) -> torch.Tensor:
    """Boolean SDPA mask [B, 1, T, T] (True = may attend): j ≤ i and seg[j] == seg[i].

    The diagonal is always allowed, so no row is fully masked (padding in its own segment stays finite).
    """
    T = segment_ids.size(-1)
    same = segment_ids[:, :, None] == segment_ids[:, None, :]                         # [B, T, T]
    causal = torch.ones(T, T, dtype=torch.bool, device=segment_ids.device).tril()   # [T, T]
    return (same & causal).unsqueeze(1)                                             # [B, 1, T, T]


def sliding_window_mask(T: int, window: int, device: torch.device) -> torch.Tensor:
    """Boolean mask [T, T]: causal, and token i sees j only if i - j < window (itself included)."""
    i = torch.arange(T, device=device)
    dist = i[:, None] - i[None, :]                                                  # [T, T] i - j
    return (dist >= 0) & (dist < window)


def positions_from_segments(segment_ids: torch.Tensor) -> torch.Tensor:
    """Positions [B, T] restarting at 0 wherever the segment id changes (segments are contiguous runs)."""
    B, T = segment_ids.shape
    idx = torch.arange(T, device=segment_ids.device).expand(B, T)                   # [B, T]
    start = torch.ones_like(segment_ids, dtype=torch.bool)
    start[:, 1:] = segment_ids[:, 1:] != segment_ids[:, :-1]                        # a run begins here
    first = torch.where(start, idx, torch.zeros_like(idx)).cummax(dim=1).values     # [B, T] start of own run
    return idx - first
