"""Stage `evaluate`: held-out perplexity, generations for fixed prompts, and the spot-check sample for review.

Inputs: data/pretrain/ (`model.safetensors`, `config.json`), data/mix/ (`tokenizer.json`, `packing.json`, train
and val shards),
data/clean/ (kept `shards/*.parquet`, drop ledger `dropped.parquet`).
Outputs (data/evaluate/):
  perplexity.json     loss and perplexity overall and per source (tasks/eval/perplexity.py)
  generations.jsonl   every prompt's full continuation, with its seed, stop reason and automatic flags
  spotcheck.jsonl     the stratified sample a reviewer labels (tasks/eval/spotcheck.py)
  report.json         the numbers the review gate judges: perplexity and its unigram `baseline`
                      (tasks/eval/baseline.py), flagged shares, sample identity
All four are byte-identical on a rerun on CPU: fixed thread count, per-prompt seeded generators, hash-ranked
sampling, sorted-key JSON, floats rounded to 6 decimals. Generation is batched with a KV cache (see
tasks/eval/generate.py).
"""

from __future__ import annotations

import json
import logging
from collections import Counter
from typing import Any

from specs.evaluate import FLAGS, EvaluateSpec, SpotItem
from specs.results import StageResult
from specs.review import GateReport
from tasks.core.files import write_json_atomic, write_text_atomic
from tasks.core.runner import StagePaths
from tasks.data.mixing.tokenizer import load_tokenizer
from tasks.eval.baseline import unigram_perplexity
from tasks.eval.generate import load_model, run_generations, torch_threads
from tasks.eval.perplexity import perplexity
from tasks.eval.spotcheck import Flagger, build_sample, sample_sha256, sample_text
from tasks.train.checkpointing.weights import weight_files

log = logging.getLogger("forgeline.evaluate")
OUTPUTS = ("perplexity.json", "generations.jsonl", "spotcheck.jsonl", "report.json")


def run(spec: EvaluateSpec, paths: StagePaths) -> StageResult:
    pretrain, mix, clean = paths.input("pretrain"), paths.input("mix"), paths.input("clean")
    for needed in (pretrain / "config.json", mix / "tokenizer.json", mix / "packing.json"):
        if not needed.exists():
            raise FileNotFoundError(f"evaluate: {needed} not found (run the upstream stages first)")
    weight_files(pretrain)  # raises, naming the folder, when pretrain has not finished
    layout = json.loads((mix / "packing.json").read_text())
    eos_id = layout.get("eos_id")

    with torch_threads(spec.threads):
        model, cfg = load_model(pretrain, spec.device)
        if layout["vocab_size"] > cfg.vocab_size:
            raise ValueError(f"evaluate: the tokenizer has {layout['vocab_size']} ids but the model only "
                             f"{cfg.vocab_size}: pretrain is stale relative to mix")
        ppl = perplexity(model, mix, spec.batch_size, spec.perplexity_batches)
        log.info("evaluate: val loss %.4f, perplexity %.1f over %d sequences", ppl["overall"]["loss"],
                 ppl["overall"]["perplexity"], ppl["sequences"])
        gens = run_generations(model, load_tokenizer(mix / "tokenizer.json"), spec.prompts, spec.sampling,
                               paths.seed, eos_id)
    baseline = unigram_perplexity(mix)  # the review gate's yardstick: a model must beat token frequencies
    flagger = Flagger(spec.spotcheck.flags, paths.root)
    for g in gens:
        g["flags"], g["flag_detail"] = flagger(g["completion"], g["category"])
    items = build_sample(gens, clean, spec.spotcheck, paths.seed, flagger, paths.input("multimodal"))

    out = paths.out
    write_json_atomic(out / "perplexity.json", ppl)
    write_text_atomic(out / "generations.jsonl",
                      "".join(json.dumps(g, sort_keys=True, ensure_ascii=False) + "\n" for g in gens))
    write_text_atomic(out / "spotcheck.jsonl", sample_text(items))
    report = {**_report(spec, paths.seed, cfg.to_dict(), ppl, gens, items), "baseline": baseline}
    GateReport.model_validate(report)  # the review gate reads it back typed: a wrong shape fails here, by name
    write_json_atomic(out / "report.json", report)
    return StageResult(stage="evaluate", counts=_counts(report), summary=_summary(report, gens),
                       table=[{"source": s, **v} for s, v in ppl["by_source"].items()])


def _report(spec: EvaluateSpec, seed: int, model: dict[str, Any], ppl: dict[str, Any], gens: list[dict[str, Any]],
            items: list[SpotItem]) -> dict[str, Any]:
    n = len(gens)
    flagged = Counter(f for g in gens for f in g["flags"])
    item_flags = Counter(f for it in items for f in it.flags)
    return {
        "seed": seed,
        "model": {k: model[k] for k in ("vocab_size", "seq_len", "n_layers", "d_model")},
        "perplexity": ppl["overall"],
        "perplexity_by_source": ppl["by_source"],
        "generations": {
            "count": n,
            "flagged": {f: flagged.get(f, 0) for f in FLAGS},
            "flagged_fraction": {f: round(flagged.get(f, 0) / n, 6) if n else 0.0 for f in FLAGS},
            "stopped_at_eos": sum(g["stop"] == "eos" for g in gens),
            "new_tokens": sum(g["new_tokens"] for g in gens),
            "sampling": spec.sampling.model_dump(mode="json"),
        },
        "spotcheck": {
            "items": len(items),
            "sha256": sample_sha256(items),
            "by_kind": dict(sorted(Counter(it.kind for it in items).items())),
            "by_stratum": dict(sorted(Counter(it.stratum for it in items).items())),
            "flagged": {f: item_flags.get(f, 0) for f in FLAGS},
        },
    }


def _counts(report: dict[str, Any]) -> dict[str, Any]:
    return {
        "val_loss": report["perplexity"]["loss"], "val_perplexity": report["perplexity"]["perplexity"],
        "val_tokens": report["perplexity"]["tokens"],
        "perplexity_by_source": {s: v["perplexity"] for s, v in report["perplexity_by_source"].items()},
        "generations": report["generations"]["count"], "generations_flagged": report["generations"]["flagged"],
        "spotcheck_items": report["spotcheck"]["items"],
    }


def _one_line(text: str, width: int = 90) -> str:
    flat = " ".join(text.split())
    return flat if len(flat) <= width else flat[: width - 1] + "…"


def _summary(report: dict[str, Any], gens: list[dict[str, Any]]) -> str:
    p, g, s = report["perplexity"], report["generations"], report["spotcheck"]
    flagged = ", ".join(f"{k}: {v}" for k, v in g["flagged"].items() if v) or "none"
    lines = [f"**evaluate**: val loss {p['loss']:.4f}, perplexity {p['perplexity']:,.1f} over {p['tokens']:,} "
             f"tokens; {g['count']} generations (flagged: {flagged}); spot-check sample of {s['items']} items.", "",
             "| source | loss | perplexity | tokens |", "|---|---:|---:|---:|"]
    lines += [f"| {src} | {v['loss']:.4f} | {v['perplexity']:,.1f} | {v['tokens']:,} |"
              for src, v in report["perplexity_by_source"].items()]
    lines += ["", "| prompt | continuation | flags |", "|---|---|---|"]
    lines += [f"| {x['id']} | {_one_line(x['completion']).replace('|', '/')} | {', '.join(x['flags']) or '-'} |"
              for x in gens]
    return "\n".join(lines)
