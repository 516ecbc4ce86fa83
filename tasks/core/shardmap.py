"""Run a data stage's independent per-shard work here, or fanned out over Dask through a Prefect task runner.

A stage hands over a module-level function (it is pickled by reference when it travels to a Dask worker) and
one argument tuple per shard. `local` calls it shard after shard in this process; `dask` submits one Prefect
task per shard through prefect-dask's DaskTaskRunner (`flows/shards.py`, imported only then, so a local run
never loads Dask or talks to a Prefect server). Either way `on_done` runs here, in this process, as each
shard finishes (progress lines and fault points stay in the stage's process), and results come back in shard
order. Each shard must write only its own files, atomically: then the outputs cannot depend on the executor or
on the order shards finish in, and a retried or re-run shard never meets half of an earlier attempt.
"""

from __future__ import annotations

import logging
import os
import time
from collections.abc import Callable, Sequence
from typing import Any

from specs.run import ExecutorSpec

log = logging.getLogger("forgeline.shards")

ShardFn = Callable[..., Any]
OnDone = Callable[[int, dict[str, Any]], None]  # (shard index, timed(...) of it)


def map_shards(fn: ShardFn, args: Sequence[tuple], labels: Sequence[str], executor: ExecutorSpec, stage: str,
               on_done: OnDone | None = None) -> list[dict[str, Any]]:
    """`[timed(fn, *a) for a in args]` run where `executor` says: each result comes with the pid of the process
    that ran it and its seconds. `labels` name the shards in logs and Prefect task runs."""
    if len(args) != len(labels):
        raise ValueError(f"{stage}: {len(args)} shard argument tuples but {len(labels)} labels")
    if not args:
        return []
    on_done = on_done or (lambda i, result: None)
    if executor.kind == "local":
        results = []
        for i, a in enumerate(args):
            results.append(timed(fn, *a))
            on_done(i, results[-1])
        return results
    from flows.shards import fan_out  # Prefect + Dask wiring lives with the other Prefect code

    log.info("%s: %d shards to Dask (%s)", stage, len(args),
             executor.address or f"local cluster, {executor.workers} workers x {executor.threads_per_worker} threads")
    return fan_out(fn, list(args), list(labels), executor, stage, on_done)


def timed(fn: ShardFn, *args: Any) -> dict[str, Any]:
    """Call `fn(*args)`; report where and how long it ran (worker pid, seconds) beside its result."""
    t0 = time.perf_counter()
    result = fn(*args)
    return {"result": result, "pid": os.getpid(), "seconds": round(time.perf_counter() - t0, 3)}
