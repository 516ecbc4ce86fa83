"""A small Llama-style decoder, written as a flat list of layers so a DeepSpeed pipeline can cut it.

    layer 0         Embedding          ids [B, T] -> x [B, T, d]
    layers 1..N     Block              x -> x + Attn(RMSNorm(x)) -> x + SwiGLU(RMSNorm(x))
    layer N+1       FinalNorm          RMSNorm
    layer N+2       LMHead             x [B, T, d] -> logits [B, T, V]  (weight = embedding's when tied)

Attention: RoPE (rotate-half convention, as Hugging Face Llama; tasks/train/modeling/rope.py), grouped-query attention
(each kv head serves n_heads / n_kv_heads query heads, repeated before `F.scaled_dot_product_attention`).

The fast path, the same mathematics with fewer trips through memory (what training builds, `fused=True`):
q/k/v from one linear `wqkv` and gate/up from one `w13` (tasks/train/modeling/fused.py; the separate `wq`/`wk`/`wv`/
`w1`/`w3` form is what LoRA targets and the reference the tests compare against), `F.rms_norm` (one kernel on
CUDA), RoPE without a concatenated rotated copy, and a training loss straight from the final hidden states
(tasks/train/modeling/loss.py: the head's matmul and the cross entropy chunk by chunk, never the [B, T, V] logits).

Packed SFT rows (optional, pp = 1 only): `Transformer.forward(ids, segment_ids=..., position_ids=...)` makes
attention block-diagonal causal (token i sees j only if j ≤ i and seg[j] == seg[i]) and RoPE use the given
positions, so samples packed into one row cannot see each other and each starts at position 0. Without them the
forward is the unchanged `is_causal=True` path; pipeline layers only ever get the activation tensor.

Generation (pp = 1): `Transformer.forward(ids, position_ids=..., cache=KVCache(...))` runs only the new tokens,
appending their keys/values to the cache at their positions (tasks/train/modeling/kv_cache.py, per-row positions).

No parallel code lives here. Tensor parallelism is applied to a built model by `tp_model.py`, which swaps the
plain `nn.Linear`s for column/row-parallel ones holding this rank's slice; the forward reads the number of heads
from the projections' output (`view(B, T, -1, hd)`), so the same code runs whole or on a TP rank's heads.

Initialization is a pure function of (seed, parameter name in the plain model): N(0, init_std) from a generator
seeded by the name (`init_normal`; the global RNG is never drawn from), the residual output projections (o, down)
scaled by 1/sqrt(2·n_layers) (GPT-2), norms = 1. Hence the pp = 1 / tp = 1 model, its TP shards and its
pipeline stages all start from the same weights. Every parameter carries its recipe (`init_std` or `init_fill`,
`tag`), so a model built under `torch.device("meta")` (no values drawn) can be materialised later, slice by slice,
to exactly these values (`tasks/train/checkpointing/init_weights.py: RandomSource`).

`Transformer` (pp = 1) is the plain wrapper: `state_dict()` keys `layers.<i>.<param>` of the separate form are the
format of the consolidated `model.safetensors` (a fused model's are converted: `fused.plain_state`); a tied head has
no key of its own.
"""

from __future__ import annotations

import hashlib
import math

import torch
import torch.nn.functional as F
from torch import nn
from torch.utils.checkpoint import checkpoint

from specs.architecture import ModelConfig  # the shape numbers live there (param_count, flops_per_token)
from tasks.train.modeling.fused import Parts, mark, parts_of, split_output
from tasks.train.modeling.kv_cache import KVCache, LayerCache, grouped_attention
from tasks.train.modeling.loss import linear_cross_entropy, linear_token_logprobs
from tasks.train.modeling.masks import block_causal_mask, positions_from_segments, sliding_window_mask
from tasks.train.modeling.rope import apply_rope, rope_at, rope_scaling, rope_tables


# ---------------------------------------------------------------------------------------------- initialization
def name_seed(seed: int, name: str) -> int:
    """A 63-bit seed from (run seed, parameter name): stable across machines, processes and layouts."""
    digest = hashlib.blake2b(f"{seed}:{name}".encode(), digest_size=8, person=b"forgeline-init").digest()
    return int.from_bytes(digest, "big") >> 1


