"""The Prefect flow runs the same graph through DVC: same dvc.lock as `dvc repro`, skips what is up to date,
publishes artifacts, and fails with the gate's summary (without pointless retries)."""

from __future__ import annotations

import sys

import pytest

from tasks.core.graph import STAGE_NAMES
from tests.conftest import make_project, run

pytestmark = pytest.mark.prefect


# `prefect_server` (tests/conftest.py): the session's local server, this module's client pointed at it; the
# checks below read back their own flow runs' artifacts and task runs only (`run_ids`).


def run_ids(*states) -> list:
    return [s.state_details.flow_run_id for s in states]


def lock_outs(lock_text: str) -> dict:
    import yaml

    lock = yaml.safe_load(lock_text)
    return {name: {"outs": st["outs"], "deps": st["deps"], "params": st.get("params")}
            for name, st in lock["stages"].items()}


def test_flow_and_dvc_repro_end_in_the_same_state(tmp_path, prefect_server, reproduced):
    from prefect.client.orchestration import get_client

    from flows.pipeline import forgeline

    # `dvc repro` ran on the session's fresh project (tests/conftest.py `reproduced`, shared with test_e2e_dvc);
    # the flow runs on a clone of its commit, as a second user would have; dvc.lock is compared as it was right
    # after that repro (test_e2e_dvc later changes that work tree's params, never its commit).
    by_flow = tmp_path / "by_flow"
    run(["git", "clone", "-q", str(reproduced.project), str(by_flow)], tmp_path)

    first = forgeline(root=str(by_flow), return_state=True)
    outcomes = first.result()
    assert [(o.stage, o.ran) for o in outcomes] == [(s, True) for s in STAGE_NAMES]
    assert outcomes[0].result.counts["kept"] > 0
    assert (by_flow / "dvc.lock").read_text() == reproduced.lock
    assert lock_outs((by_flow / "dvc.lock").read_text()) == lock_outs(reproduced.lock)
    status = run([sys.executable, "-m", "dvc", "status"], by_flow)
    assert "Data and pipelines are up to date" in status.stdout

    # A second flow run finds everything up to date and skips it, like `dvc repro` would.
    second = forgeline(root=str(by_flow), return_state=True)
    assert [(o.stage, o.ran) for o in second.result()] == [(s, False) for s in STAGE_NAMES]

    import anyio

    from tasks.core.ui_layout import artifact_key

    async def artifact_keys():
        async with get_client() as client:
            return {a.key for a in await client.read_artifacts(artifact_filter=of_runs(run_ids(first, second)))}

    keys = anyio.run(artifact_keys)
    assert {artifact_key(s, f"{s.replace('_', '-')}-{kind}") for s in STAGE_NAMES for kind in ("report", "counts")} <= keys
    reports = [artifact_key(s, f"{s.replace('_', '-')}-report") for s in STAGE_NAMES]
    assert reports == sorted(reports)  # the UI lists keys sorted: that is the pipeline's order
    check_ui_artifacts(by_flow, outcomes, run_ids(first, second))


def of_runs(ids: list):
    from prefect.client.schemas.filters import ArtifactFilter, ArtifactFilterFlowRunId

    return ArtifactFilter(flow_run_id=ArtifactFilterFlowRunId(any_=ids))


def latest_artifacts(ids: list) -> dict:
    """The newest artifact per key among the flow runs `ids` (a key gets a new version on every run)."""
    import anyio
    from prefect.client.orchestration import get_client
    from prefect.client.schemas.sorting import ArtifactSort

    async def read():
        async with get_client() as client:
            return await client.read_artifacts(artifact_filter=of_runs(ids), sort=ArtifactSort.CREATED_DESC)

    latest: dict = {}
    for a in anyio.run(read):
        latest.setdefault(a.key, a)
    return latest


def check_ui_artifacts(project, outcomes, ids: list) -> None:
    """The stage-specific artifacts: funnel, Data Docs note, dedup report, loss curve image, throughput, progress."""
    import base64
    import json

    from tasks.core.ui_layout import artifact_key

    arts = latest_artifacts(ids)
    counts = {o.stage: o.result.counts for o in outcomes}
    key = artifact_key("mix", "data-funnel")
    parts = [arts[k] for k in [key, *(f"{key}-part-{n}" for n in range(2, 10))] if k in arts]
    tables = [json.loads(p.data) if isinstance(p.data, str) else p.data for p in parts]
    rows = [dict(kv for t in tables for kv in t[i].items()) for i in range(len(tables[0]))]  # wide tables come in
    total = rows[-1]                                                                         # column parts
    assert total["source"] == "total" and total["accounted"] is True
    assert total["read"] == counts["ingest"]["read"] and total["ingested"] == counts["ingest"]["kept"]
    assert total["kept"] == counts["clean"]["kept"]
    assert 0 < total["train tokens"] and all(r["accounted"] for r in rows)
    assert "mix" in parts[0].description  # the funnel was last published after mix, with its token columns

    assert arts["02-validate-data-docs"].type in ("markdown", "link")
    assert "Deduplication" in arts[artifact_key("clean", "clean-dedup")].data
    image = arts[artifact_key("pretrain", "pretrain-loss")]
    assert image.type == "image"
    png = (project / "reports" / "pretrain" / "loss.png").read_bytes()
    assert png.startswith(b"\x89PNG") and image.data == "data:image/png;base64," + base64.b64encode(png).decode()
    assert arts[artifact_key("pretrain", "pretrain-throughput")].type == "table"
    progress = arts[artifact_key("pretrain", "pretrain-progress")]  # fed from `step i/n` log lines, finished at 100 %
    assert progress.type == "progress" and float(progress.data) == 100.0


