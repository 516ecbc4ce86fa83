"""Megatron-style tensor parallelism over one process group (the pipeline grid's model-parallel "slice" group).

A block's two matmul pairs are split so that each needs one all-reduce forward and one backward:

    x ─copy_to_tp─► ColumnParallelLinear (q/k/v, gate/up: output features split) ─► local heads / hidden units
      ─► RowParallelLinear (o, down: input features split) ─► partial sums ─reduce_from_tp─► y

`copy_to_tp` is the identity forward and all-reduces the gradient backward (every TP rank used the same x);
`reduce_from_tp` all-reduces forward and is the identity backward. With a group of size 1 (or None) both are the
identity and the layers are plain linears, so one code path serves tp = 1 and tp > 1.

The layers replace a plain model's `nn.Linear`s (`from_linear`, called by `tp_model.apply_tensor_parallel`)
and keep only this rank's contiguous slice. In training the plain layer lives on the meta device, so the swap
costs shapes only; `parallelize` then materialises each rank's slice directly (`init_weights.load_local`: the
seeded draw's slice, or the checkpoint's rows/columns), so no rank ever holds a full weight and a TP model holds
exactly the shards of the non-TP model with the same seed: their losses agree. Given a real layer (tests,
tools), `_shard` copies the slice so the full weight can be freed. Split parameters carry `tensor_model_parallel = True`
(DeepSpeed counts them once per TP rank in the global gradient norm; replicated ones only on TP rank 0) and
`partition_dim` (how `gather_full` reassembles them).
"""

from __future__ import annotations

import torch
import torch.distributed as dist
import torch.nn.functional as F
from torch import nn

from tasks.train.modeling.fused import mark, parts_of, shard_rows
from tasks.train.parallel.sequence_parallel import gather_linears, scatter_sequence
from tasks.train.parallel.tp_context import TPContext


class _CopyToTP(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x, group):  # type: ignore[override]
        ctx.group = group
        return x.view_as(x)

    @staticmethod
    def backward(ctx, grad):  # type: ignore[override]
        grad = grad.contiguous()
        dist.all_reduce(grad, group=ctx.group)
        return grad, None


class _ReduceFromTP(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x, group):  # type: ignore[override]
        x = x.contiguous()
        dist.all_reduce(x, group=group)
        return x

    @staticmethod
    def backward(ctx, grad):  # type: ignore[override]
        return grad, None


def copy_to_tp(x: torch.Tensor, tp: TPContext) -> torch.Tensor:
    """Identity forward; all-reduce of the gradient over the TP group backward."""
    return _CopyToTP.apply(x, tp.group) if tp.active else x


def reduce_from_tp(x: torch.Tensor, tp: TPContext) -> torch.Tensor:
    """All-reduce (sum) over the TP group forward; identity backward."""
    return _ReduceFromTP.apply(x, tp.group) if tp.active else x


def _shard(full: torch.Tensor, dim: int, tp: TPContext) -> torch.Tensor:
    """This rank's slice along `dim` (a copy: the full weight can be freed). A fused weight's rows split part
    by part (tasks/train/modeling/fused.py), so the rank holds [q_r; k_r; v_r]."""
    if full.shape[dim] % tp.size:
        raise ValueError(f"dimension {dim} of size {full.shape[dim]} does not split over {tp.size} TP ranks")
    parts = parts_of(full)
    if parts is not None and dim == 0:
        return shard_rows(full.detach(), parts, tp.size, tp.rank).clone()
    return full.detach().chunk(tp.size, dim=dim)[tp.rank].clone()


def _keep_mark(p: nn.Parameter, full: torch.Tensor) -> nn.Parameter:
    parts = parts_of(full)
    return p if parts is None else mark(p, parts)


class _ParallelLinear(nn.Module):
    """A linear holding this rank's slice of a full weight [out, in] along `partition_dim`;
    `in_features` / `out_features` are the local ones (the slice's shape, as in `nn.Linear`). A bias [out] is
    split with the output features (column-parallel); a row-parallel layer takes none (it would be added once
    per rank before the all-reduce)."""

    partition_dim = 0

    def __init__(self, full_weight: torch.Tensor, tp: TPContext, full_bias: torch.Tensor | None = None):
        super().__init__()
        self.tp = tp
        self.weight = _keep_mark(nn.Parameter(_shard(full_weight, self.partition_dim, tp)), full_weight)
        self.out_features, self.in_features = self.weight.shape
        _mark(self.weight, self.partition_dim, tp)
        self.bias = None
        if full_bias is not None:
            if self.partition_dim != 0:
                raise ValueError("a row-parallel linear cannot hold a bias (every rank would add it)")
            self.bias = _keep_mark(nn.Parameter(_shard(full_bias, 0, tp)), full_bias)
            _mark(self.bias, 0, tp)

    @classmethod
    def from_linear(cls, layer: nn.Linear, tp: TPContext) -> "_ParallelLinear":
        """This rank's share of a plain `nn.Linear` (weight and, column-parallel only, bias)."""
        return cls(layer.weight, tp, layer.bias)


