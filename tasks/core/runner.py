"""Run one stage under the stage contract: typed spec in, files + manifest + metrics + run record out."""

from __future__ import annotations

import importlib
import platform
import shutil
import subprocess
import sys
import time
from dataclasses import dataclass, field
from datetime import datetime, timezone
from importlib import metadata
from pathlib import Path

from specs import Params, spec_hash
from specs.results import FileRecord, Manifest, RunRecord, StageResult
from specs.run import ExecutorSpec
from tasks.core import graph
from tasks.core.executors import stage_session
from tasks.core.files import check_writable, file_records, sha256_file, write_json_atomic
from tasks.core.integrity import verify_upstream

MANIFEST = graph.MANIFEST
# Libraries whose versions can change a stage's output; recorded in every manifest.
TRACKED_PACKAGES = (
    "pydantic", "pyarrow", "pandas", "numpy", "great_expectations", "mwparserfromhell", "datasketch",
    "tokenizers", "torch", "deepspeed", "dvc", "prefect",
)


@dataclass(frozen=True)
class StagePaths:
    """Where a stage reads and writes, all derived from the project root and the stage registry."""

    root: Path
    stage: str
    seed: int = 0  # the run's master seed (`run.seed`); stages derive all their randomness from it
    executor: ExecutorSpec = field(default_factory=ExecutorSpec)  # `run.executor`: where per-shard work runs

    @property
    def out(self) -> Path:
        """The stage's output folder (a DVC out)."""
        return self.root / graph.stage(self.stage).out_dir

    def input(self, upstream: str) -> Path:
        """The output folder of an upstream stage."""
        if upstream not in graph.stage(self.stage).upstream:
            raise KeyError(f"stage {self.stage!r} does not depend on {upstream!r}")
        return self.root / graph.stage(upstream).out_dir

    @property
    def metrics(self) -> Path:
        return self.root / graph.stage(self.stage).metrics_file

    @property
    def reports(self) -> Path:
        """Human-facing renderings that cannot be byte-identical (HTML with timestamps): not a DVC out."""
        return self.root / graph.REPORTS_DIR / self.stage

    @property
    def run_record(self) -> Path:
        return self.root / graph.RUNS_DIR / f"{self.stage}.json"

    @property
    def result_file(self) -> Path:
        """The last StageResult, read by the Prefect flow to publish artifacts."""
        return self.root / graph.RUNS_DIR / f"{self.stage}.result.json"


def git_state(root: Path) -> tuple[str | None, bool | None]:
    try:
        rev = subprocess.run(["git", "rev-parse", "HEAD"], cwd=root, capture_output=True, text=True, check=True)
        dirty = subprocess.run(["git", "status", "--porcelain"], cwd=root, capture_output=True, text=True)
        return rev.stdout.strip(), bool(dirty.stdout.strip())
    except (OSError, subprocess.CalledProcessError):
        return None, None


def package_versions() -> dict[str, str]:
    versions = {}
    for name in TRACKED_PACKAGES:
        try:
            versions[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            continue
    return versions


def _now() -> str:
    return datetime.now(timezone.utc).isoformat(timespec="seconds")


def handed_on(sdef: graph.StageDef, records: list[FileRecord]) -> list[FileRecord]:
    """The upstream records the stage's manifest lists as its inputs: of a gate, its verdict file only (what
    DVC has the stage depend on), though the whole folder was verified."""
    gates = {graph.stage(u).out_dir: graph.stage(u).handed_on for u in sdef.upstream if graph.stage(u).verdict}
    return [r for r in records
            if not any(r.path.startswith(f"{folder}/") and r.path != verdict for folder, verdict in gates.items())]


def run_stage(name: str, params: Params, root: Path) -> StageResult:
    """Execute stage `name` and write its manifest, metrics, result and run record."""
    sdef = graph.stage(name)
    paths = StagePaths(root=root, stage=name, seed=params.run.seed, executor=params.run.executor)
    spec = params.section(name)
    module = importlib.import_module(f"tasks.{sdef.module_name}")

    # Before any work: the upstream folders must be what their producers wrote (a truncated or flipped file
    # fails here, named), and the output folder must take files. In a pipeline project (dvc.yaml) every
    # upstream folder was written by this runner, so one without a manifest is a stage that did not finish.
    upstream_records = handed_on(sdef, verify_upstream({u: paths.input(u) for u in sdef.upstream}, root,
                                                        require_manifest=(root / "dvc.yaml").exists()))
    check_writable(paths.out)

    # A previous run's manifest must not vouch for what this run is about to (re)write.
    (paths.out / MANIFEST).unlink(missing_ok=True)
    if not sdef.resumable and paths.out.exists():
        shutil.rmtree(paths.out)
    paths.out.mkdir(parents=True, exist_ok=True)

    started, t0 = _now(), time.perf_counter()
    with stage_session():  # one warm executor for all the stage's passes, stopped when it returns or fails
        result: StageResult = module.run(spec, paths)
    if not isinstance(result, StageResult):
        raise TypeError(f"tasks.{name}.run must return a StageResult, got {type(result).__name__}")

    rev, dirty = git_state(root)
    manifest = Manifest(
        stage=name,
        spec=spec.model_dump(mode="json", by_alias=True),
        spec_hash=spec_hash(spec),
        code=file_records([root / c for c in sdef.code_deps()], root),
        inputs=upstream_records + file_records([root / d for d in (*sdef.extra_deps, *graph.lineage_files(sdef))
                                                if (root / d).exists()], root),
        outputs=file_records([paths.out], root),
        counts=result.counts,
        packages=package_versions(),
    )
    write_json_atomic(paths.out / MANIFEST, manifest.model_dump(mode="json"))
    write_json_atomic(paths.metrics, {"ok": result.ok, **result.counts})
    result = result.model_copy(update={"outputs": [o.path for o in manifest.outputs]})
    write_json_atomic(paths.result_file, result.model_dump(mode="json"))
    record = RunRecord(
        stage=name, started_at=started, finished_at=_now(), duration_s=round(time.perf_counter() - t0, 3),
        ok=result.ok, host=platform.node(), python=sys.version.split()[0], git_revision=rev, git_dirty=dirty,
        manifest_sha256=sha256_file(paths.out / MANIFEST),
    )
    write_json_atomic(paths.run_record, record.model_dump(mode="json"))
    return result