def init_normal(shape: tuple[int, ...], std: float, seed: int, name: str) -> torch.Tensor:
    """The full (unsplit) weight `name` drawn from N(0, std²) with its own generator."""
    gen = torch.Generator().manual_seed(name_seed(seed, name))
    return torch.empty(shape).normal_(0.0, std, generator=gen)


def tag(p: nn.Parameter, std: float | None = None, fill: float | None = None) -> nn.Parameter:
    """Record how `p` is initialised (N(0, std²) from its name's generator, or the constant `fill`)."""
    p.init_std, p.init_fill = std, fill  # type: ignore[attr-defined]
    return p


def normal_param(shape: tuple[int, ...], std: float, seed: int, name: str) -> nn.Parameter:
    """`init_normal` as a tagged parameter (on the meta device when that is the default: nothing drawn)."""
    return tag(nn.Parameter(init_normal(shape, std, seed, name)), std=std)


def linear(in_features: int, out_features: int, std: float, seed: int, name: str, bias: bool = False) -> nn.Linear:
    """`nn.Linear` whose weight [out, in] is `init_normal(..., name)` (and bias, if any, zeros).

    Built on the meta device first: its default (kaiming) init would draw from the global RNG and shift every
    later random draw (dropout masks, the RNG state checkpoints save) against a model that never drew."""
    layer = nn.Linear(in_features, out_features, bias=bias, device="meta")
    layer.weight = normal_param((out_features, in_features), std, seed, name)
    if bias:
        layer.bias = tag(nn.Parameter(torch.zeros(out_features)), fill=0.0)
    return layer


def fused_linear(in_features: int, parts: Parts, std: float, seed: int, prefix: str, bias: bool = False
                 ) -> nn.Linear:
    """One `nn.Linear` for the linears `parts` ((name, out rows) reading the same input): weight [Σ rows, in],
    the part `name`'s rows drawn exactly as `linear(..., f"{prefix}.{name}.weight")` draws them, so a fused model
    starts from the same values as the separate one (tasks/train/modeling/fused.py converts at the boundaries)."""
    total = sum(rows for _, rows in parts)
    layer = nn.Linear(in_features, total, bias=bias, device="meta")
    weight = torch.cat([init_normal((rows, in_features), std, seed, f"{prefix}.{name}.weight")
                        for name, rows in parts])                                   # [Σ rows, in]
    layer.weight = mark(tag(nn.Parameter(weight), std=std), parts)
    if bias:
        layer.bias = mark(tag(nn.Parameter(torch.zeros(total)), fill=0.0), parts)
    return layer


# ----------------------------------------------------------------------------------------------- building blocks
class RMSNorm(nn.Module):
    """x / rms(x) · weight over the last dim, in fp32 (`F.rms_norm`: one fused kernel on CUDA; on CPU torch
    composes it from the same steps as the written-out form, x·rsqrt(mean(x²) + eps) then ·weight)."""

    def __init__(self, dim: int, eps: float):
        super().__init__()
        self.eps = eps
        self.weight = tag(nn.Parameter(torch.ones(dim)), fill=1.0)

    def norm(self, x: torch.Tensor, weight: torch.Tensor) -> torch.Tensor:
        return F.rms_norm(x, (x.size(-1),), weight, self.eps)                      # [..., dim]

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.norm(x, self.weight)


def repeat_kv(x: torch.Tensor, n_rep: int) -> torch.Tensor:
    """[B, Hkv, T, hd] -> [B, Hkv·n_rep, T, hd]: kv head j serves query heads j·n_rep .. j·n_rep + n_rep - 1."""
    return x if n_rep == 1 else x.repeat_interleave(n_rep, dim=1)


def separate(layers: list[nn.Module], outputs: list[torch.Tensor]) -> list[torch.Tensor]:
    """The projections' outputs one per plain linear: a fused linear's output split into its parts' views."""
    out: list[torch.Tensor] = []
    for layer, y in zip(layers, outputs):
        out.extend(split_output(y, layer.weight) if parts_of(layer.weight) else [y])
    return out


