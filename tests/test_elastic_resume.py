"""Elastic resume (tasks/train/checkpointing/elastic.py): a run checkpointed at one layout resumes at another.

Each layout test stops a run on real CPU ranks after step 3 (checkpoint every 2 steps: step 2 is the newest),
resumes it at another layout (dp, tp, pp and the ZeRO stage change; the global batch stays 8 sequences), and
compares the resumed run with `reference_run`: the plain single-process loop over the same global batches,
which does not depend on any layout (tests/test_train_parallel.py holds every layout to it at 1e-5). So the
tolerances are those of an uninterrupted run at any layout: a resume that lost Adam's moments, its step count,
the LR schedule or the data position would be off by far more (see `test_losing_adam_state_is_detected`).
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import torch
from safetensors.torch import save_file

from specs.pretrain import PretrainJob
from tasks.core import faults
from tasks.core.files import write_json_atomic
from tasks.train.checkpointing.checkpoint import MANIFEST, CheckpointStore, choose_resume
from tasks.train.checkpointing import elastic
from tasks.train.checkpointing.elastic import SliceReader
from tasks.train.checkpointing.resume_rules import FOLDER, STATE, unsupported_reason
from tasks.train.launch import launch
from tasks.train.inputs.synthetic import make_job
from tests.helpers.train import reference_run
from tasks.train.checkpointing.weights import load_weights
from tests.helpers.parallel import SEED, job_spec as parallel_job


def job_spec(parallel: dict, **train) -> PretrainJob:
    """The engine tests' job (tests/helpers/parallel.py) checkpointing every 2 steps."""
    return parallel_job(parallel, **{"checkpoint_every": 2, **train})


def fail_after_step_3(tmp_path: Path, mix_dir: Path, spec: PretrainJob, monkeypatch) -> None:
    """Every rank fails (an injected EIO) right after step 3; a one-rank run is in this process, so no SIGKILL
    (and the hit count starts from zero, whatever earlier in-process runs of this session counted)."""
    faults.reset_counts()
    monkeypatch.setenv("FORGELINE_FAULT", "pretrain.step_done=3:EIO")
    with pytest.raises((OSError, RuntimeError), match="Input/output error"):
        launch(make_job(tmp_path, mix_dir, spec, SEED), tmp_path / "launch")
    monkeypatch.delenv("FORGELINE_FAULT")
    assert (tmp_path / "checkpoints" / "step000002" / FOLDER / STATE).exists() == spec.train.checkpoint_elastic


def resume_and_compare(tmp_path: Path, mix_dir: Path, spec: PretrainJob) -> None:
    result = launch(make_job(tmp_path, mix_dir, spec, SEED), tmp_path / "launch")
    assert result.resumed_from == "step000002" and result.start_step == 2
    ref_losses, ref_state = reference_run(spec, mix_dir, SEED)
    np.testing.assert_allclose(result.losses, ref_losses[2:], rtol=0, atol=1e-5)
    rows = [json.loads(x) for x in (tmp_path / "out" / "metrics.jsonl").read_text().splitlines()]
    np.testing.assert_allclose([r["loss"] for r in rows if r["kind"] == "train"], ref_losses, rtol=0, atol=2e-6)
    state = load_weights(tmp_path / "out")
    assert set(state) == set(ref_state)
    for k, v in ref_state.items():
        torch.testing.assert_close(state[k], v, rtol=0, atol=2e-4, msg=k)


def test_dp2_zero2_resumes_at_dp1_zero0(tmp_path, mix_dir, monkeypatch):
    """dp 2 → 1: grad_accum doubles so the global batch stays 8; a resume that halves it is refused first."""
    fail_after_step_3(tmp_path, mix_dir, job_spec({"dp": 2, "zero_stage": 2}), monkeypatch)
    with pytest.raises(ValueError, match=r"global batch: checkpoint has 8 .* this run has 4 .*grad_accum = 2"):
        launch(make_job(tmp_path, mix_dir, job_spec({}), SEED), tmp_path / "launch")
    resume_and_compare(tmp_path, mix_dir, job_spec({}, grad_accum=2))


