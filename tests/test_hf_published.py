"""Published checkpoints' own config.json files (tests/helpers/hf_published.py: Llama 2/3/3.1/3.2, TinyLlama,
SmolLM2, CodeLlama, Vicuna, DeepSeek-R1-Distill-Llama, Mistral v0.1/v0.3/Nemo, Qwen2, Qwen2.5, Qwen3, Phi-3-mini-4k,
Phi-4), scaled down
with every key and feature value kept: forgeline reads each field as transformers does and gives its logits within
2e-5, or refuses the file naming it and the field; export writes a config transformers loads with the same
logits. The file is written raw (transformers' `save_pretrained` would rewrite it in its own layout)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import torch

from specs.architecture import ModelConfig, param_count
from tasks.train.hf.hf_families import DEFAULTS, EPS, SUPPORTED
from tasks.train.hf.hf_import import HFImportError, hf_model_config, load_hf_state
from tasks.train.modeling.model import Transformer
from tests.helpers.hf_published import PUBLISHED, VOCAB, scale_down
from tests.test_hf_import import logits_gap

T = 24  # past the scaled sliding window (8) and llama3 original context (16), within max_position_embeddings (64)


def save_raw(raw: dict[str, Any], folder: Path) -> torch.nn.Module:
    """transformers' random fp32 model of config.json `raw` (norms and biases randomised), saved beside `raw`
    itself; returns the model transformers loads back from the folder."""
    from transformers import AutoConfig, AutoModelForCausalLM

    folder.mkdir(parents=True, exist_ok=True)
    (folder / "config.json").write_text(json.dumps(raw))
    torch.manual_seed(0)
    model = AutoModelForCausalLM.from_config(AutoConfig.from_pretrained(folder), attn_implementation="eager",
                                             dtype=torch.float32)
    with torch.no_grad():  # norms start at 1 and biases at 0: randomise them so a wrong mapping shows
        for name, p in model.named_parameters():
            if name.endswith(("bias", "norm.weight")):
                p.add_(torch.randn_like(p) * 0.1)
    model.save_pretrained(folder)
    (folder / "config.json").write_text(json.dumps(raw))  # the published layout, not transformers 5's rewrite
    return AutoModelForCausalLM.from_pretrained(folder, attn_implementation="eager", dtype=torch.float32).eval()


def transformers_view(hf: torch.nn.Module) -> dict[str, Any]:
    """The fields forgeline must read as transformers' parsed config holds them."""
    c = hf.config
    types = getattr(c, "layer_types", None) or []
    window = c.sliding_window if c.model_type in ("mistral", "phi3") else (
        c.sliding_window if types and all(t == "sliding_attention" for t in types) else None)
    return {"head_dim": getattr(c, "head_dim", None) or c.hidden_size // c.num_attention_heads,
            "n_kv_heads": c.num_key_value_heads, "tie_embeddings": c.tie_word_embeddings,
            "norm_eps": c.rms_norm_eps, "rope_theta": c.rope_parameters["rope_theta"],
            "rope_type": c.rope_parameters["rope_type"], "sliding_window": window}


def ours(cfg: ModelConfig) -> dict[str, Any]:
    return {"head_dim": cfg.head_dim, "n_kv_heads": cfg.n_kv_heads, "tie_embeddings": cfg.tie_embeddings,
            "norm_eps": cfg.norm_eps, "rope_theta": cfg.rope_theta, "rope_type": cfg.rope_type,
            "sliding_window": cfg.sliding_window}


def export_gap(folder: Path, out: Path, hf: torch.nn.Module) -> float:
    """Export the imported model (export's config + state dict), load it with transformers: the logits gap."""
    from safetensors.torch import save_file
    from transformers import AutoModelForCausalLM

    from tasks.train.hf.hf_export import hf_config, to_hf_state_dict

    cfg = hf_model_config(folder)
    out.mkdir()
    (out / "config.json").write_text(json.dumps(hf_config(cfg)))
    save_file(to_hf_state_dict(load_hf_state(folder, cfg), cfg), out / "model.safetensors")
    back = AutoModelForCausalLM.from_pretrained(out, attn_implementation="eager", dtype=torch.float32).eval()
    assert type(back).__name__ == type(hf).__name__
    ids = torch.randint(0, VOCAB, (2, T), generator=torch.Generator().manual_seed(3))
    with torch.no_grad():
        return float((back(ids).logits - hf(ids).logits).abs().max())


