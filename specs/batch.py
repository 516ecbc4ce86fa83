"""The batch geometry of one optimizer step: how many sequences it sees and how they are split over ranks and
forwards. One owner for `micro_batch × grad_accum × dp` (the DeepSpeed config, the data order, the resume
rules, the planner and the CLI all read it here). Pure Python: no torch, no numpy.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Protocol, Sequence, TypeVar

Rows = TypeVar("Rows", bound=Sequence)


class Batching(Protocol):
    """What the geometry reads of a `train` section (pretrain's and SFT's alike: `specs.train.TrainLoopSpec`)."""

    micro_batch_size: int
    grad_accum: int


class DataParallel(Protocol):
    """What the geometry reads of a `parallel` section or a built rank layout: the data-parallel degree."""

    dp: int


@dataclass(frozen=True)
class BatchGeometry:
    """micro_batch sequences per forward on one rank, grad_accum forwards per rank before one update, dp
    data-parallel ranks (tensor and pipeline ranks share their data-parallel rank's batch)."""

    micro_batch: int
    grad_accum: int = 1
    dp: int = 1

    @classmethod
    def of(cls, train: Batching, parallel: DataParallel) -> BatchGeometry:
        """From a job's `train` (micro_batch_size, grad_accum) and `parallel` (dp) sections."""
        return cls(int(train.micro_batch_size), int(train.grad_accum), int(parallel.dp))

    @classmethod
    def of_identity(cls, identity: dict[str, Any]) -> BatchGeometry:
        """From a checkpoint's run identity (SFT's leaves tp out when it is 1; dp is always there)."""
        train, parallel = identity.get("train", {}), identity.get("parallel", {})
        return cls(int(train.get("micro_batch_size", 0)), int(train.get("grad_accum", 1)), int(parallel.get("dp", 1)))

    @property
    def per_rank(self) -> int:
        """Sequences one data-parallel rank trains on per step."""
        return self.micro_batch * self.grad_accum

    @property
    def global_batch(self) -> int:
        """Sequences per optimizer step, all ranks together."""
        return self.per_rank * self.dp

    def tokens(self, seq_len: int) -> int:
        """Tokens per optimizer step, all ranks together, for rows of `seq_len` tokens (throughput, MFU, the
        run reports and the planner read it here)."""
        return self.global_batch * seq_len

    def rank_micro_batches(self, positions: Rows, dp_rank: int) -> list[Rows]:
        """Data-parallel rank `dp_rank`'s `grad_accum` micro-batches (each `micro_batch` long) of one step's
        global batch `positions` (global_batch entries in order: rank r takes the r-th per_rank block)."""
        mine = positions[dp_rank * self.per_rank:(dp_rank + 1) * self.per_rank]
        return [mine[k * self.micro_batch:(k + 1) * self.micro_batch] for k in range(self.grad_accum)]


class StepBatches:
    """What a data order with `micro_batch`, `grad_accum` and `dp` attributes and a `positions(step)` method (a
    step's global batch, in order) derives from them: its geometry, the global batch and each rank's micro-batches.
    Shared by the plain data order and the adaptive mixer (tasks/train/inputs/data.py, adaptive.py)."""

    micro_batch: int
    grad_accum: int
    dp: int

    def positions(self, step: int) -> Any:
        raise NotImplementedError

    @property
    def geometry(self) -> BatchGeometry:
        return BatchGeometry(self.micro_batch, self.grad_accum, self.dp)

    @property
    def global_batch(self) -> int:
        return self.geometry.global_batch

    def micro_indexes(self, step: int, dp_rank: int) -> list[Any]:
        """This data-parallel rank's `grad_accum` micro-batches of step `step`, each [micro_batch]."""
        return self.geometry.rank_micro_batches(self.positions(step), dp_rank)
