"""Under sequence parallelism the q/k/v and gate/up matrices go through `_GatherLinears`
(tasks/train/parallel/sequence_parallel.py), whose forward runs without autograd recording: its matmuls' bf16
weight casts are not saved for backward (it saves the fp32 weights themselves and its fp32 local input), so
only the output linears' (wo, w2) casts are saved per micro-batch in flight. The casts are still made, of fp32
leaf parameters, so autocast's cast cache keeps them until the forward leaves autocast — and that happens in
compiled blocks too, as dynamo cannot trace the Function's async all-gather (`async_op=True`: a graph break)
and runs it eagerly. Measured here on a tp 2 sequence-parallel Block on two gloo CPU ranks; the planner had
priced every block matrix's copy once per micro-batch in flight and nothing in the cache."""

from __future__ import annotations

import weakref
from typing import Any

import torch
from torch.utils._python_dispatch import TorchDispatchMode

from specs.architecture import ModelConfig, param_counts
from tasks.train.planning import plan_memory
from tasks.train.planning.plan_memory import estimate_memory
from tests.helpers.parallel import job_spec
from tests.helpers.sequence_parallel import sp_block
from tests.helpers.train import spawn_gloo

SEED, TP, LAYERS = 3, 2, 8


class ParamCasts(TorchDispatchMode):
    """Weak references to the bf16 casts of `params` made while active."""

    def __init__(self, params):
        super().__init__()
        self.params, self.casts = {p.data_ptr() for p in params}, []

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        if (func is torch.ops.aten._to_copy.default and out.dtype == torch.bfloat16
                and args[0].data_ptr() in self.params):
            self.casts.append(weakref.ref(out))
        return out

    def alive_bytes(self) -> int:
        alive = [t for t in (ref() for ref in self.casts) if t is not None]
        return sum({t.untyped_storage().data_ptr(): t.untyped_storage().nbytes() for t in alive}.values())


def copies_rank(rank: int, world: int, cfg_dict: dict[str, Any], seed: int) -> dict[str, Any]:
    """Bytes of bf16 weight casts one SP block saves for backward, alive at the end of its forward (inside
    autocast), and alive once the forward left autocast; the dtypes of its saved [B, T/tp, d] tensors."""
    block, _ = sp_block(rank, world, cfg_dict, seed)
    block.train()
    cfg = block.attn.cfg
    params = list(block.parameters())
    shapes = {s for p in params if p.dim() == 2 for s in (tuple(p.shape), tuple(p.shape)[::-1])}
    ptrs = {p.untyped_storage().data_ptr() for p in params}
    saved: list[torch.Tensor] = []
    x = torch.randn(1, cfg.seq_len // world, cfg.d_model, requires_grad=True)      # [B, T/tp, d]
    with ParamCasts(params) as casts:
        with torch.autograd.graph.saved_tensors_hooks(lambda t: saved.append(t) or t, lambda t: t), \
                torch.autocast("cpu", dtype=torch.bfloat16):
            y = block(x)
            at_end = casts.alive_bytes()
        after = casts.alive_bytes()
    copies = {t.untyped_storage().data_ptr(): t.untyped_storage().nbytes() for t in saved
              if t.dtype == torch.bfloat16 and tuple(t.shape) in shapes and t.untyped_storage().data_ptr() not in ptrs}
    local = cfg.seq_len // world * cfg.d_model
    # the norms' outputs the column linears keep: [B, T/tp, d] tensors that are no parameter
    inputs = sorted({str(t.dtype) for t in saved if t.numel() == local and t.size(-1) == cfg.d_model
                     and t.untyped_storage().data_ptr() not in ptrs})
    y.float().sum().backward()
    return {"saved": sum(copies.values()), "at_end": at_end, "after": after, "input_dtypes": inputs}


def test_sequence_parallel_block_saves_only_its_output_linears_casts(tmp_path, monkeypatch):
    cfg = ModelConfig.from_spec(job_spec({}).model, vocab_size=256, seq_len=32)
    d, hd = cfg.d_model, cfg.head_dim
    output_linears = cfg.n_heads * hd * d + cfg.ffn_hidden * d       # wo [d, H·hd] and w2 [d, f]
    full = param_counts(cfg).block_matrices + param_counts(cfg).block_biases
    for r, out in enumerate(spawn_gloo(copies_rank, TP, (cfg.to_dict(), SEED), tmp_path)):
        assert out["saved"] == 2 * output_linears // TP, f"rank {r}"           # bf16 wo and w2 rows/columns
        assert out["at_end"] == 2 * full // TP, f"rank {r}"                    # + the cache: every matrix's cast
        assert out["after"] == out["saved"], f"rank {r}"                       # the cache dies with autocast
        assert out["input_dtypes"] == ["torch.float32"], f"rank {r}"           # nothing saved in bf16 there
    # The planner's copies on the first stage of a tp 2 × pp 2 pipeline (2 micro-batches in flight): each keeps
    # the saved output-linear casts, the last forward's cache the rest of every block's; compiled or not alike
    # without recomputation (the Function runs eagerly in both).
    big = ModelConfig(vocab_size=64, seq_len=32, n_layers=2 * LAYERS, n_heads=cfg.n_heads, n_kv_heads=cfg.n_kv_heads,
                      d_model=d, ffn_hidden=cfg.ffn_hidden)
    in_flight, saved, at_end = 2, 2 * output_linears // TP, 2 * full // TP
    expected = {"off": in_flight * LAYERS * saved + LAYERS * (at_end - saved),
                "full": saved + LAYERS * (at_end - saved)}  # recomputed: one block's saved casts in backward
    for mode, copies in expected.items():
        for compiled in (True,) if mode == "full" else (True, False):
            kw = dict(vocab_size=64, seq_len=32, micro_batch=1, precision="bf16", dp=1, tp=TP, pp=2, zero_stage=1,
                      activation_checkpointing=mode, grad_accum=4, sequence_parallel=True, autocast=True,
                      compiled=compiled)
            with_copies = estimate_memory(big, **kw)
            monkeypatch.setattr(plan_memory, "autocast_weight_copy_bytes", lambda *a: 0)
            without = estimate_memory(big, **kw)
            monkeypatch.undo()
            assert with_copies.stage == "first"
            assert with_copies.activations - without.activations == copies, (mode, compiled)
