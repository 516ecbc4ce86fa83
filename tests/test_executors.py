"""The executors of data-stage shard work (tasks/core/executors.py): in-process, a local process pool and Dask
(dask.distributed, no orchestrator). Results come back in shard order whatever order shards finish in, `on_done`
sees the completion order, a failing shard names itself (and is retried on Dask), and clean's outputs are
byte-identical whichever executor ran them — also when the stage is started by `python -m tasks` as DVC does."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from specs import Params
from specs.run import ExecutorSpec
from tasks.core.artifacts import progress_from_line
from tasks.core.executors import DaskExecutor, InProcess, ProcessPool, ShardError, available_cores, executor_for
from tasks.core.runner import run_stage
from tests.helpers.clean import PARAMS, build_corpus
from tests.helpers.shardwork import fail_first_attempt, square_after

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def scheduler():
    """One local Dask cluster for the unit tests, reached by address as an external scheduler would be."""
    from dask.distributed import LocalCluster

    with LocalCluster(n_workers=2, threads_per_worker=1, processes=True, host="127.0.0.1",
                      dashboard_address=None) as cluster:
        yield cluster.scheduler_address


def test_executor_for_maps_the_spec_to_an_executor():
    assert available_cores() == len(os.sched_getaffinity(0))
    assert isinstance(executor_for(ExecutorSpec(workers=1)), InProcess)
    pool = executor_for(ExecutorSpec(workers=3))
    assert isinstance(pool, ProcessPool) and pool.workers == 3
    default = executor_for(ExecutorSpec())
    expected = InProcess if available_cores() == 1 else ProcessPool
    assert isinstance(default, expected) and getattr(default, "workers", 1) == available_cores()
    dask = executor_for(ExecutorSpec(kind="dask", workers=2))
    assert isinstance(dask, DaskExecutor) and dask.workers == 2
    with pytest.raises(ValueError):
        ExecutorSpec(workers=0)


def test_in_process_runs_here_in_shard_order():
    done: list[int] = []
    got = InProcess().map(square_after, [(k,) for k in range(4)], [f"s{k}" for k in range(4)],
                          lambda i, r: done.append(i))
    assert [r["value"] for r in got] == [0, 1, 4, 9]
    assert {r["pid"] for r in got} == {os.getpid()} and done == [0, 1, 2, 3]


def test_pool_returns_shard_order_when_shards_finish_out_of_order(tmp_path):
    # Shard 0 blocks one worker until the parent has seen shard 3's result, so the other worker does 1, 2, 3.
    flag = tmp_path / "three-arrived"
    done: list[int] = []

    def on_done(i: int, result: dict) -> None:
        done.append(i)
        if i == 3:
            flag.write_text("")

    got = ProcessPool(2).map(square_after, [(0, str(flag)), (1,), (2,), (3,)], ["s0", "s1", "s2", "s3"], on_done)
    assert done == [1, 2, 3, 0]  # completion order, in the parent
    assert [r["value"] for r in got] == [0, 1, 4, 9]  # shard order
    pids = {r["pid"] for r in got}
    assert len(pids) == 2 and os.getpid() not in pids


@pytest.mark.parametrize("executor", [InProcess(), ProcessPool(2)], ids=["in-process", "pool"])
def test_a_failing_shard_raises_with_its_label(executor):
    with pytest.raises(ShardError, match=r"shard bad-00001 failed: ValueError: invalid literal") as err:
        executor.map(int, [("1",), ("not a number",), ("3",)], ["ok-00000", "bad-00001", "ok-00002"])
    assert err.value.label == "bad-00001" and isinstance(err.value.__cause__, ValueError)
    assert executor.map(int, [("1",), ("3",)], ["a", "b"]) == [1, 3]  # the look-alike without the bad shard


def test_labels_must_match_the_shards():
    with pytest.raises(ValueError, match="2 shard argument tuples but 1 labels"):
        ProcessPool(2).map(int, [("1",), ("2",)], ["one"])


def test_dask_runs_on_the_workers_and_returns_shard_order(scheduler, tmp_path):
    flag = tmp_path / "one-arrived"  # shard 0 waits for it: it finishes only after shard 1's result is here
    done: list[int] = []

    def on_done(i: int, result: dict) -> None:
        done.append(i)
        flag.write_text("")

    spec = ExecutorSpec(kind="dask", address=scheduler, retries=0)
    got = executor_for(spec).map(square_after, [(5, str(flag)), (6,)], ["s0", "s1"], on_done)
    assert done == [1, 0] and [r["value"] for r in got] == [25, 36]
    pids = {r["pid"] for r in got}
    assert len(pids) == 2 and os.getpid() not in pids


def test_dask_retries_a_failing_shard(scheduler, tmp_path):
    attempts = tmp_path / "attempts"
    attempts.mkdir()
    spec = ExecutorSpec(kind="dask", address=scheduler, retries=1)
    got = executor_for(spec).map(fail_first_attempt, [(k, str(attempts)) for k in range(3)], ["a", "b", "c"])
    assert got == [100, 101, 102]
    per_shard = sorted(p.name.rsplit("-", 1)[0] for p in attempts.iterdir())
    assert per_shard == ["0-0", "0-1", "1-0", "1-1", "2-0", "2-1"]  # each failed once, then succeeded

    again = tmp_path / "again"
    again.mkdir()
    for k in (0, 2):  # these two already had their failed attempt: only shard b fails now
        (again / f"{k}-0-1").write_text("")
    with pytest.raises(ShardError, match=r"shard b failed: OSError: flaky node under shard 1") as err:
        executor_for(spec.model_copy(update={"retries": 0})).map(
            fail_first_attempt, [(k, str(again)) for k in range(3)], ["a", "b", "c"])
    assert err.value.label == "b" and isinstance(err.value.__cause__, OSError)
    assert len(list(again.glob("1-*"))) == 1  # no retry with retries: 0


def test_the_executor_is_no_dvc_param():
    stages = yaml.safe_load((ROOT / "dvc.yaml").read_text())["stages"]
    params = [p for s in stages.values() for p in s.get("params", []) if isinstance(p, str)]
    assert "run.seed" in params  # the look-alike that is a param
    assert not [p for p in params if p == "run" or p.startswith("run.executor")]


def _clean_files(root: Path) -> dict[Path, bytes]:
    out = root / "data/clean"
    # manifest.json names the code and package versions; the outputs are what must not differ
    return {p.relative_to(out): p.read_bytes() for p in sorted(out.rglob("*")) if p.is_file()
            and p.name != "manifest.json"}


@pytest.mark.slow
def test_clean_outputs_are_byte_identical_on_every_executor(tmp_path):
    executors = {"one": {"workers": 1}, "pool": {"workers": 2}, "dask": {"kind": "dask", "workers": 2}}
    outputs = {}
    for name, executor in executors.items():
        root = tmp_path / name
        root.mkdir()
        build_corpus(root)
        params = {**PARAMS, "run": {**PARAMS["run"], "executor": executor}}
        result = run_stage("clean", Params.model_validate(params), root)
        assert result.counts["in"] == 35
        outputs[name] = _clean_files(root)

    # As `dvc repro` starts it: `python -m tasks clean` in its own process, whose pool re-imports __main__.
    cli = tmp_path / "cli"
    cli.mkdir()
    build_corpus(cli)
    (cli / "params.yaml").write_text(yaml.safe_dump({**PARAMS, "run": {**PARAMS["run"], "executor": {"workers": 2}}}))
    proc = subprocess.Popen([sys.executable, "-m", "tasks", "--root", str(cli), "clean"], cwd=ROOT, text=True,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    _, stderr = proc.communicate(timeout=300)
    assert proc.returncode == 0, stderr[-3000:]
    lines = [line for line in stderr.splitlines() if "cleaned:" in line]
    assert [re.search(r"shard (\d+)/6", line).group(1) for line in lines] == ["1", "2", "3", "4", "5", "6"]
    # what the forgeline flow's progress artifact reads from these lines: rising to 100 % in completion order
    assert [progress_from_line("clean", line) for line in lines] == [round(100 * k / 6, 1) for k in range(1, 7)]
    pids = {int(re.search(r"\(pid (\d+)\)", line).group(1)) for line in lines}
    assert proc.pid not in pids  # the shards ran in the pool's processes, the progress lines in the stage's
    outputs["cli"] = _clean_files(cli)

    assert any(str(n).startswith("shards/") for n in outputs["one"]) and Path("dropped.parquet") in outputs["one"]
    for name in ("pool", "dask", "cli"):
        assert outputs[name].keys() == outputs["one"].keys(), name
        for path, data in outputs["one"].items():
            assert outputs[name][path] == data, (name, path)


def test_a_killed_stage_takes_its_pool_down_and_resumes(tmp_path):
    """SIGKILL of the stage after its 2nd shard: the pool's workers exit too (else they would hold the stage's
    pipes open and this would hang), the shards finished by then are reused, and the outputs are unchanged."""
    reference = tmp_path / "reference"
    reference.mkdir()
    build_corpus(reference)
    run_stage("clean", Params.model_validate({**PARAMS, "run": {**PARAMS["run"], "executor": {"workers": 1}}}),
              reference)
    root = tmp_path / "p"
    root.mkdir()
    build_corpus(root)
    (root / "params.yaml").write_text(yaml.safe_dump({**PARAMS, "run": {**PARAMS["run"], "executor": {"workers": 2}}}))
    cmd = [sys.executable, "-m", "tasks", "--root", str(root), "clean"]
    killed = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=120,
                            env={**os.environ, "FORGELINE_FAULT": "clean.shard_done=2"})
    assert killed.returncode == -9, killed.stderr[-3000:]
    finished = list((root / "work/clean").glob("*/mixed-*.parquet"))
    assert 2 <= len(finished) <= 6  # the 2 the stage saw, and any the other worker finished meanwhile
    resumed = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    assert f"resumed: {len(finished)} of 6 shards were already finished" in resumed.stderr
    assert _clean_files(root) == _clean_files(reference)
