"""The `review` section (the gate between evaluate and SFT) and the review decision file's model."""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator

from specs.base import require_unique, StrictModel

LABELS = ("ok", "hallucination", "toxic", "pii-leak", "low-quality")
Label = Literal["ok", "hallucination", "toxic", "pii-leak", "low-quality"]
Mode = Literal["auto", "terminal", "prefect"]


class ReviewSpec(StrictModel):
    """How the evaluate stage's spot-check sample is judged before the pipeline may continue to SFT.

    `auto` approves when the metrics pass the thresholds below (CI and the demo). `terminal` and `prefect`
    read a human decision committed at `reviews/<target>.json` (written by the terminal walk-through or the
    Prefect form); it must have been made on the current sample."""

    mode: Mode = Field("auto", description="auto: thresholds decide; terminal / prefect: a human decision file.")
    target: str = Field(
        "pretrain", pattern=r"^[a-z][a-z0-9_-]{0,63}$",
        description="What is reviewed; the human decision is read from `reviews/<target>.json`.",
    )
    max_val_perplexity: float | None = Field(
        1000.0, gt=1.0, description="auto: reject when the overall held-out perplexity exceeds this (null = no "
        "limit). A model that learned nothing scores about the vocabulary size."
    )
    max_toxic_fraction: float = Field(
        0.25, ge=0.0, le=1.0, description="auto: reject when more than this share of generations is flagged toxic."
    )
    max_pii_fraction: float = Field(
        0.25, ge=0.0, le=1.0, description="auto: reject when more than this share of generations is flagged pii."
    )
    max_low_quality_fraction: float = Field(
        1.0, ge=0.0, le=1.0, description="auto: reject when more than this share of generations is flagged "
        "low_quality (1.0 = never; a tiny model's continuations are rarely fluent)."
    )
    prefect_timeout_s: int = Field(
        86_400, ge=10, le=30 * 86_400, description="prefect: how long the paused flow waits for the form."
    )


class ItemLabel(StrictModel):
    """A reviewer's verdict on one spot-check item."""

    id: str = Field(..., min_length=1, description="The item's id in spotcheck.jsonl.")
    label: Label = Field(..., description="ok | hallucination | toxic | pii-leak | low-quality.")
    note: str = Field("", max_length=10_000, description="Optional remark.")


class ReviewDecision(StrictModel):
    """`data/review/decision.json` and `reviews/<target>.json`: the verdict on one spot-check sample."""

    decision: Literal["approve", "reject"] = Field(..., description="approve lets the pipeline continue.")
    items: list[ItemLabel] = Field(default_factory=list, description="Per-item labels.")
    notes: str = Field("", max_length=100_000, description="The reviewer's overall notes (shown when rejected).")
    reviewer: str = Field(..., min_length=1, max_length=200, description="Who decided; `auto` for the policy.")
    time: str | None = Field(
        None, description="When a human decided (ISO 8601, UTC). Null for `auto`: its decision is a DVC output "
        "that must be byte-identical on rerun; the run's wall-clock time is in runs/review.json."
    )
    mode: Mode = Field(..., description="How the decision was made.")
    sample_sha256: str = Field(
        ..., pattern=r"^[0-9a-f]{64}$", description="sha256 of the spotcheck.jsonl the decision was made on."
    )

    @field_validator("items")
    @classmethod
    def _unique_items(cls, items: list[ItemLabel]) -> list[ItemLabel]:
        require_unique([i.id for i in items], "item ids", show=5)
        return items


class PerplexitySummary(BaseModel):
    """The `perplexity` block of a gated stage's report.json (other keys, e.g. per source, pass through)."""

    model_config = ConfigDict(extra="allow")

    perplexity: float | None = Field(None, ge=0, description="Validation perplexity; None when not measured.")


class GenerationSummary(BaseModel):
    """The `generations` block: how many sampled answers and which share carries each automatic flag."""

    model_config = ConfigDict(extra="allow")

    count: int = Field(0, ge=0, description="Generations judged.")
    flagged_fraction: dict[str, float] = Field(default_factory=dict, description="flag -> share in [0, 1].")


class GateReport(BaseModel):
    """What a review gate reads from the stage it judges (evaluate's, and sft's for `review_sft`, report.json):
    validated when written and when read back, so a report missing what the gate needs fails by name instead
    of reading as 'no perplexity' (which the policy would reject for the wrong reason)."""

    model_config = ConfigDict(extra="allow")

    perplexity: PerplexitySummary
    generations: GenerationSummary
