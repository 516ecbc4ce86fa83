"""Tensor parallelism applied to the plain model (torchtitan's TP plan): the layers' tensor-, vocab- and
sequence-parallel forms, and `apply_tensor_parallel`, which swaps them into a built model (or one pipeline
layer) in place. The collectives themselves are in `tensor_parallel.py` and `sequence_parallel.py`;
`parallelize.py` calls this on the meta model before materialising each rank's slices.

    BLOCK_TP_PLAN            how a Block's linears split (Megatron's column/row pairs)
    VocabParallelEmbedding   the table split by vocabulary rows; VocabParallelLMHead its head (the loss from
                             this rank's columns, `vocab_parallel_cross_entropy`)
    SequenceLocalRMSNorm     a Block's norm under `parallel.sequence_parallel`: T/tp tokens in and out
    SequenceParallelAttention / SequenceParallelSwiGLU   their q/k/v and gate/up in one `gather_linears` each
                             (gathered inside, only the local input saved: sequence_parallel.py)
    SequenceParallelRMSNorm  the final norm on T/tp tokens, gathering its output for a whole head (a split
                             head gathers inside its matmul, so its final norm stays sequence-local)
    vocab_split, head_loss   when the vocabulary is split, and the pipeline's loss_fn for its logits
"""

from __future__ import annotations

from functools import partial
from typing import Callable

import torch
import torch.nn.functional as F
from torch import nn

from tasks.train.modeling.kv_cache import LayerCache
from tasks.train.modeling.model import Attention, Block, Embedding, FinalNorm, LMHead, RMSNorm, SwiGLU, lm_loss, separate
from tasks.train.parallel.sequence_parallel import gather_linears, gather_sequence, scatter_sequence
from tasks.train.parallel.tensor_parallel import (ColumnParallelLinear, RowParallelLinear, copy_to_tp, shard_parameter,
                                                  token_cross_entropy, vocab_parallel_embedding, vocab_parallel_lm_loss,
                                                  vocab_parallel_logits)
from tasks.train.parallel.tp_context import NO_TP, TPContext


# How each of a Block's linears splits (Megatron's pairs): q/k/v and gate/up by output rows, o and down by input
# columns, so attention and the MLP each need one all-reduce forward (after o / down) and one backward.
# A fused wqkv / w13 (tasks/train/modeling/fused.py) is column-parallel too, each part split on its own. A Block holds
# either the fused or the separate linears: the plan's entries it lacks are skipped.
BLOCK_TP_PLAN: dict[str, type[ColumnParallelLinear] | type[RowParallelLinear]] = {
    "attn.wq": ColumnParallelLinear, "attn.wk": ColumnParallelLinear, "attn.wv": ColumnParallelLinear,
    "attn.wqkv": ColumnParallelLinear, "attn.wo": RowParallelLinear,
    "mlp.w1": ColumnParallelLinear, "mlp.w3": ColumnParallelLinear, "mlp.w13": ColumnParallelLinear,
    "mlp.w2": RowParallelLinear,
}


class GroupSummedRMSNorm(RMSNorm):
    """A replicated norm weight whose gradient each TP rank computes from only part of the data: `copy_to_tp`
    (identity forward, all-reduce backward) sums it over the TP group, so every rank applies the same full
    gradient to its copy. The same parameter under the same name: only forward changes."""

    tp: TPContext

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.norm(x, copy_to_tp(self.weight, self.tp))


class HeadSharedRMSNorm(GroupSummedRMSNorm):
    """Qwen3's per-head q/k RMSNorm under TP: one weight [head_dim] serves every head, but a TP rank holds only
    its own heads, so its gradient of the weight is partial (summed over the group)."""


class SequenceLocalRMSNorm(GroupSummedRMSNorm):
    """A Block's norm under sequence parallelism (Korthikanti et al. 2022): [B, T/tp, d] in and out. It does not
    gather (the column linears after it do, in `gather_linears`, saving only this input); each rank sees only
    its tokens, so its weight gradient is partial (summed over the group)."""


class SequenceParallelRMSNorm(SequenceLocalRMSNorm):
    """The final norm under sequence parallelism before a whole (replicated) head, a vocabulary tp does not
    divide: gathers its output, and since every rank's head computes the same full gradient from it, backward
    keeps this rank's tokens (`sum_grad` False; True would be a column-parallel consumer's partial sums). That
    head saves the gathered [B, T, d]. Before a split head the final norm stays `SequenceLocalRMSNorm`: the head
    gathers inside its matmul (`vocab_parallel_logits`) and saves only [B, T/tp, d]."""

    sum_grad: bool = False

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return gather_sequence(super().forward(x), self.tp, self.sum_grad)         # [B, T/tp, d] -> [B, T, d]


