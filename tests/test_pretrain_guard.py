"""The stability guard, telemetry and sanity mode inside the real pretrain stage (DeepSpeed, one CPU rank):
an injected NaN is skipped, a spike down-weighted, repeated spikes roll back past the bad data (and a run killed
after the rollback resumes to the same end), the retry cap aborts, and the overfit check passes and fails."""

from __future__ import annotations

import json
import math

import pytest
import torch

from tasks.train.parallel.dsconfig import lr_at
from specs.train import OptimSpec
from tasks.train.checkpointing.weights import load_weights
from tests.helpers.killed import run_killed
from tests.helpers.pretrain import SPEC, fresh_root, run_stage

# Few steps from a fresh model: a wide noise floor, so only the injected faults count as spikes.
GUARD = {"min_history": 3, "window": 5, "max_spikes": 2, "z_threshold": 6.0, "min_rel_std": 0.5}


def spec_with(steps: int = 8, **stability) -> dict:
    train = {**SPEC["train"], "steps": steps, "eval_every": 100, "stability": {**GUARD, **stability}}
    return {**SPEC, "train": train}


def read(root, name):
    text = (root / "data" / "pretrain" / name).read_text()
    return [json.loads(line) for line in text.splitlines() if line.strip()]


def test_injected_nan_is_skipped_and_recorded(mixed, tmp_path, monkeypatch):
    monkeypatch.setenv("FORGELINE_INJECT_LOSS", "5:nan")
    root = fresh_root(mixed, tmp_path)
    result = run_stage(root, spec_with())
    incidents = read(root, "incidents.jsonl")
    assert [(i["step"], i["action"]) for i in incidents] == [(5, "skip")]
    assert incidents[0]["loss"] == "nan" and incidents[0]["doc_ids"]  # strict JSON, names the documents
    rows = {r["step"]: r for r in read(root, "metrics.jsonl") if r["kind"] == "train"}
    assert rows[5]["loss"] is None and rows[5]["grad_norm"] is None and math.isfinite(rows[8]["loss"])
    state = load_weights(root / "data" / "pretrain")
    assert all(torch.isfinite(t).all() for t in state.values())
    report = json.loads((root / "data" / "pretrain" / "report.json").read_text())
    assert report["stability"]["actions"] == {"skip": 1} and result.counts["steps"] == 8


def test_spike_is_downweighted_when_configured(mixed, tmp_path, monkeypatch):
    monkeypatch.setenv("FORGELINE_INJECT_LOSS", "6:30")
    root = fresh_root(mixed, tmp_path)
    run_stage(root, spec_with(on_spike="downweight", downweight_factor=0.1))
    incidents = read(root, "incidents.jsonl")
    assert [(i["step"], i["action"]) for i in incidents] == [(6, "downweight")]
    assert "loss z=" in incidents[0]["reason"]


def rollback_spec() -> dict:
    return spec_with(steps=10, lr_cool_factor=0.5, lr_cool_steps=100)


def test_repeated_spikes_roll_back_past_the_bad_batches_and_resume_exactly(mixed, tmp_path, monkeypatch):
    monkeypatch.setenv("FORGELINE_INJECT_LOSS", "5:40,6:40")
    root = fresh_root(mixed, tmp_path / "a")
    run_stage(root, rollback_spec())
    incidents = read(root, "incidents.jsonl")
    assert [(i["step"], i["action"]) for i in incidents] == [(5, "skip"), (6, "rollback")]
    assert incidents[1]["to_step"] == 4 and incidents[1]["skip_batches"] == [5, 7]
    rows = [r for r in read(root, "metrics.jsonl") if r["kind"] == "train"]
    assert [r["step"] for r in rows] == list(range(1, 11))  # replayed steps written once
    optim = OptimSpec.model_validate(SPEC["train"]["optim"])
    assert rows[3]["lr"] == pytest.approx(lr_at(3, optim, 10), abs=1e-6)          # before: as scheduled
    assert rows[4]["lr"] == pytest.approx(0.5 * lr_at(4, optim, 10), abs=1e-6)    # after: cooled
    report = json.loads((root / "data" / "pretrain" / "report.json").read_text())
    assert report["stability"]["rollbacks"] == 1 and report["stability"]["skipped_batches"] == [[5, 7]]

    # Killed two steps after the rollback (the checkpoint of step 6 holds the pre-rollback guard state only
    # through the state file written at the rollback): the resumed run ends byte-identical.
    other = fresh_root(mixed, tmp_path / "b")
    code, out = run_killed(run_stage, other, rollback_spec(), fault="pretrain.step_done=7", timeout=300)
    assert code == -9, out[-2000:]
    run_stage(other, rollback_spec())
    for name in ("metrics.jsonl", "incidents.jsonl", "report.json"):
        assert (other / "data" / "pretrain" / name).read_bytes() == (root / "data" / "pretrain" / name).read_bytes()
    assert torch.equal(*(load_weights(r / "data" / "pretrain")["layers.1.attn.wq.weight"]
                         for r in (root, other)))


