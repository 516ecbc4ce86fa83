"""Tensor parallelism applied to the plain model (torchtitan's TP plan): the layers' tensor-, vocab- and
sequence-parallel forms, and `apply_tensor_parallel`, which swaps them into a built model (or one pipeline
layer) in place. The collectives themselves are in `tensor_parallel.py`; `parallelize.py` calls this on the meta
model before materialising each rank's slices.

    BLOCK_TP_PLAN            how a Block's linears split (Megatron's column/row pairs)
    VocabParallelEmbedding   the table split by vocabulary rows; VocabParallelLMHead its head (the loss from
                             this rank's columns, `vocab_parallel_cross_entropy`)
    SequenceParallelRMSNorm  a norm on T/tp tokens that gathers its output (`parallel.sequence_parallel`)
    vocab_split, head_loss   when the vocabulary is split, and the pipeline's loss_fn for its logits
"""

from __future__ import annotations

from functools import partial
from typing import Callable

import torch
import torch.nn.functional as F
from torch import nn

from tasks.train.model import Block, Embedding, FinalNorm, LMHead, RMSNorm, lm_loss
from tasks.train.tensor_parallel import (NO_TP, ColumnParallelLinear, RowParallelLinear, TPContext, copy_to_tp,
                                         gather_sequence, scatter_sequence, shard_parameter,
                                         vocab_parallel_embedding, vocab_parallel_lm_loss, vocab_parallel_logits)


# How each of a Block's linears splits (Megatron's pairs): q/k/v and gate/up by output rows, o and down by input
# columns, so attention and the MLP each need one all-reduce forward (after o / down) and one backward.
BLOCK_TP_PLAN: dict[str, type[ColumnParallelLinear] | type[RowParallelLinear]] = {
    "attn.wq": ColumnParallelLinear, "attn.wk": ColumnParallelLinear, "attn.wv": ColumnParallelLinear,
    "attn.wo": RowParallelLinear,
    "mlp.w1": ColumnParallelLinear, "mlp.w3": ColumnParallelLinear, "mlp.w2": RowParallelLinear,
}


class HeadSharedRMSNorm(RMSNorm):
    """Qwen3's per-head q/k RMSNorm under TP: one weight [head_dim] serves every head, but a TP rank holds only
    its own heads, so its gradient of the weight is partial. `copy_to_tp` (identity forward, all-reduce backward)
    sums it over the TP group, so every rank applies the same full gradient to its replicated copy."""

    tp: TPContext

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.normalize(x) * copy_to_tp(self.weight, self.tp)


class SequenceParallelRMSNorm(RMSNorm):
    """A norm under sequence parallelism (Korthikanti et al. 2022): it runs on this rank's T/tp tokens and
    gathers its output for the TP region after it (`sum_grad`: that region is column-parallel, so the gradient
    coming back is a partial sum to reduce-scatter; False before a replicated head). Each rank sees only its
    tokens, so its weight gradient is partial: `copy_to_tp` sums it over the TP group."""

    tp: TPContext
    sum_grad: bool = True

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = self.normalize(x) * copy_to_tp(self.weight, self.tp)                   # [B, T/tp, d]
        return gather_sequence(y, self.tp, self.sum_grad)                          # [B, T, d]


class SequenceScatteredEmbedding(Embedding):
    """A whole (replicated) table under sequence parallelism: each rank keeps its T/tp tokens' rows."""

    tp: TPContext

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        return scatter_sequence(F.embedding(ids, self.weight), self.tp, reduce=False)  # [B, T/tp, d]


class VocabParallelEmbedding(Embedding):
    """The token table split by rows over the TP group (Megatron's vocab-parallel embedding): a rank holds and
    updates V/tp rows, so a 128k-token table costs each TP rank 1/tp of its weights, gradients and Adam state."""

    tp: TPContext

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        return vocab_parallel_embedding(ids, self.weight, self.tp)                 # [B, T] -> [B, T, d]


class VocabParallelLMHead(LMHead):
    """The output projection split by vocabulary rows (its own weight, or the tied table's rows this rank
    holds). Its loss never gathers the logits: `loss` takes this rank's V/tp columns (`forward(x, shard=True)`)
    and reduces only [N]-sized values over the group, so a 128k vocabulary at 8k tokens costs each rank 1/tp of
    the [N, V] logits and softmax. `forward(x)` gathers the full [B, T, V] for callers that need every logit.
    `keep_shard` (set on a pipeline's last stage, whose output goes to its loss_fn only): forward keeps the shard."""

    tp: TPContext
    keep_shard = False

    def forward(self, x: torch.Tensor, shard: bool = False) -> torch.Tensor:
        return vocab_parallel_logits(x, self.tied[0].weight if self.tied else self.weight, self.tp,
                                     gather=not (shard or self.keep_shard))       # [B, T, V | V/tp]

    def loss(self, logits: torch.Tensor, labels: torch.Tensor, z_loss: float = 0.0) -> torch.Tensor:
        return vocab_parallel_lm_loss(logits, labels, self.tp, z_loss)


