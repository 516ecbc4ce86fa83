"""What the fault scenarios share: one tiny project (with planted PII and fake secrets in its input) run once
through `validate` and once through `mix`, copied per scenario; commands run as a user would; the `Row` of
facts a scenario returns."""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from tasks.core.integrity import stray_temp_files
from tests.conftest import make_project, tiny_params

# ------------------------------------------------------------------------------------------ planted input
# Found by tasks/data/privacy/pii.py: they must reach ingest and never get past clean.
EMAILS = ("marta.kowalska@example.com", "j.smith+ledger@mailbox.org")
PHONES = ("(415) 555-0198", "020 7946 0321")
FAKE_KEY = "sk-proj-Zq8vR2mXk4Lp9TfW3yHc7NbD1sGj6KaE5uQo0VtY"  # an OpenAI-shaped key, not a real one
WANDB_SECRET = "f3a9c1e07b5d4a2e9c8b7a6f5e4d3c2b1a098765"       # planted in WANDB_API_KEY, never in the input
PLANTED_FILE = "inputs/planted.jsonl"
PLANTED_TEXTS = (
    "The harbour master keeps the tide tables in a blue ledger by the window. Write to {email} or call {phone} "
    "before the boats leave at dawn, because the pilots change shifts at six and nobody answers after that. "
    "The ledger also lists which moorings are free and which need new chains before the winter storms.",
    "Our orchard cooperative sells pressed cider every Saturday from the barn at the end of the lane. Orders "
    "go to {email}, and for large deliveries the driver can be reached on {phone}. Bring your own bottles; "
    "the deposit scheme ended last year when the glass works closed down for good.",
    "The night train to the coast stopped running in spring, so the reading group now meets in the library "
    "annex. The old configuration still had api_key = {key} in it, which someone pasted into the minutes "
    "before anyone noticed. The group is reading a long novel about a lighthouse keeper and his brother.",
)


def planted_records() -> list[dict[str, str]]:
    """Input records holding PII and a fake key, plus a broken line holding the key (quarantined raw)."""
    return [{"uid": f"planted-{i}", "body": text.format(email=EMAILS[i % 2], phone=PHONES[i % 2], key=FAKE_KEY)}
            for i, text in enumerate(PLANTED_TEXTS)]


def plant_inputs(root: Path) -> None:
    path = root / PLANTED_FILE
    path.parent.mkdir(parents=True, exist_ok=True)
    lines = [json.dumps(r) for r in planted_records()] + ['{"uid": "planted-broken", "body": "token ' + FAKE_KEY]
    path.write_text("\n".join(lines) + "\n")


# ------------------------------------------------------------------------------------------ commands
def in_process_executor(proj: Path) -> None:
    """Pin `run.executor` to the stage's own process (not a DVC param: nothing re-runs for it). A fault that
    counts every write of a stage (`files.atomic_write=N`) counts per process; in a pool each worker would
    count only its own shards' writes, and the parent only the outputs."""
    path = proj / "params.yaml"
    params = yaml.safe_load(path.read_text())
    params.setdefault("run", {})["executor"] = {"kind": "local", "workers": 1}
    path.write_text(yaml.safe_dump(params, sort_keys=False))