def test_tp2_zero1_resumes_at_tp1_zero3(tmp_path, mix_dir, monkeypatch):
    """tp 2 → 1: the TP slices of the fp32 masters and Adam's moments are joined; ZeRO-3 partitions them anew."""
    fail_after_step_3(tmp_path, mix_dir, job_spec({"tp": 2, "zero_stage": 1}, grad_accum=2), monkeypatch)
    resume_and_compare(tmp_path, mix_dir, job_spec({"zero_stage": 3}, grad_accum=2))


def test_pp2_resumes_at_pp1_zero1(tmp_path, mix_dir, monkeypatch):
    """pp 2 → 1: both stages' layers (the tied head's copy left out) make one model."""
    fail_after_step_3(tmp_path, mix_dir, job_spec({"pp": 2}, grad_accum=2), monkeypatch)
    resume_and_compare(tmp_path, mix_dir, job_spec({"zero_stage": 1}, grad_accum=2))


def test_tp1_zero3_resumes_at_tp2_zero1(tmp_path, mix_dir, monkeypatch):
    """Back the other way: one rank at ZeRO-3 (masters gathered from its partitions) to tp 2, each TP rank cutting
    its slices out of the whole tensors, with the global batch cut differently (4 × 2 → 2 × 4 sequences). The
    one-rank run (in this process) writes files of ≤ 64 KiB, so the reader joins a state spread over many."""
    monkeypatch.setattr(elastic, "MAX_FILE_BYTES", 64 * 1024)
    fail_after_step_3(tmp_path, mix_dir, job_spec({"zero_stage": 3}, grad_accum=2), monkeypatch)
    assert len(list((tmp_path / "checkpoints" / "step000002" / FOLDER).glob("*.safetensors"))) > 10
    resume_and_compare(tmp_path, mix_dir, job_spec({"tp": 2, "zero_stage": 1}, micro_batch_size=2, grad_accum=4))


@pytest.mark.parametrize("before,after", [
    ({"tp": 2, "zero_stage": 1}, {"tp": 2, "zero_stage": 1, "sequence_parallel": True}),
    ({"tp": 2, "zero_stage": 1, "sequence_parallel": True}, {"dp": 2, "zero_stage": 2}),
], ids=["tp2-sp-on-same-layout", "tp2-sp-to-dp2"])
def test_sequence_parallelism_switched_at_resume(tmp_path, mix_dir, monkeypatch, before, after):
    """`parallel.sequence_parallel` changes no parameter, so it may be switched at a resume: on at the same
    layout (DeepSpeed's own files load), and off together with a layout change (the layout-free state). Either
    way the resumed run continues the plain reference."""
    fail_after_step_3(tmp_path, mix_dir, job_spec(before, grad_accum=2), monkeypatch)
    resume_and_compare(tmp_path, mix_dir, job_spec(after, grad_accum=2 if after.get("dp", 1) == 1 else 1))


def run_files(base: Path) -> tuple[dict[str, bytes], dict[str, dict]]:
    """The final outputs' bytes and every kept checkpoint's manifest digests."""
    finals = {n: (base / "out" / n).read_bytes() for n in ("model.safetensors", "metrics.jsonl")}
    return finals, {t.name: json.loads((t / MANIFEST).read_text())["files"]
                    for t in sorted((base / "checkpoints").glob("step*"))}


