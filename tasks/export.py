"""Stage `export`: the finished model as a Hugging Face `LlamaForCausalLM` folder, verified by reloading it.

The finished model is the preference-tuned one (data/prefer/, the same files as sft's) when the prefer stage trained
(`prefer.enabled`, the default), else SFT's. Inputs: data/sft/ (`model.safetensors` consolidated fp32 weights,
`config.json`, `tokenizer.json`, `chat_template.jinja`, `report.json`; from a checkpoint `hf_stated.json`). For the
model card's lineage it also reads every earlier stage's `data/<stage>/manifest.json` and `metrics/<stage>.json`,
`data/review{,_sft,_prefer}/decision.json` (mode off: "not reviewed") and sections of `params.yaml`: declared in the
stage registry (`lineage`, `quotes_params`, tasks/core/graph.py), so DVC re-runs export whenever the card would
change, not only when the model does.
Outputs (data/export/):
  hf/           config.json, generation_config.json, model.safetensors, tokenizer.json, tokenizer_config.json
                (with the chat template), special_tokens_map.json, README.md (card) — see tasks/train/hf/hf_export.py
  report.json   max logit difference, files + sha256, parameter count, lineage
Both byte-identical on rerun: the card has no timestamps, the verification runs on one thread and its max
difference is rounded to two significant digits.

Publish only what was verified: the folder is written as `hf-unverified/`, reloaded with transformers (logits
within `verify_tolerance` of forgeline's, and the chat template rendering and tokenizing a probe conversation
exactly like forgeline's SFT did), and only then renamed to `hf/`. On a failure the stage raises with the
difference and leaves `hf-unverified/` for inspection; `data/export/hf` never holds a model that failed its check.
"""

from __future__ import annotations

import json
import logging
from dataclasses import replace
from pathlib import Path
from typing import Any

from specs.export import ExportSpec
from specs.results import StageResult
from tasks.core import graph
from tasks.core.files import write_json_atomic
from tasks.core.runner import StagePaths
from tasks.data.mixing.tokenizer import load_tokenizer
from tasks.train.inputs.chat import DEFAULT_FORMAT, render, render_text
from tasks.train.inputs.chat_template import TemplateChat
from tasks.train.hf.hf_export import ExportMismatch, check_hf, export_hf, publish_folder
from tasks.train.hf.hf_generation import read_stated
from tasks.train.modeling.model import ModelConfig
from tasks.train.hf.peft_export import base_weights, check_adapter, write_adapter
from tasks.train.checkpointing.weights import ADAPTER_DIR, load_weights, weight_files
from tasks.eval.generate import torch_threads
from tasks.eval.finished import finished_model
from tasks.eval.export_card import PROBE, build_card, lineage_rows, read_params

log = logging.getLogger("forgeline.export")

HF_DIR = "hf"
STAGING_DIR = "hf-unverified"
REPORT = "report.json"
SFT_FILES = ("config.json", "tokenizer.json", "chat_template.jinja")  # + the weights (`weight_files`)
VERIFY_BATCH = 2
VERIFY_THREADS = 1  # matmul blocking depends on the thread count: fix it so the reported difference is stable


