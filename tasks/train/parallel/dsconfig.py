"""The DeepSpeed config JSON, the client optimizer and the LR schedule, all generated from the typed spec.

The optimizer is a client `torch.optim.AdamW` (DeepSpeed's own `optimizer` section would JIT-compile
fused/cpu Adam ops) and the schedule a client `LambdaLR` handed to `deepspeed.initialize`, so DeepSpeed steps
and checkpoints both. Schedule (nanoGPT): linear warmup from lr/(warmup+1) to lr over `warmup_steps`, then
cosine decay to `min_lr` at `steps`; optimizer step s (0-based) uses `lr_at(s)`.
"""

from __future__ import annotations

import math
from typing import Any, Callable

import torch
from torch import nn

from specs.batch import BatchGeometry
from specs.pretrain import ParallelSpec
from specs.train import OptimSpec, SpeedSpec, TrainLoopSpec

STEPS_PER_PRINT = 10**9  # our loop logs; DeepSpeed's own progress lines stay off


def on_cuda(parallel: ParallelSpec) -> bool:
    """Whether the ranks of `parallel` run on CUDA (`accelerator: auto` follows what this process sees)."""
    return parallel.accelerator == "cuda" or (parallel.accelerator == "auto" and torch.cuda.is_available())


def zero_section(stage: int, speed: SpeedSpec, cuda: bool) -> dict[str, Any]:
    """`zero_optimization` with every communication knob written out (none left to DeepSpeed's defaults, so the
    config on disk says what ran)."""
    overlap = speed.overlap_comm if speed.overlap_comm is not None else (stage == 3 or (stage == 2 and cuda))
    zero: dict[str, Any] = {"stage": stage, "overlap_comm": overlap,
                            "contiguous_gradients": speed.contiguous_gradients,
                            "reduce_bucket_size": speed.reduce_bucket_size,
                            "allgather_bucket_size": speed.allgather_bucket_size}
    if stage == 3:
        persist = speed.stage3_param_persistence_threshold
        zero.update({"stage3_prefetch_bucket_size": speed.stage3_prefetch_bucket_size,
                     "sub_group_size": speed.stage3_sub_group_size,
                     # CPU ranks: every parameter partitioned (deterministic gathers on the small test models)
                     "stage3_param_persistence_threshold": persist if persist is not None else
                     (100_000 if cuda else 0)})
    return zero


def ds_config(train: TrainLoopSpec, parallel: ParallelSpec) -> dict[str, Any]:
    """DeepSpeed config for a job's `train` section (pretraining's, SFT's or DPO's) and its `ParallelSpec`."""
    fp16 = train.precision == "fp16"
    # torch_autocast replaces the bf16 section; fp16 keeps its section (DeepSpeed's dynamic loss scaler, whose
    # skipped steps the trainer recognises as overflows)
    autocast = train.speed.autocast(train.precision, on_cuda(parallel))  # `auto`: torch_autocast on CUDA
    cfg: dict[str, Any] = {
        "train_micro_batch_size_per_gpu": train.micro_batch_size,
        "gradient_accumulation_steps": train.grad_accum,
        "train_batch_size": BatchGeometry.of(train, parallel).global_batch,
        "gradient_clipping": train.optim.grad_clip,
        "zero_optimization": zero_section(parallel.zero_stage, train.speed, on_cuda(parallel)),
        "bf16": {"enabled": train.precision == "bf16" and not autocast},
        "torch_autocast": {"enabled": autocast, "dtype": "bfloat16"},
        # loss_scale 0 = dynamic loss scaling: start at 2^16, halve on overflow (the step is skipped), grow
        # after 1000 clean steps.
        "fp16": {"enabled": fp16, "loss_scale": 0, "initial_scale_power": 16, "loss_scale_window": 1000,
                 "hysteresis": 2, "min_loss_scale": 1},
        "steps_per_print": STEPS_PER_PRINT,
        "wall_clock_breakdown": False,
        "zero_allow_untested_optimizer": True,
        "zero_force_ds_cpu_optimizer": False,
        "dump_state": False,
    }
    if getattr(parallel, "sequence_parallel", False) and parallel.tp > 1 and parallel.pp > 1:
        # DeepSpeed's pipeline sends 1/tp of an activation per TP rank and all-gathers it on arrival, which
        # assumes TP peers hold the same activation; under sequence parallelism each holds its own tokens
        cfg["pipeline"] = {"pipe_partitioned": False, "grad_partitioned": False}
    return cfg


