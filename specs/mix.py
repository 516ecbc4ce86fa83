"""The `mix` section: tokenizer training, train/val split, weighted mixing by token budget, and packing."""

from __future__ import annotations

import math
import re
from typing import Literal

from pydantic import Field, field_validator, model_validator

from specs.base import StrictModel

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

    def token_dtype(self) -> str:
        """numpy dtype string of token ids on disk (explicitly little-endian)."""
        if self.dtype == "auto":
            return "<u2" if self.tokenizer.vocab_size <= 1 << 16 else "<u4"
        return {"uint16": "<u2", "uint32": "<u4"}[self.dtype]
