"""The forgeline flow: every stage of dvc.yaml, in DVC's order, each a retried Prefect task run through DVC."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from prefect import flow, get_run_logger, task
from prefect.artifacts import create_markdown_artifact, create_table_artifact

from tasks.core import graph
from tasks.core.dvcrun import StageFailed, StageOutcome, reproduce_stage
from tasks.core.paramsfile import write_overrides


def _retry_unless_gate(task, task_run, state) -> bool:
    """Retry crashes (a killed worker, a flaky disk), never a gate that said no: the answer would not change."""
    try:
        state.result()
    except StageFailed as exc:
        return not exc.gate
    except Exception:
        return True
    return False


@task(task_run_name="{stage}", retries=2, retry_delay_seconds=5, retry_condition_fn=_retry_unless_gate,
      tags=["forgeline"])
def run_stage(stage: str, root: str) -> StageOutcome:
    logger = get_run_logger()
    outcome = reproduce_stage(Path(root), stage, log=logger.info)
    _publish(outcome)
    return outcome


def _publish(outcome: StageOutcome) -> None:
    key = outcome.stage.replace("_", "-")
    result = outcome.result
    status = "ran" if outcome.ran else "up to date, skipped"
    summary = result.summary if result else ""
    create_markdown_artifact(markdown=f"## {outcome.stage} ({status})\n\n{summary}", key=f"{key}-report",
                             description=f"{outcome.stage}: summary")
    if result and result.table:
        create_table_artifact(table=result.table, key=f"{key}-counts", description=f"{outcome.stage}: counts")


@flow(name="forgeline", log_prints=True)
def forgeline(root: str = ".", until: str | None = None, overrides: dict[str, Any] | None = None) -> list[StageOutcome]:
    """Run the pipeline declared in dvc.yaml.

    root: project folder holding params.yaml and dvc.yaml.
    until: stop after this stage (and what it depends on); default: every stage.
    overrides: dotted params keys to set first, e.g. {"ingest.max_doc_chars": 5000}; validated by specs and
    written into params.yaml so `dvc repro` reproduces the run.
    """
    project = Path(root).resolve()
    write_overrides(project / "params.yaml", overrides or {})
    order = graph.dvc_stage_order(project, until=until)
    get_run_logger().info("stages in DVC order: %s", " -> ".join(order))
    outcomes = []
    for stage in order:  # sequential: each stage waits for its upstream and DVC holds one repo lock anyway
        outcomes.append(run_stage.with_options(name=f"stage-{stage}")(stage, str(project)))
    return outcomes
