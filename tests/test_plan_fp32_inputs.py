"""At ZeRO-3 under torch_autocast DeepSpeed's `zero3_linear_wrap` (runtime/zero/linear.py, 0.19.8) replaces
torch.nn.functional.linear: its autograd Function casts inside its forward and `setup_context` saves the input as
it came — the norms' fp32 outputs for the q/k/v and gate/up linears — where torch's linear saves autocast's bf16
cast. Measured here on the project's Block (CPU autocast), then the planner's ZeRO-3 activations against it (it
had priced bf16 inputs at every stage)."""

from __future__ import annotations

import pytest
import torch

from specs.architecture import ModelConfig
from tasks.train.modeling.model import Block
from tasks.train.planning import plan_memory
from tasks.train.planning.plan_memory import block_activation_bytes, estimate_memory

D, HEADS, FFN, T, LAYERS = 128, 4, 352, 32, 3
CFG = ModelConfig(vocab_size=256, seq_len=T, n_layers=LAYERS, n_heads=HEADS, n_kv_heads=HEADS, d_model=D,
                  ffn_hidden=FFN)


def saved_activation_bytes(monkeypatch, linear) -> int:
    """Bytes one Block saves for backward under bf16 autocast with `linear` as torch.nn.functional.linear, each
    storage once, less its parameters and bf16 copies of them (weight copies, priced apart)."""
    monkeypatch.setattr(torch.nn.functional, "linear", linear)
    torch.manual_seed(0)
    block = Block(CFG, 0, 0, False, fused=True).train()
    params = list(block.parameters())
    ptrs = {p.untyped_storage().data_ptr() for p in params}
    shapes = {s for p in params if p.dim() == 2 for s in (tuple(p.shape), tuple(p.shape)[::-1])}
    saved: list[torch.Tensor] = []
    x = torch.randn(1, T, D, requires_grad=True)
    with torch.autograd.graph.saved_tensors_hooks(lambda t: saved.append(t) or t, lambda t: t), \
            torch.autocast("cpu", dtype=torch.bfloat16):
        y = block(x)
    kept = {t.untyped_storage().data_ptr(): t.untyped_storage().nbytes() for t in saved
            if t.untyped_storage().data_ptr() not in ptrs
            and not (t.dtype == torch.bfloat16 and tuple(t.shape) in shapes)}
    y.float().sum().backward()
    return sum(kept.values())


def test_zero3_linear_keeps_the_norm_outputs_in_fp32(monkeypatch):
    from deepspeed.runtime.zero.linear import zero3_linear_wrap

    torch_linear = saved_activation_bytes(monkeypatch, torch._C._nn.linear)
    zero3 = saved_activation_bytes(monkeypatch, zero3_linear_wrap)
    # two [B, T, d] inputs (q/k/v and gate/up) in 4 bytes instead of 2: 2·s·b·h·(4 − 2)
    assert zero3 - torch_linear == 2 * T * D * (4 - 2)
    more = (block_activation_bytes(T, 1, D, HEADS, 1, 2, True, False, 4, wide_linear_inputs=True)
            - block_activation_bytes(T, 1, D, HEADS, 1, 2, True, False, 4))
    assert more == zero3 - torch_linear


@pytest.mark.parametrize("tp, sequence_parallel", [(1, False), (2, False), (2, True)])
def test_the_planner_prices_them_at_zero3_in_eager_blocks(monkeypatch, tp, sequence_parallel):
    """ZeRO-3 against ZeRO-2 (torch's linear), eager blocks, weight copies left out: the measured difference per
    block, whole without sequence parallelism (the column linears' input is replicated over tp). With sequence
    parallelism ZeRO-2 keeps them fp32 as well (`_GatherLinears` saves its fp32 local input:
    tests/test_plan_sp_copies.py), so nothing differs there. Compiled blocks (the GPU default) are one AOT
    graph whose partitioner keeps no fp32 norm output (measured on CPU while writing this: a compiled Block
    with zero3_linear_wrap saved less than with torch's linear): nothing more is priced there."""
    monkeypatch.setattr(plan_memory, "autocast_weight_copy_bytes", lambda *a: 0)
    s, b, h = 4096, 2, 4096
    mem = dict(vocab_size=32000, seq_len=s, micro_batch=b, precision="bf16", dp=8, tp=tp, pp=1,
               activation_checkpointing=False, sequence_parallel=sequence_parallel, autocast=True, compiled=False)
    compiled = [estimate_memory(CFG, zero_stage=z, **dict(mem, compiled=True)).activations for z in (3, 2)]
    assert compiled[0] == compiled[1]
    seven_b = ModelConfig(vocab_size=32000, seq_len=s, n_layers=32, n_heads=32, n_kv_heads=32, d_model=h,
                          ffn_hidden=11008, tie_embeddings=False)
    zero3, zero2 = (estimate_memory(seven_b, zero_stage=z, **mem).activations for z in (3, 2))
    assert zero3 - zero2 == (0 if sequence_parallel else 32 * 2 * s * b * h * (4 - 2))
    # the bf16 section keeps 2-byte inputs at every stage
    section = [estimate_memory(seven_b, zero_stage=z, **dict(mem, autocast=False)).activations for z in (3, 2)]
    assert section[0] == section[1]


def test_sequence_parallel_keeps_the_local_inputs_in_fp32_at_any_stage(monkeypatch):
    """`_GatherLinears` saves its [B, T/tp, d] input as it came, the norm's fp32 output (measured in
    tests/test_plan_sp_copies.py): 2 of them per block, 2 bytes wider each, split by tp."""
    monkeypatch.setattr(plan_memory, "autocast_weight_copy_bytes", lambda *a: 0)
    s, b, h, tp = 4096, 1, 4096, 4
    cfg = ModelConfig(vocab_size=32000, seq_len=s, n_layers=32, n_heads=32, n_kv_heads=32, d_model=h,
                      ffn_hidden=11008, tie_embeddings=False)
    mem = dict(vocab_size=32000, seq_len=s, micro_batch=b, precision="bf16", dp=2, tp=tp, pp=1, zero_stage=1,
               activation_checkpointing=False, sequence_parallel=True, autocast=True)
    priced = estimate_memory(cfg, **mem).activations
    monkeypatch.setattr(plan_memory, "linear_inputs_stay_wide", lambda *a: False)
    assert priced - estimate_memory(cfg, **mem).activations == 32 * 2 * s * b * h * (4 - 2) // tp
