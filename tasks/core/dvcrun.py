"""Run stages through DVC from Python, so any runner (the Prefect flow, a test) leaves DVC's exact state.

A stage is executed by `dvc repro --single-item <stage>` in a child process: DVC decides whether it is up to
date, deletes and rewrites its outs, and records dvc.lock exactly as a hand-typed `dvc repro` would; the child's
output is streamed line by line to the caller's logger (Prefect shows it in the UI).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Callable

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


def stage_is_up_to_date(root: Path, stage: str) -> bool:
    """Ask DVC whether `stage` alone is up to date (the flow has brought its upstream up to date already).

    A child process, like the run itself: DVC's Python API resolves workspace paths against the current
    directory, which a Prefect worker does not set to the project.
    """
    proc = subprocess.run([sys.executable, "-m", "dvc", "status", "--json", stage], cwd=root, env=_child_env(),
                          capture_output=True, text=True)
    if proc.returncode != 0:
        raise StageFailed(stage, f"`dvc status {stage}` failed:\n{proc.stderr.strip()}", gate=False)
    return json.loads(proc.stdout or "{}") == {}


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


def reproduce_stage(root: Path, stage: str, log: Callable[[str], None] = print, force: bool = False) -> StageOutcome:
    """Bring one stage up to date through DVC; raise StageFailed (with the stage's summary) on failure."""
    if not force and stage_is_up_to_date(root, stage):
        log(f"{stage}: up to date (dvc.lock matches); skipped")
        return StageOutcome(stage=stage, ran=False, result=read_result(root, stage))
    result_file = root / graph.RUNS_DIR / f"{stage}.result.json"
    result_file.unlink(missing_ok=True)  # so a crash cannot be reported with the previous run's summary
    cmd = [sys.executable, "-m", "dvc", "repro", "--single-item", *(["--force"] if force else []), stage]
    proc = subprocess.Popen(cmd, cwd=root, env=_child_env(), stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                            text=True, errors="replace", bufsize=1)
    tail: list[str] = []
    assert proc.stdout is not None
    for line in proc.stdout:
        line = line.rstrip("\n")
        log(line)
        tail = (tail + [line])[-20:]
    if proc.wait() != 0:
        result = read_result(root, stage)
        if result is not None and not result.ok:
            # The stage finished and said no (e.g. a failed validation gate) — or recorded its own crash.
            raise StageFailed(stage, result.summary, gate=result.error is None)
        raise StageFailed(stage, "\n".join(tail), gate=False)
    return StageOutcome(stage=stage, ran=True, result=read_result(root, stage))
