"""Fault-injection report: run every fault scenario of tests/faults/ once and print one table.

    python benchmarks/faults.py            # every scenario (~10 min on 2 busy cores)
    python benchmarks/faults.py --quick    # data stages only: no training, no Prefect (~3 min)
    python benchmarks/faults.py --keep /tmp/faults-work   # keep (and reuse) the work folder

Each scenario is the function its test asserts on (tests/faults/scenarios/*.py): it injects the fault into a copy
of the tiny project (planted PII and fake secrets in its input), recovers the way a user would, and returns a
row of facts plus the promises it checked. Columns: the fault; where it was injected; the outcome ("FAILED:
<promise>" when a promise did not hold); what was lost (records for data stages, steps for training: work
redone, never data missing); the time to recover (the re-run, retry or repair that restored the state; "—"
where there was nothing to recover because the fault was refused before any work).
"""

from __future__ import annotations

import argparse
import os
import shutil
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
os.chdir(ROOT)

import pytest  # noqa: E402  (MonkeyPatch for the flow scenario)

from tests.faults.scenarios import concurrency as conc  # noqa: E402
from tests.faults.scenarios import corruption as corr  # noqa: E402
from tests.faults.scenarios import disk  # noqa: E402
from tests.faults.scenarios import kills  # noqa: E402
from tests.faults.scenarios import security as sec  # noqa: E402
from tests.faults.scenarios.common import Row  # noqa: E402


def scenarios(quick: bool):
    """(name, needs training or Prefect, callable(work) -> Row | list[Row])."""
    def flow_retry(work: Path):
        from prefect.testing.utilities import prefect_test_harness

        with prefect_test_harness(server_startup_timeout=120), pytest.MonkeyPatch.context() as mp:
            return kills.flow_retry_after_kill(work, mp)

    items = [
        ("kill clean between shards", False, kills.kill_clean_between_shards),
        ("kill clean mid-write", False, kills.kill_clean_mid_write),
        ("kill pretrain mid-checkpoint", True, kills.kill_pretrain_mid_checkpoint),
        ("kill pretrain mid-step", True, kills.kill_pretrain_mid_step),
        ("kill clean under the flow", True, flow_retry),
        ("flip clean shard", False, lambda w: corr.corrupt_upstream(w, "data/clean/shards/docs-00000.parquet",
                                                                    "flip", "mix")),
        ("truncate clean shard", False, lambda w: corr.corrupt_upstream(w, "data/clean/shards/docs-00000.parquet",
                                                                        "truncate", "mix")),
        ("flip token shard", False, lambda w: corr.corrupt_upstream(w, "data/mix/train-00000.bin", "flip",
                                                                    "pretrain")),
        ("truncate token shard", False, lambda w: corr.corrupt_upstream(w, "data/mix/train-00000.bin", "truncate",
                                                                        "pretrain")),
        ("corrupt, then dvc repro", False, corr.corrupt_then_repro),
        ("flip checkpoint", True, lambda w: corr.corrupt_checkpoint(w, "flip")),
        ("truncate checkpoint", True, lambda w: corr.corrupt_checkpoint(w, "truncate")),
        ("ENOSPC injected", False, disk.disk_full_by_fault),
        ("ENOSPC tmpfs", False, disk.disk_full_tmpfs if disk.can_unshare_mount() else None),
        ("read-only output", False, disk.read_only_output),
        ("two dvc repro", False, conc.two_dvc_repro),
        ("two flows", True, conc.two_flows),
        ("pickled code as weights", False, sec.pickled_model),
        ("tampered DeepSpeed checkpoint", True, sec.tampered_deepspeed_checkpoint),
        ("Prefect server address", False, sec.prefect_listener),
        ("training rendezvous address", False, sec.rendezvous_listener),
        ("secrets and PII", True, sec.secrets_and_pii),
    ]
    return [(n, fn) for n, heavy, fn in items if fn is not None and not (quick and heavy)]


def fmt_time(s: float | None) -> str:
    return "—" if s is None else f"{s:.1f} s"


def render(rows: list[Row]) -> str:
    lines = ["| fault | where injected | outcome | records / steps lost | time to recover |",
             "|---|---|---|---|---|"]
    for r in rows:
        failed = [k for k, ok in r.checks.items() if not ok]
        outcome = r.outcome if not failed else f"{r.outcome} — did not hold: {'; '.join(failed)}"
        lines.append(f"| {r.fault} | {r.where} | {outcome} | {r.lost} | {fmt_time(r.recover_s)} |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true", help="data stages only (no training, no Prefect)")
    parser.add_argument("--keep", type=Path, default=None, help="work folder to keep (and reuse its base projects)")
    parser.add_argument("--only", action="append", default=[], help="run scenarios whose name contains this")
    args = parser.parse_args(argv)
    work = args.keep or Path(tempfile.mkdtemp(prefix="forgeline-faults-"))
    work.mkdir(parents=True, exist_ok=True)
    t0 = time.perf_counter()
    try:
        rows: list[Row] = []
        for name, fn in scenarios(args.quick):
            if args.only and not any(o in name for o in args.only):
                continue
            print(f"... {name}", file=sys.stderr, flush=True)
            try:
                got = fn(work)
            except Exception as exc:  # a scenario that crashes is a row too, not the end of the report
                got = Row(name, "(scenario crashed)", outcome=f"ERROR {type(exc).__name__}: {exc}"[:200],
                          checks={"scenario ran": False})
            rows += got if isinstance(got, list) else [got]
        print(render(rows))
        held = sum(r.ok for r in rows)
        print(f"\n{held} of {len(rows)} scenarios held every promise; {time.perf_counter() - t0:.0f} s in all "
              f"(tiny project, {os.cpu_count()} CPUs).")
        return 0 if held == len(rows) else 1
    finally:
        if args.keep is None:
            shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
