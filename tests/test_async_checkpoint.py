"""Asynchronous checkpoints (`train.checkpoint_async`): host snapshots that serialize to the original's bytes, a
writer that runs while training goes on (one save in flight at most), and on real 2-rank CPU runs (gloo, ZeRO-1):
async and sync runs end byte-identical with byte-identical checkpoint files; a run SIGKILLed while a write is in
flight leaves that tag unpublished and the rerun ends exactly where an uninterrupted run ends; verify catches a
damaged file whichever rank hashed it."""

from __future__ import annotations

import io
import json
import threading
import time
from collections import OrderedDict
from pathlib import Path

import pytest
import torch

from specs.pretrain import PretrainJob
from tasks.core.files import list_files
from tasks.train.checkpointing.checkpoint import LATEST, MANIFEST, CheckpointStore, hash_share
from tasks.train.checkpointing.manager import CheckpointManager
from tasks.train.launch import launch
from tasks.train.checkpointing.snapshot import HostBuffers, write_state
from tasks.train.inputs.synthetic import make_job
from tasks.train.loop.trainer import Hooks, Trainer
from tests.helpers.trainer import FakeEngine, FakeObjective, job

SEED = 5


def saved(obj) -> bytes:
    buf = io.BytesIO()
    torch.save(obj, buf)
    return buf.getvalue()


def tricky_state() -> dict:
    """What DeepSpeed state dicts hold: views of one flat buffer, a tensor listed twice, distinct empty tensors,
    a leaf that requires grad, non-contiguous views, other dtypes, and plain values in nested containers."""
    flat = torch.randn(100)
    shared = torch.arange(12, dtype=torch.int64)
    master = torch.randn(7).requires_grad_(True)
    return {"module": OrderedDict(a=flat[:40], b=flat[40:].view(6, 10), t=torch.randn(4, 3).t()),
            "groups": [master, master, shared[2:5], shared],
            "empty": [torch.empty(0), torch.empty(0)], "half": torch.randn(5).to(torch.bfloat16),
            "lr": {"base_lrs": [0.1, 0.2], "shape": torch.Size([6, 10]), "name": "adamw", "none": None}}


def mutate(state: dict) -> None:
    with torch.no_grad():
        for t in (state["module"]["a"], state["module"]["b"], state["groups"][0], state["half"]):
            t.add_(1)
        state["groups"][3].mul_(3)
    state["lr"]["base_lrs"].append(0.3)


def test_snapshot_serializes_to_the_originals_bytes_after_training_changes_it():
    state = tricky_state()
    want = saved(state)
    buffers = HostBuffers()
    snap = buffers.snapshot("model.pt", state)
    mutate(state)  # training goes on: the snapshot must not see it
    assert saved(snap) == want
    # look-alike negative: cloning each tensor alone (storage sharing lost) writes other bytes
    naive = {**tricky_state(), "groups": [t.clone() for t in tricky_state()["groups"]]}
    assert saved(naive) != saved(tricky_state())
    # the next snapshot reuses the same host buffers and holds the new values
    ptrs = {s.data_ptr() for s in buffers.by_name["model.pt"]}
    again = buffers.snapshot("model.pt", state)
    assert {s.data_ptr() for s in buffers.by_name["model.pt"]} == ptrs
    assert saved(again) == saved(state) != want
    assert buffers.nbytes() == (100 + 7) * 4 + 12 * 8 + 12 * 4 + 5 * 2  # each storage once; empty ones take 0


