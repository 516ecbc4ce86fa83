"""Stage `sft`: finetune the pretrained model on instruct's conversations (after the review gate approved it).

Inputs: data/review/decision.json (must say approve), data/pretrain/{model.safetensors, config.json},
data/mix/tokenizer.json,
data/instruct/{train,heldout}.jsonl. Ranks are launched like pretraining's (tasks/train/launch.py) and run the
one Trainer with the SFT objective (tasks/train/objectives/sft.py). Outputs (data/sft/): `model.safetensors`,
`config.json`, `tokenizer.json` (with the chat
role tokens), `chat_template.jinja`, `metrics.jsonl`, `incidents.jsonl`, `plots/*.csv`, `comparisons.jsonl`
(held-out prompts answered by the pretrained and the finetuned model, side by side), `spotcheck.jsonl` (the
finetuned answers, flagged, for the second review gate `review_sft`) and `report.json`. Checkpoints:
`checkpoints/sft/` (persist), so a killed or retried stage resumes exactly.
"""

from __future__ import annotations

import json
import logging
import math
from pathlib import Path
from typing import Any

import torch

from specs.evaluate import SpotcheckSpec
from specs.ranks import SFTRun, TrainResult
from specs.results import StageResult
from specs.review import GateReport
from specs.sft import SFTJob
from tasks.core.files import write_json_atomic, write_text_atomic
from tasks.core.runner import StagePaths
from tasks.eval.approval import require_approval
from tasks.eval.generate import generate_batch, prompt_seed, round_robin, torch_threads
from tasks.eval.spotcheck import Flagger, generation_items, sample_text
from tasks.train.inputs.chat import render
from specs.architecture import ModelConfig
from tasks.train.launch import environ_context, launch
from tasks.train.objectives import reference
from tasks.train.objectives.sft import SFTObjective, prepare_data, read_jsonl
from tasks.train.checkpointing.weights import load_weights, model_from_state, weight_files, weights_fingerprint

log = logging.getLogger("forgeline.sft")
CHECKPOINT_DIR = Path("checkpoints") / "sft"


def run(spec: SFTJob, paths: StagePaths) -> StageResult:
    pretrain, mix, instruct = paths.input("pretrain"), paths.input("mix"), paths.input("instruct")
    require_approval(paths.input("review") / "decision.json", "sft", "the pretrained model", "review")
    weight_files(pretrain)  # raises, naming the folder, when pretrain has not finished
    for needed in (mix / "tokenizer.json", instruct / "train.jsonl"):
        if not needed.exists():
            raise FileNotFoundError(f"sft: {needed} not found (run the upstream stages first)")
    paths.out.mkdir(parents=True, exist_ok=True)
    launch_dir = paths.run_record.parent / "sft-launch"
    job = SFTRun(spec=spec, mix_dir=str(mix.resolve()), out_dir=str(paths.out.resolve()),
                 ckpt_dir=str((paths.root / CHECKPOINT_DIR).resolve()), reports_dir=str(paths.reports.resolve()),
                 marker_dir=str((launch_dir / "markers").resolve()), seed=paths.seed, context=environ_context(),
                 objective_ref=reference(SFTObjective), pretrain_dir=str(pretrain.resolve()), instruct_dir=str(instruct.resolve()),
                 pretrain_fingerprint=weights_fingerprint(pretrain)[:16])
    result = launch(job, launch_dir, root=paths.root)
    out = result.outputs

    data = prepare_data(pretrain, mix, instruct, spec.train, paths.seed)  # tokenizer and starting weights, again
    comparisons = compare(spec, paths, data, instruct)
    write_text_atomic(paths.out / "comparisons.jsonl", _jsonl(comparisons))
    flagger = Flagger(spec.flags, paths.root)  # evaluate.spotcheck.flags: both gates judge alike
    gens = []
    for c in comparisons:
        flags, detail = flagger(c["finetuned"], c["source"])
        gens.append({"id": c["id"], "category": c["source"], "prompt": c["prompt"], "completion": c["finetuned"],
                     "flags": flags, "flag_detail": detail})
    items = generation_items(gens, SpotcheckSpec(per_stratum=spec.train.spotcheck_per_stratum), paths.seed)
    write_text_atomic(paths.out / "spotcheck.jsonl", sample_text(items))
    report = _report(spec, result, gens)
    GateReport.model_validate(report)  # review_sft reads it back typed: a wrong shape fails here, by name
    write_json_atomic(paths.out / "report.json", report)
    counts = {"steps": spec.train.steps, "heldout_loss_before": out["heldout_loss_before"],
              "heldout_loss_after": out["heldout_loss_after"], "train_rows": out["data"]["train"]["rows"],
              "train_loss_tokens": out["data"]["train"]["loss_tokens"], "incidents": result.incidents}
    table = [{"id": c["id"], "prompt": c["prompt"][:80], "pretrained": c["pretrained"][:120],
              "finetuned": c["finetuned"][:120]} for c in comparisons]
    return StageResult(stage="sft", counts=counts, summary=_summary(spec, result, comparisons), table=table)


