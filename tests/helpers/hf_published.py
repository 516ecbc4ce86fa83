"""Published Hugging Face `config.json` files of the families `model.init.kind: hf` takes, as their hubs ship them
(every key and value of the file, large dims included), and `scale_down`, which keeps each file's keys and feature
values — RoPE type and factors, tie flag, GQA ratio, head_dim against hidden_size / heads, sliding-window
switches, eos lists, `pretraining_tp` — while shrinking the dims to a model that builds in milliseconds.

Sources: the Qwen2.5-0.5B/1.5B-Instruct and Llama-3.1 rope_scaling files were checked against copies vendored in
public GitHub repositories (the code search's `"max_window_layers": 21` and `"rope_type": "llama3"` hits), the
transformers-5 layout of Qwen2.5-1.5B against a saved 5.7.0 file; Phi-3-mini-4k-instruct against two public
copies of its file (the code search's `"sliding_window": 2047` hits, identical), phi-4 against one (its
`"_name_or_path": "microsoft/phi-4"` hit, the transformers 4.47.0 revision: its eos/pad ids may differ in later
revisions); the rest are written from the published hub files as known (values that matter here: model_type,
rope, tie, heads, head_dim, window fields, eos ids).
"""

from __future__ import annotations

import copy
from typing import Any

_L2 = {"architectures": ["LlamaForCausalLM"], "bos_token_id": 1, "eos_token_id": 2, "hidden_act": "silu",
       "hidden_size": 4096, "initializer_range": 0.02, "intermediate_size": 11008, "max_position_embeddings": 4096,
       "model_type": "llama", "num_attention_heads": 32, "num_hidden_layers": 32, "num_key_value_heads": 32,
       "pretraining_tp": 1, "rms_norm_eps": 1e-05, "rope_scaling": None, "tie_word_embeddings": False,
       "torch_dtype": "float16", "transformers_version": "4.31.0.dev0", "use_cache": True, "vocab_size": 32000}
_L31 = {"architectures": ["LlamaForCausalLM"], "attention_bias": False, "attention_dropout": 0.0,
        "bos_token_id": 128000, "eos_token_id": 128001, "hidden_act": "silu", "hidden_size": 4096,
        "initializer_range": 0.02, "intermediate_size": 14336, "max_position_embeddings": 131072,
        "mlp_bias": False, "model_type": "llama", "num_attention_heads": 32, "num_hidden_layers": 32,
        "num_key_value_heads": 8, "pretraining_tp": 1, "rms_norm_eps": 1e-05,
        "rope_scaling": {"factor": 8.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0,
                         "original_max_position_embeddings": 8192, "rope_type": "llama3"},
        "rope_theta": 500000.0, "tie_word_embeddings": False, "torch_dtype": "bfloat16",
        "transformers_version": "4.43.0.dev0", "use_cache": True, "vocab_size": 128256}
_SMOL = {"architectures": ["LlamaForCausalLM"], "attention_bias": False, "attention_dropout": 0.0,
         "bos_token_id": 0, "eos_token_id": 0, "head_dim": 64, "hidden_act": "silu", "hidden_size": 576,
         "initializer_range": 0.041666666666666664, "intermediate_size": 1536, "is_llama_config": True,
         "max_position_embeddings": 8192, "mlp_bias": False, "model_type": "llama", "num_attention_heads": 9,
         "num_hidden_layers": 30, "num_key_value_heads": 3, "pretraining_tp": 1, "rms_norm_eps": 1e-05,
         "rope_interleaved": False, "rope_scaling": None, "rope_theta": 100000, "tie_word_embeddings": True,
         "torch_dtype": "bfloat16", "transformers_version": "4.42.3", "use_cache": True, "vocab_size": 49152}
_MISTRAL = {"architectures": ["MistralForCausalLM"], "bos_token_id": 1, "eos_token_id": 2, "hidden_act": "silu",
            "hidden_size": 4096, "initializer_range": 0.02, "intermediate_size": 14336,
            "max_position_embeddings": 32768, "model_type": "mistral", "num_attention_heads": 32,
            "num_hidden_layers": 32, "num_key_value_heads": 8, "rms_norm_eps": 1e-05, "rope_theta": 10000.0,
            "sliding_window": 4096, "tie_word_embeddings": False, "torch_dtype": "bfloat16",
            "transformers_version": "4.34.0.dev0", "use_cache": True, "vocab_size": 32000}
