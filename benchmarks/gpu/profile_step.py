"""Where a training step of forgeline's model spends its GPU time (issue #29): the plain loop (a) with the
stage's per-block compile, and the same model compiled whole, timed side by side; then a torch.profiler table
of the per-block run's top kernels. Run on the GPU box: python3 benchmarks/gpu/profile_step.py --out DIR."""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from benchmarks.gpu.references import make_batches  # noqa: E402
from specs.architecture import ModelConfig, flops_per_token  # noqa: E402
from specs.pretrain import ModelSpec  # noqa: E402
from tasks.train.parallel.dsconfig import param_groups  # noqa: E402
from tasks.train.modeling.model import Transformer  # noqa: E402
from tasks.train.parallel.parallelize import compile_model, fused_projections  # noqa: E402


def build(cfg: ModelConfig, how: str, device: torch.device):
    model = Transformer(cfg, 0, fused=fused_projections(None)).to(device).train()
    if how == "blocks":
        compile_model(model)
        return model, model
    return model, torch.compile(model)


def run(cfg, how, batches, device, warmup, steps, profile=None):
    model, fwd = build(cfg, how, device)
    opt = torch.optim.AdamW(param_groups(model, 0.1), lr=3e-4, fused=True)

    def step(i):
        x, y = batches[i % len(batches)]
        with torch.autocast("cuda", dtype=torch.bfloat16):
            loss = fwd(x, y)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        opt.zero_grad(set_to_none=True)

    for i in range(warmup):
        step(i)
    torch.cuda.synchronize()
    t0 = time.perf_counter()
    for i in range(steps):
        step(i)
    torch.cuda.synchronize()
    dt = time.perf_counter() - t0
    table = None
    if profile:
        from torch.profiler import ProfilerActivity, profile as prof
        with prof(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as p:
            for i in range(3):
                step(i)
            torch.cuda.synchronize()
        table = p.key_averages().table(sort_by="self_cuda_time_total", row_limit=30, max_name_column_width=70)
    tok = steps * batches[0][0].numel() / dt
    return tok, table


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--shape", default="gpt2-124m")
    ap.add_argument("--batch", type=int, default=16)
    ap.add_argument("--seq", type=int, default=1024)
    ap.add_argument("--out", default=".")
    args = ap.parse_args()
    device = torch.device("cuda")
    cfg = ModelConfig.from_spec(ModelSpec(flavor=args.shape), 50304, args.seq)
    batches = [(x.to(device), y.to(device)) for x, y in make_batches(args.batch, args.seq, 50304, 0)]
    out = {"cfg": {k: getattr(cfg, k) for k in ("d_model", "n_layers", "n_heads", "n_kv_heads", "vocab_size")}}
    fpt = float(flops_per_token(cfg))
    for how in ("whole", "blocks"):
        tok, table = run(cfg, how, batches, device, 5, 10, profile=(how == "blocks"))
        out[how] = {"tok_s": tok, "mfu": tok * fpt / 989e12}
        print(how, f"{tok:,.0f} tok/s, MFU {100 * tok * fpt / 989e12:.1f}%", flush=True)
        if table:
            print(table)
            Path(args.out, "profile.txt").write_text(table)
    Path(args.out, "profile.json").write_text(json.dumps(out, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
