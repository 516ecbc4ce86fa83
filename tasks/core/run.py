"""The stage entry: `python -m tasks.core.run <stage>` (dvc.yaml's cmd; `python -m tasks <stage>` comes here too).

Its own small program so that what a stage's process runs is only what stages need: the command line's other
subcommands (plan, reports, the terminal review, tiny-checkpoint) and their imports stay out of every stage's code
deps (tasks/core/closure.py), and an edit to them re-runs no stage.
"""

from __future__ import annotations

import argparse
import contextlib
import logging
import os
import sys
import traceback
from pathlib import Path

from specs import ParamsError, load_params
from specs.results import StageResult


def _workspace(root: Path, stage: str):
    """The workspace lock for a stage started by hand or by a plain `dvc repro` (refused at once, naming the
    holder, while a flow or another stage holds it); nothing when a lock holder started this stage."""
    from tasks.core.dvcrun import LOCK_HELD_ENV, workspace_lock

    if os.environ.get(LOCK_HELD_ENV) or not (root / "dvc.yaml").exists():
        return contextlib.nullcontext()
    return workspace_lock(root, f"stage {stage} (`python -m tasks {stage}`)", timeout=0)


def _unlisted_data(stage: str, params, root: Path) -> list[str]:
    """Under `dvc repro` (DVC sets DVC_STAGE for a stage's command): the user files `params` names for `stage`
    that dvc.yaml does not list as its deps (tasks/core/datadeps.py); outside DVC nothing is tracked, so none."""
    if not os.environ.get("DVC_STAGE") or not (root / "dvc.yaml").exists():
        return []
    import yaml

    from tasks.core import datadeps, graph

    wanted = datadeps.stage_deps(params, stage, root, graph.project_outputs())
    return datadeps.unlisted(yaml.safe_load((root / "dvc.yaml").read_text()) or {}, stage, wanted) if wanted else []


def run(stage: str, root: Path, params_file: str = "params.yaml") -> int:
    """Run `stage` on the project at `root`: 0 when it succeeded, 1 when it failed (its failure is recorded as
    the stage's result, for the flow), 2 when the params are invalid (before any work)."""
    from tasks.core.dvcrun import WorkspaceBusy
    from tasks.core.files import StorageError, write_json_atomic
    from tasks.core.runner import StagePaths, run_stage

    try:
        params = load_params(root / params_file)
    except ParamsError as exc:
        print(exc, file=sys.stderr)
        return 2
    unlisted = _unlisted_data(stage, params, root)
    if unlisted:
        print(f"dvc.yaml: stage '{stage}' does not depend on {', '.join(unlisted)}, which params.yaml's sources "
              f"name: DVC would not re-run it when those files change. Run `python -m tasks graph --write` (and "
              f"commit dvc.yaml), then `dvc repro` again.", file=sys.stderr)
        return 2
    try:
        with _workspace(root, stage):
            result = run_stage(stage, params, root)
    except WorkspaceBusy as exc:
        print(exc, file=sys.stderr)
        return 1
    except Exception as exc:  # record the failure for the flow, then fail loudly
        failure = StageResult(stage=stage, ok=False, error=f"{type(exc).__name__}: {exc}",
                              summary=f"**{stage} failed**: {exc}")
        write_json_atomic(StagePaths(root, stage).result_file, failure.model_dump(mode="json"))
        if os.environ.get("FORGELINE_TRACEBACK") or not isinstance(exc, (ValueError, FileNotFoundError,
                                                                         StorageError)):
            traceback.print_exc()
        print(f"{stage} failed: {exc}", file=sys.stderr)
        return 1
    print(result.summary)
    return 0 if result.ok else 1


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tasks.core.run", description=__doc__.split("\n\n")[0])
    parser.add_argument("stage", help="the stage to run (python -m tasks graph lists them)")
    parser.add_argument("--root", default=".", help="project root (holds params.yaml and dvc.yaml)")
    parser.add_argument("--params", default="params.yaml", help="params file, relative to the root")
    args = parser.parse_args(argv)
    configure_logging()
    return run(args.stage, Path(args.root).resolve(), args.params)


def configure_logging() -> None:
    """Our progress lines at INFO; libraries (GX, DVC) only when they warn."""
    logging.basicConfig(level=logging.WARNING, format="%(asctime)s %(name)s: %(message)s", datefmt="%H:%M:%S")
    logging.getLogger("forgeline").setLevel(logging.INFO)


if __name__ == "__main__":
    sys.exit(main())
