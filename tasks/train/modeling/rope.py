"""Rotary position embeddings (RoPE, Su et al. 2021) in Hugging Face Llama's rotate-half convention: dims i and
i + hd/2 of a head form a pair rotated by position · inverse frequency; Hugging Face's linear, dynamic, Llama 3.1
and YaRN frequency scalings optional.

The cos/sin tables are float64 angles cast to the activations' dtype. Eager code reads them from a cache per
(length, device, dtype); code under torch.compile computes them in the graph in float32, as Hugging Face's
Llama does (see `rope_tables`: float64 there cost a fifth of a 124M step on an H200).
"""

from __future__ import annotations

import math

import torch

from specs.architecture import ModelConfig

_ROPE_CACHE: dict[tuple, tuple[torch.Tensor, torch.Tensor]] = {}
# Angles computed inside a compiled graph: float32, Hugging Face Llama's own precision (positions < 2^24 exact;
# the angle's rounding, ~position · 6e-8 rad, is far below bf16's resolution of the rotated q and k).
IN_GRAPH = torch.float32


def rope_frequencies(head_dim: int, theta: float, scaling: tuple | None = None,
                     device: torch.device | None = None, dtype: torch.dtype = torch.float64) -> torch.Tensor:
    """Inverse frequencies [hd/2] (`dtype`, float64 by default); `scaling` = (kind, factor, original_len, extra),
    `rope_scaling`'s tuple: "linear" divides every frequency by `factor`; "dynamic" keeps them (Hugging Face's
    dynamic NTK rescales only past max_position_embeddings, which `hf_model_config` keeps training within);
    "llama3" (extra = (low, high)) applies Llama 3.1's rule: wavelengths longer than original_len / low are divided
    by `factor`, shorter than original_len / high kept, and those between blended linearly in original_len /
    wavelength; "yarn" (extra = (beta_fast, beta_slow, truncate, attention factor)) blends per dim (`yarn_blend`)."""
    inv = 1.0 / theta ** (torch.arange(0, head_dim, 2, dtype=dtype, device=device) / head_dim)      # [hd/2]
    # dynamic (NTK) scaling only changes the frequencies past the checkpoint's positions, where nothing here runs
    if scaling is None or scaling[0] == "dynamic":
        return inv
    kind, factor, original, extra = scaling
    if kind == "linear":  # positions divided by `factor`: the same angles as frequencies divided by it
        return inv / factor
    if kind == "yarn":
        keep = yarn_blend(head_dim, theta, original, *extra[:3]).to(device=device, dtype=dtype)   # [hd/2]
        return inv / factor * (1 - keep) + inv * keep
    low, high = extra
    wavelen = 2 * math.pi / inv
    smooth = ((original / wavelen - low) / (high - low)).clamp(0.0, 1.0)                    # 0: long, 1: short
    return (1 - smooth) * inv / factor + smooth * inv