class Attention(nn.Module):
    """Multi-head attention with RoPE and grouped-query heads. `fused`: q, k and v come from one linear `wqkv`
    (weight [(h + 2·hkv)·hd, d], one GEMM; tasks/train/modeling/fused.py), else from `wq`, `wk`, `wv` (the form LoRA
    targets one by one, and the reference the fused form is tested against)."""

    def __init__(self, cfg: ModelConfig, prefix: str, seed: int, fused: bool = False):
        super().__init__()
        d, hd, std, bias = cfg.d_model, cfg.head_dim, cfg.init_std, cfg.attn_bias
        self.head_dim, self.cfg = hd, cfg
        parts = (("wq", cfg.n_heads * hd), ("wk", cfg.n_kv_heads * hd), ("wv", cfg.n_kv_heads * hd))
        if fused:
            self.wqkv = fused_linear(d, parts, std, seed, prefix, bias)
        else:
            for name, rows in parts:
                setattr(self, name, linear(d, rows, std, seed, f"{prefix}.{name}.weight", bias))
        self.wo = linear(cfg.n_heads * hd, d, std / math.sqrt(2 * cfg.n_layers), seed, f"{prefix}.wo.weight")
        if cfg.qk_norm:  # per-head RMSNorm of q and k (Qwen3): one hd-wide weight shared by all heads
            self.q_norm, self.k_norm = RMSNorm(hd, cfg.norm_eps), RMSNorm(hd, cfg.norm_eps)
        self.resid_dropout = nn.Dropout(cfg.dropout)

    def projections(self) -> list[nn.Linear]:
        """The linears that make q, k and v: [wqkv] or [wq, wk, wv]."""
        return [self.wqkv] if hasattr(self, "wqkv") else [self.wq, self.wk, self.wv]

    def forward(self, x: torch.Tensor, attn_mask: torch.Tensor | None = None,
                position_ids: torch.Tensor | None = None, cache: LayerCache | None = None) -> torch.Tensor:
        """x [B, T, d]; optional attn_mask [B, 1, T, T] bool (replaces the causal mask) and positions [B, T].
        With `cache` (generation; positions and `KVCache.begin`'s mask [B, 1, T, n] required): this step's k, v
        are written at their positions and the queries attend to the cached slots the mask allows.

        h / hkv are the heads the projections produce: all of them, or one TP rank's share once tp_model.py
        has split the projections (hence `-1` in the views instead of the config's counts)."""
        q, k, v = separate(self.projections(), [m(x) for m in self.projections()])  # [B, T, (h|hkv)·hd]
        return self.attend(q, k, v, attn_mask, position_ids, cache)

    def attend(self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, attn_mask: torch.Tensor | None = None,
               position_ids: torch.Tensor | None = None, cache: LayerCache | None = None) -> torch.Tensor:
        """Everything after the q/k/v projections: q [B, T, h·hd], k and v [B, T, hkv·hd] -> [B, T, d].
        Split from `forward` so a parallel form can swap the projection step alone (tp_model's sequence-
        parallel attention projects the gathered sequence in one `gather_linears`)."""
        B, T, _ = q.shape
        cfg, scaling = self.cfg, rope_scaling(self.cfg)
        q = q.view(B, T, -1, self.head_dim)                                        # [B, T, h, hd]
        k = k.view(B, T, -1, self.head_dim)                                        # [B, T, hkv, hd]
        v = v.view(B, T, -1, self.head_dim).transpose(1, 2)                        # [B, hkv, T, hd]
        if cfg.qk_norm:
            q, k = self.q_norm(q), self.k_norm(k)
        q, k = q.transpose(1, 2), k.transpose(1, 2)                                # [B, h|hkv, T, hd]
        if position_ids is None:
            cos, sin = rope_tables(T, self.head_dim, cfg.rope_theta, q.device, q.dtype, scaling)  # [T, hd]
        else:  # table long enough for any position of a packed row (positions restart per sample) or cache
            n_table = max(T, cfg.seq_len, cache.capacity if cache is not None else 0)
            cos, sin = rope_at(position_ids, self.head_dim, cfg.rope_theta, n_table, q.dtype,
                               scaling)                                             # [B, 1, T, hd]
        q, k = apply_rope(q, cos, sin), apply_rope(k, cos, sin)
        p = cfg.dropout if self.training else 0.0
        if cache is not None:  # all earlier positions' keys/values join this step's; attn_mask: KVCache.begin's
            k, v = cache.update(k, v, position_ids, attn_mask.size(-1))            # [B, hkv, n, hd]
            y = grouped_attention(q, k, v, attn_mask, p)                            # [B, h, T, hd]
        else:
            rep = q.size(1) // k.size(1)                                            # query heads per kv head
            k, v = repeat_kv(k, rep), repeat_kv(v, rep)                            # [B, h, T, hd]
            if cfg.sliding_window and T > cfg.sliding_window:  # older tokens fall out of the window
                window = sliding_window_mask(T, cfg.sliding_window, q.device)      # [T, T]
                attn_mask = window if attn_mask is None else attn_mask & window    # [(B, 1,) T, T]
            if attn_mask is None:  # the pretraining path: is_causal lets SDPA pick its fastest (flash) kernel
                y = F.scaled_dot_product_attention(q, k, v, is_causal=True, dropout_p=p)      # [B, h, T, hd]
            else:  # an explicit boolean mask: SDPA's memory-efficient / math kernels (flash takes no mask)
                y = F.scaled_dot_product_attention(q, k, v, attn_mask=attn_mask, dropout_p=p)  # [B, h, T, hd]
        y = self.wo(y.transpose(1, 2).reshape(B, T, -1))                           # [B, T, h·hd] -> [B, T, d]
        return self.resid_dropout(y) if self.training and self.resid_dropout.p else y  # p 0: skip the call


