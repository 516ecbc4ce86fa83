"""What a training run writes about itself, deterministically: metric rows (metrics.jsonl), the loss-curve CSVs
for `dvc plots`, report.json, and the sanity-mode verdict. Values are rounded so reruns write the same bytes."""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import TYPE_CHECKING, Any

from specs.train import TrainLoopSpec
from tasks.core.files import write_text_atomic

if TYPE_CHECKING:  # types only: runlog itself imports nothing heavy
    from specs.architecture import ModelConfig
    from tasks.train.inputs.data import EvalData
    from tasks.train.loop.seam import StepEngine
    from tasks.train.loop.stability import StabilityGuard

ROUND = 6


def rounded(x: float | None) -> float | None:
    """Rounded for byte-stable rows; None for a missing or non-finite value (rows stay strict JSON)."""
    return None if x is None or not math.isfinite(x) else round(float(x), ROUND)


def eval_row(engine: StepEngine, evald: EvalData, done: int) -> dict[str, Any] | None:
    """The eval row of step `done`: the val loss overall and per source (None without eval batches)."""
    if not evald.batches:
        return None
    sums = engine.evaluate(evald).tolist()  # float64 sums as Python floats (the same values)
    S = len(evald.sources)
    by_source = {s: rounded(sums[k] / sums[S + k]) for k, s in enumerate(evald.sources) if sums[S + k] > 0}
    return {"kind": "eval", "step": done, "val_loss": rounded(sums[2 * S] / sums[2 * S + 1]),
            "val_loss_by_source": by_source, "val_tokens": int(sums[2 * S + 1])}


def check_overfit(rows: list[dict[str, Any]], train: TrainLoopSpec, stage: str = "pretrain") -> None:
    """Sanity mode: one batch, trained `steps` times, must be memorized, or the model/optimizer/data path is broken."""
    last = [r["loss"] for r in rows if r["kind"] == "train"][-1:]
    if not last or last[0] is None or last[0] > train.sanity_target_loss:
        raise ValueError(
            f"{stage}.sanity_overfit: the loss on one repeated batch is {last[0] if last else None} after "
            f"{train.steps} steps, above {stage}.sanity_target_loss = {train.sanity_target_loss}: the model cannot "
            "fit a single batch — check the learning rate, the data (labels shifted by one?) and the model.")


def write_plots(out_dir: Path, rows: list[dict[str, Any]]) -> None:
    """CSV loss curves for `dvc plots`: train loss per logged step; val loss overall and per source."""
    train = ["step,loss,lr,grad_norm"] + [f"{r['step']},{r['loss']},{r['lr']},{'' if r['grad_norm'] is None else r['grad_norm']}"
                                          for r in rows if r["kind"] == "train"]
    evals = [r for r in rows if r["kind"] == "eval"]
    sources = sorted({s for r in evals for s in r["val_loss_by_source"]})
    val = [",".join(["step", "val_loss", *sources])] + [
        ",".join([str(r["step"]), str(r["val_loss"]), *(str(r["val_loss_by_source"].get(s, "")) for s in sources)])
        for r in evals]
    write_text_atomic(out_dir / "plots" / "train_loss.csv", "\n".join(train) + "\n")
    write_text_atomic(out_dir / "plots" / "val_loss.csv", "\n".join(val) + "\n")


def jsonl(rows: list[dict[str, Any]]) -> str:
    return "".join(json.dumps(r, sort_keys=True) + "\n" for r in rows)


def append_row(path: Path, row: dict[str, Any]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "a", encoding="utf-8") as fh:
        fh.write(json.dumps(row, sort_keys=True) + "\n")


def build_report(rows: list[dict[str, Any]], cfg: ModelConfig, spec_json: dict[str, Any], steps: int, global_batch: int,
            tokens_per_step: int, sources: list[str], guard: StabilityGuard) -> dict[str, Any]:
    from specs.architecture import flops_per_token, param_count

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
        "stability": {"incidents": len(guard.incidents), "rollbacks": guard.rollbacks,
                      "skipped_batches": [list(r) for r in guard.skipped],
                      "actions": {a: sum(1 for i in guard.incidents if i["action"] == a)
                                  for a in sorted({i["action"] for i in guard.incidents})}},
        "spec": spec_json,
    }
