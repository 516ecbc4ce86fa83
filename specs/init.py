"""`model.init`: where a model's weights (and, for a checkpoint, its architecture and tokenizer) come from, and the
one rule for params against a checkpoint.

The rule: a params value that only repeats a default never overrides what the checkpoint states (its shape, its
tokenizer and vocabulary, its chat template and special tokens, its end-of-turn token, its context length); a
value the user set does, where the checkpoint can honour it; a set value it cannot honour (another shape, another
tokenizer, a token not in its vocabulary, a sequence longer than its positions) is an error naming both. params.yaml
lists every key, so "set" cannot mean "present": it means not null and not equal to the field's default
(`user_set`). Keys whose from-scratch default differs from what a checkpoint needs default to null instead
(`export.eos_token`, `sft.dropout`), so every number a user writes there is their choice.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any, Literal

from pydantic import BaseModel, Field, model_validator

from specs.base import StrictModel


class ModelInitSpec(StrictModel):
    """Start from a seeded random initialisation, or from a local Hugging Face checkpoint folder.

    With `hf`, the folder's `config.json` is the architecture (llama, mistral, qwen2, qwen3, phi3), its safetensors
    weights the starting point (each rank reads only its own tensor/pipeline slices), and its `tokenizer.json`
    the tokenizer `mix` encodes with (no tokenizer is trained). Pickle checkpoints (`*.bin`, `*.pt`) are refused.
    DVC tracks `path`, not the folder's bytes: treat a checkpoint folder as immutable (a new version, a new
    folder); the pretrain stage records the checkpoint's fingerprint and refuses to resume across a change."""

    kind: Literal["random", "hf"] = Field(
        "random", description="`random`: seeded init of the shape in `model` (today's default). `hf`: the "
        "checkpoint at `path`; then `model`'s shape keys must stay unset (they come from its config.json)."
    )
    path: str | None = Field(
        None, description="The checkpoint folder (relative to the project root, or absolute), holding "
        "config.json, model.safetensors or model.safetensors.index.json + shards, tokenizer.json and "
        "tokenizer_config.json. Read from disk only: nothing is downloaded."
    )

    @model_validator(mode="after")
    def _path_fits_kind(self) -> "ModelInitSpec":
        if self.kind == "hf" and not self.path:
            raise ValueError("model.init.path: required with kind: hf (a local checkpoint folder)")
        if self.kind == "random" and self.path:
            raise ValueError("model.init.path: only used with kind: hf (set kind: hf, or remove path)")
        return self


def user_set(spec: BaseModel) -> dict[str, Any]:
    """The fields of `spec` the user chose: given in params, not null, and not equal to the field's default."""
    out = {}
    for name in sorted(spec.model_fields_set):
        value, info = getattr(spec, name), type(spec).model_fields[name]
        if value is not None and value != info.get_default(call_default_factory=True):
            out[name] = value
    return out


def checkpoint_conflicts(where: str, spec: BaseModel, keys: Iterable[str], init: ModelInitSpec,
                         decides: str) -> list[str]:
    """`where.key: ...` for each of `keys` the user set (`user_set`) although, with `init.kind: hf`, the
    checkpoint decides it (`decides`: which file of the checkpoint folder) — each line names both sides."""
    if init.kind != "hf":
        return []
    chosen = user_set(spec)
    return [f"{where}.{key}: {chosen[key]!r} is set here, but with model.init.kind: hf it comes from the "
            f"checkpoint's {decides} ({init.path}): remove the key" for key in sorted(set(keys) & set(chosen))]


def sft_seq_len_problem(seq_len: int | None, limit: int | None) -> str | None:
    """Why a chosen `sft.seq_len` cannot train on a checkpoint of `limit` positions (the rule above: a length it
    was never trained for is refused, not cut), or None. One wording for `check` and the sft stage."""
    if not (seq_len and limit and seq_len > limit):
        return None
    return (f"sft.seq_len: {seq_len} is longer than the checkpoint's max_position_embeddings {limit}: "
            f"set sft.seq_len to at most {limit}, or null (pretraining's)")
