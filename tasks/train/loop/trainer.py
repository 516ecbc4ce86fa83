"""The one training loop. `run_rank(job)` is what every launcher ends in (in-process, `torch.multiprocessing.spawn`,
the DeepSpeed launcher, torchrun); the objective (tasks/train/objectives/) says what is trained, this module how.

Per step (0-based `step`, `done = step + 1` steps finished): one optimizer step on the step's global batch, judged
by the stability guard (before any backward — with accumulation through a forward pre-pass — except for a
pipeline's one-call step, judged after its update: tasks/train/loop/step.py);
every `log_every` (and the last) a metrics row and a log line; every `eval_every` (and the last, and whenever the
objective asks) its evaluation rows; every `checkpoint_every` (and the last) a checkpoint; then the fault point
`<objective>.step_done`. metrics.jsonl rows hold only deterministic values (rounded to 6 decimals), so an
identical rerun or a killed-and-resumed run writes the same bytes; wall-clock telemetry goes to the log,
`reports/<stage>/telemetry.jsonl`, wandb and the result (tasks/train/loop/monitor.py).

Checkpoints go through one `CheckpointManager` (tasks/train/checkpointing/manager.py). Resume: rank 0 picks the
newest intact checkpoint whose identity matches (every rank re-hashing its share of the files), every rank loads it
(weights, optimizer, LR schedule, RNG, guard state, the objective's own state such as the adaptive sampler), so a
resumed run ends where an uninterrupted one ends. A rollback (the guard's escalation) restores an earlier checkpoint
the same way but keeps the guard, which carries the rollback count and skipped data windows.
"""

from __future__ import annotations

import logging
import math
import os
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, TypeVar

import torch
import torch.distributed as dist

from specs.ranks import RankError, RankJob, RankResult, Timing, TrainResult
from tasks.core import faults
from tasks.core.files import json_text, write_json_atomic, write_text_atomic
from tasks.train.checkpointing.checkpoint import (GUARD_FILE, METRICS_FILE, SCHEDULE_FILE, VERIFY_THREADS, Ranks,
                                                  tag_name)
from tasks.train.checkpointing.manager import CheckpointManager
from specs.architecture import flops_per_token, param_count
from tasks.train.parallel.dsconfig import ds_config, lr_at
from tasks.train.loop.monitor import Monitor
from tasks.train.objectives import make_objective
from tasks.train.objectives.base import Objective, Prepared
from tasks.train.loop.runlog import append_row, check_overfit, jsonl, rounded, write_plots
from tasks.train.loop.stability import Action, Decision, StabilityGuard
from tasks.train.loop.step import GradNorm, HeldNorm, LateDecision, train_step
from tasks.train.checkpointing.weights import ADAPTER_DIR, ADAPTER_SHARDS, merge_shards

if TYPE_CHECKING:
    from tasks.train.loop.seam import StepEngine


def no_fault(batch: int) -> float:
    return 1.0


def no_micro_fault(batch: int, micro: int) -> float:
    return 1.0


@dataclass
class Hooks:
    """Test hooks, installed explicitly (not looked up in the environment per step)."""

    loss_factor: Callable[[int], float] = no_fault     # data batch (1-based) -> training-loss multiplier
    micro_factor: Callable[[int, int], float] = no_micro_fault  # (data batch, micro-batch index) -> multiplier
    point: Callable[[str], None] = faults.checkpoint   # named fault points (kill / errno / pause tests)

    @classmethod
    def from_job(cls, job: RankJob) -> "Hooks":
        plan = {batch: float(factor) for batch, factor in job.context.loss_faults.items()}
        return cls(loss_factor=lambda batch: plan.get(batch, 1.0)) if plan else cls()


def marker_path(marker_dir: str | Path, rank: int) -> Path:
    return Path(marker_dir) / f"rank-{rank:05d}.json"