def test_checkpoint_elastic_off_resumes_only_at_its_own_layout(tmp_path, mix_dir, monkeypatch):
    """`checkpoint_elastic: false`: no layout-free files; the same layout resumes byte-identical to an
    uninterrupted run; another layout is refused naming the knob. And with it on (ZeRO-0: its fp32 masters and
    Adam moments are the live parameters and optimizer state, which an async save shares with DeepSpeed's
    snapshot), async and sync saves write the same layout-free bytes."""
    on = job_spec({}, keep_checkpoints=3)
    launch(make_job(tmp_path / "sync", mix_dir, on, SEED), tmp_path / "sync" / "launch")
    asynchronous = job_spec({}, keep_checkpoints=3, checkpoint_async=True)
    launch(make_job(tmp_path / "async", mix_dir, asynchronous, SEED), tmp_path / "async" / "launch")
    finals, digests = run_files(tmp_path / "sync")
    assert run_files(tmp_path / "async") == (finals, digests)
    elastic_files = {t: sorted(f for f in files if f.startswith(f"{FOLDER}/")) for t, files in digests.items()}
    assert list(digests) == ["step000002", "step000004", "step000005"]
    assert all(f"{FOLDER}/{STATE}" in files and len(files) >= 2 for files in elastic_files.values())

    off = job_spec({}, keep_checkpoints=3, checkpoint_elastic=False, checkpoint_async=True)
    fail_after_step_3(tmp_path / "off", mix_dir, off, monkeypatch)
    with pytest.raises(ValueError, match=r"without the layout-free state .* saved with "
                                         r"`pretrain\.checkpoint_elastic: false`.*checkpoint_elastic: true"):
        launch(make_job(tmp_path / "off", mix_dir, job_spec({"zero_stage": 1}, checkpoint_elastic=False), SEED),
               tmp_path / "off" / "launch")
    result = launch(make_job(tmp_path / "off", mix_dir, off, SEED), tmp_path / "off" / "launch")
    assert result.resumed_from == "step000002"
    off_finals, off_digests = run_files(tmp_path / "off")
    assert off_finals == finals
    assert not list((tmp_path / "off" / "checkpoints").rglob(FOLDER))
    without = {t: {f: d for f, d in files.items() if f not in elastic_files[t]} for t, files in digests.items()}
    assert off_digests["step000002"] == without["step000002"]  # saved before the failure: the same bytes
    # Saved after the resume: the same files (DeepSpeed's model-states file of a resumed run differs in bytes,
    # not tensors: the README's known limit).
    assert {t: sorted(files) for t, files in off_digests.items()} == {t: sorted(f) for t, f in without.items()}


def test_losing_adam_state_is_detected(mix_dir):
    """The yardstick can tell: a resume at step 2 that kept the weights but lost Adam's moments and step count
    is off by ≫ the 1e-5 tolerance above at the very next step."""
    spec = job_spec({})
    ref, _ = reference_run(spec, mix_dir, SEED)
    lost, _ = reference_run(spec, mix_dir, SEED, drop_adam_at=2)
    assert lost[:3] == ref[:3]  # step 3's loss is computed before its update: same weights
    assert abs(lost[3] - ref[3]) > 1e-3


# ------------------------------------------------------------------------------------ slices and resume choice
def write_slices(folder: Path, full: torch.Tensor, dim: int | None, tp: int) -> None:
    """`full` as the TP ranks of a tp-way layout would save it (rank 0 alone when replicated)."""
    parts = list(torch.chunk(full, tp, dim=dim)) if dim is not None else [full]
    for r, part in enumerate(parts):
        meta = {"tp": tp, "tp_rank": r, "split": {} if dim is None else {"w": dim}}
        save_file({"w": part.contiguous(), "w#exp_avg": (part * 2).contiguous(),
                   "adam.step": torch.tensor([2.0], dtype=torch.float64)}, str(folder / f"pp000-tp{r:03d}-dp000"
                                                                                           ".safetensors"),
                  metadata={"format": "pt", "forgeline": json.dumps(meta)})


def test_slice_reader_reslices_any_tp(tmp_path):
    """Old TP slices (rows, columns, or one replicated copy) read as every new TP rank's slice, against torch.chunk
    of the whole tensor."""
    full = torch.arange(8 * 12, dtype=torch.float32).reshape(8, 12)
    for old_tp, dim in [(2, 0), (2, 1), (4, 0), (1, 1), (2, None)]:
        folder = tmp_path / f"tp{old_tp}-dim{dim}"
        folder.mkdir()
        write_slices(folder, full, dim, old_tp)
        reader = SliceReader(folder)
        assert reader.steps == {2.0}
        for new_tp in (1, 2, 4):
            new_dim = None if new_tp == 1 else (0 if dim is None else dim)
            for r in range(new_tp):
                want = full if new_dim is None else torch.chunk(full, new_tp, dim=new_dim)[r]
                assert torch.equal(reader.read("w", new_dim, r, new_tp), want), (old_tp, dim, new_tp, r)
                assert torch.equal(reader.read("w#exp_avg", new_dim, r, new_tp), want * 2)
        if dim is not None and old_tp > 1:
            with pytest.raises(ValueError, match="split along dim"):
                reader.read("w", 1 - dim, 0, 2)
    with pytest.raises(KeyError, match="no `v`"):
        reader.read("v", None, 0, 1)


