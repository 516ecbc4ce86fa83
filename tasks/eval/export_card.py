"""The export stage's model card contents (the `card` dict `render_card` turns into README.md): description and
license notes, the training data and their licenses, personal data kept, the lineage of upstream stages, review
decisions, benchmark scores, SFT and preference metrics, the chosen params. Split from tasks/export.py, which
builds the card with `build_card` and checks the exported chat template against the same `PROBE` conversation.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import yaml

from specs.export import ExportSpec
from specs.init import user_set
from tasks.core.files import sha256_file
from tasks.core import graph
from tasks.core.graph import DATA_DIR, METRICS_DIR
from tasks.core.runner import MANIFEST
from tasks.eval.preference_card import card_sections
from tasks.train.inputs.chat import render_jinja

PARAM_SECTIONS = ("model", "pretrain", "sft")
# A review decision's free text and time: the card's Review section shows them, a lineage cell would not hold them.
VERDICT_PROSE = ("notes", "time", "sample_sha256")
# Licenses of the embedded corpora (tasks/data/embedded.py, specs/instruct.py); user files: unknown to forgeline.
CORPUS_LICENSES = {
    ("ingest", "literature"): "public domain", ("ingest", "encyclopedia"): "CC BY-SA 4.0",
    ("ingest", "code"): "PSF-2.0", ("ingest", "docs"): "PSF-2.0",
    ("instruct", "chatterbot"): "BSD-3-Clause", ("instruct", "docstrings"): "PSF-2.0",
    ("instruct", "pydoc_topics"): "PSF-2.0",
}
UNKNOWN_LICENSE = "user-supplied (unknown)"
# A conversation exercising every role, turn separators, leading whitespace and the generation prompt.
PROBE = [
    {"role": "system", "content": "You answer briefly."},
    {"role": "user", "content": "What does the mill grind?"},
    {"role": "assistant", "content": " Grain, by the river.\n"},
    {"role": "user", "content": "  And then?"},
]


def read_params(path: Path) -> dict[str, Any]:
    """params.yaml as plain data ({} when absent). Raw, not re-validated: the runner validated it already."""
    if not path.is_file():
        return {}
    data = yaml.safe_load(path.read_text(encoding="utf-8"))
    return data if isinstance(data, dict) else {}


def _scalars(data: dict[str, Any], depth: int, prefix: str = "") -> dict[str, Any]:
    """Scalar values of `data` (nested dicts up to `depth` levels, keys dotted), sorted; lists are left out."""
    out: dict[str, Any] = {}
    for key in sorted(data, key=str):
        value = data[key]
        if isinstance(value, dict) and depth > 1:
            out.update(_scalars(value, depth - 1, f"{prefix}{key}."))
        elif value is None or isinstance(value, (str, int, float, bool)):
            out[f"{prefix}{key}"] = value
    return out


def _fmt(value: Any) -> str:
    return f"{value:.6g}" if isinstance(value, float) else str(value)


def _read_json(path: Path) -> dict[str, Any]:
    data = json.loads(path.read_text(encoding="utf-8")) if path.is_file() else {}
    return data if isinstance(data, dict) else {}


def lineage_rows(root: Path, stages: tuple[str, ...]) -> list[dict[str, Any]]:
    """One row per stage of `stages` (the reading stage's declared lineage, tasks/core/graph.py, so DVC re-runs it
    when any of these files changes) whose folder is present under data/: the record the pipeline carried on from it, its
    sha256 (None when the stage left none) and headline figures as `key=value` strings. A stage's record is its
    manifest and its headline its metrics' top-level scalars; a gate's are its verdict file (what the stages after
    it depend on: its manifest can change without the model changing, tasks/core/graph.py) and the verdict's short
    scalars."""
    rows = []
    for name in stages:
        if not (root / DATA_DIR / name).is_dir():
            continue
        verdict = graph.stage(name).verdict
        record = root / graph.stage(name).record
        figures = _read_json(record) if verdict else _read_json(root / METRICS_DIR / f"{name}.json")
        headline = {k: v for k, v in _scalars(figures, depth=1).items() if k not in VERDICT_PROSE}
        rows.append({"stage": name, "record": record.name,
                     "sha256": sha256_file(record) if record.is_file() else None,
                     "headline": [f"{k}={_fmt(v)}" for k, v in headline.items()]})
    return rows


def training_data(params: dict[str, Any]) -> list[dict[str, Any]]:
    """The declared sources of pretraining (`ingest`) and SFT (`instruct`) with their licenses."""
    rows = []
    for section, used_by in (("ingest", "pretrain"), ("instruct", "sft")):
        for src in (params.get(section) or {}).get("sources") or []:
            kind = src.get("kind", "embedded")
            embedded = kind == "embedded"
            rows.append({"used by": used_by, "source": src.get("name"), "kind": kind,
                         "data": src.get("corpus") if embedded else ", ".join(map(str, src.get("paths") or [])),
                         "license": CORPUS_LICENSES.get((section, src.get("corpus")), UNKNOWN_LICENSE)
                         if embedded else UNKNOWN_LICENSE})
    return rows


def license_note(license_id: str, data: list[dict[str, Any]]) -> str:
    """Why the card's license is what it is, given the licenses of the training data."""
    share_alike = sorted({f"{r['source']} ({r['license']})" for r in data if "BY-SA" in r["license"]})
    unknown = sorted({str(r["source"]) for r in data if r["license"] == UNKNOWN_LICENSE})
    if not data:
        parts = ["params.yaml lists no sources here: check the training data's licenses before publishing."]
    elif share_alike:
        parts = [f"The training data includes share-alike text: {', '.join(share_alike)}. Whether model weights "
                 "are an adaptation of their training text is legally unsettled; "
                 + (f"this card declares `{license_id}` to honour the share-alike terms conservatively."
                    if license_id.startswith("cc-by-sa") else
                    f"this card declares `{license_id}`: make sure that is compatible with the share-alike terms.")]
    else:
        parts = [f"No share-alike or non-commercial source is listed; this card declares `{license_id}`."]
    if unknown:
        parts.append(f"Sources supplied by the user ({', '.join(unknown)}) carry licenses forgeline does not "
                     "know: check them before publishing.")
    return " ".join(parts)