class SwiGLU(nn.Module):
    """w2(silu(w1 x) · w3 x). `fused`: gate and up from one linear `w13` (weight [2·h, d]), else w1 and w3."""

    def __init__(self, cfg: ModelConfig, prefix: str, seed: int, fused: bool = False):
        super().__init__()
        d, h, std = cfg.d_model, cfg.ffn_hidden, cfg.init_std
        if fused:
            self.w13 = fused_linear(d, (("w1", h), ("w3", h)), std, seed, prefix)  # gate, up
        else:
            self.w1 = linear(d, h, std, seed, f"{prefix}.w1.weight")  # gate
            self.w3 = linear(d, h, std, seed, f"{prefix}.w3.weight")  # up
        self.w2 = linear(h, d, std / math.sqrt(2 * cfg.n_layers), seed, f"{prefix}.w2.weight")  # down
        self.dropout = nn.Dropout(cfg.dropout)

    def projections(self) -> list[nn.Linear]:
        """The linears that make gate and up: [w13] or [w1, w3]."""
        return [self.w13] if hasattr(self, "w13") else [self.w1, self.w3]

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        gate, up = separate(self.projections(), [m(x) for m in self.projections()])  # [B, T, h] each
        return self.combine(gate, up)                                              # [B, T, d]

    def combine(self, gate: torch.Tensor, up: torch.Tensor) -> torch.Tensor:
        """Everything after the gate/up projections ([B, T, h] each): silu(gate)·up, down, dropout. Split from
        `forward` so a parallel form can swap the projection step alone (as `Attention.attend`)."""
        y = self.w2(F.silu(gate) * up)                                             # [B, T, h] -> [B, T, d]
        return self.dropout(y) if self.training and self.dropout.p else y


# --------------------------------------------------------------------------------------------- pipeline layers
class Embedding(nn.Module):
    def __init__(self, cfg: ModelConfig, seed: int, index: int = 0):
        super().__init__()
        self.weight = normal_param((cfg.vocab_size, cfg.d_model), cfg.init_std, seed,
                                   f"layers.{index}.weight")                      # [V, d]

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        return F.embedding(ids, self.weight)                                       # [B, T] -> [B, T, d]