class ColumnParallelLinear(_ParallelLinear):
    """y_local = x @ W[rows of this rank]ᵀ: output features split; the input is the full (replicated) x."""

    partition_dim = 0

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if self.tp.sequence_parallel:  # x came through gather_sequence, whose backward sums the partial grads
            # (a Block's q/k/v and gate/up do not come here: tp_model's sequence-parallel forms use gather_linears)
            return F.linear(x, self.weight, self.bias)                             # [..., out/tp]
        return F.linear(copy_to_tp(x, self.tp), self.weight, self.bias)            # [..., out/tp]


class RowParallelLinear(_ParallelLinear):
    """y = Σ_ranks x_local @ W[:, columns of this rank]ᵀ: input features split, partial sums all-reduced."""

    partition_dim = 1

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if self.tp.sequence_parallel:
            return scatter_sequence(F.linear(x, self.weight), self.tp)             # [B, T/tp, out]
        return reduce_from_tp(F.linear(x, self.weight), self.tp)                   # [..., out]


class _GatherFromTP(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x, tp):  # type: ignore[override]
        ctx.tp = tp
        parts = [torch.empty_like(x) for _ in range(tp.size)]
        dist.all_gather(parts, x.contiguous(), group=tp.group)
        return torch.cat(parts, dim=-1)

    @staticmethod
    def backward(ctx, grad):  # type: ignore[override]
        # every TP rank computed the same loss from the same gathered logits: its gradient is its own columns
        return grad.chunk(ctx.tp.size, dim=-1)[ctx.tp.rank].contiguous(), None


def vocab_parallel_embedding(ids: torch.Tensor, weight: torch.Tensor, tp: TPContext) -> torch.Tensor:
    """Megatron's vocab-parallel lookup: `weight` holds this rank's rows [r·V/tp, (r+1)·V/tp) of the table; ids
    outside them look up zeros, and the all-reduce sums the one rank's row that each id has."""
    if not tp.active:
        return F.embedding(ids, weight)                                            # [B, T] -> [B, T, d]
    rows = weight.size(0)
    local = ids - tp.rank * rows
    outside = (local < 0) | (local >= rows)
    out = F.embedding(local.masked_fill(outside, 0), weight).masked_fill(outside.unsqueeze(-1), 0.0)
    if tp.sequence_parallel:
        return scatter_sequence(out, tp)                                           # [B, T/tp, d]
    return reduce_from_tp(out, tp)                                                 # [B, T, d]


def vocab_parallel_logits(x: torch.Tensor, weight: torch.Tensor, tp: TPContext, gather: bool = True
                          ) -> torch.Tensor:
    """Logits from a vocab-split output matrix: this rank's V/tp columns, gathered into the full [B, T, V]
    (every rank then computes the same loss; backward keeps each rank's columns and all-reduces x's gradient).
    `gather` False: this rank's columns only, [B, T, V/tp], for `vocab_parallel_cross_entropy`. Under sequence
    parallelism x is this rank's [B, T/tp, d] tokens, all-gathered inside `gather_linears` (which saves only
    them and reduce-scatters x's gradient), so the head saves no [B, T, d] either."""
    if not tp.active:
        return F.linear(x, weight)                                                 # [B, T, d] -> [B, T, V]
    if tp.sequence_parallel:  # x is this rank's [B, T/tp, d]: gathered inside, only x saved (Megatron's head)
        local = gather_linears(x, [weight], tp)[0]                                 # [B, T, V/tp]
    else:
        local = F.linear(copy_to_tp(x, tp), weight)                                # [B, T, V/tp]
    return _GatherFromTP.apply(local, tp) if gather else local                    # [B, T, V] | [B, T, V/tp]


