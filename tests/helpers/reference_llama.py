"""A compact Llama written the way nanoGPT's author writes one (the structure of karpathy/llama2.c's model.py:
separate wq/wk/wv, the RMSNorm spelled out, RoPE on real/imaginary pairs, SwiGLU as w2(silu(w1 x) · w3 x), the
logits of every token then `F.cross_entropy`): the yardstick of the same architecture and shape that
`tests/test_step_census.py` holds forgeline's training step to (no more kernels, no more bytes per step). Written
for the census only: its weights are plain normal draws, its RoPE pairs dims (2i, 2i+1) (Meta's layout), so its
numbers are not forgeline's; what it costs per step is the point.
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import nn


class RefRMSNorm(nn.Module):
    def __init__(self, dim: int, eps: float):
        super().__init__()
        self.eps, self.weight = eps, nn.Parameter(torch.ones(dim))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        normed = x.float() * torch.rsqrt(x.float().pow(2).mean(-1, keepdim=True) + self.eps)
        return normed.type_as(x) * self.weight


def rope_pairs(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    """x [B, T, h, hd]: rotate the pairs (2i, 2i+1) by cos/sin [T, hd/2]."""
    re, im = x.float().reshape(*x.shape[:-1], -1, 2).unbind(-1)                    # [B, T, h, hd/2] each
    cos, sin = cos[None, :, None, :], sin[None, :, None, :]
    out = torch.stack([re * cos - im * sin, re * sin + im * cos], dim=-1)          # [B, T, h, hd/2, 2]
    return out.flatten(3).type_as(x)                                               # [B, T, h, hd]


class RefBlock(nn.Module):
    def __init__(self, d: int, n_heads: int, n_kv: int, hidden: int, eps: float):
        super().__init__()
        hd = d // n_heads
        self.n_heads, self.n_kv, self.hd = n_heads, n_kv, hd
        self.wq, self.wk = nn.Linear(d, n_heads * hd, bias=False), nn.Linear(d, n_kv * hd, bias=False)
        self.wv, self.wo = nn.Linear(d, n_kv * hd, bias=False), nn.Linear(n_heads * hd, d, bias=False)
        self.w1, self.w3 = nn.Linear(d, hidden, bias=False), nn.Linear(d, hidden, bias=False)
        self.w2 = nn.Linear(hidden, d, bias=False)
        self.attn_norm, self.ffn_norm = RefRMSNorm(d, eps), RefRMSNorm(d, eps)

    def attention(self, x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
        B, T, _ = x.shape
        q = rope_pairs(self.wq(x).view(B, T, self.n_heads, self.hd), cos, sin)    # [B, T, h, hd]
        k = rope_pairs(self.wk(x).view(B, T, self.n_kv, self.hd), cos, sin)       # [B, T, hkv, hd]
        v = self.wv(x).view(B, T, self.n_kv, self.hd)
        rep = self.n_heads // self.n_kv
        k, v = (t.repeat_interleave(rep, dim=2) if rep > 1 else t for t in (k, v))
        q, k, v = (t.transpose(1, 2) for t in (q, k, v))                           # [B, h, T, hd]
        y = F.scaled_dot_product_attention(q, k, v, is_causal=True)                # [B, h, T, hd]
        return self.wo(y.transpose(1, 2).reshape(B, T, -1))                        # [B, T, d]

    def forward(self, x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
        x = x + self.attention(self.attn_norm(x), cos, sin)                       # [B, T, d]
        h = self.ffn_norm(x)
        return x + self.w2(F.silu(self.w1(h)) * self.w3(h))                       # [B, T, d]


class RefLlama(nn.Module):
    """Token embedding, blocks, final norm, tied output; forward(ids, targets) -> mean cross entropy."""

    def __init__(self, vocab: int, seq_len: int, n_layers: int, n_heads: int, n_kv: int, d: int, hidden: int,
                 eps: float = 1e-5, theta: float = 10_000.0, seed: int = 0):
        super().__init__()
        torch.manual_seed(seed)
        self.tok = nn.Embedding(vocab, d)
        self.blocks = nn.ModuleList([RefBlock(d, n_heads, n_kv, hidden, eps) for _ in range(n_layers)])
        self.norm = RefRMSNorm(d, eps)
        self.output = nn.Linear(d, vocab, bias=False)
        self.output.weight = self.tok.weight
        for m in self.modules():
            if isinstance(m, (nn.Linear, nn.Embedding)):
                nn.init.normal_(m.weight, 0.0, 0.02 / (math.sqrt(2 * n_layers) if m in self._residual() else 1))
        hd = d // n_heads
        freqs = 1.0 / theta ** (torch.arange(0, hd, 2).float() / hd)                 # [hd/2]
        angles = torch.outer(torch.arange(seq_len).float(), freqs)                    # [T, hd/2]
        self.register_buffer("cos", angles.cos(), persistent=False)
        self.register_buffer("sin", angles.sin(), persistent=False)

    def _residual(self) -> list[nn.Module]:
        return [m for b in getattr(self, "blocks", []) for m in (b.wo, b.w2)]

    def forward(self, ids: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
        T = ids.size(1)
        h = self.tok(ids)                                                           # [B, T, d]
        for block in self.blocks:
            h = block(h, self.cos[:T], self.sin[:T])
        logits = self.output(self.norm(h))                                          # [B, T, V]
        return F.cross_entropy(logits.float().view(-1, logits.size(-1)), targets.view(-1))