def test_retry_cap_aborts_with_the_incidents_on_disk(mixed, tmp_path, monkeypatch):
    monkeypatch.setenv("FORGELINE_INJECT_LOSS", "5:40,6:40")
    root = fresh_root(mixed, tmp_path)
    with pytest.raises(Exception, match="max_rollbacks"):
        run_stage(root, spec_with(steps=10, max_rollbacks=0))
    assert [i["action"] for i in read(root, "incidents.jsonl")] == ["skip", "abort"]


def test_sanity_overfit_passes_and_fails(mixed, tmp_path):
    spec = spec_with(steps=40)
    spec["train"] = {**spec["train"], "sanity_overfit": True, "sanity_target_loss": 0.5, "eval_every": 100,
                     "optim": {"warmup_steps": 2, "lr": 0.01, "min_lr": 0.01}}
    root = fresh_root(mixed, tmp_path / "ok")
    result = run_stage(root, spec)
    assert result.counts["final_train_loss"] <= 0.5
    spec["train"]["steps"] = 3
    with pytest.raises(Exception, match="sanity_overfit"):
        run_stage(fresh_root(mixed, tmp_path / "short"), spec)


def test_telemetry_rows_and_mfu(mixed, tmp_path):
    spec = spec_with(steps=6)
    spec["train"]["telemetry"] = {"device_peak_tflops": 1.0, "warmup_steps": 1, "wandb": "disabled"}
    root = fresh_root(mixed, tmp_path)
    result = run_stage(root, spec)
    rows = [json.loads(x) for x in (root / "reports" / "pretrain" / "telemetry.jsonl").read_text().splitlines()]
    assert [r["step"] for r in rows if "loss" in r] == [1, 2, 3, 4, 5, 6]
    late = [r for r in rows if r.get("tokens_per_s")]
    assert late and all(0 < r["mfu"] < 1 and r["rss_peak_gib"] > 0 for r in late)
    config = json.loads((root / "data" / "pretrain" / "config.json").read_text())
    r = late[-1]  # MFU is the model's FLOP rate over the stated peak
    assert r["mfu"] == pytest.approx(r["tokens_per_s"] * config["flops_per_token"] / 1e12, rel=1e-3)
    assert "MFU" in result.summary and "synchronous saves, training stalled" in result.summary
    assert any("checkpoint_stall_s" in r for r in rows)


def accum_spec(**stability) -> dict:
    spec = spec_with(**stability)
    return {**spec, "parallel": {"dp": 2, "zero_stage": 2},
            "train": {**spec["train"], "grad_accum": 2, "micro_batch_size": 2}}


def test_accumulation_nan_is_skipped_before_the_update_on_every_rank(mixed, tmp_path, monkeypatch):
    """dp 2 × ZeRO-2 × 2 micro-batches: the pre-pass sees batch 5's NaN before any backward, on both ranks (the
    micro-batch losses are reduced over dp), so no gradient is reduced and DeepSpeed's accumulation stays
    aligned; with `accum_check: after` the same NaN reaches the update, where DeepSpeed's ZeRO-2 drops it itself
    (non-finite grad norm), recorded as such (an overflow, not a guard skip)."""
    monkeypatch.setenv("FORGELINE_INJECT_LOSS", "5:nan")
    root = fresh_root(mixed, tmp_path / "prepass")
    result = run_stage(root, accum_spec())
    incidents = read(root, "incidents.jsonl")
    assert [(i["step"], i["action"]) for i in incidents] == [(5, "skip")]
    assert incidents[0]["micro_losses"] == ["nan", "nan"] and result.counts["steps"] == 8
    rows = {r["step"]: r for r in read(root, "metrics.jsonl") if r["kind"] == "train"}
    assert rows[5]["grad_norm"] is None and all(rows[s]["grad_norm"] > 0 for s in (4, 6, 7, 8))
    optim = OptimSpec.model_validate(SPEC["train"]["optim"])
    assert [rows[s]["lr"] for s in range(1, 9)] == pytest.approx([lr_at(s, optim, 8) for s in range(8)], abs=1e-6)
    assert all(torch.isfinite(t).all() for t in load_weights(root / "data" / "pretrain").values())

    after = fresh_root(mixed, tmp_path / "after")
    run_stage(after, accum_spec(accum_check="after"))
    late = read(after, "incidents.jsonl")
    assert [(i["step"], i["action"]) for i in late] == [(5, "overflow")]
    assert "micro_losses" not in late[0]


