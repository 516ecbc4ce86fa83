"""Sequence parallelism's collectives (Korthikanti et al. 2022, "Reducing Activation Recomputation in Large
Transformer Models"): outside the tensor-parallel regions each TP rank holds T/tp of the tokens, [B, T/tp, d].

    gather_sequence / scatter_sequence   a TP region's entry (all-gather by tokens) and exit (reduce-scatter)
    gather_linears                       a region's entry fused with its column-parallel linears (Megatron-LM's
                                         `LinearWithGradAccumulationAndAsyncCommunication` with sequence_parallel)

Why `gather_linears`. Gathering in the norm (`gather_sequence` on its output) hands the q/k/v (or gate/up)
linears the full [B, T, d] input, and each linear saves that input for its weight gradient: 2·sbh bytes (16-bit)
per region that sequence parallelism does not split, 4·sbh of a block's 34·sbh (Korthikanti's count), so a block
keeps 4 + 30/t sbh instead of 34/t. `gather_linears` all-gathers once inside one autograd function, runs every
column weight on the gathered input and saves only this rank's [B, T/tp, d] input; backward all-gathers it again
for the weight gradients and reduce-scatters the summed input gradient by tokens. The price is one more
all-gather per region in backward (the same volume as the forward one; as in Megatron-LM it overlaps the input
gradient's matmuls, and the reduce-scatter the weight gradients'); the saving is 2·sbh·(1 − 1/t) per region,
so at tp 8 a block keeps 34/8 = 4.25·sbh instead of 4 + 30/8 = 7.75·sbh (planner.block_activation_bytes).

Without sequence parallelism (tp = 1, or `tp.sequence` off) every function here is the identity / plain linear.
"""

from __future__ import annotations

from typing import Any, Sequence

import torch
import torch.distributed as dist
import torch.nn.functional as F

from tasks.train.parallel.tp_context import TPContext


def _seq_chunks(x: torch.Tensor, tp: TPContext) -> list[torch.Tensor]:
    if x.size(1) % tp.size:
        raise ValueError(f"sequence parallelism: {x.size(1)} tokens do not split over {tp.size} TP ranks")
    return [c.contiguous() for c in x.chunk(tp.size, dim=1)]


def _start_all_gather_seq(x: torch.Tensor, tp: TPContext) -> tuple[Any, list[torch.Tensor]]:
    """Start an all-gather of every rank's tokens; the caller waits on the handle before reading the parts
    (the handle keeps the input alive until then: gloo's and NCCL's work objects hold their tensors)."""
    parts = [torch.empty_like(x) for _ in range(tp.size)]
    return dist.all_gather(parts, x.contiguous(), group=tp.group, async_op=True), parts


def _all_gather_seq(x: torch.Tensor, tp: TPContext) -> torch.Tensor:
    handle, parts = _start_all_gather_seq(x, tp)
    handle.wait()
    return torch.cat(parts, dim=1)                                                 # [B, T/tp, d] -> [B, T, d]


def _start_reduce_scatter_seq(x: torch.Tensor, tp: TPContext) -> tuple[Any, torch.Tensor]:
    """Start summing x's token chunks over the group, this rank keeping its own; wait before reading it."""
    chunks = _seq_chunks(x, tp)
    out = torch.empty_like(chunks[tp.rank])
    return dist.reduce_scatter(out, chunks, group=tp.group, async_op=True), out


def _reduce_scatter_seq(x: torch.Tensor, tp: TPContext) -> torch.Tensor:
    handle, out = _start_reduce_scatter_seq(x, tp)
    handle.wait()
    return out                                                                     # [B, T, d] -> [B, T/tp, d]


class _GatherSequence(torch.autograd.Function):
    """Forward: every rank's T/tp tokens, gathered. Backward: `sum_grad` (the consumer is tensor-parallel, so
    each rank's gradient is a partial sum) reduce-scatters; else (a replicated consumer computed the same
    gradient on every rank) each rank keeps its own tokens' slice."""

    @staticmethod
    def forward(ctx, x, tp, sum_grad):  # type: ignore[override]
        ctx.tp, ctx.sum_grad = tp, sum_grad
        return _all_gather_seq(x, tp)

    @staticmethod
    def backward(ctx, grad):  # type: ignore[override]
        if ctx.sum_grad:
            return _reduce_scatter_seq(grad, ctx.tp), None, None
        return _seq_chunks(grad, ctx.tp)[ctx.tp.rank], None, None


class _ScatterSequence(torch.autograd.Function):
    """Forward: partial sums [B, T, d] summed and scattered by tokens (reduce-scatter); backward: all-gather.
    `reduce` False: the input is already whole and equal on every rank — keep this rank's tokens."""

    @staticmethod
    def forward(ctx, x, tp, reduce):  # type: ignore[override]
        ctx.tp = tp
        return _reduce_scatter_seq(x, tp) if reduce else _seq_chunks(x, tp)[tp.rank]

    @staticmethod
    def backward(ctx, grad):  # type: ignore[override]
        return _all_gather_seq(grad, ctx.tp), None, None


