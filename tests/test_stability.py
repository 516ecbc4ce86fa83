"""Stability guard: spikes flagged without false positives, rollback windows, retry cap, resume-safe state."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest

from tasks.train.loop.stability import Action, StabilityError, StabilityGuard, StabilitySpec


def curve(n: int, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """A pretraining-like loss (fast then slow decay, shrinking noise) and a noisy, decaying grad norm."""
    rng = np.random.default_rng(seed)
    t = np.arange(n)
    loss = 2.5 + 6.0 * np.exp(-t / 120) + rng.normal(0, 1, n) * (0.02 + 0.1 * np.exp(-t / 300))
    grad = (0.4 + 1.5 * np.exp(-t / 200)) * np.exp(rng.normal(0, 0.12, n))
    return loss, grad


def run(guard: StabilityGuard, loss, grad, start: int = 1, docs=None) -> list:
    return [guard.observe(start + i, float(lo), float(g), doc_ids=docs or [f"d{start + i}"])
            for i, (lo, g) in enumerate(zip(loss, grad, strict=True))]


@pytest.mark.parametrize("seed", range(5))
def test_no_false_positives_on_1000_noisy_steps(seed):
    loss, grad = curve(1000, seed)
    guard = StabilityGuard(StabilitySpec())
    decisions = run(guard, loss, grad)
    assert all(d.action is Action.OK for d in decisions), guard.incidents
    assert guard.incidents == []


def test_spikes_and_nan_are_flagged_and_do_not_poison_the_statistics():
    loss, grad = curve(1000, 0)
    loss[299] *= 1.6             # step 300: loss spike
    grad[599] *= 10              # step 600: grad-norm spike
    loss[799] = float("nan")     # step 800: NaN loss
    grad[849] = float("inf")     # step 850: Inf grad norm
    guard = StabilityGuard(StabilitySpec())
    decisions = run(guard, loss, grad)
    flagged = {i + 1: d for i, d in enumerate(decisions) if d.action is not Action.OK}
    assert sorted(flagged) == [300, 600, 800, 850]
    assert all(d.action is Action.SKIP and not d.apply_update for d in flagged.values())
    assert "loss z=" in flagged[300].reason and "grad_norm z=" in flagged[600].reason
    assert "non-finite" in flagged[800].reason
    # Only accepted steps enter the window: a spike never becomes part of the reference.
    assert all(math.isfinite(h[1]) and h[0] not in flagged for h in guard.state_dict()["history"])
    rows = [json.loads(line) for line in guard.incidents_jsonl().splitlines()]
    assert [r["step"] for r in rows] == [300, 600, 800, 850]
    assert rows[0]["doc_ids"] == ["d300"] and rows[0]["z_loss"] > 6 and rows[0]["action"] == "skip"
    assert rows[2]["loss"] == "nan" and rows[3]["grad_norm"] == "inf"  # strict JSON, still readable


def test_nan_is_a_spike_from_the_first_step_and_always_skipped():
    guard = StabilityGuard(StabilitySpec(on_spike="downweight"))
    assert guard.observe(1, float("nan"), 1.0).action is Action.SKIP
    assert guard.observe(2, 9.0, 1.0).action is Action.OK  # no judgement before min_history


def test_downweight_mode():
    loss, grad = curve(200, 1)
    guard = StabilityGuard(StabilitySpec(on_spike="downweight", downweight_factor=0.25))
    run(guard, loss[:150], grad[:150])
    d = guard.observe(151, float(loss[150]) * 2, None)  # loss only: decided before backward
    assert d.action is Action.DOWNWEIGHT and d.factor == 0.25 and d.apply_update


def test_repeated_spikes_roll_back_with_the_right_skip_window_and_cool_the_lr():
    spec = StabilitySpec(max_spikes=3, skip_before=5, lr_cool_factor=0.5, lr_cool_steps=100)
    loss, grad = curve(400, 2)
    guard = StabilityGuard(spec)
    run(guard, loss[:200], grad[:200])            # steps 1..200
    guard.note_checkpoint(200)
    run(guard, loss[200:249], grad[200:249], start=201)
    actions = []
    for step in (250, 251, 252, 253, 254, 255):
        bad = step in (250, 253, 255)
        actions.append(guard.observe(step, float(loss[step - 1]) * (2 if bad else 1), float(grad[step - 1])))
    assert [a.action for a in actions] == [Action.SKIP, Action.OK, Action.OK, Action.SKIP, Action.OK,
                                           Action.ROLLBACK]
    rb = actions[-1]
    assert rb.to_step == 200 and rb.skip_batches == (245, 256) and not rb.apply_update
    assert (rb.lr_factor, rb.cool_steps) == (0.5, 100)
    assert guard.incidents[-1]["action"] == "rollback" and guard.incidents[-1]["skip_batches"] == [245, 256]
    # Replaying from step 201: batches 201..244 as before, then the window is jumped over.
    assert [guard.batch_index(s) for s in (201, 244, 245, 246)] == [201, 244, 256, 257]
    assert guard.lr_scale(200) == 1.0 and guard.lr_scale(201) == 0.5 and guard.lr_scale(300) == 0.5
    assert guard.lr_scale(301) == 1.0
    # Statistics are back to the checkpoint's (the guard stays armed during the replay); a new episode starts.
    state = guard.state_dict()
    assert state["history"] == state["checkpoint_history"] and state["spikes"] == []
    assert max(h[0] for h in state["history"]) == 200 and len(state["history"]) == spec.window
    assert guard.observe(201, float(loss[200]), float(grad[200])).action is Action.OK
    assert guard.observe(202, float(loss[201]) * 2, float(grad[201])).action is Action.SKIP


def test_spikes_far_apart_do_not_escalate():
    loss, grad = curve(600, 3)
    for step in (200, 300, 400, 500):
        loss[step - 1] *= 2
    guard = StabilityGuard(StabilitySpec(max_spikes=2, window=50))
    decisions = run(guard, loss, grad)
    assert [d.action for d in decisions].count(Action.SKIP) == 4
    assert guard.rollbacks == 0


def test_retry_cap_aborts_with_a_clear_error():
    loss, grad = curve(400, 4)
    guard = StabilityGuard(StabilitySpec(max_spikes=2, max_rollbacks=1))
    run(guard, loss[:250], grad[:250])
    guard.note_checkpoint(250)
    run(guard, loss[250:299], grad[250:299], start=251)
    guard.observe(300, 99.0, 1.0)
    first = guard.observe(301, 99.0, 1.0)
    assert first.action is Action.ROLLBACK and first.skip_batches == (300, 302)
    run(guard, loss[250:280], grad[250:280], start=251)   # replay 251..280 (batches before the window)
    guard.observe(281, 99.0, 1.0)
    final = guard.observe(282, 99.0, 1.0)
    assert final.action is Action.ABORT and "max_rollbacks" in final.reason
    with pytest.raises(StabilityError, match="after 1 rollback"):
        final.raise_if_abort()
    assert guard.observe(283, 3.0, 1.0).action is Action.ABORT  # stays aborted


def test_state_dict_round_trip_gives_identical_future_decisions():
    spec = StabilitySpec(max_spikes=2, window=40, min_history=10)
    loss, grad = curve(800, 5)
    for step in (450, 460, 600, 700, 705):
        loss[step - 1] *= 1.8
    loss[650] = float("nan")
    a = StabilityGuard(spec)
    run(a, loss[:380], grad[:380])
    a.note_checkpoint(380)
    run(a, loss[380:400], grad[380:400], start=381)
    a.observe(401, 50.0, 9.0, ["x"])                         # one pending spike in the state
    state = json.loads(json.dumps(a.state_dict()))            # as it would be saved with a checkpoint
    b = StabilityGuard(spec)
    b.load_state_dict(state)
    rest_a = run(a, loss[401:], grad[401:], start=402)
    rest_b = run(b, loss[401:], grad[401:], start=402)
    assert rest_a == rest_b and any(d.action is Action.ROLLBACK for d in rest_a)
    assert a.incidents_jsonl() == b.incidents_jsonl()
    assert a.state_dict() == b.state_dict()


def test_disabled_and_spec_validation():
    guard = StabilityGuard(StabilitySpec(enabled=False))
    assert guard.observe(1, float("nan"), None).action is Action.OK
    with pytest.raises(ValueError, match="min_history"):
        StabilitySpec(window=10, min_history=20)
    assert all(f.description for f in StabilitySpec.model_fields.values())


# ---- accumulation: micro-batch losses; fp16 overflow ----------------------------------------------------------
def micro_steps(guard: StabilityGuard, n: int, k: int, seed: int) -> list:
    """n steps of k micro-batch losses each: level 3.0, micro-batch noise σ = 0.05 (the step mean's σ is 0.05/√k)."""
    rng = np.random.default_rng(seed)
    out = []
    for step in range(1, n + 1):
        micro = [float(v) for v in 3.0 + rng.normal(0, 0.05, k)]
        out.append(guard.observe(step, sum(micro) / k, None, micro_losses=micro))
    return out


def test_one_spiking_micro_batch_skips_the_step_although_the_mean_hides_it():
    spec = StabilitySpec(window=50, min_history=20, z_threshold=6.0, min_rel_std=0.0)
    guard = StabilityGuard(spec)
    assert all(d.action is Action.OK for d in micro_steps(guard, 40, 8, seed=3))
    # micro-batch 5 at 3.0 + 0.8 (16 σ of a micro-batch); the step mean rises by 0.1: under 6 of the mean's z?
    micro = [3.0] * 8
    micro[5] = 3.8
    mean = sum(micro) / 8
    plain = StabilityGuard(spec)
    micro_steps(plain, 40, 8, seed=3)
    assert plain.observe(41, mean, None).action is Action.OK  # the step loss alone does not flag it
    d = guard.observe(41, mean, None, doc_ids=["d41"], micro_losses=micro)
    assert d.action is Action.SKIP and "micro-batch 5 loss z=" in d.reason
    assert guard.incidents[-1]["micro_losses"] == micro and guard.incidents[-1]["step"] == 41
    # the look-alike: the same micro-batch at 3.1 (2 σ) is an ordinary step, and enters the reference
    micro[5] = 3.1
    assert guard.observe(42, sum(micro) / 8, None, micro_losses=micro).action is Action.OK
    assert len(guard.incidents) == 1


def test_a_nan_micro_batch_is_a_non_finite_spike_from_the_first_step():
    guard = StabilityGuard(StabilitySpec())
    d = guard.observe(1, 2.0, None, micro_losses=[2.0, math.nan, 2.0])
    assert d.action is Action.SKIP and d.reason == "non-finite loss or grad norm"
    assert guard.incidents[0]["micro_losses"] == [2.0, "nan", 2.0]


def test_micro_statistics_survive_state_dict_and_rollback():
    spec = StabilitySpec(window=30, min_history=10, min_rel_std=0.0, max_spikes=2)
    guard = StabilityGuard(spec)
    micro_steps(guard, 20, 4, seed=5)
    guard.note_checkpoint(20)
    copy = StabilityGuard(spec)
    copy.load_state_dict(json.loads(json.dumps(guard.state_dict())))
    spike = [3.0, 3.0, 3.0, 4.0]
    assert copy.observe(21, 3.25, None, micro_losses=spike) == guard.observe(21, 3.25, None, micro_losses=spike)
    old = dict(guard.state_dict())
    old.pop("micro"), old.pop("checkpoint_micro")  # a state saved before micro-batch judging existed
    StabilityGuard(spec).load_state_dict(old)
    d = guard.observe(22, 3.25, None, micro_losses=spike)
    assert d.action is Action.ROLLBACK and d.to_step == 20
    assert len(guard.state_dict()["micro"]) == 20  # back to the checkpoint's reference


def test_an_fp16_overflow_is_recorded_but_is_not_a_spike():
    guard = StabilityGuard(StabilitySpec(max_spikes=1, max_rollbacks=0))
    run(guard, [3.0] * 25, [1.0] * 25)
    before = guard.state_dict()["history"]
    guard.observe(26, 3.0, None)  # judged on its loss, then the scaler skipped its update
    d = guard.note_overflow(26, 3.0, 32768.0, doc_ids=["d26"])
    assert d.action is Action.OVERFLOW and not d.apply_update and d.reason.endswith("scale now 32768")
    assert guard.incidents == [{**guard.incidents[0], "step": 26, "action": "overflow", "doc_ids": ["d26"]}]
    assert guard.state_dict()["history"] == before and guard.rollbacks == 0  # not in the reference
    # with max_spikes 1 and no rollbacks left, a real spike would abort: the overflow did not count as one
    assert guard.observe(27, 3.0, 1.0).action is Action.OK
