"""What the checkpoint manager needs of one rank's engine (`CheckpointEngine`), and what the engine's own save of
a tag hands back (`EngineFiles`). The engine writes and reads DeepSpeed's files; which other files a tag holds
(the layout-free copy, RNG states, manifest) and whether a load reshards is the manager's to decide
(tasks/train/checkpointing/manager.py). Light: no torch or DeepSpeed import at run time.
"""

from __future__ import annotations

from contextlib import AbstractContextManager
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol

from specs.ranks import JobSpec

if TYPE_CHECKING:
    from tasks.train.checkpointing.snapshot import HostBuffers, PendingFile
    from tasks.train.parallel.parallelize import Layout


@dataclass
class EngineFiles:
    """DeepSpeed's files of one tag as the engine saved them: written and hashed, or (`deferred`) host snapshots
    for the background writer. `buffers`: the save's host buffers, open until the engine's save block ends, so
    other files of the same save share their copies (None: a DeepSpeed writer of its own wrote the files now,
    and the rest of the save is written now too)."""

    files: list[PendingFile]
    buffers: HostBuffers | None = None
    deferred: bool = False


class CheckpointEngine(Protocol):
    """One rank's engine as the checkpoint manager sees it: DeepSpeed's own save and load of a tag, and what the
    layout-free copy reads (tasks/train/checkpointing/elastic.py): the rank layout, the job's spec, whether the
    blocks' projections are fused, and the DeepSpeed engine."""

    layout: Layout
    job: JobSpec
    fused: bool
    ds: Any  # the DeepSpeed engine (foreign): its module, optimizer, scheduler and counters

    def deepspeed_save(self, folder: str, tag: str, client_state: dict[str, Any], snapshot: bool = False
                       ) -> AbstractContextManager[EngineFiles]:
        """DeepSpeed's `save_checkpoint` of this rank's files into `<folder>/<tag>/`, as a block: the files come
        back on entry; the save's host buffers stay open until the block ends."""
        ...

    def deepspeed_load(self, folder: str, tag: str) -> dict[str, Any]:
        """DeepSpeed's `load_checkpoint` of `<folder>/<tag>/` (same layout); its client state."""
        ...


__all__ = ["CheckpointEngine", "EngineFiles"]
