"""mix.adaptive: the update rule on constructed cases, the bounds, the weighted sampler, and real CPU runs (weights
recomputed from the logged eval losses, kill + resume, identical weights on 2 data-parallel ranks)."""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import pytest
from pydantic import ValidationError

from specs.mix import AdaptiveMixSpec, MixSpec
from specs.pretrain import PretrainJob
from tasks.data.mixing.packing import PackedDataset, pack_split, write_layout
from tasks.train.inputs.adaptive import (
    STATE_FILE,
    AdaptiveMixer,
    AdaptivePlan,
    allocate,
    lag_signal,
    majority_sources,
    next_weights,
    project,
)
from specs.ranks import PretrainRun
from tasks.train.launch import launch
from tasks.train.inputs.synthetic import make_job, synthetic_mix
from tests.helpers.killed import run_killed

SEED = 5
SOURCES = ("prose", "code", "math")


# ------------------------------------------------------------------------------------------------- the rule
def test_excess_loss_rule_on_a_constructed_case():
    w = np.array([0.5, 0.3, 0.2])
    losses, targets = np.array([3.0, 2.0, 4.5]), np.array([2.5, 2.1, 3.5])
    lam = lag_signal(losses, targets, "target")
    np.testing.assert_allclose(lam, [0.5, 0.0, 1.0])  # clipped excess: source 1 is ahead of its target
    lo, hi = np.zeros(3), np.ones(3)
    got = next_weights(w, lam, base=np.full(3, 1 / 3), lo=lo, hi=hi, step_size=2.0, smoothing=0.1)
    # by hand: a ∝ w·exp(2λ) = (0.5e, 0.3, 0.2e²); w' = 0.9·a/Σa + 0.1/3
    a = np.array([0.5 * math.e, 0.3, 0.2 * math.e ** 2])
    np.testing.assert_allclose(got, 0.9 * a / a.sum() + 0.1 / 3, rtol=1e-12)
    assert got[2] > w[2] and got[1] < w[1] and math.isclose(got.sum(), 1.0)
    # no step and no smoothing: unchanged; equal lags: unchanged (only differences between sources count)
    np.testing.assert_allclose(next_weights(w, lam, w, lo, hi, 0.0, 0.0), w, rtol=1e-12)
    np.testing.assert_allclose(next_weights(w, np.full(3, 0.7), w, lo, hi, 5.0, 0.0), w, rtol=1e-12)


def test_initial_reference_records_then_upweights_the_source_that_improved_least():
    plan = AdaptivePlan(0, [np.arange(10), np.arange(10, 20)], 2, 1, 1, [(0, np.ones(2))])
    mixer = AdaptiveMixer(AdaptiveMixSpec(enabled=True, step_size=10.0, smoothing=0.0, min_weight=0.0,
                                          max_weight=1.0), ["code", "prose"], [np.arange(10), np.arange(10, 20)],
                          plan, eval_every=5, steps=100)
    first = mixer.update(5, {"code": 4.0, "prose": 5.0}, next_batch=5)
    assert first["weights"] == {"code": 0.5, "prose": 0.5}  # the first point only records L_ref
    row = mixer.update(10, {"code": 2.0, "prose": 4.0}, next_batch=10)  # code halved, prose lost only 20 %
    lam = [math.log(2.0 / 4.0), math.log(4.0 / 5.0)]
    assert row["lag"] == pytest.approx(dict(zip(["code", "prose"], lam)), abs=1e-6)
    e = np.exp(10 * np.array(lam))
    assert row["weights"]["prose"] == pytest.approx(e[1] / e.sum(), abs=1e-6) and row["weights"]["prose"] > 0.9
    # a source without a val loss this time gets the mean lag of the others: it keeps its share on average
    row = mixer.update(15, {"code": 2.0}, next_batch=15)
    assert row["lag"]["prose"] == row["lag"]["code"]
    assert plan.weights_at(14).tolist() == mixer.entries[-2]["weights"] and plan.weights_at(15)[1] > 0.9


