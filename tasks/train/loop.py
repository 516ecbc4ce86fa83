"""One rank of a pretraining run: set up, resume, train, evaluate, checkpoint, consolidate, report.

`run_rank(job)` is what every launcher ends in (in-process, `torch.multiprocessing.spawn`, the DeepSpeed
launcher, torchrun). It reads RANK / LOCAL_RANK / WORLD_SIZE / MASTER_* from the environment.

Per step (0-based `step`, `done = step + 1` steps finished): one optimizer step on the step's global batch;
every `log_every` (and the last) a metrics row and a log line; every `eval_every` (and the last) the val loss,
overall and per source; every `checkpoint_every` (and the last) a checkpoint; then the fault point
`pretrain.step_done`. metrics.jsonl rows hold only deterministic values (step, loss, lr, grad norm, tokens,
val losses: rounded to 6 decimals), so an identical rerun or a killed-and-resumed run writes the same bytes;
wall-clock telemetry (tokens/s, MFU, memory, NVML) goes to the log, `reports/pretrain/telemetry.jsonl`, wandb
and the StageResult summary (tasks/train/monitor.py). The stability guard (tasks/train/stability.py) judges
every step; its incidents go to `incidents.jsonl` and its state into each checkpoint. With `mix.adaptive` on
(tasks/train/adaptive.py) the sampler follows per-source weights updated from the eval losses at update points;
the updates are `kind: mix` rows, and the weight history is saved into each checkpoint (`adaptive_mix.json`).
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import time
from dataclasses import asdict, dataclass
from functools import partial
from pathlib import Path
from typing import Any

import torch
import torch.distributed as dist

from tasks.core import faults
from tasks.core.files import atomic_path, write_json_atomic, write_text_atomic
from tasks.train.adaptive import AdaptiveMixer
from tasks.train.checkpoint import CheckpointStore, identity_problems, tag_name
from tasks.train.dsconfig import ds_config, lr_at
from tasks.train.monitor import Monitor
from tasks.train.runlog import (append_row, build_report, check_overfit, eval_row, jsonl, rounded,
                                 write_plots)
from tasks.train.stability import Action, StabilityGuard

log = logging.getLogger("forgeline.pretrain")
GUARD_FILE = "stability.json"


@dataclass
class Job:
    """Everything a rank needs, as plain JSON (written to a file for the external launchers)."""

    spec: dict[str, Any]   # PretrainJob, mode="json"
    mix_dir: str
    out_dir: str
    ckpt_dir: str
    reports_dir: str
    marker_dir: str
    seed: int
    kind: str = "pretrain"  # "sft": the same launch path runs tasks.train.sft_loop instead
    extra: dict[str, Any] | None = None  # kind-specific inputs (sft: instruct dir, pretrained weights)

    def to_json(self) -> str:
        return json.dumps(asdict(self), sort_keys=True)

    @classmethod
    def from_json(cls, text: str) -> "Job":
        return cls(**json.loads(text))

    def train_spec(self) -> Any:
        """The typed job: `PretrainJob`, or `SFTJob` for kind "sft" (both have `.train` and `.parallel`)."""
        if self.kind == "sft":
            from specs.sft import SFTJob

            return SFTJob.model_validate(self.spec)
        return self.pretrain_job()

    def pretrain_job(self) -> Any:
        from specs.pretrain import PretrainJob

        return PretrainJob.model_validate(self.spec)


def marker_path(marker_dir: str | Path, rank: int) -> Path:
    return Path(marker_dir) / f"rank-{rank:05d}.json"


def data_facts(mix_dir: Path) -> dict[str, Any]:
    """seq_len, vocab size and a fingerprint of mix's output (layout, train index, tokenizer)."""
    layout = json.loads((mix_dir / "packing.json").read_text())
    vocab = layout["vocab_size"]
    tok_file = mix_dir / "tokenizer.json"
    if tok_file.exists():
        from tasks.data.tokenizer import load_tokenizer

        tok_vocab = load_tokenizer(tok_file).get_vocab_size()
        if tok_vocab != vocab:
            raise ValueError(f"pretrain: tokenizer.json has {tok_vocab} tokens but packing.json says {vocab}")
    digest = hashlib.sha256()
    for name in ("packing.json", layout["splits"]["train"]["index"], "tokenizer.json"):
        if (mix_dir / name).exists():
            digest.update(name.encode() + b"\0" + (mix_dir / name).read_bytes())
    return {"seq_len": layout["seq_len"], "vocab_size": vocab, "data": digest.hexdigest()[:16]}


