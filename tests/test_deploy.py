"""Deployments without any cloud, on a real local server (`prefect server start --host 127.0.0.1`):

- `python -m flows serve` + `prefect deployment run --params ... --watch`: typed parameters are validated by the
  server before a run exists; a good run writes the override into params.yaml and saves a DVC experiment;
- prefect.yaml + a `process` work pool + `prefect deploy --all` + `prefect worker start`: two runs at once are
  serialized by the deployment's concurrency limit, the worker runs them in the project folder.
"""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tasks.core.ui_layout import artifact_key
from tests.conftest import REPO, make_project, run

pytestmark = [pytest.mark.prefect, pytest.mark.slow]

TIMINGS: dict[str, float] = {}


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    from prefect.settings import PREFECT_API_URL, temporary_settings

    from flows.server import local_server, prefect_env

    home = tmp_path_factory.mktemp("prefect-home")
    t0 = time.monotonic()
    with local_server(home) as api_url, temporary_settings(updates={PREFECT_API_URL: api_url}):
        TIMINGS["server start"] = time.monotonic() - t0
        yield prefect_env(api_url, home)
        from tests.conftest import drain_prefect_workers

        drain_prefect_workers()  # before the server stops
    print("\ntimings (s):", json.dumps({k: round(v, 1) for k, v in TIMINGS.items()}))


def prefect_cli(args: list[str], cwd: Path, env: dict, timeout: float = 300) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "prefect", *args], cwd=cwd, env=env, capture_output=True,
                          text=True, timeout=timeout)


def deployment_run(name: str, params: dict, env: dict, cwd: Path, watch: bool = True) -> tuple[str, str]:
    """`prefect deployment run NAME --params JSON [--watch]`; returns (flow run id, output)."""
    proc = prefect_cli(["deployment", "run", name, "--params", json.dumps(params), *(["--watch"] if watch else [])],
                       cwd, env)
    out = proc.stdout + proc.stderr
    m = re.search(r"/runs/flow-run/([0-9a-f-]{36})", out)
    assert proc.returncode == 0 and m, out
    return m.group(1), out


def flow_run(run_id: str):
    from prefect.client.orchestration import get_client

    with get_client(sync_client=True) as client:
        return client.read_flow_run(run_id)


def wait_for_deployment(name: str, proc: subprocess.Popen, timeout: float = 120):
    from prefect.client.orchestration import get_client
    from prefect.exceptions import ObjectNotFound

    deadline = time.monotonic() + timeout
    with get_client(sync_client=True) as client:
        while True:
            assert proc.poll() is None, proc.stdout.read()
            try:
                return client.read_deployment_by_name(name)
            except ObjectNotFound:
                assert time.monotonic() < deadline, f"deployment {name} never appeared"
                time.sleep(0.5)


def artifact_data(run_id: str) -> dict[str, object]:
    from prefect.client.orchestration import get_client
    from prefect.client.schemas.filters import ArtifactFilter, ArtifactFilterFlowRunId

    with get_client(sync_client=True) as client:
        arts = client.read_artifacts(artifact_filter=ArtifactFilter(flow_run_id=ArtifactFilterFlowRunId(
            any_=[run_id])))
    return {a.key: a.data for a in arts if a.key}