def card_description(spec: ExportSpec, params: dict[str, Any]) -> str:
    """`export.description`; its default describes a model pretrained here from scratch, so beside a checkpoint
    (and not set by the user) the card says what the model is instead."""
    init = ((params.get("model") or {}).get("init") or {})
    if init.get("kind") != "hf" or "description" in user_set(spec):
        return spec.description
    return (f"A chat model finetuned by forgeline from the checkpoint `{init.get('path')}`: continued pretraining on "
            "the run's corpus, then instruction tuning (SFT) with an assistant-only loss.")


def base_model_note(spec: ExportSpec, params: dict[str, Any]) -> str:
    """With `model.init.kind: hf`: the checkpoint's own license carries over, which export cannot read (the
    checkpoint folder is no dependency of this stage), so the card says so instead of letting its default
    license stand alone for someone else's weights (specs/init.py's rule)."""
    init = ((params.get("model") or {}).get("init") or {})
    if init.get("kind") != "hf":
        return ""
    chosen = "set in params" if "license" in user_set(spec) else "export.license's default"
    return (f" These weights continue the checkpoint `{init.get('path')}` (model.init.kind: hf): its own license and "
            f"use policy carry over and decide what may be published; `{spec.license}` here is {chosen}, so check "
            "it against the checkpoint's model card.")


def personal_data_note(params: dict[str, Any]) -> str | None:
    """What the card must say when the run let personal data through on purpose: PII scrubbing off, or a review
    gate told to accept kept documents flagged pii (`max_kept_pii_fraction` > 0); None otherwise."""
    parts = []
    pii = ((params.get("clean") or {}).get("pii") or {})
    if pii.get("enabled") is False:
        parts.append("PII scrubbing was off (`clean.pii.enabled: false`): the training text was not scrubbed "
                     "of e-mail addresses, phone numbers, IP addresses, card numbers or secrets.")
    for gate in ("review", "review_sft"):
        share = (params.get(gate) or {}).get("max_kept_pii_fraction")
        if isinstance(share, (int, float)) and share > 0:
            parts.append(f"The `{gate}` gate accepted up to {share:.0%} of its sampled training documents "
                         f"carrying personal data (`{gate}.max_kept_pii_fraction: {share:g}`, set by whoever ran "
                         "this; the default, 0, rejects any).")
    return " ".join(parts) or None


def review_rows(root: Path) -> list[dict[str, Any]]:
    """One row per review gate that decided: what it judged and how; mode off reads "not reviewed"."""
    rows = []
    for gate, judged in (("review", "pretrained model"), ("review_sft", "finetuned model"),
                         ("review_prefer", "preference-tuned model")):
        d = _read_json(root / DATA_DIR / gate / "decision.json")
        if not d:
            continue
        reviewed = d.get("reviewed", True) and d.get("mode") != "off"
        rows.append({"gate": gate, "judged": judged,
                     "decision": d.get("decision") if reviewed else "not reviewed",
                     "reviewer": d.get("reviewer"), "mode": d.get("mode"), "time": d.get("time") or "—"})
    return rows


def build_card(spec: ExportSpec, params: dict[str, Any], lineage: list[dict[str, Any]], template: str,
               root: Path, sft: Path, eos: str | None = None) -> dict[str, Any]:
    """The `card` dict for `render_card`: sections in the order they appear in README.md."""
    data = training_data(params)
    rendered = render_jinja(template, PROBE, add_generation_prompt=True)
    card: dict[str, Any] = {
        "name": spec.name, "license": spec.license, "description": card_description(spec, params),
        "chat_format": "The chat template is in `tokenizer_config.json` (`tokenizer.apply_chat_template`); "
                       f"generation ends at `{eos or 'the eos token'}`. A conversation with the "
                       "generation prompt renders as:\n\n```text\n" + rendered + "\n```",
        "training_data": data or "No sources are listed in params.yaml.",
        "license_notes": license_note(spec.license, data) + base_model_note(spec, params),
    }
    kept_pii = personal_data_note(params)
    if kept_pii:
        card["personal_data"] = kept_pii  # rendered as "## Personal data"
    card["lineage"] = lineage or "No upstream stage folders were found under data/."
    reviews = review_rows(root)
    if reviews:
        card["review"] = reviews
    bench = _read_json(root / DATA_DIR / "benchmark" / "scores.json").get("card") or {}
    if bench.get("rows"):  # the benchmark stage's before → after table, as it words it (tasks/benchmark.py)
        card["benchmarks"] = [dict(zip(bench["columns"], row)) for row in bench["rows"]]
        card["benchmark_notes"] = bench.get("note", "")
    sft_report = _scalars(_read_json(sft / "report.json"), depth=2)
    if sft_report:
        card["fine_tuning_metrics"] = sft_report  # rendered as "## Fine tuning metrics"
    card.update(card_sections(_read_json(root / DATA_DIR / "prefer" / "report.json")))  # none when off
    chosen = {s: params[s] for s in PARAM_SECTIONS if isinstance(params.get(s), dict)}
    if chosen:
        card["params"] = chosen
    return card
