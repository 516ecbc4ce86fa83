"""Preference tuning: the sections `prefer_data` (curated pairs), `prefer_ref` (the reference pass), `prefer` (DPO
on the one Trainer) and `review_prefer` (the gate after it), and what each stage's `run()` receives."""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import Field, field_validator, model_validator

from specs.base import StrictModel, line_cap_field, require_unique
from specs.clean import DedupSpec
from specs.evaluate import FlagSpec, SamplingSpec
from specs.instruct import SOURCE_NAME, DecontaminationSpec
from specs.pretrain import ParallelSpec
from specs.review import ReviewSpec
from specs.train import AdapterSpec, OptimSpec, TrainLoopSpec

RejectedKind = Literal["sft_greedy", "other_answer", "truncated"]


class _PreferenceSourceBase(StrictModel):
    name: str = Field(..., pattern=SOURCE_NAME, description="Source label carried by every pair.")
    max_pairs: int | None = Field(None, ge=1, le=100_000_000, description="Take at most this many pairs (null = "
                                  "all), chosen by a seeded hash of their ids; the rest count as `not_taken`.")


class EmbeddedPreferenceSource(_PreferenceSourceBase):
    """Pairs built at run time from what the project has: instruct's curated conversations give the prompt (the
    first user turn) and the chosen answer (the curated one); the rejected answer is, per pair by a seeded hash,
    one of `rejected`. Conversations of instruct's `heldout.jsonl` — which SFT never trained on — become held-out
    pairs, those of `train.jsonl` training pairs."""

    kind: Literal["embedded"] = Field("embedded", description="Discriminator: pairs built from instruct's output.")
    rejected: list[RejectedKind] = Field(
        default_factory=lambda: ["sft_greedy"], min_length=1,
        description="sft_greedy: the SFT model's own greedy answer to the prompt (what DPO should move away from; "
        "SPIN's construction; an empty one falls back to other_answer); other_answer: the curated answer to "
        "another prompt of the same source; "
        "truncated: the chosen answer cut to `truncate_fraction` of its words (teaches length: see the "
        "length-bias report).")
    max_new_tokens: int = Field(48, ge=1, le=4096, description="sft_greedy: tokens generated per answer at most.")
    truncate_fraction: float = Field(0.5, gt=0, lt=1, description="truncated: share of the words kept.")

    @field_validator("rejected")
    @classmethod
    def _unique_kinds(cls, kinds: list[str]) -> list[str]:
        require_unique(kinds, "rejected kinds")
        return kinds


class PreferenceFieldMap(StrictModel):
    """Field names in a file's records: TRL's `{prompt, chosen, rejected}` (strings or message lists), or
    open-instruct's full conversations `{chosen: [...], rejected: [...]}` sharing the prompt turns."""

    prompt: str = Field("prompt", description="The prompt: a string (one user turn) or a list of messages.")
    messages: str = Field("messages", description="Alternatively, the prompt as a list of messages.")
    chosen: str = Field("chosen", description="The preferred answer: a string, one assistant message, or the "
                        "whole conversation ending in it.")
    rejected: str = Field("rejected", description="The dispreferred answer, in the same form as `chosen`.")
    id: str | None = Field(None, description="A stable id field; null: `<file>:<line or row>`.")


class FilesPreferenceSource(_PreferenceSourceBase):
    """Downloaded preference sets (UltraFeedback-style): jsonl or parquet files, directories or globs."""

    kind: Literal["files"] = Field("files", description="Discriminator: files on disk.")
    paths: list[str] = Field(..., min_length=1, description="Files (.jsonl, .parquet), directories or globs, "
                             "relative to the project root.")
    fields: PreferenceFieldMap = Field(default_factory=PreferenceFieldMap, description="Field names.")
    max_line_bytes: int = line_cap_field()
    split: Literal["auto", "train", "heldout"] = Field(
        "auto", description="auto: the seeded held-out slice of `prefer_data` decides; train / heldout: all of "
        "this source's pairs go there (e.g. UltraFeedback's train_prefs and test_prefs files).")


PreferenceSource = Annotated[EmbeddedPreferenceSource | FilesPreferenceSource, Field(discriminator="kind")]


class PairFilterSpec(StrictModel):
    """Per-pair checks (first failure wins, ledgered with the reason)."""

    min_chars: int = Field(1, ge=1, description="Shortest prompt or answer kept (`empty`: shorter, or blank).")
    max_prompt_chars: int = Field(8_000, ge=1, description="Longer prompts are dropped (`length`).")
    max_answer_chars: int = Field(8_000, ge=1, description="Longer answers are dropped (`length`).")


