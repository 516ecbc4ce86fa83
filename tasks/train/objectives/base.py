"""The objective protocol: what differs between training kinds (pretraining, SFT, later DPO) and nothing else.

The `Trainer` (tasks/train/loop/trainer.py) owns the loop — resume, the step, accumulation, the stability guard and
rollback, checkpoints, evaluation cadence, telemetry, final weights — and asks its objective only for:

    prepare(rank)                 before the engine: ModelConfig, starting weights, checkpoint identity
    attach(engine, tag)           after it: build the data over the rank layout (restore sampler state of `tag`)
    micro_batches(engine, batch)  this rank's micro-batches of data batch `batch`, each a lazily computed
                                  (loss to backpropagate, value to report); `reduce` turns the reported values
                                  into the global batch's loss (identical on every rank), `micro_losses`
                                  into each micro-batch's loss over dp (the guard's pre-pass judges each)
    whole_step(engine, batch)     or, for a pipeline, the whole optimizer step in one call (`whole_steps` True)
    evaluate(engine, done, next_batch)  eval rows (and whatever the objective updates from them)
    finish(out_dir, rows, guard)  its own output files and results (rank 0)

A new objective is a new module with a class following `Objective`; the stage building its rank job imports the
class and names it there (`objective_ref`, objectives/__init__.py).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, Iterator, Protocol

import torch

from specs.architecture import ModelConfig
from specs.train import TrainLoopSpec
from tasks.train.checkpointing.init_weights import WeightSource

if TYPE_CHECKING:  # the seams' types, for readers and type checkers (engine.py imports much more than this needs)
    from tasks.train.loop.seam import StepEngine
    from tasks.train.loop.stability import StabilityGuard

MicroBatch = Callable[[], tuple[torch.Tensor, torch.Tensor]]  # -> (loss to backpropagate, value to report)


def autocast_identity(train: TrainLoopSpec) -> dict[str, Any]:
    """The checkpoint-identity entry of DeepSpeed's mixed-precision mode: torch_autocast keeps fp32 weights and
    optimizer states where the bf16 section keeps bf16 weights plus fp32 masters, so one cannot resume the other.
    Absent for the default (`sections`), so identities written before the option existed still match."""
    mode = train.speed.mixed_precision  # `auto` is resolved at launch (tasks/train/launch.py: resolved_precision)
    return {"mixed_precision": mode} if mode not in ("sections", "auto") and train.precision == "bf16" else {}


def dropout_seed(seed: int, rank: int, dp: int, tp: int, tokens_split: bool, pp: int = 1) -> int:
    """Torch's global seed on `rank` (dropout masks), for DeepSpeed's rank order rank = (stage·dp + dp_rank)·tp
    + tp_rank. Data-parallel replicas see different samples and must draw different masks. Tensor-parallel peers
    hold the block outputs replicated, so they must draw the same masks (or their copies would diverge), unless
    sequence parallelism gives each its own tokens (`tokens_split`), when each needs its own seed. Pipeline stages
    hold different blocks, so each stage draws its own stream (stage 0 keeps the values of a run without a pipeline).
    """
    dp_rank = (rank // tp) % dp
    tp_part = rank % tp if tokens_split and tp > 1 else 0
    stage = rank // (tp * dp) if pp > 1 else 0
    width = tp if tokens_split and tp > 1 else 1
    return seed * 1009 + dp_rank + dp * (tp_part + width * stage)


@dataclass
class Prepared:
    """What an objective knows before the engine exists."""

    cfg: ModelConfig
    identity: dict[str, Any]                        # fields a checkpoint must share to be resumed
    torch_seed: int                                 # torch's global seed on this rank (dropout masks)
    init: WeightSource | None = None  # starting weights, read per rank as its slices (None: the seeded init)
    tokens_per_step: int = 0                        # tokens of one global batch (throughput, MFU)


@dataclass
class EvalOutcome:
    rows: list[dict[str, Any]] = field(default_factory=list)  # metric rows (kind "eval", "mix", ...)
    sink: dict[str, float] = field(default_factory=dict)      # extra values for telemetry sinks (wandb)


class Objective(Protocol):
    name: str             # "pretrain", "sft": log and fault-point prefix, messages, run names
    whole_steps: bool     # True: `whole_step` runs the optimizer step in one call (pipeline); no judging first

    def prepare(self, rank: int) -> Prepared: ...

    def attach(self, engine: StepEngine, ckpt_dir: Path, tag: str | None) -> None: ...

    def start_rows(self, engine: StepEngine, tag: str | None, start: int) -> list[dict[str, Any]]: ...

    def micro_batches(self, engine: StepEngine, batch: int) -> Iterator[MicroBatch]: ...

    def reduce(self, engine: StepEngine, batch: int, values: list[torch.Tensor]) -> float: ...

    def micro_losses(self, engine: StepEngine, batch: int, values: list[torch.Tensor]) -> list[float]: ...

    def whole_step(self, engine: StepEngine, batch: int) -> float: ...

    def doc_ids(self, batch: int) -> list[str]: ...

    def train_row(self, done: int) -> dict[str, Any]: ...

    def eval_due(self, done: int) -> bool: ...

    def evaluate(self, engine: StepEngine, done: int, next_batch: int) -> EvalOutcome: ...

    def save_state(self, folder: Path) -> None: ...

    def restore_state(self, folder: Path) -> None: ...

    def finish(self, out_dir: Path, rows: list[dict[str, Any]], guard: StabilityGuard) -> dict[str, Any]: ...