def run_rank(job: Job) -> dict[str, Any]:
    """Train on this rank; returns (and writes to this rank's marker) a result dict."""
    t_start = time.perf_counter()
    rank = int(os.environ.get("RANK", "0"))
    marker = marker_path(job.marker_dir, rank)
    try:
        if job.kind == "sft":
            from tasks.train.sft_loop import run_sft

            result = run_sft(job, rank, t_start)
        else:
            result = _run(job, rank, t_start)
        write_json_atomic(marker, {"rank": rank, "ok": True, "result": result})
        return result
    except BaseException as exc:
        write_json_atomic(marker, {"rank": rank, "ok": False, "error": f"{type(exc).__name__}: {exc}"})
        raise
    finally:
        from tasks.train.engine import teardown

        teardown()  # destroy the process groups before exit (ZeRO-3 runs abort at exit otherwise, ~3/20)


def _quiet_deepspeed() -> None:
    from deepspeed.utils import logger as ds_logger

    ds_logger.setLevel(logging.WARNING)


def _run(job: Job, rank: int, t_start: float) -> dict[str, Any]:
    from tasks.train.data import EvalData, TrainData
    from tasks.train.engine import Engine, build_layout, init_distributed
    from tasks.train.model import ModelConfig, flops_per_token, param_count

    spec = job.pretrain_job()
    train, par = spec.train, spec.parallel
    mix_dir, out_dir, ckpt_dir = Path(job.mix_dir), Path(job.out_dir), Path(job.ckpt_dir)
    facts = data_facts(mix_dir)
    cfg = ModelConfig.from_spec(spec.model, facts["vocab_size"], facts["seq_len"])
    if cfg.ffn_hidden % par.tp:
        raise ValueError(f"parallel.tp: must divide the SwiGLU width {cfg.ffn_hidden} (model.ffn_multiple_of)")

    _quiet_deepspeed()
    if torch.cuda.is_available() and par.accelerator != "cpu":
        torch.cuda.set_device(int(os.environ.get("LOCAL_RANK", "0")))
    init_distributed("nccl" if par.accelerator == "cuda" else None)
    layout = build_layout(par)
    torch.manual_seed(job.seed)
    dsc = ds_config(train, par)
    store = CheckpointStore(ckpt_dir)
    identity = {"model": {k: v for k, v in cfg.to_dict().items() if k not in ("vocab_size", "seq_len")},
                "parallel": {"dp": par.dp, "tp": par.tp, "pp": par.pp, "zero_stage": par.zero_stage},
                "train": {"precision": train.precision, "micro_batch_size": train.micro_batch_size,
                          "grad_accum": train.grad_accum},
                **facts, "seed": job.seed}
    spec_json = spec.model_dump(mode="json")

    # ---- resume: rank 0 picks the tag, every rank loads it
    decision: list[Any] = [None]
    if rank == 0:
        decision[0] = _choose_resume(store, identity, train.steps)
    if layout.world > 1:
        dist.broadcast_object_list(decision, src=0)
    tag, start, rows, error = decision[0]
    if error:
        raise ValueError(error)  # before the costly set-up: nothing has been touched
    if rank == 0:
        write_json_atomic(ckpt_dir / "ds_config.json", dsc)
    engine = Engine(cfg, spec, layout, job.seed, dsc)
    data = TrainData(mix_dir, job.seed, train.micro_batch_size, train.grad_accum, par.dp)
    mixer = AdaptiveMixer.attach(job, train, data, ckpt_dir, tag)  # mix.adaptive: None when off
    if mixer and tag is None:
        rows.append(mixer.row(0))
    evald = EvalData(mix_dir, train.micro_batch_size, train.eval_batches)
    if tag is not None:
        engine.load(str(ckpt_dir), tag)
        rng = ckpt_dir / tag / f"rng-rank{rank:05d}.pt"
        if rng.exists():
            _set_rng(torch.load(rng, weights_only=True))
        if rank == 0:
            log.info("resumed from %s at step %d", tag, start)
    guard = StabilityGuard(train.stability)
    if tag is not None:
        _load_guard(guard, ckpt_dir, tag)
    metrics_file, incidents_file = out_dir / "metrics.jsonl", out_dir / "incidents.jsonl"
    tokens_per_step = data.plan.global_batch * cfg.seq_len
    G = data.plan.global_batch
    monitor = None
    if rank == 0:
        write_text_atomic(metrics_file, jsonl(rows))
        write_text_atomic(incidents_file, guard.incidents_jsonl())
        monitor = Monitor(train.telemetry, precision=train.precision, flops_per_token=flops_per_token(cfg),
                          n_devices=layout.world, tokens_per_step=tokens_per_step,
                          reports_dir=Path(job.reports_dir), config=spec_json, run_name=f"pretrain-seed{job.seed}",
                          resume_step=start)
    if start == 0 and tag is None and train.stability.enabled and train.stability.max_rollbacks > 0:
        # A rollback before the first checkpoint returns to the initial weights: keep them as checkpoint 0.
        _save(engine, store, layout, rank, 0, rows, identity, spec_json, train.keep_checkpoints, guard, mixer)

    t_ready = time.perf_counter()
    losses: list[float] = []
    step_times: list[float] = []
    n_incidents = len(guard.incidents)
    step = start
    try:
        while step < train.steps:
            t0 = time.perf_counter()
            done = step + 1  # the guard counts steps from 1, as metrics.jsonl does; data batches from 0
            batch = 0 if train.sanity_overfit else guard.batch_index(done) - 1
            doc_ids = partial(data.doc_ids, batch)
            judge = partial(guard.observe, done, doc_ids=doc_ids) if engine.judges_before_update else None
            loss, gnorm, decision = engine.train_step(batch, data, guard.lr_scale(done), judge)
            if decision is None:
                decision = guard.observe(done, loss, gnorm, doc_ids, update_done=True)
            elif decision.action is Action.OK:
                decision = guard.observe_grad_norm(done, gnorm, doc_ids)
            if rank == 0 and len(guard.incidents) != n_incidents:
                write_text_atomic(incidents_file, guard.incidents_jsonl())
                for inc in guard.incidents[n_incidents:]:
                    log.warning("stability: step %d %s: %s", inc["step"], inc["action"], inc["reason"])
                n_incidents = len(guard.incidents)
            decision.raise_if_abort()
            if decision.action is Action.ROLLBACK:
                rows = _rollback(engine, guard, decision.to_step, ckpt_dir, layout, rank, rows, metrics_file)
                if mixer:
                    mixer.restore(ckpt_dir / tag_name(decision.to_step))
                step = decision.to_step
                if monitor:
                    monitor.resync()
                continue
            step_times.append(time.perf_counter() - t0)
            losses.append(loss)
            if monitor:
                monitor.step_done()
            new_rows = []
            if done % train.log_every == 0 or done == train.steps:
                row = {"kind": "train", "step": done, "loss": rounded(loss),
                       "lr": rounded(lr_at(step, train.optim, train.steps) * guard.lr_scale(done)),
                       "grad_norm": rounded(gnorm), "tokens": done * tokens_per_step}
                new_rows.append(row)
                if monitor:
                    wall = monitor.row(done, {k: v for k, v in row.items() if k not in ("kind", "step")})
                    log.info("step %d/%d loss %.4f lr %.3g grad_norm %s tokens/s %s mfu %s", done, train.steps,
                             loss, row["lr"], "-" if gnorm is None else f"{gnorm:.3f}",
                             "-" if wall["tokens_per_s"] is None else f"{wall['tokens_per_s']:.0f}",
                             "unknown" if wall["mfu"] is None else f"{wall['mfu']:.1%}")
            if done % train.eval_every == 0 or done == train.steps or (mixer and mixer.due(done)):
                ev = eval_row(engine, evald, done)
                if ev:
                    new_rows.append(ev)
                    if monitor:
                        monitor.sink.log(done, {"val_loss": ev["val_loss"],
                                                **{f"val_loss/{k}": v for k, v in ev["val_loss_by_source"].items()}})
                        log.info("step %d val loss %.4f %s", done, ev["val_loss"],
                                 " ".join(f"{s}={v:.3f}" for s, v in ev["val_loss_by_source"].items()))
                    if mixer and mixer.due(done):  # new weights from the next data batch on
                        next_batch = guard.batch_index(done + 1) - 1
                        new_rows.append(mixer.update(done, ev["val_loss_by_source"], next_batch))
                        if monitor:
                            monitor.sink.log(done, mixer.log_values())
            rows += new_rows
            if rank == 0:
                for r in new_rows:
                    append_row(metrics_file, r)
            if done % train.checkpoint_every == 0 or done == train.steps:
                t_ckpt = time.perf_counter()
                _save(engine, store, layout, rank, done, rows, identity, spec_json, train.keep_checkpoints, guard,
                      mixer)
                if monitor:  # saves are synchronous here: training waits for them (the stall is reported)
                    monitor.checkpoint_saved(done, time.perf_counter() - t_ckpt)
            if monitor and (new_rows or done % train.checkpoint_every == 0):
                monitor.resync()  # evaluation and checkpoint time is not training throughput
            faults.checkpoint("pretrain.step_done")
            step = done
    finally:
        if monitor:
            monitor.close()
    t_trained = time.perf_counter()
    if train.sanity_overfit:
        check_overfit(rows, train)

    state = engine.consolidated_state_dict()
    result: dict[str, Any] = {}
    if rank == 0:
        with atomic_path(out_dir / "model.pt") as tmp:
            torch.save(state, tmp)
        write_json_atomic(out_dir / "config.json", {"model": cfg.to_dict(), "vocab_size": cfg.vocab_size,
                                                   "seq_len": cfg.seq_len, "param_count": param_count(cfg),
                                                   "flops_per_token": flops_per_token(cfg)})
        write_json_atomic(out_dir / "ds_config.json", dsc)
        report = build_report(rows, cfg, spec_json, train.steps, G, tokens_per_step, evald.sources, guard)
        write_plots(out_dir, rows)
        if mixer:
            mixer.write_csv(out_dir, rows)
        write_json_atomic(out_dir / "report.json", report)
        trained = train.steps - start
        result = {"report": report, "start_step": start, "resumed_from": tag, "losses": losses,
                  "telemetry": monitor.summary() if monitor else {},
                  "timing": {"startup_s": round(t_ready - t_start, 3), "train_s": round(t_trained - t_ready, 3),
                             "s_per_step": round(sum(step_times) / len(step_times), 4) if step_times else None,
                             "tokens_per_s": round(trained * tokens_per_step / max(t_trained - t_ready, 1e-9), 1)
                             if trained else None,
                             "wall_s": round(time.perf_counter() - t_start, 3)}}
        if mixer:
            result["adaptive_mix"] = mixer.summary()
    return result


