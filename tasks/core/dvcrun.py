"""Run stages through DVC from Python, so any runner (the Prefect flow, a test) leaves DVC's exact state.

A stage is executed by `dvc repro --single-item <stage>` in a child process: DVC decides whether it is up to
date, deletes and rewrites its outs, and records dvc.lock exactly as a hand-typed `dvc repro` would; the child's
output is streamed line by line to the caller's logger (Prefect shows it in the UI).

A runner that walks several stages holds `workspace_lock` for the whole walk: DVC's own repo lock covers one
command, not the overrides written into params.yaml before it nor the stages after it, so two runs on one
workspace would otherwise interleave. `save_experiment` records the finished workspace as a DVC experiment.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import socket
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path

from pydantic import BaseModel, Field

from specs.results import StageResult
from tasks.core import graph


class StageFailed(RuntimeError):
    """A stage exited non-zero. `gate` is True when it ran to completion and its quality gate said no
    (retrying cannot help), False for crashes (a retry may)."""

    def __init__(self, stage: str, summary: str, gate: bool):
        self.stage, self.summary, self.gate = stage, summary, gate
        super().__init__(f"stage {stage} failed" + (" its gate" if gate else "") + f":\n{summary}")


class StageOutcome(BaseModel):
    """What one stage did in a pipeline run."""

    stage: str
    ran: bool = Field(..., description="False when DVC found the stage up to date and skipped it.")
    result: StageResult | None = Field(None, description="The stage's last StageResult, when one is recorded.")


def _child_env() -> dict[str, str]:
    env = dict(os.environ)
    # dvc.yaml says `python -m tasks ...`: make `python` this interpreter even when no venv is activated.
    env["PATH"] = str(Path(sys.executable).parent) + os.pathsep + env.get("PATH", "")
    env.setdefault("DVC_NO_ANALYTICS", "1")
    return env


def read_result(root: Path, stage: str) -> StageResult | None:
    from tasks.core.runner import StagePaths

    path = StagePaths(root, stage).result_file
    if not path.exists():
        return None
    return StageResult.model_validate_json(path.read_text())


def reproduce_stage(root: Path, stage: str, log: Callable[[str], None] = print, force: bool = False,
                    env: dict[str, str] | None = None) -> StageOutcome:
    """Bring one stage up to date through DVC; raise StageFailed (with the stage's summary) on failure.
    `env`: extra environment for the stage's process (the flow passes its Prefect API address).

    One DVC command: `dvc repro --single-item` decides whether the stage is up to date (the same check as
    `dvc status`, which cost a second DVC start of ~2 s per stage), and its "didn't change, skipping" line says
    that it skipped."""
    result_file = root / graph.RUNS_DIR / f"{stage}.result.json"
    # Set aside, not deleted, so a crash is never reported with the previous run's summary and a stage DVC skips
    # keeps its last result. A walk killed in between left the aside copy: it is still the last result.
    held = result_file.with_name(f"{stage}.result.held.json")
    if result_file.exists():
        os.replace(result_file, held)
    cmd = [sys.executable, "-m", "dvc", "repro", "--single-item", *(["--force"] if force else []), stage]
    proc = subprocess.Popen(cmd, cwd=root, env={**_child_env(), **(env or {})}, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                            text=True, errors="replace", bufsize=1)
    tail: list[str] = []
    skipped = False
    assert proc.stdout is not None
    for line in proc.stdout:
        line = line.rstrip("\n")
        log(line)
        tail = (tail + [line])[-20:]
        skipped = skipped or line.strip() == f"Stage '{stage}' didn't change, skipping"
    if proc.wait() != 0:
        held.unlink(missing_ok=True)
        result = read_result(root, stage)
        if result is not None and not result.ok:
            # The stage finished and said no (e.g. a failed validation gate) — or recorded its own crash.
            raise StageFailed(stage, result.summary, gate=result.error is None)
        raise StageFailed(stage, "\n".join(tail), gate=False)
    if skipped and held.exists():
        os.replace(held, result_file)
    held.unlink(missing_ok=True)
    if skipped:
        log(f"{stage}: up to date (dvc.lock matches); skipped")
    return StageOutcome(stage=stage, ran=not skipped, result=read_result(root, stage))


def stages_not_up_to_date(root: Path, stages: list[str]) -> dict[str, list]:
    """The stages among `stages` that DVC would re-run, each with DVC's reason (changed deps/params/outs)."""
    if not stages:
        return {}
    # The whole pipeline's status, filtered: DVC re-reads dvc.yaml and dvc.lock for every named target (17 names
    # took 11 s against 3 s for all, on 2 cores), and one stage's status never depends on another's.
    proc = subprocess.run([sys.executable, "-m", "dvc", "status", "--json"], cwd=root, env=_child_env(),
                          capture_output=True, text=True)
    if proc.returncode != 0:
        raise StageFailed(stages[0], f"`dvc status` failed:\n{proc.stderr.strip()}", gate=False)
    status = json.loads(proc.stdout or "{}")
    # DVC keys stages by name (dvc.yaml at the root); the reason is DVC's own (e.g. {"changed deps": {...}}).
    return {name: status[name] for name in stages if name in status}


def describe_status(reasons: list) -> str:
    """One line from DVC's status entry for a stage, e.g. `changed deps: params.yaml (ingest modified)`."""
    parts = []
    for item in reasons:
        if isinstance(item, dict):
            for kind, detail in item.items():
                if not isinstance(detail, dict):
                    parts.append(f"{kind}: {detail}")
                    continue
                # {"params.yaml": {"ingest": "modified"}} -> "params.yaml (ingest modified)"
                names = [f"{k} ({', '.join(f'{p} {s}' for p, s in v.items())})" if isinstance(v, dict)
                         else f"{k} {v}" for k, v in detail.items()]
                parts.append(f"{kind}: {', '.join(names)}")
        else:
            parts.append(str(item))
    return "; ".join(parts) or "not run yet"


class WorkspaceBusy(RuntimeError):
    """Another run holds the workspace lock and did not let go within the timeout."""


LOCK_FILE = ".dvc/tmp/forgeline-run.lock"  # beside DVC's own repo lock; .dvc/tmp is git-ignored by DVC
# Set for the processes a lock holder starts (the flow's `dvc repro` and the stage under it): they run on its
# behalf, so a stage seeing it does not take the lock again (a second flock from a child would wait forever).
LOCK_HELD_ENV = "FORGELINE_WORKSPACE_LOCKED"


@contextlib.contextmanager
def workspace_lock(root: Path, holder: str, timeout: float | None = None, poll: float = 0.5,
                   on_wait: Callable[[str], None] | None = None) -> Iterator[None]:
    """Hold the workspace for a whole run: overrides, every stage, the experiment record.

    An OS file lock (flock) is released by the kernel when its holder dies, so a killed run never leaves a
    stale lock behind. A second run waits (`timeout` None: as long as it takes; otherwise raises WorkspaceBusy
    naming the holder) and calls `on_wait` once with the holder's description so users see why it paused.
    """
    path = root / LOCK_FILE
    path.parent.mkdir(parents=True, exist_ok=True)
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
    try:
        deadline = None if timeout is None else time.monotonic() + timeout
        told = False
        while True:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except BlockingIOError:
                other = _lock_holder(fd)
                if deadline is not None and time.monotonic() >= deadline:
                    raise WorkspaceBusy(f"workspace {root} is busy: {other} holds {LOCK_FILE} "
                                        f"(waited {timeout:g} s); try again when it has finished") from None
                if not told and on_wait is not None:
                    on_wait(f"waiting for the workspace: {other} holds {LOCK_FILE}")
                    told = True
                time.sleep(poll)
        os.ftruncate(fd, 0)
        os.pwrite(fd, f"{holder} (pid {os.getpid()} on {socket.gethostname()})".encode(), 0)
        try:
            yield
        finally:
            os.ftruncate(fd, 0)  # so a later waiter never names a run that has finished
            fcntl.flock(fd, fcntl.LOCK_UN)
    finally:
        os.close(fd)


def _lock_holder(fd: int) -> str:
    text = os.pread(fd, 4096, 0).decode(errors="replace").strip()
    return text or "another run"


def save_experiment(root: Path, name: str, stages: list[str], log: Callable[[str], None] = print) -> str:
    """Record the workspace (params, dvc.lock, metrics) as DVC experiment `name`; `dvc exp show` lists it.

    `dvc exp save` commits only git-tracked files and DVC outs: the untracked metrics files and the
    .gitignore files DVC wrote are named with -I so the experiment carries the run's metrics. Only `stages`
    are committed (a run cut with `until` has no outputs for later stages). Same name again: replaced.
    """
    untracked = subprocess.run(["git", "ls-files", "--others", "--exclude-standard"], cwd=root,
                               capture_output=True, text=True, check=True).stdout.split()
    metrics = {graph.stage(s).metrics_file for s in stages}
    include = [p for p in untracked if p in metrics or p == "dvc.lock" or Path(p).name == ".gitignore"]
    cmd = [sys.executable, "-m", "dvc", "exp", "save", "--force", "-n", name,
           *(arg for p in include for arg in ("-I", p)), *stages]
    proc = subprocess.run(cmd, cwd=root, env=_child_env(), capture_output=True, text=True)
    for line in (proc.stdout + proc.stderr).splitlines():
        if line.strip():
            log(line)
    if proc.returncode != 0:
        raise RuntimeError(f"`dvc exp save -n {name}` failed:\n{proc.stderr.strip()}")
    return name


class Selection(BaseModel):
    """Which stages a run walks, after `until`, `from_stage` and `force` were applied to DVC's order."""

    skip: list[str] = Field(default_factory=list, description="Before from_stage: must be up to date, not run.")
    run: list[str] = Field(default_factory=list, description="Brought up to date by DVC, in order.")
    force: list[str] = Field(default_factory=list, description="Re-run even when DVC says up to date.")


def select_stages(order: list[str], from_stage: str | None = None, force: list[str] | tuple = ()) -> Selection:
    """Cut DVC's stage order at `from_stage`; check `force` names stages that this run will execute.

    Raises ValueError naming the bad parameter, before any work.
    """
    if from_stage is not None and from_stage not in order:
        raise ValueError(f"from_stage={from_stage!r} is not among the stages of this run ({', '.join(order)}); "
                         "is it after `until`?")
    start = order.index(from_stage) if from_stage is not None else 0
    skip, run = order[:start], order[start:]
    bad = [s for s in force if s not in run]
    if bad:
        why = " (before from_stage: skipped, not run)" if any(s in skip for s in bad) else ""
        raise ValueError(f"force={bad} names stage(s) this run does not execute{why}; it runs: {', '.join(run)}")
    return Selection(skip=skip, run=run, force=[s for s in run if s in force])


class StagesNotUpToDate(RuntimeError):
    """`from_stage` would skip stages that DVC says must run first."""

    def __init__(self, from_stage: str, stale: dict[str, list]):
        self.stale = stale
        lines = [f"  {name}: {describe_status(reasons)}" for name, reasons in stale.items()]
        super().__init__(f"cannot start at {from_stage!r}: upstream stage(s) are not up to date:\n"
                         + "\n".join(lines) + f"\nrun without from_stage (or from {next(iter(stale))!r})")
