"""Hugging Face import, second probe: a checkpoint transformers reads one way must not load silently another way
into forgeline (a top-level original context, a tied config beside a distinct stored head, a folder holding a
single file and an index, quantized weights), and what forgeline cannot run is refused naming the file and the
field or tensor (kv heads not dividing the heads, a classification head, a misshapen tensor on the training
path)."""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import pytest
import torch
from safetensors.torch import load_file, save_file

from tasks.train.checkpointing.init_weights import HFSource, load_local
from tasks.train.hf.hf_export import hf_config
from tasks.train.hf.hf_import import HFImportError, hf_model_config, load_hf_state
from tasks.train.modeling.model import Transformer
from tests.test_hf_import import logits_gap
from tests.test_hf_published import export_gap, save_raw

LLAMA3 = {"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0,
          "original_max_position_embeddings": 8}
YARN = {"rope_type": "yarn", "factor": 4.0, "original_max_position_embeddings": 8}


def raw(model_type: str = "llama", **changes: Any) -> dict[str, Any]:
    """A tiny config.json of `model_type` (d 32, 2 layers, vocab 128 as `export_gap` draws, GQA 4/2)."""
    arch = {"llama": "Llama", "mistral": "Mistral", "qwen2": "Qwen2", "qwen3": "Qwen3"}[model_type]
    out = {"architectures": [f"{arch}ForCausalLM"], "model_type": model_type, "vocab_size": 128, "hidden_size": 32,
           "intermediate_size": 40, "num_hidden_layers": 2, "num_attention_heads": 4, "num_key_value_heads": 2,
           "max_position_embeddings": 64, "rms_norm_eps": 1e-5, "rope_theta": 10000.0, "hidden_act": "silu",
           "tie_word_embeddings": False, "head_dim": 8}
    out.update(changes)
    return out


def reload(folder: Path) -> torch.nn.Module:
    from transformers import AutoModelForCausalLM

    return AutoModelForCausalLM.from_pretrained(folder, attn_implementation="eager", dtype=torch.float32).eval()


def write_config(folder: Path, config: dict[str, Any]) -> None:
    (folder / "config.json").write_text(json.dumps(config))


# ------------------------------------------------------------------------------ F1: top-level original context
@pytest.mark.parametrize("model_type", ["llama", "mistral", "qwen2", "qwen3"])
@pytest.mark.parametrize("scaling", [LLAMA3, YARN], ids=["llama3", "yarn"])
def test_a_top_level_original_context_wins_as_in_transformers(model_type, scaling, tmp_path):
    hf = save_raw(raw(model_type, rope_scaling=scaling, original_max_position_embeddings=16), tmp_path / "in")
    assert hf.config.rope_parameters["original_max_position_embeddings"] == 16  # transformers' reading
    cfg = hf_model_config(tmp_path / "in")
    assert cfg.rope_original_max_len == 16
    assert logits_gap(tmp_path / "in", hf) < 2e-5
    written = hf_config(cfg)  # the exported config states the context the model was read with
    assert written["rope_parameters"]["original_max_position_embeddings"] == 16
    assert written.get("original_max_position_embeddings", 16) == 16
    assert export_gap(tmp_path / "in", tmp_path / "out", hf) < 2e-5


def test_a_top_level_original_context_without_a_scaling_that_reads_it_changes_nothing(tmp_path):
    hf = save_raw(raw(rope_scaling={"rope_type": "linear", "factor": 2.0}, original_max_position_embeddings=16),
                  tmp_path)
    assert logits_gap(tmp_path, hf) < 2e-5


def test_a_null_top_level_original_context_is_refused(tmp_path):
    # transformers replaces rope_scaling's context with the null and fails dividing by it
    tmp_path.mkdir(exist_ok=True)
    write_config(tmp_path, raw(rope_scaling=LLAMA3, original_max_position_embeddings=None))
    with pytest.raises(HFImportError, match="config.json.*original_max_position_embeddings"):
        hf_model_config(tmp_path)


# ------------------------------------------------------------------------------ F2: tied config, distinct head
def test_a_stored_head_unlike_the_embedding_is_used_untied_as_in_transformers(tmp_path):
    save_raw(raw(tie_word_embeddings=True), tmp_path)
    weights = load_file(tmp_path / "model.safetensors")
    assert "lm_head.weight" not in weights
    weights["lm_head.weight"] = torch.randn_like(weights["model.embed_tokens.weight"])
    save_file(weights, tmp_path / "model.safetensors", metadata={"format": "pt"})
    hf = reload(tmp_path)
    assert not torch.equal(hf.lm_head.weight, hf.model.embed_tokens.weight)  # transformers did not tie them
    cfg = hf_model_config(tmp_path)
    assert not cfg.tie_embeddings
    assert logits_gap(tmp_path, hf) < 2e-5