class PreferDataSpec(StrictModel):
    """Curate preference pairs: read, check, deduplicate prompts, decontaminate, hold out a slice."""

    sources: list[PreferenceSource] = Field(
        default_factory=lambda: [EmbeddedPreferenceSource(name="instruct", max_pairs=256)], min_length=1,
        description="Preference sources, in order.")
    filters: PairFilterSpec = Field(default_factory=PairFilterSpec, description="Per-pair checks.")
    dedup: DedupSpec = Field(
        default_factory=lambda: DedupSpec(shingle_size=3, threshold=0.7),
        description="Exact and MinHash near dedup of the prompts (a prompt asked twice keeps its first pair in "
        "source order).")
    decontamination: DecontaminationSpec = Field(
        default_factory=DecontaminationSpec, description="Overlap of prompt or answers with evaluate's prompts "
        "and the `benchmark_files` items drops the pair (`decontamination`).")
    benchmark_files: list[str] = Field(
        default_factory=list, description="Benchmark/eval sets to decontaminate against (.jsonl: each line's "
        "`text`, else every string in it; .txt: each line), relative to the project root.")
    heldout_fraction: float = Field(0.1, ge=0, le=0.5, description="Share of `auto` pairs held out.")
    heldout_count: int | None = Field(None, ge=0, description="Exact held-out size of the `auto` pairs.")
    generate_batch: int = Field(32, ge=1, le=4096, description="sft_greedy: prompts decoded together.")

    @field_validator("sources")
    @classmethod
    def _unique_names(cls, sources: list) -> list:
        require_unique([s.name for s in sources], "source names")
        return sources


class PreferDataJob(StrictModel):
    """What `tasks.prefer_data.run` receives."""

    data: PreferDataSpec
    enabled: bool = Field(True, description="`prefer.enabled`: false writes empty splits, nothing is generated.")
    eval_prompts: list[str] = Field(default_factory=list, description="evaluate's prompts (decontamination).")


class PreferRefSpec(StrictModel):
    """The reference pass: per-pair log-probs of the frozen SFT model, computed once (a DVC artifact)."""

    row_len: int | None = Field(None, ge=16, description="Packed row length in tokens (null: twice the SFT "
                                "model's seq_len, so any pair fits; each answer is cut to the model's seq_len). "
                                "It decides which tokens are scored, so training reads it from this stage's report.")
    batch_rows: int = Field(16, ge=1, le=65_536, description="Packed rows per forward.")
    cpu_threads: int = Field(2, ge=1, le=1024, description="torch threads on a CPU (results do not depend on it).")


class PreferRefJob(StrictModel):
    """What `tasks.prefer_ref.run` receives: its section and what decides which tokens are scored."""

    ref: PreferRefSpec
    enabled: bool = Field(True, description="`prefer.enabled`.")


