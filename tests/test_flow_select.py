"""Flow parameters: typed overrides (ParamsOverride), stage selection (until / from_stage / force), resume after
a failed run, and two runs on one workspace (the second waits for the first)."""

from __future__ import annotations

import json
import subprocess
import sys
import time

import pytest
from pydantic import ValidationError

from tests.conftest import make_project, run

# ------------------------------------------------------------------------------------------ without a server

def test_params_override_mirrors_params_with_every_key_optional_and_unknown_keys_refused():
    from flows.params import ParamsOverride, to_dotted
    from specs import Params

    assert ParamsOverride().model_dump(exclude_unset=True) == {}
    schema = ParamsOverride.model_json_schema()
    assert set(schema["properties"]) == {f.alias or n for n, f in Params.model_fields.items()}
    assert not schema.get("required")
    # Every nested section forbids extra keys, so the server refuses typos by schema.
    for name, sub in schema["$defs"].items():
        if name.endswith("Override"):
            assert sub["additionalProperties"] is False, name
            assert not sub.get("required"), name

    with pytest.raises(ValidationError, match="ingest.bogus"):
        ParamsOverride.model_validate({"ingest": {"bogus": 1}})
    with pytest.raises(ValidationError, match="greater than or equal to 1"):  # the spec's bound is kept
        ParamsOverride.model_validate({"ingest": {"max_doc_chars": 0}})

    dotted = to_dotted({"validate": {"data_docs": True}, "ingest": {"max_doc_chars": 500},
                        "mix": {"weights": {"docs": 1.0}, "token_budget": None}, "clean": None})
    # Sections merge key by key, maps are replaced whole, an explicit null is a value, a null section is no-op.
    assert dotted == {"ingest.max_doc_chars": 500, "validate.data_docs": True, "mix.token_budget": None,
                      "mix.weights": {"docs": 1.0}}


def test_flow_parameters_are_typed_for_the_server_and_the_ui_form():
    from prefect.exceptions import ParameterTypeError
    from prefect.utilities.callables import parameter_schema

    from flows.pipeline import forgeline
    from tasks.core.graph import STAGE_NAMES

    schema = parameter_schema(forgeline).model_dump()
    props, defs = schema["properties"], schema["definitions"]
    stage_enum = next(a for a in props["until"]["anyOf"] if "enum" in a or "$ref" in a)
    stage_enum = defs[stage_enum["$ref"].split("/")[-1]] if "$ref" in stage_enum else stage_enum
    assert stage_enum["enum"] == list(STAGE_NAMES)
    assert any(a.get("$ref", "").endswith("/ParamsOverride") for a in props["params"]["anyOf"])
    assert defs["ParamsOverride"]["additionalProperties"] is False
    assert props["stage_retries"]["minimum"] == 0
    for bad in ({"stage_retries": -1}, {"until": "nosuch"}, {"params": {"mix": {"seq_len": "long"}}}):
        with pytest.raises(ParameterTypeError):
            forgeline.validate_parameters(bad)
    ok = forgeline.validate_parameters({"params": {"ingest": {"max_doc_chars": 7}}, "force": ["ingest"]})
    assert ok["params"].ingest.max_doc_chars == 7 and ok["force"] == ["ingest"]


def test_override_is_written_into_params_and_validated_again_by_specs(project):
    from flows.params import to_dotted
    from specs import ParamsError
    from tasks.core.paramsfile import write_overrides

    params_file = project / "params.yaml"
    write_overrides(params_file, to_dotted({"ingest": {"max_doc_chars": 4321}}))
    assert "max_doc_chars: 4321" in params_file.read_text()
    diff = json.loads(run([sys.executable, "-m", "dvc", "params", "diff", "--json"], project).stdout)
    assert diff["params.yaml"]["ingest.max_doc_chars"]["new"] == 4321
    # The schema cannot see across sections: specs can ("mix.weights names an unknown source").
    with pytest.raises(ParamsError, match="mix.weights"):
        write_overrides(params_file, to_dotted({"mix": {"weights": {"nosuch": 1.0}}}))


def test_select_stages_cuts_the_order_and_refuses_bad_combinations():
    from tasks.core.dvcrun import select_stages

    order = ["ingest", "validate", "clean"]
    sel = select_stages(order, "validate", ["clean"])
    assert (sel.skip, sel.run, sel.force) == (["ingest"], ["validate", "clean"], ["clean"])
    assert select_stages(order).run == order
    with pytest.raises(ValueError, match="from_stage='mix' is not among"):
        select_stages(order, "mix")
    with pytest.raises(ValueError, match="before from_stage"):
        select_stages(order, "validate", ["ingest"])
    with pytest.raises(ValueError, match=r"force=\['pretrain'\]"):
        select_stages(order, None, ["pretrain"])


def test_workspace_lock_names_the_holder_and_times_out(tmp_path):
    from tasks.core.dvcrun import WorkspaceBusy, workspace_lock

    with workspace_lock(tmp_path, "first run"):
        waits = []
        t0 = time.monotonic()
        with pytest.raises(WorkspaceBusy, match="first run .*holds"):
            with workspace_lock(tmp_path, "second run", timeout=0.6, poll=0.1, on_wait=waits.append):
                pass
        assert time.monotonic() - t0 >= 0.6
        assert len(waits) == 1 and "first run" in waits[0]
    with workspace_lock(tmp_path, "third run", timeout=0):  # released on exit
        pass


