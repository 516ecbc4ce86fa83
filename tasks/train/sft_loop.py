"""One rank of an SFT run: the pretrain loop's machinery (DeepSpeed engine, checkpoints, exact resume, stability
guard, telemetry) on packed chat rows with an assistant-only, per-token loss.

Data (`prepare`, the same on every rank, deterministic): mix's tokenizer extended with the chat role tokens
(tasks/train/chat.py), instruct's train/held-out conversations rendered and packed into rows of `seq_len`
(tasks/train/sft_data.py: block-diagonal attention, positions restarting per sample, loss weights only on
assistant tokens). Rows are ordered per step by `BatchPlan` (a pure function of (seed, step), as in pretraining),
so resuming needs only the step.

Loss: Σ weight·cross-entropy over the step's micro-batches on every rank, divided by the step's global token
count — known up front from the data, so no extra all-reduce (see `sft_data.sft_loss_sums`). With one micro-batch
per rank the loss is judged by the stability guard before the backward, as in pretraining.
"""

from __future__ import annotations

import json
import logging
import os
import time
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import Any

import numpy as np
import torch
import torch.distributed as dist

from tasks.core import faults
from tasks.core.files import atomic_path, write_json_atomic, write_text_atomic
from tasks.train.checkpoint import CheckpointStore
from tasks.train.chat import extend_tokenizer, jinja_template, resize_embeddings, vocab_size
from tasks.train.data import BatchPlan
from tasks.train.dsconfig import ds_config, lr_at
from tasks.train.loop import _barrier, _choose_resume, _load_guard, _rollback, _save, _set_rng
from tasks.train.model import ModelConfig, flops_per_token, param_count
from tasks.train.monitor import Monitor
from tasks.train.runlog import append_row, jsonl, rounded, write_plots
from tasks.train.sft_data import Packed, pack_samples, render_records, sft_loss_sums, step_loss
from tasks.train.stability import Action, StabilityGuard

log = logging.getLogger("forgeline.sft")


@dataclass
class SFTData:
    tokenizer: Any
    cfg: ModelConfig
    init_state: dict[str, torch.Tensor]
    train: Packed
    heldout: Packed
    stats: dict[str, Any]


def read_jsonl(path: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]


def prepare(pretrain_dir: Path, mix_dir: Path, instruct_dir: Path, train: Any, seed: int) -> SFTData:
    """Tokenizer with chat markers, the model config and starting weights, packed train and held-out rows."""
    from tasks.data.tokenizer import load_tokenizer

    tok, added = extend_tokenizer(load_tokenizer(mix_dir / "tokenizer.json"))
    pre = json.loads((pretrain_dir / "config.json").read_text())
    base = ModelConfig.from_dict({**pre["model"], "dropout": train.dropout,
                                  "seq_len": train.seq_len or pre["model"]["seq_len"]})
    state = torch.load(pretrain_dir / "model.pt", map_location="cpu", weights_only=True)
    # Claimed <|reserved_N|> rows were never inputs in pretraining: start them (and any new rows) at the mean.
    reinit = sorted(i for i in added.values() if i < base.vocab_size)
    state, cfg = resize_embeddings(state, base, max(vocab_size(tok), base.vocab_size), seed, reinit=reinit)
    pad = tok.token_to_id("<|pad|>")
    if pad is None:
        raise ValueError("sft: mix's tokenizer has no <|pad|> token")
    stats: dict[str, Any] = {"added_tokens": dict(sorted(added.items())), "vocab_size": cfg.vocab_size}
    packs = []
    for split in ("train", "heldout"):
        samples, _ids, rejected = render_records(read_jsonl(instruct_dir / f"{split}.jsonl"), tok)
        packed = pack_samples(samples, cfg.seq_len, pad, seed, overflow=train.overflow)
        if split == "train" and not len(packed.rows):
            raise ValueError(f"sft: no trainable rows from {instruct_dir / 'train.jsonl'}")
        stats[split] = {"conversations": len(samples) + len(rejected), "rejected": len(rejected),
                        "rows": len(packed.rows), "loss_tokens": int(packed.weights.sum()), **packed.stats}
        packs.append(packed)
    return SFTData(tok, cfg, state, packs[0], packs[1], stats)


