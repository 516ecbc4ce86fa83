"""Stage `pretrain`: mix's packed token shards -> a pretrained Llama-style decoder, trained with DeepSpeed
(data × tensor × pipeline parallel, ZeRO 0–3), resumable from checkpoints.

Inputs: data/mix/ (packing.json: seq_len, vocab; train/val shards and index; tokenizer.json). Outputs
(data/pretrain/): `model.safetensors` (consolidated fp32 weights of the plain pp = 1, tp = 1 model, merged from per-
rank shards; past 2 GiB Hugging Face's `model-NNNNN-of-NNNNN.safetensors` + index; read with
`tasks.train.checkpointing.weights.load_weights` into `tasks.train.modeling.model.Transformer(ModelConfig.from_dict(config["model"]),
seed)`), `config.json`, `ds_config.json`, `metrics.jsonl`, `report.json` — all byte-identical on an identical rerun
(wall-clock facts are in the StageResult summary, the log, wandb and reports/pretrain/telemetry.jsonl only), plus
`incidents.jsonl` (stability guard) and `plots/*.csv` (loss curves for `dvc plots show`).
Checkpoints: `checkpoints/pretrain/` (not inside data/pretrain, which DVC deletes before a rerun; declared a
`persist: true` out). A rerun resumes from the newest intact checkpoint and ends exactly where an
uninterrupted run ends; see tasks/train/checkpointing/checkpoint.py and tasks/train/loop/trainer.py.
"""

from __future__ import annotations

import logging
from pathlib import Path

from specs.pretrain import PretrainJob
from specs.results import StageResult
from tasks.core.runner import StagePaths
from specs.ranks import PretrainRun, TrainResult
from tasks.train.launch import environ_context, launch
from tasks.train.objectives import reference
from tasks.train.objectives.pretrain import PretrainObjective

log = logging.getLogger("forgeline.pretrain")
CHECKPOINT_DIR = Path("checkpoints") / "pretrain"


def checkpoint_dir(root: Path) -> Path:
    return root / CHECKPOINT_DIR


def make_job(spec: PretrainJob, paths: StagePaths) -> PretrainRun:
    launch_dir = paths.run_record.parent / "pretrain-launch"
    init = spec.model.init
    if init.kind == "hf" and not Path(init.path).is_absolute():  # ranks may run elsewhere: an absolute path
        init = init.model_copy(update={"path": str((paths.root / init.path).resolve())})
        spec = spec.model_copy(update={"model": spec.model.model_copy(update={"init": init})})
    return PretrainRun(spec=spec, mix_dir=str(paths.input("mix").resolve()), out_dir=str(paths.out.resolve()),
                       ckpt_dir=str(checkpoint_dir(paths.root).resolve()), reports_dir=str(paths.reports.resolve()),
                       marker_dir=str((launch_dir / "markers").resolve()), seed=paths.seed,
                       objective_ref=reference(PretrainObjective), context=environ_context())


def run(spec: PretrainJob, paths: StagePaths) -> StageResult:
    mix = paths.input("mix")
    if not (mix / "packing.json").exists():
        raise FileNotFoundError(f"pretrain: {mix}/packing.json not found (run the mix stage first)")
    paths.out.mkdir(parents=True, exist_ok=True)
    job = make_job(spec, paths)
    result = launch(job, paths.run_record.parent / "pretrain-launch", root=paths.root)
    report = result.outputs["report"]
    counts = {"steps": report["steps"], "tokens": report["tokens"], "final_train_loss": report["final_train_loss"],
              "val_loss": report["val_loss"], "val_loss_by_source": report["val_loss_by_source"],
              "param_count": report["param_count"]}
    return StageResult(stage="pretrain", counts=counts, summary=_summary(spec, result),
                       table=[{"source": s, "val_loss": v} for s, v in report["val_loss_by_source"].items()])


def _summary(spec: PretrainJob, result: TrainResult) -> str:
    rep, p = result.outputs["report"], spec.parallel
    t = result.timing.model_dump() if result.timing else {}
    lines = [
        f"**pretrain**: {rep['steps']} steps, {rep['tokens']:,} tokens, {rep['param_count']:,} parameters "
        f"({spec.model.flavor}); layout dp={p.dp} × tp={p.tp} × pp={p.pp}, ZeRO-{p.zero_stage}, "
        f"{spec.train.precision}, launcher {p.launcher}.",
        f"- train loss {rep['first_train_loss']} → {rep['final_train_loss']}; val loss {rep['val_loss']}",
    ]
    if result.resumed_from:
        lines.append(f"- resumed from checkpoint {result.resumed_from} (step {result.start_step})")
    if t.get("tokens_per_s"):
        lines.append(f"- {t['tokens_per_s']:,.0f} tokens/s, {t['s_per_step']} s/step; start-up {t['startup_s']} s, "
                     f"training {t['train_s']} s, rank-0 wall {t['wall_s']} s")
    tel = result.telemetry
    if tel:
        mfu = tel["mfu"] if isinstance(tel["mfu"], str) else f"{tel['mfu']:.1%}"
        lines.append(f"- MFU {mfu} ({tel['mfu_peak']})")
        if tel.get("checkpoint_saves"):
            lines.append(f"- checkpoints: {tel['checkpoint_saves']} synchronous saves, training stalled "
                         f"{tel['checkpoint_stall_s']} s per save")
        lines += [f"- ⚠ {alert}" for alert in tel.get("throttle_alerts", [])]
    stab = rep.get("stability", {})
    if stab.get("incidents"):
        lines.append(f"- stability: {stab['incidents']} incident(s) {stab['actions']}, {stab['rollbacks']} "
                     f"rollback(s), skipped batches {stab['skipped_batches']} (see incidents.jsonl)")
    if rep["val_loss_by_source"]:
        lines += ["", "| source | val loss |", "|---|---:|"]
        lines += [f"| {s} | {v} |" for s, v in rep["val_loss_by_source"].items()]
    return "\n".join(lines)