def test_torch_autocast_bf16_trains_close_to_fp32_with_grad_norms(mixed, tmp_path):
    """`speed.mixed_precision: torch_autocast` through the real stage on a CPU rank (bf16 autocast exists there):
    the config has no bf16 section, grad norms are reported (fp32 weights, ZeRO-0: DeepSpeed's clip norm is kept),
    and the losses follow the fp32 run within bf16 rounding — but are not the fp32 numbers (autocast acted)."""
    def losses(precision: str, **speed) -> list[tuple[float, float]]:
        spec = {**SPEC, "train": {**SPEC["train"], "steps": 3, "eval_every": 100, "precision": precision,
                                  "grad_accum": 2, "speed": speed}}
        root = fresh_root(mixed, tmp_path / precision)
        run_stage(root, spec)
        cfg = json.loads((root / "data" / "pretrain" / "ds_config.json").read_text())
        assert cfg["torch_autocast"]["enabled"] is bool(speed) and not cfg["bf16"]["enabled"]
        return [(r["loss"], r["grad_norm"]) for r in read(root, "metrics.jsonl") if r["kind"] == "train"]

    auto, fp32 = losses("bf16", mixed_precision="torch_autocast"), losses("fp32")
    assert all(g is not None and g > 0 for _, g in auto)
    assert [a for a, _ in auto] == pytest.approx([f for f, _ in fp32], rel=2e-2)
    assert [a for a, _ in auto] != [f for f, _ in fp32]


@pytest.mark.slow
@pytest.mark.parametrize("scope", ["blocks", "model"])
def test_compiled_blocks_train_exactly_like_eager(mixed, tmp_path, scope):
    """`speed.compile` through the real stage (DeepSpeed, ZeRO-0, one CPU rank): every block runs compiled
    (dynamo captured graphs), or with `compile_scope: model` the whole forward, loss included, as graphs without
    a break; the losses and grad norms equal the eager run's. ~2 min on a cold inductor cache (CPU code
    generation), ~30 s warm."""
    from torch._dynamo.utils import counters

    def rows(flag: bool) -> list[float]:
        speed = {"compile": flag, "compile_scope": scope}
        spec = {**SPEC, "train": {**SPEC["train"], "steps": 2, "eval_every": 100, "speed": speed}}
        root = fresh_root(mixed, tmp_path / str(flag))
        run_stage(root, spec)
        return [v for r in read(root, "metrics.jsonl") if r["kind"] == "train" for v in (r["loss"], r["grad_norm"])]

    counters.clear()
    eager = rows(False)
    assert not counters["stats"]["unique_graphs"]
    compiled = rows(True)
    assert counters["stats"]["unique_graphs"] >= 1  # the blocks (or the model) did run compiled
    if scope == "model":  # one graph per mode (train, eval), the chunked loss traced inside it
        assert not counters["graph_break"], dict(counters["graph_break"])
    assert compiled == pytest.approx(eager, rel=1e-4, abs=1e-6)


def test_whole_model_compile_only_where_nothing_else_runs_in_the_forward(caplog):
    """`compile_scope: model` compiles the whole forward at pp = 1, tp = 1, ZeRO 0-2 only; a pipeline, tensor
    parallelism or ZeRO-3's hooks get per-block compilation, and the log says so."""
    from types import SimpleNamespace

    from specs.train import SpeedSpec
    from tasks.train.parallel.parallelize import compile_scope

    model, blocks = SpeedSpec(compile_scope="model"), SpeedSpec()
    plain = SimpleNamespace(pp=1, tp=1)
    assert [compile_scope(model, plain, z) for z in (0, 1, 2)] == ["model"] * 3
    assert not caplog.records
    assert compile_scope(model, plain, 3) == "blocks"
    assert compile_scope(model, SimpleNamespace(pp=2, tp=1), 0) == "blocks"
    assert compile_scope(model, SimpleNamespace(pp=1, tp=2), 1) == "blocks"
    assert len([r for r in caplog.records if "compiling each block" in r.getMessage()]) == 3
    assert compile_scope(blocks, SimpleNamespace(pp=2, tp=2), 3) == "blocks"


def test_compiled_blocks_leave_module_hooks_outside_the_graph():
    """compile_blocks compiles each block's forward only: a forward hook (as DeepSpeed's ZeRO-3 gather/release
    hooks are) runs eagerly around the compiled call, so dynamo never guards on what the hook sees (on the H200,
    `nn.Module.compile()` traced ZeRO-3's shared hook and recompiled it to dynamo's limit)."""
    from torch import nn

    from tasks.train.parallel.dsconfig import compile_blocks

    class Block(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.lin = nn.Linear(4, 4)

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return torch.relu(self.lin(x)) + x

    torch.manual_seed(0)
    model = nn.Sequential(Block(), Block())
    x = torch.randn(2, 4)
    eager = model(x)
    seen: list[bool] = []
    for block in model:
        block.register_forward_hook(lambda m, i, o: seen.append(torch.compiler.is_compiling()))
    assert compile_blocks(model, Block) == 2
    compiled = model(x)
    assert seen == [False, False]  # hooks ran, and ran eagerly
    assert "forward" in vars(model[0])  # the instance's forward was replaced; the class's is untouched
    torch.testing.assert_close(compiled, eager)