# -------------------------------------------------------------------------------------- flows on a server

# `prefect_server` (tests/conftest.py): the session's local server, this module's client pointed at it.

def outcomes(result) -> list[tuple[str, bool]]:
    return [(o.stage, o.ran) for o in result]


@pytest.mark.prefect
@pytest.mark.slow
def test_from_stage_refuses_stale_upstream_skips_fresh_one_and_force_reruns(tmp_path, prefect_server):
    from flows.pipeline import forgeline
    from tasks.core.dvcrun import StagesNotUpToDate

    project = make_project(tmp_path / "proj")
    params_before = (project / "params.yaml").read_text()
    with pytest.raises(StagesNotUpToDate, match="ingest: "):
        forgeline(root=str(project), until="validate", from_stage="validate")
    assert not (project / "data" / "validate").exists()

    assert outcomes(forgeline(root=str(project), until="ingest")) == [("ingest", True)]
    got = forgeline(root=str(project), until="validate", from_stage="validate")
    assert outcomes(got) == [("ingest", False), ("validate", True)]

    # An override that makes the skipped stage stale is refused, and params.yaml is left as it was.
    with pytest.raises(StagesNotUpToDate, match=r"params.yaml \(ingest modified\)"):
        forgeline(root=str(project), until="validate", from_stage="validate",
                  params={"ingest": {"max_doc_chars": 5000}})
    assert (project / "params.yaml").read_text() == params_before

    # force re-runs an up-to-date stage through DVC; its outputs are byte-identical, so the lock is too, and DVC
    # skips the stage after it ("didn't change, skipping"), which keeps its last result for the UI.
    lock_before = (project / "dvc.lock").read_text()
    forced = forgeline(root=str(project), until="validate", force=["ingest"])
    assert outcomes(forced) == [("ingest", True), ("validate", False)]
    assert forced[1].result is not None and forced[1].result.stage == "validate" and forced[1].result.ok
    assert sorted(p.name for p in (project / "runs").glob("*.result*.json")) == [
        "ingest.result.json", "validate.result.json"]
    assert (project / "dvc.lock").read_text() == lock_before


@pytest.mark.prefect
def test_a_failed_run_rerun_continues_at_the_failed_stage(tmp_path, prefect_server, monkeypatch):
    from flows.pipeline import forgeline
    from tasks.core.dvcrun import StageFailed

    project = make_project(tmp_path / "proj")
    monkeypatch.setenv("FORGELINE_FAULT", "clean.shard_done=1")  # SIGKILL clean after its first shard
    with pytest.raises(StageFailed) as err:
        forgeline(root=str(project), until="clean", stage_retries=0)
    assert err.value.stage == "clean" and not err.value.gate
    monkeypatch.delenv("FORGELINE_FAULT")

    again = forgeline(root=str(project), until="clean")
    assert outcomes(again) == [("ingest", False), ("validate", False), ("instruct", False), ("clean", True)]
    status = run([sys.executable, "-m", "dvc", "status", "ingest", "validate", "instruct", "clean"], project)
    assert "up to date" in status.stdout


@pytest.mark.prefect
@pytest.mark.slow
def test_a_second_run_on_the_same_workspace_waits_for_the_first(tmp_path, prefect_server):
    from prefect.client.orchestration import get_client
    from prefect.client.schemas.filters import LogFilter, LogFilterFlowRunId
    from prefect.logging.handlers import APILogHandler

    from flows.pipeline import forgeline
    from flows.server import prefect_env
    from tasks.core.dvcrun import LOCK_FILE, WorkspaceBusy, workspace_lock

    project = make_project(tmp_path / "proj")
    with workspace_lock(project, "a test holding the workspace"):
        with pytest.raises(WorkspaceBusy, match="a test holding the workspace .*holds"):
            forgeline(root=str(project), until="ingest", lock_timeout_s=0.5)
    assert not (project / "data" / "ingest").exists()

    # Two real runs: the first (another process) holds the workspace through ingest and validate.
    first = subprocess.Popen([sys.executable, "-m", "flows", "--until", "validate"], cwd=project,
                             env=prefect_env(prefect_server), stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                             text=True)
    lock = project / LOCK_FILE
    deadline = time.monotonic() + 180
    while not (lock.exists() and lock.read_text().strip()):
        assert first.poll() is None, first.stdout.read()
        assert time.monotonic() < deadline, "the first run never took the workspace lock"
        time.sleep(0.1)
    state = forgeline(root=str(project), until="ingest", return_state=True)
    out, _ = first.communicate(timeout=300)
    assert first.returncode == 0, out
    assert "ingest: ran" in out and "validate: ran" in out
    # The second waited (it says so in its log) and then found ingest up to date: it ran after, not beside.
    assert outcomes(state.result()) == [("ingest", False)]
    APILogHandler().flush()  # logs reach the API in batches: send what is queued
    with get_client(sync_client=True) as client:
        logs = client.read_logs(log_filter=LogFilter(flow_run_id=LogFilterFlowRunId(
            any_=[state.state_details.flow_run_id])))
    assert any("waiting for the workspace" in log.message for log in logs), [log.message for log in logs]
    assert lock.read_text() == ""  # released, holder cleared
    status = run([sys.executable, "-m", "dvc", "status", "ingest", "validate"], project)
    assert "up to date" in status.stdout
