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

STEPS_PER_PRINT = 10**9  # our loop logs; DeepSpeed's own progress lines stay off


def ds_config(train: Any, parallel: Any) -> dict[str, Any]:
    """DeepSpeed config for a `PretrainSpec` and `ParallelSpec`."""
    fp16 = train.precision == "fp16"
    cfg: dict[str, Any] = {
        "train_micro_batch_size_per_gpu": train.micro_batch_size,
        "gradient_accumulation_steps": train.grad_accum,
        "train_batch_size": train.micro_batch_size * train.grad_accum * parallel.dp,
        "gradient_clipping": train.optim.grad_clip,
        "zero_optimization": {"stage": parallel.zero_stage},
        "bf16": {"enabled": train.precision == "bf16"},
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
    if parallel.zero_stage == 3:
        # Deterministic gathers and no prefetch surprises on small models; same math either way.
        cfg["zero_optimization"].update({"stage3_param_persistence_threshold": 0})
    return cfg


def param_groups(model: nn.Module, weight_decay: float) -> list[dict[str, Any]]:
    """Decay on ≥ 2-D weights (matmuls, embedding); none on norms and other vectors. A parameter ZeRO-3 has
    already partitioned (at build time) holds an empty tensor: its shape is `ds_shape`."""
    decay, no_decay = [], []
    for _, p in model.named_parameters():
        if p.requires_grad:
            (decay if len(getattr(p, "ds_shape", p.shape)) >= 2 else no_decay).append(p)
    return [{"params": decay, "weight_decay": weight_decay}, {"params": no_decay, "weight_decay": 0.0}]


def make_optimizer(model: nn.Module, optim: Any) -> torch.optim.Optimizer:
    return torch.optim.AdamW(param_groups(model, optim.weight_decay), lr=optim.lr, betas=tuple(optim.betas),
                             eps=1e-8, foreach=False)


Segments = list[tuple[int, int]]  # (first step, total steps) of each schedule a run followed, in order


def lr_at(step: int, optim: Any, total_steps: int, segments: Segments | None = None) -> float:
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


def scheduler_factory(optim: Any, total_steps: int, segments: Segments | None = None
                      ) -> Callable[[torch.optim.Optimizer], Any]:
    """What `deepspeed.initialize(lr_scheduler=...)` calls with the (wrapped) optimizer."""

    def factory(optimizer: torch.optim.Optimizer) -> torch.optim.lr_scheduler.LambdaLR:
        return torch.optim.lr_scheduler.LambdaLR(optimizer,
                                                 lambda s: lr_at(s, optim, total_steps, segments) / optim.lr)

    return factory