_QWEN25 = {"architectures": ["Qwen2ForCausalLM"], "attention_dropout": 0.0, "bos_token_id": 151643,
           "eos_token_id": 151643, "hidden_act": "silu", "hidden_size": 896, "initializer_range": 0.02,
           "intermediate_size": 4864, "max_position_embeddings": 32768, "max_window_layers": 24,
           "model_type": "qwen2", "num_attention_heads": 14, "num_hidden_layers": 24, "num_key_value_heads": 2,
           "rms_norm_eps": 1e-06, "rope_theta": 1000000.0, "sliding_window": 32768, "tie_word_embeddings": True,
           "torch_dtype": "bfloat16", "transformers_version": "4.40.1", "use_cache": True,
           "use_mrope": False, "use_sliding_window": False, "vocab_size": 151936}
_QWEN3 = {"architectures": ["Qwen3ForCausalLM"], "attention_bias": False, "attention_dropout": 0.0,
          "bos_token_id": 151643, "eos_token_id": 151645, "head_dim": 128, "hidden_act": "silu",
          "hidden_size": 1024, "initializer_range": 0.02, "intermediate_size": 3072,
          "max_position_embeddings": 40960, "max_window_layers": 28, "model_type": "qwen3",
          "num_attention_heads": 16, "num_hidden_layers": 28, "num_key_value_heads": 8, "rms_norm_eps": 1e-06,
          "rope_scaling": None, "rope_theta": 1000000, "sliding_window": None, "tie_word_embeddings": True,
          "torch_dtype": "bfloat16", "transformers_version": "4.51.0", "use_cache": True,
          "use_sliding_window": False, "vocab_size": 151936}

_PHI3_MINI = {"_name_or_path": "Phi-3-mini-4k-instruct", "architectures": ["Phi3ForCausalLM"],
              "attention_bias": False, "attention_dropout": 0.0,
              "auto_map": {"AutoConfig": "configuration_phi3.Phi3Config",
                           "AutoModelForCausalLM": "modeling_phi3.Phi3ForCausalLM"},
              "bos_token_id": 1, "embd_pdrop": 0.0, "eos_token_id": 32000, "hidden_act": "silu",
              "hidden_size": 3072, "initializer_range": 0.02, "intermediate_size": 8192,
              "max_position_embeddings": 4096, "model_type": "phi3", "num_attention_heads": 32,
              "num_hidden_layers": 32, "num_key_value_heads": 32, "original_max_position_embeddings": 4096,
              "pad_token_id": 32000, "resid_pdrop": 0.0, "rms_norm_eps": 1e-05, "rope_scaling": None,
              "rope_theta": 10000.0, "sliding_window": 2047, "tie_word_embeddings": False,
              "torch_dtype": "bfloat16", "transformers_version": "4.40.2", "use_cache": True, "vocab_size": 32064}
_PHI4 = {"_name_or_path": "microsoft/phi-4", "architectures": ["Phi3ForCausalLM"], "attention_bias": False,
         "attention_dropout": 0.0, "auto_map": {}, "bos_token_id": 100257, "embd_pdrop": 0.0,
         "eos_token_id": 100257, "hidden_act": "silu", "hidden_size": 5120, "initializer_range": 0.02,
         "intermediate_size": 17920, "max_position_embeddings": 16384, "model_type": "phi3",
         "num_attention_heads": 40, "num_hidden_layers": 40, "num_key_value_heads": 10,
         "original_max_position_embeddings": 16384, "pad_token_id": 100257, "resid_pdrop": 0.0,
         "rms_norm_eps": 1e-05, "rope_scaling": None, "rope_theta": 250000, "sliding_window": None,
         "tie_word_embeddings": False, "torch_dtype": "bfloat16", "transformers_version": "4.47.0",
         "use_cache": True, "vocab_size": 100352}


def _with(base: dict[str, Any], drop: tuple[str, ...] = (), **changes: Any) -> dict[str, Any]:
    out = {k: copy.deepcopy(v) for k, v in base.items() if k not in drop}
    out.update(changes)
    return dict(sorted(out.items()))