@pytest.mark.parametrize("name", sorted(PUBLISHED))
def test_published_config_reads_as_transformers_and_round_trips(name, tmp_path):
    hf = save_raw(scale_down(PUBLISHED[name]), tmp_path / "in")
    cfg = hf_model_config(tmp_path / "in")
    assert ours(cfg) == transformers_view(hf)
    assert param_count(cfg) == sum(p.numel() for p in hf.parameters())
    assert logits_gap(tmp_path / "in", hf) < 2e-5
    assert export_gap(tmp_path / "in", tmp_path / "out", hf) < 2e-5


def variant(name: str, drop: tuple[str, ...] = (), **changes: Any) -> dict[str, Any]:
    raw = {k: v for k, v in scale_down(PUBLISHED[name]).items() if k not in drop}
    return {**raw, **changes}


L31 = scale_down(PUBLISHED["Llama-3.1-8B"])
# Files published checkpoints could ship, each read as transformers reads it (absent keys: the family's class
# default; keys its model ignores; RoPE and window rules): same logits, export included.
READ_AS_TRANSFORMERS = {
    "llama pretraining_tp 2": variant("Llama-2-7b-hf", pretraining_tp=2),
    "llama hidden_act swish": variant("Llama-2-7b-hf", hidden_act="swish"),
    "llama no max_position_embeddings": variant("Llama-2-7b-hf", drop=("max_position_embeddings",)),
    "llama head_dim null": variant("Llama-2-7b-hf", head_dim=None),
    "llama linear rope (type key)": variant("vicuna-7b-v1.5-16k"),
    "llama dynamic rope": variant("Llama-2-7b-hf", rope_scaling={"type": "dynamic", "factor": 2.0}),
    "llama3 under the old `type` key": {**L31, "rope_scaling": {**{k: v for k, v in L31["rope_scaling"].items()
                                                                   if k != "rope_type"}, "type": "llama3"}},
    "llama3 without original_max_position_embeddings": {**L31, "rope_scaling": {
        k: v for k, v in L31["rope_scaling"].items() if k != "original_max_position_embeddings"}},
    "rope_scaling wins over rope_parameters": {**L31, "rope_parameters": {"rope_type": "default",
                                                                           "rope_theta": 10000.0}},
    "rope_parameters' theta wins over rope_theta": variant("Llama-2-7b-hf", rope_theta=10000.0, rope_parameters={
        "rope_type": "default", "rope_theta": 5.0e5}),
    "mistral attention_bias/mlp_bias ignored": variant("Mistral-7B-v0.1", attention_bias=True, mlp_bias=True),
    "mistral without sliding_window (4096)": variant("Mistral-7B-v0.1", drop=("sliding_window",)),
    "mistral use_sliding_window ignored": variant("Mistral-7B-v0.3", use_sliding_window=True),
    "qwen2 window past every layer": variant("Qwen2.5-0.5B", use_sliding_window=True),
    "qwen2 window on every layer": variant("Qwen2.5-0.5B", use_sliding_window=True, max_window_layers=0),
    "qwen2 mlp_bias/attention_bias ignored": variant("Qwen2.5-0.5B", mlp_bias=True, attention_bias=False),
    "qwen3 without head_dim (128)": variant("Qwen3-0.6B", drop=("head_dim",)),
    "qwen3 layer_types all full": variant("Qwen3-0.6B", layer_types=["full_attention"] * 3),
    "qwen3 window on every layer": variant("Qwen3-0.6B", use_sliding_window=True, sliding_window=8,
                                           max_window_layers=0),
    "qwen2 linear rope": variant("Qwen2.5-0.5B", rope_scaling={"rope_type": "linear", "factor": 2.0}),
    # the long-context switch Qwen2.5's and Qwen3's model cards tell users to add (original context scaled down)
    "qwen2.5 yarn as its card adds it": variant("Qwen2.5-7B", rope_scaling={
        "factor": 4.0, "original_max_position_embeddings": 16, "type": "yarn"}),
    "qwen3 yarn without original context": variant("Qwen3-0.6B", rope_scaling={"rope_type": "yarn", "factor": 2.0}),
    "llama yarn betas, no truncation": variant("Llama-2-7b-hf", rope_scaling={
        "rope_type": "yarn", "factor": 8.0, "original_max_position_embeddings": 48, "beta_fast": 16, "beta_slow": 2,
        "truncate": False}),  # 48: the ramp then starts at dim 1.16, which truncation would round to 2
    "llama yarn mscale ratio": variant("Llama-2-7b-hf", rope_scaling={
        "rope_type": "yarn", "factor": 8.0, "original_max_position_embeddings": 16, "mscale": 0.7,
        "mscale_all_dim": 1.0}),
    "mistral yarn attention_factor": variant("Mistral-7B-v0.3", rope_scaling={
        "rope_type": "yarn", "factor": 8.0, "original_max_position_embeddings": 16, "attention_factor": 1.3}),
}


