"""The forgeline flow: every stage of dvc.yaml, in DVC's order, each a retried Prefect task run through DVC.

Wiring only: stage selection, the workspace lock, experiments and artifact contents live in tasks/core
(dvcrun.py, artifacts.py); this module maps them onto Prefect tasks, logs and artifacts.
"""

# No `from __future__ import annotations`: Prefect reads the flow's parameter types at run time, also when it
# loads this file by path (serve, workers), where string annotations such as "StageName" cannot be resolved.
import time
from pathlib import Path
from typing import Annotated, Any
from uuid import UUID

from prefect import flow, get_run_logger, task
from prefect.artifacts import (
    create_image_artifact,
    create_link_artifact,
    create_markdown_artifact,
    create_progress_artifact,
    create_table_artifact,
    update_progress_artifact,
)
from prefect.runtime import flow_run
from pydantic import Field

from flows.params import ParamsOverride, StageName, to_dotted
from flows.review import ask_review
from specs import load_params
from tasks.core import artifacts, dvcrun, graph
from tasks.core.dvcrun import (
    LOCK_HELD_ENV,
    StageFailed,
    StageOutcome,
    StagesNotUpToDate,
    read_result,
    reproduce_stage,
    select_stages,
    stages_not_up_to_date,
    workspace_lock,
)
from tasks.core.files import write_text_atomic
from tasks.core.ui_layout import artifact_key, fit_table
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


class _Progress:
    """A progress artifact fed from a stage's log lines (`step i/n`, `shard i/n`), created on first sight."""

    def __init__(self, stage: str, min_step: float = 1.0, min_interval_s: float = 2.0):
        self.stage, self.min_step, self.min_interval_s = stage, min_step, min_interval_s
        self.id: UUID | None = None
        self.shown, self.at = -1.0, 0.0

    def feed(self, line: str) -> None:
        pct = artifacts.progress_from_line(self.stage, line)
        if pct is None:
            return
        now = time.monotonic()
        if self.id is None:
            self.id = create_progress_artifact(progress=pct, key=artifact_key(self.stage, f"{self.stage}-progress"),
                                               description=f"{self.stage}: progress from its log")
        elif (pct - self.shown >= self.min_step and now - self.at >= self.min_interval_s) or pct >= 100:
            update_progress_artifact(artifact_id=self.id, progress=pct)  # throttled: one API call per step
        else:
            return
        self.shown, self.at = pct, now

    def finish(self) -> None:
        if self.id is not None and self.shown < 100:
            update_progress_artifact(artifact_id=self.id, progress=100.0)


@task(task_run_name="{stage}", retries=2, retry_delay_seconds=5, retry_condition_fn=_retry_unless_gate,
      tags=["forgeline"])
def run_stage(stage: str, root: str, force: bool = False, up_to_date: bool = False) -> StageOutcome:
    """Bring one stage up to date through DVC (`force`: re-run it even if up to date); publish its artifacts.
    `up_to_date`: the flow's own `dvc status` found it so, and nothing has run since: skip without asking DVC."""
    logger = get_run_logger()
    if up_to_date:
        logger.info("%s: up to date (dvc.lock matched at the start of this run); skipped", stage)
        outcome = _skipped(Path(root), stage)
        _publish(outcome, Path(root))
        return outcome
    progress = _Progress(stage)

    def log(line: str) -> None:
        logger.info(line)
        progress.feed(line)

    # The flow holds the workspace lock; the stage runs on its behalf. Shard progress reaches the UI through the
    # stage's `shard i/n` log lines (the progress artifact above); the stage itself never talks to Prefect.
    env = {LOCK_HELD_ENV: "forgeline flow"}
    outcome = reproduce_stage(Path(root), stage, log=log, force=force, env=env)
    progress.finish()
    _publish(outcome, Path(root))
    return outcome


def _skipped(root: Path, stage: str) -> StageOutcome:
    """An up-to-date stage the flow does not hand to DVC, with its last recorded result."""
    return StageOutcome(stage=stage, ran=False, result=read_result(root, stage))


def _table(rows: list[dict[str, Any]], key: str, description: str) -> None:
    """A table cut and split to fit the screen (tasks/core/ui_layout.py); parts after the first get `-part-N`."""
    parts = fit_table(rows)
    for n, part in enumerate(parts, start=1):
        more = f" (columns part {n} of {len(parts)})" if len(parts) > 1 else ""
        create_table_artifact(table=part, key=key if n == 1 else f"{key}-part-{n}", description=description + more)