def compare(spec: SFTJob, paths: StagePaths, data: Any, instruct: Path) -> list[dict[str, Any]]:
    """The first user turn of `compare_prompts` held-out conversations, taken round-robin over their sources (so
    every source reaches the comparison and the review sample), answered by both models (seeded)."""
    records = round_robin(read_jsonl(instruct / "heldout.jsonl"), spec.train.compare_prompts)
    tok = data.tokenizer
    chat = data.chat  # the checkpoint's template, or None: forgeline's markers
    end_id = chat.stop_ids() if chat is not None else tok.token_to_id("<|end|>")
    cfg = ModelConfig.from_dict({**data.cfg.to_dict(), "dropout": 0.0})
    rows, prompts = [], []
    for rec in records:
        msgs = rec["messages"]
        first = next(i for i, m in enumerate(msgs) if m["role"] == "user")
        prompt_msgs = msgs[: first + 1]
        ids, _ = (chat.render(prompt_msgs, add_generation_prompt=True) if chat is not None
                  else render(prompt_msgs, tok, add_generation_prompt=True))
        prompts.append(list(ids))
        rows.append({"id": rec["id"], "source": rec.get("source", "unknown"), "prompt": msgs[first]["content"],
                     "reference": next((m["content"] for m in msgs[first + 1:] if m["role"] == "assistant"), "")})
    with torch_threads(1), torch.no_grad():
        # One model at a time (built without a random init): the head process holds one model, not two.
        for name, weights in (("pretrained", data.init.whole_state), ("finetuned", lambda: load_weights(paths.out))):
            model = model_from_state(cfg, weights())
            gens = [torch.Generator().manual_seed(prompt_seed(paths.seed, rec["id"])) for rec in records]
            outs = generate_batch(model, prompts, spec.train.sampling, gens, end_id) if prompts else []  # one batch
            for row, (new, _stop) in zip(rows, outs):
                row[name] = tok.decode(new, skip_special_tokens=True)
            del model  # freed before the next one is built
    return rows


def _report(spec: SFTJob, result: TrainResult, gens: list[dict[str, Any]]) -> dict[str, Any]:
    out = result.outputs
    after = out["heldout_loss_after"]
    flagged = {f: (sum(f in g["flags"] for g in gens) / len(gens) if gens else 0.0)
               for f in ("toxic", "pii", "low_quality")}
    return {
        "steps": spec.train.steps, "data": out["data"], "heldout_loss_before": out["heldout_loss_before"],
        "heldout_loss_after": after,
        # The shape review_gate.auto_checks reads (as evaluate's report): the second gate uses the same policy.
        "perplexity": {"perplexity": None if after is None else round(math.exp(min(after, 50.0)), 4)},
        "generations": {"count": len(gens), "flagged_fraction": flagged},
        "incidents": result.incidents, "rollbacks": result.rollbacks, "spec": spec.model_dump(mode="json"),
    }


def _summary(spec: SFTJob, result: TrainResult, comparisons: list[dict[str, Any]]) -> str:
    d, out = result.outputs["data"]["train"], result.outputs
    t = result.timing.model_dump() if result.timing else {"train_s": None, "wall_s": None}
    lines = [f"**sft**: {spec.train.steps} steps on {d['rows']} packed rows ({d['loss_tokens']:,} assistant tokens "
             f"carry loss); dp={spec.parallel.dp}, ZeRO-{spec.parallel.zero_stage}, dropout "
             f"{result.outputs['data'].get('dropout', spec.train.dropout)}.",
             f"- held-out instruction loss {out['heldout_loss_before']} → {out['heldout_loss_after']}",
             f"- training {t['train_s']} s, rank-0 wall {t['wall_s']} s"]
    if result.resumed_from:
        lines.append(f"- resumed from checkpoint {result.resumed_from} (step {result.start_step})")
    if comparisons:
        lines += ["", "| prompt | pretrained | finetuned |", "|---|---|---|"]
        lines += [f"| {_cell(c['prompt'])} | {_cell(c['pretrained'])} | {_cell(c['finetuned'])} |"
                  for c in comparisons[:8]]
    return "\n".join(lines)


def _cell(text: str, width: int = 70) -> str:
    one = " ".join(text.split()).replace("|", "\\|")
    return one if len(one) <= width else one[: width - 1] + "…"


def _jsonl(rows: list[dict[str, Any]]) -> str:
    return "".join(json.dumps(r, sort_keys=True, ensure_ascii=False) + "\n" for r in rows)
