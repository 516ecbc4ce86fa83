"""SIGKILL mid-stage, re-run by hand under `dvc repro` and retried by the Prefect flow: the run completes and
its outputs equal an uninterrupted run's (byte-identical data stages; for training, metrics, report and model
byte-identical too); no temp file left by the killed writer is ever taken as an output.

This module also holds the helpers the other fault suites and `benchmarks/faults.py` share: one tiny
project (with planted PII and fake secrets in its input) run once through `validate` and once through `mix`,
copied per scenario, and scenario functions that inject a fault, recover, and return a `Row` of facts.
"""

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

import pytest
import yaml

from tasks.core.integrity import stray_temp_files
from tests.conftest import kill_point, make_project, seed_note, tiny_params

# ------------------------------------------------------------------------------------------ planted input
# Found by tasks/data/pii.py: they must reach ingest and never get past clean.
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
    """Build (once per process and folder) the tiny project with planted input, through validate and mix."""
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


def kill_clean_between_shards(tmp_root: Path, nth: int | None = None) -> Row:
    """SIGKILL clean after its nth finished shard (drawn at random unless given) under `dvc repro`; re-run
    `dvc repro` by hand."""
    base = base_projects(tmp_root)
    proj = workspace(tmp_root, "kill-clean-shard")
    nth = nth or kill_point("clean-shard", 1, ingest_shard_count(proj) - 1)
    row = Row("SIGKILL", f"clean, after shard {nth} (dvc repro{seed_note()})")
    killed = dvc(proj, "repro", "clean", env=child_env(FORGELINE_FAULT=f"clean.shard_done={nth}"), check=False)
    manifest_after_kill = (proj / "data/clean/manifest.json").exists()
    finished = sorted(p.name for p in (proj / "work/clean").glob("*/*.parquet"))
    status = dvc(proj, "status", "clean").stdout
    rerun, row.recover_s = timed(dvc, proj, "repro", "clean", check=False)
    total = ingest_shard_count(proj)
    log = rerun.stdout + rerun.stderr
    row.checks = {
        "killed run failed": killed.returncode != 0,
        "no manifest after the kill": not manifest_after_kill,
        "finished shards kept for resume": len(finished) == nth,
        "dvc sees clean as not done": "clean" in status and "up to date" not in status,
        "re-run succeeded": rerun.returncode == 0,
        "re-run resumed the finished shards": f"resumed: {nth} of {total} shards were already finished" in log,
        "outputs byte-identical": tree_digest(proj / "data/clean") == tree_digest(base.mixed / "data/clean"),
        "dvc.lock entry identical": lock_entry(proj, "clean") == lock_entry(base.mixed, "clean"),
        "no temp files as outputs": rerun.returncode == 0 and temp_free(proj, "clean"),
    }
    row.outcome = "resumed, byte-identical" if row.ok else "FAILED"
    row.lost = f"0 records ({nth}/{total} shards reused, {total - nth} redone)"
    row.details = {"killed": killed.stderr[-1500:], "rerun": log[-2000:], "finished": finished, "status": status}
    return row


def kill_clean_mid_write(tmp_root: Path) -> Row:
    """SIGKILL clean while its first output shard is a complete temp file not yet renamed into place (every
    work shard is finished by then); a downstream stage refuses the unfinished folder; `dvc repro` recovers."""
    base = base_projects(tmp_root)
    proj = workspace(tmp_root, "kill-clean-write")
    total = ingest_shard_count(proj)
    nth = 2 * total + 1  # each ingest shard makes two work files (signatures, rows); then the outputs
    row = Row("SIGKILL", "clean, mid-write of an output shard (dvc repro)")
    killed = dvc(proj, "repro", "clean", env=child_env(FORGELINE_FAULT=f"files.atomic_write={nth}"), check=False)
    temps = [p.relative_to(proj).as_posix() for p in stray_temp_files(proj / "data/clean")]
    finals = sorted(p.name for p in (proj / "data/clean/shards").glob("*.parquet"))
    manifest_after_kill = (proj / "data/clean/manifest.json").exists()
    downstream = stage_cli(proj, "mix")
    rerun, row.recover_s = timed(dvc, proj, "repro", "clean", check=False)
    log = rerun.stdout + rerun.stderr
    row.checks = {
        "killed run failed": killed.returncode != 0,
        "the interrupted write is a temp file": len(temps) == 1 and "/shards/." in temps[0],
        "no final shard yet": finals == [],
        "no manifest after the kill": not manifest_after_kill,
        "downstream refuses the unfinished folder": downstream.returncode != 0
        and "data/clean/manifest.json is missing: stage clean did not finish" in downstream.stderr
        and not (proj / "data/mix/manifest.json").exists(),
        "re-run succeeded": rerun.returncode == 0,
        "re-run reused every work shard": f"resumed: {total} of {total} shards were already finished" in log,
        "outputs byte-identical": tree_digest(proj / "data/clean") == tree_digest(base.mixed / "data/clean"),
        "no temp files as outputs": rerun.returncode == 0 and temp_free(proj, "clean"),
    }
    row.outcome = "refused downstream; resumed, byte-identical" if row.ok else "FAILED"
    row.lost = f"0 records (the output shard rewritten; {total}/{total} work shards reused)"
    row.details = {"temps": temps, "downstream": downstream.stderr[-1500:], "rerun": log[-2000:]}
    return row


