"""The human review pause in Prefect: show the spot-check sample, wait for a typed form, save the decision file.

Call `ask_review(root, target)` inside the flow, after the evaluate stage and before the review stage, when
`review.mode` is `prefect`. It publishes the sample (markdown + table artifacts), pauses the flow run with
`pause_flow_run(wait_for_input=ReviewForm...)` — the Prefect UI shows the form on the paused run — and turns the
answers into `reviews/<target>.json`, the file the review stage reads (the same one `python -m tasks review --interactive`
writes). A decision already on file for the current sample is returned without pausing.
"""

from __future__ import annotations

from pathlib import Path
from typing import Literal

from prefect import get_run_logger
from prefect.artifacts import create_markdown_artifact, create_table_artifact
from prefect.flow_runs import pause_flow_run
from prefect.input import RunInput
from pydantic import BaseModel, ConfigDict, Field

from specs.evaluate import SpotItem
from specs.review import ItemLabel, ReviewDecision
from tasks.core.files import sha256_file
from tasks.eval.review_gate import now_utc, read_review, review_spec, write_review
from tasks.eval.spotcheck import read_sample

def sample_path(target: str) -> Path:
    """The sample of what is reviewed: evaluate's for the pretrained model, the sft stage's for the finetuned one."""
    return Path("data") / ("evaluate" if target == "pretrain" else target) / "spotcheck.jsonl"
PREVIEW_CHARS = 400  # per item in the markdown artifact; the full (truncated-by-params) text is in the file


class ItemReview(BaseModel):
    """One row of the form: an item id (pre-filled) and the reviewer's label and note."""

    model_config = ConfigDict(extra="forbid")

    id: str = Field(..., description="Spot-check item id (see the sample artifact).")
    label: Literal["ok", "hallucination", "toxic", "pii-leak", "low-quality"] = Field(
        "ok", description="Verdict on this item.")
    note: str = Field("", description="Optional remark.")


class ReviewForm(RunInput):
    """What the Prefect UI asks when the flow pauses for review."""

    decision: Literal["approve", "reject"] = Field(..., description="approve lets the pipeline continue to SFT.")
    reviewer: str = Field(..., min_length=1, description="Your name.")
    notes: str = Field("", description="Overall notes (shown in the pipeline's summary on a reject).")
    items: list[ItemReview] = Field(default_factory=list, description="Per-item labels (default ok).")


def _key(target: str, what: str) -> str:
    """Artifact keys allow lower-case letters, digits and dashes only."""
    return f"review-{target}-{what}".replace("_", "-")


def sample_markdown(items: list[SpotItem], target: str, sha: str) -> str:
    """The sample as markdown for the artifact (and the form's description)."""
    lines = [f"# Review `{target}`: {len(items)} spot-check items", "",
             f"Sample sha256 `{sha}`. Label each item in the form (default ok), then approve or reject.", ""]
    for k, it in enumerate(items, start=1):
        lines.append(f"### {k}. `{it.id}` — {it.kind}, stratum `{it.stratum}`")
        if it.prompt is not None:
            lines.append(f"**Prompt:** `{' '.join(it.prompt.split())[:200]}`")
        if it.reason is not None:
            lines.append(f"**Dropped by clean:** {it.reason}" + (f" ({it.detail})" if it.detail else ""))
        text = it.text[:PREVIEW_CHARS] + ("…" if it.chars > PREVIEW_CHARS else "")
        lines += ["", "```text", text.replace("```", "'''"), "```"]
        lines.append(f"**Flags:** {', '.join(it.flags) or 'none'}" + (f" — {it.flag_detail}" if it.flag_detail else ""))
        lines.append("")
    return "\n".join(lines)


def publish_sample(items: list[SpotItem], target: str, sha: str) -> None:
    create_markdown_artifact(markdown=sample_markdown(items, target, sha), key=_key(target, "sample"),
                             description=f"spot-check sample to review ({target})")
    rows = [{"id": it.id, "kind": it.kind, "stratum": it.stratum, "flags": ", ".join(it.flags),
             "reason": it.reason or "", "text": " ".join(it.text.split())[:160]} for it in items]
    create_table_artifact(table=rows, key=_key(target, "items"), description=f"spot-check items ({target})")


def to_decision(answer: ReviewForm, items: list[SpotItem], sha: str) -> ReviewDecision:
    """The form's answers as a decision file; labels for ids not in the sample are an error."""
    known = {it.id for it in items}
    unknown = [i.id for i in answer.items if i.id not in known]
    if unknown:
        raise ValueError(f"review form labels unknown item(s): {', '.join(unknown[:5])}")
    return ReviewDecision(decision=answer.decision, reviewer=answer.reviewer.strip() or "unknown",
                          notes=answer.notes, items=[ItemLabel(**i.model_dump()) for i in answer.items],
                          time=now_utc(), mode="prefect", sample_sha256=sha)


def ask_review(root: str | Path, target: str, *, timeout_s: int | None = None, poll_interval_s: int = 5,
               force: bool = False) -> ReviewDecision:
    """Pause the current flow run for a human review of the sample; write and return the decision.

    timeout_s: how long to wait (default `review.prefect_timeout_s` from params.yaml); the flow run fails after.
    force: ask even when a decision for the current sample is already on file.
    """
    root = Path(root).resolve()
    logger = get_run_logger()
    sample_file = root / sample_path(target)
    if not sample_file.exists():
        raise FileNotFoundError(f"review: {sample_file} not found (run the evaluate stage first)")
    sha = sha256_file(sample_file)
    items = read_sample(sample_file)
    try:
        existing = read_review(root, target)
    except ValueError as exc:
        logger.warning("%s; asking again", exc)
        existing = None
    if existing is not None and existing.sample_sha256 == sha and not force:
        logger.info("review %s: decision on file for this sample (%s by %s); not pausing", target,
                    existing.decision, existing.reviewer)
        return existing

    publish_sample(items, target, sha)
    form = ReviewForm.with_initial_data(
        description=f"Review `{target}`: {len(items)} items (sample `{sha[:12]}`); see the `{_key(target, 'sample')}` "
                    "artifact. Label problems, then approve or reject.",
        items=[ItemReview(id=it.id) for it in items])
    timeout = timeout_s if timeout_s is not None else review_spec(root).prefect_timeout_s
    logger.info("review %s: pausing for a human decision (up to %d s)", target, timeout)
    answer = pause_flow_run(wait_for_input=form, timeout=timeout, poll_interval=poll_interval_s)
    decision = to_decision(answer, items, sha)
    path = write_review(root, target, decision)
    logger.info("review %s: %s by %s, written to %s", target, decision.decision, decision.reviewer, path)
    return decision