def _choose_resume(store: CheckpointStore, identity: dict[str, Any], steps: int):
    """(tag, step, metric rows, error) — tag None to start fresh; error set to refuse."""
    tag, manifest, warnings = store.find_resumable()
    for w in warnings:
        log.warning("%s", w)
    if tag is None:
        return None, 0, [], None
    problems = identity_problems(manifest["identity"], identity)
    if problems:
        return None, 0, [], (f"pretrain: refusing to resume from {store.folder / tag}: the run differs in "
                             + "; ".join(problems)
                             + f". Delete {store.folder} to start over, or restore the previous settings.")
    step = int(manifest["step"])
    if step > steps:
        return None, 0, [], (f"pretrain: checkpoint {tag} is at step {step}, beyond train.steps = {steps}; "
                             f"delete {store.folder} to start over or raise train.steps")
    removed = store.drop_newer_than(step)
    if removed:
        log.warning("removed unusable newer checkpoint(s): %s", ", ".join(removed))
    mfile = store.folder / tag / "metrics.jsonl"
    rows = [json.loads(line) for line in mfile.read_text().splitlines() if line.strip()] if mfile.exists() else []
    return tag, step, rows, None


def _save(engine: Any, store: CheckpointStore, layout: Any, rank: int, step: int, rows: list[dict[str, Any]],
          identity: dict[str, Any], spec_json: dict[str, Any], keep: int, guard: StabilityGuard,
          mixer: AdaptiveMixer | None = None) -> None:
    tag = tag_name(step)
    guard.note_checkpoint(step)  # before its state is saved: a resumed run must hold the same rollback target
    if rank == 0:
        store.prepare(tag)
    _barrier(layout)
    engine.save(str(store.folder), tag, {"step": step})
    with atomic_path(store.folder / tag / f"rng-rank{rank:05d}.pt") as tmp:
        torch.save(_get_rng(), tmp)
    _barrier(layout)
    faults.checkpoint("pretrain.checkpoint_write")  # tests: killed with the tag's files written, its manifest not
    if rank == 0:
        write_text_atomic(store.folder / tag / "metrics.jsonl", jsonl(rows))
        write_json_atomic(store.folder / tag / GUARD_FILE, guard.state_dict())
        if mixer:
            mixer.save(store.folder / tag)  # the weight history: a resumed run draws the same batches
        store.write_manifest(tag, step, identity, spec_json)
        store.publish(tag)
        removed = store.prune(keep, protect=tag)
        log.info("checkpoint %s saved%s", tag, f" (removed {', '.join(removed)})" if removed else "")
    _barrier(layout)