def test_snapshots_of_one_save_share_copies_and_the_next_save_does_not():
    """Between `begin` and `end` (one save), a tensor two files hold (ZeRO-0's layout-free copy holds the weights
    and Adam moments DeepSpeed's files hold) is copied once; the next save copies it afresh, with its new values."""
    weight, moment = torch.randn(10), torch.randn(10)
    buffers = HostBuffers()
    buffers.begin()
    ds_file = buffers.snapshot("model.pt", {"w": weight, "m": moment})
    elastic = buffers.snapshot("elastic/w", {"w": weight[2:], "other": torch.ones(3)})
    buffers.end()
    assert elastic["w"].untyped_storage().data_ptr() == ds_file["w"].untyped_storage().data_ptr()
    assert buffers.nbytes() == (10 + 10 + 3) * 4  # the shared weight counted once
    with torch.no_grad():
        weight.add_(1)
    assert torch.equal(elastic["w"], ds_file["w"][2:]) and not torch.equal(elastic["w"], weight[2:])
    buffers.begin()
    ds_file = buffers.snapshot("model.pt", {"w": weight, "m": moment})
    elastic = buffers.snapshot("elastic/w", {"w": weight[2:], "other": torch.ones(3)})
    buffers.end()
    assert torch.equal(elastic["w"], weight[2:]) and torch.equal(ds_file["w"], weight)  # the new values
    # outside a save nothing is shared: a look-alike snapshot copies its own
    alone = buffers.snapshot("elastic/w", {"w": weight[2:], "other": torch.ones(3)})
    assert alone["w"].untyped_storage().data_ptr() != ds_file["w"].untyped_storage().data_ptr()


def test_write_state_hashes_what_it_writes(tmp_path):
    state = tricky_state()
    digest = write_state(tmp_path / "f.pt", state)
    data = (tmp_path / "f.pt").read_bytes()
    import hashlib

    assert digest == {"sha256": hashlib.sha256(data).hexdigest(), "bytes": len(data)}
    assert data == saved(state)  # a file object, not a path: no temp-file name inside the zip
    assert [p.name for p in tmp_path.iterdir()] == ["f.pt"]  # no temp file left
    torch.testing.assert_close(torch.load(tmp_path / "f.pt", weights_only=True)["module"]["b"], state["module"]["b"])


def test_training_goes_on_while_the_writer_runs_and_one_save_is_in_flight(tmp_path):
    """The writer of each save (at step k) waits until the main thread has finished step k, which it does only
    after the save returned: with a synchronous save this could never happen (the writer would time out). Meanwhile no second writer starts, and
    each tag's writer starts only once the previous tag is published."""
    events: list[tuple[str, str]] = []
    steps_done = [0]
    active = [0]
    progressed = threading.Condition()

    def point(name: str) -> None:
        if name == "fake.step_done":
            with progressed:
                steps_done[0] += 1
                progressed.notify_all()
        elif name == "fake.checkpoint_async_write":
            active[0] += 1
            events.append((name, threading.current_thread().name))
            published = sorted(p.parent.name for p in (tmp_path / "ckpt").glob(f"step*/{MANIFEST}"))
            events.append(("published", ",".join(published)))
            goal = max(int(threading.current_thread().name[-6:]), 1)  # the step this save was taken at
            with progressed:
                assert progressed.wait_for(lambda: steps_done[0] >= goal, timeout=60), "training did not go on"
            time.sleep(0.05)
            assert active[0] == 1
            active[0] -= 1

    j = job(tmp_path)
    j = j.model_copy(update={"spec": j.spec.model_copy(update={"train": j.spec.train.model_copy(
        update={"checkpoint_async": True})})})
    engine, objective = FakeEngine(1), FakeObjective(1)
    trainer = Trainer(objective, objective.prepare(0), engine, CheckpointManager(Path(j.ckpt_dir)), j,
                      Hooks(point=point))
    result = trainer.fit(None, 0, [], {})
    writers = [who for name, who in events if name == "fake.checkpoint_async_write"]
    assert writers == [f"checkpoint-writer-step{s:06d}" for s in (0, 2, 4, 6)]
    assert [what for name, what in events if name == "published"] == [
        "", "step000000", "step000000,step000002", "step000000,step000002,step000004"]
    assert (tmp_path / "ckpt" / LATEST).read_text() == "step000006"  # the last one published before fit returned
    assert CheckpointStore(tmp_path / "ckpt").verify("step000006")[1] == ""
    assert result.telemetry["checkpoint_saves"] == 3  # 2, 4, 6: the step-0 save comes before the loop


