"""The `export` section: the SFT model as a Hugging Face folder, verified by reloading it, with a model card."""

from __future__ import annotations

from pydantic import Field

from specs.base import StrictModel

DEFAULT_DESCRIPTION = (
    "A small Llama-style chat model built end to end by forgeline: pretrained on the run's corpus, then "
    "instruction-tuned (SFT) with an assistant-only loss. A pipeline demonstration, not a production assistant."
)


class ExportSpec(StrictModel):
    """Write `data/export/hf/` (config, safetensors, tokenizer with the chat template, model card), reload it with
    `transformers` and fail unless its logits equal forgeline's within `verify_tolerance`."""

    name: str = Field(
        "forgeline-tiny-sft", min_length=1, max_length=96, pattern=r"^[^\r\n]+$",
        description="Model name: the card's title (one line; a Hub-style repository name is a good choice).",
    )
    license: str = Field(
        "cc-by-sa-4.0", min_length=1, max_length=64, pattern=r"^[a-z0-9][a-z0-9.+-]*$",
        description="License id in the card's front matter (Hub identifiers such as `cc-by-sa-4.0`, `apache-2.0`, "
        "`other`). Share-alike by default because the default corpus includes Wikipedia text (CC BY-SA 4.0); "
        "the card lists every source's license so a different choice can be checked against the data.",
    )
    description: str = Field(
        DEFAULT_DESCRIPTION, max_length=4_000, description="Opening paragraph of the model card (markdown)."
    )
    eos_token: str | None = Field(
        None, min_length=1, max_length=64,
        description="Token that ends a generation (`eos_token` of the tokenizer and generation config). null "
        "(the default): the chat template's end-of-turn token, so `generate()` stops after the assistant's reply "
        "— `<|end|>` with forgeline's template, the checkpoint's own (`<|eot_id|>`, `<|im_end|>`) with a "
        "checkpoint's (specs/init.py: a default never overrides what the checkpoint states). Set it to stop at "
        "another token of the vocabulary (`<|endoftext|>`: the pretraining document end); a token the tokenizer "
        "lacks is an error naming both.",
    )
    verify_tolerance: float = Field(
        1e-4, gt=0, le=1.0,
        description="Largest allowed |logit difference| between the reloaded HF model and forgeline's own "
        "forward pass (fp32, seeded random ids); above it the stage fails and nothing is published.",
    )
    verify_seq: int = Field(
        64, ge=1, le=65_536,
        description="Sequence length of the verification batch (capped at the model's seq_len). Short by "
        "default: HF computes RoPE angles in fp32, forgeline in fp64, a gap that grows with position.",
    )