def test_previous_reference_upweights_the_source_still_improving():
    pools = [np.arange(10), np.arange(10, 30)]
    plan = AdaptivePlan(0, pools, 2, 1, 1, [(0, np.ones(2))])
    mixer = AdaptiveMixer(AdaptiveMixSpec(enabled=True, reference="previous", step_size=4.0, smoothing=0.2),
                          ["noise", "prose"], pools, plan, eval_every=5, steps=100)
    np.testing.assert_allclose(mixer.base, [1 / 3, 2 / 3])  # shares of the train sequences
    assert mixer.update(5, {"noise": 6.0, "prose": 5.0}, 5)["weights"] == pytest.approx({"noise": 1 / 3,
                                                                                         "prose": 2 / 3}, abs=1e-6)
    row = mixer.update(10, {"noise": 6.0, "prose": 4.0}, 10)  # noise is flat, prose fell by a fifth
    assert row["lag"] == pytest.approx({"noise": 0.0, "prose": math.log(5 / 4)}, abs=1e-6)
    a = np.array([1 / 3, 2 / 3 * (5 / 4) ** 4])
    expect = 0.8 * a / a.sum() + 0.2 * np.array([1 / 3, 2 / 3])
    assert [row["weights"]["noise"], row["weights"]["prose"]] == pytest.approx(expect.tolist(), abs=1e-6)
    # the reference moves along: the next signal is measured from step 10's losses
    row = mixer.update(15, {"noise": 5.7, "prose": 4.0}, 15)
    assert row["lag"] == pytest.approx({"noise": math.log(6.0 / 5.7), "prose": 0.0}, abs=1e-6)
    assert row["weights"]["noise"] > expect[0]


def test_bounds_hold_and_keep_ratios_of_unclamped_sources():
    rng = np.random.default_rng(0)
    for _ in range(200):
        S = int(rng.integers(2, 7))
        lo = rng.uniform(0, 1 / S, S) * rng.integers(0, 2, S)
        hi = np.maximum(lo, rng.uniform(1 / S, 1, S))
        v = rng.dirichlet(np.full(S, 0.3)) + 1e-9
        w = project(v, lo, hi)
        assert math.isclose(w.sum(), 1.0, rel_tol=1e-12)
        assert np.all(w >= lo - 1e-12) and np.all(w <= hi + 1e-12)
        free = (w > lo + 1e-9) & (w < hi - 1e-9)
        if free.sum() >= 2:  # a common scale: ratios between unclamped sources are those of v
            i, j = np.flatnonzero(free)[:2]
            assert math.isclose(w[i] / w[j], v[i] / v[j], rel_tol=1e-9)
    # a huge step pins the lagging source at its max, the others at their mins
    w = next_weights(np.array([0.4, 0.3, 0.3]), np.array([5.0, 0.0, 0.0]), np.full(3, 1 / 3),
                     lo=np.array([0.1, 0.2, 0.05]), hi=np.array([0.6, 0.9, 0.9]), step_size=100.0, smoothing=0.0)
    np.testing.assert_allclose(w, [0.6, 0.2, 0.2], rtol=1e-9)  # the rest split 1:1 as the two were


def test_spec_validation():
    with pytest.raises(ValidationError, match="needs `targets`"):
        AdaptiveMixSpec(enabled=True, reference="target")
    with pytest.raises(ValidationError, match="min ≤ max"):
        AdaptiveMixSpec(bounds={"code": (0.6, 0.2)})
    with pytest.raises(ValidationError, match="min_weight"):
        AdaptiveMixSpec(min_weight=0.5, max_weight=0.4)
    assert MixSpec().adaptive.enabled is False
    plan = AdaptivePlan(0, [np.arange(3), np.arange(3, 6)], 2, 1, 1, [(0, np.ones(2))])
    with pytest.raises(ValueError, match="must allow weights summing to 1"):
        AdaptiveMixer(AdaptiveMixSpec(enabled=True, min_weight=0.6), ["a", "b"], [np.arange(3), np.arange(3, 6)],
                      plan, 5, 10)
    with pytest.raises(ValueError, match=r"lacks train source\(s\) \['b'\]"):
        AdaptiveMixer(AdaptiveMixSpec(enabled=True, reference="target", targets={"a": 2.0}), ["a", "b"],
                      [np.arange(3), np.arange(3, 6)], plan, 5, 10)


