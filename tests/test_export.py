"""Stage `export` on a fabricated data/sft/ (tiny model, random O(1) weights, a chat-extended tokenizer): the folder
loads with transformers and reproduces forgeline's logits, its chat template renders and tokenizes like SFT's,
the card carries the upstream manifests' hashes, reruns are byte-identical, and a model that does not reproduce
the verified weights (or a wrong chat template) fails the stage without publishing anything."""

from __future__ import annotations

import json
import re
import shutil
from pathlib import Path

import pytest
import torch
import yaml

from specs.export import ExportSpec
from specs.results import StageResult
from tasks import export
from tasks.eval.generate import torch_threads
from tasks.core.files import sha256_file
from tasks.core.runner import StagePaths
from tasks.data.mixing.tokenizer import load_tokenizer, save_tokenizer, train_tokenizer
from tasks.train.inputs.chat import ChatFormat, extend_tokenizer, jinja_template, render, render_text, vocab_size
from tasks.train.hf.hf_export import ExportMismatch
from specs.architecture import ModelConfig, param_count
from tasks.train.modeling.model import Transformer
from tasks.train.checkpointing.weights import load_weights, save_weights

TEXTS = ["The mill by the river grinds grain. What does the miller do?\n", "def add(a, b):\n    return a + b\n",
         "Hello there! How are you today? I am fine, thanks.", "Numbers 12345 and symbols <> {} [] ()."] * 20
CONVERSATION = [{"role": "system", "content": "Be terse."}, {"role": "user", "content": "Who grinds grain?"},
                {"role": "assistant", "content": "The miller.\n"}, {"role": "user", "content": " And the fox?"}]
MANIFESTED = ("ingest", "mix", "pretrain", "review", "sft")  # stage folders given a manifest.json
PARAMS = {
    "run": {"name": "t", "seed": 3},
    "ingest": {"sources": [{"name": "encyclopedia", "kind": "embedded", "corpus": "encyclopedia"},
                           {"name": "notes", "kind": "files", "paths": ["inputs/*.jsonl"]}]},
    "instruct": {"sources": [{"name": "chatterbot", "kind": "embedded", "corpus": "chatterbot"}]},
    "model": {"flavor": "tiny", "tie_embeddings": True},
    "pretrain": {"steps": 4, "optim": {"lr": 0.003, "betas": [0.9, 0.95]}},
    "sft": {"steps": 3},
}


def tiny_state(cfg: ModelConfig) -> dict[str, torch.Tensor]:
    """O(1) random weights (the init's std 0.02 gives logits too small for a 1e-4 check to mean much)."""
    gen = torch.Generator().manual_seed(0)
    state = {}
    for name, t in Transformer(cfg, seed=0).state_dict().items():
        r = torch.randn(t.shape, generator=gen)
        state[name] = 1 + 0.3 * r if t.ndim == 1 else r / (1.0 if name == "layers.0.weight" else t.shape[1] ** 0.5)
    return state


def make_project(root: Path, template: str | None = None) -> ModelConfig:
    """data/sft/ as the sft stage leaves it, plus upstream manifests, metrics, a review decision and params.yaml."""
    base = train_tokenizer(TEXTS, 400, 2, ["<|endoftext|>", "<|pad|>"] + [f"<|reserved_{i}|>" for i in range(6)])
    tok, _ = extend_tokenizer(base)
    cfg = ModelConfig(vocab_size=vocab_size(tok), seq_len=32, n_layers=2, n_heads=4, n_kv_heads=2, d_model=32,
                      ffn_hidden=64, tie_embeddings=True, rope_theta=10000.0, norm_eps=1e-5)
    sft = root / "data" / "sft"
    sft.mkdir(parents=True)
    save_tokenizer(tok, sft / "tokenizer.json")
    save_weights(sft, tiny_state(cfg))
    (sft / "config.json").write_text(json.dumps({"model": cfg.to_dict(), "vocab_size": cfg.vocab_size,
                                                 "seq_len": cfg.seq_len, "param_count": param_count(cfg),
                                                 "flops_per_token": 1}))
    (sft / "chat_template.jinja").write_text(jinja_template() if template is None else template)
    (sft / "report.json").write_text(json.dumps({"heldout_loss": 2.75, "by_source": {"chatterbot": 2.5},
                                                 "curve": [3.0, 2.9]}))
    for k, stage in enumerate(MANIFESTED):
        (root / "data" / stage).mkdir(parents=True, exist_ok=True)
        (root / "data" / stage / "manifest.json").write_text(json.dumps({"stage": stage, "n": k}))
    (root / "data" / "clean").mkdir()                       # a folder whose stage left no manifest
    (root / "data" / "review" / "decision.json").write_text(json.dumps(
        {"decision": "approve", "reviewer": "auto", "mode": "auto", "notes": "", "items": []}))
    (root / "data" / "review_sft").mkdir()                  # the second gate switched off: "not reviewed"
    (root / "data" / "review_sft" / "decision.json").write_text(json.dumps(
        {"decision": "approve", "reviewed": False, "reviewer": "nobody", "mode": "off", "notes": "", "items": []}))
    (root / "metrics").mkdir()
    (root / "metrics" / "pretrain.json").write_text(json.dumps({"val_loss": 5.25, "steps": 4, "by_source": {"a": 1}}))
    (root / "metrics" / "sft.json").write_text(json.dumps({"ok": True, "heldout_loss": 2.75}))
    (root / "params.yaml").write_text(yaml.safe_dump(PARAMS))
    return cfg


