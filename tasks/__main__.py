"""Command line: `python -m tasks <stage>` runs one stage; `check`, `graph` inspect the run's definition."""

from __future__ import annotations

import argparse
import logging
import os
import sys
import traceback
from pathlib import Path

from specs import ParamsError, load_params
from specs.results import StageResult
from tasks.core import graph


def _root(args: argparse.Namespace) -> Path:
    return Path(args.root).resolve()


def cmd_check(args: argparse.Namespace) -> int:
    root = _root(args)
    problems: list[str] = []
    try:
        params = load_params(root / args.params, args.set or ())
    except ParamsError as exc:
        problems += [f"{exc.source}: {p}" for p in exc.problems]
        params = None
    problems += graph.check_dvc_yaml(root)
    if params is not None:
        from specs.params import read_params_file

        problems += graph.missing_param_keys(read_params_file(root / args.params))
    if problems:
        print("check failed:", *problems, sep="\n  ", file=sys.stderr)
        return 2
    print(f"ok: {args.params} is valid for stages {', '.join(graph.STAGE_NAMES)}; dvc.yaml matches the registry"
          f" (run '{params.run.name}', seed {params.run.seed})")
    return 0


def cmd_graph(args: argparse.Namespace) -> int:
    root = _root(args)
    if args.write:
        from tasks.core.files import write_text_atomic

        write_text_atomic(root / "dvc.yaml", graph.dvc_yaml_text())
        print(f"wrote {root / 'dvc.yaml'}")
        return 0
    for s in graph.STAGES:
        print(f"{s.name:<10} <- {', '.join(s.upstream) or '(sources)'}")
    return 0


def cmd_stage(args: argparse.Namespace) -> int:
    from tasks.core.files import write_json_atomic
    from tasks.core.runner import StagePaths, run_stage

    root = _root(args)
    try:
        params = load_params(root / args.params)
    except ParamsError as exc:
        print(exc, file=sys.stderr)
        return 2
    try:
        result = run_stage(args.command, params, root)
    except Exception as exc:  # record the failure for the flow, then fail loudly
        failure = StageResult(stage=args.command, ok=False, error=f"{type(exc).__name__}: {exc}",
                              summary=f"**{args.command} failed**: {exc}")
        write_json_atomic(StagePaths(root, args.command).result_file, failure.model_dump(mode="json"))
        if os.environ.get("FORGELINE_TRACEBACK") or not isinstance(exc, (ValueError, FileNotFoundError)):
            traceback.print_exc()
        print(f"{args.command} failed: {exc}", file=sys.stderr)
        return 1
    print(result.summary)
    return 0 if result.ok else 1


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m tasks", description=__doc__)
    parser.add_argument("--root", default=".", help="project root (holds params.yaml and dvc.yaml)")
    parser.add_argument("--params", default="params.yaml", help="params file, relative to the root")
    sub = parser.add_subparsers(dest="command", required=True)
    check = sub.add_parser("check", help="validate params.yaml (+ overrides) and dvc.yaml; non-zero on error")
    check.add_argument("--set", action="append", metavar="KEY=VALUE", help="override, e.g. ingest.max_doc_chars=5000")
    check.set_defaults(func=cmd_check)
    g = sub.add_parser("graph", help="show the stage graph, or --write dvc.yaml from the registry")
    g.add_argument("--write", action="store_true")
    g.set_defaults(func=cmd_graph)
    for s in graph.STAGES:
        sp = sub.add_parser(s.name, help=f"run stage {s.name} from params.yaml")
        sp.set_defaults(func=cmd_stage)
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    # Our progress lines at INFO; libraries (GX, DVC) only when they warn.
    logging.basicConfig(level=logging.WARNING, format="%(asctime)s %(name)s: %(message)s", datefmt="%H:%M:%S")
    logging.getLogger("forgeline").setLevel(logging.INFO)
    return args.func(args)


if __name__ == "__main__":
    sys.exit(main())
