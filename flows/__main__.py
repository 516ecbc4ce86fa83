"""Run forgeline through Prefect.

  python -m flows [run] [--until STAGE] [--from STAGE] [--force STAGE ...] [--set key=value ...]
  python -m flows serve [--name local] [--root .]     a deployment served by this process (Ctrl-C stops it)
  python -m flows server [--port 4200]                a local Prefect server on 127.0.0.1 (UI included)

Without PREFECT_API_URL, `run` starts a temporary local server for the one run; `serve` needs a server
(start one with `python -m flows server` or `prefect server start --host 127.0.0.1`).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import flows  # noqa: F401  (environment defaults before Prefect is imported)
from specs import ParamsError, parse_override


def _run(args: argparse.Namespace) -> int:
    from flows.pipeline import forgeline
    from tasks.core.dvcrun import StageFailed, StagesNotUpToDate, WorkspaceBusy

    try:
        overrides = dict(parse_override(o) for o in args.set)
        outcomes = forgeline(root=args.root, until=args.until, from_stage=args.from_stage, force=args.force or None,
                             overrides=overrides, save_experiment=args.save_experiment,
                             stage_retries=args.retries, lock_timeout_s=args.lock_timeout)
    except (ParamsError, StageFailed, StagesNotUpToDate, WorkspaceBusy, ValueError, KeyError) as exc:
        print(exc, file=sys.stderr)
        return 1
    for o in outcomes:
        print(f"{o.stage}: {'ran' if o.ran else 'up to date'}")
    return 0


def _serve(args: argparse.Namespace) -> int:
    from prefect.settings import PREFECT_API_URL

    if not PREFECT_API_URL.value():
        # Without a server, Prefect would serve against a temporary one that dies with this process.
        print("serve needs a running Prefect server: start one (`python -m flows server` or `prefect server start "
              "--host 127.0.0.1`) and export PREFECT_API_URL=http://127.0.0.1:4200/api", file=sys.stderr)
        return 2
    from flows.pipeline import forgeline

    # Runs of this deployment default to this project folder; callers may still pass any parameter.
    forgeline.serve(name=args.name, parameters={"root": str(Path(args.root).resolve())}, tags=["forgeline"],
                    limit=args.limit)
    return 0


def _server(args: argparse.Namespace) -> int:
    import os
    import signal
    import time

    from flows.server import local_server

    def interrupt(signum, frame):
        raise KeyboardInterrupt

    # Stop the server on SIGTERM too, and on SIGINT even when started in the background (where a shell
    # leaves SIGINT ignored): the `finally` of local_server must run, or the server process is orphaned.
    signal.signal(signal.SIGTERM, interrupt)
    signal.signal(signal.SIGINT, interrupt)
    home = Path(os.environ["PREFECT_HOME"])
    with local_server(home, port=args.port) as api_url:
        print(f"Prefect server on {api_url.removesuffix('/api')} (state in {home}); Ctrl-C stops it.\n"
              f"In another shell: export PREFECT_API_URL={api_url}", flush=True)
        try:
            while True:
                time.sleep(3600)
        except KeyboardInterrupt:
            pass
    return 0


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m flows", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = parser.add_subparsers(dest="command")
    run = sub.add_parser("run", help="run the pipeline once (the default command)")
    run.add_argument("--root", default=".")
    run.add_argument("--until", default=None, help="stop after this stage")
    run.add_argument("--from", dest="from_stage", default=None, help="start at this stage (upstream must be "
                     "up to date)")
    run.add_argument("--force", action="append", default=[], metavar="STAGE", help="re-run even if up to date")
    run.add_argument("--set", action="append", default=[], metavar="KEY=VALUE", help="params override")
    run.add_argument("--save-experiment", action="store_true", help="record the run as a DVC experiment")
    run.add_argument("--retries", type=int, default=2, help="retries of a crashed stage")
    run.add_argument("--lock-timeout", type=float, default=None, help="seconds to wait for a busy workspace")
    run.set_defaults(func=_run)
    serve = sub.add_parser("serve", help="serve the flow as a deployment 'forgeline/<name>'")
    serve.add_argument("--root", default=".")
    serve.add_argument("--name", default="local")
    serve.add_argument("--limit", type=int, default=None, help="max concurrent runs in this process")
    serve.set_defaults(func=_serve)
    server = sub.add_parser("server", help="start a local Prefect server on 127.0.0.1")
    server.add_argument("--port", type=int, default=4200)
    server.set_defaults(func=_server)
    return parser


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if not argv or argv[0] not in ("run", "serve", "server", "-h", "--help"):
        argv = ["run", *argv]  # `python -m flows --until validate` keeps working
    args = build_parser().parse_args(argv)
    return args.func(args)


if __name__ == "__main__":
    sys.exit(main())