def child_env(**extra: str | None) -> dict[str, str]:
    """This interpreter first on PATH (dvc.yaml runs `python`), no fault unless given, extra vars (None: unset)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("FORGELINE_FAULT")}
    env["PATH"] = str(Path(sys.executable).parent) + os.pathsep + env.get("PATH", "")
    env.setdefault("DVC_NO_ANALYTICS", "1")
    for k, v in extra.items():
        if v is None:
            env.pop(k, None)
        else:
            env[k] = v
    return env


def sh(cmd: list[str], cwd: Path, env: dict[str, str] | None = None, check: bool = True,
       timeout: float = 600) -> subprocess.CompletedProcess:
    proc = subprocess.run(cmd, cwd=cwd, env=env or child_env(), capture_output=True, text=True, timeout=timeout)
    if check and proc.returncode != 0:
        raise AssertionError(f"{cmd} failed ({proc.returncode}):\n{proc.stdout[-4000:]}\n{proc.stderr[-4000:]}")
    return proc


def dvc(project: Path, *args: str, env: dict[str, str] | None = None, check: bool = True):
    return sh([sys.executable, "-m", "dvc", *args], project, env, check)


def stage_cli(project: Path, stage: str, env: dict[str, str] | None = None, check: bool = False):
    """`python -m tasks <stage>` by hand, as a user would without DVC."""
    return sh([sys.executable, "-m", "tasks", "--root", str(project), stage], project, env, check)


def timed(fn, *args, **kw) -> tuple[Any, float]:
    t0 = time.perf_counter()
    out = fn(*args, **kw)
    return out, round(time.perf_counter() - t0, 2)


# ------------------------------------------------------------------------------------------ projects
@dataclass(frozen=True)
class Base:
    """The tiny project after `dvc repro validate` (to run clean on) and after `dvc repro mix` (the reference
    for clean and mix, and the input of pretrain)."""

    validated: Path
    mixed: Path


_CACHE: dict[str, Any] = {}


def copy_workspace(src: Path, dest: Path) -> Path:
    """A copy of a whole workspace (git, DVC cache and state, outputs); DVC re-hashes and finds it up to date."""
    shutil.copytree(src, dest, symlinks=True)
    return dest


def base_projects(tmp_root: Path) -> Base:
    """Build (once per process and folder) the tiny project with planted input, through validate (+ instruct)
    and through mix."""
    key = f"base:{tmp_root}"
    if key not in _CACHE:
        validated, mixed, done = tmp_root / "base-validated", tmp_root / "base-mixed", tmp_root / "base.done"
        if not done.exists():  # a marker, so a later process (the benchmark's --keep) can reuse the folder
            shutil.rmtree(validated, ignore_errors=True)
            shutil.rmtree(mixed, ignore_errors=True)
            params = tiny_params(validated)
            plant_inputs(validated)
            make_project(validated, params)
            dvc(validated, "repro", "validate")
            dvc(validated, "repro", "instruct")  # clean decontaminates against its held-out set
            copy_workspace(validated, mixed)
            dvc(mixed, "repro", "mix")
            done.touch()
        _CACHE[key] = Base(validated, mixed)
    return _CACHE[key]


def pretrain_reference(tmp_root: Path) -> Path:
    """An uninterrupted `dvc repro pretrain` on a copy of the mixed project."""
    key = f"pretrain:{tmp_root}"
    if key not in _CACHE:
        ref, done = tmp_root / "ref-pretrain", tmp_root / "ref-pretrain.done"
        if not done.exists():
            shutil.rmtree(ref, ignore_errors=True)
            copy_workspace(base_projects(tmp_root).mixed, ref)
            dvc(ref, "repro", "pretrain")
            done.touch()
        _CACHE[key] = ref
    return _CACHE[key]


def workspace(tmp_root: Path, name: str, which: str = "validated") -> Path:
    """A fresh copy of a base project for one scenario."""
    dest = tmp_root / name
    shutil.rmtree(dest, ignore_errors=True)
    return copy_workspace(getattr(base_projects(tmp_root), which), dest)


def tree_digest(folder: Path) -> dict[str, str]:
    """relative path -> sha256 of every file under `folder` (temp files included: they must not be there)."""
    return {p.relative_to(folder).as_posix(): hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted(folder.rglob("*")) if p.is_file()}


def lock_entry(project: Path, stage: str) -> dict[str, Any]:
    return yaml.safe_load((project / "dvc.lock").read_text())["stages"][stage]


def manifest_paths(project: Path, stage: str) -> list[str]:
    manifest = json.loads((project / "data" / stage / "manifest.json").read_text())
    return [r["path"] for r in manifest["outputs"]]


def temp_free(project: Path, stage: str) -> bool:
    """No temp file in the stage's out folder, and none listed in its manifest."""
    listed = manifest_paths(project, stage)
    return not stray_temp_files(project / "data" / stage) and not [p for p in listed if ".tmp-" in p]


def ingest_shard_count(project: Path) -> int:
    return len(list((project / "data/ingest/shards").glob("*.parquet")))


# ------------------------------------------------------------------------------------------ scenario rows
@dataclass
class Row:
    """One fault scenario: what was injected where, what happened, what it cost; `checks` are the promises."""

    fault: str
    where: str
    outcome: str = ""
    lost: str = ""
    recover_s: float | None = None
    checks: dict[str, bool] = field(default_factory=dict)
    details: dict[str, Any] = field(default_factory=dict)

    @property
    def ok(self) -> bool:
        return bool(self.checks) and all(self.checks.values())


def assert_row(row: Row) -> None:
    """Fail naming every promise that did not hold, with the scenario's evidence (logs, listings)."""
    failed = [name for name, ok in row.checks.items() if not ok]
    evidence = json.dumps(row.details, indent=1, default=str)[-6000:]
    assert row.checks and not failed, f"{row.fault} @ {row.where}: did not hold: {failed}\n{evidence}"
