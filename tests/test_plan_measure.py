"""`python -m tasks plan --measure`: which layouts are candidates, the choice from (injected) timings, the CLI
table, and one real measurement of 1 vs 2 CPU ranks."""

from __future__ import annotations

from pathlib import Path

import pytest

from specs.pretrain import ModelSpec, PretrainSpec
from tasks.__main__ import main
from tasks.train.planning import measure
from tasks.train.planning.measure import Measurement, candidates, choose, measure_layouts, render

REPO = Path(__file__).resolve().parents[1]
TINY = ModelSpec(flavor="tiny", n_layers=2, d_model=32, n_heads=4, n_kv_heads=2)


def timed(dp, tp, pp, tps, problem=None, zero=0):
    return Measurement(dp, tp, pp, zero, 8 * dp, s_per_step=None if tps is None else 8 * dp * 32 / tps,
                       tokens_per_s=tps, problem=problem)


def test_choose_picks_the_fastest_measured_layout():
    rows = [timed(1, 1, 1, 1000.0), timed(2, 1, 1, 1800.0), timed(1, 2, 1, 900.0), timed(1, 1, 2, 700.0),
            timed(4, 1, 1, 5000.0, problem="run failed: RuntimeError: out of memory"), timed(2, 2, 1, None)]
    assert (choose(rows).dp, choose(rows).tp, choose(rows).pp) == (2, 1, 1)
    rows.append(timed(1, 2, 2, 2500.0))
    assert (choose(rows).tp, choose(rows).pp) == (2, 2)
    # within the tie tolerance (timing noise) the fewer ranks and the least model parallelism win
    near = [timed(2, 2, 1, 1000.0), timed(2, 1, 1, 990.0), timed(1, 1, 4, 1005.0)]
    assert (choose(near).dp, choose(near).tp, choose(near).pp) == (2, 1, 1)
    assert (choose(near, tie_tolerance=0.0).pp) == 4
    assert choose([timed(1, 1, 1, None), timed(2, 1, 1, 10.0, problem="x")]) is None
    table = render(rows, choose(rows), "hdr")
    chosen_line = next(line for line in table.splitlines() if "*" in line)
    assert chosen_line.split()[:3] == ["1", "2", "2"] and table.splitlines()[-1].startswith("chosen: dp=1 tp=2 pp=2")


def test_candidates_keep_only_layouts_that_can_run():
    train = PretrainSpec(micro_batch_size=4, grad_accum=2)
    rows = candidates(TINY, train, 4, vocab_size=256, seq_len=32, zero_stage=2)
    runnable = {(m.dp, m.tp, m.pp): m for m in rows if m.problem is None}
    # 2 layers, 2 kv heads: tp ∈ {1, 2}, pp ∈ {1, 2}; 3 ranks only as dp = 3
    assert sorted(runnable) == [(1, 1, 1), (1, 1, 2), (1, 2, 1), (1, 2, 2), (2, 1, 1), (2, 1, 2), (2, 2, 1),
                                (3, 1, 1), (4, 1, 1)]
    assert runnable[(2, 1, 2)].zero_stage == 1 and runnable[(4, 1, 1)].zero_stage == 2  # ZeRO ≤ 1 with a pipeline
    assert runnable[(1, 1, 1)].zero_stage == 0 and runnable[(4, 1, 1)].global_batch == 4 * 2 * 4
    rejected = {(m.dp, m.tp, m.pp): m.problem for m in rows if m.problem}
    assert "parallel.pp: at most model n_layers (2) stages, got 4" in rejected[(1, 1, 4)]
    assert "parallel.tp: must divide model n_heads" in rejected[(1, 4, 1)]
    small = candidates(TINY, train, 1, vocab_size=256, seq_len=32, memory_gb=1e-6)
    assert small[0].problem.startswith("needs ") and "GiB per device" in small[0].problem


def test_plan_measure_cli_prints_the_table_and_the_fastest(monkeypatch, capsys):
    speed = {(1, 1, 1): 1000.0, (2, 1, 1): 1500.0, (1, 2, 1): 1700.0, (1, 1, 2): 600.0}
    seen = []

    def fake(m, model, train, mix_dir, work, *, steps, warmup, seed, accelerator):
        assert (Path(mix_dir) / "packing.json").exists() and steps == 3
        seen.append((m.dp, m.tp, m.pp))
        m.tokens_per_s = speed[(m.dp, m.tp, m.pp)]
        m.s_per_step = m.global_batch * 32 / m.tokens_per_s
        return m

    monkeypatch.setattr(measure, "measure_layout", fake)
    args = ["--root", str(REPO), "plan", "--measure", "--ranks", "2", "--measure-steps", "3",
            "--set", "mix.seq_len=32", "--set", "mix.tokenizer.vocab_size=512"]
    assert main(args) == 0
    out = capsys.readouterr().out
    assert sorted(seen) == sorted(speed)  # every runnable layout of 1 and 2 ranks was measured
    assert "chosen: dp=1 tp=2 pp=1" in out and "1,700 tokens/s" in out
    starred = [line for line in out.splitlines() if "*" in line and not line.startswith("chosen")]
    assert [line.split()[:3] for line in starred] == [["1", "2", "1"]]

    def broken(m, *a, **k):
        m.problem = "run failed: RuntimeError: boom"
        return m

    monkeypatch.setattr(measure, "measure_layout", broken)
    assert main(args) == 2 and "chosen: none" in capsys.readouterr().out


def test_real_measurement_of_one_and_two_ranks(tmp_path):
    train = PretrainSpec(micro_batch_size=4, telemetry={"wandb": "disabled"})
    rows = [m for m in candidates(TINY, train, 2, vocab_size=256, seq_len=32) if (m.tp, m.pp) == (1, 1)]
    assert [(m.dp, m.problem) for m in rows] == [(1, None), (2, None)]
    measure_layouts(rows, TINY, train, vocab_size=256, seq_len=32, steps=3, warmup=1, seed=1,
                    accelerator="cpu", work_dir=tmp_path)
    for m in rows:
        assert m.ok, m.problem
        assert m.s_per_step > 0 and m.tokens_per_s == pytest.approx(m.global_batch * 32 / m.s_per_step, rel=1e-2)
    best = choose(rows, tie_tolerance=0.0)
    assert best.tokens_per_s == max(m.tokens_per_s for m in rows)
    assert not any(tmp_path.iterdir())  # the throw-away run folders are gone
