"""The architecture numbers' one owner: `ModelConfig` (the resolved shape a model is built from), its parameter
count and the breakdown the layout planner shards, its training FLOPs per token and the SwiGLU width. Pure Python
(no torch): the params check in specs/, the planner, telemetry, the benchmarks and the training engine all call
these, so a formula exists once. It lives with the specs (the ground floor): `specs/pretrain.py` checks shapes with
it, and nothing under specs/ imports from tasks/.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, fields
from typing import Any


def ffn_hidden_size(d_model: int, multiple_of: int) -> int:
    """SwiGLU width: 2/3 of 4·d (same parameters as a 4·d GELU MLP), rounded up to `multiple_of`."""
    hidden = int(2 * 4 * d_model / 3)
    return multiple_of * ((hidden + multiple_of - 1) // multiple_of)


# Architecture options beyond the original decoder, with the value that means "off". `to_dict` leaves an option
# out while it has that value, so config.json, report.json and checkpoint identities written before the option
# existed stay byte-identical and resumable.
EXTENSIONS: dict[str, Any] = {
    "explicit_head_dim": None, "attn_bias": False, "qk_norm": False, "sliding_window": None,
    "rope_type": "default", "rope_factor": 1.0, "rope_low_freq_factor": 1.0, "rope_high_freq_factor": 4.0,
    "rope_original_max_len": 8192, "hf_model_type": None, "max_positions": None, "rope_beta_fast": 32.0,
    "rope_beta_slow": 1.0, "rope_truncate": True, "rope_attention_factor": 1.0,
}
ROPE_TYPES = ("default", "linear", "dynamic", "llama3", "yarn")  # as Hugging Face names them


@dataclass(frozen=True)
class ModelConfig:
    vocab_size: int
    seq_len: int
    n_layers: int
    n_heads: int
    n_kv_heads: int
    d_model: int
    ffn_hidden: int
    dropout: float = 0.0
    tie_embeddings: bool = True
    rope_theta: float = 10_000.0
    norm_eps: float = 1e-5
    init_std: float = 0.02
    explicit_head_dim: int | None = None  # head width when not d_model / n_heads (Qwen3, Gemma)
    attn_bias: bool = False               # biases on q, k, v (Qwen2)
    qk_norm: bool = False                 # RMSNorm over each head of q and k before RoPE (Qwen3)
    sliding_window: int | None = None     # a token sees at most this many positions back, itself included (Mistral)
    rope_type: str = "default"            # "llama3": Llama 3.1's frequency-dependent scaling of RoPE; "linear":
                                          # positions / factor; "dynamic": NTK scaling past the checkpoint's length;
                                          # "yarn": YaRN's per-dim blend and attention factor
    rope_factor: float = 1.0              # llama3: long wavelengths are divided by this; linear: all of them
    rope_low_freq_factor: float = 1.0     # llama3: wavelengths above original_len / low are scaled fully
    rope_high_freq_factor: float = 4.0    # llama3: wavelengths below original_len / high are kept
    rope_original_max_len: int = 8192     # llama3, yarn: the context the base model was trained for
    hf_model_type: str | None = None      # the imported checkpoint's model_type: export writes that family back
    max_positions: int | None = None      # the imported checkpoint's max_position_embeddings (≥ seq_len): export
                                          # writes it back, not the (shorter) length trained at here
    rope_beta_fast: float = 32.0          # yarn: dims rotating more than this often over the original context keep
    rope_beta_slow: float = 1.0           # their frequency, less than beta_slow times are divided by the factor
    rope_truncate: bool = True            # yarn: round that dim range outward to whole dims (Hugging Face's default)
    rope_attention_factor: float = 1.0    # yarn: cos and sin multiplied by this (YaRN's mscale, 0.1·ln(factor) + 1)

    def __post_init__(self) -> None:
        if self.rope_type not in ROPE_TYPES:
            raise ValueError(f"rope_type {self.rope_type!r} is not supported (supported: {', '.join(ROPE_TYPES)})")

    @property
    def head_dim(self) -> int:
        return self.explicit_head_dim or self.d_model // self.n_heads

    @classmethod
    def from_spec(cls, spec: Any, vocab_size: int, seq_len: int) -> "ModelConfig":
        """From a `specs.pretrain.ModelSpec` plus the data's vocab and sequence length."""
        r = spec.resolved()
        return cls(vocab_size=vocab_size, seq_len=seq_len, **r,
                   ffn_hidden=spec.ffn_width(), dropout=spec.dropout,
                   tie_embeddings=spec.tie_embeddings, rope_theta=spec.rope_theta, norm_eps=spec.norm_eps,
                   init_std=spec.init_std)

    def to_dict(self) -> dict[str, Any]:
        """Every field, except architecture options at their "off" value (see EXTENSIONS)."""
        return {k: v for k, v in asdict(self).items() if not (k in EXTENSIONS and v == EXTENSIONS[k])}

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> "ModelConfig":
        names = {f.name for f in fields(cls)}
        return cls(**{k: v for k, v in data.items() if k in names})


