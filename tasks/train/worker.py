"""Entry point of one rank under an external launcher: `python -m tasks.train.worker --job job.json`.

The DeepSpeed launcher and torchrun set RANK / LOCAL_RANK / WORLD_SIZE / MASTER_ADDR / MASTER_PORT; the job
file (a `specs.ranks.JobFile` written by `tasks.train.launch`) says what to train and where the outputs and
markers go (absolute paths, on a filesystem every node shares). RANK (global) decides what a rank writes;
LOCAL_RANK only picks its GPU. On a multi-node launch the other nodes' agents start this module themselves, so
it sets the rank environment the launching node gave its own agent (DeepSpeed's CPU accelerator on CPU ranks)
where the node's environment has not set it already.
"""

from __future__ import annotations

import argparse
import os
from pathlib import Path

from specs.ranks import JobFile
from tasks.train.launch import rank_env, setup_child_logging
from tasks.train.loop.trainer import run_rank


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tasks.train.worker", description=__doc__)
    parser.add_argument("--job", required=True, help="job.json written by tasks.train.launch")
    parser.add_argument("--local_rank", type=int, default=None, help="(set by launchers that pass it)")
    args = parser.parse_args(argv)
    if args.local_rank is not None:
        os.environ.setdefault("LOCAL_RANK", str(args.local_rank))
    job = JobFile.loads(Path(args.job).read_text())
    for key, value in rank_env(job.spec.parallel.accelerator).items():
        if value is not None:
            os.environ.setdefault(key, value)  # before DeepSpeed picks its accelerator (first use, in the trainer)
    setup_child_logging(int(os.environ.get("RANK", "0")))
    run_rank(job)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
