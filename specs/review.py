"""The `review` section (the gate between evaluate and SFT) and the review decision file's model."""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator

from specs.base import require_unique, StrictModel

LABELS = ("ok", "bad", "unsure")
# ok: fine as it is; bad: a problem (a wrong generation, a kept document that should have gone, a dropped one
# that should have stayed); unsure: the reviewer could not tell (a note says why).
Label = Literal["ok", "bad", "unsure"]
Mode = Literal["auto", "terminal", "prefect", "off"]


class ReviewSpec(StrictModel):
    """How a gated stage's spot-check sample is judged before the pipeline may continue (review: evaluate's,
    before SFT; review_sft: sft's, before export).

    `auto` approves when every check below passes; its defaults sit between the default run's measured values
    and what a broken run shows (README, "review"). `terminal` and `prefect` read a human decision committed at
    `reviews/<target>.json`; it must have been made on the current sample. `off` approves without looking and
    records "not reviewed" (conversions, CI): decision.json and the model card say so."""

    mode: Mode = Field("auto", description="auto: checks decide; terminal / prefect: a human decision file; "
                       "off: not reviewed (approved, recorded as not reviewed).")
    target: str = Field(
        "pretrain", pattern=r"^[a-z][a-z0-9_-]{0,63}$",
        description="What is reviewed; the human decision is read from `reviews/<target>.json`.",
    )
    max_perplexity_ratio: float | None = Field(
        0.8, gt=0.0, description="auto: reject unless held-out perplexity ≤ this × the baseline's (review: a "
        "unigram model of mix's train tokens; review_sft: the pretrained model before SFT). Default run: 0.28 "
        "(pretrain), 0.32 (sft); a model that learned nothing: ≥ 1. null = no check."
    )
    max_val_perplexity: float | None = Field(
        None, gt=1.0, description="auto: an absolute cap on the held-out perplexity as well (null = none)."
    )
    max_toxic_fraction: float = Field(
        0.25, ge=0.0, le=1.0, description="auto: reject when more than this share of generations is flagged toxic."
    )
    max_pii_fraction: float = Field(
        0.25, ge=0.0, le=1.0, description="auto: reject when more than this share of generations is flagged pii."
    )
    max_low_quality_fraction: float = Field(
        0.5, ge=0.0, le=1.0, description="auto: reject when more than this share of generations is flagged "
        "low_quality (default run: 0.125 or 0.625 pretrain by the data order, see params.yaml; 0.25 sft)."
    )
    repetition_n: int = Field(3, ge=1, le=16, description="auto: n of the word n-grams the repetition check counts.")
    max_repetition: float | None = Field(
        0.3, ge=0.0, le=1.0, description="auto: reject when the generations' mean repeated n-gram share (1 − "
        "distinct/total n-grams per generation) exceeds this; a looping model scores near 1 (default run: 0.0 "
        "for 3-grams). null = no check."
    )
    max_kept_pii_fraction: float = Field(
        0.0, ge=0.0, le=1.0, description="auto: reject when more than this share of the sample's kept documents "
        "is flagged pii. The flagger finds exactly what clean's scrubbing (at its defaults) replaces, so with "
        "scrubbing on the share is 0 by construction and any flag means scrubbing was off, narrowed or failing "
        "(before: 0.15, which approved a run whose kept sample carried e-mail addresses in 1 of 8 documents). "
        "A run that keeps some PII on purpose raises this; the model card then says so."
    )
    max_kept_toxic_fraction: float = Field(
        0.0, ge=0.0, le=1.0, description="auto: reject when more than this share of the sample's kept documents "
        "is flagged toxic. Kept documents are flagged by clean's own default rule (`evaluate.spotcheck.flags."
        "kept_toxicity`), so with clean's toxicity filter on the share is 0 by construction and a flag means the "
        "filter was off or loosened (before: 0.25 against the any-word flag, which a play's oath could trip "
        "and a quarter of toxic documents passed)."
    )
    max_disputed_drop_fraction: float = Field(
        0.0, ge=0.0, le=1.0, description="auto: reject when more than this share of the sampled documents clean "
        "dropped as toxic is not flagged toxic by the spot-check flagger (any listed word), i.e. the drop looks "
        "wrong: with clean's own word list a toxic drop always carries a listed word, so a disputed drop means "
        "the filter drops what the list does not hold (before: 0.5). Skipped when the sample has no such drop."
    )
    prefect_timeout_s: int = Field(
        86_400, ge=10, le=30 * 86_400, description="prefect: how long the paused flow waits for the form."
    )

    @field_validator("mode", mode="before")
    @classmethod
    def _yaml_off(cls, mode: object) -> object:
        # YAML 1.1 (PyYAML, so params.yaml and `--set`) reads a bare `off` as false: `review: {mode: off}`, as the
        # README writes it, must mean the mode, not fail as "input should be 'auto', ..., or 'off'".
        return "off" if mode is False else mode


class ItemLabel(StrictModel):
    """A reviewer's verdict on one spot-check item."""

    id: str = Field(..., min_length=1, description="The item's id in spotcheck.jsonl.")
    label: Label = Field(..., description="ok | bad | unsure (bad on a dropped document: the drop was wrong).")
    note: str = Field("", max_length=10_000, description="Optional remark.")


class ReviewDecision(StrictModel):
    """`data/review/decision.json` and `reviews/<target>.json`: the verdict on one spot-check sample."""

    decision: Literal["approve", "reject"] = Field(..., description="approve lets the pipeline continue.")
    items: list[ItemLabel] = Field(default_factory=list, description="Per-item labels.")
    notes: str = Field("", max_length=100_000, description="The reviewer's overall notes (shown when rejected).")
    reviewer: str = Field(..., min_length=1, max_length=200, description="Who decided; `auto` for the policy, "
                          "`nobody` in mode off.")
    reviewed: bool = Field(True, description="False when nobody looked (mode off): approved without review.")
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
    baseline: PerplexitySummary | None = Field(
        None, description="The perplexity the model must beat (evaluate: the unigram baseline of mix's tokens).")