class Block(nn.Module):
    def __init__(self, cfg: ModelConfig, index: int, seed: int, checkpointing: bool = False, fused: bool = False):
        super().__init__()
        self.attn_norm = RMSNorm(cfg.d_model, cfg.norm_eps)
        self.attn = Attention(cfg, f"layers.{index}.attn", seed, fused)
        self.mlp_norm = RMSNorm(cfg.d_model, cfg.norm_eps)
        self.mlp = SwiGLU(cfg, f"layers.{index}.mlp", seed, fused)
        self.checkpointing = checkpointing  # recompute in backward (pp = 1; a pipeline does its own)

    def _forward(self, x: torch.Tensor, attn_mask: torch.Tensor | None = None,
                 position_ids: torch.Tensor | None = None, cache: LayerCache | None = None) -> torch.Tensor:
        x = x + self.attn(self.attn_norm(x), attn_mask, position_ids, cache)       # [B, T, d]
        return x + self.mlp(self.mlp_norm(x))                                      # [B, T, d]

    def forward(self, x: torch.Tensor, attn_mask: torch.Tensor | None = None,
                position_ids: torch.Tensor | None = None, cache: LayerCache | None = None) -> torch.Tensor:
        """A pipeline calls this with x alone; the packed-SFT and generation extras come only from
        `Transformer.forward`."""
        if self.checkpointing and self.training and torch.is_grad_enabled():
            return checkpoint(self._forward, x, attn_mask, position_ids, use_reentrant=False)
        return self._forward(x, attn_mask, position_ids, cache)


class FinalNorm(RMSNorm):
    def __init__(self, cfg: ModelConfig):
        super().__init__(cfg.d_model, cfg.norm_eps)


