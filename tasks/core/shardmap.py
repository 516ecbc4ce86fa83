"""A data stage's per-shard work on the executor `run.executor` names (`tasks/core/executors.py`), timed.

The stage hands over a module-level function and one argument tuple per shard; each result comes back with the
pid of the process that ran it and its seconds (for the stage's progress line), in shard order, while `on_done`
runs in the stage's process as each shard finishes. Each shard must write only its own files, atomically: then
the outputs cannot depend on the executor or on the order shards finish in, and a retried or re-run shard never
meets half of an earlier attempt.
"""

from __future__ import annotations

import functools
import logging
import os
import time
from collections.abc import Callable, Sequence
from typing import Any

from specs.run import ExecutorSpec
from tasks.core.executors import executor_for

log = logging.getLogger("forgeline.shards")

ShardFn = Callable[..., Any]
OnDone = Callable[[int, dict[str, Any]], None]  # (shard index, timed(...) of it)


def map_shards(fn: ShardFn, args: Sequence[tuple], labels: Sequence[str], executor: ExecutorSpec, stage: str,
               on_done: OnDone | None = None) -> list[dict[str, Any]]:
    """`[timed(fn, *a) for a in args]` run where `executor` says. `labels` name the shards in logs and errors
    (a failed shard raises `tasks.core.executors.ShardError`)."""
    if len(args) != len(labels):
        raise ValueError(f"{stage}: {len(args)} shard argument tuples but {len(labels)} labels")
    if not args:
        return []
    runner = executor_for(executor)
    log.info("%s: %d shards on %s", stage, len(args), runner.description)
    # A partial of two module-level functions pickles by reference, so it travels to any worker process.
    return runner.map(functools.partial(timed, fn), args, labels, on_done)


def timed(fn: ShardFn, *args: Any) -> dict[str, Any]:
    """Call `fn(*args)`; report where and how long it ran (worker pid, seconds) beside its result."""
    t0 = time.perf_counter()
    result = fn(*args)
    release_heap()
    return {"result": result, "pid": os.getpid(), "seconds": round(time.perf_counter() - t0, 3)}


def release_heap() -> None:
    """Hand the heap a finished shard freed back to the OS (glibc `malloc_trim`). A kept worker otherwise holds
    its peak across the stage's later passes, on top of what those passes' memory budgets allow."""
    if _LIBC is not None:
        _LIBC.malloc_trim(0)


def _load_libc():
    try:
        import ctypes

        libc = ctypes.CDLL("libc.so.6")
        libc.malloc_trim  # glibc only (not musl, not macOS)
        return libc
    except (OSError, AttributeError):
        return None


_LIBC = _load_libc()
