"""Hugging Face export: forgeline's decoder as a `LlamaForCausalLM` folder (or its imported checkpoint's family),
plus tokenizer and model card.

forgeline's `Transformer` is architecturally a Llama: RMSNorm (fp32 statistics, weight applied after the cast
back), RoPE in the rotate-half convention (first half / second half of each head, *not* interleaved pairs),
grouped-query attention whose kv head j serves query heads j·rep .. j·rep + rep - 1 (the same order as HF's
`repeat_kv`), SwiGLU `w2(silu(w1 x) · w3 x)` and no biases. Hence the mapping is a pure renaming: q/k need
**no** permutation. (HF's own Meta → HF converter permutes q/k only because Meta's checkpoints rotate
interleaved pairs; ours already rotate halves.) `verify_hf` proves this numerically on every export.

    forgeline key                       HF key
    layers.0.weight                     model.embed_tokens.weight
    layers.{i}.attn_norm.weight         model.layers.{i-1}.input_layernorm.weight
    layers.{i}.attn.w{q,k,v,o}.weight   model.layers.{i-1}.self_attn.{q,k,v,o}_proj.weight
    layers.{i}.mlp_norm.weight          model.layers.{i-1}.post_attention_layernorm.weight
    layers.{i}.mlp.w1/w3/w2.weight      model.layers.{i-1}.mlp.gate_proj/up_proj/down_proj.weight
    layers.{N+1}.weight                 model.norm.weight
    layers.{N+2}.weight (untied only)   lm_head.weight

Phi-3 (`phi3`) stores q/k/v as rows of one `self_attn.qkv_proj` and gate/up as rows of one `mlp.gate_up_proj`
(`hf_families.FUSED`): `hf_refs` says which rows of which tensor hold each forgeline tensor, import reads those
rows (a tensor-parallel rank only its share of them) and export concatenates the parts back.

Determinism: every JSON file is key-sorted, the tokenizer files are written by hand (not `save_pretrained`,
whose output varies across transformers versions), safetensors gets tensors in sorted-name order with fixed
metadata, and the card carries no timestamps. Same inputs → byte-identical folder.

Atomicity: the folder is assembled under a temp name beside `out_dir` and renamed into place, so a killed
export never leaves a half-written model that `from_pretrained` would happily load. `out_dir` is owned
entirely by `export_hf` (the stage should pass a sub-folder such as data/export/hf, not data/export).
"""

from __future__ import annotations

import os
import shutil
import tempfile
from pathlib import Path
from typing import Any, NamedTuple

import torch

from tasks.core.files import TEMP_MARK, atomic_path, sha256_file, write_json_atomic, write_text_atomic
from specs.architecture import ModelConfig, param_count
from tasks.train.hf.hf_card import render_card
from tasks.train.hf.hf_families import FUSED
from tasks.train.hf.hf_generation import EndIds, chat_templates, check_end_ids, end_ids, generation_config, stated_ids
from tasks.train.modeling.model import Transformer, head_index

DEFAULT_TOL = 1e-4
SPECIAL_KEYS = ("bos_token", "eos_token", "pad_token", "unk_token")
DEFAULT_PAD = "<|pad|>"  # the mix stage's default padding token; used when present and no pad is named
_ATTN = {"wq": "q_proj", "wk": "k_proj", "wv": "v_proj", "wo": "o_proj"}
_MLP = {"w1": "gate_proj", "w3": "up_proj", "w2": "down_proj"}


class ExportMismatch(ValueError):
    """The exported model does not reproduce forgeline's logits (or did not load cleanly)."""


# ------------------------------------------------------------------------------------------------ weights
class HFRef(NamedTuple):
    """Where a forgeline tensor lives in a Hugging Face checkpoint: tensor `name`, all of it, or rows
    [start, stop) of its `rows` when it is one part of a fused tensor (Phi-3's qkv_proj, gate_up_proj)."""
    name: str
    start: int = 0
    stop: int | None = None
    rows: int | None = None


def key_map(cfg: ModelConfig) -> dict[str, str]:
    """forgeline state-dict key -> the HF tensor holding it, for every parameter the config implies (Llama /
    Mistral / Qwen2 / Qwen3 names: the same modules, plus q/k/v biases and q/k norms where the config has them;
    Phi-3: several keys map to one fused tensor, `hf_refs` says which rows)."""
    return {ours: ref.name for ours, ref in hf_refs(cfg).items()}


