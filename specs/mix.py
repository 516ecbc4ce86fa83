"""The `mix` section: tokenizer training, train/val split, weighted mixing by token budget, and packing."""

from __future__ import annotations

import math
import re
from typing import Literal

from pydantic import Field, field_validator, model_validator

from specs.base import StrictModel
from specs.init import ModelInitSpec

SOURCE_NAME = r"^[a-z][a-z0-9_]{0,31}$"  # same rule as ingest source names
BYTE_ALPHABET = 256  # a byte-level BPE always holds the 256 byte symbols


class TokenizerSpec(StrictModel):
    """A byte-level BPE (HF `tokenizers`) trained on a deterministic sample of the train split."""

    vocab_size: int = Field(
        8192, ge=512, le=1 << 20,
        description="Target vocabulary size including the 256 byte symbols and all special tokens (a small "
        "corpus may yield fewer merges; the report gives the size reached).",
    )
    min_frequency: int = Field(2, ge=1, le=1_000_000, description="A pair must occur this often to be merged.")
    special_tokens: list[str] = Field(
        default_factory=lambda: ["<|endoftext|>", "<|pad|>"], min_length=1, max_length=256,
        description="Special tokens, given ids 0, 1, ... in this order. The first one ends every document in "
        "the packed stream.",
    )
    reserved_special_tokens: int = Field(
        14, ge=0, le=1024,
        description="Placeholders `<|reserved_N|>` after the special tokens, so later stages (chat templates) "
        "can claim ids without resizing the model's embeddings.",
    )
    train_chars: int | None = Field(
        4_000_000, ge=10_000,
        description="Characters of train text sampled to train the tokenizer (split across sources by weight, "
        "documents in a stable hash order); null = all train text of the weighted sources.",
    )

    @field_validator("special_tokens")
    @classmethod
    def _clean_specials(cls, tokens: list[str]) -> list[str]:
        if any(not t.strip() for t in tokens):
            raise ValueError("special tokens must be non-empty")
        dupes = sorted({t for t in tokens if tokens.count(t) > 1})
        if dupes:
            raise ValueError(f"special tokens must be unique; repeated: {', '.join(dupes)}")
        return tokens

    def all_special_tokens(self) -> list[str]:
        return [*self.special_tokens, *(f"<|reserved_{i}|>" for i in range(self.reserved_special_tokens))]

    @model_validator(mode="after")
    def _room_for_merges(self) -> "TokenizerSpec":
        clash = sorted(set(self.special_tokens) & {f"<|reserved_{i}|>" for i in range(self.reserved_special_tokens)})
        if clash:
            raise ValueError(f"special tokens clash with reserved placeholders: {', '.join(clash)}")
        floor = BYTE_ALPHABET + len(self.all_special_tokens())
        if self.vocab_size <= floor:
            raise ValueError(f"vocab_size must exceed 256 bytes + {floor - BYTE_ALPHABET} special tokens = {floor}")
        return self