def write_json(path, data) -> None:
    import json

    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(data))


def test_data_funnel_adds_up_per_source_and_flags_counts_that_do_not(tmp_path):
    from tasks.core.artifacts import data_funnel

    assert data_funnel(tmp_path) == []  # nothing ran yet
    src = {"a": (10, 2, {"oversized": 2}), "b": (5, 0, {})}  # read, quarantined, reasons
    write_json(tmp_path / "data/ingest/stats.json", {"by_source": {
        n: {"read": r, "quarantined": q, "kept": r - q, "by_reason": why} for n, (r, q, why) in src.items()}})
    after_ingest = data_funnel(tmp_path)
    assert [r["source"] for r in after_ingest] == ["a", "b", "total"]
    assert after_ingest[-1] == {"source": "total", "read": 15, "quarantined": 2, "quarantine reasons": "oversized: 2",
                                "ingested": 13, "accounted": True}

    write_json(tmp_path / "data/clean/report.json", {"by_source": {
        "a": {"in": 8, "kept": 5, "dropped:near_duplicate": 2, "dropped:low_quality": 1},
        "b": {"in": 5, "kept": 4, "dropped:pii": 0}}})  # b: 5 in, 4 kept, nothing dropped -> one lost
    write_json(tmp_path / "data/mix/report.json", {"sources": {"a": {"realized_tokens": 700, "val_tokens": 30},
                                                               "b": {"realized_tokens": 300, "val_tokens": 9}}})
    rows = {r["source"]: r for r in data_funnel(tmp_path)}
    assert rows["a"]["dropped: near_duplicate"] == 2 and rows["b"]["dropped: near_duplicate"] == 0
    assert rows["a"]["accounted"] is True and rows["b"]["accounted"] is False
    assert rows["total"]["accounted"] is False and rows["total"]["kept"] == 9
    assert rows["total"]["train tokens"] == 1000 and rows["total"]["val tokens"] == 39

    # a source whose every document was dropped has no `kept` count in clean's report: 0 kept, accounted
    write_json(tmp_path / "data/clean/report.json", {"by_source": {
        "a": {"in": 8, "kept": 8}, "b": {"in": 5, "dropped:contaminated": 5}}})
    rows = {r["source"]: r for r in data_funnel(tmp_path)}
    assert rows["b"]["kept"] == 0 and rows["b"]["dropped: contaminated"] == 5 and rows["b"]["accounted"] is True


def test_progress_is_read_from_the_stage_log_lines():
    from tasks.core.artifacts import progress_from_line

    assert progress_from_line("pretrain", "12:00:01 forgeline.pretrain: step 3/4 loss 7.1 lr 0.001") == 75.0
    assert progress_from_line("clean", "12:00:01 forgeline.clean: step 3/4") is None  # only pretrain has steps
    assert progress_from_line("clean", "forgeline.clean: shard 2/8 shard-00001.parquet cleaned") == 25.0
    assert progress_from_line("mix", "tokenize train: 50/200") == 25.0
    assert progress_from_line("ingest", "docs: read 15, kept 15") is None
    assert progress_from_line("sft", "12:00:01 forgeline.sft: step 1/8 loss 2.1 lr 1e-4") == 12.5


def test_sft_gets_its_own_loss_curve(tmp_path):
    from tasks.core.artifacts import stage_artifacts

    rows = [{"kind": "train", "step": s, "loss": 3.0 / s} for s in range(1, 5)]
    metrics = tmp_path / "data/sft/metrics.jsonl"
    metrics.parent.mkdir(parents=True)
    metrics.write_text("".join(__import__("json").dumps(r) + "\n" for r in rows))
    assert stage_artifacts(tmp_path, "pretrain") == []  # pretrain wrote nothing: sft's rows are not its
    (art,) = stage_artifacts(tmp_path, "sft")
    assert art.key == "sft-loss" and art.kind == "image" and "reports/sft/loss.png" in art.description
    assert (tmp_path / "reports/sft/loss.png").read_bytes().startswith(b"\x89PNG")


