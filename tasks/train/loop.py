"""One rank of a pretraining run: set up, resume, train, evaluate, checkpoint, consolidate, report.

`run_rank(job)` is what every launcher ends in (in-process, `torch.multiprocessing.spawn`, the DeepSpeed
launcher, torchrun). It reads RANK / LOCAL_RANK / WORLD_SIZE / MASTER_* from the environment.

Per step (0-based `step`, `done = step + 1` steps finished): one optimizer step on the step's global batch;
every `log_every` (and the last) a metrics row and a log line; every `eval_every` (and the last) the val loss,
overall and per source; every `checkpoint_every` (and the last) a checkpoint; then the fault point
`pretrain.step_done`. metrics.jsonl rows hold only deterministic values (step, loss, lr, grad norm, tokens,
val losses: rounded to 6 decimals), so an identical rerun or a killed-and-resumed run writes the same bytes;
wall-clock throughput goes to the log, `reports/pretrain/throughput.jsonl` and the StageResult summary.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import torch
import torch.distributed as dist

from tasks.core import faults
from tasks.core.files import atomic_path, write_json_atomic, write_text_atomic
from tasks.train.checkpoint import CheckpointStore, identity_problems, tag_name
from tasks.train.dsconfig import ds_config, lr_at

log = logging.getLogger("forgeline.pretrain")
ROUND = 6


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

    def to_json(self) -> str:
        return json.dumps(asdict(self), sort_keys=True)

    @classmethod
    def from_json(cls, text: str) -> "Job":
        return cls(**json.loads(text))

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


def _r(x: float | None) -> float | None:
    return None if x is None else round(float(x), ROUND)


def run_rank(job: Job) -> dict[str, Any]:
    """Train on this rank; returns (and writes to this rank's marker) a result dict."""
    t_start = time.perf_counter()
    rank = int(os.environ.get("RANK", "0"))
    marker = marker_path(job.marker_dir, rank)
    try:
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
    evald = EvalData(mix_dir, train.micro_batch_size, train.eval_batches)
    if tag is not None:
        engine.load(str(ckpt_dir), tag)
        rng = ckpt_dir / tag / f"rng-rank{rank:05d}.pt"
        if rng.exists():
            _set_rng(torch.load(rng, weights_only=True))
        if rank == 0:
            log.info("resumed from %s at step %d", tag, start)
    metrics_file = out_dir / "metrics.jsonl"
    if rank == 0:
        write_text_atomic(metrics_file, _jsonl(rows))
        write_text_atomic(Path(job.reports_dir) / "throughput.jsonl", "")  # this launch's wall-clock rows only

    tokens_per_step = data.plan.global_batch * cfg.seq_len
    G = data.plan.global_batch
    t_ready = time.perf_counter()
    losses: list[float] = []
    last_t, last_step, step_times = t_ready, start, []
    for step in range(start, train.steps):
        t0 = time.perf_counter()
        loss, gnorm = engine.train_step(step, data)
        step_times.append(time.perf_counter() - t0)
        losses.append(loss)
        done = step + 1
        new_rows = []
        if done % train.log_every == 0 or done == train.steps:
            row = {"kind": "train", "step": done, "loss": _r(loss), "lr": _r(lr_at(step, train.optim, train.steps)),
                   "grad_norm": _r(gnorm), "tokens": done * tokens_per_step}
            new_rows.append(row)
            if rank == 0:
                now = time.perf_counter()
                tps = (done - last_step) * tokens_per_step / max(now - last_t, 1e-9)
                log.info("step %d/%d loss %.4f lr %.3g grad_norm %s tokens/s %.0f", done, train.steps, loss,
                         row["lr"], "-" if gnorm is None else f"{gnorm:.3f}", tps)
                _append(Path(job.reports_dir) / "throughput.jsonl",
                        {"step": done, "tokens_per_s": round(tps, 1),
                         "s_per_step": round((now - last_t) / max(done - last_step, 1), 4)})
                last_t, last_step = now, done
        if done % train.eval_every == 0 or done == train.steps:
            ev = _eval_row(engine, evald, done)
            if ev:
                new_rows.append(ev)
                if rank == 0:
                    log.info("step %d val loss %.4f %s", done, ev["val_loss"],
                             " ".join(f"{s}={v:.3f}" for s, v in ev["val_loss_by_source"].items()))
        rows += new_rows
        if rank == 0:
            for r in new_rows:
                _append(metrics_file, r)
        if done % train.checkpoint_every == 0 or done == train.steps:
            _save(engine, store, layout, rank, done, rows, identity, spec_json, train.keep_checkpoints)
        faults.checkpoint("pretrain.step_done")
    t_trained = time.perf_counter()

    state = engine.consolidated_state_dict()
    result: dict[str, Any] = {}
    if rank == 0:
        with atomic_path(out_dir / "model.pt") as tmp:
            torch.save(state, tmp)
        write_json_atomic(out_dir / "config.json", {"model": cfg.to_dict(), "vocab_size": cfg.vocab_size,
                                                   "seq_len": cfg.seq_len, "param_count": param_count(cfg),
                                                   "flops_per_token": flops_per_token(cfg)})
        write_json_atomic(out_dir / "ds_config.json", dsc)
        report = _report(rows, cfg, spec_json, train.steps, G, tokens_per_step, evald.sources)
        write_json_atomic(out_dir / "report.json", report)
        trained = train.steps - start
        result = {"report": report, "start_step": start, "resumed_from": tag, "losses": losses,
                  "timing": {"startup_s": round(t_ready - t_start, 3), "train_s": round(t_trained - t_ready, 3),
                             "s_per_step": round(sum(step_times) / len(step_times), 4) if step_times else None,
                             "tokens_per_s": round(trained * tokens_per_step / max(t_trained - t_ready, 1e-9), 1)
                             if trained else None,
                             "wall_s": round(time.perf_counter() - t_start, 3)}}
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


def _eval_row(engine: Any, evald: Any, done: int) -> dict[str, Any] | None:
    if not evald.batches:
        return None
    sums = engine.evaluate(evald)
    S = len(evald.sources)
    by_source = {s: _r(sums[k] / sums[S + k]) for k, s in enumerate(evald.sources) if sums[S + k] > 0}
    return {"kind": "eval", "step": done, "val_loss": _r(sums[2 * S] / sums[2 * S + 1]),
            "val_loss_by_source": by_source, "val_tokens": int(sums[2 * S + 1])}


def _save(engine: Any, store: CheckpointStore, layout: Any, rank: int, step: int, rows: list[dict[str, Any]],
          identity: dict[str, Any], spec_json: dict[str, Any], keep: int) -> None:
    tag = tag_name(step)
    if rank == 0:
        store.prepare(tag)
    _barrier(layout)
    engine.save(str(store.folder), tag, {"step": step})
    with atomic_path(store.folder / tag / f"rng-rank{rank:05d}.pt") as tmp:
        torch.save(_get_rng(), tmp)
    _barrier(layout)
    if rank == 0:
        write_text_atomic(store.folder / tag / "metrics.jsonl", _jsonl(rows))
        store.write_manifest(tag, step, identity, spec_json)
        store.publish(tag)
        removed = store.prune(keep, protect=tag)
        log.info("checkpoint %s saved%s", tag, f" (removed {', '.join(removed)})" if removed else "")
    _barrier(layout)


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


def _jsonl(rows: list[dict[str, Any]]) -> str:
    return "".join(json.dumps(r, sort_keys=True) + "\n" for r in rows)


def _append(path: Path, row: dict[str, Any]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "a", encoding="utf-8") as fh:
        fh.write(json.dumps(row, sort_keys=True) + "\n")


def _report(rows: list[dict[str, Any]], cfg: Any, spec_json: dict[str, Any], steps: int, global_batch: int,
            tokens_per_step: int, sources: list[str]) -> dict[str, Any]:
    from tasks.train.model import flops_per_token, param_count

    train_rows = [r for r in rows if r["kind"] == "train"]
    eval_rows = [r for r in rows if r["kind"] == "eval"]
    last_eval = eval_rows[-1] if eval_rows else {}
    return {
        "steps": steps, "global_batch_sequences": global_batch, "tokens_per_step": tokens_per_step,
        "tokens": steps * tokens_per_step,
        "final_train_loss": train_rows[-1]["loss"] if train_rows else None,
        "first_train_loss": train_rows[0]["loss"] if train_rows else None,
        "val_loss": last_eval.get("val_loss"), "val_loss_by_source": last_eval.get("val_loss_by_source", {}),
        "val_tokens": last_eval.get("val_tokens", 0), "val_sources": sources,
        "model": cfg.to_dict(), "param_count": param_count(cfg), "flops_per_token": flops_per_token(cfg),
        "spec": spec_json,
    }


__all__ = ["Job", "run_rank", "marker_path", "data_facts"]
