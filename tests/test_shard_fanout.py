"""Data-stage shards fanned out as Prefect tasks on a local Dask cluster (prefect-dask): the work really runs in
other processes, results come back in shard order, a failing shard fails the stage, and clean's outputs are
byte-identical to a run in one process — also when the stage is started by `python -m tasks` as DVC does."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from specs import Params
from specs.run import ExecutorSpec
from tasks.core.runner import run_stage
from tasks.core.shardmap import map_shards
from tests.helpers.clean import PARAMS, build_corpus

pytestmark = pytest.mark.prefect
DASK = {"kind": "dask", "workers": 2, "retries": 0}


@pytest.fixture(scope="module")
def prefect_api():
    from prefect.settings import PREFECT_API_URL
    from prefect.testing.utilities import prefect_test_harness

    with prefect_test_harness(server_startup_timeout=90):
        yield PREFECT_API_URL.value()


def flow_runs_named(name: str) -> list:
    from prefect.client.orchestration import get_client
    from prefect.client.schemas.filters import FlowRunFilter, FlowRunFilterName

    with get_client(sync_client=True) as client:
        return client.read_flow_runs(flow_run_filter=FlowRunFilter(name=FlowRunFilterName(any_=[name])))


def task_runs_of(flow_run_id) -> list:
    from prefect.client.orchestration import get_client
    from prefect.client.schemas.filters import FlowRunFilter, FlowRunFilterId

    with get_client(sync_client=True) as client:
        return client.read_task_runs(flow_run_filter=FlowRunFilter(id=FlowRunFilterId(any_=[flow_run_id])))


def test_shards_run_in_dask_workers_and_come_back_in_order(prefect_api):
    finished: list[int] = []
    runs = map_shards(pow, [(2, k) for k in range(8)], [f"s{k}" for k in range(8)], ExecutorSpec(**DASK),
                      "order-check", lambda i, run: finished.append(i))
    assert [r["result"] for r in runs] == [2 ** k for k in range(8)]
    assert sorted(finished) == list(range(8))
    pids = {r["pid"] for r in runs}
    assert os.getpid() not in pids and 1 <= len(pids) <= 2  # the cluster's worker processes, never this one

    (flow_run,) = flow_runs_named("order-check-shards")
    assert flow_run.state.is_completed()
    tasks = task_runs_of(flow_run.id)
    assert sorted(t.name for t in tasks) == [f"order-check:s{k}" for k in range(8)]
    assert all(t.state.is_completed() for t in tasks)


def test_a_failing_shard_fails_the_map_with_its_error(prefect_api):
    with pytest.raises(ValueError, match="invalid literal"):
        map_shards(int, [("1",), ("not a number",)], ["good", "bad"], ExecutorSpec(**DASK), "failing")
    (flow_run,) = flow_runs_named("failing-shards")
    assert flow_run.state.is_failed()


def test_clean_on_dask_is_byte_identical_to_one_process(prefect_api, tmp_path):
    local, fanned, by_cli = (tmp_path / n for n in ("local", "dask", "cli"))
    for root in (local, fanned, by_cli):
        root.mkdir()
        build_corpus(root)
    run_stage("clean", Params.model_validate(PARAMS), local)
    dask_params = {**PARAMS, "run": {**PARAMS["run"], "executor": DASK}}
    result = run_stage("clean", Params.model_validate(dask_params), fanned)
    assert result.counts["in"] == 35

    # As `dvc repro` starts it: a separate process that reaches the Prefect server through PREFECT_API_URL.
    import yaml

    (by_cli / "params.yaml").write_text(yaml.safe_dump(dask_params))
    proc = subprocess.run([sys.executable, "-m", "tasks", "--root", str(by_cli), "clean"], capture_output=True,
                          text=True, env={**os.environ, "PREFECT_API_URL": prefect_api})
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert proc.stderr.count("cleaned:") == 6  # one progress line per shard, written by the stage's process

    names = sorted(p.relative_to(local / "data/clean") for p in (local / "data/clean").rglob("*") if p.is_file())
    assert any(str(n).startswith("shards/") for n in names)
    for other in (fanned, by_cli):
        for name in names:
            if name == Path("manifest.json"):  # names the code and package versions; the outputs are what matter
                continue
            assert (other / "data/clean" / name).read_bytes() == (local / "data/clean" / name).read_bytes(), name

    clean_runs = flow_runs_named("clean-shards")
    assert len(clean_runs) == 2 and all(r.state.is_completed() for r in clean_runs)
    for run in clean_runs:
        assert sorted(t.name for t in task_runs_of(run.id)) == [f"clean:mixed-{n:05d}" for n in range(6)]


def test_under_the_forgeline_flow_the_shards_report_to_the_flows_server(prefect_api, tmp_path, monkeypatch):
    from flows.pipeline import forgeline
    from tests.conftest import make_project

    monkeypatch.delenv("PREFECT_API_URL", raising=False)  # only the flow's settings know the server: it passes it on
    project = make_project(tmp_path / "proj")
    before = len(flow_runs_named("clean-shards"))
    got = forgeline(root=str(project), until="clean", params={"run": {"executor": DASK}})
    assert [(o.stage, o.ran) for o in got] == [("ingest", True), ("validate", True), ("clean", True)]
    runs = flow_runs_named("clean-shards")
    assert len(runs) == before + 1
    newest = max(runs, key=lambda r: r.created)
    shards = sorted(p.stem for p in (project / "data/ingest/shards").glob("*.parquet"))
    assert sorted(t.name for t in task_runs_of(newest.id)) == [f"clean:{s}" for s in shards]