@pytest.mark.parametrize("name", sorted(READ_AS_TRANSFORMERS))
def test_variants_read_as_transformers(name, tmp_path):
    hf = save_raw(READ_AS_TRANSFORMERS[name], tmp_path / "in")
    assert ours(hf_model_config(tmp_path / "in")) == transformers_view(hf)
    assert logits_gap(tmp_path / "in", hf) < 2e-5
    assert export_gap(tmp_path / "in", tmp_path / "out", hf) < 2e-5


REFUSED = {
    "llama attention_bias": (variant("Llama-2-7b-hf", attention_bias=True), "attention_bias true is not supported"),
    "qwen3 attention_bias": (variant("Qwen3-0.6B", attention_bias=True), "attention_bias true is not supported"),
    "llama mlp_bias": (variant("Llama-3.1-8B", mlp_bias=True), "mlp_bias true is not supported"),
    "gelu": (variant("Llama-2-7b-hf", hidden_act="gelu"), "hidden_act `gelu` is not supported"),
    "longrope": (variant("Llama-2-7b-hf", rope_scaling={"rope_type": "longrope", "short_factor": [1.0] * 8,
                                                        "long_factor": [2.0] * 8}),
                 "rope scaling type `longrope` is not supported"),
    "partial rotary": (variant("Llama-2-7b-hf", partial_rotary_factor=0.5), "partial_rotary_factor 0.5"),
    "qwen2 window on some layers": (variant("Qwen2.5-0.5B", use_sliding_window=True, max_window_layers=1),
                                    r"window on layers \[1, 2\] only"),
    "qwen2 sliding layer_types without a window": (
        variant("Qwen2.5-0.5B", layer_types=["sliding_attention"] * 3), "use_sliding_window is false"),
}


@pytest.mark.parametrize("name", sorted(REFUSED))
def test_what_transformers_computes_and_forgeline_cannot_is_refused(name, tmp_path):
    raw, message = REFUSED[name]
    tmp_path.joinpath("config.json").write_text(json.dumps(raw))
    with pytest.raises(HFImportError, match=message) as err:
        hf_model_config(tmp_path)
    assert str(tmp_path / "config.json") in str(err.value)


def test_dynamic_rope_past_the_checkpoints_positions_is_refused(tmp_path):
    tmp_path.joinpath("config.json").write_text(json.dumps(READ_AS_TRANSFORMERS["llama dynamic rope"]))
    assert hf_model_config(tmp_path, seq_len=64).rope_type == "dynamic"
    with pytest.raises(HFImportError, match="dynamic RoPE scaling .* max_position_embeddings 64"):
        hf_model_config(tmp_path, seq_len=65)


def test_the_defaults_are_the_installed_transformers_class_defaults():
    import transformers

    classes = {"llama": transformers.LlamaConfig, "mistral": transformers.MistralConfig,
               "qwen2": transformers.Qwen2Config, "qwen3": transformers.Qwen3Config, "phi3": transformers.Phi3Config}
    assert set(classes) == set(DEFAULTS) == set(SUPPORTED)
    for kind, cls in classes.items():
        fields = cls.__dataclass_fields__
        for key, value in DEFAULTS[kind].items():
            assert fields[key].default == value if key in fields else value is None, (kind, key)
        eps = DEFAULTS[kind].get("rms_norm_eps", EPS)
        assert (fields["rms_norm_eps"].default, fields["tie_word_embeddings"].default) == (eps, False)
        assert fields["hidden_act"].default == "silu"


