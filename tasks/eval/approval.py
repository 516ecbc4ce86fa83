"""The check a stage makes before it trains on a model: the review gate before it approved that model."""

from __future__ import annotations

from pathlib import Path

from pydantic import ValidationError

from specs.review import ReviewDecision


def require_approval(decision_file: Path, stage: str, what: str, gate: str) -> ReviewDecision:
    """The gate's decision in `decision_file`, refused unless it approves `what` (typed: a hand-edited or
    truncated decision is refused naming the field, not read as "not approve")."""
    if not decision_file.exists():
        raise FileNotFoundError(f"{stage}: {decision_file} not found: the review gate has not decided (run `{gate}`)")
    try:
        decision = ReviewDecision.model_validate_json(decision_file.read_text())
    except ValidationError as exc:
        raise ValueError(f"{stage}: {decision_file} is not a valid review decision: {exc}") from exc
    if decision.decision != "approve":
        raise ValueError(f"{stage}: the review gate rejected {what} ({decision.reviewer}): {decision.notes}")
    return decision