class _GatherLinears(torch.autograd.Function):
    """y_i = all_gather(x_local) @ W_iᵀ (+ b_i) for n column weights, saving x_local [B, T/tp, d] only.

    apply(x_local, tp, n, W_1..W_n, b_1..b_n) with None for a missing bias. Backward re-gathers x for
    dW_i = Σ_tokens g_iᵀ x and reduce-scatters dx = Σ_i g_i W_i (a partial sum: each rank holds 1/tp of the
    output features) by tokens. Under autocast the forward's matmuls ran in the autocast dtype while the
    weights stay fp32; backward (outside autocast) therefore computes in the gradients' dtype explicitly."""

    @staticmethod
    def forward(ctx, x_local, tp, n, *params):  # type: ignore[override]
        weights, biases = params[:n], params[n:]
        full = _all_gather_seq(x_local, tp)                                        # [B, T, d]
        outs = tuple(F.linear(full, w, b) for w, b in zip(weights, biases))        # n × [B, T, out_i/tp]
        ctx.tp, ctx.n, ctx.has_bias = tp, n, [b is not None for b in biases]
        ctx.save_for_backward(x_local, *weights)  # not `full`: the point of this function
        return outs

    @staticmethod
    def backward(ctx, *grads):  # type: ignore[override]
        # Megatron-LM's overlap: the re-gather of x runs while dx's matmuls do, and dx's reduce-scatter while
        # the weight gradients' do; each collective is waited on only where its result is first needed.
        x_local, *weights = ctx.saved_tensors
        gathering, parts = _start_all_gather_seq(x_local, ctx.tp)                  # [B, T, d], again
        grad_x = None
        for g, w in zip(grads, weights):
            if g is not None:  # None: an output the loss never used
                part = g @ w.to(g.dtype)                                           # [B, T, d] partial sum
                grad_x = part if grad_x is None else grad_x + part
        scattering = None
        if grad_x is not None:
            scattering, grad_x = _start_reduce_scatter_seq(grad_x, ctx.tp)         # [B, T/tp, d]
        gathering.wait()
        full = torch.cat(parts, dim=1)
        full = full.reshape(-1, full.size(-1))                                     # [B·T, d]
        grad_w, grad_b = [], []
        for g, w, has_bias in zip(grads, weights, ctx.has_bias):
            if g is None:
                grad_w.append(None), grad_b.append(None)
                continue
            g2 = g.reshape(-1, g.size(-1))                                         # [B·T, out/tp]
            grad_w.append((g2.t() @ full.to(g.dtype)).to(w.dtype))                 # [out/tp, d]
            grad_b.append(g2.sum(0).to(w.dtype) if has_bias else None)             # [out/tp]
        if scattering is not None:
            scattering.wait()
            grad_x = grad_x.to(x_local.dtype)
        return (grad_x, None, None, *grad_w, *grad_b)


def gather_sequence(x: torch.Tensor, tp: TPContext, sum_grad: bool = True) -> torch.Tensor:
    """Sequence parallelism's entry into a TP region: [B, T/tp, d] -> [B, T, d] (Korthikanti et al. 2022's g);
    identity without it. `sum_grad`: the consumer is column-parallel (see `_GatherSequence`)."""
    return _GatherSequence.apply(x, tp, sum_grad) if tp.sequence_parallel else x


def scatter_sequence(x: torch.Tensor, tp: TPContext, reduce: bool = True) -> torch.Tensor:
    """Sequence parallelism's exit from a TP region: partial sums [B, T, d] -> this rank's summed tokens
    [B, T/tp, d] (the reduce-scatter that replaces TP's all-reduce: ḡ); identity without it."""
    return _ScatterSequence.apply(x, tp, reduce) if tp.sequence_parallel else x


def gather_linears(x_local: torch.Tensor, weights: Sequence[torch.Tensor], tp: TPContext,
                   biases: Sequence[torch.Tensor | None] | None = None) -> list[torch.Tensor]:
    """Column-parallel linears on the gathered sequence: x_local [B, T/tp, d] -> [B, T, out_i/tp] for each
    weight [out_i/tp, d] (and bias [out_i/tp]), one all-gather for all of them, only x_local saved for
    backward (see the module docstring). Without sequence parallelism x is whole: the plain linears — but a
    TP group without it must sum the input gradient (`copy_to_tp`), which these do not, so that is refused."""
    biases = list(biases) if biases is not None else [None] * len(weights)
    if len(biases) != len(weights):
        raise ValueError(f"{len(weights)} weights but {len(biases)} biases")
    if tp.sequence_parallel:
        return list(_GatherLinears.apply(x_local, tp, len(weights), *weights, *biases))
    if tp.active:
        raise ValueError("gather_linears: a TP group without sequence parallelism (use ColumnParallelLinear)")
    return [F.linear(x_local, w, b) for w, b in zip(weights, biases)]