PUBLISHED: dict[str, dict[str, Any]] = {
    "Llama-2-7b-hf": _L2,
    "vicuna-7b-v1.5": _with(_L2, pad_token_id=0, transformers_version="4.31.0"),
    "vicuna-7b-v1.5-16k": _with(_L2, rope_scaling={"factor": 4.0, "type": "linear"}, pad_token_id=0),
    "CodeLlama-7b-hf": _with(_L2, max_position_embeddings=16384, rope_theta=1000000, vocab_size=32016,
                             torch_dtype="bfloat16", transformers_version="4.33.0.dev0"),
    "TinyLlama-1.1B-Chat-v1.0": _with(_L2, hidden_size=2048, intermediate_size=5632, max_position_embeddings=2048,
                                      num_hidden_layers=22, num_key_value_heads=4, rope_theta=10000.0,
                                      torch_dtype="bfloat16", transformers_version="4.35.0"),
    "Meta-Llama-3-8B": _with(_L31, drop=("mlp_bias",), max_position_embeddings=8192, rope_scaling=None,
                             transformers_version="4.40.0.dev0"),
    "Llama-3.1-8B": _L31,
    "Llama-3.1-8B-Instruct": _with(_L31, eos_token_id=[128001, 128008, 128009]),
    "DeepSeek-R1-Distill-Llama-8B": _with(_L31, transformers_version="4.43.0.dev0"),
    "Llama-3.2-1B": _with(_L31, head_dim=64, hidden_size=2048, intermediate_size=8192, num_hidden_layers=16,
                          rope_scaling={"factor": 32.0, "high_freq_factor": 4.0, "low_freq_factor": 1.0,
                                        "original_max_position_embeddings": 8192, "rope_type": "llama3"},
                          tie_word_embeddings=True, transformers_version="4.45.0.dev0"),
    "Llama-3.2-3B-Instruct": _with(_L31, head_dim=128, hidden_size=3072, intermediate_size=8192,
                                   num_attention_heads=24, num_hidden_layers=28, eos_token_id=[128001, 128008, 128009],
                                   rope_scaling={"factor": 32.0, "high_freq_factor": 4.0, "low_freq_factor": 1.0,
                                                 "original_max_position_embeddings": 8192, "rope_type": "llama3"},
                                   tie_word_embeddings=True, transformers_version="4.45.0.dev0"),
    "SmolLM2-135M": _SMOL,
    "SmolLM2-360M": _with(_SMOL, hidden_size=960, intermediate_size=2560, num_attention_heads=15,
                          num_hidden_layers=32, num_key_value_heads=5, initializer_range=0.02),
    "SmolLM2-1.7B": _with(_SMOL, drop=("head_dim",), hidden_size=2048, intermediate_size=8192,
                          num_attention_heads=32, num_hidden_layers=24, num_key_value_heads=32, rope_theta=130000,
                          initializer_range=0.02),
    "Mistral-7B-v0.1": _MISTRAL,
    "Mistral-7B-v0.3": _with(_MISTRAL, rope_theta=1000000.0, sliding_window=None, vocab_size=32768,
                             transformers_version="4.42.0.dev0"),
    "Mistral-Nemo-Base-2407": _with(_MISTRAL, attention_dropout=0.0, head_dim=128, hidden_size=5120,
                                    max_position_embeddings=1024000, num_hidden_layers=40, rope_theta=1000000.0,
                                    sliding_window=None, vocab_size=131072, transformers_version="4.43.0.dev0"),
    "Qwen2-0.5B": _with(_QWEN25, drop=("use_mrope",), max_position_embeddings=131072, sliding_window=131072),
    "Qwen2.5-0.5B": _QWEN25,
    "Qwen2.5-1.5B-Instruct": _with(_QWEN25, drop=("use_mrope",), eos_token_id=151645, hidden_size=1536,
                                   intermediate_size=8960, max_window_layers=21, num_attention_heads=12,
                                   num_hidden_layers=28, transformers_version="4.43.1"),
    "Qwen2.5-1.5B (transformers 5 layout)": _with(
        _QWEN25, drop=("use_mrope", "rope_theta", "torch_dtype"), dtype="bfloat16", hidden_size=1536,
        intermediate_size=8960, max_window_layers=21, num_attention_heads=12, num_hidden_layers=28,
        layer_types=["full_attention"] * 28, rope_parameters={"rope_theta": 1000000.0, "rope_type": "default"},
        sliding_window=None, pad_token_id=None, transformers_version="5.7.0"),
    "Qwen2.5-7B": _with(_QWEN25, hidden_size=3584, intermediate_size=18944, max_position_embeddings=131072,
                        max_window_layers=28, num_attention_heads=28, num_hidden_layers=28, num_key_value_heads=4,
                        sliding_window=131072, tie_word_embeddings=False),
    "DeepSeek-R1-Distill-Qwen-1.5B": _with(_QWEN25, hidden_size=1536, intermediate_size=8960,
                                           max_position_embeddings=131072, max_window_layers=21,
                                           num_attention_heads=12, num_hidden_layers=28, rope_theta=10000,
                                           sliding_window=4096, tie_word_embeddings=False,
                                           transformers_version="4.44.0"),
    "Qwen3-0.6B": _QWEN3,
    "Qwen3-4B": _with(_QWEN3, hidden_size=2560, intermediate_size=9728, max_window_layers=36,
                      num_attention_heads=32, num_hidden_layers=36),
    "Qwen3-8B": _with(_QWEN3, hidden_size=4096, intermediate_size=12288, max_window_layers=36,
                      num_attention_heads=32, num_hidden_layers=36, tie_word_embeddings=False),
    "Phi-3-mini-4k-instruct": _PHI3_MINI,
    "phi-4": _PHI4,
}

