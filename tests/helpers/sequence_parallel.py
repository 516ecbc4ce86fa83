"""Rank functions for tests/test_sequence_parallel.py and benchmarks/sp_memory.py (spawn_gloo needs them
importable by the spawned ranks)."""

from __future__ import annotations

from typing import Any

import torch
import torch.distributed as dist
import torch.nn.functional as F

B, T, D = 2, 8, 16
OUTS = (16, 8, 8)  # q-, k- and v-like widths: unequal, as grouped-query attention's are


def gather_linears_rank(rank: int, world: int, seed: int) -> dict[str, Any]:
    """gather_linears on this rank's tokens and weight rows vs the plain linears on the full input, values and
    gradients (every rank builds the same full tensors from `seed`, then keeps its share)."""
    from tasks.train.parallel.sequence_parallel import gather_linears
    from tasks.train.parallel.tp_context import TPContext

    gen = torch.Generator().manual_seed(seed)
    x = torch.randn(B, T, D, generator=gen, dtype=torch.float64)                   # [B, T, d]
    ws = [torch.randn(o, D, generator=gen, dtype=torch.float64) for o in OUTS]     # [out_i, d]
    bs = [torch.randn(o, generator=gen, dtype=torch.float64) for o in OUTS]        # [out_i]
    probes = [torch.randn(B, T, o, generator=gen, dtype=torch.float64) for o in OUTS]  # dloss/dy_i

    ref_in = [t.clone().requires_grad_() for t in (x, *ws, *bs)]
    ref = [F.linear(ref_in[0], w, b) for w, b in zip(ref_in[1:4], ref_in[4:])]    # [B, T, out_i]
    sum((y * p).sum() for y, p in zip(ref, probes)).backward()

    tp = TPContext(rank, world, dist.new_group(list(range(world))), sequence=True)
    rows = lambda t: t.chunk(world, dim=0)[rank]                                   # this rank's out features
    x_local = x.chunk(world, dim=1)[rank].clone().requires_grad_()                 # [B, T/tp, d]
    w_local = [rows(w).clone().requires_grad_() for w in ws]
    b_local = [rows(b).clone().requires_grad_() for b in bs]
    outs = gather_linears(x_local, w_local, tp, b_local)                           # [B, T, out_i/tp]
    sum((y * p.chunk(world, dim=-1)[rank]).sum() for y, p in zip(outs, probes)).backward()
    return {"outs": [y.detach() for y in outs], "ref": [y.detach().chunk(world, dim=-1)[rank] for y in ref],
            "grad_x": x_local.grad, "ref_grad_x": ref_in[0].grad.chunk(world, dim=1)[rank],
            "grad_w": [w.grad for w in w_local], "ref_grad_w": [rows(w.grad) for w in ref_in[1:4]],
            "grad_b": [b.grad for b in b_local], "ref_grad_b": [rows(b.grad) for b in ref_in[4:]]}


def sp_block(rank: int, world: int, cfg_dict: dict[str, Any], seed: int, old_path: bool = False):
    """Block 1 of the sequence-parallel TP model on this rank and its TP context; `old_path`: rebuilt as before
    gather_linears (the norms gather their output, attention and SwiGLU run their plain projections: the
    column-parallel linears then save the gathered [B, T, d] input)."""
    from tasks.train.modeling.model import Attention, ModelConfig, SwiGLU, Transformer
    from tasks.train.parallel.tp_context import TPContext
    from tasks.train.parallel.tp_model import SequenceParallelRMSNorm, apply_tensor_parallel

    cfg = ModelConfig.from_dict(cfg_dict)
    tp = TPContext(rank, world, dist.new_group(list(range(world))), sequence=True)
    block = apply_tensor_parallel(Transformer(cfg, seed), tp).layers[1]
    if old_path:
        for norm in (block.attn_norm, block.mlp_norm):
            norm.__class__, norm.sum_grad = SequenceParallelRMSNorm, True  # a column-parallel region follows
        block.attn.__class__, block.mlp.__class__ = Attention, SwiGLU
    return block, tp


def block_saved_rank(rank: int, world: int, cfg_dict: dict[str, Any], seed: int, old_path: bool = False,
                     dtype: str = "float32") -> dict[str, Any]:
    """What one sequence-parallel block saves for backward on this rank (a batch of one sequence): the [k, 2]
    (numel, last dim) of its activations, and their bytes (each storage once)."""
    from tests.helpers.train import saved_activations, saved_bytes

    block, tp = sp_block(rank, world, cfg_dict, seed, old_path)
    block = block.to(getattr(torch, dtype))
    cfg = block.attn.cfg
    x = torch.randn(1, cfg.seq_len // world, cfg.d_model, generator=torch.Generator().manual_seed(seed + rank),
                    dtype=block.attn_norm.weight.dtype, requires_grad=True)       # [B, T/tp, d]
    y, saved = saved_activations(block, x, exclude=list(block.parameters()))
    y.sum().backward()  # the backward must run (and re-gather) on every rank
    # (numel, last dim), not the shape: a matmul on [B, T, d] saves its input flattened to [B·T, d]
    shapes = [(t.numel(), t.size(-1)) for t in saved if t.dim() >= 2]
    return {"shapes": torch.tensor(shapes, dtype=torch.int64), "bytes": saved_bytes(saved)}