class LMHead(nn.Module):
    """logits = x @ Wᵀ; `tied_to` shares the embedding's weight (then this layer owns no parameter).
    `compiled_loss` (set where the blocks are compiled): the chunked loss's elementwise math runs compiled."""

    compiled_loss = False

    def __init__(self, cfg: ModelConfig, seed: int, index: int, tied_to: Embedding | None = None):
        super().__init__()
        if tied_to is not None:
            self.tied = [tied_to]  # a list: not registered as a submodule, so parameters are not listed twice
        else:
            self.tied = []
            self.weight = normal_param((cfg.vocab_size, cfg.d_model), cfg.init_std, seed,
                                       f"layers.{index}.weight")                  # [V, d]

    def forward(self, x: torch.Tensor, shard: bool = False) -> torch.Tensor:
        """Logits [B, T, V]. `shard`: the columns this rank holds (all of them here; a vocab-parallel head's
        own V/tp under tensor parallelism), what `loss` takes."""
        w = self.tied[0].weight if self.tied else self.weight
        return F.linear(x, w)                                                      # [B, T, d] -> [B, T, V]

    def loss(self, logits: torch.Tensor, labels: torch.Tensor, z_loss: float = 0.0) -> torch.Tensor:
        """The training loss of `forward(x, shard=True)`'s logits (a vocab-parallel head computes it without
        gathering them)."""
        return lm_loss(logits, labels, z_loss)

    def loss_from_hidden(self, x: torch.Tensor, labels: torch.Tensor, z_loss: float = 0.0,
                         token_weights: torch.Tensor | None = None) -> torch.Tensor:
        """`loss(forward(x))` without the [B, T, V] logits: the matmul and the cross entropy chunk by chunk
        (tasks/train/modeling/loss.py); equal within fp32 rounding, gradients included. `token_weights` [B, T]: instead
        the sum Σ w·ce (SFT's assistant-only loss; the caller normalises)."""
        w = self.tied[0].weight if self.tied else self.weight
        return linear_cross_entropy(x, w, labels, token_weights, z_loss, compiled=self.compiled_loss)

    def token_logprobs(self, x: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
        """log p(label) per token [B, T] fp32 (0 where the label is -100), chunk by chunk without the [B, T, V]
        logits (tasks/train/modeling/loss.py): what preference tuning sums per sequence."""
        w = self.tied[0].weight if self.tied else self.weight
        return linear_token_logprobs(x, w, labels)


def lm_loss(logits: torch.Tensor, labels: torch.Tensor, z_loss: float = 0.0) -> torch.Tensor:
    """Mean next-token cross entropy; logits [B, T, V], labels [B, T]. With `z_loss` > 0 plus
    z_loss · mean over tokens of (log Σ exp logits)² (PaLM's auxiliary loss)."""
    flat = logits.float().reshape(-1, logits.size(-1))                            # [B·T, V]
    ce = F.cross_entropy(flat, labels.reshape(-1))
    if not z_loss:
        return ce
    return ce + z_loss * torch.logsumexp(flat, dim=-1).pow(2).mean()


def head_index(cfg: ModelConfig) -> int:
    return cfg.n_layers + 2


class Transformer(nn.Module):
    """The plain (pp = 1) model: the same layers, run in order. forward(ids) -> logits, or the loss with labels.

    Packed rows: pass `segment_ids` [B, T] (block-diagonal causal attention; positions then restart at 0 per
    segment unless `position_ids` [B, T] are given) and/or `position_ids` alone (RoPE positions, causal mask).
    Generation: `cache` (a `KVCache`) with `position_ids` [B, T], the slots the new tokens take in each row;
    `last` [B] (optional) returns only the logits of token `last[b]` of each row, [B, 1, V].
    `shard_logits`: the head's own vocabulary columns (V/tp under a vocab-parallel head, else all V), for
    `tensor_parallel.token_cross_entropy`; the loss with `labels` is computed from them, never from gathered logits.
    With `labels` the mean loss (tasks/train/modeling/loss.py, no whole logits), or with `label_weights` [B, T] the sum
    Σ weight·cross-entropy (SFT: weights 1 on assistant tokens), or with `per_token` the log-probability of each
    label [B, T] (preference tuning sums them per sequence).
    """

    def __init__(self, cfg: ModelConfig, seed: int, checkpointing: bool = False, fused: bool = False):
        super().__init__()
        self.cfg = cfg
        emb = Embedding(cfg, seed)
        blocks = [Block(cfg, i, seed, checkpointing, fused) for i in range(1, cfg.n_layers + 1)]
        head = LMHead(cfg, seed, head_index(cfg), tied_to=emb if cfg.tie_embeddings else None)
        self.layers = nn.ModuleList([emb, *blocks, FinalNorm(cfg), head])

    def forward(self, ids: torch.Tensor, labels: torch.Tensor | None = None,
                segment_ids: torch.Tensor | None = None, position_ids: torch.Tensor | None = None,
                z_loss: float = 0.0, cache: KVCache | None = None, last: torch.Tensor | None = None,
                shard_logits: bool = False, label_weights: torch.Tensor | None = None,
                per_token: bool = False) -> torch.Tensor:
        x = ids                                                                    # [B, T]
        if cache is not None:
            if position_ids is None or segment_ids is not None:
                raise ValueError("a KV cache needs position_ids and takes no segment_ids")
            mask, blocks = cache.begin(position_ids, self.cfg.sliding_window), iter(cache.layers)  # [B, 1, T, n]
            for layer in self.layers[:-1]:
                x = layer(x, mask, position_ids, next(blocks)) if isinstance(layer, Block) else layer(x)
            if last is not None:  # only these tokens' logits (a prefill needs each row's final one)
                x = x[torch.arange(x.size(0), device=x.device), last][:, None]     # [B, 1, d]
            return self.layers[-1](x)                                              # [B, T | 1, V]
        if segment_ids is None and position_ids is None:
            for layer in self.layers[:-1]:
                x = layer(x)                                                       # ... -> [B, T, d]
        else:
            if position_ids is None:
                position_ids = positions_from_segments(segment_ids)                # [B, T]
            mask = None if segment_ids is None else block_causal_mask(segment_ids)  # [B, 1, T, T], built once
            for layer in self.layers[:-1]:
                x = layer(x, mask, position_ids) if isinstance(layer, Block) else layer(x)
        head = self.layers[-1]
        if labels is None:
            return head(x, shard=shard_logits)                                     # [B, T, V | V/tp]
        if per_token:
            return head.token_logprobs(x, labels)                                  # [B, T] fp32
        return head.loss_from_hidden(x, labels, z_loss, label_weights)             # no [B, T, V] logits
