"""The `sft` section: supervised finetuning of the pretrained model on the curated instructions."""

from __future__ import annotations

from typing import Literal

from pydantic import Field, field_validator

from specs.base import StrictModel
from specs.evaluate import FlagSpec, SamplingSpec
from specs.pretrain import ParallelSpec
from specs.train import AdapterSpec, OptimSpec, TrainLoopSpec


def _sft_optim() -> OptimSpec:
    # Finetuning: a lower peak than pretraining's 3e-3 and a short warmup; decays to a tenth.
    return OptimSpec(lr=1e-3, min_lr=1e-4, warmup_steps=10)


class SFTSpec(TrainLoopSpec):
    """Finetuning on instruct's conversations: chat template with role tokens, loss on assistant tokens only,
    packed rows with block-diagonal attention (no attention across samples), per-token loss over the whole
    optimizer step (all micro-batches and ranks), DeepSpeed with ZeRO over data-parallel ranks. The loop knobs
    (steps, batches, optimizer, cadences, stability, telemetry, sanity mode) are the shared `TrainLoopSpec`'s."""

    steps: int = Field(150, ge=0, description="Optimizer steps; 0 writes the pretrained weights as they are "
                       "(with both pretrain and sft at 0, `dvc repro export` converts HF → forgeline → HF).")
    optim: OptimSpec = Field(default_factory=_sft_optim, description="Optimizer and schedule.")
    seq_len: int | None = Field(None, ge=8, description="Packed row length in tokens (null: pretraining's).")
    overflow: Literal["drop", "truncate"] = Field(
        "truncate", description="A conversation longer than seq_len: truncate it (its tail carries no loss) or "
        "drop it (counted in the report).")
    dropout: float | None = Field(
        None, ge=0.0, lt=1.0, description="Dropout on attention and MLP outputs while finetuning. null (the "
        "default): 0.1 for a model pretrained here from scratch; none for a Hugging Face checkpoint, whose "
        "families (llama, mistral, qwen2, qwen3, phi3) state attention_dropout 0 (and phi3 resid_pdrop 0: a "
        "phi3 file stating either above 0 is refused at import, having no exact forgeline counterpart) "
        "(specs/init.py: a default never overrides what the checkpoint states). A number applies to either.")
    dp: int = Field(1, ge=1, le=4096, description="Data-parallel ranks (the launcher, hostfile and accelerator "
                    "come from `parallel`).")
    tp: int = Field(1, ge=1, le=64, description="Tensor-parallel ranks (heads and MLP split, as in pretraining); "
                    "world size dp × tp. SFT has no pipeline parallelism: its packed rows need the whole model.")
    zero_stage: int = Field(0, ge=0, le=3, description="ZeRO stage over the data-parallel ranks (0-3; ≤ 2 with "
                            "tp > 1).")
    sequence_parallel: bool = Field(
        False, description="Sequence parallelism for SFT's tensor-parallel ranks (as `parallel.sequence_parallel` "
        "for pretraining, which SFT does not inherit): outside the attention and MLP matmuls each TP rank holds "
        "seq_len/tp of a packed row's tokens, for long rows. No effect at tp = 1; seq_len must divide by tp. "
        "Same weights and losses as without it, LoRA included.")
    adapter: AdapterSpec = Field(default_factory=AdapterSpec, description="Full finetuning, or LoRA adapters.")
    compare_prompts: int = Field(8, ge=0, le=1000, description="Held-out conversations whose first user turn "
                                 "both the pretrained and the finetuned model answer (side by side in the report).")
    sampling: SamplingSpec = Field(
        default_factory=lambda: SamplingSpec(max_new_tokens=48), description="Sampling of those answers "
        "(stops at the end-of-turn marker).")
    spotcheck_per_stratum: int = Field(2, ge=0, le=1000, description="Finetuned answers per source in the "
                                       "spot-check sample of the second review gate (`review_sft`).")


SCRATCH_DROPOUT = 0.1  # sft.dropout when null, for a model pretrained from scratch (the default run)


def resolved_dropout(dropout: float | None, from_checkpoint: bool) -> float:
    """`sft.dropout`, or when null the default of the model's origin (see the field)."""
    if dropout is not None:
        return dropout
    return 0.0 if from_checkpoint else SCRATCH_DROPOUT


class SFTJob(StrictModel):
    """What the sft stage's `run()` receives: its own section and the rank layout it trains with."""

    train: SFTSpec
    parallel: ParallelSpec
    flags: FlagSpec = Field(default_factory=FlagSpec, description="`evaluate.spotcheck.flags`: how the finetuned "
                            "answers are flagged for the second review gate (as evaluate flags the first's).")

    @classmethod
    def from_sections(cls, sft: SFTSpec, parallel: ParallelSpec, flags: FlagSpec | None = None) -> "SFTJob":
        if sft.tp > 1 and sft.zero_stage > 2:
            raise ValueError(f"sft.zero_stage: {sft.zero_stage} with sft.tp = {sft.tp}; ZeRO-3 partitions the "
                             "tensor-parallel slices again, which this engine does not support (use ≤ 2)")
        layout = ParallelSpec.model_validate({**parallel.model_dump(), "dp": sft.dp, "tp": sft.tp, "pp": 1,
                                              "zero_stage": sft.zero_stage,
                                              "sequence_parallel": sft.sequence_parallel})
        return cls(train=sft, parallel=layout, flags=flags or FlagSpec())