def hf_refs(cfg: ModelConfig) -> dict[str, HFRef]:
    """forgeline state-dict key -> `HFRef`: the whole tensor of the family's layout, or for a family that fuses
    projections (`hf_families.FUSED`) the part's row range of the fused tensor."""
    names = _plain_names(cfg)
    refs = {ours: HFRef(hf) for ours, hf in names.items()}
    fused = FUSED.get(cfg.hf_model_type or "")
    if not fused:
        return refs
    shapes, ours_of = _expected_shapes(cfg), {hf: ours for ours, hf in names.items()}
    for k in range(cfg.n_layers):
        for whole, parts in fused.items():
            plain = [f"model.layers.{k}.{part}.weight" for part in parts]
            total, start = sum(shapes[hf][0] for hf in plain), 0
            for hf in plain:
                stop = start + shapes[hf][0]
                refs[ours_of[hf]] = HFRef(f"model.layers.{k}.{whole}.weight", start, stop, total)
                start = stop
    return refs


def _plain_names(cfg: ModelConfig) -> dict[str, str]:
    """forgeline key -> HF key of the unfused (Llama) layout."""
    m = {"layers.0.weight": "model.embed_tokens.weight",
         f"layers.{cfg.n_layers + 1}.weight": "model.norm.weight"}
    for i in range(1, cfg.n_layers + 1):
        src, dst = f"layers.{i}", f"model.layers.{i - 1}"
        m[f"{src}.attn_norm.weight"] = f"{dst}.input_layernorm.weight"
        m[f"{src}.mlp_norm.weight"] = f"{dst}.post_attention_layernorm.weight"
        m.update({f"{src}.attn.{a}.weight": f"{dst}.self_attn.{b}.weight" for a, b in _ATTN.items()})
        m.update({f"{src}.mlp.{a}.weight": f"{dst}.mlp.{b}.weight" for a, b in _MLP.items()})
        if cfg.attn_bias:
            m.update({f"{src}.attn.{a}.bias": f"{dst}.self_attn.{_ATTN[a]}.bias" for a in ("wq", "wk", "wv")})
        if cfg.qk_norm:
            m.update({f"{src}.attn.{a}_norm.weight": f"{dst}.self_attn.{a}_norm.weight" for a in ("q", "k")})
    if not cfg.tie_embeddings:
        m[f"layers.{head_index(cfg)}.weight"] = "lm_head.weight"
    return m


def _expected_shapes(cfg: ModelConfig) -> dict[str, tuple[int, ...]]:
    """HF key of the unfused layout -> shape, so a config/state mismatch fails here with names instead of inside
    transformers."""
    d, hd, f, v = cfg.d_model, cfg.head_dim, cfg.ffn_hidden, cfg.vocab_size
    per = {"input_layernorm.weight": (d,), "post_attention_layernorm.weight": (d,),
           "self_attn.q_proj.weight": (cfg.n_heads * hd, d), "self_attn.k_proj.weight": (cfg.n_kv_heads * hd, d),
           "self_attn.v_proj.weight": (cfg.n_kv_heads * hd, d), "self_attn.o_proj.weight": (d, cfg.n_heads * hd),
           "mlp.gate_proj.weight": (f, d), "mlp.up_proj.weight": (f, d), "mlp.down_proj.weight": (d, f)}
    if cfg.attn_bias:
        per.update({"self_attn.q_proj.bias": (cfg.n_heads * hd,), "self_attn.k_proj.bias": (cfg.n_kv_heads * hd,),
                    "self_attn.v_proj.bias": (cfg.n_kv_heads * hd,)})
    if cfg.qk_norm:
        per.update({"self_attn.q_norm.weight": (hd,), "self_attn.k_norm.weight": (hd,)})
    shapes = {"model.embed_tokens.weight": (v, d), "model.norm.weight": (d,)}
    for k in range(cfg.n_layers):
        shapes.update({f"model.layers.{k}.{name}": s for name, s in per.items()})
    if not cfg.tie_embeddings:
        shapes["lm_head.weight"] = (v, d)
    return shapes


