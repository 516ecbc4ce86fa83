"""A stage session keeps one executor warm across the stage's passes (tasks/core/executors.py `stage_session`).

Worker pids tell which processes ran a pass: inside a session the second pass runs on the first pass's
processes; outside one (the look-alike) every pass starts its own. A failed shard leaves a kept pool usable,
and leaving the session stops the workers — on an error too."""

from __future__ import annotations

import os
import time

import psutil
import pytest

from specs.run import ExecutorSpec
from tasks.core.executors import ShardError, executor_for, release, stage_session
from tests.helpers.shardwork import square_after

POOL = ExecutorSpec(workers=2)


def pids(results: list[dict]) -> set[int]:
    return {r["pid"] for r in results}


def kept(results: list[dict]) -> set[int]:
    """The pids a later pass on the same kept pool may use: those `results` ran on, plus this process's children
    now (under load one worker can take every task of a pass and another only appear in a later one). Only ever
    the superset side of an assertion: the children may include processes that are not pool workers."""
    return pids(results) | {c.pid for c in psutil.Process().children()}


def run_pass(spec: ExecutorSpec, n: int = 4, first: int = 0) -> list[dict]:
    args = [(k,) for k in range(first, first + n)]
    return executor_for(spec).map(square_after, args, [f"s{k}" for k in range(first, first + n)])


def gone(pid: int, within_s: float = 30.0) -> bool:
    deadline = time.monotonic() + within_s
    while time.monotonic() < deadline:
        if not psutil.pid_exists(pid) or psutil.Process(pid).status() == psutil.STATUS_ZOMBIE:
            return True
        time.sleep(0.1)
    return False


def test_a_session_reuses_its_pool_and_stops_it_at_the_end():
    with stage_session():
        assert executor_for(POOL) is executor_for(ExecutorSpec(workers=2))  # same spec, same executor
        first = run_pass(POOL)
        started = kept(first)
        second = run_pass(POOL, first=4)
        assert [r["value"] for r in second] == [16, 25, 36, 49]
        assert pids(second) <= started and os.getpid() not in pids(first)
        single = run_pass(POOL, n=1)  # a one-shard pass goes to the warm pool instead of this process
        assert pids(single) <= started
    assert all(gone(p) for p in pids(first))
    # Outside a session every pass has its own processes (the pool is started and stopped per map).
    assert not pids(run_pass(POOL)) & pids(run_pass(POOL))


def test_a_failed_shard_leaves_the_kept_pool_usable_and_an_error_still_stops_it():
    with pytest.raises(RuntimeError, match="stage failed"):
        with stage_session():
            warm_results = run_pass(POOL)
            warm, started = pids(warm_results), kept(warm_results)
            with pytest.raises(ShardError, match="bad"):
                executor_for(POOL).map(square_after, [(1,), ("x",)], ["good", "bad"])  # "x" * "x" raises
            assert pids(run_pass(POOL)) <= started
            raise RuntimeError("stage failed")
    assert all(gone(p) for p in warm)


def test_sessions_nest_and_a_different_spec_gets_its_own_executor():
    with stage_session():
        outer = executor_for(POOL)
        assert executor_for(ExecutorSpec(workers=3)) is not outer
        with stage_session():
            assert executor_for(POOL) is not outer   # the inner session keeps its own
        assert executor_for(POOL) is outer
    assert executor_for(POOL) is not outer           # none open: a fresh, unkept executor each time


def test_a_session_keeps_one_local_dask_cluster_for_all_passes():
    dask = ExecutorSpec(kind="dask", workers=2)
    with stage_session():
        first, second = run_pass(dask), run_pass(dask, first=4)
        assert [r["value"] for r in second] == [16, 25, 36, 49]
        assert pids(second) <= pids(first) and os.getpid() not in pids(first)  # the same worker processes
    assert all(gone(p) for p in pids(first))  # the cluster closed with the session


def test_release_stops_the_kept_workers_and_the_next_pass_starts_fresh_ones():
    with stage_session():
        first = pids(run_pass(POOL))
        release(POOL)
        assert all(gone(p) for p in first)
        second_results = run_pass(POOL)
        second = pids(second_results)
        assert not second & first
        assert pids(run_pass(POOL)) <= kept(second_results)  # and those are kept again
    release(POOL)  # no session open: nothing to stop, no error
