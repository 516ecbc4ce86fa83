"""Host time per block and micro-batch of the pretrain stage's engine step, per ZeRO stage, on CPU ranks.

    python benchmarks/zero_host_overhead.py [--depths 2,10] [--steps 30] [--repeats 2]

The step-time model (tasks/train/planning/plan_cost.py) prices compute and communication; what the host does per
step — Python, autograd, DeepSpeed's hooks and bookkeeping — it does not, and that is what separates the ZeRO
stages on a small model: ZeRO-2's gradient hooks and ZeRO-3's gather/release around every block run on the host
whatever the model's width. This times the stage's own loop (benchmarks/pretrain_throughput.py's `engine` run, one
rank, one thread, fp32) at a width where compute is negligible (d_model 64, 8 tokens, vocabulary 256) at two depths;
the slope between them is the host time one block adds to a micro-batch (forward, backward and its share of the
optimizer step), the intercept what the rest of the step costs. Each (stage, depth) runs `--repeats` times in its own
process; the fastest counts (the box's load only ever adds). A GPU host runs the same Python; its kernel launches
replace these tiny CPU kernels, so the figures are what a GPU step costs the host before any kernel is slow.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SHAPE = ["model.d_model=64", "model.n_heads=4", "model.n_kv_heads=2", "model.ffn_hidden=128"]


def seconds_per_step(depth: int, zero: int, steps: int) -> float:
    """Fastest-run seconds of one timed step of the engine at `depth` blocks and ZeRO `zero`."""
    with tempfile.TemporaryDirectory(prefix="zero-host-") as tmp:
        out = Path(tmp) / "t.json"
        sets = [a for s in [*SHAPE, f"model.n_layers={depth}"] for a in ("--set", s)]
        cmd = [sys.executable, str(ROOT / "benchmarks" / "pretrain_throughput.py"), "--device", "cpu", "--shape",
               "tiny", "--seq", "8", "--batch", "1", "--vocab", "256", "--steps", str(steps), "--warmup", "5",
               "--runs", "engine", "--zero", str(zero), "--json", str(out), *sets]
        subprocess.run(cmd, check=True, capture_output=True, text=True)
        (r,) = json.loads(out.read_text())["results"]
        return r["seconds"] / steps


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--depths", default="2,10", help="two block counts")
    p.add_argument("--steps", type=int, default=30)
    p.add_argument("--repeats", type=int, default=2)
    p.add_argument("--zero", default="0,1,2,3")
    args = p.parse_args(argv)
    lo, hi = (int(d) for d in args.depths.split(","))
    print(f"| ZeRO | ms/step at {lo} blocks | ms/step at {hi} blocks | ms per block | rest of the step, ms |")
    print("|---:|---:|---:|---:|---:|")
    for zero in (int(z) for z in args.zero.split(",")):
        t = {d: min(seconds_per_step(d, zero, args.steps) for _ in range(args.repeats)) for d in (lo, hi)}
        per_block = (t[hi] - t[lo]) / (hi - lo)
        print(f"| {zero} | {t[lo] * 1e3:.2f} | {t[hi] * 1e3:.2f} | {per_block * 1e3:.3f} | "
              f"{(t[lo] - lo * per_block) * 1e3:.2f} |", flush=True)


if __name__ == "__main__":
    main()
