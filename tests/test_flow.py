"""The Prefect flow runs the same graph through DVC: same dvc.lock as `dvc repro`, skips what is up to date,
publishes artifacts, and fails with the gate's summary (without pointless retries)."""

from __future__ import annotations

import sys

import pytest

from tasks.core.graph import STAGE_NAMES
from tests.conftest import make_project, run

pytestmark = pytest.mark.prefect


@pytest.fixture(scope="module")
def prefect_server():
    from prefect.testing.utilities import prefect_test_harness

    with prefect_test_harness(server_startup_timeout=90):
        yield


def lock_outs(project) -> dict:
    import yaml

    lock = yaml.safe_load((project / "dvc.lock").read_text())
    return {name: {"outs": st["outs"], "deps": st["deps"], "params": st.get("params")}
            for name, st in lock["stages"].items()}


def test_flow_and_dvc_repro_end_in_the_same_state(tmp_path, prefect_server):
    from flows.pipeline import forgeline
    from prefect.client.orchestration import get_client

    by_dvc = make_project(tmp_path / "by_dvc")
    by_flow = tmp_path / "by_flow"
    run(["git", "clone", "-q", str(by_dvc), str(by_flow)], tmp_path)  # same commit, as two users would have
    run([sys.executable, "-m", "dvc", "repro"], by_dvc)

    outcomes = forgeline(root=str(by_flow))
    assert [(o.stage, o.ran) for o in outcomes] == [(s, True) for s in STAGE_NAMES]
    assert outcomes[0].result.counts["kept"] > 0
    assert (by_flow / "dvc.lock").read_text() == (by_dvc / "dvc.lock").read_text()
    assert lock_outs(by_flow) == lock_outs(by_dvc)
    status = run([sys.executable, "-m", "dvc", "status"], by_flow)
    assert "Data and pipelines are up to date" in status.stdout

    # A second flow run finds everything up to date and skips it, like `dvc repro` would.
    again = forgeline(root=str(by_flow))
    assert [(o.stage, o.ran) for o in again] == [(s, False) for s in STAGE_NAMES]

    import anyio

    async def artifact_keys():
        async with get_client() as client:
            return {a.key for a in await client.read_artifacts()}

    keys = anyio.run(artifact_keys)
    assert {f"{s}-{kind}" for s in STAGE_NAMES for kind in ("report", "counts")} <= keys


def test_flow_override_is_written_to_params_and_gate_failure_is_reported(tmp_path, prefect_server):
    from flows.pipeline import forgeline
    from specs import ParamsError
    from tasks.core.dvcrun import StageFailed

    project = make_project(tmp_path / "proj")
    with pytest.raises(ParamsError, match="ingest.max_doc_chars: must be ≥ 1, got 0"):
        forgeline(root=str(project), overrides={"ingest.max_doc_chars": 0})
    assert "max_doc_chars: 100000" in (project / "params.yaml").read_text()  # nothing written on a bad override

    with pytest.raises(StageFailed) as err:
        forgeline(root=str(project), overrides={"validate.expectations.3.values": ["docs"]})
    assert err.value.gate and err.value.stage == "validate"
    assert "in_set" in err.value.summary and "literature" in err.value.summary
    assert "- docs" in (project / "params.yaml").read_text()  # the override is in params, reproducible by DVC

    # A gate that said no is not retried (the same data would fail the same way); crashes would be.
    import anyio
    from prefect.client.orchestration import get_client
    from prefect.client.schemas.filters import TaskRunFilter, TaskRunFilterName

    async def failed_validate_runs():
        async with get_client() as client:
            runs = await client.read_task_runs(task_run_filter=TaskRunFilter(name=TaskRunFilterName(any_=["validate"])))
            return [r for r in runs if r.state and r.state.is_failed()]

    (failed,) = anyio.run(failed_validate_runs)
    assert failed.run_count == 1
