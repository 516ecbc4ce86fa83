"""Entry point of one rank under an external launcher: `python -m tasks.train.worker --job job.json`.

The DeepSpeed launcher and torchrun set RANK / LOCAL_RANK / WORLD_SIZE / MASTER_ADDR / MASTER_PORT; the job
file (a `specs.ranks.JobFile` written by `tasks.train.launch`) says what to train and where the outputs and
markers go.
"""

from __future__ import annotations

import argparse
import os
from pathlib import Path

from specs.ranks import JobFile
from tasks.train.launch import setup_child_logging
from tasks.train.trainer import run_rank


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tasks.train.worker", description=__doc__)
    parser.add_argument("--job", required=True, help="job.json written by tasks.train.launch")
    parser.add_argument("--local_rank", type=int, default=None, help="(set by launchers that pass it)")
    args = parser.parse_args(argv)
    if args.local_rank is not None:
        os.environ.setdefault("LOCAL_RANK", str(args.local_rank))
    setup_child_logging(int(os.environ.get("RANK", "0")))
    run_rank(JobFile.loads(Path(args.job).read_text()))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
