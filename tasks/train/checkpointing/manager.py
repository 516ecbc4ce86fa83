"""The checkpoint manager: the one object the training loop talks to about checkpoints (the format itself is
described in tasks/train/checkpointing/checkpoint.py).

Its life on one rank:
    CheckpointManager(folder, ranks)      the checkpoint folder, and the ranks that verify tags together
    resume(identity, steps, stage)        before the engine: the newest intact tag this run may resume from
                                          (verified by every rank's share of the hashing; rank 0 decides, every
                                          rank gets its answer), its metric rows and the LR schedule segments;
                                          a refusal raises ValueError before anything costly
    record_config(ds_config)              rank 0: the run's DeepSpeed config beside the tags
    bind(engine, spec, identity, ...)     once the engine is built: the writer (`Checkpointer`, a collective)
    save(step, texts, write_now)          a tag: DeepSpeed's files through the engine, the layout-free copy when
                                          the run writes one, RNG states, rank 0's small files; synchronous or
                                          handed to the background writer, which publishes and prunes
    load(tag, torch_seed)                 DeepSpeed's files at the same layout, the layout-free copy resharded at
                                          another, then this rank's RNG (reseeded after a reshard)
    saved_guard(tag) / keep_guard(state)  the stability guard's state of a tag / beside the tags at a rollback
    wait_all() / close(failing)           before a rollback reads a tag / at the end of the run

The engine (`CheckpointEngine`, tasks/train/checkpointing/seam.py) only writes and reads DeepSpeed's own files:
what else a tag holds and whether a load reshards is decided here.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

from tasks.core.files import write_json_atomic
from tasks.train.checkpointing.async_save import Checkpointer, SaveSettings
from tasks.train.checkpointing.checkpoint import (GUARD_FILE, CheckpointStore, Ranks, choose_resume,
                                                  schedule_segments, tag_step)
from tasks.train.checkpointing.elastic import load_layout_free, needs_reshard, restore_or_reseed_rng, save_layout_free
from tasks.train.checkpointing.resume_rules import unsupported_reason
from tasks.train.checkpointing.rng import rng_file
from specs.ranks import JobSpec
from tasks.train.checkpointing.seam import CheckpointEngine
from tasks.train.checkpointing.snapshot import PendingFile


@dataclass
class ResumePoint:
    """Where a run starts: `tag` None for a fresh start at step 0."""

    tag: str | None
    step: int
    rows: list[dict[str, Any]]        # the checkpoint's metric rows (metrics.jsonl up to `step`)
    schedule: list[tuple[int, int]]   # the LR schedule segments (`checkpoint.schedule_segments`)


def writes_layout_free(spec: JobSpec) -> bool:
    """Whether this run's checkpoints hold the layout-free copy: `train.checkpoint_elastic`, except where it cannot
    be written right (fp16 without ZeRO: `resume_rules.unsupported_reason`); without it a checkpoint resumes at
    its own layout only."""
    train = spec.train
    return bool(train.checkpoint_elastic) and unsupported_reason(train.precision, spec.parallel.zero_stage) is None


class CheckpointManager:
    """One rank's checkpoints: resume choice, saves (sync or async, with the layout-free copy), loads (same layout
    or resharded), the guard's saved state, and the end of the run."""

    def __init__(self, folder: Path, ranks: Ranks | None = None):
        self.store = CheckpointStore(Path(folder))
        self.ranks = ranks or Ranks()
        self.engine: CheckpointEngine | None = None
        self.spec: JobSpec | None = None
        self.saver: Checkpointer | None = None

    @property
    def folder(self) -> Path:
        return self.store.folder

    # ------------------------------------------------------------------------------------- before the engine
    def resume(self, identity: dict[str, Any], steps: int, stage: str) -> ResumePoint:
        """The newest intact checkpoint this run may resume from (a collective over `ranks`: each re-hashes its
        share of the files, rank 0 decides). Raises ValueError when the run must refuse (see `choose_resume`)."""
        found = self.store.find_resumable(self.ranks)
        decision = self.ranks.broadcast(
            choose_resume(self.store, identity, steps, stage, found) if self.ranks.rank == 0 else None)
        tag, step, rows, error = decision
        if error:
            raise ValueError(error)  # before the costly set-up: nothing has been touched
        return ResumePoint(tag, step, rows, schedule_segments(self.store, tag, step, steps))

    def record_config(self, ds_config: dict[str, Any]) -> None:
        """Rank 0: the run's DeepSpeed config beside the tags."""
        if self.ranks.rank == 0:
            write_json_atomic(self.folder / "ds_config.json", ds_config)

    # --------------------------------------------------------------------------------------- with the engine
    def bind(self, engine: CheckpointEngine, spec: JobSpec, identity: dict[str, Any], point: Callable[[str], None],
             prefix: str) -> None:
        """Saves and loads go through `engine` from now on; builds the writer (with several ranks its own gloo
        group: a collective). `identity`: what each manifest records; `point`: the fault hook; `prefix`: the
        objective's name."""
        self.engine, self.spec = engine, spec
        t = spec.train
        settings = SaveSettings(t.checkpoint_async, identity, spec.model_dump(mode="json"), t.keep_checkpoints,
                                point, prefix, spec.parallel.collective_timeout_s)
        self.saver = Checkpointer(self.store, self.state_files, engine.layout.rank, engine.layout.world, settings)

    def _bound(self) -> tuple[CheckpointEngine, JobSpec, Checkpointer]:
        if self.engine is None or self.spec is None or self.saver is None:
            raise RuntimeError("CheckpointManager: bind(engine, ...) comes before saves and loads")
        return self.engine, self.spec, self.saver

    def state_files(self, tag: str, step: int, snapshot: bool) -> list[PendingFile]:
        """This rank's training-state files of `tag`: DeepSpeed's (the engine's save) and, when the run writes
        it, the layout-free copy, whose host copies share the save's buffers with DeepSpeed's."""
        engine, spec, _ = self._bound()
        tag_dir = self.folder / tag
        with engine.deepspeed_save(str(self.folder), tag, {"step": step}, snapshot=snapshot) as saved:
            layout_free = save_layout_free(engine, tag_dir, step, defer=saved.deferred, buffers=saved.buffers) \
                if writes_layout_free(spec) else []
        return saved.files + layout_free

    def save(self, step: int, texts: dict[str, str], write_now: Callable[[Path], None]) -> float:
        """Checkpoint step `step` (tasks/train/checkpointing/async_save.py): rank 0's `texts` (file name in the tag
        -> content) go with it, `write_now(tag_folder)` writes the caller's own files before this returns.
        Returns the seconds training was blocked."""
        return self._bound()[2].save(step, texts, write_now)

    def load(self, tag: str, torch_seed: int) -> dict[str, Any]:
        """Weights, optimizer, LR schedule and counters of `tag` — DeepSpeed's files when saved at this layout,
        else the layout-free copy resharded (elastic.py) — then this rank's RNG streams (reseeded from
        (`torch_seed`, step) after a reshard: the saved streams belong to the old ranks)."""
        engine, spec, _ = self._bound()
        tag_dir = self.folder / tag
        if needs_reshard(tag_dir, engine.layout, spec.parallel.zero_stage, engine.fused):
            loaded = load_layout_free(engine, tag_dir)
        else:
            loaded = engine.deepspeed_load(str(self.folder), tag) or {}
        step = tag_step(tag)
        restore_or_reseed_rng(loaded, rng_file(self.folder, tag, engine.layout.rank), torch_seed,
                              step if step is not None else 0)
        return loaded

    def saved_guard(self, tag: str) -> dict[str, Any] | None:
        """The guard state saved with `tag`, or the one a later rollback wrote (it returned to `tag` or earlier,
        so it is newer): whichever counted more rollbacks; None when there is neither."""
        states = [json.loads(f.read_text()) for f in (self.folder / tag / GUARD_FILE, self.folder / GUARD_FILE)
                  if f.exists()]
        return max(states, key=lambda st: st["rollbacks"]) if states else None

    def keep_guard(self, state: dict[str, Any]) -> None:
        """Rank 0, at a rollback: the guard's state beside the tags, so a resume from an earlier tag keeps it."""
        if self._bound()[0].layout.rank == 0:
            write_json_atomic(self.folder / GUARD_FILE, state)

    def wait_all(self) -> None:
        """Every rank's save in flight written and published (before a rollback reads a tag)."""
        self._bound()[2].wait_all()

    def close(self, failing: bool = False) -> None:
        """End of the run: wait for the save in flight (its error logged rather than raised when `failing`)."""
        if self.saver is not None:
            self.saver.close(failing)


__all__ = ["CheckpointManager", "ResumePoint", "writes_layout_free"]