def to_hf_state_dict(state: dict[str, torch.Tensor], cfg: ModelConfig) -> dict[str, torch.Tensor]:
    """Rename a consolidated forgeline state dict to HF names (fp32, contiguous, unshared), the parts of a fused
    tensor (`hf_refs`) concatenated in its row order.

    Strict: a missing, unexpected or wrongly shaped tensor raises `KeyError`/`ValueError` naming it. Tensors are
    cloned so none share storage (safetensors refuses shared tensors; a tied head is simply absent, and HF
    re-ties it from `tie_word_embeddings`). Returned in sorted key order.
    """
    refs, plain = hf_refs(cfg), _plain_names(cfg)
    missing = sorted(set(refs) - set(state))
    extra = sorted(set(state) - set(refs))
    if missing or extra:
        raise KeyError(f"state dict does not match the config (tie_embeddings={cfg.tie_embeddings}, "
                       f"n_layers={cfg.n_layers}): missing {missing[:8]}, unexpected {extra[:8]}")
    shapes = _expected_shapes(cfg)
    parts: dict[str, list[tuple[int, torch.Tensor]]] = {}
    for src, ref in refs.items():
        t = state[src]
        if tuple(t.shape) != shapes[plain[src]]:
            rows = f" rows {ref.start}:{ref.stop}" if ref.stop is not None else ""
            raise ValueError(f"{src} -> {ref.name}{rows}: shape {tuple(t.shape)}, config implies "
                             f"{shapes[plain[src]]}")
        parts.setdefault(ref.name, []).append((ref.start, t.detach().to("cpu", torch.float32)))
    return {name: torch.cat([t for _, t in sorted(parts[name], key=lambda p: p[0])]).contiguous().clone()
            for name in sorted(parts)}


FAMILIES = {"llama": "LlamaForCausalLM", "mistral": "MistralForCausalLM", "qwen2": "Qwen2ForCausalLM",
            "qwen3": "Qwen3ForCausalLM", "phi3": "Phi3ForCausalLM"}


def family(cfg: ModelConfig) -> str:
    """The HF model_type that expresses `cfg`: the imported checkpoint's own, else the one its options need
    (q/k norms: qwen3, q/k/v biases: qwen2, a sliding window: mistral, otherwise llama). A combination no family
    has is refused, not dropped; an imported checkpoint's RoPE scaling goes back to its own family (transformers
    applies `rope_parameters` alike in all four), a from-scratch one only to llama."""
    kind = cfg.hf_model_type or ("qwen3" if cfg.qk_norm else "qwen2" if cfg.attn_bias else
                                 "mistral" if cfg.sliding_window else "llama")
    allowed = {"llama": set(), "mistral": {"sliding_window"}, "qwen2": {"attn_bias", "sliding_window"},
               "qwen3": {"qk_norm", "sliding_window"}, "phi3": {"sliding_window"}}
    if kind not in allowed:
        raise ValueError(f"export: model_type {kind!r} is not one of {', '.join(FAMILIES)}")
    used = {name for name, on in (("attn_bias", cfg.attn_bias), ("qk_norm", cfg.qk_norm),
                                  ("sliding_window", cfg.sliding_window)) if on}
    if used - allowed[kind]:
        raise ValueError(f"export: {FAMILIES[kind]} cannot express {', '.join(sorted(used - allowed[kind]))}")
    if cfg.rope_type != "default" and (kind == "phi3" or kind != "llama" and not cfg.hf_model_type):
        raise ValueError(f"export: {cfg.rope_type} RoPE scaling is exported for llama models only (and for "
                         "an imported checkpoint's own family other than phi3, whose config takes none)")
    return kind