class PreferSpec(TrainLoopSpec):
    """DPO on the one Trainer: packed pair rows (chosen and rejected of a pair in one row, block-diagonal
    attention), per-sequence log-prob sums, the reference's read from `prefer_ref` (no second model)."""

    enabled: bool = Field(True, description="Run preference tuning; false: export takes SFT's model.")
    steps: int = Field(40, ge=0, description="Optimizer steps (the default run: 2.2 epochs of its 72 rows).")
    optim: OptimSpec = Field(
        default_factory=lambda: OptimSpec(lr=2e-4, min_lr=2e-5, warmup_steps=5), description="Optimizer and "
        "schedule. Gentler than SFT's: on the default run 5e-4 × 60 steps drove the loss to ~0, the held-out chosen "
        "answers' perplexity to 1.65× the SFT model's and the answers to garbage; 2e-4 × 40 keeps it at 1.34×.")
    eval_every: int = Field(20, ge=1, description="Steps between held-out evaluations (and one at the end).")
    checkpoint_every: int = Field(20, ge=1, description="Steps between checkpoints (and one at the end).")
    micro_batch_size: int = Field(4, ge=1, description="Packed rows per rank per micro-batch.")
    loss: Literal["sigmoid", "ipo"] = Field("sigmoid", description="sigmoid: DPO; ipo: IPO (per-token averaged "
                                            "log-ratios, TRL's form).")
    beta: float = Field(0.1, gt=0, le=100, description="KL strength β (IPO: its τ).")
    label_smoothing: float = Field(0.0, ge=0, lt=0.5, description="sigmoid only: conservative DPO's label noise ε.")
    dropout: float = Field(0.0, ge=0, lt=1, description="Dropout while tuning (0, as TRL: with dropout the "
                           "policy's log-probs at step 0 differ from the reference's and the loss is not ln 2).")
    dp: int = Field(1, ge=1, le=4096, description="Data-parallel ranks.")
    tp: int = Field(1, ge=1, le=64, description="Tensor-parallel ranks.")
    zero_stage: int = Field(0, ge=0, le=3, description="ZeRO stage (≤ 2 with tp > 1).")
    adapter: AdapterSpec | None = Field(
        None, description="Full tuning or LoRA (the reference is then the model with the adapter off: SFT's "
        "weights, as computed once). null: as `sft.adapter` (a LoRA run stays a LoRA run, and export writes the "
        "adapter trained last, on the SFT model as its base).")
    collapse_logprob_drop: float = Field(
        1.0, gt=0, description="Flag a collapse when the held-out chosen answers' mean log-prob per token falls "
        "by more than this (nats) from the SFT model's (DPO can lower both answers while widening the margin).")
    compare_prompts: int = Field(16, ge=0, le=1000, description="Held-out prompts answered by the SFT and the "
                                 "tuned model (lengths before/after, the review sample).")
    sampling: SamplingSpec = Field(default_factory=lambda: SamplingSpec(max_new_tokens=48),
                                   description="Sampling of those answers.")
    spotcheck_per_stratum: int = Field(2, ge=0, le=1000, description="Answers per source in the review sample.")

    @model_validator(mode="after")
    def _ipo_no_smoothing(self) -> PreferSpec:
        if self.loss == "ipo" and self.label_smoothing:
            raise ValueError("label_smoothing applies to the sigmoid loss only (set it to 0 with loss: ipo)")
        return self


class PreferJob(StrictModel):
    """What `tasks.prefer.run` (and its ranks) receive: the section and the rank layout it trains with."""

    train: PreferSpec
    parallel: ParallelSpec
    flags: FlagSpec = Field(default_factory=FlagSpec, description="`evaluate.spotcheck.flags`.")

    @classmethod
    def from_sections(cls, prefer: PreferSpec, parallel: ParallelSpec, flags: FlagSpec | None = None,
                      sft_adapter: AdapterSpec | None = None) -> PreferJob:
        """The job with the layout resolved and `prefer.adapter: null` resolved to SFT's adapter."""
        if prefer.adapter is None:
            prefer = prefer.model_copy(update={"adapter": sft_adapter or AdapterSpec()})
        if prefer.tp > 1 and prefer.zero_stage > 2:
            raise ValueError(f"prefer.zero_stage: {prefer.zero_stage} with prefer.tp = {prefer.tp} (use ≤ 2)")
        layout = ParallelSpec.model_validate({**parallel.model_dump(), "dp": prefer.dp, "tp": prefer.tp, "pp": 1,
                                              "zero_stage": prefer.zero_stage, "sequence_parallel": False})
        return cls(train=prefer, parallel=layout, flags=flags or FlagSpec())


class PreferReviewSpec(ReviewSpec):
    """The gate after preference tuning: review's checks (perplexity now against the SFT model's held-out loss,
    so the ratio allows some rise) plus the preference checks."""

    target: str = Field("prefer", pattern=r"^[a-z][a-z0-9_-]{0,63}$", description="Reviewed: `reviews/prefer.json`.")
    max_perplexity_ratio: float | None = Field(
        1.5, gt=0.0, description="auto: reject when held-out instruction perplexity exceeds this × the SFT "
        "model's (DPO trades a little likelihood for the margin; a wrecked model rises far more). null = none.")
    max_low_quality_fraction: float = Field(0.85, ge=0.0, le=1.0, description="auto: as review_sft's (short "
                                             "answers are low quality by the Gopher/C4 rules).")
    min_accuracy_gain: float | None = Field(
        0.01, ge=-1.0, le=1.0, description="auto: reject unless held-out preference accuracy after tuning is at "
        "least this much above the SFT model's (0.01: it must rise). null = no check.")
    reject_collapse: bool = Field(True, description="auto: reject when the chosen log-prob collapse is flagged "
                                  "(`prefer.collapse_logprob_drop`).")