def test_linear_and_yarn_rope_and_a_qwen_window_matter(tmp_path):
    """Switching the feature off changes the logits: their parity above is not vacuous."""
    for name, off in (("llama linear rope (type key)", {"rope_type": "default"}),
                      ("qwen2 window on every layer", {"sliding_window": None}),
                      ("qwen2.5 yarn as its card adds it", {"rope_type": "linear"}),  # the per-dim blend
                      ("qwen2.5 yarn as its card adds it", {"rope_attention_factor": 1.0}),
                      ("llama yarn betas, no truncation", {"rope_truncate": True})):
        folder = tmp_path / f"{name}-{sorted(off)[0]}".replace(" ", "_")
        hf = save_raw(READ_AS_TRANSFORMERS[name], folder)
        cfg = hf_model_config(folder)
        model = Transformer(ModelConfig.from_dict({**cfg.to_dict(), **off}), 0).eval()
        model.load_state_dict(load_hf_state(folder, cfg))
        ids = torch.randint(0, VOCAB, (1, T), generator=torch.Generator().manual_seed(2))
        with torch.no_grad():
            assert float((model(ids) - hf(ids).logits).abs().max()) > 1e-4, (name, off)  # 5 × the tolerance


@pytest.mark.parametrize("files, eos", [
    # Llama 3.1 Instruct's config.json lists three stop ids; its tokenizer_config.json names <|eot_id|>
    ({"config.json": {"eos_token_id": [1, 2, 3]}, "tokenizer_config.json": {"eos_token": "<|eot_id|>"}},
     "<|eot_id|>"),
    ({"config.json": {"eos_token_id": [1, 2, 3]}, "tokenizer_config.json": {}}, "<|end_of_text|>"),
    # older folders keep their special tokens in special_tokens_map.json, which transformers reads
    ({"config.json": {"eos_token_id": 1}, "tokenizer_config.json": {},
      "special_tokens_map.json": {"eos_token": {"content": "<|eot_id|>", "special": True}}}, "<|eot_id|>"),
])
def test_the_end_token_of_a_published_tokenizer_layout(files, eos, tmp_path):
    from tokenizers import Tokenizer, models

    from tasks.data.mixing.tokenizer import checkpoint_tokenizer

    tok = Tokenizer(models.WordLevel({"a": 0, "<|end_of_text|>": 1, "<|eom_id|>": 2, "<|eot_id|>": 3},
                                     unk_token="a"))
    tok.save(str(tmp_path / "tokenizer.json"))
    for name, content in files.items():
        (tmp_path / name).write_text(json.dumps(content))
    _, specials, end = checkpoint_tokenizer(tmp_path)
    assert end == eos and specials[eos] == tok.token_to_id(eos)


def test_an_end_id_outside_the_tokenizer_is_refused(tmp_path):
    from tokenizers import Tokenizer, models

    from tasks.data.mixing.tokenizer import CheckpointTokenizerError, checkpoint_tokenizer

    Tokenizer(models.WordLevel({"a": 0}, unk_token="a")).save(str(tmp_path / "tokenizer.json"))
    (tmp_path / "config.json").write_text(json.dumps({"eos_token_id": [7, 0]}))
    with pytest.raises(CheckpointTokenizerError, match="config.json: eos_token_id 7 is not a token"):
        checkpoint_tokenizer(tmp_path)


@pytest.mark.parametrize("name", ["Llama-3.1-8B-Instruct", "vicuna-7b-v1.5-16k", "Mistral-7B-v0.1",
                                  "Qwen3-0.6B", "llama dynamic rope", "qwen2 window on every layer",
                                  "qwen2.5 yarn as its card adds it"])
def test_the_export_stage_writes_a_folder_transformers_loads_with_the_same_logits(name, tmp_path):
    """`export_hf` + `check_hf` (what tasks/export.py runs) on the imported model, at the checkpoint's context."""
    from dataclasses import replace

    from tokenizers import Tokenizer, models

    from tasks.train.hf.hf_export import check_hf, export_hf

    raw = READ_AS_TRANSFORMERS.get(name) or scale_down(PUBLISHED[name])
    save_raw(raw, tmp_path / "in")
    cfg = hf_model_config(tmp_path / "in", seq_len=32)  # trained shorter than the checkpoint's 64 positions
    cfg = replace(cfg, seq_len=64)  # export's `context_of`: the checkpoint's own max_position_embeddings
    Tokenizer(models.WordLevel({"a": 0, "<|endoftext|>": 1}, unk_token="a")).save(str(tmp_path / "tokenizer.json"))
    state = load_hf_state(tmp_path / "in", cfg)
    summary = export_hf(state, cfg, tmp_path / "tokenizer.json", tmp_path / "out", card={},
                        special_tokens={"eos_token": "<|endoftext|>"})
    written = summary["config"]
    assert written["model_type"] == raw["model_type"] and written["max_position_embeddings"] == 64
    assert written["rope_parameters"]["rope_type"] == cfg.rope_type
    assert check_hf(tmp_path / "out", state, cfg, seq=T, tol=2e-5) < 2e-5