def yarn_blend(head_dim: int, theta: float, original: int, beta_fast: float, beta_slow: float,
               truncate: bool) -> torch.Tensor:
    """YaRN's share [hd/2] of each frequency kept as is (1) rather than divided by the factor (0): a linear ramp
    over the dims between those that turn beta_fast and beta_slow times over the original context, as Hugging
    Face's `_compute_yarn_parameters` computes it (range rounded outward when `truncate`, clipped to the dims)."""
    def dim_of(turns: float) -> float:
        return head_dim * math.log(original / (turns * 2 * math.pi)) / (2 * math.log(theta))

    low, high = dim_of(beta_fast), dim_of(beta_slow)
    if truncate:
        low, high = math.floor(low), math.ceil(high)
    low, high = max(low, 0), min(high, head_dim - 1)
    if low == high:
        high += 0.001  # Hugging Face's guard against a zero-width ramp
    ramp = ((torch.arange(head_dim // 2, dtype=torch.float64) - low) / (high - low)).clamp(0, 1)
    return 1 - ramp


def rope_scaling(cfg: ModelConfig) -> tuple | None:
    """The config's RoPE scaling as the hashable tuple `rope_frequencies` takes (None: plain RoPE)."""
    if cfg.rope_type == "default":
        return None
    extra: tuple = ()
    if cfg.rope_type == "llama3":
        extra = (cfg.rope_low_freq_factor, cfg.rope_high_freq_factor)
    elif cfg.rope_type == "yarn":
        extra = (cfg.rope_beta_fast, cfg.rope_beta_slow, cfg.rope_truncate, cfg.rope_attention_factor)
    return (cfg.rope_type, cfg.rope_factor, cfg.rope_original_max_len, extra)


def attention_scale(scaling: tuple | None) -> float:
    """The factor cos and sin are multiplied by: YaRN's attention factor, 1 for every other RoPE."""
    return scaling[3][3] if scaling is not None and scaling[0] == "yarn" else 1.0


def rope_angles(positions: torch.Tensor, head_dim: int, theta: float, scaling: tuple | None = None,
                dtype: torch.dtype = torch.float64) -> torch.Tensor:
    """Rotation angles [..., hd/2] (`dtype`) of `positions` [...]: position · inverse frequency."""
    inv = rope_frequencies(head_dim, theta, scaling, positions.device, dtype)            # [hd/2]
    return positions.to(dtype)[..., None] * inv                                          # [..., hd/2]


def cos_sin(angles: torch.Tensor, dtype: torch.dtype, scale: float = 1.0) -> tuple[torch.Tensor, torch.Tensor]:
    """cos and signed sin [..., hd] for `apply_rope`: cos(a) twice; sin(a) negated on the first half, then
    plain (rotate_half(x)·sin = roll(x, hd/2)·[-sin, sin], so no rotated copy of x is concatenated); both times
    `scale` (YaRN's attention factor; 1 leaves them untouched)."""
    cos, sin = angles.cos(), angles.sin()                                                # [..., hd/2]
    if scale != 1.0:
        cos, sin = cos * scale, sin * scale
    return torch.cat([cos, cos], -1).to(dtype), torch.cat([-sin, sin], -1).to(dtype)    # [..., hd] each


def rope_tables(seq_len: int, head_dim: int, theta: float, device: torch.device, dtype: torch.dtype,
                scaling: tuple | None = None):
    """cos and signed sin [T, head_dim] for positions 0..T-1 (`cos_sin`). Eager: cached per shape/device/dtype.
    Under torch.compile computed in the graph instead (fused into the rotation's kernel): a compiled block that
    read a global cache would guard on it and recompile whenever it grew. In float32 there (IN_GRAPH), not
    float64: the kernel evaluates cos/sin per element of q and k, and float64 transcendentals took 17.7 % of
    a gpt2-124m step's GPU time on an H200 (benchmarks/gpu/profile_step.py)."""
    if torch.compiler.is_compiling():
        angles = rope_angles(torch.arange(seq_len, device=device), head_dim, theta, scaling, IN_GRAPH)
        return cos_sin(angles, dtype, attention_scale(scaling))
    key = (seq_len, head_dim, theta, str(device), dtype, scaling)
    if key not in _ROPE_CACHE:
        # Built as normal tensors even when the first caller runs under inference_mode (generation, perplexity):
        # an inference tensor in the shared cache would break every later training step that reads it.
        with torch.inference_mode(False):
            tables = cos_sin(rope_angles(torch.arange(seq_len), head_dim, theta, scaling), dtype,
                             attention_scale(scaling))
            _ROPE_CACHE[key] = tuple(t.to(device) for t in tables)
    return _ROPE_CACHE[key]


def apply_rope(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    """x [B, H, T, hd] rotated by position: x·cos + rotate_half(x)·sin, rotate-half convention (Hugging Face
    Llama: dims i and i + hd/2 form a pair), with `sin` signed as `cos_sin` makes it."""
    return torch.addcmul(x * cos, x.roll(x.size(-1) // 2, dims=-1), sin)


def rope_at(position_ids: torch.Tensor, head_dim: int, theta: float, n_table: int, dtype: torch.dtype,
            scaling: tuple | None = None):
    """cos, signed sin [B, 1, T, hd] for explicit positions [B, T] (each < n_table), broadcast over heads."""
    if torch.compiler.is_compiling():
        cos, sin = cos_sin(rope_angles(position_ids, head_dim, theta, scaling, IN_GRAPH), dtype,
                           attention_scale(scaling))                                # [B, T, hd]
        return cos.unsqueeze(1), sin.unsqueeze(1)
    cos, sin = rope_tables(n_table, head_dim, theta, position_ids.device, dtype, scaling)  # [n_table, hd]
    return cos[position_ids].unsqueeze(1), sin[position_ids].unsqueeze(1)           # [B, 1, T, hd]
