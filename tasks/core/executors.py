"""Where a data stage's independent per-shard work runs: the executor interface and its two kinds.

`executor_for(run.executor)` gives an `Executor`; its `map(fn, args, labels, on_done)` is `[fn(*a) for a in
args]` run somewhere else, with `on_done(i, result)` called here, in the stage's process, as each shard finishes
(in completion order: progress lines and fault points stay with the stage), and the results returned in shard
order. A failed shard raises `ShardError` naming the shard, chained to the worker's own error.

- `local`, `workers: 1` (or a single shard): shard after shard in this process — no pool, so a debugger and
  tests see everything.
- `local`, more workers: a `ProcessPoolExecutor` over `workers` processes (default: the cores this process may
  use). Started with `spawn`: forking a process that may hold threads (torch, pyarrow, numpy's BLAS) can
  deadlock the child.
- `dask`: `dask.distributed` directly — a `LocalCluster` of worker processes listening on 127.0.0.1 only, or the
  scheduler at `address` (a `dask scheduler`, dask-jobqueue on SLURM, dask-kubernetes). Failed shards are
  retried `retries` times there: on a cluster a worker can be lost under a shard.

`fn` must be a module-level function (it travels to the workers by reference) and each shard must write only its
own files, atomically: then outputs cannot depend on the executor or on the order shards finish in.

Inside `stage_session()` (the runner opens one around every stage) `executor_for` gives the same executor for the
same spec, and it keeps its pool or Dask cluster warm across the stage's passes (clean: shards, dedup buckets,
verification, outputs; mix: scan, sample, tokenize) until the session ends: each fresh pool of spawned
processes costs every worker its interpreter and imports again (~0.5–2 CPU s), which on a small corpus was more
than a pass's work. Outside a session each `map` starts and stops its own.
"""

from __future__ import annotations

import concurrent.futures as cf
import contextlib
import multiprocessing
import os
import threading
import time
import uuid
import warnings
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures.process import BrokenProcessPool
from typing import Any, Protocol

from specs.run import ExecutorSpec

OnDone = Callable[[int, Any], None]  # (shard index, its result)


class ShardError(RuntimeError):
    """A shard's work failed (after any retries). `label` names the shard; `__cause__` is the worker's error."""

    def __init__(self, label: str, cause: BaseException):
        super().__init__(f"shard {label} failed: {type(cause).__name__}: {cause}")
        self.label = label


class Executor(Protocol):
    """Runs independent shard work; see the module docstring for the contract."""

    description: str  # for the stage's log line: where the shards run

    def map(self, fn: Callable[..., Any], args: Sequence[tuple], labels: Sequence[str],
            on_done: OnDone | None = None) -> list[Any]: ...

    def close(self) -> None: ...  # stop what a kept executor started (its pool, its Dask client)


def available_cores() -> int:
    """Cores this process may run on (a container's or `taskset`'s limit, not the host's count)."""
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # not on Linux
        return os.cpu_count() or 1


_sessions: list[dict[str, Any]] = []  # open stage sessions, innermost last: spec (as JSON) -> its kept executor


@contextlib.contextmanager
def stage_session() -> Iterator[None]:
    """Within: one warm executor per spec, closed (its workers stopped) when the block exits, also on an error."""
    kept: dict[str, Any] = {}
    _sessions.append(kept)
    try:
        yield
    finally:
        _sessions.remove(kept)
        for executor in kept.values():
            executor.close()


def release(spec: ExecutorSpec) -> None:
    """Stop the open session's kept executor for `spec`, if any: the next `map` starts fresh workers. For a pass
    after which the workers hold state the later passes do not need (clean's shard workers keep the language
    model, compiled loops and caches, ~0.6 GB each, while its global phase is sized by `clean.memory_gb`)."""
    if _sessions and (kept := _sessions[-1].pop(spec.model_dump_json(), None)) is not None:
        kept.close()


def executor_for(spec: ExecutorSpec) -> Executor:
    if not _sessions:
        return _build(spec, keep=False)
    kept, key = _sessions[-1], spec.model_dump_json()
    if key not in kept:
        kept[key] = _build(spec, keep=True)
    return kept[key]


def _build(spec: ExecutorSpec, keep: bool) -> Any:
    if spec.kind == "dask":
        return DaskExecutor(spec, keep)
    workers = spec.workers or available_cores()
    return InProcess() if workers == 1 else ProcessPool(workers, keep)


def _check(args: Sequence[tuple], labels: Sequence[str]) -> None:
    if len(args) != len(labels):
        raise ValueError(f"{len(args)} shard argument tuples but {len(labels)} labels")


class InProcess:
    """Shard after shard in the calling process."""

    description = "this process"

    def map(self, fn: Callable[..., Any], args: Sequence[tuple], labels: Sequence[str],
            on_done: OnDone | None = None) -> list[Any]:
        _check(args, labels)
        results = []
        for i, (a, label) in enumerate(zip(args, labels)):
            try:
                results.append(fn(*a))
            except Exception as exc:
                raise ShardError(label, exc) from exc
            if on_done:
                on_done(i, results[-1])
        return results

    def close(self) -> None:
        """Nothing to stop: shards ran in this process."""


