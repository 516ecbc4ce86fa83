"""Per-rank workers for tests/test_init_meta.py and benchmarks/init_memory.py (run by `spawn_gloo`): build a
rank's module the new way (`build_module`: meta device, own slices only) or today's old way (the whole plain model
in fp32, then sliced / partitioned), and report what the rank holds and how much its peak RSS grew."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import torch


def _status_bytes(field: str) -> int:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith(field + ":"):
            return int(line.split()[1]) * 1024  # kB
    raise KeyError(field)


def start_peak() -> int:
    """Reset this process's peak-RSS mark (VmHWM) to its current RSS and return that RSS. Not ru_maxrss: Linux
    carries a parent's peak across fork and exec into it, so a spawned rank would inherit the launcher's."""
    Path("/proc/self/clear_refs").write_text("5")
    return _status_bytes("VmRSS")


def peak_growth(start: int) -> int:
    """How far the peak RSS rose above `start` (from `start_peak`)."""
    return _status_bytes("VmHWM") - start


def ds_config(dp: int, zero_stage: int, bf16: bool = False) -> dict[str, Any]:
    return {"train_batch_size": dp, "train_micro_batch_size_per_gpu": 1, "gradient_accumulation_steps": 1,
            "zero_optimization": {"stage": zero_stage}, "bf16": {"enabled": bf16},
            "zero_allow_untested_optimizer": True, "zero_force_ds_cpu_optimizer": False}


def held_bytes(module: torch.nn.Module) -> int:
    """Bytes of parameter data this rank holds: a ZeRO-3 parameter's own partition, else the whole tensor."""
    total = 0
    for p in module.parameters():
        t = p.ds_tensor if hasattr(p, "ds_tensor") else p
        total += t.numel() * t.element_size()
    return total


def build_rank(rank: int, world: int, cfg_dict: dict, parallel: dict, seed: int, mode: str = "new",
               collect: bool = True) -> dict[str, Any]:
    """Build this rank's module; `mode` "new" (build_module) or "old" (the plain model built whole first, as
    before: TP from the full weights, ZeRO-3 partitioning the built model). Returns the peak-RSS growth of the
    build, the bytes held, and (`collect`) every local tensor under its plain key, full for ZeRO-3 (gathered)
    along with its partition dim under TP."""
    from specs.pretrain import ParallelSpec
    from specs.architecture import ModelConfig
    from tasks.train.parallel.deepspeed_adapter import gathered_param
    from tasks.train.modeling.fused import split_values
    from tasks.train.modeling.model import Transformer
    from tasks.train.parallel.parallelize import build_layout, build_module, init_distributed, local_layers, partition_zero3
    from tasks.train.parallel.tp_model import apply_tensor_parallel

    init_distributed()
    par = ParallelSpec(**parallel)
    cfg = ModelConfig.from_dict(cfg_dict)
    layout = build_layout(par)
    zero3 = ds_config(par.dp, 3) if par.zero_stage == 3 else None
    with torch.device("meta"):  # the first meta-device ops import ~80 MB of torch's meta kernels: not the model
        Transformer(cfg, seed)
    before = start_peak()
    if mode == "new":
        module = build_module(cfg, layout, seed, zero3=zero3)
    else:
        module = apply_tensor_parallel(Transformer(cfg, seed), layout.tp_ctx)
        if zero3 is not None:
            partition_zero3(module, zero3, layout.mpu)
    out: dict[str, Any] = {"peak_growth": peak_growth(before), "held": held_bytes(module),
                           "tp_rank": layout.tp_rank, "stage": layout.stage, "tensors": {}, "dims": {}}
    if collect:
        for idx, layer in local_layers(module, layout):
            for name, p in layer.named_parameters():
                key = f"layers.{idx}.{name}"  # a fused parameter under its parts' plain keys
                for plain, value in split_values(key, p, gathered_param(p).float().clone()).items():
                    out["tensors"][plain] = value
                    out["dims"][plain] = getattr(p, "partition_dim", -1) if layout.tp > 1 else -1
    return out
