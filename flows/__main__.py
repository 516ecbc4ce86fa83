"""`python -m flows [--until STAGE] [--set key=value ...]`: run the pipeline through Prefect."""

from __future__ import annotations

import argparse
import sys

import flows  # noqa: F401  (environment defaults before Prefect is imported)
from specs import ParamsError, parse_override


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m flows", description=__doc__)
    parser.add_argument("--root", default=".")
    parser.add_argument("--until", default=None, help="stop after this stage")
    parser.add_argument("--set", action="append", default=[], metavar="KEY=VALUE", help="params override")
    args = parser.parse_args(argv)
    from flows.pipeline import forgeline
    from tasks.core.dvcrun import StageFailed

    try:
        overrides = dict(parse_override(o) for o in args.set)
        outcomes = forgeline(root=args.root, until=args.until, overrides=overrides)
    except (ParamsError, StageFailed) as exc:
        print(exc, file=sys.stderr)
        return 1
    for o in outcomes:
        print(f"{o.stage}: {'ran' if o.ran else 'up to date'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
