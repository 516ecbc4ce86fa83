"""This rank's place in its tensor-parallel group: the one small type every TP and SP layer, the engine and the data
path read (its own module so that the sequence-parallel collectives and the TP layers need not import each other)."""

from __future__ import annotations

from dataclasses import dataclass

import torch.distributed as dist


@dataclass(frozen=True)
class TPContext:
    """This rank's place in its tensor-parallel group (rank 0 of 1 and no group: no tensor parallelism)."""

    rank: int = 0
    size: int = 1
    group: dist.ProcessGroup | None = None  # None: no tensor parallelism
    sequence: bool = False  # sequence parallelism: outside the TP regions each rank holds T/tp of the tokens

    @property
    def active(self) -> bool:
        return self.size > 1

    @property
    def sequence_parallel(self) -> bool:
        return self.sequence and self.size > 1


NO_TP = TPContext()