class SequenceParallelAttention(Attention):
    """Attention on this rank's [B, T/tp, d] tokens: q, k and v from one all-gather (`gather_linears`, which
    saves only the local input), then `attend` on the full sequence and this rank's heads; wo (row-parallel)
    reduce-scatters back to [B, T/tp, d]. wq/wk/wv (or wqkv) stay the ColumnParallelLinear modules: names
    unchanged."""

    tp: TPContext

    def forward(self, x: torch.Tensor, attn_mask: torch.Tensor | None = None,
                position_ids: torch.Tensor | None = None, cache: LayerCache | None = None) -> torch.Tensor:
        layers = self.projections()
        q, k, v = separate(layers, _gathered_projections(x, self.tp, *layers))     # [B, T, (h|hkv)·hd]
        return self.attend(q, k, v, attn_mask, position_ids, cache)


class SequenceParallelSwiGLU(SwiGLU):
    """SwiGLU on this rank's [B, T/tp, d] tokens: gate and up from one all-gather (`gather_linears`), then
    `combine` (w2 row-parallel: reduce-scatter to [B, T/tp, d])."""

    tp: TPContext

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        layers = self.projections()
        gate, up = separate(layers, _gathered_projections(x, self.tp, *layers))    # [B, T, h/tp] each
        return self.combine(gate, up)


def _gathered_projections(x: torch.Tensor, tp: TPContext, *layers: nn.Module) -> list[torch.Tensor]:
    """The column-parallel `layers` (this rank's weight and bias slices) on the gathered sequence of x. The
    layers are not called as modules, so a LoRA update (`lora`, tasks/train/modeling/lora.py), which a plain forward
    adds through a hook, is added here from the same local x."""
    outs = gather_linears(x, [m.weight for m in layers], tp, [m.bias for m in layers])  # n × [B, T, out_i/tp]
    return [y + m.lora(x) if hasattr(m, "lora") else y for y, m in zip(outs, layers)]


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

    def loss_from_hidden(self, x: torch.Tensor, labels: torch.Tensor, z_loss: float = 0.0,
                         token_weights: torch.Tensor | None = None) -> torch.Tensor:
        """From this rank's V/tp columns (the split loss needs the group's max and sums of every token's logits,
        so it keeps its logits shard: 1/tp of them). `token_weights`: Σ weight·ce instead of the mean."""
        logits = self(x, shard=True)                                               # [B, T, V/tp]
        if token_weights is None:
            return self.loss(logits, labels, z_loss)
        ce = token_cross_entropy(logits, labels, self.tp)                          # [B·T]
        return (ce * token_weights.reshape(-1).float()).sum()

    def token_logprobs(self, x: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
        """log p(label) per token [B, T] from this rank's V/tp columns (the split cross entropy, negated)."""
        logits = self(x, shard=True)                                               # [B, T, V/tp]
        ce = token_cross_entropy(logits, labels.clamp(min=0), self.tp)             # [B·T]
        return (-ce).reshape(labels.shape).masked_fill(labels < 0, 0.0)


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
    """Swap, in place, the norms, attention and MLP for their sequence-parallel forms: a Block's norms keep its
    T/tp tokens and its attention / MLP gather them inside `gather_linears` (saving only the local input); so
    does a split head (the final norm stays local), while a whole head's final norm gathers for it (every rank
    then computes the same gradient); a whole table keeps this rank's tokens. Row-parallel linears and the
    split table reduce-scatter by tokens instead of all-reducing (`tp.sequence`), so between TP regions the
    residual stream, norms and dropout hold [B, T/tp, d]: 1/tp of those activations per rank, and so do the
    column linears' saved inputs."""
    for m in list(model.modules()):
        if isinstance(m, Block):
            for norm in (m.attn_norm, m.mlp_norm):
                norm.__class__, norm.tp = SequenceLocalRMSNorm, tp
            m.attn.__class__, m.attn.tp = SequenceParallelAttention, tp
            m.mlp.__class__, m.mlp.tp = SequenceParallelSwiGLU, tp
        elif type(m) is FinalNorm:  # a split head gathers inside its own matmul (vocab_parallel_logits)
            m.__class__ = SequenceLocalRMSNorm if vocab_is_split else SequenceParallelRMSNorm
            m.tp = tp
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
                norm.__class__, norm.tp = HeadSharedRMSNorm, tp
        for path, parallel in BLOCK_TP_PLAN.items():
            owner_path, _, name = path.rpartition(".")
            owner = block.get_submodule(owner_path)
            if hasattr(owner, name):
                setattr(owner, name, parallel.from_linear(getattr(owner, name), tp))
    return model