def _load_guard(guard: StabilityGuard, ckpt_dir: Path, tag: str) -> None:
    """The guard state saved with `tag`, or the one written at a later rollback (which returned to `tag` or an
    earlier checkpoint and so is newer than what `tag` holds): whichever has counted more rollbacks."""
    states = [json.loads(f.read_text()) for f in (ckpt_dir / tag / GUARD_FILE, ckpt_dir / GUARD_FILE) if f.exists()]
    if states:
        guard.load_state_dict(max(states, key=lambda st: st["rollbacks"]))


def _rollback(engine: Any, guard: StabilityGuard, to_step: int, ckpt_dir: Path, layout: Any, rank: int,
              rows: list[dict[str, Any]], metrics_file: Path) -> list[dict[str, Any]]:
    """Restore the checkpoint of `to_step` (weights, optimizer, LR schedule, RNG) and keep the guard (it holds the
    rollback count and the skipped data windows); metric rows past `to_step` are dropped and will be rewritten."""
    tag = tag_name(to_step)
    log.warning("stability: rolling back to checkpoint %s (rollback %d of %d)", tag, guard.rollbacks,
                guard.spec.max_rollbacks)
    engine.load(str(ckpt_dir), tag)
    rng = ckpt_dir / tag / f"rng-rank{rank:05d}.pt"
    if rng.exists():
        _set_rng(torch.load(rng, weights_only=True))
    rows = [r for r in rows if r["step"] <= to_step]
    if rank == 0:
        write_json_atomic(ckpt_dir / GUARD_FILE, guard.state_dict())  # a resume from `tag` must not forget this
        write_text_atomic(metrics_file, jsonl(rows))
    _barrier(layout)
    return rows


def _get_rng() -> dict[str, torch.Tensor]:
    """This rank's torch RNG states (dropout is 0 by default, but a resumed run must not depend on it)."""
    state = {"cpu": torch.get_rng_state()}
    if torch.cuda.is_available() and torch.cuda.is_initialized():
        state["cuda"] = torch.cuda.get_rng_state()
    return state


def _set_rng(state: dict[str, torch.Tensor]) -> None:
    torch.set_rng_state(state["cpu"])
    if "cuda" in state and torch.cuda.is_available():
        torch.cuda.set_rng_state(state["cuda"])


def _barrier(layout: Any) -> None:
    if layout.world > 1:
        dist.barrier()




__all__ = ["Job", "run_rank", "marker_path", "data_facts"]
