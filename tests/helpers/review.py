"""An evaluate output for the review gate to read, and the Prefect run that paused for a review
(tests/test_review.py, tests/test_browser.py)."""

from __future__ import annotations

import time
from pathlib import Path

from specs.evaluate import SpotItem
from tasks.core.files import sha256_file, write_json_atomic, write_text_atomic
from tasks.eval.spotcheck import sample_text

ITEMS = [
    SpotItem(id="gen:p1", kind="generation", stratum="generation:prose", source="prose", prompt="Once", text="upon a",
             chars=7),
    SpotItem(id="gen:p2", kind="generation", stratum="generation:prose", source="prose", prompt="Twice",
             text="a shit time", chars=11, flags=["toxic"], flag_detail="toxic: 1 hit(s): shit"),
    SpotItem(id="kept:docs/a", kind="kept_doc", stratum="kept_doc:docs", source="docs", text="Mail a@b.org",
             chars=300, flags=["pii", "low_quality"], flag_detail="pii: email ×1; low_quality: prose score 0.5"),
    SpotItem(id="dropped:docs/b", kind="dropped_doc", stratum="dropped_doc:docs", source="docs", text="short",
             chars=5, reason="low_quality", detail="prose score 0.4; failed: length"),
]


def write_evaluate(root: Path, items=ITEMS, perplexity: float = 120.0, toxic: float = 0.5, pii: float = 0.0,
                   baseline: float | None = 400.0) -> str:
    """An evaluate output folder (spotcheck.jsonl + report.json); returns the sample's sha256."""
    out = root / "data" / "evaluate"
    write_text_atomic(out / "spotcheck.jsonl", sample_text(items))
    write_json_atomic(out / "report.json", {
        "perplexity": {"loss": 4.787, "perplexity": perplexity, "tokens": 1000},
        "generations": {"count": 2, "flagged_fraction": {"toxic": toxic, "pii": pii, "low_quality": 0.0}},
        **({"baseline": {"kind": "unigram", "perplexity": baseline}} if baseline is not None else {})})
    return sha256_file(out / "spotcheck.jsonl")


def paused_run_id(flow_name: str, timeout: float = 60.0):
    from prefect import get_client
    from prefect.client.schemas.filters import (
        FlowFilter,
        FlowFilterName,
        FlowRunFilter,
        FlowRunFilterState,
        FlowRunFilterStateType,
    )
    from prefect.client.schemas.objects import StateType

    deadline = time.monotonic() + timeout
    with get_client(sync_client=True) as client:
        while time.monotonic() < deadline:
            runs = client.read_flow_runs(
                flow_filter=FlowFilter(name=FlowFilterName(any_=[flow_name])),
                flow_run_filter=FlowRunFilter(state=FlowRunFilterState(type=FlowRunFilterStateType(
                    any_=[StateType.PAUSED]))))
            if runs:
                return runs[0].id
            time.sleep(0.5)
    raise AssertionError("the flow never paused")
