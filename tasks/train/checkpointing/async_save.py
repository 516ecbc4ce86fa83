"""One rank's checkpoint saves: synchronous, or asynchronous with a background writer (`train.checkpoint_async`).
The checkpoint manager (tasks/train/checkpointing/manager.py) owns one `Checkpointer` and hands it the function that
produces this rank's training-state files of a tag (DeepSpeed's, through the engine, and the layout-free copy).

A save of step N (tag `stepNNNNNN`), on every rank:
1. wait for this rank's previous save (at most one in flight; its failure is raised here);
2. rank 0 clears a stale folder of the tag, then a barrier;
3. the training-state files (DeepSpeed's `save_checkpoint` and the layout-free copy): synchronous — every file
   written and hashed now; asynchronous — every file's state copied to host memory
   (tasks/train/checkpointing/snapshot.py) and queued; plus this rank's RNG state; rank 0's small files (metrics
   rows, guard, schedule) are rendered to text and queued too (an objective's own state files are written now);
4. the writer (inline, or a thread per rank, after which training resumes) writes the queued files, each
   hashed as it is written, and sends its digests to rank 0 (a gloo group of its own: the main thread's
   collectives go on meanwhile); once every rank has reported, rank 0 writes the manifest
   (CheckpointStore.write_manifest, hashing only the small files), then `latest`, then prunes old tags.

So a tag becomes resumable only when every rank's files are complete: a process killed while a write is in
flight leaves a tag without manifest, which resume skips (and removes) — the run goes on from the previous
tag. A rank whose writer fails (disk full) reports it; the tag is not published and the error is raised on
every rank at its next wait. Rollbacks, final weights and the end of the run (`close`) wait for the writer.

Fault points (tasks/core/faults.py), through the trainer's hooks: `<objective>.checkpoint_async_write` in the
writer after the first of its files is written (asynchronous saves only), and `<objective>.checkpoint_write`
after every rank's files are written, before the manifest.
"""

from __future__ import annotations

import logging
import threading
import time
from dataclasses import dataclass
from datetime import timedelta
from pathlib import Path
from typing import Any, Callable

import torch.distributed as dist

from tasks.core.files import write_text_atomic
from tasks.train.checkpointing.checkpoint import CheckpointStore, tag_name
from tasks.train.checkpointing.rng import rng_file, rng_state
from tasks.train.checkpointing.snapshot import PendingFile, write_state


@dataclass
class SaveSettings:
    """What every save of a run shares."""

    asynchronous: bool
    identity: dict[str, Any]        # the run identity each manifest records
    spec: dict[str, Any]            # the resolved spec each manifest records
    keep: int                       # newest tags kept
    point: Callable[[str], None]    # the trainer's fault hook
    prefix: str                     # the objective's name (fault point names, log)
    collective_timeout_s: float     # the writer's own gloo group (`parallel.collective_timeout_s`)


StateFiles = Callable[[str, int, bool], list[PendingFile]]  # (tag, step, snapshot) -> this rank's state files


