"""What the training loop, the step and the objectives need of one rank's engine: `StepEngine`, a protocol that
tasks/train/loop/engine.py's `Engine` follows (over DeepSpeed) and the tests' doubles follow without it. It extends
the checkpoint manager's `CheckpointEngine` (the Trainer binds the same engine to its checkpoints). Light: torch
only, no DeepSpeed import.
"""

from __future__ import annotations

from contextlib import AbstractContextManager
from pathlib import Path
from typing import TYPE_CHECKING, Callable, Iterator, Protocol

import torch

from tasks.train.checkpointing.seam import CheckpointEngine

if TYPE_CHECKING:
    from tasks.train.inputs.data import EvalData
    from tasks.train.parallel.tp_context import TPContext


class StepEngine(CheckpointEngine, Protocol):
    """One rank's engine as the loop and the objectives use it: the step API, dp reductions, evaluation and the
    rank's part of the final weights."""

    vocab_tp: TPContext  # the group the head's vocabulary is split over (the loss functions' `shard_logits`)

    @property
    def device(self) -> torch.device: ...

    def set_lr_scale(self, scale: float) -> None: ...

    def forward(self, *args: torch.Tensor, **kwargs: object) -> torch.Tensor:
        """The wrapped module's forward (training mode): logits, or the mean loss when labels are given."""
        ...

    def backward_and_step(self, loss: torch.Tensor) -> None: ...

    def skip_update(self) -> None: ...

    def skipped_steps(self) -> int: ...

    def loss_scale(self) -> float | None: ...

    def grad_norm(self) -> float | None: ...

    def grad_norm_later(self) -> Callable[[], float | None]: ...

    def pipeline_train_batch(self, data_iter: Iterator[tuple[torch.Tensor, torch.Tensor]] | None) -> float: ...

    def dp_sum(self, x: torch.Tensor) -> float: ...

    def dp_sum_each(self, x: torch.Tensor) -> list[float]: ...

    def dp_mean(self, x: torch.Tensor) -> float: ...

    def eval_mode(self) -> AbstractContextManager[None]: ...

    def evaluate(self, ev: EvalData) -> torch.Tensor: ...

    def write_weight_shard(self, out_dir: Path) -> Path | None: ...


__all__ = ["StepEngine"]
