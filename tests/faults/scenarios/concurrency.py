"""Two runs on one workspace at once, the first held mid-stage by the `pause` fault (tests/faults/
test_concurrency.py)."""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

from tests.faults.scenarios.common import (Row, base_projects, child_env, dvc, lock_entry, temp_free, tree_digest,
                                           workspace)


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
