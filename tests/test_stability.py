"""Stability guard: spikes flagged without false positives, rollback windows, retry cap, resume-safe state."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest

from tasks.train.stability import Action, StabilityError, StabilityGuard, StabilitySpec


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