class AdaptiveMixSpec(StrictModel):
    """Source weights that follow the per-source validation loss during pretraining (`mix.adaptive`).

    The mix stage ignores this section; pretrain reads it. At each update point the weights move by
    exponentiated gradient (DoReMi, Xie et al. 2023, Alg. 1) on a per-source lag signal λ:
    `a = w ⊙ exp(step_size · λ)` normalized, `w' = (1 − smoothing) · a + smoothing · w0`, then projected into
    the per-source [min, max] bounds (a common scale factor, clipped: ratios between unclamped sources stay).
    w0 = the train split's own source shares (what the fixed sampler draws). See tasks/train/inputs/adaptive.py.
    """

    enabled: bool = Field(
        False, description="Turn adaptive source weights on; off = the fixed, seeded data order (unchanged)."
    )
    reference: Literal["initial", "previous", "target"] = Field(
        "initial",
        description="Signal λ per source. initial: λ = ln(L / L_ref), L_ref the source's val loss at the first "
        "update point (which only records it): sources that improved least since then gain weight (\"upweight "
        "the laggards\"; an unlearnable source also lags). previous: λ = ln(L_prev / L), the relative drop since "
        "the last update point: sources still improving fastest gain weight, plateaued ones lose it. target: "
        "λ = max(L − targets[source], 0) nats, DoReMi's clipped excess loss over a reference model's loss.",
    )
    targets: dict[str, float] = Field(
        default_factory=dict,
        description="reference: target — the reference val loss (nats/token) of every train source, e.g. what a "
        "run at fixed weights reached.",
    )
    step_size: float = Field(
        1.0, ge=0.0, le=1000.0,
        description="η of the exponentiated-gradient update (0 leaves only smoothing toward the base weights).",
    )
    smoothing: float = Field(
        0.1, ge=0.0, le=1.0,
        description="Share of the base weights w0 mixed into every update (DoReMi's c), so no source starves.",
    )
    min_weight: float = Field(0.02, ge=0.0, le=1.0, description="Lowest weight of a source without `bounds`.")
    max_weight: float = Field(0.9, ge=0.0, le=1.0, description="Highest weight of a source without `bounds`.")
    bounds: dict[str, tuple[float, float]] = Field(
        default_factory=dict,
        description="Per-source [min, max] weight, overriding min_weight/max_weight (each in [0, 1], min ≤ max; "
        "the sums over the train sources must allow weights summing to 1).",
    )
    every: int | None = Field(
        None, ge=1, le=10_000_000,
        description="Steps between weight updates; null = at every pretrain evaluation (`pretrain.eval_every`). "
        "Other steps are evaluated too when they are update points.",
    )
    warmup_steps: int = Field(
        0, ge=0, le=10_000_000, description="No update point before this step (early losses mostly reflect "
        "initialization)."
    )

    @field_validator("targets")
    @classmethod
    def _check_targets(cls, targets: dict[str, float]) -> dict[str, float]:
        bad = sorted(k for k, v in targets.items() if not re.match(SOURCE_NAME, k) or not (math.isfinite(v) and v >= 0))
        if bad:
            raise ValueError(f"targets must name sources and be finite losses ≥ 0; bad: {', '.join(bad)}")
        return dict(sorted(targets.items()))

    @field_validator("bounds")
    @classmethod
    def _check_bounds(cls, bounds: dict[str, tuple[float, float]]) -> dict[str, tuple[float, float]]:
        bad = sorted(k for k, (lo, hi) in bounds.items()
                     if not re.match(SOURCE_NAME, k) or not (0.0 <= lo <= hi <= 1.0))
        if bad:
            raise ValueError(f"bounds must name sources with 0 ≤ min ≤ max ≤ 1; bad: {', '.join(bad)}")
        return dict(sorted(bounds.items()))

    @model_validator(mode="after")
    def _consistent(self) -> "AdaptiveMixSpec":
        if self.min_weight > self.max_weight:
            raise ValueError(f"min_weight ({self.min_weight}) must be ≤ max_weight ({self.max_weight})")
        if self.enabled and self.reference == "target" and not self.targets:
            raise ValueError("reference: target needs `targets` (a reference val loss per train source)")
        return self


