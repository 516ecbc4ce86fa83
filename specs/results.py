"""What stages hand back and leave behind: StageResult and the lineage manifest."""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict, Field


class FileRecord(BaseModel):
    """One file with its content hash, relative to the project root."""

    model_config = ConfigDict(extra="forbid")

    path: str = Field(..., description="Path relative to the project root (posix separators).")
    sha256: str = Field(..., description="Hex sha256 of the file's bytes.")
    bytes: int = Field(..., ge=0, description="File size.")


class StageResult(BaseModel):
    """The typed value every stage's `run()` returns."""

    model_config = ConfigDict(extra="forbid")

    stage: str = Field(..., description="Stage name.")
    ok: bool = Field(True, description="False when the stage's gate failed or it crashed (the CLI exits non-zero).")
    error: str | None = Field(None, description="Set when the stage crashed instead of finishing (retryable).")
    counts: dict[str, Any] = Field(default_factory=dict, description="Record counts, by kind and source.")
    outputs: list[str] = Field(default_factory=list, description="Files written, relative to the project root.")
    summary: str = Field("", description="Markdown summary for humans (shown in Prefect and the terminal).")
    table: list[dict[str, Any]] = Field(
        default_factory=list, description="Rows of the stage's main table (e.g. counts per source)."
    )


class Manifest(BaseModel):
    """Lineage of a stage's outputs, written as `manifest.json` beside them.

    Everything here is a function of the inputs, the spec and the code (its files' hashes), so a rerun writes
    the same bytes and `dvc repro` and the Prefect flow record the same hash — at any commit. Facts of one
    execution (start/end, host, git revision and dirty flag) go to the run record `runs/<stage>.json` instead:
    a git revision here would change every output's hash with each commit, even when nothing it depends on did.
    """

    model_config = ConfigDict(extra="forbid")

    stage: str
    spec: dict[str, Any] = Field(..., description="The resolved spec the stage ran with.")
    spec_hash: str
    code: list[FileRecord] = Field(default_factory=list, description="The stage's code files and their hashes.")
    inputs: list[FileRecord] = Field(default_factory=list)
    outputs: list[FileRecord] = Field(default_factory=list)
    counts: dict[str, Any] = Field(default_factory=dict)
    packages: dict[str, str] = Field(default_factory=dict, description="Versions of the libraries that matter.")


class ValidationVerdict(BaseModel):
    """What the validate gate hands on, written as `data/validate/verdict.json` when the gate lets the records through.

    The stages it gates (clean, multimodal) depend on this file, not on the whole folder: its report and manifest
    also change with knobs that do not change the verdict (`validate.examples`, the report page, a comment in
    validate's code), and those must re-run validate alone, not everything that trains on the records.
    """

    model_config = ConfigDict(extra="forbid")

    passed: bool = Field(..., description="Every expectation passed (False: failures reported only, "
                                          "`validate.fail_on_error: false`).")
    records: int = Field(..., ge=0, description="Records validated.")
    checked: FileRecord | None = Field(..., description="The ingest manifest of the records validated (None: "
                                                         "records put together without the pipeline).")


class RunRecord(BaseModel):
    """Wall-clock facts of one execution of a stage (not versioned: they differ on every run)."""

    model_config = ConfigDict(extra="forbid")

    stage: str
    started_at: str
    finished_at: str
    duration_s: float
    ok: bool
    host: str
    python: str
    git_revision: str | None
    git_dirty: bool | None
    manifest_sha256: str | None