def run(spec: ExportSpec, paths: StagePaths) -> StageResult:
    sft, _ = finished_model(paths)  # prefer's folder when it trained: the same files as sft's
    for name in SFT_FILES:
        if not (sft / name).is_file():
            raise FileNotFoundError(f"export: {sft / name} not found (run the sft stage first)")
    weight_files(sft)  # raises, naming the folder, when sft has not finished
    cfg = ModelConfig.from_dict(json.loads((sft / "config.json").read_text())["model"])
    state = load_weights(sft)
    template = (sft / "chat_template.jinja").read_text(encoding="utf-8")
    chat = chat_facts(sft)
    specials = export_specials(spec, chat, sft / "tokenizer.json")
    params = read_params(paths.root / "params.yaml")
    lineage = lineage_rows(paths.root, graph.stage(paths.stage).lineage)

    out, staging = paths.out / HF_DIR, paths.out / STAGING_DIR
    card = build_card(spec, params, lineage, template, paths.root, paths.input("sft"), specials["eos_token"])
    exported = export_hf(state, context_of(cfg), sft / "tokenizer.json", staging, card=card,
                         chat_template=template, special_tokens=specials, stated=read_stated(sft))
    seq = min(spec.verify_seq, cfg.seq_len)
    try:
        with torch_threads(VERIFY_THREADS):
            diff = check_hf(staging, state, cfg, tol=spec.verify_tolerance, seq=seq, batch=VERIFY_BATCH)
        check_chat(staging, sft / "tokenizer.json", template if chat["template"] == "checkpoint" else None,
                   chat["special_tokens"])
    except ExportMismatch as exc:
        raise ExportMismatch(f"export: verification failed, nothing was published to {_rel(out, paths.root)}: "
                             f"{exc} (the unverified folder is kept at {_rel(staging, paths.root)})") from exc
    adapter = export_adapter(spec, paths, sft, state, cfg, card, template, specials, seq)  # None: full SFT
    publish_folder(staging, out)
    log.info("export: %s verified (max |Δlogit| %.2g) and published", out, diff)

    report = {
        "hf_dir": _rel(out, paths.root),
        "check": {"max_logit_diff": _round2(diff), "tolerance": spec.verify_tolerance, "seq": seq,
                  "batch": VERIFY_BATCH,
                  "chat_template": f"renders and tokenizes as SFT did ({chat['template']} template)"},
        "param_count": exported["param_count"],
        "special_tokens": exported["special_tokens"],
        "files": {f"{HF_DIR}/{name}": rec for name, rec in exported["files"].items()},
        "lineage": lineage,
        **({"adapter": adapter} if adapter else {}),
    }
    write_json_atomic(paths.out / REPORT, report)
    counts = {"param_count": exported["param_count"], "max_logit_diff": report["check"]["max_logit_diff"],
              "files": len(exported["files"]), "bytes": sum(r["bytes"] for r in exported["files"].values())}
    return StageResult(stage="export", counts=counts, summary=_summary(spec, report),
                       table=[{"file": name, **rec} for name, rec in report["files"].items()])


def export_adapter(spec: ExportSpec, paths: StagePaths, sft: Path, merged: dict, cfg: ModelConfig,
                   card: dict[str, Any], template: str, specials: Any, seq: int) -> dict[str, Any] | None:
    """A LoRA run: the adapter in PEFT's format (`adapter/`) and the base it applies to (`base/`, an HF folder),
    both published only after PEFT's base + adapter reproduced the merged model (`tasks/train/hf/peft_export.py`)."""
    lora_dir = sft / ADAPTER_DIR
    if not lora_dir.is_dir():
        return None
    lora, adapter = load_weights(lora_dir), json.loads((lora_dir / "adapter.json").read_text())
    base = base_weights(merged, lora, adapter["alpha"] / adapter["r"])
    staged = {name: paths.out / f"{name}-unverified" for name in ("base", "adapter")}
    base_card = {**card, "description": "The base model the LoRA adapter in `../adapter` was trained on."}
    export_hf(base, context_of(cfg), sft / "tokenizer.json", staged["base"], card=base_card, chat_template=template,
              special_tokens=specials, stated=read_stated(sft))
    write_adapter(staged["base"], lora, adapter, cfg, staged["adapter"])
    with torch_threads(VERIFY_THREADS):
        diff = check_adapter(staged["base"], staged["adapter"], paths.out / STAGING_DIR, tol=spec.verify_tolerance,
                             seq=seq, batch=VERIFY_BATCH)
    for name, folder in staged.items():
        publish_folder(folder, paths.out / name)
    return {"dir": "adapter", "base_dir": "base", "max_logit_diff": _round2(diff), "r": adapter["r"],
            "alpha": adapter["alpha"], "targets": adapter["targets"]}


# ------------------------------------------------------------------------------------------------ checks
def context_of(cfg: ModelConfig) -> ModelConfig:
    """`cfg` with the context the exported config states: an imported checkpoint's own max_position_embeddings
    (specs/init.py's rule: the shorter length trained at here is no statement about the model; before, a Llama
    finetuned at the default 256 tokens was exported as a 256-position model), else the length trained at."""
    return replace(cfg, seq_len=max(cfg.max_positions or 0, cfg.seq_len))


