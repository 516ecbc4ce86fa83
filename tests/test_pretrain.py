"""Stage `pretrain` end to end on a small real mix output (tasks.mix.run on synthetic clean shards): outputs,
byte-identical reruns, kill-and-resume, a corrupt newest checkpoint, an incompatible spec, launcher commands."""

from __future__ import annotations

import json
import logging
import shutil
from pathlib import Path

import pytest

from tasks.train.launch import build_command
from tasks.train.modeling.model import ModelConfig, Transformer
from tasks.train.checkpointing.weights import load_weights
from tests.helpers.killed import run_killed
from tests.helpers.pretrain import SEED, SPEC, fresh_root, run_stage

OUTPUTS = ("report.json", "metrics.jsonl", "config.json", "ds_config.json")


def outputs(root: Path) -> dict[str, bytes]:
    return {name: (root / "data" / "pretrain" / name).read_bytes() for name in OUTPUTS}


@pytest.fixture(scope="module")
def reference(pretrained_run):
    """An uninterrupted run: its root (with checkpoints step000004 and step000006), outputs and result (the
    session's run, tests/conftest.py `pretrained_run`: test_sft starts from the same one)."""
    root, result = pretrained_run
    return root, outputs(root), result


def test_outputs_and_byte_identical_rerun(reference, mixed, tmp_path):
    root, ref_out, result = reference
    report = json.loads(ref_out["report.json"])
    assert result.counts["steps"] == 6 and result.counts["tokens"] == 6 * 4 * 32
    assert result.counts["final_train_loss"] == report["final_train_loss"] < report["first_train_loss"]
    assert set(result.counts["val_loss_by_source"]) == {"code", "prose"} and result.counts["val_loss"] > 0
    assert [r["source"] for r in result.table] == ["code", "prose"]
    assert "tokens/s" in result.summary and "| prose |" in result.summary
    rows = [json.loads(line) for line in ref_out["metrics.jsonl"].decode().splitlines()]
    assert [r["step"] for r in rows if r["kind"] == "train"] == [1, 2, 3, 4, 5, 6]
    assert [r["step"] for r in rows if r["kind"] == "eval"] == [3, 6]
    # model.safetensors: the plain model's fp32 weights, loadable without unpickling code
    config = json.loads(ref_out["config.json"])
    state = load_weights(root / "data" / "pretrain")
    model = Transformer(ModelConfig.from_dict(config["model"]), SEED)
    model.load_state_dict(state, strict=True)
    assert config["vocab_size"] == json.loads((mixed / "data" / "mix" / "packing.json").read_text())["vocab_size"]
    assert sorted(p.name for p in (root / "checkpoints" / "pretrain").iterdir()) == [
        "ds_config.json", "latest", "step000004", "step000006"]
    # an identical run elsewhere writes the same bytes
    other = fresh_root(mixed, tmp_path / "other")
    run_stage(other)
    assert outputs(other) == ref_out
    # rerun in place: resumes at the final checkpoint, trains nothing, writes the same bytes again
    again = run_stage(other)
    assert outputs(other) == ref_out and "resumed from checkpoint step000006" in again.summary


def test_killed_run_resumes_to_the_same_end(reference, mixed, tmp_path):
    _, ref_out, _ = reference
    root = fresh_root(mixed, tmp_path / "p")
    code, out = run_killed(run_stage, root, SPEC, fault="pretrain.step_done=3", timeout=300)
    assert code == -9, out[-2000:]  # SIGKILLed after step 3: checkpoint 2 is the newest
    assert sorted(p.name for p in (root / "checkpoints" / "pretrain").glob("step*")) == ["step000000", "step000002"]
    result = run_stage(root)
    assert "resumed from checkpoint step000002" in result.summary
    assert outputs(root) == ref_out  # same final loss, same metrics.jsonl (whole, not only the tail), report