def tied_head_forward(embedding: Embedding, x: torch.Tensor) -> torch.Tensor:
    """The tied head inside a pipeline (TiedLayerSpec forward_fn): the last stage's copy of the table, split
    by rows like the first stage's when the vocabulary is (`apply_tensor_parallel`); the output goes to the
    pipeline's loss_fn only, so a split head keeps this rank's columns ([B, T, V/tp], see `head_loss`)."""
    tp = embedding.tp if isinstance(embedding, VocabParallelEmbedding) else NO_TP  # a whole table: plain logits
    return vocab_parallel_logits(x, embedding.weight, tp, gather=False)


def vocab_split(vocab_size: int, tp: TPContext) -> TPContext:
    """The TP group the vocabulary is split over (`split_vocab`: when tp divides it), else NO_TP (kept whole):
    what the loss functions take with the head's logits."""
    return tp if tp.active and vocab_size % tp.size == 0 else NO_TP


def head_loss(vocab_size: int, tp: TPContext, z_loss: float = 0.0) -> Callable[..., torch.Tensor]:
    """A pipeline's loss_fn(logits, labels) for its last stage's logits (this rank's columns when split)."""
    split = vocab_split(vocab_size, tp)
    if split.active:
        return partial(vocab_parallel_lm_loss, tp=split, z_loss=z_loss)
    return partial(lm_loss, z_loss=z_loss) if z_loss else lm_loss


def split_vocab(model: nn.Module, tp: TPContext) -> None:
    """Swap, in place, the embedding and the LM head for their vocab-parallel forms with this rank's rows
    (classes changed on the same objects, so a tied head keeps pointing at its table)."""
    for m in list(model.modules()):
        if type(m) is Embedding:
            m.weight = shard_parameter(m.weight, 0, tp)
            m.__class__, m.tp = VocabParallelEmbedding, tp
        elif type(m) is LMHead:
            if not m.tied:
                m.weight = shard_parameter(m.weight, 0, tp)
            m.__class__, m.tp = VocabParallelLMHead, tp


def sequence_parallel_norms(model: nn.Module, tp: TPContext, vocab_is_split: bool) -> None:
    """Swap, in place, the norms for their sequence-parallel form (each the entry of a TP region: the Blocks'
    two and the final norm, before a split head — or a whole one, which then gets the same gradient on every
    rank) and a whole table for one that keeps this rank's tokens. Row-parallel linears and the split table
    reduce-scatter by tokens instead of all-reducing (`tp.sequence`), so between TP regions the residual
    stream, norms and dropout hold [B, T/tp, d]: 1/tp of those activations per rank."""
    for m in list(model.modules()):
        if isinstance(m, Block):
            for norm in (m.attn_norm, m.mlp_norm):
                norm.__class__, norm.tp = SequenceParallelRMSNorm, tp
        elif type(m) is FinalNorm:
            m.__class__, m.tp, m.sum_grad = SequenceParallelRMSNorm, tp, vocab_is_split
        elif type(m) is Embedding:  # kept whole (tp does not divide the vocabulary)
            m.__class__, m.tp = SequenceScatteredEmbedding, tp


def apply_tensor_parallel(model: nn.Module, tp: TPContext, vocab_size: int | None = None) -> nn.Module:
    """Swap, in place, every Block's plain linears for this TP rank's slice of them (BLOCK_TP_PLAN); returns
    `model`. Finds the Blocks itself, so it serves the plain Transformer and a pipeline stage alike.

    Heads split contiguously: TP rank r holds query heads [r·h/tp, (r+1)·h/tp) and exactly the kv heads they
    use. The embedding and the LM head are split by vocabulary rows when tp divides the vocabulary
    (`split_vocab`; `vocab_size`, else read from the table or an untied head in `model`), else replicated;
    norms stay replicated, in their sequence-parallel form under `tp.sequence` (`sequence_parallel_norms`).
    tp = 1 changes nothing. A swapped-in module takes
    the plain one's place in its parent, so parameter names and order are unchanged (optimizer groups and
    DeepSpeed's flat buffers see the same layout)."""
    if not tp.active:
        return model
    vocab = vocab_size  # a pipeline's layers come one at a time: the final norm alone cannot tell
    if vocab is None:
        vocab = next((m.weight.size(0) for m in model.modules() if isinstance(m, Embedding)), None)
    if vocab is None:  # a pipeline stage without the table: an untied head alone knows the vocabulary
        vocab = next((m.weight.size(0) for m in model.modules() if isinstance(m, LMHead) and not m.tied), None)
    split = vocab is not None and vocab_split(vocab, tp).active
    if split:
        split_vocab(model, tp)
    if tp.sequence_parallel:
        sequence_parallel_norms(model, tp, split)
    for block in [m for m in model.modules() if isinstance(m, Block)]:
        cfg = block.attn.cfg
        if cfg.n_heads % tp.size or cfg.n_kv_heads % tp.size:
            raise ValueError(f"{cfg.n_heads} query / {cfg.n_kv_heads} kv heads do not split over {tp.size} TP ranks")
        if cfg.qk_norm:
            for norm in (block.attn.q_norm, block.attn.k_norm):
                norm.__class__, norm.tp = HeadSharedRMSNorm, tp  # same parameter, same name: only forward changes
        for path, parallel in BLOCK_TP_PLAN.items():
            owner_path, _, name = path.rpartition(".")
            owner = block.get_submodule(owner_path)
            setattr(owner, name, parallel.from_linear(getattr(owner, name), tp))
    return model