# ------------------------------------------------------------------------------------------------- accounting
@dataclass(frozen=True)
class ParamCounts:
    """Parameters of the Llama-style decoder, split the way a layout shards them."""

    embedding: int        # V·d input table
    head: int             # V·d output projection when untied, else 0 (it reuses the table)
    block_matrices: int   # wq, wk, wv, wo, gate, up, down of one block: split over tp
    block_norms: int      # the two RMSNorm weights of one block (+ q/k norms): replicated over tp
    final_norm: int       # the RMSNorm weight before the head
    n_layers: int         # blocks
    block_biases: int = 0  # q/k/v biases of one block (attn_bias): split over tp, no matmul

    @property
    def block(self) -> int:
        return self.block_matrices + self.block_norms + self.block_biases

    @property
    def non_embedding(self) -> int:
        return self.n_layers * self.block + self.final_norm

    @property
    def total(self) -> int:
        """Trainable parameters (a tied head counted once)."""
        return self.embedding + self.head + self.non_embedding

    @property
    def matmul(self) -> int:
        """Weights used in a matmul: every block matrix plus the V·d output projection, also when it is tied
        (the output matmul runs either way); not the embedding lookup (no FLOPs), not the norms (no matmul)."""
        return self.n_layers * self.block_matrices + self.embedding


def param_counts(cfg: ModelConfig) -> ParamCounts:
    """The parameter breakdown of `cfg`'s model."""
    d, hd = cfg.d_model, cfg.head_dim
    attention = 2 * d * cfg.n_heads * hd + 2 * d * cfg.n_kv_heads * hd  # wq, wo: d×H·hd; wk, wv: d×Hkv·hd (GQA)
    mlp = 3 * d * cfg.ffn_hidden                                         # gate, up: d×f; down: f×d
    biases = (cfg.n_heads + 2 * cfg.n_kv_heads) * hd if cfg.attn_bias else 0  # q: H·hd, k and v: Hkv·hd
    qk_norms = 2 * hd if cfg.qk_norm else 0                              # one hd-wide weight each for q and k
    return ParamCounts(embedding=cfg.vocab_size * d, head=0 if cfg.tie_embeddings else cfg.vocab_size * d,
                       block_matrices=attention + mlp, block_norms=2 * d + qk_norms, final_norm=d,
                       n_layers=cfg.n_layers, block_biases=biases)


def param_count(cfg: ModelConfig) -> int:
    """Trainable parameters of the plain model (a tied head counted once)."""
    return param_counts(cfg).total


def transformer_flops_per_token(matmul_params: int, n_layers: int, d_model: int, seq_len: int) -> int:
    """Training FLOPs per token (forward + backward), PaLM (Chowdhery et al. 2022) appendix B: 6·N + 12·L·d·T.

    6·N: forward 2·N and backward 4·N multiply-adds of the weight matmuls. N counts every weight used in a
    matmul, including the LM head projection (V·d) even when tied to the input embedding: its matmul is real
    compute; only the input table lookup is free. 12·L·d·T (PaLM's 12·L·H·Q·T with H·Q = d_model): the attention
    score and value matmuls (2·2·T·d per token per layer forward, ×3 with backward; not parameters) over
    T = seq_len, counted as full (non-causal) attention by convention, so MFU is comparable with published
    numbers. Norms, RoPE and softmax are ignored; activation recomputation is not counted (that would be
    hardware FLOPs utilization). MFU = tokens/s · flops_per_token / peak FLOP/s.
    """
    return 6 * matmul_params + 12 * n_layers * d_model * seq_len


def flops_per_token(cfg: ModelConfig) -> int:
    """`transformer_flops_per_token` of `cfg`'s model (N = `ParamCounts.matmul`; the attention width H·Q is
    n_heads · head_dim, which is d_model unless the head width is explicit; a sliding window is not credited:
    MFU conventions count full attention)."""
    return transformer_flops_per_token(param_counts(cfg).matmul, cfg.n_layers, cfg.n_heads * cfg.head_dim,
                                       cfg.seq_len)
