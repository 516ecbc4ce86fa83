"""The human review pause in Prefect: show the spot-check sample, wait for a typed form, save the decision file.

Call `ask_review(root, target)` inside the flow, after the evaluate stage and before the review stage, when
`review.mode` is `prefect`. It publishes the sample (markdown + table artifacts), pauses the flow run with
`pause_flow_run(wait_for_input=...)` with a form built for the sample: one field per item, titled with its id,
its content (prompt and generation, or the document excerpt with flags and drop reason) as the description right
above its label (ok / bad / unsure) and note — the Prefect UI shows it on the paused run — and turns the
answers into `reviews/<target>.json`, the file the review stage reads (the same one `python -m tasks review --interactive`
writes). A decision already on file for the current sample is returned without pausing.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any, Literal
from uuid import UUID

from prefect import get_run_logger
from prefect.artifacts import create_markdown_artifact, create_table_artifact
from prefect.flow_runs import pause_flow_run
from prefect.input import RunInput
from prefect.settings import PREFECT_UI_URL
from pydantic import BaseModel, ConfigDict, Field, create_model

from specs.evaluate import SpotItem
from specs.review import ItemLabel, ReviewDecision
from tasks.core.files import sha256_file
from tasks.core.ui_layout import artifact_key, fit_table
from tasks.eval.review_gate import now_utc, read_review, review_spec, write_review
from tasks.eval.spotcheck import read_sample

KIND_TEXT = {"generation": "The model's continuation of a fixed prompt", "kept_doc": "A document clean kept",
             "dropped_doc": "A document clean dropped", "media": "A multimodal record the multimodal stage checked"}
MARKUP = re.compile(r"([\\`*_{}\[\]<>()#+\-.!|~])")  # CommonMark's backslash-escapable punctuation
PREVIEW_CHARS = 600  # per item in the form; the sample artifact shows the text as the sample keeps it


def sample_path(target: str) -> Path:
    """The sample of what is reviewed: evaluate's for the pretrained model, the sft stage's for the finetuned one."""
    return Path("data") / ("evaluate" if target == "pretrain" else target) / "spotcheck.jsonl"


class ItemReview(BaseModel):
    """One item's answer: a label and a note. The item itself (id, text, flags) is the field's title and
    description, shown right above these two inputs."""

    model_config = ConfigDict(extra="forbid")

    label: Literal["ok", "bad", "unsure"] = Field(
        "ok", description="ok | bad (a problem; on a dropped document: the drop was wrong) | unsure.")
    note: str = Field("", description="Why (optional).")


# The fields after the per-item ones: a reviewer reads and labels first, then decides.
DECISION_FIELDS: dict[str, Any] = {
    "decision": (Literal["approve", "reject"], Field(..., description="approve lets the pipeline continue.")),
    "reviewer": (str, Field(..., min_length=1, description="Your name.")),
    "notes": (str, Field("", description="Overall notes (shown in the pipeline's summary on a reject).")),
}


def field_name(k: int) -> str:
    """The form field of the k-th item (1-based): item ids hold `:` and `/`, which are awkward as JSON keys."""
    return f"item_{k:03d}"


def as_paragraphs(text: str) -> list[str]:
    """Text the UI's description markdown shows as written. That renderer folds single newlines (a fenced block
    comes out as one inline code span), so every line becomes its own paragraph, its markup characters escaped
    and its indentation kept as no-break spaces (plain leading spaces would start a code block or vanish)."""
    out = []
    for line in text.splitlines():
        body = line.lstrip(" ")
        if body.strip():
            out.append("\u00a0" * (len(line) - len(body)) + MARKUP.sub(r"\\\1", body))
    return out or ["(empty)"]


def item_description(item: SpotItem) -> str:
    """What the reviewer reads above an item's label (markdown): the prompt and generation, or the document
    excerpt with its drop reason, and the automatic flags."""
    text = item.text[:PREVIEW_CHARS] + ("…" if len(item.text) > PREVIEW_CHARS else "")
    shown = f" (first {min(len(item.text), PREVIEW_CHARS):,} of {item.chars:,} characters)" \
        if item.chars > min(len(item.text), PREVIEW_CHARS) else ""
    lines = [f"{KIND_TEXT[item.kind]}, stratum `{item.stratum}`", ""]
    if item.prompt is not None:
        lines += ["**Prompt:**", "", "\n\n".join(as_paragraphs(item.prompt)), ""]
    if item.reason is not None:
        by = "Quarantined by multimodal" if item.kind == "media" else "Dropped by clean"
        lines += [f"**{by}:** {item.reason}" + (f" ({item.detail})" if item.detail else ""), ""]
    if item.kind == "media":
        lines += [f"**{(item.media_kind or 'media').capitalize()}:** `{item.media_file or 'cannot be shown'}`", ""]
    lines += [("**Generation" if item.kind == "generation" else "**Text") + f"{shown}:**", "",
              "\n\n".join(as_paragraphs(text)), ""]
    detail = f" — {item.flag_detail}" if item.flag_detail else ""
    lines.append(f"**Flags:** {', '.join(item.flags) or 'none'}{detail}")
    return "\n".join(lines)


def review_form(items: list[SpotItem]) -> type[RunInput]:
    """A form with one field per item (title: its id and kind; description: its content), then the decision."""
    fields: dict[str, Any] = {
        field_name(k): (ItemReview, Field(default_factory=ItemReview, title=f"{k}. {it.id}",
                                          description=item_description(it)))
        for k, it in enumerate(items, start=1)}
    return create_model("ReviewForm", __base__=RunInput, **fields, **DECISION_FIELDS)


def _key(target: str, what: str) -> str:
    """`NN-review-<target>-<what>`, NN the gate's position in the pipeline (tasks/core/ui_layout.py)."""
    return artifact_key("review" if target == "pretrain" else f"review_{target}", f"review-{target}-{what}")