def hf_config(cfg: ModelConfig, *, bos_token_id: int | None = None, eos_token_id: EndIds = None,
              pad_token_id: int | None = None, stated: dict[str, Any] | None = None) -> dict[str, Any]:
    """`config.json` for the model's HF family (`family`). Token ids are written even when None (Llama's defaults
    1, 2 would silently apply); eos may be a checkpoint's list (`hf_generation`). RoPE goes in as transformers 5's
    `rope_parameters` and as the legacy `rope_theta` that 4.x, vLLM and llama.cpp converters read. Each family's
    own fields are written explicitly, a windowless Qwen's inert window keys as its checkpoint states them
    (`stated`); scaled RoPE also as the legacy `rope_scaling`, the only key 4.x reads (else: no llama3 scaling)."""
    kind = family(cfg)
    rope: dict[str, Any] = {"rope_type": "default", "rope_theta": cfg.rope_theta}
    if cfg.rope_type != "default":
        rope.update(rope_type=cfg.rope_type, factor=cfg.rope_factor)
    if cfg.rope_type == "llama3":
        rope.update(low_freq_factor=cfg.rope_low_freq_factor, high_freq_factor=cfg.rope_high_freq_factor,
                    original_max_position_embeddings=cfg.rope_original_max_len)
    if cfg.rope_type == "yarn":  # the attention factor written out, not re-derived from mscale keys
        rope.update(original_max_position_embeddings=cfg.rope_original_max_len, beta_fast=cfg.rope_beta_fast,
                    beta_slow=cfg.rope_beta_slow, truncate=cfg.rope_truncate,
                    attention_factor=cfg.rope_attention_factor)
    conf: dict[str, Any] = {
        "architectures": [FAMILIES[kind]], "model_type": kind, "vocab_size": cfg.vocab_size,
        "hidden_size": cfg.d_model, "intermediate_size": cfg.ffn_hidden, "num_hidden_layers": cfg.n_layers,
        "num_attention_heads": cfg.n_heads, "num_key_value_heads": cfg.n_kv_heads, "head_dim": cfg.head_dim,
        "hidden_act": "silu", "max_position_embeddings": cfg.seq_len, "rms_norm_eps": cfg.norm_eps,
        "rope_theta": cfg.rope_theta, "rope_parameters": rope, "tie_word_embeddings": cfg.tie_embeddings,
        "attention_dropout": 0.0, "initializer_range": cfg.init_std, "use_cache": True, "torch_dtype": "float32",
        "bos_token_id": bos_token_id, "eos_token_id": eos_token_id, "pad_token_id": pad_token_id,
    }
    if cfg.rope_type != "default":
        conf["rope_scaling"] = {k: v for k, v in rope.items() if k != "rope_theta"}
    if kind == "llama":
        conf.update(attention_bias=False, mlp_bias=False, pretraining_tp=1)
    elif kind == "mistral":
        conf.update(sliding_window=cfg.sliding_window)
    elif kind == "phi3":  # dropouts 0 (import refuses others); RoPE and bias keys as Phi3Config reads them
        conf.update(sliding_window=cfg.sliding_window, resid_pdrop=0.0, embd_pdrop=0.0, attention_bias=False)
        rope["partial_rotary_factor"] = 1.0
    else:  # qwen2 has q/k/v biases by construction; qwen3's attention_bias would add one to o_proj as well
        sliding = cfg.sliding_window is not None  # a window on every layer: from layer 0 on
        conf.update(use_sliding_window=sliding, sliding_window=cfg.sliding_window,
                    max_window_layers=0 if sliding else cfg.n_layers,
                    layer_types=["sliding_attention" if sliding else "full_attention"] * cfg.n_layers)
        if not sliding:  # inert without use_sliding_window: the checkpoint's own values, not forgeline's
            conf.update({k: v for k, v in (stated or {}).items() if k in ("sliding_window", "max_window_layers")})
        if kind == "qwen3":
            conf.update(attention_bias=False)
    return conf


# ---------------------------------------------------------------------------------------------- tokenizer
def resolve_special_tokens(tokenizer_json: Path, special_tokens: dict[str, str | None] | None) -> dict[str, Any]:
    """Named special tokens (bos/eos/pad/unk) with ids, plus every other special added token.

    Defaults follow the mix stage's convention: eos = the lowest-id special token (mix's first special token ends
    every document), pad = "<|pad|>" when present, no bos/unk. `special_tokens` overrides by key; a None value
    removes the default. Every named token must exist in the vocabulary.
    """
    from tokenizers import Tokenizer

    tok = Tokenizer.from_file(str(tokenizer_json))
    specials = sorted((i, t.content) for i, t in tok.get_added_tokens_decoder().items() if t.special)
    names: dict[str, str | None] = {"eos_token": specials[0][1] if specials else None,
                                    "pad_token": DEFAULT_PAD if tok.token_to_id(DEFAULT_PAD) is not None else None}
    unknown = sorted(set(special_tokens or {}) - set(SPECIAL_KEYS))
    if unknown:
        raise ValueError(f"special_tokens: unknown keys {unknown}; allowed {list(SPECIAL_KEYS)}")
    names.update(special_tokens or {})
    names = {k: v for k, v in names.items() if v is not None}
    ids = {}
    for key, text in sorted(names.items()):
        ids[key.replace("_token", "_token_id")] = tok.token_to_id(text)
        if ids[key.replace("_token", "_token_id")] is None:
            raise ValueError(f"special_tokens: {key}={text!r} is not in the tokenizer's vocabulary")
    named = set(names.values())
    return {"tokens": dict(sorted(names.items())), "ids": ids, "vocab_size": tok.get_vocab_size(),
            "additional": [text for _, text in specials if text not in named]}


