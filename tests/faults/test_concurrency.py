"""Two runs on one workspace at once: the second is refused (`dvc repro`: DVC's lock) or waits (the flow:
the workspace lock), clearly; nothing is corrupted — the outputs equal a single run's.

The first run is held provably mid-stage with the `pause` fault (clean stops after its first shard until the
test releases it), so the overlap does not depend on timing.
"""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.faults.test_kills import (Row, assert_row, base_projects, child_env, dvc, lock_entry,
                                     temp_free, tree_digest, workspace)


def start_paused(cmd: list[str], proj: Path, tmp_root: Path, tag: str, **env: str) -> tuple[subprocess.Popen, Path]:
    """Start `cmd` with clean set to pause after its first shard; return the process once it is paused there,
    and the release file to create to let it go on."""
    paused, release = tmp_root / f"{tag}.paused", tmp_root / f"{tag}.release"
    paused.unlink(missing_ok=True)
    release.unlink(missing_ok=True)
    proc = subprocess.Popen(cmd, cwd=proj, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                            env=child_env(FORGELINE_FAULT="clean.shard_done=1:pause", FORGELINE_FAULT_ONCE=str(paused),
                                          FORGELINE_FAULT_RELEASE=str(release), **env))
    deadline = time.monotonic() + 300
    while not paused.exists():
        if proc.poll() is not None or time.monotonic() > deadline:
            out = proc.communicate()[0] if proc.poll() is not None else "(still running)"
            release.touch()
            raise AssertionError(f"{cmd} never reached the pause:\n{out[-3000:]}")
        time.sleep(0.2)
    return proc, release


def two_dvc_repro(tmp_root: Path) -> Row:
    """`dvc repro clean` paused mid-stage; a second `dvc repro clean` on the same workspace meanwhile."""
    base = base_projects(tmp_root)
    proj = workspace(tmp_root, "two-repro")
    first, release = start_paused([sys.executable, "-m", "dvc", "repro", "clean"], proj, tmp_root, "two-repro")
    try:
        t0 = time.perf_counter()
        second = dvc(proj, "repro", "clean", check=False)
        refused_s = round(time.perf_counter() - t0, 2)
        still_running = first.poll() is None
    finally:
        release.touch()
    first_out = first.communicate(timeout=600)[0]
    msg = second.stdout + second.stderr
    row = Row("concurrent run", "second `dvc repro clean` while the first is mid-stage", recover_s=None)
    row.checks = {
        "first was mid-stage when the second ran": still_running,
        "second refused": second.returncode != 0,
        "refusal says the workspace is locked": "Unable to acquire lock" in msg or "is busy" in msg,
        "second never started the stage": "Running stage 'clean'" not in msg,
        "first finished": first.returncode == 0,
        "outputs byte-identical to a single run": tree_digest(proj / "data/clean") == tree_digest(base.mixed / "data/clean"),
        "dvc.lock identical": lock_entry(proj, "clean") == lock_entry(base.mixed, "clean"),
        "no temp files as outputs": temp_free(proj, "clean"),
    }
    row.outcome = f"second refused in {refused_s:.1f} s; first unharmed" if row.ok else "FAILED"
    row.lost = "none"
    row.details = {"second": msg[-1500:], "first": first_out[-1500:]}
    return row


def two_flows(tmp_root: Path) -> Row:
    """Two `python -m flows run --until clean` (each with its own temporary Prefect server) on one workspace:
    the second waits for the first's workspace lock, then finds everything up to date."""
    base = base_projects(tmp_root)
    proj = workspace(tmp_root, "two-flows")
    cmd = [sys.executable, "-m", "flows", "run", "--root", str(proj), "--until", "clean"]
    first, release = start_paused(cmd, proj, tmp_root, "two-flows", PREFECT_HOME=str(tmp_root / "prefect-a"),
                                  PREFECT_API_URL=None)
    second = subprocess.Popen(cmd, cwd=proj, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                              env=child_env(PREFECT_HOME=str(tmp_root / "prefect-b"), PREFECT_API_URL=None))
    waited = ""
    try:
        deadline = time.monotonic() + 300
        lock = proj / ".dvc/tmp/forgeline-run.lock"
        while time.monotonic() < deadline and second.poll() is None:
            time.sleep(1.0)  # the second flow needs its own server first; then it meets the lock
            waited = "waiting" if first.poll() is None and _blocked_on(lock, second.pid) else waited
            if waited:
                break
    finally:
        release.touch()
    out_a = first.communicate(timeout=600)[0]
    out_b = second.communicate(timeout=600)[0]
    row = Row("concurrent run", "second Prefect flow while the first is mid-stage")
    row.checks = {
        "first finished": first.returncode == 0 and "clean: ran" in out_a,
        "second waited for the workspace": "waiting for the workspace" in out_b,
        "second finished, finding clean up to date": second.returncode == 0 and "clean: up to date" in out_b,
        "outputs byte-identical to a single run": tree_digest(proj / "data/clean") == tree_digest(base.mixed / "data/clean"),
        "dvc.lock identical": lock_entry(proj, "clean") == lock_entry(base.mixed, "clean"),
    }
    row.outcome = "second waited, then skipped (up to date)" if row.ok else "FAILED"
    row.lost = "none"
    row.details = {"first": out_a[-2000:], "second": out_b[-2000:], "seen_blocked": waited}
    return row


def _blocked_on(lock: Path, pid: int) -> bool:
    """Whether process `pid` (or a child) has the workspace lock file open while another holds it."""
    import psutil

    try:
        procs = [psutil.Process(pid), *psutil.Process(pid).children(recursive=True)]
        return any(f.path == str(lock) for p in procs for f in p.open_files())
    except psutil.Error:
        return False


# ------------------------------------------------------------------------------------------ tests

def test_second_dvc_repro_is_refused_and_nothing_is_corrupted(fault_root):
    assert_row(two_dvc_repro(fault_root))


@pytest.mark.slow
@pytest.mark.prefect
def test_second_flow_waits_for_the_workspace_and_nothing_is_corrupted(fault_root):
    assert_row(two_flows(fault_root))


def test_a_stage_started_by_hand_is_refused_while_the_workspace_is_held(tmp_path):
    """`python -m tasks <stage>` and a plain `dvc repro` take the workspace lock too: beside a flow run they are
    refused at once, naming the holder; a stage started by the holder (marked in its environment) runs."""
    from tasks.core.dvcrun import LOCK_HELD_ENV, workspace_lock
    from tests.conftest import make_project

    project = make_project(tmp_path / "proj")
    stage = [sys.executable, "-m", "tasks", "ingest"]
    env = child_env()
    with workspace_lock(project, "flow run 'brave-otter'"):
        by_hand = subprocess.run(stage, cwd=project, env=env, capture_output=True, text=True, timeout=120)
        assert by_hand.returncode == 1
        assert "busy: flow run 'brave-otter'" in by_hand.stderr and "Traceback" not in by_hand.stderr
        repro = dvc(project, "repro", "ingest", env=env, check=False)
        assert repro.returncode != 0 and "busy: flow run 'brave-otter'" in repro.stdout + repro.stderr
        assert not (project / "data/ingest/manifest.json").exists()
        on_behalf = subprocess.run(stage, cwd=project, env={**env, LOCK_HELD_ENV: "test"}, capture_output=True,
                                   text=True, timeout=120)
        assert on_behalf.returncode == 0, on_behalf.stderr[-2000:]
    again = subprocess.run(stage, cwd=project, env=env, capture_output=True, text=True, timeout=120)
    assert again.returncode == 0, again.stderr[-2000:]
