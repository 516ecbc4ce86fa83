"""Time the stage's own training loop: the job a stage would launch, run through `tasks.train.loop.trainer.run_rank`
(one in-process rank, as `launch` runs a world of one), with a clock in the trainer's test hooks.

What is timed is the configuration the stage would use: the spec's own defaults (`PretrainJob` / `SFTJob` built
from nothing but the benchmark's shape, sequence length and micro-batch), `precision: auto` resolved for the
devices as `launch` resolves it, the DeepSpeed config the trainer builds from the spec (`tasks.train.parallel.dsconfig`),
the stability guard, telemetry and data loader of the real loop. When the stage's defaults change, this follows.
`--set key=value` overrides (dotted paths into the job) are for experiments and are reported with the result.

Two settings differ from a stage run, both about checkpoints rather than speed, and both reported: no checkpoint
or evaluation falls inside the run (`checkpoint_every`/`eval_every` past its end), and the guard's rollback
checkpoint of step 0 is not written (`stability.max_rollbacks: 0`; the guard still judges every step). The
loop is stopped after the timed steps (`StopTiming` from the step-done hook), before the final save and weights:
saving is the pretrain smoke's and ckpt-stall's business.
"""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

import torch

FAR = 10**9  # a cadence no benchmark run reaches
TIMING_SETTINGS = {"train.checkpoint_every": FAR, "train.eval_every": FAR, "train.stability.max_rollbacks": 0}


class StopTiming(Exception):
    """Raised from the step-done hook once the timed steps are done: ends the loop before its final save."""


class StepClock:
    """The trainer's `Hooks` as a stopwatch: `loss_factor` is called as each step starts (it returns 1.0, which
    changes nothing), `point("<objective>.step_done")` as each ends. The device is synchronised only at the
    ends of the warm-up and of the timed steps, so the loop runs as it would untimed. With a `trace`, the
    `trace_steps` steps after the timed ones run under torch.profiler (benchmarks/gpu/trace.py), outside the
    timing."""

    def __init__(self, objective: str, warmup: int, steps: int, cuda: bool, trace: Any = None, trace_steps: int = 0):
        self.done_point, self.warmup, self.steps, self.cuda = f"{objective}.step_done", warmup, steps, cuda
        self.trace, self.trace_steps = trace, trace_steps if trace is not None else 0
        self.loop_start: float | None = None
        self.ends: list[float] = []
        self.traced: dict[str, Any] | None = None

    def step_start(self, batch: int) -> float:
        if self.loop_start is None:
            self._sync()
            self.loop_start = time.perf_counter()
        return 1.0

    def point(self, name: str) -> None:
        if name != self.done_point:
            return
        n = len(self.ends) + 1
        timed_end = self.warmup + self.steps
        if n in (1, self.warmup, timed_end, timed_end + self.trace_steps):
            self._sync()
        self.ends.append(time.perf_counter())
        if n == timed_end and self.trace_steps:
            self.trace.start()
        if n == timed_end + self.trace_steps:
            if self.trace_steps:
                self.traced = self.trace.stop(self.trace_steps)
            raise StopTiming

    def _sync(self) -> None:
        if self.cuda:
            torch.cuda.synchronize()

    def result(self) -> dict[str, Any]:
        timed_end = self.warmup + self.steps
        if len(self.ends) < timed_end or self.loop_start is None:
            raise RuntimeError(f"the loop stopped after {len(self.ends)} of {timed_end} steps")
        start = self.ends[self.warmup - 1] if self.warmup else self.loop_start
        out: dict[str, Any] = {"first_step_s": self.ends[0] - self.loop_start, "warmup_s": start - self.loop_start,
                               "seconds": self.ends[timed_end - 1] - start}
        if self.traced is not None:
            out["trace"] = self.traced
        return out


def apply_overrides(data: dict[str, Any], overrides: dict[str, Any]) -> dict[str, Any]:
    """`data` (nested dicts) with each dotted key set to its value (YAML-parsed when given as text)."""
    import yaml

    for key, value in overrides.items():
        node = data
        *parents, leaf = key.split(".")
        for p in parents:
            node = node.setdefault(p, {})
        node[leaf] = yaml.safe_load(value) if isinstance(value, str) else value
    return data