def identity(dp: int = 2, tp: int = 1, micro: int = 4, accum: int = 1, zero: int = 2, precision: str = "fp32"):
    return {"model": {"d_model": 64}, "parallel": {"dp": dp, "tp": tp, "pp": 1, "zero_stage": zero},
            "train": {"precision": precision, "micro_batch_size": micro, "grad_accum": accum},
            "seq_len": 32, "vocab_size": 256, "data": "abc", "seed": 3, "init": "random"}


def saved_store(tmp_path: Path, elastic: bool = True, spec: dict | None = None, ident: dict | None = None
                ) -> CheckpointStore:
    store = CheckpointStore(tmp_path / "ckpt")
    tag = store.folder / "step000002"
    tag.mkdir(parents=True)
    if elastic:
        write_json_atomic(tag / FOLDER / STATE, {"layout": {"dp": 2, "tp": 1, "pp": 1, "zero_stage": 2}})
    store.write_manifest("step000002", 2, ident or identity(), spec or {})
    return store


def test_resume_choice_across_layouts(tmp_path):
    store = saved_store(tmp_path)
    for ok in (identity(dp=1, accum=2, zero=0), identity(dp=1, micro=8), identity(dp=1, tp=2, accum=2, zero=3),
               identity(dp=4, micro=2)):
        assert choose_resume(store, ok, 5, "pretrain")[3] is None, ok
    tag, step, _rows, error = choose_resume(store, identity(dp=1), 5, "pretrain")
    assert tag is None and step == 0
    assert "global batch: checkpoint has 8 sequences per step (micro_batch_size 4 × grad_accum 1 × dp 2), this " \
           "run has 4 (4 × 1 × 1)" in error and "train.grad_accum = 2" in error
    assert "global batch" in choose_resume(store, identity(dp=2, accum=2), 5, "pretrain")[3]
    assert "train.precision" in choose_resume(store, identity(precision="bf16"), 5, "pretrain")[3]


def test_older_checkpoint_resumes_only_at_its_own_layout(tmp_path):
    """A checkpoint without the layout-free state (written before it existed) still resumes at its layout."""
    store = saved_store(tmp_path, elastic=False)
    assert choose_resume(store, identity(), 5, "pretrain")[3] is None
    error = choose_resume(store, identity(dp=1, accum=2), 5, "pretrain")[3]
    assert "without the layout-free state" in error and "Delete" in error
    assert "predates that format" in error and "`pretrain.checkpoint_elastic: true`" in error
    off = saved_store(tmp_path / "off", elastic=False, spec={"train": {"checkpoint_elastic": False}})
    assert choose_resume(off, identity(), 5, "sft")[3] is None
    error = choose_resume(off, identity(dp=1, accum=2), 5, "sft")[3]
    assert "saved with `sft.checkpoint_elastic: false`" in error and "predates" not in error


def test_fp16_without_zero_writes_no_layout_free_state_and_resumes_only_at_its_layout(tmp_path):
    """fp16 at ZeRO-0 keeps its fp32 masters where DeepSpeed's safe_get/set API cannot reach them (they would be
    saved fp16-rounded, with zero moments): no layout-free copy is written, and another layout is refused
    naming why; ZeRO ≥ 1 in fp16, and every other precision at ZeRO-0, keep the copy."""
    assert unsupported_reason("fp16", 0) is not None
    assert all(unsupported_reason(p, z) is None for p, z in [("fp16", 1), ("fp16", 3), ("bf16", 0),
                                                                     ("fp32", 0)])
    fp16 = {"precision": "fp16", "zero": 0}
    store = saved_store(tmp_path, elastic=False, ident=identity(**fp16))
    assert choose_resume(store, identity(**fp16), 5, "pretrain")[3] is None
    error = choose_resume(store, identity(dp=1, accum=2, **fp16), 5, "pretrain")[3]
    assert "in fp16 without ZeRO" in error and "zero_stage ≥ 1" in error and "predates" not in error
