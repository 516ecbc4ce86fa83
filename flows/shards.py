"""A data stage's per-shard work as Prefect tasks on Dask (prefect-dask's DaskTaskRunner). Wiring only: the
work itself is the stage's function, called through `tasks.core.shardmap.timed`.

Started from inside a stage (`python -m tasks clean`, i.e. under `dvc repro` or the forgeline flow), this is a
flow run of its own, `forgeline-shards`, named after the stage, with one task run per shard named after the
shard. Under the forgeline flow the stage inherits the flow's PREFECT_API_URL, so those runs land in the same UI;
alone, Prefect starts its temporary local server as for any flow.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from prefect import flow, task
from prefect.cache_policies import NO_CACHE
from prefect.futures import as_completed
from prefect_dask import DaskTaskRunner

from specs.run import ExecutorSpec
from tasks.core.shardmap import timed


@task(task_run_name="{stage}:{label}", cache_policy=NO_CACHE, tags=["forgeline", "shard"])
def shard_task(fn: Callable[..., Any], args: tuple, stage: str, label: str) -> dict[str, Any]:
    """One shard's work on a Dask worker."""
    return timed(fn, *args)


def task_runner(executor: ExecutorSpec) -> DaskTaskRunner:
    """The scheduler at `address`, or a local cluster of worker processes that listens on loopback only."""
    if executor.address:
        return DaskTaskRunner(address=executor.address)
    return DaskTaskRunner(cluster_kwargs={
        "n_workers": executor.workers, "threads_per_worker": executor.threads_per_worker, "processes": True,
        "host": "127.0.0.1", "dashboard_address": None,
    })


def fan_out(fn: Callable[..., Any], args: list[tuple], labels: list[str], executor: ExecutorSpec, stage: str,
            on_done: Callable[[int, dict[str, Any]], None]) -> list[dict[str, Any]]:
    """Submit one task per shard, call `on_done` here as each finishes, return the results in shard order."""

    @flow(name="forgeline-shards", flow_run_name=f"{stage}-shards", task_runner=task_runner(executor),
          validate_parameters=False)
    def shards() -> list[dict[str, Any]]:
        submitted = shard_task.with_options(retries=executor.retries)
        futures = [submitted.submit(fn, a, stage, label) for a, label in zip(args, labels)]
        index = {f.task_run_id: i for i, f in enumerate(futures)}
        results: list[dict[str, Any] | None] = [None] * len(futures)
        for future in as_completed(futures):
            i = index[future.task_run_id]
            results[i] = future.result()  # re-raises a shard's error once its retries are spent
            on_done(i, results[i])
        return results

    return shards()