class Checkpointer:
    """Saves of one rank. `save` returns once training may go on; `wait` / `wait_all` / `close` block on the
    write in flight."""

    def __init__(self, store: CheckpointStore, state_files: StateFiles, rank: int, world: int,
                 settings: SaveSettings):
        """`state_files(tag, step, snapshot)`: this rank's training-state files of `tag` (written and hashed, or
        with `snapshot` host copies for the writer)."""
        self.store, self.state_files, self.rank, self.world, self.s = store, state_files, rank, world, settings
        self.log = logging.getLogger(f"forgeline.{settings.prefix}")
        self.thread: threading.Thread | None = None
        self.error: BaseException | None = None
        # Its own group, so the writer's one collective per save never interleaves with training's.
        self.group = None
        if world > 1:
            timeout = timedelta(seconds=settings.collective_timeout_s)
            self.group = dist.new_group(backend="gloo", timeout=timeout)

    # ------------------------------------------------------------------------------------------ the API
    def save(self, step: int, texts: dict[str, str], write_now: Callable[[Path], None]) -> float:
        """Save step `step`. Rank 0 also writes `texts` (file name in the tag -> content, rendered by the caller)
        with the rest, and calls `write_now(tag_folder)` for files it writes itself before this returns.
        Returns the seconds training was blocked (including the wait for the previous save)."""
        t0 = time.perf_counter()
        self.wait()
        tag, folder = tag_name(step), self.store.folder
        if self.rank == 0:
            self.store.prepare(tag)
        self._barrier()
        pending = self.state_files(tag, step, self.s.asynchronous)
        pending.append(PendingFile(rng_file(folder, tag, self.rank), state=rng_state()))  # fresh tensors
        if self.rank == 0:
            write_now(folder / tag)
            pending += [PendingFile(folder / tag / name, state=text) for name, text in texts.items()]
        if self.s.asynchronous:
            self.thread = threading.Thread(target=self._run, args=(tag, step, pending, time.perf_counter()),
                                           name=f"checkpoint-writer-{tag}", daemon=True)
            self.thread.start()
        else:
            self._write(tag, step, pending, t0)
            self._barrier()
        return time.perf_counter() - t0

    def wait(self) -> None:
        """Block until this rank's save in flight (if any) is written (rank 0: and published or refused);
        re-raise its failure."""
        if self.thread is not None:
            self.thread.join()
            self.thread = None
        if self.error is not None:
            error, self.error = self.error, None
            raise RuntimeError(f"checkpoint write failed: {error}") from error

    def wait_all(self) -> None:
        """Every rank's save in flight finished and published (before a rollback reads a tag)."""
        self.wait()
        self._barrier()

    def close(self, failing: bool = False) -> None:
        """End of the run: wait for the save in flight. When the run is failing already, the writer's own
        error (if any) is logged rather than raised, so it does not hide the first one."""
        try:
            self.wait()
        except RuntimeError as exc:
            if not failing:
                raise
            self.log.error("%s", exc)

    # --------------------------------------------------------------------------------------- the writer
    def _barrier(self) -> None:
        if self.world > 1:
            dist.barrier()

    def _run(self, tag: str, step: int, pending: list[PendingFile], t0: float) -> None:
        try:
            self._write(tag, step, pending, t0)
        except BaseException as exc:  # noqa: BLE001 — raised on the main thread at its next wait
            self.error = exc

    def _write(self, tag: str, step: int, pending: list[PendingFile], t0: float) -> None:
        """Write and hash this rank's queued files, report to rank 0, and (rank 0) publish once all reported."""
        problem, digests = None, {}
        try:
            for i, f in enumerate(pending):
                if isinstance(f.state, str):
                    write_text_atomic(f.path, f.state)  # small: hashed with the manifest
                    f.state = None
                    continue
                if f.digest is None:  # a callable state writes its own format (elastic.py's safetensors)
                    f.digest = f.state(f.path) if callable(f.state) else write_state(f.path, f.state)
                    f.state = None  # drop the snapshot's references
                if i == 0 and self.s.asynchronous:
                    self.s.point(f"{self.s.prefix}.checkpoint_async_write")  # killed: the rest not written
                digests[f.path.relative_to(self.store.folder / tag).as_posix()] = f.digest
        except Exception as exc:  # reported, so rank 0 does not publish and no rank waits forever
            problem = f"rank {self.rank}: {type(exc).__name__}: {exc}"
        reports = self._gather({"digests": digests, "problem": problem})
        self.s.point(f"{self.s.prefix}.checkpoint_write")  # killed: every file written, no manifest
        if self.rank == 0:
            assert reports is not None
            problems = [r["problem"] for r in reports if r["problem"]]
            if problems:
                raise RuntimeError(f"checkpoint {tag} not published: " + "; ".join(problems))
            merged = {rel: d for r in reports for rel, d in r["digests"].items()}
            self.store.write_manifest(tag, step, self.s.identity, self.s.spec, merged)
            self.store.publish(tag)
            removed = self.store.prune(self.s.keep, protect=tag)
            self.log.info("checkpoint %s saved%s%s", tag,
                          f" (written in {time.perf_counter() - t0:.2f} s in the background)"
                          if self.s.asynchronous else "",
                          f" (removed {', '.join(removed)})" if removed else "")
        elif problem:
            raise RuntimeError(problem)

    def _gather(self, report: dict[str, Any]) -> list[dict[str, Any]] | None:
        if self.world == 1:
            return [report]
        out: list[Any] | None = [None] * self.world if self.rank == 0 else None
        dist.gather_object(report, out, dst=0, group=self.group)
        return out


__all__ = ["Checkpointer", "SaveSettings"]