def tags(project: Path) -> dict[str, bool]:
    """Checkpoint tag -> has its manifest."""
    folder = project / "checkpoints/pretrain"
    return {p.name: (p / "forgeline.json").exists() for p in sorted(folder.glob("step*"))}


def kill_pretrain(tmp_root: Path, fault: str, name: str) -> tuple[Path, Any, dict[str, bool], Any, float]:
    """`dvc repro pretrain` SIGKILLed at `fault`, then re-run by hand: (project, killed run, checkpoint tags
    after the kill (tag -> has its manifest), re-run, re-run seconds)."""
    proj = workspace(tmp_root, name, which="mixed")
    killed = dvc(proj, "repro", "pretrain", env=child_env(FORGELINE_FAULT=fault), check=False)
    after = tags(proj)
    rerun, took = timed(dvc, proj, "repro", "pretrain", check=False)
    return proj, killed, after, rerun, took


def pretrain_recovered(proj: Path, ref: Path, rerun: Any) -> dict[str, bool]:
    """The promises after a re-run: done, byte-identical, DVC satisfied, no temp file anywhere."""
    # The whole out folder (metrics, report, model.pt) is byte-identical. The checkpoints' bytes are not: a
    # resumed run serializes equal tensors differently, so dvc.lock's checkpoints/pretrain hash differs.
    return {
        "re-run succeeded": rerun.returncode == 0,
        "data/pretrain byte-identical (metrics, report, model.pt)": rerun.returncode == 0
        and tree_digest(proj / "data/pretrain") == tree_digest(ref / "data/pretrain"),
        "dvc status clean": "up to date" in dvc(proj, "status", "pretrain").stdout,
        "no temp files as outputs": rerun.returncode == 0 and temp_free(proj, "pretrain")
        and not stray_temp_files(proj / "checkpoints/pretrain"),
    }


def kill_pretrain_mid_checkpoint(tmp_root: Path) -> Row:
    """SIGKILL while step 2's checkpoint is written (DeepSpeed's files there, the tag's manifest not): the
    re-run skips the partial tag and resumes from the previous one (the initial weights, step 0)."""
    ref = pretrain_reference(tmp_root)
    # The tiny run checkpoints the initial weights (its rollback target), then every 2 steps: hit 2 = step 2.
    proj, killed, after, rerun, took = kill_pretrain(tmp_root, "pretrain.checkpoint_write=2", "kill-pretrain-ckpt")
    log = rerun.stdout + rerun.stderr
    row = Row("SIGKILL", "pretrain, mid-checkpoint-write of step 2 (dvc repro)", recover_s=took)
    row.checks = {
        "killed run failed": killed.returncode != 0,
        "partial tag left without manifest": after.get("step000002") is False,
        "partial tag skipped on resume": "checkpoint step000002 skipped: no manifest" in log,
        "resumed from the previous valid tag": "resumed from step000000 at step 0" in log,
        **pretrain_recovered(proj, ref, rerun),
    }
    row.outcome = "partial checkpoint skipped; resumed from step 0; byte-identical" if row.ok else "FAILED"
    row.lost = "2 steps (the unpublished checkpoint's)"
    row.details = {"killed": killed.stderr[-1500:], "tags": after, "rerun": log[-2500:]}
    return row


