"""How the `spawn` launcher starts CPU ranks (tasks/train/launch.py): forked from a forkserver that has imported
torch / DeepSpeed once, which must train to exactly the bytes fresh `spawn` interpreters train to."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

import torch.multiprocessing as tmp_mp
from tasks.train.launch import PRELOAD, launch, start_method
from tasks.train.inputs.synthetic import make_job
from tests.helpers.parallel import SEED, job_spec

THREADS = """
import importlib, os, sys
for name in sys.argv[1:]:
    importlib.import_module(name)
import torch, torch.distributed as dist
print(len(os.listdir("/proc/self/task")), torch.cuda.is_initialized(), dist.is_initialized())
"""


def imported_state(modules: list[str]) -> str:
    out = subprocess.run([sys.executable, "-c", THREADS, *modules], capture_output=True, text=True, check=True,
                         env={"DS_ACCELERATOR": "cpu", "OMP_NUM_THREADS": "1", "PATH": "/usr/bin:/bin"})
    return out.stdout.split()[-3:]


@pytest.mark.skipif(not Path("/proc/self/task").is_dir(), reason="counts threads through /proc")
def test_preload_starts_no_thread_process_group_or_cuda():
    """The forkserver forks every rank from a process that ran PRELOAD: one thread (a thread's locks would be
    copied mid-use), no CUDA, no process group. The look-alike: pyarrow (imported by tasks.train) does start one
    (jemalloc's background thread), which is why our own modules are not preloaded."""
    assert imported_state(PRELOAD) == ["1", "False", "False"]
    assert imported_state(["pyarrow"])[0] != "1"


def test_start_method_choice(monkeypatch):
    monkeypatch.setenv("DS_ACCELERATOR", "cpu")  # what launch() sets for CPU ranks before choosing
    monkeypatch.setenv("OMP_NUM_THREADS", "1")
    monkeypatch.delenv("FORGELINE_START_METHOD", raising=False)
    assert start_method("cpu") == "forkserver"
    assert start_method("cuda") == "spawn"  # CUDA is never set up next to a process that forks ranks
    monkeypatch.setenv("FORGELINE_START_METHOD", "spawn")
    assert start_method("cpu") == "spawn"
    monkeypatch.setenv("FORGELINE_START_METHOD", "fork")
    with pytest.raises(ValueError, match="forkserver or spawn"):
        start_method("cpu")
    monkeypatch.setenv("FORGELINE_START_METHOD", "forkserver")
    monkeypatch.setenv("OMP_NUM_THREADS", "2")  # the server's libgomp read 1: its forks would not get 2
    assert start_method("cpu") == "spawn"


def outputs(root: Path) -> dict[str, bytes]:
    """Every file a run writes that depends only on its inputs: weights, checkpoints, metrics (the markers,
    telemetry and wandb logs hold wall times and run ids)."""
    files = [p for d in ("out", "checkpoints") for p in (root / d).rglob("*") if p.is_file()]
    return {str(p.relative_to(root)): p.read_bytes() for p in files}


def test_forked_ranks_train_byte_identical_to_spawned(tmp_path, mix_dir, monkeypatch):
    """The same 2-rank ZeRO-2 job through both start methods (a rank killed mid-run under each is
    tests/test_train_parallel.py::test_pp2_zero1_killed_and_resumed and tests/test_elastic_resume.py)."""
    used, real = [], tmp_mp.start_processes

    def recording(*args, **kwargs):  # launch() imports torch.multiprocessing when it starts ranks
        used.append(kwargs["start_method"])
        return real(*args, **kwargs)

    monkeypatch.setattr(tmp_mp, "start_processes", recording)
    spec = job_spec({"dp": 2, "zero_stage": 2}, checkpoint_every=2)
    runs = {}
    for method in ("spawn", "forkserver"):
        monkeypatch.setenv("FORGELINE_START_METHOD", method)
        root = tmp_path / method
        result = launch(make_job(root, mix_dir, spec, SEED), root / "launch")
        runs[method] = (result.losses, outputs(root))
    assert used == ["spawn", "forkserver"]
    (spawned, spawned_files), (forked, forked_files) = runs["spawn"], runs["forkserver"]
    assert forked == spawned and len(spawned) == 5
    assert {"out/model.safetensors", "out/metrics.jsonl"} <= spawned_files.keys()
    assert any(name.startswith("checkpoints/step000004/") for name in spawned_files)
    assert forked_files.keys() == spawned_files.keys()
    for name, data in spawned_files.items():
        assert forked_files[name] == data, name


def test_a_rank_left_over_from_an_earlier_launch_cannot_answer_for_this_one(tmp_path, mix_dir):
    """A rank of an earlier launch that outlived it (a node agent nobody stopped, a rank hanging in a collective
    until its timeout) writes its marker late, into the marker folder it was given. Here such a rank writes a
    failure for rank 1 over and over while the stage launches again: this launch's own markers decide."""
    import shutil
    import threading

    from specs.ranks import RankError, RankResult
    from tasks.core.files import write_json_atomic

    spec = job_spec({"dp": 2, "zero_stage": 1})
    job = make_job(tmp_path, mix_dir, spec, SEED)
    first = launch(job, tmp_path / "launch")
    stale_dir = next(Path(job.marker_dir).rglob("rank-00001.json")).parent  # where launch 1's rank 1 wrote
    stale = RankResult(rank=1, ok=False, error=RankError(type="RuntimeError", message="stale rank: timed out"))
    done = threading.Event()

    def stale_rank() -> None:
        while not done.is_set():
            try:
                stale_dir.mkdir(parents=True, exist_ok=True)
                write_json_atomic(stale_dir / "rank-00001.json", stale.model_dump(mode="json"))
            except OSError:  # the new launch clears the marker root as it starts: write again (as a live rank would)
                pass
            done.wait(0.005)

    shutil.rmtree(job.ckpt_dir)  # the second launch trains again, from scratch
    writer = threading.Thread(target=stale_rank, daemon=True)
    writer.start()
    try:
        second = launch(job, tmp_path / "launch")
    finally:
        done.set()
        writer.join()
    assert second.losses == first.losses and second.resumed_from is None
    assert len(list(Path(job.marker_dir).glob("launch-*"))) == 2  # this launch's folder and the stale one's
