"""Hugging Face export (tasks/train/hf/hf_export.py): transformers' Llama reproduces forgeline's logits (tied and
untied head, GQA and MHA), the q/k layout needs no permutation, the tokenizer reloads through AutoTokenizer
with identical ids, exports are byte-identical, and the card carries the lineage it was given."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

from tasks.train.hf.hf_export import (ExportMismatch, check_hf, export_hf, key_map, hf_config, to_hf_state_dict,
                                   verify_hf)
from specs.architecture import ModelConfig, param_count
from tasks.train.modeling.model import Transformer
from tests.helpers.export import make_tokenizer_json, trained_like_state

TEMPLATE = "{% for m in messages %}<|{{ m['role'] }}|>{{ m['content'] }}<|endoftext|>{% endfor %}"
CARD = {
    "name": "forgeline-tiny",
    "description": "A test export.",
    "lineage": {"mix": {"manifest_sha256": "ab" * 32}, "sft": {"manifest_sha256": "cd" * 32}},
    "params": {"lr": 0.0003, "steps": 40, "note": "a|b"},
    "metrics": [{"source": "docs", "ppl": 12.5}, {"source": "code", "ppl": 7.25}],
}


@pytest.fixture(scope="module")
def tokenizer_json(tmp_path_factory) -> Path:
    return make_tokenizer_json(tmp_path_factory.mktemp("tok") / "tokenizer.json")


def tiny_cfg(tie: bool, n_kv_heads: int, vocab_size: int = 320) -> ModelConfig:
    return ModelConfig(vocab_size=vocab_size, seq_len=32, n_layers=2, n_heads=4, n_kv_heads=n_kv_heads, d_model=32,
                       ffn_hidden=64, tie_embeddings=tie, rope_theta=500.0, norm_eps=1e-6)


@pytest.mark.parametrize("tie,n_kv_heads", [(True, 2), (False, 4), (True, 1)],
                         ids=["tied-gqa", "untied-mha", "tied-mqa"])
def test_logits_match_transformers(tmp_path, tokenizer_json, tie, n_kv_heads):
    from safetensors.torch import load_file
    from transformers import AutoModelForCausalLM

    cfg = tiny_cfg(tie, n_kv_heads)
    state = trained_like_state(cfg)
    out = tmp_path / "hf"
    summary = export_hf(state, cfg, tokenizer_json, out, card=CARD)
    ref_logits = Transformer(cfg, 0)
    ref_logits.load_state_dict(state)
    assert ref_logits(torch.arange(8)[None]).abs().max() > 1.0  # the comparison below is on real-sized logits

    diff = check_hf(out, state, cfg, seq=cfg.seq_len, batch=3, seed=5)
    assert diff < 1e-4
    weights = load_file(out / "model.safetensors")
    assert ("lm_head.weight" in weights) == (not tie)
    hf = AutoModelForCausalLM.from_pretrained(out, local_files_only=True, dtype=torch.float32)
    tied = hf.lm_head.weight.data_ptr() == hf.model.embed_tokens.weight.data_ptr()
    assert tied == tie
    # what transformers loads has the parameters the summary counts (a tied head once)
    assert sum(p.numel() for p in hf.parameters()) == summary["param_count"] == param_count(cfg)
    assert hf.config.num_key_value_heads == n_kv_heads and hf.config.max_position_embeddings == cfg.seq_len
    # sdpa attention reads the same weights; it must agree as well.
    assert verify_hf(out, state, cfg, attn_implementation="sdpa") < 1e-4


def test_qk_need_no_permutation(tmp_path, tokenizer_json):
    """Counterfactual: applying Meta→HF's interleaved-to-halves permutation to q/k breaks the match, so
    forgeline's rotate-half layout maps to HF as is (and check_hf catches a wrong layout)."""
    from safetensors.torch import load_file, save_file

    cfg = tiny_cfg(True, 2)
    state = trained_like_state(cfg, seed=1)
    out = tmp_path / "hf"
    export_hf(state, cfg, tokenizer_json, out, card=CARD)
    weights = load_file(out / "model.safetensors")
    hd = cfg.head_dim

    def permute(w: torch.Tensor) -> torch.Tensor:               # [h·hd, d]: pairs (2i, 2i+1) -> halves
        h = w.shape[0] // hd
        return w.view(h, hd // 2, 2, w.shape[1]).transpose(1, 2).reshape(w.shape)

    for name in list(weights):
        if name.endswith(("q_proj.weight", "k_proj.weight")):
            weights[name] = permute(weights[name]).contiguous()
    save_file(weights, str(out / "model.safetensors"), metadata={"format": "pt"})
    assert verify_hf(out, state, cfg) > 1e-2
    with pytest.raises(ExportMismatch, match="differ"):
        check_hf(out, state, cfg)


def test_tokenizer_roundtrip_through_autotokenizer(tmp_path, tokenizer_json):
    from tokenizers import Tokenizer
    from transformers import AutoTokenizer

    cfg = tiny_cfg(False, 2)
    out = tmp_path / "hf"
    summary = export_hf(trained_like_state(cfg), cfg, tokenizer_json, out, card=CARD, chat_template=TEMPLATE,
                        special_tokens={"bos_token": "<|user|>"})
    raw = Tokenizer.from_file(str(tokenizer_json))
    hf_tok = AutoTokenizer.from_pretrained(out, local_files_only=True)
    text = "The mill <|endoftext|> grinds\n\n  ÜNÏ — 🙂 unseen words zqxj"
    ids = hf_tok(text, add_special_tokens=False)["input_ids"]
    assert ids == raw.encode(text, add_special_tokens=False).ids
    assert hf_tok.decode(ids) == text
    assert (hf_tok.eos_token, hf_tok.pad_token, hf_tok.bos_token) == ("<|endoftext|>", "<|pad|>", "<|user|>")
    assert hf_tok.eos_token_id == raw.token_to_id("<|endoftext|>") and hf_tok.model_max_length == cfg.seq_len
    assert "<|assistant|>" in hf_tok.all_special_tokens
    chat = hf_tok.apply_chat_template([{"role": "user", "content": "hi"}, {"role": "assistant", "content": "yo"}],
                                      tokenize=False)
    assert chat == "<|user|>hi<|endoftext|><|assistant|>yo<|endoftext|>"
    config = json.loads((out / "config.json").read_text())
    assert config["eos_token_id"] == raw.token_to_id("<|endoftext|>") == summary["config"]["eos_token_id"]
    assert config["bos_token_id"] == raw.token_to_id("<|user|>")
    gen = json.loads((out / "generation_config.json").read_text())
    assert gen["pad_token_id"] == raw.token_to_id("<|pad|>")
    with pytest.raises(ValueError, match="not in the tokenizer"):
        export_hf(trained_like_state(cfg), cfg, tokenizer_json, tmp_path / "bad", card=CARD,
                  special_tokens={"eos_token": "<|nope|>"})
    assert not (tmp_path / "bad").exists()


def test_export_is_byte_identical_and_replaces_atomically(tmp_path, tokenizer_json):
    cfg = tiny_cfg(True, 2)
    state = trained_like_state(cfg, seed=2)
    a = export_hf(state, cfg, tokenizer_json, tmp_path / "a", card=CARD, chat_template=TEMPLATE)
    b = export_hf({k: v.clone() for k, v in state.items()}, cfg, tokenizer_json, tmp_path / "b", card=CARD,
                  chat_template=TEMPLATE)
    names = sorted(p.name for p in (tmp_path / "a").iterdir())
    assert names == sorted(a["files"]) and "model.safetensors" in names and "README.md" in names
    for name in names:
        assert (tmp_path / "a" / name).read_bytes() == (tmp_path / "b" / name).read_bytes(), name
    assert a["files"] == b["files"]
    # Re-exporting different weights over an existing folder replaces it whole and leaves no temp folders.
    c = export_hf(trained_like_state(cfg, seed=3), cfg, tokenizer_json, tmp_path / "a", card=CARD)
    assert c["files"]["model.safetensors"]["sha256"] != a["files"]["model.safetensors"]["sha256"]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["a", "b"]
    assert check_hf(tmp_path / "a", trained_like_state(cfg, seed=3), cfg) < 1e-4


def test_card_renders_lineage_params_and_metrics(tmp_path, tokenizer_json):
    cfg = tiny_cfg(False, 2)
    summary = export_hf(trained_like_state(cfg), cfg, tokenizer_json, tmp_path / "hf", card=CARD)
    card = (tmp_path / "hf" / "README.md").read_text()
    assert card.startswith("---\nlibrary_name: transformers") and "# forgeline-tiny" in card
    assert f"| mix.manifest_sha256 | {'ab' * 32} |" in card and f"| sft.manifest_sha256 | {'cd' * 32} |" in card
    assert "| lr | 0.0003 |" in card and "| note | a\\|b |" in card        # pipes escaped, table intact
    assert "| source | ppl |" in card and "| docs | 12.5 |" in card and "| code | 7.25 |" in card
    assert f"| parameters | {param_count(cfg):,} |" in card
    sha = summary["files"]["model.safetensors"]["sha256"]
    assert f"| model.safetensors | {sha} |" in card
    assert card.index("## Lineage") < card.index("## Params") < card.index("## Metrics")


def test_mapping_is_strict_and_config_consistent(tokenizer_json, tmp_path):
    cfg = tiny_cfg(False, 2)
    state = trained_like_state(cfg)
    hf = to_hf_state_dict(state, cfg)
    assert set(hf) == set(key_map(cfg).values()) and len(hf) == len(state)
    assert all(t.dtype == torch.float32 and t.is_contiguous() for t in hf.values())
    assert hf["model.layers.1.self_attn.k_proj.weight"].data_ptr() != state["layers.2.attn.wk.weight"].data_ptr()
    torch.testing.assert_close(hf["model.layers.1.mlp.down_proj.weight"], state["layers.2.mlp.w2.weight"])

    with pytest.raises(KeyError, match="lm_head|layers.4.weight"):
        to_hf_state_dict({k: v for k, v in state.items() if k != "layers.4.weight"}, cfg)
    with pytest.raises(KeyError, match="unexpected"):   # an untied state under a tied config
        to_hf_state_dict(state, tiny_cfg(True, 2))
    bad = dict(state, **{"layers.1.attn.wk.weight": torch.zeros(32, 32)})
    with pytest.raises(ValueError, match="k_proj"):
        to_hf_state_dict(bad, cfg)
    small = tiny_cfg(False, 2, vocab_size=100)
    with pytest.raises(ValueError, match="vocab_size"):
        export_hf(trained_like_state(small), small, tokenizer_json, tmp_path / "x", card=CARD)

    conf = hf_config(cfg, eos_token_id=0)
    assert (conf["num_attention_heads"], conf["num_key_value_heads"], conf["intermediate_size"]) == (4, 2, 64)
    assert conf["rope_parameters"]["rope_theta"] == 500.0 and conf["bos_token_id"] is None