# ----------------------------------------------------------------------------------- real 2-rank runs
STEPS = 5


def spec(asynchronous: bool) -> PretrainJob:
    """dp 2, ZeRO-1 (model states on rank 0, optimizer partitions per rank); checkpoints at 0 (the rollback
    target), 2, 4 and 5."""
    return PretrainJob.model_validate({
        "model": {"flavor": "tiny", "n_layers": 2, "d_model": 32, "n_heads": 4, "n_kv_heads": 2},
        "parallel": {"dp": 2, "zero_stage": 1},
        "train": {"steps": STEPS, "micro_batch_size": 4, "log_every": 1, "eval_every": STEPS, "eval_batches": 2,
                  "checkpoint_every": 2, "keep_checkpoints": 2, "checkpoint_async": asynchronous,
                  "optim": {"warmup_steps": 2}, "telemetry": {"wandb": "disabled", "nvml": False}},
    })


def run(base: Path, mix: Path, asynchronous: bool = True):
    return launch(make_job(base, mix, spec(asynchronous), SEED), base / "launch")


def finals(base: Path) -> dict[str, bytes]:
    return {n: (base / "out" / n).read_bytes() for n in ("model.safetensors", "metrics.jsonl")}


def file_digests(base: Path) -> dict[str, dict]:
    ckpt = base / "checkpoints"
    return {tag.name: json.loads((tag / MANIFEST).read_text())["files"] for tag in sorted(ckpt.glob("step*"))}


@pytest.fixture(scope="module")
def async_run(mix_dir, tmp_path_factory):
    base = tmp_path_factory.mktemp("async")
    result = run(base, mix_dir)
    return base, result


def test_async_and_sync_runs_end_byte_identical(async_run, mix_dir, tmp_path):
    base, result = async_run
    assert result.telemetry["checkpoint_saves"] == 3  # steps 2, 4, 5 (the step-0 save comes before the loop)
    sync = tmp_path / "sync"
    run(sync, mix_dir, asynchronous=False)
    assert finals(sync) == finals(base)
    digests = file_digests(base)
    assert list(digests) == ["step000004", "step000005"] and digests == file_digests(sync)
    files = set(digests["step000005"])
    assert {"mp_rank_00_model_states.pt", "rng-rank00000.pt", "rng-rank00001.pt", "metrics.jsonl",
            "zero_pp_rank_0_mp_rank_00_optim_states.pt", "zero_pp_rank_1_mp_rank_00_optim_states.pt"} <= files
    assert set(digests["step000005"]) == {p.relative_to(base / "checkpoints" / "step000005").as_posix()
                                          for p in list_files(base / "checkpoints" / "step000005")} - {MANIFEST}


def test_sigkill_during_an_async_write_resumes_from_the_previous_checkpoint(async_run, mix_dir, tmp_path,
                                                                             monkeypatch):
    """Both ranks are SIGKILLed in their writers during the third save (step 4), after the first file of it."""
    base, _ = async_run
    killed = tmp_path / "killed"
    monkeypatch.setenv("FORGELINE_FAULT", "pretrain.checkpoint_async_write=3")
    with pytest.raises(RuntimeError, match="no result"):
        run(killed, mix_dir)
    monkeypatch.delenv("FORGELINE_FAULT")
    ckpt = killed / "checkpoints"
    store = CheckpointStore(ckpt)
    assert (ckpt / LATEST).read_text() == "step000002"
    assert [t for _, t in store.tags()] == ["step000004", "step000002", "step000000"]
    assert list_files(ckpt / "step000004") and not (ckpt / "step000004" / MANIFEST).exists()  # torn mid-write
    assert store.verify("step000004") == (None, "no manifest (the save did not finish)")
    tag, manifest, warnings = store.find_resumable()
    assert tag == "step000002" and manifest["step"] == 2
    assert warnings == ["checkpoint step000004 skipped: no manifest (the save did not finish)"]
    result = run(killed, mix_dir)
    assert result.resumed_from == "step000002" and result.start_step == 2
    assert finals(killed) == finals(base)
    assert file_digests(killed) == file_digests(base)