def tokenizer_config(specials: dict[str, Any], model_max_length: int, chat_template: Any,
                     stated: dict[str, Any] | None = None) -> dict[str, Any]:
    """`tokenizer_config.json`: a plain fast tokenizer over tokenizer.json (class name understood by 4.x and 5.x;
    else AutoTokenizer picks LlamaTokenizer from config.json and rebuilds another), `chat_template` a string or a
    list of named templates; a checkpoint's own behaviour keys as stated (`stated`: hf_generation.TOKENIZER_KEYS)."""
    conf: dict[str, Any] = {"tokenizer_class": "PreTrainedTokenizerFast", "model_max_length": model_max_length,
                            "clean_up_tokenization_spaces": False, **(stated or {}), **specials["tokens"]}
    if specials["additional"]:
        conf["additional_special_tokens"] = specials["additional"]
    if chat_template is not None:
        conf["chat_template"] = chat_template
    return conf


# ------------------------------------------------------------------------------------------------ export
def _file_record(path: Path) -> dict[str, Any]:
    return {"sha256": sha256_file(path), "bytes": path.stat().st_size}


def publish_folder(tmp: Path, out_dir: Path) -> None:
    """Rename the finished temp folder to `out_dir`, moving an older export aside first (dirs can't be
    os.replace'd over non-empty ones) and deleting it only after the new one is in place."""
    old = None
    if out_dir.exists():
        old = Path(tempfile.mkdtemp(prefix=f".{out_dir.name}.old{TEMP_MARK}", dir=out_dir.parent))
        os.replace(out_dir, old / out_dir.name)
    os.replace(tmp, out_dir)
    if old is not None:
        shutil.rmtree(old)


def export_hf(state: dict[str, torch.Tensor], cfg: ModelConfig, tokenizer_json: Path, out_dir: Path, *,
              card: dict[str, Any], chat_template: str | None = None,
              special_tokens: dict[str, str | None] | None = None,
              stated: dict[str, Any] | None = None) -> dict[str, Any]:
    """Write a self-contained HF model folder; return {"out_dir", "param_count", "config", "special_tokens",
    "files": {name: {"sha256", "bytes"}}}. `stated`: an imported checkpoint's end ids and generation settings,
    kept (`hf_generation`).

    Files: config.json, generation_config.json, model.safetensors, tokenizer.json (the input's bytes verbatim),
    tokenizer_config.json, special_tokens_map.json, README.md (model card from `card`; see `render_card`).
    """
    from safetensors.torch import save_file

    tokenizer_json, out_dir = Path(tokenizer_json), Path(out_dir)
    specials = resolve_special_tokens(tokenizer_json, special_tokens)
    if specials["vocab_size"] > cfg.vocab_size:
        raise ValueError(f"tokenizer has {specials['vocab_size']} tokens but the model's vocab_size is "
                         f"{cfg.vocab_size}: ids beyond the embedding would crash at inference")
    hf_state = to_hf_state_dict(state, cfg)
    n_params = sum(t.numel() for t in hf_state.values())
    if n_params != param_count(cfg):  # both count a tied head once; a gap means a mapping bug
        raise AssertionError(f"exported {n_params} parameters, the config implies {param_count(cfg)}")
    ids, own = stated_ids(stated, specials["ids"]), stated or {}
    eos = end_ids(own.get("eos_token_id"), ids.get("eos_token_id"))
    config = hf_config(cfg, bos_token_id=ids.get("bos_token_id"), eos_token_id=eos,
                       pad_token_id=ids.get("pad_token_id"), stated=own.get("config"))
    generation, templates = generation_config(stated, ids, cfg.seq_len), chat_templates(chat_template, stated)
    tok_config = tokenizer_config(specials, cfg.seq_len, templates, own.get("tokenizer"))
    check_end_ids({"config.json": eos, "generation_config.json": generation["eos_token_id"]},
                  specials["vocab_size"])

    out_dir.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{out_dir.name}{TEMP_MARK}", dir=out_dir.parent))
    try:
        os.chmod(tmp, 0o755)
        write_json_atomic(tmp / "config.json", config)
        write_json_atomic(tmp / "generation_config.json", generation)
        with atomic_path(tmp / "model.safetensors") as p:
            save_file(hf_state, str(p), metadata={"format": "pt"})
        with atomic_path(tmp / "tokenizer.json") as p:
            p.write_bytes(tokenizer_json.read_bytes())
        write_json_atomic(tmp / "tokenizer_config.json", tok_config)
        smap = dict(specials["tokens"])
        if specials["additional"]:
            smap["additional_special_tokens"] = specials["additional"]
        write_json_atomic(tmp / "special_tokens_map.json", smap)
        files = {p.name: _file_record(p) for p in sorted(tmp.iterdir())}
        write_text_atomic(tmp / "README.md", render_card(card, config, n_params, files))
        files["README.md"] = _file_record(tmp / "README.md")
        publish_folder(tmp, out_dir)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    return {"out_dir": str(out_dir), "param_count": n_params, "config": config,
            "special_tokens": specials["tokens"], "files": dict(sorted(files.items()))}


