"""Hugging Face checkpoints in: each supported architecture's random tiny model, saved by transformers, loads
into forgeline's plain decoder with the same logits; and every kind of checkpoint it cannot take is refused
naming the file and the field or tensor."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file, save_file

from specs.architecture import ModelConfig, param_count
from tasks.train.hf.hf_import import HFImportError, hf_model_config, load_hf_state, read_slice
from tasks.train.checkpointing.init_weights import HFSource, load_local
from tasks.train.modeling.model import Transformer

SHAPE = dict(vocab_size=96, hidden_size=32, intermediate_size=40, num_hidden_layers=2, num_attention_heads=4,
             num_key_value_heads=2, max_position_embeddings=64)
T = 24  # longer than the sliding window and the llama3 model's original context below


def llama3():
    from transformers import LlamaConfig

    return LlamaConfig(**SHAPE, rope_parameters={
        "rope_type": "llama3", "rope_theta": 500_000.0, "factor": 8.0, "low_freq_factor": 1.0,
        "high_freq_factor": 4.0, "original_max_position_embeddings": 8})


def llama_tied():
    from transformers import LlamaConfig

    return LlamaConfig(**{**SHAPE, "num_key_value_heads": 4}, tie_word_embeddings=True)


def mistral():
    from transformers import MistralConfig

    return MistralConfig(**SHAPE, sliding_window=5)


def qwen2():
    from transformers import Qwen2Config

    return Qwen2Config(**SHAPE)


def qwen3():
    from transformers import Qwen3Config

    return Qwen3Config(**SHAPE, head_dim=16)  # not hidden_size / heads = 8


def save_hf(config, folder: Path, seed: int = 0, **kwargs) -> torch.nn.Module:
    from transformers import AutoModelForCausalLM

    torch.manual_seed(seed)
    model = AutoModelForCausalLM.from_config(config, attn_implementation="eager").eval()
    with torch.no_grad():  # biases and norms start at 0 / 1: randomise them so a wrong mapping shows in logits
        for name, p in model.named_parameters():
            if name.endswith(("bias", "norm.weight", "layernorm.weight")):
                p.add_(torch.randn_like(p) * 0.1)
    model.save_pretrained(folder, **kwargs)
    return model


def logits_gap(folder: Path, hf_model: torch.nn.Module) -> float:
    """The larger logits gap to `transformers` of the separate model (its state dict) and of the fused one
    training builds, materialised from the folder as the stage does (meta model, `load_local` + `HFSource`)."""
    cfg = hf_model_config(folder)
    ours = Transformer(cfg, seed=0).eval()
    ours.load_state_dict(load_hf_state(folder, cfg), strict=True)
    with torch.device("meta"):
        fused = Transformer(cfg, seed=0, fused=True).eval()
    load_local(list(enumerate(fused.layers)), 0, 1, HFSource(folder, cfg), meta_only=True)
    ids = torch.randint(0, cfg.vocab_size, (2, T), generator=torch.Generator().manual_seed(1))
    with torch.no_grad():
        want = hf_model(ids).logits
        return max(float((ours(ids) - want).abs().max()), float((fused(ids) - want).abs().max()))


@pytest.mark.parametrize("make", [llama3, llama_tied, mistral, qwen2, qwen3])
def test_each_architecture_loads_with_the_same_logits(make, tmp_path):
    hf = save_hf(make(), tmp_path)
    assert logits_gap(tmp_path, hf) < 2e-5
    cfg = hf_model_config(tmp_path)
    assert param_count(cfg) == sum(p.numel() for p in hf.parameters())  # our accounting of its extras too


def test_features_are_read_from_the_config(tmp_path):
    save_hf(qwen3(), tmp_path / "q3")
    save_hf(mistral(), tmp_path / "m")
    save_hf(llama3(), tmp_path / "l3")
    save_hf(qwen2(), tmp_path / "q2")
    q3, m, l3, q2 = (hf_model_config(tmp_path / n) for n in ("q3", "m", "l3", "q2"))
    assert (q3.head_dim, q3.qk_norm, q3.attn_bias, q3.sliding_window) == (16, True, False, None)
    assert (m.sliding_window, m.head_dim, m.qk_norm) == (5, 8, False)
    assert (l3.rope_type, l3.rope_factor, l3.rope_original_max_len, l3.rope_theta) == ("llama3", 8.0, 8, 500_000.0)
    assert q2.attn_bias and not q2.tie_embeddings and q2.seq_len == 64
    assert hf_model_config(tmp_path / "q2", seq_len=32).seq_len == 32


def test_the_features_matter(tmp_path):
    """Switching a feature off gives other logits: the parity above is not vacuous."""
    for make, off in ((mistral, {"sliding_window": None}), (llama3, {"rope_type": "default"}),
                      (qwen3, {"qk_norm": False})):
        folder = tmp_path / make.__name__
        hf = save_hf(make(), folder)
        cfg = hf_model_config(folder)
        state = load_hf_state(folder, cfg)
        plain = ModelConfig.from_dict({**cfg.to_dict(), **off})
        model = Transformer(plain, 0).eval()
        model.load_state_dict(state, strict=False)
        ids = torch.randint(0, cfg.vocab_size, (1, T), generator=torch.Generator().manual_seed(2))
        with torch.no_grad():
            assert float((model(ids) - hf(ids).logits).abs().max()) > 1e-3, make.__name__


def test_sharded_checkpoint_and_sliced_reads(tmp_path):
    hf = save_hf(qwen2(), tmp_path, max_shard_size="20KB")
    index = json.loads((tmp_path / "model.safetensors.index.json").read_text())
    assert len(set(index["weight_map"].values())) > 1  # really sharded
    assert logits_gap(tmp_path, hf) < 2e-5
    full = hf.state_dict()["model.layers.1.mlp.gate_proj.weight"]
    assert torch.equal(read_slice(tmp_path, "model.layers.1.mlp.gate_proj.weight", 0, 10, 20), full[10:20])
    assert torch.equal(read_slice(tmp_path, "model.layers.1.mlp.down_proj.weight", 1, 0, 20),
                       hf.state_dict()["model.layers.1.mlp.down_proj.weight"][:, :20])


def test_bf16_checkpoint_keeps_its_dtype(tmp_path):
    hf = save_hf(qwen2(), tmp_path)
    hf.to(torch.bfloat16).save_pretrained(tmp_path)
    state = load_hf_state(tmp_path, hf_model_config(tmp_path))
    assert {t.dtype for t in state.values()} == {torch.bfloat16}
    assert {t.dtype for t in load_hf_state(tmp_path, hf_model_config(tmp_path), torch.float32).values()} == {
        torch.float32}


def edit_config(folder: Path, **changes) -> None:
    path = folder / "config.json"
    cfg = json.loads(path.read_text())
    cfg.update(changes)
    path.write_text(json.dumps(cfg))


@pytest.mark.parametrize("changes, message", [
    ({"model_type": "gpt2"}, "model_type `gpt2` is not supported"),
    ({"rope_parameters": {"rope_type": "longrope", "factor": 4.0}}, "rope scaling type `longrope` is not supported"),
    ({"hidden_act": "gelu"}, "hidden_act `gelu` is not supported"),
    ({"mlp_bias": True}, "mlp_bias true is not supported"),
    ({"attention_bias": True}, "attention_bias true"),
])
def test_unsupported_configs_are_refused_naming_file_and_field(tmp_path, changes, message):
    save_hf(llama_tied(), tmp_path)
    edit_config(tmp_path, **changes)
    with pytest.raises(HFImportError, match=message) as err:
        hf_model_config(tmp_path)
    assert str(tmp_path / "config.json") in str(err.value)


def test_missing_and_misshapen_weights_are_refused(tmp_path):
    save_hf(qwen2(), tmp_path)
    weights = load_file(tmp_path / "model.safetensors")
    del weights["model.layers.1.self_attn.k_proj.bias"]
    save_file(weights, tmp_path / "model.safetensors")
    with pytest.raises(HFImportError, match="weight `model.layers.1.self_attn.k_proj.bias` is missing"):
        load_hf_state(tmp_path, hf_model_config(tmp_path))
    save_hf(qwen2(), tmp_path)
    edit_config(tmp_path, intermediate_size=48)
    with pytest.raises(HFImportError, match=r"model.safetensors: `model.layers.0.mlp.down_proj.weight` has shape "
                                            r"\(32, 40\), config.json implies \(32, 48\)"):
        load_hf_state(tmp_path, hf_model_config(tmp_path))


def test_pickle_checkpoints_are_refused_without_unpickling(tmp_path, monkeypatch):
    save_hf(llama_tied(), tmp_path)
    (tmp_path / "model.safetensors").unlink()
    torch.save({"x": torch.zeros(1)}, tmp_path / "pytorch_model.bin")
    monkeypatch.setattr(torch, "load", lambda *a, **k: pytest.fail("a pickle was loaded"))
    with pytest.raises(HFImportError, match="pytorch_model.bin: pickle checkpoints are refused"):
        load_hf_state(tmp_path, hf_model_config(tmp_path))


@pytest.mark.parametrize("make", [llama3, llama_tied, mistral, qwen2, qwen3])
def test_round_trip_keeps_the_family_and_the_logits(make, tmp_path):
    """HF -> forgeline -> HF (export's config and state dict): the source model_type and its fields come back
    (RoPE scaling, window, biases, head_dim, q/k norms, tie flag) and transformers gives the same logits."""
    from transformers import AutoModelForCausalLM

    from tasks.train.hf.hf_export import hf_config, to_hf_state_dict

    hf = save_hf(make(), tmp_path / "in")
    source = json.loads((tmp_path / "in" / "config.json").read_text())
    cfg = hf_model_config(tmp_path / "in")
    out = tmp_path / "out"
    out.mkdir()
    conf = hf_config(cfg)
    (out / "config.json").write_text(json.dumps(conf))
    save_file(to_hf_state_dict(load_hf_state(tmp_path / "in", cfg), cfg), out / "model.safetensors")
    assert conf["model_type"] == source["model_type"] and conf["architectures"] == source["architectures"]
    for key in ("sliding_window", "head_dim", "tie_word_embeddings", "num_key_value_heads", "use_sliding_window"):
        if key in source:  # qwen2's config has no head_dim of its own
            assert conf.get(key) == source[key], key
    back = AutoModelForCausalLM.from_pretrained(out, attn_implementation="eager").eval()
    assert type(back).__name__ == source["architectures"][0]
    ids = torch.randint(0, cfg.vocab_size, (2, T), generator=torch.Generator().manual_seed(3))
    with torch.no_grad():
        assert float((back(ids).logits - hf(ids).logits).abs().max()) < 1e-5


def test_a_combination_no_family_has_is_refused():
    from dataclasses import replace

    from tasks.train.hf.hf_export import hf_config

    base = ModelConfig(vocab_size=16, seq_len=8, n_layers=1, n_heads=2, n_kv_heads=2, d_model=8, ffn_hidden=16)
    with pytest.raises(ValueError, match="Qwen3ForCausalLM cannot express attn_bias"):
        hf_config(replace(base, qk_norm=True, attn_bias=True))
    with pytest.raises(ValueError, match="llama3 RoPE scaling is exported for llama models only"):
        hf_config(replace(base, sliding_window=4, rope_type="llama3"))
    assert hf_config(replace(base, attn_bias=True))["model_type"] == "qwen2"