def test_loss_curve_is_drawn_from_the_pretrain_metrics(tmp_path):
    from tasks.core.artifacts import loss_curve_png, stage_artifacts

    assert loss_curve_png(tmp_path) is None
    rows = [{"kind": "train", "step": s, "loss": 9.0 / s} for s in range(1, 9)] + [
        {"kind": "eval", "step": 8, "val_loss": 1.5}]
    metrics = tmp_path / "data/pretrain/metrics.jsonl"
    metrics.parent.mkdir(parents=True)
    metrics.write_text("".join(__import__("json").dumps(r) + "\n" for r in rows))
    png = loss_curve_png(tmp_path)
    assert png == tmp_path / "reports/pretrain/loss.png" and png.read_bytes().startswith(b"\x89PNG")
    first = png.read_bytes()
    assert loss_curve_png(tmp_path).read_bytes() == first  # same curve, same bytes
    kinds = {a.key: a.kind for a in stage_artifacts(tmp_path, "pretrain")}
    assert kinds == {"pretrain-loss": "image"}  # no throughput rows were written

    # Telemetry rows: wall-clock columns only, rows without a rate yet (warm-up) left out.
    telemetry = [{"step": s, "loss": 9.0 / s, "tokens_per_s": None if s == 1 else 1000.0 * s, "step_time_s": 0.5,
                  "mfu": None, "mem_gib": 1.0} for s in (1, 2, 3)]
    (tmp_path / "reports/pretrain/telemetry.jsonl").write_text(
        "".join(__import__("json").dumps(r) + "\n" for r in telemetry))
    arts = {a.key: a for a in stage_artifacts(tmp_path, "pretrain")}
    assert arts["pretrain-throughput"].table == [
        {"step": s, "tokens_per_s": 1000.0 * s, "step_time_s": 0.5, "mfu": None} for s in (2, 3)]
    assert "mean 2,500 tokens/s" in arts["pretrain-throughput-summary"].markdown


def test_flow_override_is_written_to_params_and_gate_failure_is_reported(tmp_path, prefect_server):
    from flows.pipeline import forgeline
    from specs import ParamsError
    from tasks.core.dvcrun import StageFailed

    project = make_project(tmp_path / "proj")
    with pytest.raises(ParamsError, match="ingest.max_doc_chars: must be ≥ 1, got 0"):
        forgeline(root=str(project), overrides={"ingest.max_doc_chars": 0})
    assert "max_doc_chars: 100000" in (project / "params.yaml").read_text()  # nothing written on a bad override

    failing = forgeline(root=str(project), overrides={"validate.expectations.3.values": ["docs"]}, return_state=True)
    with pytest.raises(StageFailed) as err:
        failing.result()
    assert err.value.gate and err.value.stage == "validate"
    assert "in_set" in err.value.summary and "literature" in err.value.summary
    assert "- docs" in (project / "params.yaml").read_text()  # the override is in params, reproducible by DVC

    # A gate that said no is not retried (the same data would fail the same way); crashes would be.
    import anyio
    from prefect.client.orchestration import get_client
    from prefect.client.schemas.filters import FlowRunFilter, FlowRunFilterId, TaskRunFilter, TaskRunFilterName

    async def failed_validate_runs():
        async with get_client() as client:
            runs = await client.read_task_runs(
                flow_run_filter=FlowRunFilter(id=FlowRunFilterId(any_=run_ids(failing))),
                task_run_filter=TaskRunFilter(name=TaskRunFilterName(any_=["validate"])))
            return [r for r in runs if r.state and r.state.is_failed()]

    (failed,) = anyio.run(failed_validate_runs)
    assert failed.run_count == 1


def test_a_flow_override_of_a_sources_paths_makes_them_its_deps(tmp_path, prefect_server):
    """An override pointing a source at other files rewrites dvc.yaml's data deps (tasks/core/datadeps.py): the
    stage runs under DVC, which would refuse a dvc.yaml without them, and DVC then tracks the new folder."""
    import json

    import yaml

    from flows.pipeline import forgeline

    project = make_project(tmp_path / "proj")
    (project / "more").mkdir()
    row = {"uid": "m1", "body": "The mill by the river grinds grain. " * 8}
    (project / "more" / "m.jsonl").write_text(json.dumps(row) + "\n")
    sources = yaml.safe_load((project / "params.yaml").read_text())["ingest"]["sources"]
    assert sources[2]["paths"] == ["inputs/*.jsonl"]
    sources[2]["paths"] = ["more/*.jsonl"]
    forgeline(root=str(project), overrides={"ingest.sources": sources}, until="ingest")
    deps = yaml.safe_load((project / "dvc.yaml").read_text())["stages"]["ingest"]["deps"]
    assert "more" in deps and "inputs" not in deps
    assert "up to date" in run([sys.executable, "-m", "dvc", "status", "ingest"], project).stdout
    (project / "more" / "n.jsonl").write_text(json.dumps({**row, "uid": "m2"}) + "\n")
    assert "changed deps" in run([sys.executable, "-m", "dvc", "status", "ingest"], project).stdout