def artifact_url(artifact_id: UUID | None) -> str | None:
    """The UI page that shows an artifact's content (a key's page only lists its versions)."""
    ui = PREFECT_UI_URL.value()
    return f"{ui.rstrip('/')}/artifacts/artifact/{artifact_id}" if ui and artifact_id else None


def sample_markdown(items: list[SpotItem], target: str, sha: str) -> str:
    """The sample as markdown for the artifact: every item with its content, flags and drop reason."""
    lines = [f"# Review `{target}`: {len(items)} spot-check items", "",
             f"Sample sha256 `{sha}`. Label each item in the form (ok, bad or unsure), then approve or reject.", ""]
    for k, it in enumerate(items, start=1):
        lines.append(f"### {k}. `{it.id}` — {it.kind}, stratum `{it.stratum}`")
        if it.prompt is not None:
            lines += ["**Prompt:**", "", "```text", it.prompt.replace("```", "'''"), "```"]
        if it.reason is not None:
            lines.append(f"**Dropped by clean:** {it.reason}" + (f" ({it.detail})" if it.detail else ""))
        cut = f" (first {len(it.text):,} of {it.chars:,} characters)" if it.chars > len(it.text) else ""
        lines += ["", ("**Generation" if it.kind == "generation" else "**Text") + f"{cut}:**", "",
                  "```text", it.text.replace("```", "'''"), "```"]
        detail = f" — {it.flag_detail}" if it.flag_detail else ""
        lines.append(f"**Flags:** {', '.join(it.flags) or 'none'}{detail}")
        lines.append("")
    return "\n".join(lines)


def publish_sample(items: list[SpotItem], target: str, sha: str) -> UUID:
    """The sample as a markdown artifact (returned: its id) and a table artifact (fitted to the screen)."""
    sample_id = create_markdown_artifact(markdown=sample_markdown(items, target, sha), key=_key(target, "sample"),
                                         description=f"spot-check sample to review ({target})")
    rows = [{"id": it.id, "kind": it.kind, "flags": ", ".join(it.flags), "reason": it.reason or "",
             "text": it.text} for it in items]
    for n, part in enumerate(fit_table(rows), start=1):
        create_table_artifact(table=part, key=_key(target, "items" if n == 1 else f"items-part-{n}"),
                              description=f"spot-check items ({target})")
    return sample_id


def form_description(items: list[SpotItem], target: str, sha: str, sample_id: UUID | None = None) -> str:
    """Markdown above the form: what to do, and a link to the whole sample."""
    url = artifact_url(sample_id)
    link = f"[the {_key(target, 'sample')} artifact]({url})" if url else f"the `{_key(target, 'sample')}` artifact"
    return (f"**Review `{target}`**: {len(items)} items (sample `{sha[:12]}`). Each item below shows its content "
            f"and flags; label it ok, bad or unsure (a note says why), then approve or reject at the end. "
            f"Every item's text in full (as far as the sample keeps it): {link}.")


def to_decision(answer: RunInput, items: list[SpotItem], sha: str) -> ReviewDecision:
    """The form's answers as a decision file (one label per item, in sample order)."""
    labels = []
    for k, it in enumerate(items, start=1):
        got = getattr(answer, field_name(k), None) or ItemReview()
        labels.append(ItemLabel(id=it.id, label=got.label, note=got.note))
    return ReviewDecision(decision=answer.decision, reviewer=answer.reviewer.strip() or "unknown",
                          notes=answer.notes, items=labels, time=now_utc(), mode="prefect", sample_sha256=sha)


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

    sample_id = publish_sample(items, target, sha)
    form = review_form(items).with_initial_data(description=form_description(items, target, sha, sample_id))
    timeout = timeout_s if timeout_s is not None else review_spec(root).prefect_timeout_s
    logger.info("review %s: pausing for a human decision (up to %d s)", target, timeout)
    answer = pause_flow_run(wait_for_input=form, timeout=timeout, poll_interval=poll_interval_s)
    decision = to_decision(answer, items, sha)
    path = write_review(root, target, decision)
    logger.info("review %s: %s by %s, written to %s", target, decision.decision, decision.reviewer, path)
    return decision
