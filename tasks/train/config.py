"""The architecture numbers' one owner: `ModelConfig` (the resolved shape a model is built from), its parameter
count, its training FLOPs per token and the SwiGLU width. Pure Python (no torch): the params check in specs/, the
planner, telemetry and the training engine all call these, so a formula exists once.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, fields
from typing import Any


def ffn_hidden_size(d_model: int, multiple_of: int) -> int:
    """SwiGLU width: 2/3 of 4·d (same parameters as a 4·d GELU MLP), rounded up to `multiple_of`."""
    hidden = int(2 * 4 * d_model / 3)
    return multiple_of * ((hidden + multiple_of - 1) // multiple_of)


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

    @property
    def head_dim(self) -> int:
        return self.d_model // self.n_heads

    @classmethod
    def from_spec(cls, spec: Any, vocab_size: int, seq_len: int) -> "ModelConfig":
        """From a `specs.pretrain.ModelSpec` plus the data's vocab and sequence length."""
        r = spec.resolved()
        return cls(vocab_size=vocab_size, seq_len=seq_len, **r,
                   ffn_hidden=ffn_hidden_size(r["d_model"], spec.ffn_multiple_of), dropout=spec.dropout,
                   tie_embeddings=spec.tie_embeddings, rope_theta=spec.rope_theta, norm_eps=spec.norm_eps,
                   init_std=spec.init_std)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> "ModelConfig":
        names = {f.name for f in fields(cls)}
        return cls(**{k: v for k, v in data.items() if k in names})


# ------------------------------------------------------------------------------------------------- accounting
def param_count(cfg: ModelConfig) -> int:
    """Trainable parameters of the plain model (a tied head counted once)."""
    d, hd = cfg.d_model, cfg.head_dim
    attn = d * cfg.n_heads * hd * 2 + d * cfg.n_kv_heads * hd * 2                  # q, o + k, v
    block = attn + 3 * d * cfg.ffn_hidden + 2 * d                                  # + gate, up, down + 2 norms
    head = 0 if cfg.tie_embeddings else cfg.vocab_size * d
    return cfg.vocab_size * d + cfg.n_layers * block + d + head


def flops_per_token(cfg: ModelConfig) -> int:
    """Training FLOPs per token (forward + backward), PaLM appendix B: 6·N + 12·L·d·T.

    N counts every weight used in a matmul: blocks plus the LM head projection (V·d, also when tied, since
    the output matmul is done either way), but not the embedding lookup (no FLOPs). 12·L·d·T is the attention
    score and value matmuls (2·2·T·d per token per layer forward, ×3 for backward). Norms, RoPE and softmax
    are ignored. MFU = tokens/s · flops_per_token / peak FLOP/s.
    """
    matmul_params = param_count(cfg) - cfg.vocab_size * cfg.d_model * (1 if not cfg.tie_embeddings else 0) \
        - (cfg.n_layers * 2 + 1) * cfg.d_model                                     # drop norms (no matmul)
    return 6 * matmul_params + 12 * cfg.n_layers * cfg.d_model * cfg.seq_len