def parse_sets(items: list[str]) -> dict[str, str]:
    out = {}
    for item in items:
        key, sep, value = item.partition("=")
        if not sep or not key:
            raise ValueError(f"--set {item!r}: expected key=value (a dotted path into the job, e.g. "
                             "train.speed.compile=true)")
        out[key.strip()] = value
    return out


def pretrain_run(work: Path, shape: str, seq: int, batch: int, vocab: int, zero: int | None, device: str,
                 steps: int, sets: dict[str, str], seed: int = 0) -> Any:
    """A `PretrainRun` of the spec's defaults at this shape on a synthetic mix (vocab `vocab`, rows of `seq`)."""
    from specs.pretrain import PretrainJob
    from tasks.train.inputs.synthetic import make_job, synthetic_mix

    rows = steps * batch  # rows the loop reads; documents average 1.75 rows
    mix = synthetic_mix(work / "mix", vocab_size=vocab, seq_len=seq, docs=rows + 16, val_docs=8, seed=seed)
    data: dict[str, Any] = {"model": {"flavor": shape}, "parallel": {"accelerator": device},
                            "train": {"steps": steps, "micro_batch_size": batch}}
    if zero is not None:
        data["parallel"]["zero_stage"] = zero
    apply_overrides(data, {**TIMING_SETTINGS, **sets})
    return make_job(work, mix, PretrainJob.model_validate(data), seed)


def time_stage(job: Any, warmup: int, steps: int, trace: Any = None, trace_steps: int = 0) -> dict[str, Any]:
    """Run `job` (a PretrainRun or SFTRun whose `train.steps` exceeds warmup + steps + trace_steps) on one
    in-process rank as `launch` does for a world of one, stop it after the timed (and traced) steps; timings and
    what the stage configured. `trace`: a benchmarks/gpu/trace.py StepTrace for `trace_steps` steps."""
    from tasks.train.launch import environ, free_port, rank_env, resolved_precision
    from tasks.train.loop.trainer import Hooks, run_rank

    job = job.model_copy(update={"spec": resolved_precision(job.spec)})
    par, train = job.spec.parallel, job.spec.train
    if train.steps <= warmup + steps + trace_steps:
        raise ValueError(f"train.steps {train.steps} must exceed warm-up + timed + traced steps "
                         f"({warmup + steps + trace_steps})")
    cuda = par.accelerator != "cpu" and torch.cuda.is_available()
    clock = StepClock(job.objective, warmup, steps, cuda, trace, trace_steps)
    if cuda:
        torch.cuda.reset_peak_memory_stats()
    env = {"MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(free_port()), "RANK": "0", "LOCAL_RANK": "0",
           "WORLD_SIZE": "1", "LOCAL_WORLD_SIZE": "1", **rank_env(par.accelerator, threads=False)}
    t0 = time.perf_counter()
    with environ(**env):
        try:
            run_rank(job, Hooks(loss_factor=clock.step_start, point=clock.point))
        except StopTiming:
            pass
    out = clock.result()
    ds = json.loads((Path(job.ckpt_dir) / "ds_config.json").read_text())
    return {**out, "startup_s": (clock.loop_start or t0) - t0,
            "config": configured(train, cuda, ds), "spec_speed": train.speed.model_dump(mode="json")}


def compiled_scope(train: Any, cuda: bool, ds: dict[str, Any]) -> str | bool:
    """What the run compiled: False, or the scope at its layout (one rank: pp = tp = 1)."""
    return train.speed.compiles(cuda) and train.speed.scope_at(1, 1, ds["zero_optimization"]["stage"])


def configured(train: Any, cuda: bool, ds: dict[str, Any]) -> dict[str, Any]:
    """What ran, in the table's words: precision and DeepSpeed's mode for it, ZeRO, compile, fused AdamW."""
    mode = ("torch_autocast" if ds.get("torch_autocast", {}).get("enabled") else
            "bf16 section" if ds.get("bf16", {}).get("enabled") else
            "fp16 section" if ds.get("fp16", {}).get("enabled") else "fp32")
    return {"precision": train.precision, "ds_mode": mode, "zero": ds["zero_optimization"]["stage"],
            "compile": compiled_scope(train, cuda, ds), "fused_adamw": train.speed.fused_adamw,
            "micro_batch": train.micro_batch_size, "grad_accum": train.grad_accum,
            "stability": train.stability.enabled, "dropout": getattr(train, "dropout", None)}