def test_served_deployment_validates_typed_params_writes_overrides_and_saves_an_experiment(tmp_path, server):
    from flows.server import stop

    project = make_project(tmp_path / "served")
    served = subprocess.Popen([sys.executable, "-m", "flows", "serve", "--name", "t-serve"],
                              cwd=project, env=server, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        deployment = wait_for_deployment("forgeline/t-serve", served)
        assert deployment.parameters["root"] == str(project)

        # Refused by the server's schema before any run exists: unknown key, bound, unknown stage.
        for bad, why in (({"params": {"ingest": {"bogus": 1}}}, "'bogus' was unexpected"),
                         ({"params": {"ingest": {"max_doc_chars": 0}}}, "less than the minimum of 1"),
                         ({"until": "ingets"}, "is not one of")):
            proc = prefect_cli(["deployment", "run", "forgeline/t-serve", "--params", json.dumps(bad)], tmp_path,
                               server)
            assert proc.returncode != 0 and why in " ".join((proc.stdout + proc.stderr).split()), proc.stdout
        from prefect.client.orchestration import get_client
        from prefect.client.schemas.filters import DeploymentFilter, DeploymentFilterId

        with get_client(sync_client=True) as client:
            assert client.read_flow_runs(deployment_filter=DeploymentFilter(id=DeploymentFilterId(
                any_=[deployment.id]))) == []

        t0 = time.monotonic()
        run_id, out = deployment_run("forgeline/t-serve", {"until": "validate", "save_experiment": True,
                                                           "params": {"ingest": {"max_doc_chars": 50000}}},
                                     server, tmp_path)
        TIMINGS["served deployment run (ingest+validate)"] = time.monotonic() - t0
        fr = flow_run(run_id)
        assert fr.state.is_completed(), out
        assert (project / "data" / "ingest" / "manifest.json").exists()
        assert (project / "data" / "validate" / "results.json").exists()

        diff = json.loads(run([sys.executable, "-m", "dvc", "params", "diff", "--json"], project).stdout)
        assert diff["params.yaml"]["ingest.max_doc_chars"]["new"] == 50000
        show = json.loads(run([sys.executable, "-m", "dvc", "exp", "show", "--json"], project).stdout)
        exps = {r["name"]: r["data"] for b in show for e in (b.get("experiments") or []) for r in e["revs"]}
        assert fr.name in exps, list(exps)
        saved = exps[fr.name]
        assert saved["params"]["params.yaml"]["data"]["ingest"]["max_doc_chars"] == 50000
        ingest_metrics = saved["metrics"]["metrics/ingest.json"]["data"]
        assert ingest_metrics["ok"] is True and ingest_metrics["kept"] > 0

        keys = artifact_data(run_id)
        assert {"01-ingest-report", "02-validate-report", "01-data-funnel", "02-validate-data-docs",
                artifact_key("", "dvc-experiment")} <= set(keys)

        # The same run again: DVC finds both stages up to date, the flow skips them.
        t0 = time.monotonic()
        again_id, _ = deployment_run("forgeline/t-serve", {"until": "validate"}, server, tmp_path)
        TIMINGS["no-op re-run via deployment"] = time.monotonic() - t0
        assert flow_run(again_id).state.is_completed()
        assert "up to date, skipped" in str(artifact_data(again_id)["01-ingest-report"])
    finally:
        stop(served, grace=10)


def test_prefect_yaml_process_worker_runs_deployments_one_at_a_time_in_the_project(tmp_path, server):
    from prefect.client.orchestration import get_client

    from flows.server import stop

    project = make_project(tmp_path / "deployed")
    shutil.copy2(REPO / "prefect.yaml", project / "prefect.yaml")
    proc = prefect_cli(["work-pool", "create", "forgeline-local", "--type", "process", "--overwrite"], project,
                       server)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    t0 = time.monotonic()
    proc = prefect_cli(["--no-prompt", "deploy", "--all"], project, server)
    TIMINGS["prefect deploy --all"] = time.monotonic() - t0
    assert proc.returncode == 0, proc.stdout + proc.stderr
    with get_client(sync_client=True) as client:
        dep = client.read_deployment_by_name("forgeline/default")
        assert client.read_deployment_by_name("forgeline/data").parameters["until"] == "mix"
    # The build step recorded the project folder: the worker runs there wherever it was started.
    assert dep.pull_steps == [{"prefect.deployments.steps.set_working_directory": {"directory": str(project)}}]
    assert dep.parameters == {"root": str(project)} and dep.enforce_parameter_schema

    worker = subprocess.Popen([sys.executable, "-m", "prefect", "worker", "start", "--pool", "forgeline-local"],
                              cwd=tmp_path, env=server, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        # Two runs at once: the deployment's concurrency limit (1, ENQUEUE) makes the second wait.
        t0 = time.monotonic()
        first, _ = deployment_run("forgeline/default", {"until": "ingest"}, server, tmp_path, watch=False)
        second, _ = deployment_run("forgeline/default", {"until": "ingest", "force": ["ingest"]}, server, tmp_path,
                                   watch=False)
        deadline = time.monotonic() + 300
        while not all(flow_run(r).state.is_final() for r in (first, second)):
            assert worker.poll() is None, worker.stdout.read()
            assert time.monotonic() < deadline, "deployment runs did not finish"
            time.sleep(1)
        TIMINGS["two queued worker runs (ingest)"] = time.monotonic() - t0
        a, b = flow_run(first), flow_run(second)
        assert a.state.is_completed() and b.state.is_completed(), (a.state, b.state)
        # One at a time, never side by side. The worker may take either first: both are due at once.
        earlier, later = sorted((a, b), key=lambda r: r.start_time)
        assert later.start_time >= earlier.end_time, [(r.name, r.start_time, r.end_time) for r in (a, b)]
        assert (project / "data" / "ingest" / "manifest.json").exists()
        status = run([sys.executable, "-m", "dvc", "status", "ingest"], project)
        assert "up to date" in status.stdout
        assert "ingest (ran)" in str(artifact_data(second)["01-ingest-report"])  # force re-ran it
    finally:
        stop(worker, grace=10)  # SIGTERM, then SIGINT: a worker needs both
