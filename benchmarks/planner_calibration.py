"""The planner's step-time model against measured steps (the README's estimate-vs-measured table).

    python benchmarks/planner_calibration.py [--gpu-parts benchmarks/gpu/out/parts] [--skip-cpu]

CPU rows: every layout of 1–2 local CPU ranks of two small shapes is timed by `plan --measure`'s machinery
(tasks/train/planning/measure.py: the pretrain launch path and loop on a synthetic mix), and priced by the cost model
with this CPU's measured fp32 matmul rate (one thread, what each rank gets) as its "peak" — the model then
assumes ASSUMED_MFU of it, as it assumes of a GPU's datasheet peak. GPU rows: the engine rows of the GPU
script's throughput JSONs when a folder of them is given (none exist yet: pending rows), and the stage's H200
figures recorded in issue #29's table (one run).
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from specs import load_params  # noqa: E402
from specs.pretrain import ModelSpec  # noqa: E402
from tasks.train.planning.cluster import ClusterSpec  # noqa: E402
from tasks.train.planning.plan_calibrate import Observation, comparison_table, throughput_observations  # noqa: E402

# Shapes timed on CPU: the default tiny model, and one four times wider per token (compute weighs more).
CPU_SHAPES = {"tiny d128": ["model.flavor=tiny"],
              "d256 4 layers": ["model.flavor=tiny", "model.d_model=256", "model.n_heads=8", "model.n_kv_heads=4"]}
CPU_SETS = ["mix.seq_len=128", "mix.tokenizer.vocab_size=2048", "pretrain.micro_batch_size=8",
            "pretrain.precision=fp32", "pretrain.cpu_threads=1"]  # one thread per rank, as the peak is measured
H200 = ClusterSpec(nodes=1, gpus_per_node=1, memory_gb=140, device="h200", inter_node="none", overhead_gb=0)


def matmul_tflops(n: int = 512, seconds: float = 1.0) -> float:
    """fp32 matmul TFLOP/s of one CPU thread (each measured rank runs on one)."""
    import torch

    torch.set_num_threads(1)
    a, b = torch.randn(n, n), torch.randn(n, n)
    a @ b
    count, start = 0, time.perf_counter()
    while time.perf_counter() - start < seconds:
        a @ b
        count += 1
    return 2 * n**3 * count / (time.perf_counter() - start) / 1e12


def cpu_observations(steps: int, echo) -> list[Observation]:
    from tasks.train.planning.measure import candidates, measure_layouts, observations

    tflops = matmul_tflops()
    echo(f"CPU fp32 matmul, one thread: {tflops * 1e3:.1f} GFLOP/s (the 'peak' the estimates use)")
    cpu = ClusterSpec(device="cpu", peak_tflops=tflops, memory_gb=16, precision="fp32", intra_node="shm",
                      inter_node="none", overhead_gb=0)
    out = []
    for label, sets in CPU_SHAPES.items():
        params = load_params(ROOT / "params.yaml", [*CPU_SETS, *sets])
        train = params.pretrain
        rows = candidates(params.model, train, 2, vocab_size=params.mix.tokenizer.vocab_size,
                          seq_len=params.mix.seq_len)
        measure_layouts(rows, params.model, train, vocab_size=params.mix.tokenizer.vocab_size,
                        seq_len=params.mix.seq_len, steps=steps, warmup=2, accelerator="cpu", progress=echo)
        for m in rows:
            if m.problem:
                echo(f"{label}: dp {m.dp} tp {m.tp} pp {m.pp} not measured: {m.problem}")
        for obs in observations(rows, params, train, cpu, source="plan --measure, CPU"):
            out.append(Observation(**{**obs.__dict__, "label": f"{label}, {obs.label}"}))
    return out


def h200_rows(parts: Path | None) -> list[Observation]:
    """Measured GPU rows from the script's JSONs, else pending ones; plus issue #29's recorded stage figures."""
    measured = throughput_observations(parts) if parts and parts.is_dir() else []
    rows = measured or [Observation(f"{shape} engine", "benchmarks/gpu/run.sh (no JSON yet)", ModelSpec(flavor=shape),
                                    50304, 1024, H200, 1, 1, 1, 0, 16, 1) for shape in ("gpt2-124m", "350m")]
    # Issue #29's table (one run of benchmarks/gpu/run.sh on one H200, before that issue's speed work): the
    # stage at seq 1024 × micro-batch 16, bf16, ZeRO 0: 179,118 tok/s (124M) and 75,938 tok/s (350M).
    recorded = [("gpt2-124m", 179_118), ("350m", 75_938)]
    rows += [Observation(f"{shape} engine", "issue #29 table (one run)", ModelSpec(flavor=shape), 50304, 1024,
                         H200, 1, 1, 1, 0, 16, 1, measured_s_per_step=16 * 1024 / tps) for shape, tps in recorded]
    return rows


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--gpu-parts", type=Path, default=ROOT / "benchmarks" / "gpu" / "out" / "parts",
                    help="folder of the GPU script's tput-*.json")
    ap.add_argument("--skip-cpu", action="store_true", help="leave out the CPU measurements (minutes)")
    ap.add_argument("--steps", type=int, default=5, help="timed steps per CPU layout")
    args = ap.parse_args()
    rows = [] if args.skip_cpu else cpu_observations(args.steps, lambda s: print(s, file=sys.stderr, flush=True))
    rows += h200_rows(args.gpu_parts)
    print(comparison_table(rows))
    return 0


if __name__ == "__main__":
    sys.exit(main())