def run_sft(job: Any, rank: int, t_start: float) -> dict[str, Any]:
    from specs.sft import SFTJob
    from tasks.train.engine import Engine, build_layout, init_distributed
    from tasks.train.loop import _quiet_deepspeed

    spec = SFTJob.model_validate(job.spec)
    train, par = spec.train, spec.parallel
    extra = job.extra or {}
    out_dir, ckpt_dir = Path(job.out_dir), Path(job.ckpt_dir)
    data = prepare(Path(extra["pretrain_dir"]), Path(job.mix_dir), Path(extra["instruct_dir"]), train, job.seed)
    cfg = data.cfg

    _quiet_deepspeed()
    if torch.cuda.is_available() and par.accelerator != "cpu":
        torch.cuda.set_device(int(os.environ.get("LOCAL_RANK", "0")))
    init_distributed("nccl" if par.accelerator == "cuda" else None)
    layout = build_layout(par)
    torch.manual_seed(job.seed * 1009 + rank)  # dropout masks differ per rank; weights come from init_state
    dsc = ds_config(train, par)
    store = CheckpointStore(ckpt_dir)
    identity = {"model": cfg.to_dict(), "parallel": {"dp": par.dp, "zero_stage": par.zero_stage},
                "train": {"micro_batch_size": train.micro_batch_size, "grad_accum": train.grad_accum,
                          "precision": train.precision},
                "data": {k: data.stats[k]["loss_tokens"] for k in ("train", "heldout")}, "seed": job.seed,
                "init": extra.get("pretrain_fingerprint")}
    spec_json = spec.model_dump(mode="json")
    decision: list[Any] = [_choose_resume(store, identity, train.steps) if rank == 0 else None]
    if layout.world > 1:
        dist.broadcast_object_list(decision, src=0)
    tag, start, rows, error = decision[0]
    if error:
        raise ValueError(error.replace("pretrain:", "sft:"))
    engine = Engine(cfg, spec, layout, job.seed, dsc, init_state=data.init_state)
    guard = StabilityGuard(train.stability)
    if tag is not None:
        engine.load(str(ckpt_dir), tag)
        rng = ckpt_dir / tag / f"rng-rank{rank:05d}.pt"
        if rng.exists():
            _set_rng(torch.load(rng, weights_only=True))
        _load_guard(guard, ckpt_dir, tag)
        if rank == 0:
            log.info("resumed from %s at step %d", tag, start)

    plan = BatchPlan(job.seed, len(data.train.rows), train.micro_batch_size, train.grad_accum, par.dp)
    metrics_file, incidents_file = out_dir / "metrics.jsonl", out_dir / "incidents.jsonl"
    monitor = None
    if rank == 0:
        write_json_atomic(ckpt_dir / "ds_config.json", dsc)
        write_text_atomic(metrics_file, jsonl(rows))
        write_text_atomic(incidents_file, guard.incidents_jsonl())
        monitor = Monitor(train.telemetry, precision=train.precision, flops_per_token=flops_per_token(cfg),
                          n_devices=layout.world, tokens_per_step=plan.global_batch * cfg.seq_len,
                          reports_dir=Path(job.reports_dir), config=spec_json, run_name=f"sft-seed{job.seed}",
                          resume_step=start)
    if start == 0:  # the starting point of the held-out curve, kept in the rows (a resumed run still has it)
        before = heldout_loss(engine, data.heldout, train.micro_batch_size)
        rows = [{"kind": "eval", "step": 0, "val_loss": rounded(before), "val_loss_by_source": {}}]
        if rank == 0:
            write_text_atomic(metrics_file, jsonl(rows))
    if start == 0 and tag is None and train.stability.enabled and train.stability.max_rollbacks > 0:
        _save(engine, store, layout, rank, 0, rows, identity, spec_json, train.keep_checkpoints, guard)

    n_incidents, step, t_ready = len(guard.incidents), start, time.perf_counter()
    try:
        while step < train.steps:
            done = step + 1
            batch = guard.batch_index(done) - 1
            judge = partial(guard.observe, done) if train.grad_accum == 1 else None
            loss, gnorm, dec = sft_step(engine, data.train, plan, batch, guard.lr_scale(done), judge)
            if dec is None:
                dec = guard.observe(done, loss, gnorm, update_done=True)
            elif dec.action is Action.OK:
                dec = guard.observe_grad_norm(done, gnorm)
            if rank == 0 and len(guard.incidents) != n_incidents:
                write_text_atomic(incidents_file, guard.incidents_jsonl())
                n_incidents = len(guard.incidents)
            dec.raise_if_abort()
            if dec.action is Action.ROLLBACK:
                rows = _rollback(engine, guard, dec.to_step, ckpt_dir, layout, rank, rows, metrics_file)
                step = dec.to_step
                continue
            if monitor:
                monitor.step_done()
            new_rows = []
            if done % train.log_every == 0 or done == train.steps:
                new_rows.append({"kind": "train", "step": done, "loss": rounded(loss), "grad_norm": rounded(gnorm),
                                 "lr": rounded(lr_at(step, train.optim, train.steps) * guard.lr_scale(done))})
                if monitor:
                    wall = monitor.row(done, {"loss": loss, "lr": new_rows[-1]["lr"]})
                    log.info("sft step %d/%d loss %.4f tokens/s %s", done, train.steps, loss,
                             "-" if wall["tokens_per_s"] is None else f"{wall['tokens_per_s']:.0f}")
            if done % train.eval_every == 0 or done == train.steps:
                held = heldout_loss(engine, data.heldout, train.micro_batch_size)
                if held is not None:
                    new_rows.append({"kind": "eval", "step": done, "val_loss": rounded(held), "val_loss_by_source": {}})
                    if monitor:
                        log.info("sft step %d held-out instruction loss %.4f", done, held)
            rows += new_rows
            if rank == 0:
                for r in new_rows:
                    append_row(metrics_file, r)
            if done % train.checkpoint_every == 0 or done == train.steps:
                t_ckpt = time.perf_counter()
                _save(engine, store, layout, rank, done, rows, identity, spec_json, train.keep_checkpoints, guard)
                if monitor:
                    monitor.checkpoint_saved(done, time.perf_counter() - t_ckpt)
            if monitor and new_rows:
                monitor.resync()
            faults.checkpoint("sft.step_done")
            step = done
    finally:
        if monitor:
            monitor.close()
    t_trained = time.perf_counter()
    state = engine.consolidated_state_dict()
    if rank != 0:
        return {}
    with atomic_path(out_dir / "model.pt") as tmp:
        torch.save(state, tmp)
    write_json_atomic(out_dir / "config.json", {"model": cfg.to_dict(), "vocab_size": cfg.vocab_size,
                                               "seq_len": cfg.seq_len, "param_count": param_count(cfg),
                                               "flops_per_token": flops_per_token(cfg)})
    with atomic_path(out_dir / "tokenizer.json") as tmp:
        data.tokenizer.save(str(tmp))
    write_text_atomic(out_dir / "chat_template.jinja", jinja_template())
    write_json_atomic(out_dir / "ds_config.json", dsc)
    write_plots(out_dir, rows)
    evals = [r for r in rows if r["kind"] == "eval"]
    return {"rows": rows, "data": data.stats, "start_step": start, "resumed_from": tag,
            "heldout_loss_before": evals[0]["val_loss"] if evals and evals[0]["step"] == 0 else None,
            "heldout_loss_after": evals[-1]["val_loss"] if evals and evals[-1]["step"] > 0 else None,
            "incidents": len(guard.incidents), "rollbacks": guard.rollbacks,
            "telemetry": monitor.summary() if monitor else {},
            "timing": {"train_s": round(t_trained - t_ready, 3), "wall_s": round(time.perf_counter() - t_start, 3)}}