def run_export(root: Path, **spec) -> StageResult:
    with torch_threads(1):
        return export.run(ExportSpec(**spec), StagePaths(root=root, stage="export", seed=3))


def snapshot(folder: Path) -> dict[str, bytes]:
    return {p.relative_to(folder).as_posix(): p.read_bytes() for p in sorted(folder.rglob("*")) if p.is_file()}


@pytest.fixture(scope="module")
def exported(tmp_path_factory) -> tuple[Path, ModelConfig, StageResult]:
    root = tmp_path_factory.mktemp("project")
    cfg = make_project(root)
    result = run_export(root)
    return root, cfg, result


def test_folder_loads_with_transformers_and_reproduces_logits(exported):
    from transformers import AutoModelForCausalLM, AutoTokenizer

    root, cfg, result = exported
    hf_dir = root / "data" / "export" / "hf"
    assert not (root / "data" / "export" / export.STAGING_DIR).exists()  # published by rename
    model = AutoModelForCausalLM.from_pretrained(hf_dir, local_files_only=True, dtype=torch.float32)
    tok = AutoTokenizer.from_pretrained(hf_dir, local_files_only=True)
    ref = Transformer(cfg, seed=0)
    ref.load_state_dict(load_weights(root / "data" / "sft"))
    ids = torch.tensor([tok(render_text(CONVERSATION), add_special_tokens=False)["input_ids"][: cfg.seq_len]])
    with torch.no_grad():
        want = ref(ids)                                                              # [1, T, V]
        got = model(input_ids=ids).logits                                            # [1, T, V]
    assert want.abs().max() > 1.0                                   # real-sized logits, not ~0 everywhere
    assert (got - want).abs().max() < 1e-4

    report = json.loads((root / "data" / "export" / "report.json").read_text())
    assert 0 <= report["check"]["max_logit_diff"] <= 1e-4 and report["check"]["seq"] == cfg.seq_len  # capped
    assert report["param_count"] == param_count(cfg) == result.counts["param_count"]
    assert report["param_count"] == sum(p.numel() for p in model.parameters())  # what transformers loaded
    for name, rec in report["files"].items():
        assert sha256_file(root / "data" / "export" / name) == rec["sha256"]
    assert set(report["files"]) >= {"hf/model.safetensors", "hf/config.json", "hf/tokenizer_config.json",
                                    "hf/README.md"}
    # generation stops at the end of a turn, not at the pretraining document end
    assert tok.eos_token == "<|end|>" and model.generation_config.eos_token_id == tok.convert_tokens_to_ids("<|end|>")
    assert 'from_pretrained("data/export/hf")' in result.summary and result.ok


def test_chat_template_renders_like_forgeline(exported):
    from transformers import AutoTokenizer

    root, _, _ = exported
    tok = AutoTokenizer.from_pretrained(root / "data" / "export" / "hf", local_files_only=True)
    raw = load_tokenizer(root / "data" / "sft" / "tokenizer.json")
    config = json.loads((root / "data" / "export" / "hf" / "tokenizer_config.json").read_text())
    assert config["chat_template"] == (root / "data" / "sft" / "chat_template.jinja").read_text()
    for gen in (False, True):
        text = tok.apply_chat_template(CONVERSATION, tokenize=False, add_generation_prompt=gen)
        assert text == render_text(CONVERSATION, add_generation_prompt=gen)
        want_ids = render(CONVERSATION, raw, add_generation_prompt=gen)[0]
        assert tok(text, add_special_tokens=False)["input_ids"] == want_ids


def _card_section(card: str, title: str) -> list[str]:
    body = card.split(f"## {title}\n", 1)[1].split("\n## ", 1)[0]
    return [line for line in body.splitlines() if line.startswith("| ") and not line.startswith("| stage |")]


