"""`model.init`: where a model's weights (and, for a checkpoint, its architecture and tokenizer) come from."""

from __future__ import annotations

from typing import Literal

from pydantic import Field, model_validator

from specs.base import StrictModel


class ModelInitSpec(StrictModel):
    """Start from a seeded random initialisation, or from a local Hugging Face checkpoint folder.

    With `hf`, the folder's `config.json` is the architecture (llama, mistral, qwen2, qwen3), its safetensors
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