LAYERS, VOCAB, HEAD = 3, 128, 16


def _heads(cfg: dict[str, Any]) -> tuple[int, int]:
    """(heads, kv heads) with the published GQA ratio (7 for Qwen2.5-0.5B), at most 8 query heads."""
    heads = cfg["num_attention_heads"]
    kv = cfg.get("num_key_value_heads") or heads
    ratio = heads // kv
    kv_small = 1 if ratio > 4 else 2
    return kv_small * ratio, kv_small


def _ids(value: Any) -> Any:
    """A token id (or list of them) mapped into the small vocabulary, keeping distinct ids distinct."""
    if isinstance(value, list):
        return [_ids(v) for v in value]
    return None if value is None else VOCAB - 1 - (value % 17)


def scale_down(cfg: dict[str, Any], window: int = 8, original_len: int = 16) -> dict[str, Any]:
    """The same file with small dims: `LAYERS` layers, head width `HEAD`, hidden_size keeping the published
    hidden_size / heads : head_dim ratio; a sliding window of `window` tokens and a llama3 original context of
    `original_len` (so both act on a 24-token test); max_window_layers keeping its side of num_hidden_layers."""
    out = copy.deepcopy(cfg)
    heads, kv = _heads(cfg)
    per_head = cfg["hidden_size"] / cfg["num_attention_heads"]
    out.update(num_attention_heads=heads, num_key_value_heads=kv, num_hidden_layers=LAYERS, intermediate_size=48,
               vocab_size=VOCAB, max_position_embeddings=64)
    if "num_key_value_heads" not in cfg:
        del out["num_key_value_heads"]
    explicit = cfg.get("head_dim")
    out["hidden_size"] = int(round(heads * HEAD * per_head / explicit)) if explicit else heads * HEAD
    if explicit:
        out["head_dim"] = HEAD
    for key in ("bos_token_id", "eos_token_id", "pad_token_id"):
        if key in cfg:
            out[key] = _ids(cfg[key])
    if cfg.get("sliding_window"):
        out["sliding_window"] = window
    if "max_window_layers" in cfg:
        out["max_window_layers"] = LAYERS if cfg["max_window_layers"] >= cfg["num_hidden_layers"] else 1
    if "layer_types" in cfg:
        kinds = cfg["layer_types"]
        out["layer_types"] = [kinds[0]] * (LAYERS - 1) + [kinds[-1]]
    for key in ("rope_scaling", "rope_parameters"):
        if isinstance(cfg.get(key), dict) and "original_max_position_embeddings" in cfg[key]:
            out[key]["original_max_position_embeddings"] = original_len
    return out