def sft_step(engine: Any, rows: Packed, plan: BatchPlan, batch: int, lr_scale: float,
             judge: Any | None) -> tuple[float, float | None, Any]:
    """One optimizer step on data batch `batch`: (per-token loss of the global batch, grad norm, decision)."""
    from tasks.train.engine import _as_float

    ds, L = engine.ds, engine.layout
    engine._set_lr_scale(lr_scale)
    micro = plan.micro_indexes(batch, L.dp_rank)
    count = float(rows.weights[plan.positions(batch)].sum())  # every rank's rows: the data says it, no all-reduce
    sums = []
    for k, idx in enumerate(micro):
        b = rows.batch(idx, ds.device)
        logits = ds(b["input_ids"], segment_ids=b["segment_ids"], position_ids=b["position_ids"])  # [m, T, V]
        loss_sum, _ = sft_loss_sums(logits, b["targets"], b["weights"])
        sums.append(loss_sum.detach())
        decision = None
        if judge is not None:  # one micro-batch per rank: judge before the backward
            decision = judge(_global(torch.stack(sums).sum(), L, engine) / max(count, 1.0))
            if not decision.apply_update:
                engine.scheduler.step()  # the update is skipped, not the schedule
                return _global(sums[0], L, engine) / max(count, 1.0), None, decision
            loss_sum = loss_sum * decision.factor
        ds.backward(step_loss(loss_sum, count, L.dp, plan.grad_accum))
        ds.step()
    loss = _global(torch.stack(sums).sum(), L, engine) / max(count, 1.0)
    return loss, _as_float(ds.get_global_grad_norm()), decision if judge is not None else None


def _global(x: torch.Tensor, layout: Any, engine: Any) -> float:
    """Sum over the data-parallel ranks (every rank gets the same value)."""
    if layout.dp > 1:
        x = x.clone().double()
        dist.all_reduce(x, group=engine.dp_group)
    return float(x)


@torch.no_grad()
def heldout_loss(engine: Any, rows: Packed, micro: int) -> float | None:
    """Per-token assistant loss over every held-out row (every rank evaluates all of them: identical values)."""
    n = len(rows.rows)
    if n == 0:
        return None
    ds = engine.ds
    ds.module.eval()
    total, count = 0.0, 0.0
    for lo in range(0, n, micro):
        b = rows.batch(np.arange(lo, min(lo + micro, n)), ds.device)
        logits = ds(b["input_ids"], segment_ids=b["segment_ids"], position_ids=b["position_ids"])
        s, c = sft_loss_sums(logits, b["targets"], b["weights"])
        total, count = total + float(s), count + float(c)
    ds.module.train()
    return total / count if count else None


__all__ = ["prepare", "run_sft", "heldout_loss", "read_jsonl"]
