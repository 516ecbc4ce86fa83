"""A real pretrain through the stage's own code path, a few steps on a mix made on the fly.

    python benchmarks/gpu/pretrain_smoke.py --device cuda --out parts/pretrain.json     # bf16 on the GPU
    python benchmarks/gpu/pretrain_smoke.py --device cpu --out /tmp/p.json             # the same path, fp32

`tasks.pretrain.run` (what `python -m tasks pretrain` calls) on a synthetic mix (`tasks.train.inputs.synthetic
.synthetic_mix`: packed shards, index, packing.json as the mix stage writes them), one rank, in-process launch,
DeepSpeed engine, checkpoint, consolidated weights. Checks what the run must have produced (every step's loss
finite, the precision DeepSpeed was configured with, the checkpoint and its manifest, the weights loadable) and
writes them with the timing as JSON; exits 1 when a check fails (the JSON says which).
"""

from __future__ import annotations

import argparse
import json
import math
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

SHAPES = {  # (flavor, seq_len, vocab, micro-batch): on a GPU the throughput part's 124M shape, whose compiled
    "cuda": ("gpt2-124m", 1024, 50304, 16),  # blocks the inductor cache then holds; tiny on CPU
    "cpu": ("tiny", 64, 512, 2),
}


def ds_precision(ds: dict) -> str:
    """The precision a DeepSpeed config trains in: its bf16 section or bf16 torch_autocast mode, fp16, or fp32."""
    if ds.get("bf16", {}).get("enabled") or (ds.get("torch_autocast", {}).get("enabled")
                                             and ds["torch_autocast"].get("dtype") in ("bfloat16", "bf16")):
        return "bf16"
    return "fp16" if ds.get("fp16", {}).get("enabled") else "fp32"


def run(device: str, steps: int, root: Path) -> dict:
    import torch

    from specs.pretrain import PretrainJob
    from tasks import pretrain
    from tasks.core.runner import StagePaths
    from tasks.train.inputs.synthetic import synthetic_mix
    from tasks.train.checkpointing.weights import load_weights

    flavor, seq, vocab, micro = SHAPES[device]
    synthetic_mix(root / "data" / "mix", vocab_size=vocab, seq_len=seq, docs=max(64, 2 * micro * steps + 16),
                  val_docs=16)
    precision = "bf16" if device == "cuda" else "fp32"  # what the stage's `precision: auto` must resolve to
    spec = PretrainJob.model_validate({
        "model": {"flavor": flavor}, "parallel": {"accelerator": device},
        "train": {"steps": steps, "micro_batch_size": micro, "log_every": 1,
                  "eval_every": steps, "eval_batches": 1, "checkpoint_every": steps,
                  "optim": {"warmup_steps": 1}}})
    paths = StagePaths(root=root, stage="pretrain", seed=0)
    paths.out.mkdir(parents=True, exist_ok=True)
    if device == "cuda":
        torch.cuda.reset_peak_memory_stats()
    t0 = time.perf_counter()
    result = pretrain.run(spec, paths)
    wall = time.perf_counter() - t0
    out = paths.out
    ds = json.loads((out / "ds_config.json").read_text())
    rows = [json.loads(x) for x in (out / "metrics.jsonl").read_text().splitlines()]
    losses = [r["loss"] for r in rows if r["kind"] == "train"]
    ckpt = root / "checkpoints" / "pretrain" / f"step{steps:06d}"
    state = load_weights(out)
    checks = {
        f"{steps} finite train losses": len(losses) == steps and all(math.isfinite(x) for x in losses),
        f"DeepSpeed config in {precision}": ds_precision(ds) == precision,
        "checkpoint with manifest": (ckpt / "forgeline.json").exists(),
        "consolidated fp32 weights": bool(state) and all(t.dtype == torch.float32 for t in state.values()),
    }
    return {
        "device": torch.cuda.get_device_name(0) if device == "cuda" else "cpu", "flavor": flavor, "seq_len": seq,
        "micro_batch": micro, "precision": precision, "steps": result.counts["steps"],
        "param_count": result.counts["param_count"], "losses": losses, "val_loss": result.counts["val_loss"],
        "wall_s": round(wall, 2), "summary": result.summary,
        "peak_gib": round(torch.cuda.max_memory_allocated() / 2**30, 2) if device == "cuda" else None,
        "checks": checks, "ok": all(checks.values()),
    }


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--device", choices=sorted(SHAPES), default="cuda")
    p.add_argument("--steps", type=int, default=2)
    p.add_argument("--out", type=Path, required=True, help="JSON summary written here")
    p.add_argument("--root", type=Path, default=None, help="project root to run in (default: a temp folder)")
    args = p.parse_args()
    with tempfile.TemporaryDirectory(prefix="forgeline-smoke-") as tmp:
        summary = run(args.device, args.steps, args.root or Path(tmp))
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(summary, indent=1))
    print(json.dumps({k: v for k, v in summary.items() if k != "summary"}))
    return 0 if summary["ok"] else 1


if __name__ == "__main__":
    raise SystemExit(main())
