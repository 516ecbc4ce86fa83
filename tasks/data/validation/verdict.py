"""The validate gate's verdict file: written by validate when the records may go on, required by the stages it
gates (clean, multimodal) before they read a record.

DVC has those stages depend on this file alone (tasks/core/graph.py, `StageDef.verdict`), so a validate rerun that
reaches the same verdict (another `examples`, a new report page) re-runs nothing after it. Without the file the
gate has not let the records through: validate failed, or was stopped before it decided.
"""

from __future__ import annotations

from pathlib import Path

from pydantic import ValidationError

from specs.results import ValidationVerdict
from tasks.core.files import file_records, write_json_atomic

VERDICT = "verdict.json"


def write_verdict(out: Path, root: Path, passed: bool, records: int, ingest_manifest: Path) -> ValidationVerdict:
    """Write `out/verdict.json` for records that may go on; `ingest_manifest` names what was validated (absent
    when a library caller put the records together by hand)."""
    checked = file_records([ingest_manifest], root) if ingest_manifest.is_file() else []
    verdict = ValidationVerdict(passed=passed, records=records, checked=checked[0] if checked else None)
    write_json_atomic(out / VERDICT, verdict.model_dump(mode="json"))
    return verdict


def require_validated(validate_dir: Path, stage: str) -> ValidationVerdict | None:
    """The verdict in `validate_dir`; refuses when the folder is there without one (the gate did not let the
    records through). None when there is no folder at all: a library caller that runs `stage` without the
    pipeline (in a pipeline project the runner already refuses a missing upstream folder)."""
    if not validate_dir.is_dir():
        return None
    path = validate_dir / VERDICT
    if not path.is_file():
        raise ValueError(f"{stage}: {path} not found: the validate gate has not let the records through "
                         "(see validate's summary, fix the data or its expectations, and run `validate` again)")
    try:
        return ValidationVerdict.model_validate_json(path.read_text(encoding="utf-8"))
    except ValidationError as exc:
        raise ValueError(f"{stage}: {path} is not a valid verdict: {exc}") from exc