def test_corrupt_newest_checkpoint_falls_back(reference, tmp_path, caplog):
    ref_root, ref_out, _ = reference
    root = tmp_path / "p"
    shutil.copytree(ref_root / "data" / "mix", root / "data" / "mix")
    shutil.copytree(ref_root / "checkpoints", root / "checkpoints")
    victim = root / "checkpoints" / "pretrain" / "step000006" / "mp_rank_00_model_states.pt"
    data = bytearray(victim.read_bytes())
    data[len(data) // 2] ^= 0xFF
    victim.write_bytes(bytes(data))
    with caplog.at_level(logging.WARNING, logger="forgeline.pretrain"):
        result = run_stage(root)
    assert "checkpoint step000006 skipped: mp_rank_00_model_states.pt does not match its checksum" in caplog.text
    assert "resumed from checkpoint step000004" in result.summary
    assert outputs(root) == ref_out


def test_incompatible_spec_is_refused(reference, tmp_path):
    ref_root, _, _ = reference
    root = tmp_path / "p"
    shutil.copytree(ref_root / "data" / "mix", root / "data" / "mix")
    shutil.copytree(ref_root / "checkpoints", root / "checkpoints")
    wider = {**SPEC, "model": {**SPEC["model"], "d_model": 64}}
    with pytest.raises(ValueError, match=r"model\.d_model: checkpoint has 32, this run has 64") as err:
        run_stage(root, wider)
    assert "ffn_hidden" in str(err.value) and "Delete" in str(err.value)
    # a change that keeps shapes and meaning (more steps) resumes
    longer = {**SPEC, "train": {**SPEC["train"], "steps": 7}}
    result = run_stage(root, longer)
    assert result.counts["steps"] == 7 and "resumed from checkpoint step000006" in result.summary


def test_launcher_commands(tmp_path):
    job = tmp_path / "job.json"
    ds = build_command("deepspeed", 8, job, 29500, python="/venv/bin/python")
    assert ds == ["deepspeed", "--num_gpus", "8", "--master_port", "29500", "--no_local_rank", "--module",
                  "tasks.train.worker", "--job", str(job)]
    multi = build_command("deepspeed", 16, job, 29500, hostfile="/etc/hosts.ds", python="/venv/bin/python")
    assert multi[:3] == ["deepspeed", "--hostfile", "/etc/hosts.ds"] and "--num_gpus" not in multi
    tr = build_command("torchrun", 4, job, 29501, python="/venv/bin/python")
    assert tr == ["/venv/bin/python", "-m", "torch.distributed.run", "--nproc_per_node", "4", "--master_port",
                  "29501", "-m", "tasks.train.worker", "--job", str(job)]
    with pytest.raises(ValueError):
        build_command("spawn", 2, job, 1)


@pytest.mark.slow
@pytest.mark.parametrize("launcher", ["torchrun", "deepspeed"])
def test_external_launcher_on_cpu(mixed, tmp_path, launcher):
    """The external-launcher path for real: the launcher starts 2 CPU ranks running tasks.train.worker."""
    root = fresh_root(mixed, tmp_path / "p")
    spec = {**SPEC, "parallel": {"dp": 2, "launcher": launcher}}
    result = run_stage(root, spec)
    assert result.counts["steps"] == 6
    markers = sorted((root / "runs" / "pretrain-launch" / "markers").glob("launch-*/rank-*.json"))
    assert [json.loads(m.read_text())["ok"] for m in markers] == [True, True]


def test_raising_steps_on_resume_keeps_the_taken_schedule(mixed, tmp_path):
    """6 steps, the last checkpoint lost, then the same run with steps: 10 resumes at 4: steps 1–4 keep their
    learning rates, and from step 5 the rate decays by a cosine from the rate step 5 had to min_lr at 10 (no jump
    to a recomputed cosine) — in the metrics and in the optimizer DeepSpeed checkpoints."""
    from specs.train import OptimSpec
    from tasks.train.parallel.deepspeed_adapter import load_weights_only
    from tasks.train.parallel.dsconfig import lr_at

    root = fresh_root(mixed, tmp_path)
    run_stage(root)
    first = [r for r in read_rows(root) if r["kind"] == "train"]
    shutil.rmtree(root / "checkpoints" / "pretrain" / "step000006")
    result = run_stage(root, {**SPEC, "train": {**SPEC["train"], "steps": 10}})
    assert result.counts["steps"] == 10
    rows = [r for r in read_rows(root) if r["kind"] == "train"]
    assert [r["lr"] for r in rows[:4]] == [r["lr"] for r in first[:4]]
    optim, segments = OptimSpec.model_validate(SPEC["train"]["optim"]), [(0, 6), (4, 10)]
    continued = [lr_at(s, optim, 10, segments) for s in range(4, 10)]
    assert [r["lr"] for r in rows[4:]] == pytest.approx(continued, abs=1e-6)  # rows round to 6 places
    assert continued[0] == pytest.approx(lr_at(4, optim, 6)) and continued[-1] < continued[0]
    ckpt = root / "checkpoints" / "pretrain" / "step000008"
    group = load_weights_only(str(ckpt / "mp_rank_00_model_states.pt"))["optimizer"]["param_groups"][0]
    assert group["lr"] == pytest.approx(lr_at(8, optim, 10, segments), rel=1e-6)  # the rate step 9 will use
    assert abs(group["lr"] - lr_at(8, optim, 10)) > 0.05 * group["lr"]  # a recomputed cosine would differ
    assert json.loads((ckpt / "schedule.json").read_text()) == [[0, 6], [4, 10]]


def read_rows(root):
    return [json.loads(x) for x in (root / "data" / "pretrain" / "metrics.jsonl").read_text().splitlines()]