# ------------------------------------------------------------------------------------------------ verify
def verify_hf(out_dir: Path, state: dict[str, torch.Tensor], cfg: ModelConfig, *, seed: int = 0, batch: int = 2,
              seq: int | None = None, attn_implementation: str = "eager") -> float:
    """Max |logits_HF - logits_forgeline| on seeded random ids [batch, seq] (seq defaults to min(seq_len, 64)).

    Loads the folder offline in fp32 and raises `ExportMismatch` when transformers reports missing, unexpected
    or mismatched weights (it would otherwise initialise them randomly and only the logits would tell).
    Short sequences by default: HF computes RoPE angles in fp32, forgeline in fp64, so their difference grows
    with position (≈1e-7 · position radians), unrelated to the export's correctness.
    """
    from transformers import AutoModelForCausalLM

    seq = min(cfg.seq_len, 64) if seq is None else seq
    if not 1 <= seq <= cfg.seq_len:
        raise ValueError(f"seq must be in [1, {cfg.seq_len}], got {seq}")
    hf, info = AutoModelForCausalLM.from_pretrained(Path(out_dir), local_files_only=True, dtype=torch.float32,
                                                    attn_implementation=attn_implementation,
                                                    output_loading_info=True)
    problems = {k: v for k, v in info.items() if k in ("missing_keys", "unexpected_keys", "mismatched_keys") and v}
    if problems:
        raise ExportMismatch(f"{out_dir}: transformers did not load the weights cleanly: {problems}")
    ref = Transformer(cfg, seed=0)
    ref.load_state_dict({k: v.to(torch.float32) for k, v in state.items()}, strict=True)
    gen = torch.Generator().manual_seed(seed)
    ids = torch.randint(0, cfg.vocab_size, (batch, seq), generator=gen)             # [B, T]
    hf.eval()
    ref.eval()
    with torch.no_grad():
        got = hf(input_ids=ids).logits.float()                                      # [B, T, V]
        want = ref(ids).float()                                                     # [B, T, V]
    return float((got - want).abs().max())


def check_hf(out_dir: Path, state: dict[str, torch.Tensor], cfg: ModelConfig, *, tol: float = DEFAULT_TOL,
             **kwargs: Any) -> float:
    """`verify_hf`, raising `ExportMismatch` when the max abs logit difference exceeds `tol`; returns it."""
    diff = verify_hf(out_dir, state, cfg, **kwargs)
    if not diff <= tol:  # also catches NaN
        raise ExportMismatch(f"{out_dir}: HF logits differ from forgeline's by {diff:.3g} (tolerance {tol:g}); "
                             "the exported weights or config do not reproduce the model")
    return diff