class MixSpec(StrictModel):
    """Turn cleaned records into a tokenizer plus packed, weighted train/val token shards."""

    tokenizer: TokenizerSpec = Field(default_factory=TokenizerSpec, description="Tokenizer training.")
    val_fraction: float = Field(
        0.05, ge=0.0, le=0.5,
        description="Share of each source's documents held out for validation, chosen by a stable hash of the "
        "document id (adding documents never moves others between splits).",
    )
    min_val_docs: int = Field(
        3, ge=0, le=1000,
        description="Each source keeps at least this many documents in val (those with the smallest hash, never "
        "more than half the source), so small sources still get a per-source val loss.",
    )
    seq_len: int = Field(
        256, ge=8, le=131_072,
        description="Tokens a model sees per sequence. Each packed sequence stores seq_len + 1 tokens "
        "(inputs = [:-1], targets = [1:]); consecutive sequences share one boundary token.",
    )
    token_budget: int | None = Field(
        2_000_000, ge=1_000,
        description="Train tokens in total (documents incl. their end token), split by `weights`; null = the "
        "largest mix at the given weights that uses no source more than once.",
    )
    weights: dict[str, float] = Field(
        default_factory=dict,
        description="Target share of train tokens per source (normalized to sum 1; 0 leaves a source out of "
        "train). Every source in the data must be listed; empty = proportional to each source's size.",
    )
    max_repetition: float = Field(
        4.0, ge=1.0, le=100.0,
        description="Most epochs any source may be repeated when upsampled; a weight that would need more is "
        "realized at the cap and the shortfall reported (never exceeded).",
    )
    on_shortfall: Literal["redistribute", "shrink"] = Field(
        "redistribute",
        description="When a capped source falls short: `redistribute` gives the missing tokens to the other "
        "sources by weight (the budget holds); `shrink` keeps the others at target (fewer tokens in total).",
    )
    shuffle: bool = Field(
        True, description="Shuffle documents across sources (seeded by run.seed); false keeps source order."
    )
    dtype: Literal["auto", "uint16", "uint32"] = Field(
        "auto", description="Token id type on disk; auto = uint16 when the vocabulary fits in 65,536 ids."
    )
    shard_sequences: int = Field(
        16_384, ge=1, le=1 << 24, description="Packed sequences per `.bin` shard file."
    )
    adaptive: AdaptiveMixSpec = Field(
        default_factory=AdaptiveMixSpec,
        description="Adaptive source weights during pretraining (read by pretrain; off by default).",
    )

    @field_validator("weights")
    @classmethod
    def _check_weights(cls, weights: dict[str, float]) -> dict[str, float]:
        bad_names = sorted(k for k in weights if not re.match(SOURCE_NAME, k))
        if bad_names:
            raise ValueError(f"not a source name: {', '.join(bad_names)}")
        negative = sorted(k for k, w in weights.items() if not (math.isfinite(w) and w >= 0))
        if negative:
            raise ValueError(f"weights must be finite and ≥ 0; bad: {', '.join(negative)}")
        if weights and sum(weights.values()) <= 0:
            raise ValueError("at least one weight must be > 0")
        return dict(sorted(weights.items()))

    @model_validator(mode="after")
    def _dtype_fits(self) -> "MixSpec":
        if self.dtype == "uint16" and self.tokenizer.vocab_size > 1 << 16:
            raise ValueError(f"dtype uint16 holds 65,536 ids but tokenizer.vocab_size is {self.tokenizer.vocab_size}")
        return self

    def token_dtype(self, vocab_size: int | None = None) -> str:
        """numpy dtype string of token ids on disk (explicitly little-endian); `vocab_size`: the tokenizer's
        actual size when it is not the one trained here (a checkpoint's)."""
        vocab = self.tokenizer.vocab_size if vocab_size is None else vocab_size
        if self.dtype == "uint16" and vocab > 1 << 16:
            raise ValueError(f"mix.dtype: uint16 holds 65,536 ids but the tokenizer has {vocab}")
        if self.dtype == "auto":
            return "<u2" if vocab <= 1 << 16 else "<u4"
        return {"uint16": "<u2", "uint32": "<u4"}[self.dtype]


class MixJob(MixSpec):
    """What the mix stage's `run()` receives: its section plus `model.init`, which decides whether a
    tokenizer is trained here (`random`) or the checkpoint's is used (`hf`)."""

    model_init: ModelInitSpec = Field(default_factory=ModelInitSpec, description="`model.init` (read-only here).")
