"""Stage `prefer`: preference-tune the SFT model (DPO, IPO or conservative DPO) on prefer_data's pairs.

Inputs: data/review_sft/decision.json (must approve), data/sft/ (starting weights, tokenizer, chat template),
data/prefer_data/{train,heldout}.jsonl, data/prefer_ref/logprobs.parquet (the reference's log-probs, computed
once). Ranks are launched like SFT's (tasks/train/launch.py) and run the one Trainer with the DPO objective
(tasks/train/objectives/dpo.py). Outputs (data/prefer/): `model.safetensors`, `config.json`, `tokenizer.json`,
`chat_template.jinja`, `chat.json` (export reads them as it reads sft's), `metrics.jsonl` (train rows with rewards,
margin and reward accuracy; held-out rows with every preference metric), `incidents.jsonl`, `plots/*.csv`,
`comparisons.jsonl` (held-out prompts answered by the SFT and the tuned model: the generation length ratio),
`spotcheck.jsonl` (for the gate `review_prefer`) and `report.json`. Checkpoints: `checkpoints/prefer/` (persist),
so a killed run resumes exactly. With `prefer.enabled: false` only report.json and an empty sample are written
(the gate passes it through, export takes SFT's model).
"""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import torch

from specs.evaluate import SpotcheckSpec
from specs.prefer import PreferJob
from specs.ranks import PreferRun, TrainResult
from specs.results import StageResult
from specs.review import GateReport
from tasks.core.files import write_json_atomic, write_text_atomic
from tasks.core.runner import StagePaths
from tasks.eval.approval import require_approval
from tasks.eval.generate import generate_batch, prompt_seed, round_robin, torch_threads
from tasks.eval.spotcheck import Flagger, generation_items, sample_text
from tasks.train.inputs.chat import render
from specs.architecture import ModelConfig
from tasks.train.launch import environ_context, launch
from tasks.train.inputs.pref_data import read_pairs, sft_chat
from tasks.train.objectives import reference
from tasks.train.objectives.dpo import DPOObjective
from tasks.train.checkpointing.weights import load_weights, model_from_state, weight_files, weights_fingerprint

CHECKPOINT_DIR = Path("checkpoints") / "prefer"
HEADLINE = ("accuracy", "accuracy_per_token", "reward_accuracy", "margin", "reward_chosen", "reward_rejected",
            "chosen_logp_per_token", "rejected_logp_per_token", "val_loss")


def run(spec: PreferJob, paths: StagePaths) -> StageResult:
    sft, data, ref = paths.input("sft"), paths.input("prefer_data"), paths.input("prefer_ref")
    paths.out.mkdir(parents=True, exist_ok=True)
    if not spec.train.enabled:
        write_text_atomic(paths.out / "spotcheck.jsonl", "")
        write_json_atomic(paths.out / "report.json", {"enabled": False})
        return StageResult(stage="prefer", counts={"enabled": False}, table=[{"enabled": False}],
                           summary="**prefer**: off (`prefer.enabled: false`); export takes the SFT model.")
    require_approval(paths.input("review_sft") / "decision.json", "prefer", "the SFT model", "review_sft")
    weight_files(sft)  # raises, naming the folder, when sft has not finished
    launch_dir = paths.run_record.parent / "prefer-launch"
    job = PreferRun(spec=spec, mix_dir=str(sft.resolve()), out_dir=str(paths.out.resolve()),
                    ckpt_dir=str((paths.root / CHECKPOINT_DIR).resolve()), reports_dir=str(paths.reports.resolve()),
                    marker_dir=str((launch_dir / "markers").resolve()), seed=paths.seed, context=environ_context(),
                    objective_ref=reference(DPOObjective), sft_dir=str(sft.resolve()), data_dir=str(data.resolve()), ref_dir=str(ref.resolve()),
                    sft_fingerprint=weights_fingerprint(sft)[:16])
    result = launch(job, launch_dir, root=paths.root)
    comparisons = compare(spec, paths, sft, data)
    write_text_atomic(paths.out / "comparisons.jsonl",
                      "".join(json.dumps(c, sort_keys=True, ensure_ascii=False) + "\n" for c in comparisons))
    flagger = Flagger(spec.flags, paths.root)  # evaluate.spotcheck.flags: every gate judges alike
    gens = [{"id": c["id"], "category": c["source"], "prompt": c["prompt"], "completion": c["tuned"],
             **dict(zip(("flags", "flag_detail"), flagger(c["tuned"], c["source"])))} for c in comparisons]
    items = generation_items(gens, SpotcheckSpec(per_stratum=spec.train.spotcheck_per_stratum), paths.seed)
    write_text_atomic(paths.out / "spotcheck.jsonl", sample_text(items))
    report = gate_report(spec, result, gens, comparisons)
    GateReport.model_validate(report)  # review_prefer reads it back typed: a wrong shape fails here, by name
    write_json_atomic(paths.out / "report.json", report)
    return StageResult(stage="prefer", counts=headline_counts(spec, result, report["preference"]),
                       summary=_summary(spec, result, report["preference"], comparisons),
                       table=[{"id": c["id"], "prompt": c["prompt"][:80], "sft": c["sft"][:120],
                               "tuned": c["tuned"][:120]} for c in comparisons]
                       or [{"accuracy_before": report["preference"]["accuracy_before"],
                            "accuracy_after": report["preference"]["accuracy_after"]}])


