"""What a `config.json` of each supported family means, read the way the installed transformers reads it.

transformers fills an absent key from the family's config class, not from a common default, and each family's
modeling code ignores some keys the others honour. Reading a published checkpoint exactly therefore needs the
per-family rules this module owns:

- **absent keys** take the class default (`DEFAULTS`): Qwen3's `head_dim` is 128 whatever hidden_size / heads
  is; Mistral's `sliding_window` is 4096 and its kv heads 8; Qwen2/3 have 32 kv heads; `max_position_embeddings`
  differs per family. A key present as `null` means "derived" (kv heads = heads, head_dim = hidden / heads).
- **ignored keys**: Mistral builds no biases whatever `attention_bias`/`mlp_bias` say and ignores
  `layer_types`/`use_sliding_window`; Qwen2 always has q/k/v biases (never o_proj's) and no MLP bias; Llama has no
  sliding window; `pretraining_tp` changes nothing in transformers' math (it only split matmuls once).
- **sliding windows** of Qwen2/Qwen3: only when `use_sliding_window` is true, then only on the layers
  `layer_types` marks (by default layers ≥ `max_window_layers`); forgeline takes "no layer" and "every layer".
- **RoPE**: `rope_scaling` (the 4.x key) wins over `rope_parameters`; `type` is the old name of `rope_type`;
  `rope_theta` inside the dict wins over the top-level one; llama3's and yarn's original context is a top-level
  `original_max_position_embeddings` when the file has one (transformers gives it priority), else the dict's, else
  `max_position_embeddings`. default, linear, llama3, yarn and dynamic are taken (dynamic NTK equals plain RoPE
  at positions below `max_position_embeddings`, the only ones forgeline trains at); longrope and others are
  refused.
- **Phi-3** (`phi3`: Phi-3-mini/medium-4k, Phi-4, Phi-4-reasoning) is Llama's math with q/k/v stored as one
  `qkv_proj` and gate/up as one `gate_up_proj` (`FUSED`, rows part after part); its class defaults are MHA,
  eps 1e-5, 4096 positions and no window; a `sliding_window` applies to every layer (as Mistral's). Its
  config class reads RoPE type `su` and `yarn` as `longrope` (Phi-3-mini-128k, Phi-3.5, Phi-4-mini), refused
  here, and allows no other scaling. Its `resid_pdrop` (on the attention and MLP outputs) and
  `attention_dropout` (on the attention weights) have no exact counterpart in forgeline's one `dropout`, which
  acts on all three: a file stating either nonzero is refused (published ones state 0); `embd_pdrop` is read by
  no transformers 5 model code and is ignored as there.

A `quantization_config` (FP8, GPTQ, AWQ, bitsandbytes: scale tensors forgeline would drop) and an `architectures`
list naming no `...ForCausalLM` class are refused too. Every refusal is an `HFImportError` naming the file and the
field.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

SUPPORTED = ("llama", "mistral", "qwen2", "qwen3", "phi3")
DERIVED = None  # the value a key takes when it is derived from others (kv heads = heads, head_dim = hidden/heads)
# transformers 5's class defaults for the keys a published file may leave out (tests/test_hf_published.py checks
# them against the installed config classes)
DEFAULTS: dict[str, dict[str, Any]] = {
    "llama": {"num_key_value_heads": DERIVED, "head_dim": DERIVED, "max_position_embeddings": 2048},
    "mistral": {"num_key_value_heads": 8, "head_dim": DERIVED, "max_position_embeddings": 4096 * 32,
                "sliding_window": 4096},
    "qwen2": {"num_key_value_heads": 32, "head_dim": DERIVED, "max_position_embeddings": 32768,
              "sliding_window": 4096, "max_window_layers": 28},
    "qwen3": {"num_key_value_heads": 32, "head_dim": 128, "max_position_embeddings": 32768,
              "sliding_window": 4096, "max_window_layers": 28},
    "phi3": {"num_key_value_heads": DERIVED, "head_dim": DERIVED, "max_position_embeddings": 4096,
             "sliding_window": None, "rms_norm_eps": 1e-5},
}
EPS = 1e-6  # rms_norm_eps of the families whose DEFAULTS do not name one
# Families storing several projections as one tensor: HF module -> the unfused modules whose rows it stacks, in
# row order (Phi-3's modeling splits qkv_proj's output at heads·hd and heads·hd + kv·hd, and chunks gate_up_proj's
# in two, gate first)
FUSED: dict[str, dict[str, tuple[str, ...]]] = {
    "phi3": {"self_attn.qkv_proj": ("self_attn.q_proj", "self_attn.k_proj", "self_attn.v_proj"),
             "mlp.gate_up_proj": ("mlp.gate_proj", "mlp.up_proj")},
}
PHI3_LONGROPE = ("longrope", "su", "yarn")  # Phi3Config renames the last two to longrope
PHI3_DROPOUTS = ("resid_pdrop", "attention_dropout")
ROPE_SUPPORTED = ("default", "linear", "dynamic", "llama3", "yarn")
SILU = ("silu", "swish")  # transformers' ACT2FN maps both to SiLU


class HFImportError(ValueError):
    """A checkpoint forgeline cannot start from; the message names the file and the field or tensor."""


def family_value(cfg: dict[str, Any], kind: str, key: str) -> Any:
    """`key` as transformers' config class of `kind` sees it: the file's value, else the class default."""
    return cfg[key] if key in cfg else DEFAULTS[kind].get(key)


def stated_positions(cfg: dict[str, Any]) -> tuple[int | None, str]:
    """(the context length the checkpoint's config.json states, how it states it): its `max_position_embeddings`,
    else — absent or null — its family's class default, which transformers would use (Llama's 2048, Qwen's 32768),
    said so in the wording an error shows; (None, ...) for a model_type this module does not know. The value is
    expected checked (`hf_files.check_config_int`); an unchecked -5, 2.5 or `true` is never returned as a length."""
    value = cfg.get("max_position_embeddings")
    if isinstance(value, int) and not isinstance(value, bool) and value > 0:  # callers check it first (hf_files)
        return value, "max_position_embeddings"
    kind = cfg.get("model_type")
    default = DEFAULTS.get(kind, {}).get("max_position_embeddings") if isinstance(kind, str) else None
    how = f"max_position_embeddings (not in the file: {kind}'s default, as transformers reads it)"
    return (int(default), how) if default else (None, "max_position_embeddings")


def refuse_unsupported(cfg: dict[str, Any], kind: str, where: Path) -> None:
    """Refuse what this family's transformers model would compute and forgeline's decoder cannot."""
    if cfg.get("hidden_act", "silu") not in SILU:
        raise HFImportError(f"{where}: hidden_act `{cfg['hidden_act']}` is not supported (SwiGLU uses silu)")
    if kind == "llama" and cfg.get("mlp_bias"):
        raise HFImportError(f"{where}: mlp_bias true is not supported (forgeline's MLP has no biases)")
    if kind in ("llama", "qwen3") and cfg.get("attention_bias"):
        raise HFImportError(f"{where}: attention_bias true is not supported for {kind} (it puts a bias on o_proj "
                            "too; forgeline's attention has q/k/v biases only, as qwen2's)")
    if cfg.get("quantization_config") is not None:
        # its weights are integers or 8-bit floats with scale tensors beside them, which forgeline would drop
        method = cfg["quantization_config"].get("quant_method") if isinstance(cfg["quantization_config"], dict) \
            else cfg["quantization_config"]
        raise HFImportError(f"{where}: quantization_config (quant_method `{str(method)[:40]}`) is not supported: "
                            "forgeline trains full-precision weights; use the unquantized checkpoint")
    refuse_not_causal(cfg, where)
    if kind == "phi3":
        refuse_phi3(cfg, where)


def refuse_not_causal(cfg: dict[str, Any], where: Path) -> None:
    """Refuse a file whose `architectures` names no `...ForCausalLM` class (a `...ForSequenceClassification` stores
    a `score.weight` head, not `lm_head.weight`): transformers' AutoModelForCausalLM would give it a random head."""
    names = cfg.get("architectures")
    if isinstance(names, list) and names and not any(isinstance(n, str) and n.endswith("ForCausalLM") for n in names):
        raise HFImportError(f"{where}: architectures {names!r:.120} names no ...ForCausalLM class: not a causal "
                            "language model (e.g. a classification head), which is all forgeline imports")


def refuse_phi3(cfg: dict[str, Any], where: Path) -> None:
    """What Phi3Config reads differently from the other families: RoPE types (only default; longrope under any of
    its names refused) and the dropouts forgeline cannot reproduce (module docstring)."""
    key = "rope_scaling" if cfg.get("rope_scaling") else "rope_parameters"  # the 4.x key wins, as in rope_fields
    params = cfg.get(key) if isinstance(cfg.get(key), dict) else {}
    kind = params.get("rope_type", params.get("type", "default"))
    if kind in PHI3_LONGROPE:
        raise HFImportError(f"{where}: {key}'s rope type `{kind}` is longrope for phi3 (Phi3Config renames su and "
                            "yarn to it): not supported (Phi-3-mini-128k, Phi-3.5 and Phi-4-mini use it; the 4k "
                            "Phi-3 models and Phi-4 do not)")
    if kind != "default":
        raise HFImportError(f"{where}: {key}'s rope type `{kind}` is not supported for phi3 (transformers' "
                            "Phi3Config takes default and longrope only)")
    for key in PHI3_DROPOUTS:
        value = cfg.get(key, 0.0)
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0 <= value < 1:
            raise HFImportError(f"{where}: `{key}` must be a number in [0, 1), got {value!r:.60}")
        if value:
            raise HFImportError(f"{where}: {key} {value} is not supported: forgeline's one `dropout` acts on the "
                                "attention weights and on the attention and MLP outputs alike, transformers' Phi-3 "
                                "drops the weights by attention_dropout and the outputs by resid_pdrop; set both to "
                                "0 in config.json (as published Phi-3 and Phi-4 files state) and choose "
                                "`model.dropout` / `sft.dropout` in params.yaml")


def sliding_window(cfg: dict[str, Any], kind: str, where: Path) -> int | None:
    """The window every layer uses (None: full attention), as transformers' model of `kind` applies it."""
    if kind in ("mistral", "phi3"):  # both mask every layer by their window (none when null)
        window = family_value(cfg, kind, "sliding_window")
        return int(window) if window else None
    if kind == "llama":
        return None
    window = family_value(cfg, kind, "sliding_window") if cfg.get("use_sliding_window") else None
    n_layers = int(cfg["num_hidden_layers"])
    first = int(family_value(cfg, kind, "max_window_layers"))
    types = cfg.get("layer_types") or ["sliding_attention" if window is not None and i >= first else
                                       "full_attention" for i in range(n_layers)]
    unknown = sorted(set(types) - {"full_attention", "sliding_attention"})
    if unknown:
        raise HFImportError(f"{where}: layer_types `{unknown[0]}` is not supported (full_attention, "
                            "sliding_attention)")
    sliding = [i for i, t in enumerate(types) if t == "sliding_attention"]
    if not sliding:
        return None
    if window is None:
        raise HFImportError(f"{where}: layer_types marks layers {sliding} sliding_attention but use_sliding_window "
                            "is false (no window): not supported")
    if len(sliding) != len(types):
        raise HFImportError(f"{where}: use_sliding_window true with max_window_layers {first} / layer_types gives "
                            f"a window on layers {sliding} only; per-layer windows are not supported (only every "
                            "layer or none)")
    return int(window)


def rope_fields(cfg: dict[str, Any], where: Path, max_positions: int) -> dict[str, Any]:
    """ModelConfig's RoPE fields from `rope_scaling` (4.x) or `rope_parameters` (5.x) and `rope_theta`
    (`max_positions`: the file's max_position_embeddings, llama3's original context when it names none)."""
    params = dict(cfg.get("rope_scaling") or cfg.get("rope_parameters") or {})
    if any(isinstance(v, dict) for v in params.values()):
        raise HFImportError(f"{where}: per-layer-type RoPE parameters are not supported")
    theta = float(params.get("rope_theta", cfg.get("rope_theta", 10_000.0)))
    kind = params.get("rope_type", params.get("type", "default"))
    partial = params.get("partial_rotary_factor", cfg.get("partial_rotary_factor", 1.0))
    if partial not in (None, 1, 1.0):
        raise HFImportError(f"{where}: partial_rotary_factor {partial} is not supported (RoPE on every dim only)")
    if kind not in ROPE_SUPPORTED:
        raise HFImportError(f"{where}: rope scaling type `{kind}` is not supported (supported: "
                            f"{', '.join(ROPE_SUPPORTED)})")
    if kind == "default":
        return {"rope_theta": theta}
    original = int(original_context(cfg, params, kind, where) or max_positions)
    try:
        if kind == "yarn":
            return {"rope_theta": theta, **yarn_fields(params, original, max_positions)}
        out = {"rope_theta": theta, "rope_type": kind, "rope_factor": float(params["factor"])}
        if kind == "llama3":
            out.update(rope_low_freq_factor=float(params["low_freq_factor"]),
                       rope_high_freq_factor=float(params["high_freq_factor"]), rope_original_max_len=original)
    except KeyError as exc:
        raise HFImportError(f"{where}: {kind} rope scaling lacks `{exc.args[0]}`") from None
    if kind == "llama3" and out["rope_high_freq_factor"] <= out["rope_low_freq_factor"]:
        # the blend divides by high - low: equal factors gave inf/NaN frequencies (transformers only warns)
        raise HFImportError(f"{where}: llama3 rope scaling's high_freq_factor ({out['rope_high_freq_factor']}) "
                            f"must be greater than its low_freq_factor ({out['rope_low_freq_factor']})")
    return out


def original_context(cfg: dict[str, Any], params: dict[str, Any], kind: str, where: Path) -> Any:
    """The pretraining context llama3 / yarn scale from: a top-level `original_max_position_embeddings` wins over
    the RoPE dict's, as transformers' `standardize_rope_params` gives it priority for these types (it is Phi-3's
    key, which the other families' configs keep as a plain attribute, so a file may state both); a top-level
    null is refused (transformers then divides by None)."""
    key = "original_max_position_embeddings"
    if kind not in ("llama3", "yarn") or key not in cfg:
        return params.get(key)
    value = cfg[key]
    if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
        raise HFImportError(f"{where}: top-level `{key}` must be a positive integer, got {value!r:.60} "
                            f"(transformers reads it in place of {kind} rope scaling's own)")
    return value


def yarn_mscale(factor: float, mscale: float = 1.0) -> float:
    """YaRN's attention scale for a context `factor` times longer (Eq. 21 of the paper: 0.1·mscale·ln(factor) + 1)."""
    return 1.0 if factor <= 1 else 0.1 * mscale * math.log(factor) + 1.0


def yarn_fields(params: dict[str, Any], original: int, max_positions: int) -> dict[str, Any]:
    """YaRN's ModelConfig fields as transformers derives them: a missing factor is max / original positions; the
    attention factor is the file's, else mscale/mscale_all_dim's ratio, else `yarn_mscale(factor)`; beta_fast,
    beta_slow default to 32 and 1 (also when null), truncate to true; the original context defaults (as
    transformers standardises it) to max_position_embeddings. These four families never rescale the softmax by
    mscale_all_dim (only DeepSeek's models do)."""
    factor = params.get("factor") or max_positions / original
    attention = params.get("attention_factor")
    if attention is None:
        mscale, all_dims = params.get("mscale"), params.get("mscale_all_dim")
        attention = (yarn_mscale(factor, mscale) / yarn_mscale(factor, all_dims) if mscale and all_dims
                     else yarn_mscale(factor))
    return {"rope_type": "yarn", "rope_factor": float(factor), "rope_original_max_len": original,
            "rope_beta_fast": float(params.get("beta_fast") or 32), "rope_beta_slow": float(params.get("beta_slow") or 1),
            "rope_truncate": bool(params.get("truncate", True)), "rope_attention_factor": float(attention)}
