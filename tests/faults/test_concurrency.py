"""Two runs on one workspace at once: the second is refused (`dvc repro`: DVC's lock) or waits (the flow:
the workspace lock), clearly; nothing is corrupted — the outputs equal a single run's.

The first run is held provably mid-stage with the `pause` fault (clean stops after its first shard until the
test releases it), so the overlap does not depend on timing.
"""

from __future__ import annotations

import subprocess
import sys

import pytest

from tests.faults.scenarios.common import assert_row, child_env, dvc
from tests.faults.scenarios.concurrency import two_dvc_repro, two_flows


@pytest.mark.slow
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
