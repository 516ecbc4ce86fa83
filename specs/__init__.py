"""Typed contracts for forgeline: every key of params.yaml, stage results and manifests."""

from specs.base import ParamsError, StrictModel, spec_hash
from specs.ingest import EmbeddedSource, FieldMap, FilesSource, IngestSpec
from specs.params import Params, apply_overrides, load_params, parse_override, validate_params
from specs.results import FileRecord, Manifest, RunRecord, StageResult
from specs.run import RunSpec
from specs.validate import ExpectationSpec, ValidateSpec

__all__ = [
    "EmbeddedSource", "ExpectationSpec", "FieldMap", "FileRecord", "FilesSource", "IngestSpec", "Manifest",
    "Params", "ParamsError", "RunRecord", "RunSpec", "StageResult", "StrictModel", "ValidateSpec",
    "apply_overrides", "load_params", "parse_override", "spec_hash", "validate_params",
]