def compare(spec: PreferJob, paths: StagePaths, sft: Path, data: Path) -> list[dict[str, Any]]:
    """Held-out prompts (round-robin over sources) answered by the SFT and the tuned model, seeded per prompt;
    the lengths are in tokens (what the length ratio compares)."""
    pairs = round_robin(read_pairs(data / "heldout.jsonl"), spec.train.compare_prompts)
    tok, chat, _pad = sft_chat(sft)
    stops = chat.stop_ids() if chat is not None else tok.token_to_id("<|end|>")
    prompts = [list((chat.render(p["prompt"], add_generation_prompt=True) if chat is not None
                     else render(p["prompt"], tok, add_generation_prompt=True))[0]) for p in pairs]
    rows = [{"id": p["id"], "source": p["source"], "prompt": p["prompt"][-1]["content"], "chosen": p["chosen"]}
            for p in pairs]
    cfg = ModelConfig.from_dict({**json.loads((sft / "config.json").read_text())["model"], "dropout": 0.0})
    with torch_threads(1), torch.no_grad():
        for name, folder in (("sft", sft), ("tuned", paths.out)):  # one model at a time in this process
            model = model_from_state(cfg, load_weights(folder))
            gens = [torch.Generator().manual_seed(prompt_seed(paths.seed, r["id"])) for r in rows]
            outs = generate_batch(model, prompts, spec.train.sampling, gens, stops) if prompts else []
            for row, (new, _stop) in zip(rows, outs):
                row[name], row[f"{name}_tokens"] = tok.decode(new, skip_special_tokens=True), len(new)
            del model
    return rows


def gate_report(spec: PreferJob, result: TrainResult, gens: list[dict[str, Any]],
                comparisons: list[dict[str, Any]]) -> dict[str, Any]:
    """report.json: the shape the review gates read (perplexity against a baseline, generations) plus the
    preference block. Perplexity here is that of the held-out *chosen* answers, before (the SFT model: the
    baseline) and after tuning."""
    out, t = result.outputs, spec.train
    before, after = out["before"] or {}, out["after"] or {}
    ppl = lambda row: None if row.get("chosen_logp_per_token") is None else \
        round(math.exp(min(-row["chosen_logp_per_token"], 50.0)), 4)  # noqa: E731
    drop = None if not (before and after) else before["chosen_logp_per_token"] - after["chosen_logp_per_token"]
    n_before = sum(c["sft_tokens"] for c in comparisons)
    pref = {"before": before, "after": after,
            "accuracy_before": before.get("accuracy"), "accuracy_after": after.get("accuracy"),
            "chosen_logp_drop": None if drop is None else round(drop, 6),
            "collapse": drop is not None and drop > t.collapse_logprob_drop,
            "collapse_threshold": t.collapse_logprob_drop,
            "generation_length_ratio": round(sum(c["tuned_tokens"] for c in comparisons) / n_before, 4)
            if n_before else None,
            "start_loss": before.get("val_loss"), "loss": t.loss, "beta": t.beta,
            "label_smoothing": t.label_smoothing}
    flagged = {f: (sum(f in g["flags"] for g in gens) / len(gens) if gens else 0.0)
               for f in ("toxic", "pii", "low_quality")}
    return {"enabled": True, "steps": t.steps, "data": out["data"], "preference": pref,
            "perplexity": {"perplexity": ppl(after), "of": "held-out chosen answers"},
            "baseline": {"perplexity": ppl(before), "kind": "SFT model (held-out chosen answers)"},
            "generations": {"count": len(gens), "flagged_fraction": flagged},
            "incidents": result.incidents, "rollbacks": result.rollbacks, "spec": spec.model_dump(mode="json")}


def headline_counts(spec: PreferJob, result: TrainResult, pref: dict[str, Any]) -> dict[str, Any]:
    """metrics/prefer.json: the held-out metrics before (the SFT model) and after, and the flags."""
    before, after = pref["before"] or {}, pref["after"] or {}
    return {"steps": spec.train.steps, "loss": spec.train.loss, "beta": spec.train.beta,
            **{f"heldout_{k}_before": before.get(k) for k in HEADLINE},
            **{f"heldout_{k}_after": after.get(k) for k in HEADLINE},
            "chosen_logp_collapse": pref["collapse"], "generation_length_ratio": pref["generation_length_ratio"],
            "train_pairs": result.outputs["data"]["train"]["pairs"], "incidents": result.incidents}


def _summary(spec: PreferJob, result: TrainResult, pref: dict[str, Any], comparisons: list[dict[str, Any]]) -> str:
    t = result.timing.model_dump() if result.timing else {"train_s": None, "wall_s": None}
    b, a = pref["before"] or {}, pref["after"] or {}
    lines = [f"**prefer**: {spec.train.steps} steps of {spec.train.loss} (β {spec.train.beta}) on "
             f"{result.outputs['data']['train']['pairs']} pairs; dp={spec.parallel.dp}, "
             f"ZeRO-{spec.parallel.zero_stage}.",
             f"- held-out preference accuracy {b.get('accuracy')} → {a.get('accuracy')} (reward accuracy "
             f"{a.get('reward_accuracy')}, margin {a.get('margin')})",
             f"- held-out chosen log-prob/token {b.get('chosen_logp_per_token')} → {a.get('chosen_logp_per_token')}"
             + (" — **collapse flagged**" if pref["collapse"] else ""),
             f"- generation length after/before {pref['generation_length_ratio']}",
             f"- training {t['train_s']} s, rank-0 wall {t['wall_s']} s"]
    if result.resumed_from:
        lines.append(f"- resumed from checkpoint {result.resumed_from} (step {result.start_step})")
    if comparisons:
        lines += ["", "| prompt | SFT | tuned |", "|---|---|---|"]
        lines += [f"| {_cell(c['prompt'])} | {_cell(c['sft'])} | {_cell(c['tuned'])} |" for c in comparisons[:8]]
    return "\n".join(lines)


def _cell(text: str, width: int = 70) -> str:
    one = " ".join(text.split()).replace("|", "\\|")
    return one if len(one) <= width else one[: width - 1] + "…"