# ------------------------------------------------------------------------------------------------ the sampler
def test_sampler_draws_in_proportion_to_the_weight_history():
    pools = [np.arange(0, 50), np.arange(50, 80), np.arange(80, 87)]  # 50, 30 and 7 sequences
    history = [(0, np.array([0.5, 0.3, 0.2])), (40, np.array([0.1, 0.25, 0.65]))]
    plan = AdaptivePlan(SEED, pools, micro_batch=3, grad_accum=2, dp=2, history=history)
    G = plan.global_batch
    drawn = np.zeros(3)
    owner = np.repeat([0, 1, 2], [50, 30, 7])
    target = np.zeros(3)
    for t in range(120):
        pos = plan.positions(t)
        counts = np.bincount(owner[pos], minlength=3)
        assert counts.sum() == G and counts.tolist() == plan.counts(t).tolist()
        drawn += counts
        target += G * (history[0][1] if t < 40 else history[1][1])
        assert np.all(np.abs(drawn - target) < 1.0 + 1e-9), (t, drawn, target)  # never a sequence behind
        # the data-parallel ranks' micro-batches are the global batch, sliced in order
        assert np.concatenate([m for r in range(2) for m in plan.micro_indexes(t, r)]).tolist() == pos.tolist()
    # each source's stream is a permutation of its pool per epoch: its first |pool| draws cover the pool once
    stream = np.concatenate([plan.positions(t) for t in range(120)])
    first_small = [p for p in stream if owner[p] == 2][:7]
    assert sorted(first_small) == list(range(80, 87))
    # a pure function of (seed, step, history): random access and a fresh plan agree; a later change of the
    # history leaves the earlier steps as they were
    fresh = AdaptivePlan(SEED, pools, 3, 2, 2, history)
    assert [fresh.positions(t).tolist() for t in (97, 3, 41)] == [plan.positions(t).tolist() for t in (97, 3, 41)]
    plan.set_history(history + [(100, np.array([0.9, 0.05, 0.05]))])
    assert plan.positions(99).tolist() == fresh.positions(99).tolist()
    assert plan.counts(100).tolist() != fresh.counts(100).tolist()
    assert AdaptivePlan(SEED + 1, pools, 3, 2, 2, history).positions(0).tolist() != fresh.positions(0).tolist()


def test_allocate_is_exact_largest_remainder():
    assert allocate(np.array([1.0, 1.0, 1.0]), 4).tolist() == [2, 1, 1]  # ties: lower index first
    assert allocate(np.array([0.55, 0.45]), 4).tolist() == [2, 2]
    assert allocate(np.array([0.7, 0.0, 0.3]), 10).tolist() == [7, 0, 3]
    assert allocate(np.zeros(2), 3).sum() == 3


def test_sequences_belong_to_their_majority_source(tmp_path):
    # seq_len 10: windows [0, 11), [10, 21), ... over a stream of docs a (15+1), b (4+1), c (20+1)
    docs = [np.full(15, 5, np.uint16), np.full(4, 6, np.uint16), np.full(20, 7, np.uint16)]
    layout = {"train": pack_split(docs, ["a", "b", "c"], ["zeta", "alpha", "mid"], tmp_path, "train", 10, 0,
                                  "uint16", 100)}
    write_layout(tmp_path, 10, "uint16", 16, 0, {"<|endoftext|>": 0}, layout)
    names, codes = majority_sources(PackedDataset(tmp_path, "train"))
    assert names == ["alpha", "mid", "zeta"]
    # window 0: zeta only; window 1 [10, 21): zeta 6 (10..15), alpha 5 (16..20) -> zeta; window 2 [20, 31):
    # alpha 1, mid 10 -> mid; window 3: mid only
    assert [names[c] for c in codes] == ["zeta", "zeta", "mid", "mid"]


# ------------------------------------------------------------------------------------------- real CPU runs
ADAPTIVE = {"enabled": True, "reference": "target", "targets": {"code": 4.0, "math": 4.5, "prose": 4.5},
            "step_size": 20.0, "smoothing": 0.05, "min_weight": 0.05, "max_weight": 0.8, "every": 2}


@pytest.fixture(scope="module")
def mix_dir(tmp_path_factory) -> Path:
    return synthetic_mix(tmp_path_factory.mktemp("amix") / "mix", vocab_size=256, seq_len=32, sources=SOURCES)


def adaptive_job(base: Path, mix_dir: Path, parallel: dict | None = None, grad_accum: int = 2,
                 adaptive: dict | None = None) -> PretrainRun:
    spec = PretrainJob.model_validate({
        "model": {"flavor": "tiny", "n_layers": 2, "d_model": 32, "n_heads": 4, "n_kv_heads": 2},
        "parallel": parallel or {},
        "train": {"steps": 8, "micro_batch_size": 4, "grad_accum": grad_accum, "log_every": 1, "eval_every": 4,
                  "eval_batches": 2, "checkpoint_every": 2, "keep_checkpoints": 2, "optim": {"warmup_steps": 2},
                  "telemetry": {"wandb": "disabled"}},
    })
    spec = spec.model_copy(update={"adaptive": AdaptiveMixSpec.model_validate(adaptive or ADAPTIVE)})
    return make_job(base, mix_dir, spec, SEED)


