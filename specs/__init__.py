"""Typed contracts for forgeline: every key of params.yaml, stage results and manifests.

The package names the params-level API only; each section's spec is imported from its own module
(`specs.ingest`, ...), so importing `specs` loads no stage's spec beyond what `specs.params` validates with.
"""

from specs.base import ParamsError, StrictModel, spec_hash
from specs.params import Params, apply_overrides, load_params, parse_override, validate_params
from specs.results import FileRecord, Manifest, RunRecord, StageResult

__all__ = [
    "FileRecord", "Manifest", "Params", "ParamsError", "RunRecord", "StageResult", "StrictModel", "apply_overrides",
    "load_params", "parse_override", "spec_hash", "validate_params",
]