class _VocabParallelCrossEntropy(torch.autograd.Function):
    """Megatron's vocab-parallel cross entropy: the log-partition from three [N]-sized all-reduces (max, the
    target's logit, Σ exp), so no rank ever holds the [N, V] logits. Saves only this rank's softmax [N, V/tp]
    (fp32) for backward, where d ce/dx = softmax − onehot(target) and d lse/dx = softmax."""

    @staticmethod
    def forward(ctx, logits, targets, tp):  # type: ignore[override]
        n_local = logits.size(-1)
        x = logits.float().reshape(-1, n_local)                                    # [N, V/tp]
        top = x.max(dim=-1).values                                                 # [N]
        dist.all_reduce(top, op=dist.ReduceOp.MAX, group=tp.group)
        shifted = x - top[:, None]                                                 # [N, V/tp], a new tensor
        del x
        local = targets.reshape(-1).long() - tp.rank * n_local                     # [N] target's local column
        inside = (local >= 0) & (local < n_local)
        index = local.clamp(0, n_local - 1)
        picked = shifted.gather(1, index[:, None]).squeeze(1).masked_fill(~inside, 0.0)  # [N]
        exp = shifted.exp_()
        both = torch.stack([picked, exp.sum(dim=-1)])                              # [2, N]: one all-reduce
        dist.all_reduce(both, group=tp.group)
        log_z = both[1].log()                                                      # log Σ exp(x − max)
        ctx.save_for_backward(exp.div_(both[1][:, None]), index, inside)           # softmax [N, V/tp]
        ctx.dtype, ctx.shape = logits.dtype, logits.shape
        return log_z - both[0], log_z + top                                        # ce [N], lse [N]

    @staticmethod
    def backward(ctx, grad_ce, grad_lse):  # type: ignore[override]
        softmax, index, inside = ctx.saved_tensors
        grad = softmax.mul_((grad_ce + grad_lse)[:, None])  # in place: the saved softmax is used only once
        rows = torch.arange(grad.size(0), device=grad.device)
        grad[rows, index] -= grad_ce * inside
        return grad.to(ctx.dtype).view(ctx.shape), None, None


def vocab_parallel_cross_entropy(logits: torch.Tensor, targets: torch.Tensor, tp: TPContext
                                 ) -> tuple[torch.Tensor, torch.Tensor]:
    """Per-token cross entropy and log-partition (log Σ exp logits), both [N] fp32, from this rank's vocab
    columns [..., V/tp] (`vocab_parallel_logits(..., gather=False)`); every TP rank gets the same values.
    Targets must be token ids in [0, V). Without TP (`logits` whole) the plain computation."""
    if not tp.active:
        flat = logits.float().reshape(-1, logits.size(-1))                         # [N, V]
        return token_cross_entropy(flat, targets, tp), torch.logsumexp(flat, dim=-1)
    return _VocabParallelCrossEntropy.apply(logits, targets, tp)


def token_cross_entropy(logits: torch.Tensor, targets: torch.Tensor, tp: TPContext) -> torch.Tensor:
    """Per-token cross entropy [N] fp32 of whole logits (tp inactive) or of this rank's vocab columns."""
    if tp.active:
        return _VocabParallelCrossEntropy.apply(logits, targets, tp)[0]
    return F.cross_entropy(logits.float().reshape(-1, logits.size(-1)), targets.reshape(-1).long(),
                           reduction="none")


def vocab_parallel_lm_loss(logits: torch.Tensor, labels: torch.Tensor, tp: TPContext, z_loss: float = 0.0
                           ) -> torch.Tensor:
    """`model.lm_loss` (mean cross entropy, plus z_loss · mean lse²) from this rank's vocab columns."""
    ce, lse = vocab_parallel_cross_entropy(logits, labels, tp)
    return ce.mean() if not z_loss else ce.mean() + z_loss * lse.pow(2).mean()


def shard_parameter(p: nn.Parameter, dim: int, tp: TPContext) -> nn.Parameter:
    """This rank's slice of `p` along `dim` (on the meta device: its shape only) as a new parameter that keeps
    `p`'s attributes (init recipe) and carries the TP marks."""
    new = nn.Parameter(_shard(p, dim, tp), requires_grad=p.requires_grad)
    new.__dict__.update(p.__dict__)
    _mark(new, dim, tp)
    return new


def _mark(p: nn.Parameter, dim: int, tp: TPContext) -> None:
    p.partition_dim = dim  # type: ignore[attr-defined]
    if tp.active:
        p.tensor_model_parallel = True  # type: ignore[attr-defined]


def gather_full(shard: torch.Tensor, dim: int, tp: TPContext) -> torch.Tensor:
    """Reassemble a split tensor from every TP rank (a collective over the TP group)."""
    if not tp.active:
        return shard
    parts = [torch.empty_like(shard) for _ in range(tp.size)]
    dist.all_gather(parts, shard.contiguous(), group=tp.group)
    return torch.cat(parts, dim=dim)