def rows_of(base: Path) -> list[dict]:
    return [json.loads(x) for x in (base / "out" / "metrics.jsonl").read_text().splitlines()]


@pytest.fixture(scope="module")
def reference(mix_dir, tmp_path_factory):
    base = tmp_path_factory.mktemp("aref")
    result = launch(adaptive_job(base, mix_dir), base / "launch")
    return base, result


def test_weights_follow_the_rule_in_a_real_run(reference):
    base, result = reference
    rows = rows_of(base)
    mix_rows = [r for r in rows if r["kind"] == "mix"]
    assert [r["step"] for r in mix_rows] == [0, 2, 4, 6]  # `every` 2; never at the last step
    assert [r["step"] for r in rows if r["kind"] == "eval"] == [2, 4, 6, 8]  # update points are evaluated too
    evals = {r["step"]: r["val_loss_by_source"] for r in rows if r["kind"] == "eval"}
    sources = sorted(SOURCES)
    lo, hi = np.full(3, 0.05), np.full(3, 0.8)
    base_w = np.array([mix_rows[0]["weights"][s] for s in sources])
    w = base_w
    for r in mix_rows[1:]:  # recompute every update from the logged losses with the documented formula
        losses = np.array([evals[r["step"]][s] for s in sources])
        lam = np.maximum(losses - np.array([ADAPTIVE["targets"][s] for s in sources]), 0)
        a = w * np.exp(20.0 * lam)
        w = project(0.95 * a / a.sum() + 0.05 * base_w, lo, hi)
        np.testing.assert_allclose([r["weights"][s] for s in sources], w, atol=2e-6)
        assert r["batch"] == r["step"]  # no skipped windows: weights apply from the next batch
    assert np.abs(w - base_w).max() > 0.05  # they really moved
    csv = (base / "out" / "plots" / "mix_weights.csv").read_text().splitlines()
    assert csv[0] == "step,batch,code,math,prose" and len(csv) == 5
    assert result.outputs["adaptive_mix"]["updates"] == 3
    state = json.loads((base / "checkpoints" / "step000008" / STATE_FILE).read_text())
    assert [e["step"] for e in state["history"]] == [0, 2, 4, 6]


def test_killed_adaptive_run_resumes_to_the_same_end(reference, mix_dir, tmp_path):
    ref_base, _ = reference
    job = adaptive_job(tmp_path, mix_dir)
    code, out = run_killed(launch, job, tmp_path / "launch", fault="pretrain.step_done=5", timeout=300)
    assert code == -9, out[-2000:]  # SIGKILLed after step 5: checkpoint 4 is the newest
    saved = json.loads((tmp_path / "checkpoints" / "step000004" / STATE_FILE).read_text())
    assert [e["step"] for e in saved["history"]] == [0, 2, 4]
    # the sampler setting is part of what the checkpoint means: switching it off is refused
    off = adaptive_job(tmp_path, mix_dir, adaptive={"enabled": False})
    with pytest.raises(ValueError, match="trained with mix.adaptive on but this run has it off"):
        launch(off, tmp_path / "launch")
    result = launch(job, tmp_path / "launch")
    assert result.start_step == 4
    for name in ("metrics.jsonl", "report.json", "plots/mix_weights.csv"):
        assert (tmp_path / "out" / name).read_bytes() == (ref_base / "out" / name).read_bytes(), name


def test_two_data_parallel_ranks_draw_and_weigh_alike(reference, mix_dir, tmp_path):
    """dp = 2 (weights from all-reduced eval losses on each rank) equals the dp = 1 reference run, which takes the
    same global batch as 2 accumulated micro-batches."""
    ref_base, ref_result = reference
    double = launch(adaptive_job(tmp_path, mix_dir, parallel={"dp": 2}, grad_accum=1), tmp_path / "launch")
    np.testing.assert_allclose(double.losses, ref_result.losses, rtol=0, atol=1e-5)
    mix_one = [r for r in rows_of(ref_base) if r["kind"] == "mix"]
    mix_two = [r for r in rows_of(tmp_path) if r["kind"] == "mix"]
    assert [r["step"] for r in mix_two] == [0, 2, 4, 6]
    for a, b in zip(mix_one, mix_two):  # eval losses agree to ~1e-7 (reduction order), η = 20 amplifies it
        assert a["weights"] == pytest.approx(b["weights"], abs=1e-4)