def _publish(outcome: StageOutcome, root: Path) -> None:
    stage = outcome.stage
    key = stage.replace("_", "-")
    result = outcome.result
    status = "ran" if outcome.ran else "up to date, skipped"
    summary = result.summary if result else ""
    create_markdown_artifact(markdown=f"## {stage} ({status})\n\n{summary}", key=artifact_key(stage, f"{key}-report"),
                             description=f"{stage}: summary")
    if result and result.table:
        _table(result.table, artifact_key(stage, f"{key}-counts"), f"{stage}: counts")
    for a in artifacts.stage_artifacts(root, stage):
        akey = artifact_key(stage, a.key)
        if a.kind == "table":
            _table(a.table, akey, a.description)
        elif a.kind == "markdown":
            create_markdown_artifact(markdown=a.markdown, key=akey, description=a.description)
        elif a.kind == "image":
            create_image_artifact(image_url=a.url, key=akey, description=a.description)
        elif a.kind == "link":
            create_link_artifact(link=a.url, link_text=a.link_text, key=akey, description=a.description)


def _write_if_changed(path: Path, text: str, logger: Any) -> None:
    if path.read_text(encoding="utf-8") != text:
        write_text_atomic(path, text)
        logger.info("%s rewritten: its data deps follow params.yaml's sources", path.name)


@flow(name="forgeline", log_prints=True)
def forgeline(
    root: str = ".",
    until: StageName | None = None,
    from_stage: StageName | None = None,
    force: list[StageName] | None = None,
    params: ParamsOverride | None = None,
    overrides: dict[str, Any] | None = None,
    save_experiment: bool = False,
    stage_retries: Annotated[int, Field(ge=0, le=10)] = 2,
    lock_timeout_s: Annotated[float, Field(ge=0)] | None = None,
) -> list[StageOutcome]:
    """Run the pipeline declared in dvc.yaml.

    root: project folder holding params.yaml and dvc.yaml.
    until: stop after this stage (and what it depends on); default: every stage.
    from_stage: start here; the stages before it are not run and must be up to date (else the run refuses).
    force: stages to re-run even when DVC finds them up to date (`dvc repro --force --single-item`).
    params: typed overrides of params.yaml, section by section (validated by the server's schema).
    overrides: the same as dotted keys, e.g. {"ingest.max_doc_chars": 5000} (what `--set` passes).
    Both are validated by specs and written into params.yaml so `dvc repro` reproduces the run.
    save_experiment: afterwards record the workspace as DVC experiment named after this flow run.
    stage_retries: retries of a crashed stage (a failed gate is never retried).
    lock_timeout_s: how long to wait for another run on this workspace; default: as long as it takes.
    """
    logger = get_run_logger()
    project = Path(root).resolve()
    dotted = {**to_dotted(params), **(overrides or {})}
    load_params(project / "params.yaml", dotted)  # a bad override fails now, before waiting or any work
    order = graph.dvc_stage_order(project, until=until)
    selection = select_stages(order, from_stage, force or [])
    holder = f"flow run {flow_run.name or '?'} ({flow_run.id or 'no id'})"
    with workspace_lock(project, holder, timeout=lock_timeout_s, on_wait=logger.warning):
        params_file, dvc_file = project / "params.yaml", project / "dvc.yaml"
        before, dvc_before = params_file.read_text(encoding="utf-8"), dvc_file.read_text(encoding="utf-8")
        write_overrides(params_file, dotted)
        if dotted:  # overridden sources name other files: dvc.yaml lists them as deps (tasks/core/datadeps.py)
            _write_if_changed(dvc_file, graph.dvc_yaml_text(project), logger)
        # One `dvc status` for the whole walk: a stage up to date now stays so until a stage before it runs.
        stale = stages_not_up_to_date(project, [*selection.skip, *selection.run])
        if any(s in stale for s in selection.skip):
            write_text_atomic(params_file, before)  # refused: leave the workspace as it was
            write_text_atomic(dvc_file, dvc_before)
            raise StagesNotUpToDate(from_stage or "", {s: stale[s] for s in selection.skip if s in stale})
        logger.info("stages in DVC order: %s", " -> ".join(order)
                    + (f" (from {from_stage}: {', '.join(selection.skip)} up to date, skipped)" if from_stage
                       else "") + (f"; forced: {', '.join(selection.force)}" if selection.force else ""))
        outcomes = [_skipped(project, s) for s in selection.skip]
        for stage in selection.run:  # sequential: each stage waits for its upstream; DVC holds one repo lock
            # Once a stage has run, DVC decides for each later one (new upstream outputs may or may not differ).
            known_up_to_date = (stage not in stale and stage not in selection.force
                                and not any(o.ran for o in outcomes))
            if graph.stage(stage).module_name == "review":  # prefect mode: pause for the form before the gate
                gate = load_params(params_file).section(stage)
                if gate.mode == "prefect":
                    ask_review(project, gate.target, timeout_s=gate.prefect_timeout_s)
            task_ = run_stage.with_options(name=f"stage-{stage}", retries=stage_retries)
            outcomes.append(task_(stage, str(project), force=stage in selection.force, up_to_date=known_up_to_date))
        if save_experiment:
            name = flow_run.name or "forgeline"
            dvcrun.save_experiment(project, name, order, log=logger.info)  # param shadows the function
            create_markdown_artifact(markdown=f"Saved as DVC experiment `{name}`: see `dvc exp show`.",
                                     key=artifact_key("", "dvc-experiment"), description="DVC experiment of this run")
    return outcomes
