"""Hand-made ingest shards and the validate spec checked against them (tests/test_validate.py,
tests/test_browser.py)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from specs.validate import ValidateSpec
from tasks.core.runner import StagePaths
from tasks.data.records import RECORD_SCHEMA, write_table

SPEC: dict[str, Any] = {
    "expectations": [
        {"expect": "not_null", "column": "text"},
        {"expect": "length_between", "column": "text", "min": 1, "max": 10_000},
        {"expect": "unique", "column": "id"},
        {"expect": "in_set", "column": "source", "values": ["literature", "code"]},
        {"expect": "media_exist", "column": "media"},
    ],
    "per_source": {"code": [{"expect": "in_set", "column": "lang", "values": ["python"]}]},
    "examples": 3,
}


def record(source: str, i: int, **changes: Any) -> dict[str, Any]:
    row = {"id": f"{source}/{i}", "text": f"document {i} of {source}", "source": source,
           "lang": "python" if source == "code" else "en", "origin": f"{source}.jsonl:{i}", "meta": "{}",
           "media": []}
    return {**row, **changes}


def project(root: Path, rows: list[dict[str, Any]]) -> StagePaths:
    """A project folder whose ingest output holds `rows`, one shard per source."""
    shards = root / "data" / "ingest" / "shards"
    shards.mkdir(parents=True)
    (root / "media").mkdir()
    (root / "media" / "cat.png").write_bytes(b"png")
    for source in sorted({r["source"] for r in rows}):
        write_table([r for r in rows if r["source"] == source], RECORD_SCHEMA, shards / f"{source}-00000.parquet")
    return StagePaths(root=root, stage="validate")


def spec(**changes: Any) -> ValidateSpec:
    return ValidateSpec.model_validate({**SPEC, **changes})
