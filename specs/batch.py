"""The batch geometry of one optimizer step: how many sequences it sees and how they are split over ranks and
forwards. One owner for `micro_batch × grad_accum × dp` (the DeepSpeed config, the data order, the resume
rules, the planner and the CLI all read it here). Pure Python: no torch, no numpy.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Sequence, TypeVar

Rows = TypeVar("Rows", bound=Sequence)


@dataclass(frozen=True)
class BatchGeometry:
    """micro_batch sequences per forward on one rank, grad_accum forwards per rank before one update, dp
    data-parallel ranks (tensor and pipeline ranks share their data-parallel rank's batch)."""

    micro_batch: int
    grad_accum: int = 1
    dp: int = 1

    @classmethod
    def of(cls, train: Any, parallel: Any) -> BatchGeometry:
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

    def rank_micro_batches(self, positions: Rows, dp_rank: int) -> list[Rows]:
        """Data-parallel rank `dp_rank`'s `grad_accum` micro-batches (each `micro_batch` long) of one step's
        global batch `positions` (global_batch entries in order: rank r takes the r-th per_rank block)."""
        mine = positions[dp_rank * self.per_rank:(dp_rank + 1) * self.per_rank]
        return [mine[k * self.micro_batch:(k + 1) * self.micro_batch] for k in range(self.grad_accum)]
