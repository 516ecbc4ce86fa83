"""The one Trainer, driven directly (no ranks, no DeepSpeed): a fake engine (one scalar weight, SGD) and a fake
objective (squared error to a per-batch target) show what the loop itself decides — accumulation, the guard's
skip / down-weight before the update, rollback to a checkpoint, resume choice and exact resume."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import pytest
import torch

from tasks.train.checkpointing.checkpoint import CheckpointStore, choose_resume
from tasks.train.checkpointing.manager import CheckpointManager
from tasks.train.loop.trainer import Hooks, Trainer, cpu_threads
from tasks.train.checkpointing.weights import load_weights
from tests.helpers.trainer import LR, FakeEngine, FakeObjective, job


def fit(tmp: Path, grad_accum: int = 1, hooks: Hooks | None = None, steps: int = 6, engine: Any = None,
        objective: Any = None, precision: str = "auto", **stability: Any):
    j = job(tmp, steps=steps, grad_accum=grad_accum, **stability)
    if precision != "auto":
        train = j.spec.train.model_copy(update={"precision": precision})
        j = j.model_copy(update={"spec": j.spec.model_copy(update={"train": train})})
    engine, objective = engine or FakeEngine(grad_accum), objective or FakeObjective(grad_accum)
    checkpoints = CheckpointManager(Path(j.ckpt_dir))
    prepared = objective.prepare(0)
    point = checkpoints.resume(prepared.identity, j.spec.train.steps, "fake")  # a refusal would raise
    trainer = Trainer(objective, prepared, engine, checkpoints, j, hooks or Hooks(), schedule=point.schedule)
    result = trainer.fit(point.tag, point.step, point.rows, {})
    return result, engine, objective, trainer


def reference_w(batches: list[int]) -> float:
    w = 0.0
    for b in batches:
        w -= LR * 2 * (w - FakeObjective.target(b))
    return w


def test_accumulation_runs_every_micro_batch_then_one_update(tmp_path):
    result, engine, objective, _ = fit(tmp_path, grad_accum=3)
    assert engine.calls == (["prepass"] + ["backward"] * 3 + ["update"]) * 6  # judged by a forward pre-pass
    assert objective.seen == list(range(6))
    assert float(engine.w.detach()) == pytest.approx(reference_w(list(range(6))), abs=1e-6)
    assert len(result.losses) == 6 and result.start_step == 0
    assert result.losses[0] == pytest.approx(FakeObjective.target(0) ** 2)  # w = 0 before the first update


def test_a_nan_step_is_skipped_before_its_update(tmp_path):
    hooks = Hooks(loss_factor=lambda batch: math.nan if batch == 4 else 1.0)  # 1-based data batch
    result, engine, objective, trainer = fit(tmp_path, hooks=hooks)
    assert engine.calls.count("skip") == 1 and engine.calls.count("update") == 5
    skipped = engine.calls.index("skip")
    assert engine.calls[:skipped] == ["backward", "update"] * 3  # batches 1-3 applied, the 4th never backpropagated
    incident, = trainer.guard.incidents
    assert incident["step"] == 4 and incident["action"] == "skip" and incident["doc_ids"] == ["doc-3"]
    assert float(engine.w.detach()) == pytest.approx(reference_w([0, 1, 2, 4, 5]), abs=1e-6)


def test_downweight_scales_the_spiking_step(tmp_path):
    hooks = Hooks(loss_factor=lambda batch: 50.0 if batch == 5 else 1.0)
    _, engine, _, trainer = fit(tmp_path, hooks=hooks, on_spike="downweight", downweight_factor=0.1)
    assert [i["action"] for i in trainer.guard.incidents] == ["downweight"]
    assert engine.calls.count("update") == 6 and "skip" not in engine.calls
    w = reference_w([0, 1, 2, 3])  # batch 4 (0-based) trains on 50·loss·0.1 = 5·loss: w jumps to its target
    w -= LR * 5 * 2 * (w - FakeObjective.target(4))
    w -= LR * 2 * (w - FakeObjective.target(5))
    assert float(engine.w.detach()) == pytest.approx(w, abs=1e-5)


def test_repeated_spikes_roll_back_to_the_last_checkpoint(tmp_path):
    hooks = Hooks(loss_factor=lambda batch: 80.0 if batch in (5, 6) else 1.0)
    result, engine, _, trainer = fit(tmp_path, hooks=hooks, steps=8)
    assert "load:step000004" in engine.calls  # 2 spikes in the window: back to the checkpoint before them
    assert trainer.guard.rollbacks == 1 and trainer.guard.skipped  # the offending window is skipped afterwards
    assert [r["step"] for r in result.rows if r["kind"] == "train"] == list(range(1, 9))  # rows rewritten once


class Killed(Exception):
    pass


def kill_at(step: int) -> Hooks:
    """A fault hook that stops the run at the `step`-th step_done (after its checkpoint, if any)."""
    seen = []

    def point(name: str) -> None:
        seen.append(name)
        if name == "fake.step_done" and seen.count(name) == step:
            raise Killed(step)
    return Hooks(point=point)


def test_resume_choice_and_exact_resume(tmp_path):
    full, engine_full, _, _ = fit(tmp_path / "full")
    part = tmp_path / "part"
    with pytest.raises(Killed):
        fit(part, hooks=kill_at(5))                          # checkpoints at 0, 2, 4; step 5 is lost
    store = CheckpointStore(part / "ckpt")
    tag, start, rows, error = choose_resume(store, {"seed": 1}, 6, "fake")
    assert (tag, start, error) == ("step000004", 4, None)
    assert [r["step"] for r in rows if r["kind"] == "train"] == [1, 2, 3, 4]
    _, _, _, error = choose_resume(store, {"seed": 2}, 6, "fake")
    assert error and "seed: checkpoint has 1, this run has 2" in error and error.startswith("fake: refusing")
    _, _, _, error = choose_resume(store, {"seed": 1}, 3, "fake")
    assert error and "beyond fake.steps = 3; " in error and "raise fake.steps" in error
    with pytest.raises(ValueError, match="fake: refusing .* seed: checkpoint has 1, this run has 2"):
        CheckpointManager(part / "ckpt").resume({"seed": 2}, 6, "fake")  # what a rank does with that refusal
    resumed, engine, objective, _ = fit(part)                # continues at step 4
    assert resumed.start_step == 4 and resumed.resumed_from == "step000004" and objective.seen == [4, 5]
    assert float(engine.w.detach()) == float(engine_full.w.detach())
    assert (part / "out" / "metrics.jsonl").read_bytes() == (tmp_path / "full" / "out" / "metrics.jsonl").read_bytes()
    assert resumed.losses == full.losses[4:]
    # the final weights went through the rank shard and the merge: the consolidated file holds w, shards are gone
    assert float(load_weights(part / "out")["layers.0.w"]) == float(engine.w.detach())
    assert not (part / "out" / "shards").exists()
    assert (part / "out" / "model.safetensors").read_bytes() == (tmp_path / "full" / "out" / "model.safetensors").read_bytes()


def test_sanity_mode_trains_one_batch_and_fails_when_it_is_not_fitted(tmp_path):
    j = job(tmp_path, steps=4)
    j = j.model_copy(update={"spec": j.spec.model_copy(update={"train": j.spec.train.model_copy(
        update={"sanity_overfit": True, "sanity_target_loss": 1e-9})})})
    engine, objective = FakeEngine(1), FakeObjective(1)
    trainer = Trainer(objective, objective.prepare(0), engine, CheckpointManager(Path(j.ckpt_dir)), j)
    with pytest.raises(ValueError, match="fake.sanity_overfit: the loss on one repeated batch"):
        trainer.fit(None, 0, [], {})
    assert objective.seen == [0, 0, 0, 0]


def test_cpu_threads_come_from_params_split_over_local_ranks(monkeypatch):
    monkeypatch.delenv("LOCAL_WORLD_SIZE", raising=False)
    monkeypatch.delenv("LOCAL_SIZE", raising=False)
    assert cpu_threads(2, 1) == 2 and cpu_threads(2, 2) == 1 and cpu_threads(2, 8) == 1 and cpu_threads(16, 4) == 4
    monkeypatch.setenv("LOCAL_WORLD_SIZE", "2")  # 8 ranks over 4 nodes: 2 per machine
    assert cpu_threads(16, 8) == 8


# ---- stability with accumulation, a pipeline's one-call step, fp16 overflow ---------------------------------
def test_accumulation_skips_the_whole_step_before_its_update_when_one_micro_batch_is_nan(tmp_path):
    hooks = Hooks(micro_factor=lambda batch, i: math.nan if (batch, i) == (4, 2) else 1.0)  # the last of 3
    result, engine, _, trainer = fit(tmp_path, grad_accum=3, hooks=hooks)
    step = ["prepass", "backward", "backward", "backward", "update"]
    assert engine.calls == step * 3 + ["prepass", "skip"] + step * 2  # batch 4: not one micro-batch backpropagated
    incident, = trainer.guard.incidents
    assert incident["step"] == 4 and incident["action"] == "skip" and incident["micro_losses"][2] == "nan"
    assert float(engine.w.detach()) == pytest.approx(reference_w([0, 1, 2, 4, 5]), abs=1e-6)
    assert result.losses[3] is None and engine.w.grad is None  # no accumulated gradient left behind


def test_accumulation_downweights_every_micro_batch_of_a_spiking_step(tmp_path):
    hooks = Hooks(micro_factor=lambda batch, i: 50.0 if (batch, i) == (5, 0) else 1.0)
    _, engine, _, trainer = fit(tmp_path, grad_accum=2, hooks=hooks, on_spike="downweight", downweight_factor=0.1)
    assert [i["action"] for i in trainer.guard.incidents] == ["downweight"]
    w = reference_w([0, 1, 2, 3])
    w -= LR * (50 * 0.1 + 0.1) / 2 * 2 * (w - FakeObjective.target(4))  # mean of micro gradients 5·g and 0.1·g
    w -= LR * 2 * (w - FakeObjective.target(5))
    assert float(engine.w.detach()) == pytest.approx(w, abs=1e-5)


def test_accum_check_after_applies_the_update_then_notes_the_spike(tmp_path):
    hooks = Hooks(micro_factor=lambda batch, i: 80.0 if (batch, i) == (5, 1) else 1.0)
    _, engine, _, trainer = fit(tmp_path, grad_accum=2, hooks=hooks, accum_check="after", steps=5)
    assert "prepass" not in engine.calls and engine.calls.count("update") == 5  # no extra forward, no skip
    assert [i["action"] for i in trainer.guard.incidents] == ["noted"]


class PipelineObjective(FakeObjective):
    """A pipeline's step: one call runs every micro-batch's forward, backward and the update (`train_batch`)."""

    whole_steps = True

    def __init__(self, grad_accum: int, factor: dict[int, float]):
        super().__init__(grad_accum)
        self.factor = factor

    def whole_step(self, engine: FakeEngine, batch: int) -> float:
        losses = []
        for micro in self.micro_batches(engine, batch):
            loss, value = micro()
            engine.backward_and_step(loss * self.factor.get(batch + 1, 1.0))
            losses.append(value * self.factor.get(batch + 1, 1.0))
        return float(torch.stack(losses).mean())


def test_a_pipeline_step_is_judged_after_its_update_and_recovers_by_rollback(tmp_path):
    objective = PipelineObjective(2, {5: 80.0, 6: 80.0})
    result, engine, _, trainer = fit(tmp_path, grad_accum=2, objective=objective, steps=8)
    assert [i["action"] for i in trainer.guard.incidents] == ["noted", "rollback"]  # nothing can act before
    assert "prepass" not in engine.calls and "skip" not in engine.calls
    first_load = engine.calls.index("load:step000004")
    assert engine.calls[:first_load].count("update") == 6  # both spiking steps were applied, then undone
    assert trainer.guard.rollbacks == 1 and trainer.guard.skipped == [(5, 7)]
    w = reference_w([0, 1, 2, 3])  # the checkpoint of step 4; then batches 7-10 (1-based) at the cooled LR
    for b in (6, 7, 8, 9):
        w -= LR * 0.5 * 2 * (w - FakeObjective.target(b))
    assert float(engine.w.detach()) == pytest.approx(w, abs=1e-6)
    assert len(result.losses) == 9  # steps 1-5 of the first pass (5 applied, then undone), 5-8 of the replay


def test_an_fp16_overflow_is_an_incident_not_a_spike_and_keeps_the_schedule(tmp_path):
    engine = FakeEngine(1)
    engine.overflow_at = {3, 4}  # two overflows inside the window: two spikes would roll back (max_spikes 2)
    result, engine, _, trainer = fit(tmp_path, engine=engine, precision="fp16")
    assert [(i["step"], i["action"]) for i in trainer.guard.incidents] == [(3, "overflow"), (4, "overflow")]
    assert trainer.guard.rollbacks == 0 and not any(c.startswith("load") for c in engine.calls)
    assert engine.calls.count("skip") == 2  # the LR schedule advanced for each (DeepSpeed leaves it)
    rows = {r["step"]: r for r in result.rows if r["kind"] == "train"}
    assert rows[2]["overflows"] == 0 and rows[4]["overflows"] == 2 and rows[4]["grad_norm"] is None
    assert float(engine.w.detach()) == pytest.approx(reference_w([0, 1, 4, 5]), abs=1e-6)


def test_objectives_micro_losses_are_per_micro_batch_over_dp():
    """The pre-pass's micro-batch losses: pretraining's mean loss of micro-batch i over the dp ranks, SFT's
    Σ loss sums / Σ assistant tokens of micro-batch i (a fake engine sums over two ranks holding these values)."""
    import numpy as np
    from types import SimpleNamespace

    from tasks.train.objectives.pretrain import PretrainObjective
    from tasks.train.objectives.sft import SFTObjective

    seen: list[list[float]] = []

    def dp_sum_each(x: torch.Tensor) -> list[float]:  # two ranks, the other holding 3× these values
        seen.append(x.tolist())
        return [4.0 * float(v) for v in x]

    engine = SimpleNamespace(dp_sum_each=dp_sum_each)
    pre = object.__new__(PretrainObjective)
    pre.layout = SimpleNamespace(dp=2, dp_rank=0)
    assert pre.micro_losses(engine, 0, [torch.tensor(2.0), torch.tensor(3.5)]) == [4.0, 7.0]
    sft = object.__new__(SFTObjective)
    sft.layout = SimpleNamespace(dp=2, dp_rank=1)
    weights = np.array([[1, 1, 0, 0], [1, 1, 1, 0], [0, 0, 0, 1]], dtype=np.float32)  # 2 + 3 and 1 tokens
    sft.data = SimpleNamespace(train=SimpleNamespace(weights=weights))
    sft.plan = SimpleNamespace(micro_indexes=lambda batch, rank: [np.array([0, 1]), np.array([2])])
    assert sft.micro_losses(engine, 7, [torch.tensor(10.0), torch.tensor(0.5)]) == [2.0, 0.5]
    assert seen[-1] == [10.0, 0.5, 5.0, 1.0]  # one all-reduce: the sums, then the token counts