def run_rank(job: RankJob, hooks: Hooks | None = None) -> TrainResult:
    """Train on this rank; the result (or the error, typed) goes to this rank's marker file too."""
    from tasks.train.parallel.parallelize import teardown

    rank = int(os.environ.get("RANK", "0"))
    marker = marker_path(job.marker_dir, rank)
    try:
        result = start(job, rank, hooks or Hooks.from_job(job))
        write_json_atomic(marker, RankResult(rank=rank, ok=True, result=result).model_dump(mode="json"))
        return result
    except BaseException as exc:
        error = RankError(type=type(exc).__name__, message=str(exc), refusal=isinstance(exc, ValueError))
        write_json_atomic(marker, RankResult(rank=rank, ok=False, error=error).model_dump(mode="json"))
        raise
    finally:
        teardown()  # destroy the process groups before exit (ZeRO-3 runs abort at exit otherwise, ~3/20)


def local_ranks(world: int) -> int:
    """Ranks on this machine: torchrun's LOCAL_WORLD_SIZE, the DeepSpeed launcher's LOCAL_SIZE, else `world`."""
    return max(1, int(os.environ.get("LOCAL_WORLD_SIZE") or os.environ.get("LOCAL_SIZE") or world))


def cpu_threads(total: int, world: int) -> int:
    """torch threads per rank: the run's `cpu_threads` split over the ranks on this machine."""
    return max(1, total // local_ranks(world))


def start(job: RankJob, rank: int, hooks: Hooks) -> TrainResult:
    """Set up this rank (objective, process groups, layout, resume choice, engine) and train."""
    from deepspeed.utils import logger as ds_logger

    from tasks.train.loop.engine import Engine
    from tasks.train.parallel.parallelize import build_layout, init_distributed

    t_start = time.perf_counter()
    train, par = job.spec.train, job.spec.parallel
    before = torch.get_num_threads()
    if not torch.cuda.is_available() or par.accelerator == "cpu":  # before any work: results depend on it
        torch.set_num_threads(cpu_threads(train.cpu_threads, int(os.environ.get("WORLD_SIZE", "1"))))
    try:
        objective = make_objective(job)
        prepared = objective.prepare(rank)
        ds_logger.setLevel(logging.WARNING)
        if torch.cuda.is_available() and par.accelerator != "cpu":
            torch.cuda.set_device(int(os.environ.get("LOCAL_RANK", "0")))
        init_distributed("nccl" if par.accelerator == "cuda" else None, init_file=job.context.init_file,
                         allow_shm=job.context.allow_shm, timeout_s=par.collective_timeout_s)
        layout = build_layout(par)
        torch.manual_seed(prepared.torch_seed)
        dsc = ds_config(train, par)
        checkpoints = CheckpointManager(Path(job.ckpt_dir), verifying_ranks(rank, layout.world))
        point = checkpoints.resume(prepared.identity, train.steps, objective.name)  # a refusal raises here
        checkpoints.record_config(dsc)
        engine = Engine(prepared.cfg, job.spec, layout, job.seed, dsc, init=prepared.init, schedule=point.schedule)
        trainer = Trainer(objective, prepared, engine, checkpoints, job, hooks, t_start=t_start,
                          schedule=point.schedule)
        return trainer.fit(point.tag, point.step, point.rows, dsc)
    finally:
        torch.set_num_threads(before)  # an in-process run must not change the caller's threads


T = TypeVar("T")  # an object a collective hands around


def verifying_ranks(rank: int, world: int) -> Ranks:
    """The ranks of this run as checkpoint verifiers: the default group's object collectives, and the node's
    hashing threads split between its local ranks (they read the same disks)."""
    if world == 1:
        return Ranks(threads=VERIFY_THREADS)

    def broadcast(obj: T) -> T:
        box = [obj]
        dist.broadcast_object_list(box, src=0)
        return box[0]

    def gather(obj: T) -> list[T]:
        out: list[Any] = [None] * world
        dist.all_gather_object(out, obj)  # small objects only (a path or none per rank)
        return out

    return Ranks(rank, world, max(1, VERIFY_THREADS // local_ranks(world)), broadcast, gather)


@dataclass
class Trainer:
    """The loop over steps for one rank, given a built engine and an objective."""

    objective: Objective
    prepared: Prepared
    engine: StepEngine             # tasks/train/loop/engine.py's Engine, or a test double
    checkpoints: CheckpointManager
    job: RankJob                   # PretrainRun | SFTRun | PreferRun (paths, seed, spec)
    hooks: Hooks = field(default_factory=Hooks)
    t_start: float = field(default_factory=time.perf_counter)
    schedule: list[tuple[int, int]] = field(default_factory=list)  # LR schedule segments (`schedule_segments`)

    def __post_init__(self) -> None:
        self.train = self.job.spec.train
        self.layout = self.engine.layout
        self.rank = self.layout.rank
        self.out_dir = Path(self.job.out_dir)
        self.log = logging.getLogger(f"forgeline.{self.objective.name}")
        self.guard = StabilityGuard(self.train.stability)
        self.monitor: Monitor | None = None
        self.rows: list[dict[str, Any]] = []
        self.losses: list[float] = []
        self.step_times: list[float] = []
        self.spec_json = self.job.spec.model_dump(mode="json")
        self._n_incidents = 0  # incidents already written to incidents.jsonl
        self.held = HeldNorm(self.guard, self.objective, self.train)  # grad norms judged one step late
        self.checkpoints.bind(self.engine, self.job.spec, self.prepared.identity, self.hooks.point,
                              self.objective.name)

    # --------------------------------------------------------------------------------------------- the run
    def fit(self, tag: str | None, start: int, rows: list[dict[str, Any]], dsc: dict[str, Any]) -> TrainResult:
        """Resume from `tag` (None: fresh) at step `start` with its metric rows, train to `train.steps`, write
        the final weights (rank 0) and return the result."""
        self.objective.attach(self.engine, self.checkpoints.folder, tag)
        if tag is not None:
            self._load(tag)
            if self.rank == 0:
                self.log.info("resumed from %s at step %d", tag, start)
        self.rows = rows + self.objective.start_rows(self.engine, tag, start)
        metrics_file, incidents_file = self.out_dir / "metrics.jsonl", self.out_dir / "incidents.jsonl"
        if self.rank == 0:
            write_text_atomic(metrics_file, jsonl(self.rows))
            write_text_atomic(incidents_file, self.guard.incidents_jsonl())
            self.monitor = Monitor(self.train.telemetry, precision=self.train.precision,
                                   flops_per_token=flops_per_token(self.prepared.cfg), n_devices=self.layout.world,
                                   tokens_per_step=self.prepared.tokens_per_step,
                                   reports_dir=Path(self.job.reports_dir), config=self.spec_json,
                                   run_name=f"{self.objective.name}-seed{self.job.seed}", resume_step=start)
        s = self.train.stability
        if start == 0 and tag is None and s.enabled and s.max_rollbacks > 0:
            self._save(0)  # a rollback before the first checkpoint returns to the initial weights
        t_ready = time.perf_counter()
        failing = True
        try:
            step = start
            while step < self.train.steps:
                step = self.run_step(step, metrics_file, incidents_file)
            failing = False
        finally:
            self.checkpoints.close(failing)  # the last save is published before the final weights
            if self.monitor:
                self.monitor.close()
        t_trained = time.perf_counter()
        if self.train.sanity_overfit:
            check_overfit(self.rows, self.train, self.objective.name)
        return self._finish(tag, start, dsc, t_ready, t_trained)

    def run_step(self, step: int, metrics_file: Path, incidents_file: Path) -> int:
        """Step `step` (0-based): train, judge, log, evaluate, checkpoint; returns the next step to run (an
        earlier one after a rollback)."""
        t0, done = time.perf_counter(), step + 1  # the guard counts steps from 1, as metrics.jsonl does
        batch = 0 if self.train.sanity_overfit else self.guard.batch_index(done) - 1
        try:
            loss, read_gnorm, decision = self.optimizer_step(batch, done)
            decision, gnorm = self.held.judge(done, batch, loss, read_gnorm, decision)
        except LateDecision as late:  # the previous step's grad norm, read during this step, escalated
            decision, gnorm = late.decision, None
            self.losses, self.step_times = self.losses[:-1], self.step_times[:-1]  # that step is undone
        self._write_incidents(incidents_file)
        decision.raise_if_abort()
        if decision.action is Action.ROLLBACK:
            return self._rollback(decision.to_step, metrics_file)
        self.step_times.append(time.perf_counter() - t0)
        self.losses.append(loss)
        if self.monitor:
            self.monitor.step_done()
        new_rows = self._log_row(step, done, loss, gnorm) + self._evaluate(done)
        self.rows += new_rows
        if self.rank == 0:
            for r in new_rows:
                append_row(metrics_file, r)
        if done % self.train.checkpoint_every == 0 or done == self.train.steps:
            stall = self._save(done)
            if self.monitor:  # the time training waited for the save (async: the host snapshot)
                self.monitor.checkpoint_saved(done, stall)
        if self.monitor and (new_rows or done % self.train.checkpoint_every == 0):
            self.monitor.resync()  # evaluation and checkpoint time is not training throughput
        self.hooks.point(f"{self.objective.name}.step_done")
        return done

    def optimizer_step(self, batch: int, done: int) -> tuple[float, GradNorm, Decision | None]:
        """One optimizer step on data batch `batch`: (loss of the global batch, grad norm, the guard's decision
        when it judged before the update, else None). When the guard can judge first — one micro-batch per rank,
        or accumulation with its forward pre-pass — and when it cannot (a pipeline): tasks/train/loop/step.py."""
        self.engine.set_lr_scale(self.guard.lr_scale(done))
        fault, micro_fault = self.hooks.loss_factor(batch + 1), self.hooks.micro_factor
        return train_step(self.engine, self.objective, self.guard, self.train.stability.accum_check, batch, done,
                         lambda i: fault * micro_fault(batch + 1, i), self.held.settle)

    # --------------------------------------------------------------------------------------- rows and logs
    def _write_incidents(self, incidents_file: Path) -> None:
        if self.rank != 0 or len(self.guard.incidents) == self._n_incidents:
            return
        write_text_atomic(incidents_file, self.guard.incidents_jsonl())
        for inc in self.guard.incidents[self._n_incidents:]:
            self.log.warning("stability: step %d %s: %s", inc["step"], inc["action"], inc["reason"])
        self._n_incidents = len(self.guard.incidents)

    def _log_row(self, step: int, done: int, loss: float, gnorm: float | None) -> list[dict[str, Any]]:
        t = self.train
        if not (done % t.log_every == 0 or done == t.steps):
            return []
        row = {"kind": "train", "step": done, "loss": rounded(loss),
               "lr": rounded(lr_at(step, t.optim, t.steps, self.schedule) * self.guard.lr_scale(done)),
               "grad_norm": rounded(gnorm), **self.objective.train_row(done),
               # fp16: steps the loss scaler skipped so far (not spikes; each one is also an incident)
               **({"overflows": sum(i["action"] == "overflow" for i in self.guard.incidents)}
                  if t.precision == "fp16" else {})}
        if self.monitor:
            wall = self.monitor.row(done, {k: v for k, v in row.items() if k not in ("kind", "step")})
            self.log.info("step %d/%d loss %.4f lr %.3g grad_norm %s tokens/s %s mfu %s", done, t.steps, loss,
                          row["lr"], "-" if gnorm is None else f"{gnorm:.3f}",
                          "-" if wall["tokens_per_s"] is None else f"{wall['tokens_per_s']:.0f}",
                          "unknown" if wall["mfu"] is None else f"{wall['mfu']:.1%}")
        return [row]

    def _evaluate(self, done: int) -> list[dict[str, Any]]:
        t = self.train
        if not (done % t.eval_every == 0 or done == t.steps or self.objective.eval_due(done)):
            return []
        outcome = self.objective.evaluate(self.engine, done, self.guard.batch_index(done + 1) - 1)
        if self.monitor:
            for ev in (r for r in outcome.rows if r["kind"] == "eval"):
                by_source = ev.get("val_loss_by_source", {})
                self.monitor.sink.log(done, {"val_loss": ev["val_loss"],
                                             **{f"val_loss/{k}": v for k, v in by_source.items()}})
                self.log.info("step %d val loss %.4f %s", done, ev["val_loss"],
                              " ".join(f"{s}={v:.3f}" for s, v in by_source.items()))
            if outcome.sink:
                self.monitor.sink.log(done, outcome.sink)
        return outcome.rows

    # ----------------------------------------------------------------------------------------- checkpoints
    def _barrier(self) -> None:
        if self.layout.world > 1:
            dist.barrier()

    def _save(self, step: int) -> float:
        """Checkpoint step `step` (the manager's `save`); returns the seconds training was blocked. Rank 0's own
        files are rendered now (the rows and guard change as training goes on) and written by the writer."""
        self.guard.note_checkpoint(step)  # before its state is saved: a resumed run must hold the same target
        texts = {METRICS_FILE: jsonl(self.rows), GUARD_FILE: json_text(self.guard.state_dict()),
                 SCHEDULE_FILE: json_text([list(s) for s in self.schedule])} if self.rank == 0 else {}
        return self.checkpoints.save(step, texts, self.objective.save_state)

    def _load(self, tag: str) -> None:
        """Weights, optimizer, schedule and RNG of `tag` (resharded when saved at another layout); the guard
        state saved with it, or the newer one a later rollback wrote (`CheckpointManager.saved_guard`)."""
        self.checkpoints.load(tag, self.prepared.torch_seed)
        state = self.checkpoints.saved_guard(tag)
        if state is not None:
            self.guard.load_state_dict(state)
        self._n_incidents = len(self.guard.incidents)

    def _rollback(self, to_step: int, metrics_file: Path) -> int:
        """Restore the checkpoint of `to_step` but keep the guard; rows past `to_step` will be rewritten."""
        tag = tag_name(to_step)
        self.log.warning("stability: rolling back to checkpoint %s (rollback %d of %d)", tag, self.guard.rollbacks,
                         self.guard.spec.max_rollbacks)
        self.checkpoints.wait_all()  # the tag may be the save still in flight
        self.held.drop()  # a step past `to_step`: undone with it
        self.checkpoints.load(tag, self.prepared.torch_seed)
        self.rows = [r for r in self.rows if r["step"] <= to_step]
        self.checkpoints.keep_guard(self.guard.state_dict())  # a resume from `tag` keeps it
        if self.rank == 0:
            write_text_atomic(metrics_file, jsonl(self.rows))
        self._barrier()
        self.objective.restore_state(self.checkpoints.folder / tag)
        if self.monitor:
            self.monitor.resync()
        return to_step

    # ----------------------------------------------------------------------------------------- final weights
    def _finish(self, tag: str | None, start: int, dsc: dict[str, Any], t_ready: float,
                t_trained: float) -> TrainResult:
        cfg = self.prepared.cfg
        # Each rank writes its own part; rank 0 then merges on CPU from the files (no tensor is gathered).
        self.engine.write_weight_shard(self.out_dir)
        self._barrier()
        if self.rank != 0:
            return TrainResult(rank0=False, objective=self.objective.name)
        merge_shards(self.out_dir)
        if (self.out_dir / ADAPTER_SHARDS).is_dir():  # LoRA: the adapter beside the merged model
            merge_shards(self.out_dir / ADAPTER_DIR, folder=self.out_dir / ADAPTER_SHARDS)
        write_json_atomic(self.out_dir / "config.json", {"model": cfg.to_dict(), "vocab_size": cfg.vocab_size,
                                                        "seq_len": cfg.seq_len, "param_count": param_count(cfg),
                                                        "flops_per_token": flops_per_token(cfg)})
        write_json_atomic(self.out_dir / "ds_config.json", dsc)
        write_plots(self.out_dir, self.rows)
        outputs = self.objective.finish(self.out_dir, self.rows, self.guard)
        trained, train_s = self.train.steps - start, t_trained - t_ready
        timing = Timing(startup_s=round(t_ready - self.t_start, 3), train_s=round(train_s, 3),
                        wall_s=round(time.perf_counter() - self.t_start, 3),
                        s_per_step=round(sum(self.step_times) / len(self.step_times), 4) if self.step_times else None,
                        tokens_per_s=round(trained * self.prepared.tokens_per_step / max(train_s, 1e-9), 1)
                        if trained else None)
        return TrainResult(objective=self.objective.name, start_step=start, resumed_from=tag,
                           losses=[x if math.isfinite(x) else None for x in self.losses],
                           rows=self.rows, incidents=len(self.guard.incidents), rollbacks=self.guard.rollbacks,
                           telemetry=self.monitor.summary() if self.monitor else {}, timing=timing, outputs=outputs)


__all__ = ["Trainer", "Hooks", "run_rank", "start", "marker_path", "cpu_threads"]