@pytest.mark.parametrize("victim, damage", [
    ("zero_pp_rank_1_mp_rank_00_optim_states.pt", "flip"),   # written and hashed by rank 1's writer
    ("mp_rank_00_model_states.pt", "truncate"),              # rank 0's writer
    ("metrics.jsonl", "flip"),                               # rank 0's small file, hashed into the manifest
    ("rng-rank00001.pt", "delete"),
])
def test_verify_detects_a_damaged_file(async_run, tmp_path, victim, damage):
    import shutil

    base, _ = async_run
    ckpt = tmp_path / "ckpt"
    shutil.copytree(base / "checkpoints", ckpt)
    store = CheckpointStore(ckpt)
    assert store.verify("step000005")[1] == "" and store.verify("step000004")[1] == ""
    path = ckpt / "step000005" / victim
    data = bytearray(path.read_bytes())
    if damage == "flip":
        data[len(data) // 2] ^= 0x01
        path.write_bytes(bytes(data))
    elif damage == "truncate":
        path.write_bytes(bytes(data[:-1]))
    else:
        path.unlink()
    why = f"{victim} is missing" if damage == "delete" else f"{victim} does not match its checksum"
    assert store.verify("step000005") == (None, why)
    assert store.verify("step000004")[1] == ""  # the other tag is untouched
    tag, _, warnings = store.find_resumable()
    assert tag == "step000004" and warnings == [f"checkpoint step000005 skipped: {why}"]


def verify_together(rank: int, world: int, ckpt: str) -> dict:
    """One rank of a joint resume search (the trainer's `verifying_ranks`); records the files it hashed."""
    import tasks.train.checkpointing.checkpoint as checkpoint
    from tasks.train.loop.trainer import verifying_ranks

    hashed, plain = [], checkpoint.sha256_file
    checkpoint.sha256_file = lambda path: (hashed.append(Path(path).relative_to(ckpt).as_posix()), plain(path))[1]
    tag, manifest, warnings = CheckpointStore(Path(ckpt)).find_resumable(verifying_ranks(rank, world))
    return {"tag": tag, "step": manifest["step"], "warnings": warnings, "hashed": hashed}


def test_ranks_share_the_resume_hashing_and_agree(async_run, tmp_path):
    """Three ranks re-hash disjoint shares of each tag (together every file once) and all reach the single
    process's verdict: a flipped byte in a file another rank hashed still skips the tag, for every rank."""
    import shutil

    from tests.helpers.train import spawn_gloo

    base, _ = async_run
    ckpt = tmp_path / "ckpt"
    shutil.copytree(base / "checkpoints", ckpt)
    files = sorted(json.loads((ckpt / "step000005" / MANIFEST).read_text())["files"].items())
    victims = [hash_share(files, r, 3)[0][0] for r in (1, 2)]  # damage only what ranks 1 and 2 hash
    for victim in victims:
        path = ckpt / "step000005" / victim
        data = bytearray(path.read_bytes())
        data[len(data) // 2] ^= 0x01
        path.write_bytes(bytes(data))
    alone = CheckpointStore(ckpt).find_resumable()
    ranks = spawn_gloo(verify_together, 3, (str(ckpt),), tmp_path / "ranks")
    why = f"checkpoint step000005 skipped: {min(victims)} does not match its checksum"
    assert alone[0] == "step000004" and alone[2] == [why]
    for r in ranks:
        assert (r["tag"], r["step"], r["warnings"]) == ("step000004", 4, [why])
    for tag in ("step000005", "step000004"):
        files = set(json.loads((ckpt / tag / MANIFEST).read_text())["files"])
        shares = [{rel.split("/", 1)[1] for rel in r["hashed"] if rel.startswith(tag + "/")} for r in ranks]
        assert sum(len(s) for s in shares) == len(files) and set().union(*shares) == files  # each file once
        assert all(shares), shares  # every rank took part
    assert [r for r, share in enumerate(ranks) if f"step000005/{min(victims)}" in share["hashed"]] in ([1], [2])
