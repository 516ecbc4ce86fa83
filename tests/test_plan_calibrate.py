"""Estimate vs measured (tasks/train/planning/plan_calibrate.py): the GPU script's throughput JSON read as observations,
the error arithmetic, pending rows, and `plan --measure` printing the comparison beside its own table."""

from __future__ import annotations

import json

import pytest

from specs.pretrain import ModelSpec
from tasks.__main__ import main
from tasks.train.planning import measure
from tasks.train.planning.plan_calibrate import (Observation, comparison_table, estimate, relative_error,
                                        throughput_observations)
from tasks.train.planning.planner import ClusterSpec
from tests.conftest import REPO

H200 = ClusterSpec(nodes=1, gpus_per_node=1, memory_gb=140, device="h200", inter_node="none")


def test_throughput_json_engine_rows_become_observations(tmp_path):
    data = {"args": {"shape": "350m", "seq": 1024, "batch": 16, "zero": 0, "device": "cuda"},
            "results": [{"run": "engine", "tokens_per_s": 81920.0, "device_name": "NVIDIA H200",
                         "config": {"micro_batch": 16, "grad_accum": 1, "precision": "bf16"}},
                        {"run": "nanogpt", "tokens_per_s": 190000.0, "device_name": "NVIDIA H200"}]}
    (tmp_path / "tput-350m.json").write_text(json.dumps(data))
    (obs,) = throughput_observations(tmp_path)           # the references are not the engine: left out
    assert obs.cluster.device == "h200" and (obs.dp, obs.micro_batch, obs.grad_accum) == (1, 16, 1)
    assert obs.measured_s_per_step == pytest.approx(16 * 1024 / 81920.0)
    assert obs.vocab_size == 50304 and obs.model.flavor == "350m"
    cost = estimate(obs)
    assert cost is not None and cost.tokens == 16 * 1024
    assert relative_error(obs, cost) == pytest.approx(cost.step_s / obs.measured_s_per_step - 1)


def test_a_run_over_several_zero_stages_gives_each_row_its_own(tmp_path):
    """`--zero 0,3` (the GPU script's 1b part) records "0,3" in args and each row's stage in its config."""
    rows = [{"run": "engine", "tokens_per_s": t, "device_name": "NVIDIA H200",
             "config": {"micro_batch": 16, "grad_accum": 1, "precision": "bf16", "zero": z}}
            for z, t in ((0, 78833.0), (3, 70000.0))]
    data = {"args": {"shape": "1b", "seq": 1024, "batch": 16, "zero": "0,3", "device": "cuda"}, "results": rows}
    (tmp_path / "tput-1b.json").write_text(json.dumps(data))
    assert [o.zero_stage for o in throughput_observations(tmp_path)] == [0, 3]


def test_comparison_table_marks_pending_rows_and_averages_the_measured():
    shape = dict(model=ModelSpec(flavor="gpt2-124m"), vocab_size=50304, seq_len=1024, cluster=H200, dp=1, tp=1,
                 pp=1, zero_stage=0, micro_batch=16, grad_accum=1)
    est = estimate(Observation("x", "s", **shape)).step_s
    rows = [Observation("pending one", "gpu", **shape),
            Observation("twice as slow", "doc", **shape, measured_s_per_step=2 * est),
            Observation("no peak", "cpu", **{**shape, "cluster": ClusterSpec(device="cpu", inter_node="none")},
                        measured_s_per_step=1.0)]
    text = comparison_table(rows)
    assert "| pending one | gpu |" in text and "| pending |" in text
    assert "| -50% |" in text and "| no peak |" in text
    assert text.splitlines()[-1] == "mean |error| over 1 measured rows: 50%"


def test_plan_measure_prints_estimates_beside_measurements(monkeypatch, capsys):
    def fake(m, model, train, mix_dir, work, *, steps, warmup, seed, accelerator):
        m.s_per_step, m.tokens_per_s = 0.5, m.global_batch * 32 / 0.5
        return m

    monkeypatch.setattr(measure, "measure_layout", fake)
    args = ["--root", str(REPO), "plan", "--measure", "--ranks", "2", "--measure-steps", "1",
            "--set", "mix.seq_len=32", "mix.tokenizer.vocab_size=512"]
    assert main(args + ["--peak-tflops", "0.05"]) == 0
    out = capsys.readouterr().out
    table = out.split("estimate vs measured")[1]
    assert table.count("| plan --measure |") == 4 and "| 0.5 |" in table and "mean |error| over 4" in table
    assert main(args) == 0                                # a CPU without --peak-tflops: no estimate
    assert "| no peak |" in capsys.readouterr().out