def kill_pretrain_mid_step(tmp_root: Path, step: int | None = None) -> Row:
    """SIGKILL after a step of 4 drawn at random (checkpoints at 0 and every 2 steps, each written before the
    step's fault point): the re-run resumes from the newest checkpoint at or before it."""
    ref = pretrain_reference(tmp_root)
    step = step or kill_point("pretrain-step", 1, 4)
    tag = 2 * (step // 2)
    proj, killed, after, rerun, took = kill_pretrain(tmp_root, f"pretrain.step_done={step}", "kill-pretrain-step")
    log = rerun.stdout + rerun.stderr
    row = Row("SIGKILL", f"pretrain, after step {step} of 4 (dvc repro{seed_note()})", recover_s=took)
    row.checks = {
        "killed run failed": killed.returncode != 0,
        f"checkpoint of step {tag} is complete": after.get(f"step{tag:06d}") is True,
        f"resumed from step {tag}": f"resumed from step{tag:06d} at step {tag}" in log,
        **pretrain_recovered(proj, ref, rerun),
    }
    row.outcome = f"resumed from step {tag}; byte-identical" if row.ok else "FAILED"
    row.lost = f"{step - tag} step(s) after the last checkpoint"
    row.details = {"killed": killed.stderr[-1500:], "tags": after, "rerun": log[-2500:]}
    return row


def flow_retry_after_kill(tmp_root: Path, monkeypatch: pytest.MonkeyPatch) -> Row:
    """The Prefect flow (in this process; a Prefect server must be configured) runs until clean; clean is
    SIGKILLed once after its 2nd shard; the task's retry resumes it. Outputs equal the `dvc repro` reference."""
    from flows.pipeline import forgeline

    base = base_projects(tmp_root)
    proj = workspace(tmp_root, "flow-retry")
    marker = tmp_root / "flow-retry.fired"
    marker.unlink(missing_ok=True)
    monkeypatch.setenv("FORGELINE_FAULT", "clean.shard_done=2")
    monkeypatch.setenv("FORGELINE_FAULT_ONCE", str(marker))
    outcomes, wall = timed(forgeline, root=str(proj), until="clean", stage_retries=2)
    monkeypatch.delenv("FORGELINE_FAULT")
    runs = clean_task_runs()
    row = Row("SIGKILL", "clean, after shard 2 (Prefect flow, task retries)", recover_s=wall)
    row.checks = {
        "the fault fired": marker.exists(),
        "flow completed": [o.stage for o in outcomes if o.ran] == ["clean"],
        "clean ran twice (killed, retried)": [r.run_count for r in runs] == [2],
        "outputs byte-identical": tree_digest(proj / "data/clean") == tree_digest(base.mixed / "data/clean"),
        "dvc.lock entry identical": lock_entry(proj, "clean") == lock_entry(base.mixed, "clean"),
        "no temp files as outputs": temp_free(proj, "clean"),
    }
    row.outcome = "retried by Prefect, byte-identical" if row.ok else "FAILED"
    row.lost = "0 records (the retry reused 2 shards)"
    row.details = {"runs": [(r.name, r.run_count, str(r.state_type)) for r in runs]}
    return row


def clean_task_runs() -> list[Any]:
    import anyio
    from prefect.client.orchestration import get_client
    from prefect.client.schemas.filters import TaskRunFilter, TaskRunFilterName

    async def read():
        async with get_client() as client:
            return await client.read_task_runs(task_run_filter=TaskRunFilter(name=TaskRunFilterName(any_=["clean"])))

    return anyio.run(read)


# ------------------------------------------------------------------------------------------ tests
def fault_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """One folder for the whole session: the base projects are built once and shared by the fault suites
    (each suite's `fault_root` fixture returns this folder)."""
    root = tmp_path_factory.getbasetemp() / "faults"
    root.mkdir(exist_ok=True)
    return root



def test_clean_killed_between_shards_resumes_byte_identical(fault_root):
    assert_row(kill_clean_between_shards(fault_root))


def test_clean_killed_mid_write_leaves_a_temp_file_never_taken_as_output(fault_root):
    assert_row(kill_clean_mid_write(fault_root))


@pytest.mark.slow
def test_pretrain_killed_mid_checkpoint_write_resumes_from_the_previous_tag(fault_root):
    assert_row(kill_pretrain_mid_checkpoint(fault_root))


@pytest.mark.slow
def test_pretrain_killed_mid_step_resumes_byte_identical(fault_root):
    assert_row(kill_pretrain_mid_step(fault_root))


@pytest.fixture(scope="module")
def prefect_server():
    from prefect.testing.utilities import prefect_test_harness

    with prefect_test_harness(server_startup_timeout=90):
        yield


@pytest.mark.slow
@pytest.mark.prefect
def test_flow_task_retry_finishes_a_killed_stage(fault_root, prefect_server, monkeypatch):
    assert_row(flow_retry_after_kill(fault_root, monkeypatch))