def param_groups(model: nn.Module, weight_decay: float) -> list[dict[str, Any]]:
    """Decay on ≥ 2-D weights (matmuls, embedding); none on norms and other vectors. A parameter ZeRO-3 has
    already partitioned (at build time) holds an empty tensor: its shape is `ds_shape`."""
    decay, no_decay = [], []
    for _, p in model.named_parameters():
        if p.requires_grad:
            (decay if len(getattr(p, "ds_shape", p.shape)) >= 2 else no_decay).append(p)
    return [{"params": decay, "weight_decay": weight_decay}, {"params": no_decay, "weight_decay": 0.0}]


def compile_blocks(module: nn.Module, block_type: type) -> int:
    """`torch.compile` every `block_type` submodule's forward in place (the module objects and their parameters
    stay; only each block's forward runs compiled). Returns how many.

    The forward, not `nn.Module.compile()`: that compiles `_call_impl`, hooks included, so dynamo traced
    DeepSpeed's ZeRO-3 hooks too — one hook function shared by every module, guarded on its output's dtype, which
    recompiled until dynamo's limit on the H200 (bf16 blocks, fp32 elsewhere). The hooks gather and release
    parameters around the call: they belong outside the graph, and stay eager here."""
    blocks = [m for m in module.modules() if isinstance(m, block_type)]
    for block in blocks:
        block.forward = torch.compile(block.forward)  # an instance attribute: _call_impl runs the hooks, then this
    return len(blocks)


def adamw_kwargs(optim: OptimSpec, fused: str, device_type: str) -> dict[str, Any]:
    """AdamW's arguments. `fused` (SpeedSpec.fused_adamw): auto = the fused kernel where the parameters live on
    CUDA; otherwise the plain per-tensor loop (`foreach=False`: the CPU results the tests pin)."""
    use_fused = fused == "on" or (fused == "auto" and device_type == "cuda")
    kernel: dict[str, Any] = {"fused": True} if use_fused else {"foreach": False}
    return {"lr": optim.lr, "betas": tuple(optim.betas), "eps": 1e-8, **kernel}


def make_optimizer(model: nn.Module, optim: OptimSpec, fused: str = "auto", device_type: str = "cpu"
                   ) -> torch.optim.Optimizer:
    """The client AdamW; `device_type`: where the ranks train (the module is still on the host when it is built,
    DeepSpeed moves it)."""
    return torch.optim.AdamW(param_groups(model, optim.weight_decay), **adamw_kwargs(optim, fused, device_type))


Segments = list[tuple[int, int]]  # (first step, total steps) of each schedule a run followed, in order


def lr_at(step: int, optim: OptimSpec, total_steps: int, segments: Segments | None = None) -> float:
    """Learning rate of optimizer step `step` (0-based): linear warmup, then cosine to `min_lr` at `total_steps`.

    `segments`: when a run was resumed with a different `steps`, the schedules it followed, [(0, T0), (s1, T1),
    ...]. Steps before s1 keep T0's rates (they were taken); from s1 on the rate decays by a cosine from the
    rate step s1 had to `min_lr` at T1 — no jump, and no recomputed history. A change during warmup needs no
    segment: the cosine has not started."""
    if segments and len(segments) > 1:
        first, total = segments[-1]
        if step >= first and first >= optim.warmup_steps:
            start = lr_at(first, optim, segments[-2][1], segments[:-1])
            ratio = min(1.0, (step - first) / max(1, total - first))
            return optim.min_lr + 0.5 * (1.0 + math.cos(math.pi * ratio)) * (start - optim.min_lr)
        if step < first:
            return lr_at(step, optim, segments[-2][1], segments[:-1])
        total_steps = total
    if step < optim.warmup_steps:
        return optim.lr * (step + 1) / (optim.warmup_steps + 1)
    span = max(1, total_steps - optim.warmup_steps)
    ratio = min(1.0, (step - optim.warmup_steps) / span)
    return optim.min_lr + 0.5 * (1.0 + math.cos(math.pi * ratio)) * (optim.lr - optim.min_lr)


def scheduler_factory(optim: OptimSpec, total_steps: int, segments: Segments | None = None
                      ) -> Callable[[torch.optim.Optimizer], torch.optim.lr_scheduler.LambdaLR]:
    """What `deepspeed.initialize(lr_scheduler=...)` calls with the (wrapped) optimizer."""

    def factory(optimizer: torch.optim.Optimizer) -> torch.optim.lr_scheduler.LambdaLR:
        return torch.optim.lr_scheduler.LambdaLR(optimizer,
                                                 lambda s: lr_at(s, optim, total_steps, segments) / optim.lr)

    return factory