def test_a_stored_head_equal_to_the_embedding_stays_tied(tmp_path):
    save_raw(raw(tie_word_embeddings=True), tmp_path)
    weights = load_file(tmp_path / "model.safetensors")
    weights["lm_head.weight"] = weights["model.embed_tokens.weight"].clone()
    save_file(weights, tmp_path / "model.safetensors", metadata={"format": "pt"})
    hf = reload(tmp_path)
    assert hf_model_config(tmp_path).tie_embeddings
    assert logits_gap(tmp_path, hf) < 2e-5


# ------------------------------------------------------------------------------ F3: single file and index
def test_a_folder_with_a_single_file_and_an_index_loads_the_single_file_as_transformers(tmp_path):
    folder, other = tmp_path / "ck", tmp_path / "other"
    save_raw(raw(), other)
    sharded = reload(other)
    with torch.no_grad():
        for p in sharded.parameters():
            p.mul_(-1.5)  # other weights, so loading the shards would show in the logits
    sharded.save_pretrained(folder, max_shard_size="20KB")
    assert (folder / "model.safetensors.index.json").exists()
    shutil.copy(other / "model.safetensors", folder / "model.safetensors")
    write_config(folder, raw())
    hf = reload(folder)
    assert logits_gap(folder, hf) < 2e-5


# ------------------------------------------------------------------------------ F4: kv heads not dividing
def test_kv_heads_not_dividing_the_heads_are_refused_at_config_read(tmp_path):
    write_config(tmp_path, raw(num_key_value_heads=3))
    with pytest.raises(HFImportError, match="config.json.*num_attention_heads.*4.*num_key_value_heads.*3"):
        hf_model_config(tmp_path)


# ------------------------------------------------------------------------------ F5: quantized checkpoints
def test_a_quantization_config_is_refused(tmp_path):
    write_config(tmp_path, raw("qwen3", quantization_config={"quant_method": "fp8", "weight_block_size": [8, 8]}))
    with pytest.raises(HFImportError, match="config.json.*quantization_config.*fp8.*unquantized"):
        hf_model_config(tmp_path)


def test_float8_weights_are_refused_on_both_load_paths(tmp_path):
    save_raw(raw("qwen3"), tmp_path)
    weights = load_file(tmp_path / "model.safetensors")
    name = "model.layers.1.self_attn.q_proj.weight"
    weights[name] = weights[name].to(torch.float8_e4m3fn)
    save_file(weights, tmp_path / "model.safetensors", metadata={"format": "pt"})
    cfg = hf_model_config(tmp_path)
    with pytest.raises(HFImportError, match=rf"model.safetensors: `{name}` is stored as torch.float8_e4m3fn"):
        load_hf_state(tmp_path, cfg)
    with torch.device("meta"):
        model = Transformer(cfg, seed=0, fused=True)
    with pytest.raises(HFImportError, match=rf"model.safetensors: `{name}` is stored as torch.float8_e4m3fn"):
        load_local(list(enumerate(model.layers)), 0, 1, HFSource(tmp_path, cfg), meta_only=True)


# ------------------------------------------------------------------------------ F6: training path's messages
def phi3_raw() -> dict[str, Any]:
    return {**raw(), "architectures": ["Phi3ForCausalLM"], "model_type": "phi3", "resid_pdrop": 0.0,
            "embd_pdrop": 0.0, "attention_dropout": 0.0, "sliding_window": None, "pad_token_id": 0}


@pytest.mark.parametrize("config, tensor, shape", [
    (raw(), "model.layers.1.mlp.down_proj.weight", (32, 50)),
    (phi3_raw(), "model.layers.0.self_attn.qkv_proj.weight", (60, 32)),
], ids=["llama-down_proj", "phi3-qkv_proj"])
def test_a_misshapen_tensor_on_the_training_path_names_the_file_and_the_hf_tensor(config, tensor, shape, tmp_path):
    save_raw(config, tmp_path)
    weights = load_file(tmp_path / "model.safetensors")
    weights[tensor] = torch.randn(shape)
    save_file(weights, tmp_path / "model.safetensors", metadata={"format": "pt"})
    cfg = hf_model_config(tmp_path)
    with torch.device("meta"):
        model = Transformer(cfg, seed=0, fused=True)
    with pytest.raises(HFImportError, match=rf"model.safetensors: `{tensor}` has shape {tuple(shape)}".replace(
            "(", r"\(").replace(")", r"\)")):
        load_local(list(enumerate(model.layers)), 0, 1, HFSource(tmp_path, cfg), meta_only=True)


# ------------------------------------------------------------------------------ not a causal LM
def test_a_sequence_classification_checkpoint_is_refused_as_not_a_causal_lm(tmp_path):
    save_raw(raw(), tmp_path)
    weights = load_file(tmp_path / "model.safetensors")
    weights["score.weight"] = weights.pop("lm_head.weight")[:2].clone()
    save_file(weights, tmp_path / "model.safetensors", metadata={"format": "pt"})
    write_config(tmp_path, raw(architectures=["LlamaForSequenceClassification"]))
    with pytest.raises(HFImportError, match="config.json.*LlamaForSequenceClassification.*not a causal"):
        hf_model_config(tmp_path)