class ProcessPool:
    """A pool of `workers` spawned processes on this machine. Not kept (`keep` False): started per `map` with no
    more processes than shards and stopped after it. Kept: started at the first `map` of two or more shards,
    its processes spawned as work arrives (at most `workers`) and reused until `close`."""

    def __init__(self, workers: int, keep: bool = False):
        self.workers, self.keep = workers, keep
        self.description = f"a pool of {workers} processes"
        self.pool: cf.ProcessPoolExecutor | None = None

    def map(self, fn: Callable[..., Any], args: Sequence[tuple], labels: Sequence[str],
            on_done: OnDone | None = None) -> list[Any]:
        _check(args, labels)
        n = min(self.workers, len(args))
        if n <= 1 and self.pool is None:  # starting a process for one shard only costs time
            return InProcess().map(fn, args, labels, on_done)
        if self.pool is None:
            self.pool = cf.ProcessPoolExecutor(max_workers=self.workers if self.keep else n,
                                               mp_context=multiprocessing.get_context("spawn"),
                                               initializer=exit_with_parent, initargs=(os.getpid(),))
        try:
            return self._collect(fn, args, labels, on_done)
        except ShardError as exc:
            if isinstance(exc.__cause__, BrokenProcessPool):
                self.close()  # a worker died: the pool takes no more work; the next map starts a fresh one
            raise
        finally:
            if not self.keep:
                self.close()

    def _collect(self, fn: Callable[..., Any], args: Sequence[tuple], labels: Sequence[str],
                 on_done: OnDone | None) -> list[Any]:
        assert self.pool is not None
        results: list[Any] = [None] * len(args)
        index = {self.pool.submit(fn, *a): i for i, a in enumerate(args)}
        try:
            for future in cf.as_completed(index):
                i = index[future]
                try:
                    results[i] = future.result()  # a killed worker arrives here as BrokenProcessPool
                except Exception as exc:
                    raise ShardError(labels[i], exc) from exc
                if on_done:
                    on_done(i, results[i])
        except BaseException:
            # This map's shards not yet started are dropped; running ones finish (they write atomically), so a
            # kept pool is idle again before the error leaves.
            for future in index:
                future.cancel()
            cf.wait(index)
            raise
        return results

    def close(self) -> None:
        if self.pool is not None:
            self.pool.shutdown(wait=True, cancel_futures=True)
            self.pool = None


def exit_with_parent(parent: int, poll_s: float = 0.5) -> None:
    """Pool-worker initializer: exit once `parent` is gone. A SIGKILLed stage (a fault, the OOM killer, a
    cancelled run) cannot shut its pool down, and an orphaned worker waits on its task queue forever, holding
    the stage's stdout and stderr open, so whoever waits for the stage's output would hang."""

    def watch() -> None:
        while os.getppid() == parent:
            time.sleep(poll_s)
        os._exit(1)

    threading.Thread(target=watch, name="exit-with-parent", daemon=True).start()


class DaskExecutor:
    """Shards as `dask.distributed` futures, on a local cluster or an existing scheduler."""

    def __init__(self, spec: ExecutorSpec, keep: bool = False):
        self.spec, self.keep = spec, keep
        self.session: contextlib.ExitStack | None = None  # a kept client (and its local cluster)
        self.kept_client: Any = None
        workers = spec.workers or available_cores()
        self.description = (f"the Dask scheduler at {spec.address}" if spec.address else
                            f"a local Dask cluster of {workers} workers x {spec.threads_per_worker} threads")
        self.workers = workers

    @contextlib.contextmanager
    def client(self) -> Iterator[Any]:
        from dask.distributed import Client, LocalCluster  # imported only for `dask`: a local run never loads it

        if self.spec.address:
            with Client(self.spec.address) as client:
                yield client
            return
        with warnings.catch_warnings():
            # With no dashboard the scheduler still serves health checks on loopback, at 8787 or, when another
            # cluster holds that port, any free one: a warning about it would only be noise in the stage's log.
            warnings.filterwarnings("ignore", message="Port .* is already in use")
            cluster = LocalCluster(n_workers=self.workers, threads_per_worker=self.spec.threads_per_worker,
                                   processes=True, host="127.0.0.1", dashboard_address=None)
        with cluster, Client(cluster) as client:
            yield client

    def map(self, fn: Callable[..., Any], args: Sequence[tuple], labels: Sequence[str],
            on_done: OnDone | None = None) -> list[Any]:
        from dask.distributed import as_completed

        _check(args, labels)
        if not args:
            return []
        results: list[Any] = [None] * len(args)
        run = uuid.uuid4().hex  # keys unique per map: a shared scheduler may hold another run's shards
        with self.map_client() as client:
            # pure=False: the same arguments are new work each time (the shard writes files), never a cached result
            futures = [client.submit(fn, *a, key=f"shard-{label}-{run}", pure=False, retries=self.spec.retries)
                       for a, label in zip(args, labels)]
            index = {f.key: i for i, f in enumerate(futures)}
            try:
                for future in as_completed(futures):
                    i = index[future.key]
                    try:
                        results[i] = future.result()
                    except Exception as exc:
                        raise ShardError(labels[i], exc) from exc
                    if on_done:
                        on_done(i, results[i])
            except BaseException:
                client.cancel(futures)  # a shared scheduler should not go on with a failed run's shards
                raise
        return results

    @contextlib.contextmanager
    def map_client(self) -> Iterator[Any]:
        """The client one `map` uses: the kept one (started at the first map), or its own, closed after it."""
        if not self.keep:
            with self.client() as client:
                yield client
            return
        if self.kept_client is None:
            self.session = contextlib.ExitStack()
            self.kept_client = self.session.enter_context(self.client())
        yield self.kept_client

    def close(self) -> None:
        if self.session is not None:
            self.session.close()
            self.session, self.kept_client = None, None