def test_card_lists_lineage_hashes_params_and_review(exported):
    root, _, _ = exported
    card = (root / "data" / "export" / "hf" / "README.md").read_text()
    rows = {cells[0]: cells for line in _card_section(card, "Lineage")
            if (cells := [c.strip() for c in line.strip("|").split(" | ")])}
    assert list(rows) == ["ingest", "clean", "mix", "pretrain", "review", "sft"]  # pipeline order, present only
    for stage in set(MANIFESTED) - {"review"}:
        assert rows[stage][1:3] == ["manifest.json", sha256_file(root / "data" / stage / "manifest.json")]
    assert rows["clean"][1:3] == ["manifest.json", "—"]                             # no manifest: shown as absent
    assert rows["pretrain"][3] == "steps=4, val_loss=5.25"                          # scalars only, sorted
    assert rows["sft"][3] == "heldout_loss=2.75, ok=True"
    # A gate's row is its verdict (what sft depends on), not its manifest, and the verdict's short fields.
    assert rows["review"][1:] == ["decision.json", sha256_file(root / "data" / "review" / "decision.json"),
                                  "decision=approve, mode=auto, reviewer=auto"]
    assert _card_section(card, "Review") == [
        "| gate | judged | decision | reviewer | mode | time |",
        "| review | pretrained model | approve | auto | auto | — |",
        "| review_sft | finetuned model | not reviewed | nobody | off | — |"]
    assert "| pretrain.optim.lr | 0.003 |" in card and "| sft.steps | 3 |" in card
    assert "| pretrain.optim.betas | 0.9, 0.95 |" in card
    assert "## Fine tuning metrics" in card and "| heldout_loss | 2.75 |" in card
    assert "| by_source.chatterbot | 2.5 |" in card and "curve" not in card              # lists left out
    # license: share-alike default, justified by the data, with the user's files flagged
    assert "license: cc-by-sa-4.0" in card
    assert "| pretrain | encyclopedia | embedded | encyclopedia | CC BY-SA 4.0 |" in card
    notes = card.split("## License notes\n", 1)[1].split("\n## ", 1)[0]
    assert "encyclopedia (CC BY-SA 4.0)" in notes and "(notes)" in notes
    assert render_text(export.PROBE, add_generation_prompt=True) in card            # the chat format example


def test_rerun_is_byte_identical(exported, tmp_path):
    root, _, _ = exported
    before = snapshot(root / "data" / "export")
    copy = tmp_path / "again"
    shutil.copytree(root, copy, ignore=shutil.ignore_patterns("export"))
    run_export(copy)
    assert snapshot(copy / "data" / "export") == before                             # fresh root, same bytes
    run_export(copy)                                                                # over an existing export
    assert snapshot(copy / "data" / "export") == before


def test_model_that_differs_from_the_verified_one_fails_the_stage(exported, tmp_path, monkeypatch):
    """Export a state with two attention weights swapped, verify against the real one: the stage must fail with
    the difference in its message and leave data/export/hf absent."""
    root, _, _ = exported
    shutil.copytree(root, tmp_path / "p", ignore=shutil.ignore_patterns("export"))
    real_export = export.export_hf

    def swapped(state, *args, **kwargs):
        bad = dict(state)
        bad["layers.1.attn.wq.weight"], bad["layers.2.attn.wq.weight"] = state["layers.2.attn.wq.weight"], \
            state["layers.1.attn.wq.weight"]
        return real_export(bad, *args, **kwargs)

    monkeypatch.setattr(export, "export_hf", swapped)
    with pytest.raises(ExportMismatch, match="nothing was published") as err:
        run_export(tmp_path / "p", verify_tolerance=1e-3)
    diff = float(re.search(r"differ from forgeline's by ([0-9.e+-]+)", str(err.value)).group(1))
    assert diff > 1e-3
    assert not (tmp_path / "p" / "data" / "export" / "hf").exists()
    assert (tmp_path / "p" / "data" / "export" / export.STAGING_DIR / "model.safetensors").is_file()
    assert not (tmp_path / "p" / "data" / "export" / "report.json").exists()


def test_chat_template_unlike_sft_format_fails(tmp_path):
    """A template for another format (no newline between turns) would serve the model a format it never saw."""
    make_project(tmp_path, template=jinja_template(ChatFormat(turn_sep="")))
    with pytest.raises(ExportMismatch, match="chat template renders"):
        run_export(tmp_path)
    assert not (tmp_path / "data" / "export" / "hf").exists()


def test_a_chosen_eos_wins_and_one_outside_the_vocabulary_names_both(tmp_path):
    """export.eos_token null (the default) stops at the template's turn end (test above: `<|end|>`); a token the
    user names overrides it, and one the tokenizer lacks is refused naming it and the turn end."""
    from transformers import AutoTokenizer

    make_project(tmp_path)
    run_export(tmp_path, eos_token="<|endoftext|>")  # stop at the pretraining document end instead
    tok = AutoTokenizer.from_pretrained(tmp_path / "data" / "export" / "hf", local_files_only=True)
    assert tok.eos_token == "<|endoftext|>" and tok.pad_token == "<|pad|>"
    with pytest.raises(ValueError, match=r"export.eos_token: '<\|im_end\|>' is not in the vocabulary .* "
                                         r"forgeline's chat template ends a turn with '<\|end\|>'"):
        run_export(tmp_path, eos_token="<|im_end|>")


def test_spec_bounds_and_missing_inputs(tmp_path):
    with pytest.raises(ValueError, match="verify_tolerance"):
        ExportSpec(verify_tolerance=0)
    with pytest.raises(ValueError, match="extra"):
        ExportSpec(tolerance=1e-4)
    with pytest.raises(FileNotFoundError, match="run the sft stage first"):
        run_export(tmp_path)