def export_specials(spec: ExportSpec, chat: dict[str, Any], tokenizer_json: Path) -> dict[str, str | None]:
    """The exported tokenizer's named special tokens: the template's (the checkpoint's own tokens, or none beside
    forgeline's), eos being the token that closes an assistant turn (so `generate()` stops after the reply) unless
    the user chose another with `export.eos_token`. A chosen token the tokenizer lacks is an error naming both
    (specs/init.py's rule; before, params.yaml's `<|end|>`, forgeline's own token, overrode a checkpoint's
    template and failed deep in the export)."""
    turn_end = chat["end_of_turn"] or (chat["special_tokens"].get("eos_token") if chat["template"] == "checkpoint"
                                       else DEFAULT_FORMAT.end)
    if spec.eos_token is not None and load_tokenizer(tokenizer_json).token_to_id(spec.eos_token) is None:
        which = "the checkpoint's" if chat["template"] == "checkpoint" else "forgeline's"
        raise ValueError(f"export.eos_token: {spec.eos_token!r} is not in the vocabulary of {tokenizer_json}; "
                         f"{which} chat template ends a turn with {turn_end!r} — set export.eos_token to null to "
                         "stop there, or name a token of this vocabulary")
    specials = dict(chat["special_tokens"]) if chat["template"] == "checkpoint" else {}
    return {**specials, "eos_token": spec.eos_token or turn_end}


def chat_facts(sft: Path) -> dict[str, Any]:
    """sft's chat.json: which template it trained with and the special tokens that go with it (an sft output
    from before chat.json existed used forgeline's template)."""
    path = sft / "chat.json"
    facts = json.loads(path.read_text()) if path.is_file() else {}
    return {"template": facts.get("template", "forgeline"), "special_tokens": facts.get("special_tokens") or {},
            "end_of_turn": facts.get("end_of_turn")}


def check_chat(hf_dir: Path, tokenizer_json: Path, checkpoint_template: str | None = None,
               specials: dict[str, str] | None = None) -> None:
    """The exported tokenizer's chat template must render PROBE as SFT rendered it — forgeline's `render_text`,
    or the checkpoint's own template — and tokenize it to the ids SFT trained on (with and without the
    generation prompt); raises ExportMismatch."""
    from transformers import AutoTokenizer

    hf_tok = AutoTokenizer.from_pretrained(hf_dir, local_files_only=True)
    raw = load_tokenizer(tokenizer_json)
    chat = TemplateChat(checkpoint_template, raw, dict(specials or {})) if checkpoint_template else None
    for gen in (False, True):
        text = hf_tok.apply_chat_template(PROBE, tokenize=False, add_generation_prompt=gen)
        want = chat.text(PROBE, add_generation_prompt=gen) if chat else render_text(PROBE, add_generation_prompt=gen)
        if text != want:
            raise ExportMismatch(f"{hf_dir}: the chat template renders {text!r}, SFT's format is {want!r}")
        ids = hf_tok(text, add_special_tokens=False)["input_ids"]
        want_ids = (chat.render(PROBE, add_generation_prompt=gen) if chat else
                    render(PROBE, raw, add_generation_prompt=gen))[0]
        if ids != want_ids:
            raise ExportMismatch(f"{hf_dir}: the HF tokenizer encodes the chat template's text to {ids}, "
                                 f"SFT trained on {want_ids}")


# ---------------------------------------------------------------------------------------------- summary
def _rel(path: Path, root: Path) -> str:
    try:
        return path.resolve().relative_to(root.resolve()).as_posix()
    except ValueError:
        return str(path)


def _round2(x: float) -> float:
    """Two significant digits: the last bits of a max difference are noise across CPUs and BLAS builds."""
    return float(f"{x:.2g}")


def _summary(spec: ExportSpec, report: dict[str, Any]) -> str:
    chk, hf = report["check"], report["hf_dir"]
    lines = [
        (f"**export**: `{hf}` — LlamaForCausalLM, {report['param_count']:,} parameters, `{spec.name}`, "
         f"license `{spec.license}`."),
        (f"- check passed: reloaded with transformers, max |Δlogit| {chk['max_logit_diff']:.2g} ≤ "
         f"{chk['tolerance']:g} on {chk['batch']}×{chk['seq']} seeded ids; the chat template renders and "
         "tokenizes a probe conversation exactly as SFT did."),
        f"- model card `{hf}/README.md` with the lineage of {len(report['lineage'])} upstream stage(s).",
        "", "```python", "from transformers import AutoModelForCausalLM, AutoTokenizer", "",
        f'model = AutoModelForCausalLM.from_pretrained("{hf}")',
        f'tok = AutoTokenizer.from_pretrained("{hf}")', "```",
    ]
    return "\n".join(lines)
