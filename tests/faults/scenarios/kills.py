"""SIGKILL scenarios: a stage killed mid-way under `dvc repro` or the Prefect flow, then recovered (tests/faults/
test_kills.py)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from tasks.core.integrity import stray_temp_files
from tests.conftest import kill_point, seed_note
from tests.faults.scenarios.common import (Row, base_projects, child_env, dvc, in_process_executor,
                                           ingest_shard_count, lock_entry, pretrain_reference, stage_cli,
                                           temp_free, timed, tree_digest, workspace)


def kill_clean_between_shards(tmp_root: Path, nth: int | None = None) -> Row:
    """SIGKILL clean after its nth finished shard (drawn at random unless given) under `dvc repro`; re-run
    `dvc repro` by hand."""
    base = base_projects(tmp_root)
    proj = workspace(tmp_root, "kill-clean-shard")
    nth = nth or kill_point("clean-shard", 1, ingest_shard_count(proj) - 1)
    row = Row("SIGKILL", f"clean, after shard {nth} (dvc repro{seed_note()})")
    killed = dvc(proj, "repro", "clean", env=child_env(FORGELINE_FAULT=f"clean.shard_done={nth}"), check=False)
    manifest_after_kill = (proj / "data/clean/manifest.json").exists()
    finished = sorted(p.name for p in (proj / "work/clean").glob("*/*.parquet"))
    status = dvc(proj, "status", "clean").stdout
    rerun, row.recover_s = timed(dvc, proj, "repro", "clean", check=False)
    total = ingest_shard_count(proj)
    log = rerun.stdout + rerun.stderr
    row.checks = {
        "killed run failed": killed.returncode != 0,
        "no manifest after the kill": not manifest_after_kill,
        # the stage's process was killed after its nth; a pool's other workers may have finished more by then
        "finished shards kept for resume": nth <= len(finished) <= total,
        "dvc sees clean as not done": "clean" in status and "up to date" not in status,
        "re-run succeeded": rerun.returncode == 0,
        "re-run resumed the finished shards": f"resumed: {len(finished)} of {total} shards were already finished"
                                              in log,
        "outputs byte-identical": tree_digest(proj / "data/clean") == tree_digest(base.mixed / "data/clean"),
        "dvc.lock entry identical": lock_entry(proj, "clean") == lock_entry(base.mixed, "clean"),
        "no temp files as outputs": rerun.returncode == 0 and temp_free(proj, "clean"),
    }
    row.outcome = "resumed, byte-identical" if row.ok else "FAILED"
    row.lost = f"0 records ({len(finished)}/{total} shards reused, {total - len(finished)} redone)"
    row.details = {"killed": killed.stderr[-1500:], "rerun": log[-2000:], "finished": finished, "status": status}
    return row


def kill_clean_mid_write(tmp_root: Path) -> Row:
    """SIGKILL clean while its first output shard is a complete temp file not yet renamed into place (every
    work shard is finished by then); a downstream stage refuses the unfinished folder; `dvc repro` recovers."""
    base = base_projects(tmp_root)
    proj = workspace(tmp_root, "kill-clean-write")
    total = ingest_shard_count(proj)
    in_process_executor(proj)  # the outputs come after every work shard: one process makes them all
    row = Row("SIGKILL", "clean, mid-write of an output shard (dvc repro)")
    killed = dvc(proj, "repro", "clean", env=child_env(FORGELINE_FAULT="files.atomic_write=1",
                                                       FORGELINE_FAULT_PATH="/data/clean/shards/"), check=False)
    temps = [p.relative_to(proj).as_posix() for p in stray_temp_files(proj / "data/clean")]
    finals = sorted(p.name for p in (proj / "data/clean/shards").glob("*.parquet"))
    manifest_after_kill = (proj / "data/clean/manifest.json").exists()
    downstream = stage_cli(proj, "mix")
    rerun, row.recover_s = timed(dvc, proj, "repro", "clean", check=False)
    log = rerun.stdout + rerun.stderr
    row.checks = {
        "killed run failed": killed.returncode != 0,
        # the shard being written, plus the ledger still open around it: temp names only, never final ones
        "the interrupted write is a temp file": any("/shards/." in t for t in temps)
        and all(Path(t).name.startswith(".") and ".tmp-" in Path(t).name for t in temps),
        "no final shard yet": finals == [],
        "no manifest after the kill": not manifest_after_kill,
        "downstream refuses the unfinished folder": downstream.returncode != 0
        and "data/clean/manifest.json is missing: stage clean did not finish" in downstream.stderr
        and not (proj / "data/mix/manifest.json").exists(),
        "re-run succeeded": rerun.returncode == 0,
        "re-run reused every work shard": f"resumed: {total} of {total} shards were already finished" in log,
        "outputs byte-identical": tree_digest(proj / "data/clean") == tree_digest(base.mixed / "data/clean"),
        "no temp files as outputs": rerun.returncode == 0 and temp_free(proj, "clean"),
    }
    row.outcome = "refused downstream; resumed, byte-identical" if row.ok else "FAILED"
    row.lost = f"0 records (the output shard rewritten; {total}/{total} work shards reused)"
    row.details = {"temps": temps, "downstream": downstream.stderr[-1500:], "rerun": log[-2000:]}
    return row


def tags(project: Path) -> dict[str, bool]:
    """Checkpoint tag -> has its manifest."""
    folder = project / "checkpoints/pretrain"
    return {p.name: (p / "forgeline.json").exists() for p in sorted(folder.glob("step*"))}


def kill_pretrain(tmp_root: Path, fault: str, name: str) -> tuple[Path, Any, dict[str, bool], Any, float]:
    """`dvc repro pretrain` SIGKILLed at `fault`, then re-run by hand: (project, killed run, checkpoint tags
    after the kill (tag -> has its manifest), re-run, re-run seconds)."""
    proj = workspace(tmp_root, name, which="mixed")
    killed = dvc(proj, "repro", "pretrain", env=child_env(FORGELINE_FAULT=fault), check=False)
    after = tags(proj)
    rerun, took = timed(dvc, proj, "repro", "pretrain", check=False)
    return proj, killed, after, rerun, took


def pretrain_recovered(proj: Path, ref: Path, rerun: Any) -> dict[str, bool]:
    """The promises after a re-run: done, byte-identical, DVC satisfied, no temp file anywhere."""
    # The whole out folder (metrics, report, model.safetensors) is byte-identical. The checkpoints' bytes are not: a
    # resumed run serializes equal tensors differently, so dvc.lock's checkpoints/pretrain hash differs.
    return {
        "re-run succeeded": rerun.returncode == 0,
        "data/pretrain byte-identical (metrics, report, model.safetensors)": rerun.returncode == 0
        and tree_digest(proj / "data/pretrain") == tree_digest(ref / "data/pretrain"),
        "dvc status clean": "up to date" in dvc(proj, "status", "pretrain").stdout,
        "no temp files as outputs": rerun.returncode == 0 and temp_free(proj, "pretrain")
        and not stray_temp_files(proj / "checkpoints/pretrain"),
    }


def kill_pretrain_mid_checkpoint(tmp_root: Path) -> Row:
    """SIGKILL while step 2's checkpoint is written (DeepSpeed's files there, the tag's manifest not): the
    re-run skips the partial tag and resumes from the previous one (the initial weights, step 0)."""
    ref = pretrain_reference(tmp_root)
    # The tiny run checkpoints the initial weights (its rollback target), then every 2 steps: hit 2 = step 2.
    proj, killed, after, rerun, took = kill_pretrain(tmp_root, "pretrain.checkpoint_write=2", "kill-pretrain-ckpt")
    log = rerun.stdout + rerun.stderr
    row = Row("SIGKILL", "pretrain, mid-checkpoint-write of step 2 (dvc repro)", recover_s=took)
    row.checks = {
        "killed run failed": killed.returncode != 0,
        "partial tag left without manifest": after.get("step000002") is False,
        "partial tag skipped on resume": "checkpoint step000002 skipped: no manifest" in log,
        "resumed from the previous valid tag": "resumed from step000000 at step 0" in log,
        **pretrain_recovered(proj, ref, rerun),
    }
    row.outcome = "partial checkpoint skipped; resumed from step 0; byte-identical" if row.ok else "FAILED"
    row.lost = "2 steps (the unpublished checkpoint's)"
    row.details = {"killed": killed.stderr[-1500:], "tags": after, "rerun": log[-2500:]}
    return row


def kill_pretrain_mid_step(tmp_root: Path, step: int | None = None) -> Row:
    """SIGKILL after a step of 4 drawn at random (checkpoints at 0 and every 2 steps, each written before the
    step's fault point): the re-run resumes from the newest checkpoint at or before it."""
    ref = pretrain_reference(tmp_root)
    step = step or kill_point("pretrain-step", 1, 4)
    tag = 2 * (step // 2)
    proj, killed, after, rerun, took = kill_pretrain(tmp_root, f"pretrain.step_done={step}", "kill-pretrain-step")
    log = rerun.stdout + rerun.stderr
    row = Row("SIGKILL", f"pretrain, after step {step} of 4 (dvc repro{seed_note()})", recover_s=took)
    row.checks = {
        "killed run failed": killed.returncode != 0,
        f"checkpoint of step {tag} is complete": after.get(f"step{tag:06d}") is True,
        f"resumed from step {tag}": f"resumed from step{tag:06d} at step {tag}" in log,
        **pretrain_recovered(proj, ref, rerun),
    }
    row.outcome = f"resumed from step {tag}; byte-identical" if row.ok else "FAILED"
    row.lost = f"{step - tag} step(s) after the last checkpoint"
    row.details = {"killed": killed.stderr[-1500:], "tags": after, "rerun": log[-2500:]}
    return row


def flow_retry_after_kill(tmp_root: Path, monkeypatch: pytest.MonkeyPatch) -> Row:
    """The Prefect flow (in this process; a Prefect server must be configured) runs until clean; clean is
    SIGKILLed once after its 2nd shard; the task's retry resumes it. Outputs equal the `dvc repro` reference."""
    from flows.pipeline import forgeline

    base = base_projects(tmp_root)
    proj = workspace(tmp_root, "flow-retry")
    marker = tmp_root / "flow-retry.fired"
    marker.unlink(missing_ok=True)
    monkeypatch.setenv("FORGELINE_FAULT", "clean.shard_done=2")
    monkeypatch.setenv("FORGELINE_FAULT_ONCE", str(marker))
    state, wall = timed(forgeline, root=str(proj), until="clean", stage_retries=2, return_state=True)
    monkeypatch.delenv("FORGELINE_FAULT")
    outcomes = state.result()
    runs = clean_task_runs(state.state_details.flow_run_id)
    row = Row("SIGKILL", "clean, after shard 2 (Prefect flow, task retries)", recover_s=wall)
    row.checks = {
        "the fault fired": marker.exists(),
        "flow completed": [o.stage for o in outcomes if o.ran] == ["clean"],
        "clean ran twice (killed, retried)": [r.run_count for r in runs] == [2],
        "outputs byte-identical": tree_digest(proj / "data/clean") == tree_digest(base.mixed / "data/clean"),
        "dvc.lock entry identical": lock_entry(proj, "clean") == lock_entry(base.mixed, "clean"),
        "no temp files as outputs": temp_free(proj, "clean"),
    }
    row.outcome = "retried by Prefect, byte-identical" if row.ok else "FAILED"
    row.lost = "0 records (the retry reused 2 shards)"
    row.details = {"runs": [(r.name, r.run_count, str(r.state_type)) for r in runs]}
    return row


def clean_task_runs(flow_run_id) -> list[Any]:
    """The `clean` task runs of one flow run (the server may hold other modules' runs too)."""
    import anyio
    from prefect.client.orchestration import get_client
    from prefect.client.schemas.filters import FlowRunFilter, FlowRunFilterId, TaskRunFilter, TaskRunFilterName

    async def read():
        async with get_client() as client:
            return await client.read_task_runs(
                flow_run_filter=FlowRunFilter(id=FlowRunFilterId(any_=[flow_run_id])),
                task_run_filter=TaskRunFilter(name=TaskRunFilterName(any_=["clean"])))

    return anyio.run(read)
