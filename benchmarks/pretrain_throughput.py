"""Pretraining throughput: forgeline's DeepSpeed engine against two plain PyTorch references (issue #4).

    python benchmarks/pretrain_throughput.py                                  # GPU: 350m, seq 1024, batch 16, bf16
    python benchmarks/pretrain_throughput.py --shape gpt2-124m --compile --json out.json     # + the figures as JSON
    python benchmarks/pretrain_throughput.py --device cpu --shape tiny --seq 128 --batch 4 --steps 3 --warmup 1 \
        --precision fp32

Runs, each on the same synthetic random-token batches (seeded, generated on the host and copied to the device
every step, as the stage's data loader does):
  engine   forgeline's pretrain path: `tasks.train.engine.Engine` (one rank, DeepSpeed config from
           `tasks.train.dsconfig.ds_config`) over `tasks.train.model.Transformer`, stepped as the pretrain objective does (`engine_step`).
  plain    (a) the same `Transformer` in a plain loop: bf16 autocast on GPU, fused AdamW on GPU, grad clip 1.0,
           optionally `torch.compile` (--compile): what the engine costs.
  nanogpt  (b) a compact nanoGPT-style GPT written here (LayerNorm, GELU MLP, learned positions, causal SDPA,
           tied head) with the flavor's depth/width/heads and the same sequence length: the usual bar.

Each run happens in its own child process so that its peak memory (CUDA `max_memory_allocated`, or on CPU the
process's peak RSS, which includes the imported libraries) is its own and DeepSpeed state cannot leak
into the references. tokens/s is timed over --steps steps after --warmup untimed ones, with
`torch.cuda.synchronize()` at both ends. MFU = tokens/s · FLOPs/token / device peak (tasks.train.telemetry);
FLOPs/token is the PaLM 6·N + 12·L·d·T count of each model (tasks.train.config); CPU (or an unlisted device)
gives "unknown".
Every run reads its loss back once per step (the engine does so before the backward, by design).
"""

from __future__ import annotations

import argparse
import logging
import json
import math
import os
import resource
import socket
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import torch  # noqa: E402  (after the sys.path insert above)
import torch.nn.functional as F  # noqa: E402
from torch import nn  # noqa: E402

RUNS = ("engine", "plain", "nanogpt")
LABELS = {"engine": "engine (DeepSpeed)", "plain": "(a) plain torch loop", "nanogpt": "(b) nanoGPT-style"}
N_BATCHES = 4  # distinct synthetic batches cycled through (enough to defeat any caching of one input)


# ------------------------------------------------------------------------------------------ reference (b)
class GPTBlock(nn.Module):
    """Pre-LN GPT-2 block: x + attn(ln(x)), x + mlp(ln(x)); 4·d GELU MLP, biases on."""

    def __init__(self, d: int, n_heads: int, n_layers: int):
        super().__init__()
        self.n_heads = n_heads
        self.ln1, self.ln2 = nn.LayerNorm(d), nn.LayerNorm(d)
        self.qkv, self.proj = nn.Linear(d, 3 * d), nn.Linear(d, d)
        self.fc, self.out = nn.Linear(d, 4 * d), nn.Linear(4 * d, d)
        for lin in (self.proj, self.out):  # residual projections scaled (GPT-2) so depth keeps the variance
            lin.residual = True  # type: ignore[attr-defined]

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        B, T, C = x.shape
        q, k, v = self.qkv(self.ln1(x)).split(C, dim=2)                           # 3 × [B, T, C]
        q, k, v = (t.view(B, T, self.n_heads, C // self.n_heads).transpose(1, 2) for t in (q, k, v))  # [B, h, T, hd]
        y = F.scaled_dot_product_attention(q, k, v, is_causal=True)               # [B, h, T, hd]
        x = x + self.proj(y.transpose(1, 2).reshape(B, T, C))                     # [B, T, C]
        return x + self.out(F.gelu(self.fc(self.ln2(x)), approximate="tanh"))      # [B, T, C]


class MiniGPT(nn.Module):
    """Token + learned position embeddings, GPT blocks, final LayerNorm, head tied to the token embedding."""

    def __init__(self, vocab: int, seq_len: int, n_layers: int, n_heads: int, d: int, seed: int):
        super().__init__()
        torch.manual_seed(seed)
        self.wte, self.wpe = nn.Embedding(vocab, d), nn.Embedding(seq_len, d)
        self.blocks = nn.ModuleList([GPTBlock(d, n_heads, n_layers) for _ in range(n_layers)])
        self.ln_f = nn.LayerNorm(d)
        self.head = nn.Linear(d, vocab, bias=False)
        self.head.weight = self.wte.weight
        for m in self.modules():
            if isinstance(m, (nn.Linear, nn.Embedding)):
                std = 0.02 / math.sqrt(2 * n_layers) if getattr(m, "residual", False) else 0.02
                nn.init.normal_(m.weight, 0.0, std)
                if getattr(m, "bias", None) is not None:
                    nn.init.zeros_(m.bias)

    def forward(self, ids: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
        pos = torch.arange(ids.size(1), device=ids.device)                         # [T]
        x = self.wte(ids) + self.wpe(pos)                                          # [B, T, d]
        for block in self.blocks:
            x = block(x)
        logits = self.head(self.ln_f(x))                                           # [B, T, V]
        return F.cross_entropy(logits.float().view(-1, logits.size(-1)), labels.view(-1))

    def flops_per_token(self, seq_len: int) -> float:
        """6·N + 12·L·d·T with N = matmul weights: blocks' Linear weights + the head (V·d), as for forgeline."""
        from tasks.train.config import transformer_flops_per_token

        n = sum(m.weight.numel() for b in self.blocks for m in b.modules() if isinstance(m, nn.Linear))
        n += self.head.weight.numel()
        d = self.wte.weight.size(1)
        return float(transformer_flops_per_token(n, len(self.blocks), d, seq_len))


# ------------------------------------------------------------------------------------------------ helpers
def model_config(args: argparse.Namespace):
    from specs.pretrain import ModelSpec
    from tasks.train.config import ModelConfig

    vocab = args.vocab or (8192 if args.shape == "tiny" else 50304)  # tokenizer-like vocab for tiny; GPT-2 padded
    return ModelConfig.from_spec(ModelSpec(flavor=args.shape), vocab, args.seq)


def make_batches(args: argparse.Namespace, vocab: int) -> list[tuple[torch.Tensor, torch.Tensor]]:
    """Seeded random token rows [B, T + 1] split into (inputs, labels), on the host."""
    g = torch.Generator().manual_seed(args.seed)
    rows = [torch.randint(0, vocab, (args.batch, args.seq + 1), generator=g) for _ in range(N_BATCHES)]
    return [(r[:, :-1].contiguous(), r[:, 1:].contiguous()) for r in rows]


class SyntheticData:
    """What the pretrain objective reads from `TrainData`: one micro-batch per step (grad_accum 1, dp 1)."""

    def __init__(self, batches: list[tuple[torch.Tensor, torch.Tensor]]):
        self.batches = batches

    def micro_batches(self, step: int, dp_rank: int) -> list[tuple[torch.Tensor, torch.Tensor]]:
        return [self.batches[step % len(self.batches)]]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def peak_memory(device: torch.device) -> int:
    """Bytes: CUDA peak allocated, or this process's peak RSS (Linux ru_maxrss is in KiB)."""
    if device.type == "cuda":
        return torch.cuda.max_memory_allocated(device)
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024


def timed(step_fn, args: argparse.Namespace, device: torch.device, min_warmup: int = 0) -> float:
    """Seconds for --steps calls of step_fn(i) after max(--warmup, min_warmup) untimed ones."""
    warmup = max(args.warmup, min_warmup)
    for i in range(warmup):
        step_fn(i)
    if device.type == "cuda":
        torch.cuda.synchronize(device)
    t0 = time.perf_counter()
    for i in range(warmup, warmup + args.steps):
        step_fn(i)
    if device.type == "cuda":
        torch.cuda.synchronize(device)
    return time.perf_counter() - t0


def engine_step(engine, data: SyntheticData, i: int) -> float | None:
    """The trainer's step on the engine's step API (forward, backward + DeepSpeed step, grad norm), as the pretrain
    objective drives it with one micro-batch per rank (the stability guard's bookkeeping is not timed)."""
    for x, y in data.micro_batches(i, 0):
        engine.backward_and_step(engine.forward(x.to(engine.device), y.to(engine.device)))
    return engine.grad_norm()


# ------------------------------------------------------------------------------------------------- runs
def run_engine(args, cfg, batches, device) -> tuple[float, int, float]:
    from specs.pretrain import ModelSpec, ParallelSpec, PretrainJob, PretrainSpec
    from specs.train import StabilitySpec
    from tasks.train.config import flops_per_token, param_count
    from tasks.train.dsconfig import ds_config
    from tasks.train.engine import Engine
    from tasks.train.parallelize import build_layout, init_distributed, teardown
    from deepspeed.utils import logger as ds_logger

    os.environ.update(RANK="0", LOCAL_RANK="0", WORLD_SIZE="1", MASTER_ADDR="127.0.0.1",
                      MASTER_PORT=str(free_port()))
    job = PretrainJob(model=ModelSpec(flavor=args.shape),
                      parallel=ParallelSpec(zero_stage=args.zero, accelerator=device.type),
                      train=PretrainSpec(steps=args.warmup + args.steps, micro_batch_size=args.batch,
                                         precision=args.precision, stability=StabilitySpec(enabled=False)))
    ds_logger.setLevel(logging.WARNING)
    init_distributed("nccl" if device.type == "cuda" else None)
    try:
        layout = build_layout(job.parallel)
        engine = Engine(cfg, job, layout, args.seed, ds_config(job.train, job.parallel))
        data = SyntheticData(batches)
        seconds = timed(lambda i: engine_step(engine, data, i), args, device)
    finally:
        teardown()
    return seconds, param_count(cfg), float(flops_per_token(cfg))


def run_plain(args, model: nn.Module, batches, device) -> float:
    """A plain training step: autocast forward, backward, clip, (fused) AdamW, loss read back."""
    from tasks.train.dsconfig import param_groups

    model = model.to(device).train()
    fused = device.type == "cuda"
    opt = torch.optim.AdamW(param_groups(model, 0.1), lr=3e-4, betas=(0.9, 0.95), fused=fused)
    fwd = torch.compile(model) if args.compile else model
    use_amp = args.precision == "bf16"
    dev_batches = batches  # copied each step (non_blocking from pinned memory on GPU), like the engine's inputs
    if device.type == "cuda":
        dev_batches = [(x.pin_memory(), y.pin_memory()) for x, y in batches]

    def step(i: int) -> None:
        x, y = dev_batches[i % len(dev_batches)]
        x, y = x.to(device, non_blocking=True), y.to(device, non_blocking=True)
        with torch.autocast(device.type, dtype=torch.bfloat16, enabled=use_amp):
            loss = fwd(x, y)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        opt.zero_grad(set_to_none=True)
        float(loss)

    # compiled: step 1 compiles, step 2 recompiles once (model.py's RoPE-table cache guard changes after step 1)
    return timed(step, args, device, min_warmup=2 if args.compile else 0)


def child(args: argparse.Namespace) -> dict:
    """One run in this process; returns its measurements."""
    from tasks.train.config import flops_per_token, param_count
    from tasks.train.model import Transformer

    torch.manual_seed(args.seed)
    device = torch.device(args.device)
    if device.type == "cuda":
        torch.cuda.set_device(0)
        torch.cuda.reset_peak_memory_stats(device)
    cfg = model_config(args)
    batches = make_batches(args, cfg.vocab_size)
    if args.child == "engine":
        seconds, params, fpt = run_engine(args, cfg, batches, device)
    elif args.child == "plain":
        seconds = run_plain(args, Transformer(cfg, args.seed), batches, device)
        params, fpt = param_count(cfg), float(flops_per_token(cfg))
    else:
        model = MiniGPT(cfg.vocab_size, cfg.seq_len, cfg.n_layers, cfg.n_heads, cfg.d_model, args.seed)
        params, fpt = sum(p.numel() for p in model.parameters()), model.flops_per_token(cfg.seq_len)
        seconds = run_plain(args, model, batches, device)
    return {"run": args.child, "params": params, "flops_per_token": fpt, "seconds": seconds,
            "tokens_per_s": args.steps * args.batch * args.seq / seconds, "peak_bytes": peak_memory(device),
            "device_name": torch.cuda.get_device_name(device) if device.type == "cuda" else "cpu"}


def mfu_of(result: dict, precision: str) -> float | None:
    from tasks.train.telemetry import UnknownDeviceError, mfu, peak_flops

    try:
        peak = peak_flops(result["device_name"], precision).flops
    except UnknownDeviceError:
        return None
    return mfu(result["tokens_per_s"], result["flops_per_token"], peak, 1)


def launch(args: argparse.Namespace, run: str) -> dict:
    """Run `run` in a child process (same arguments) and parse its RESULT line."""
    env = dict(os.environ)
    if args.device == "cpu":
        env["DS_ACCELERATOR"] = "cpu"  # DeepSpeed's CPU accelerator without the fallback warning
        env.setdefault("OMP_NUM_THREADS", "1")  # oversubscribed threads made CPU steps 10-30x slower (FACTS.md)
    cmd = [sys.executable, str(Path(__file__).resolve()), *sys.argv[1:], "--child", run]
    proc = subprocess.run(cmd, env=env, capture_output=True, text=True, check=False)
    for line in reversed(proc.stdout.splitlines()):
        if line.startswith("RESULT "):
            return json.loads(line[len("RESULT "):])
    tail = (proc.stdout + proc.stderr)[-3000:]
    raise RuntimeError(f"run {run} failed (exit {proc.returncode}):\n{tail}")


def table(results: list[dict], args: argparse.Namespace) -> str:
    rows = [("run", "params", "tokens/s", "MFU", "peak mem")]
    for r in results:
        m = mfu_of(r, args.precision)
        rows.append((LABELS[r["run"]], f"{r['params'] / 1e6:.1f}M", f"{r['tokens_per_s']:,.0f}",
                     "unknown" if m is None else f"{m:.1%}", f"{r['peak_bytes'] / 2**30:.2f} GiB"))
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]
    lines = ["  ".join(c.ljust(w) if i == 0 else c.rjust(w) for i, (c, w) in enumerate(zip(row, widths)))
             for row in rows]
    lines.insert(1, "  ".join("-" * w for w in widths))
    by = {r["run"]: r["tokens_per_s"] for r in results}
    if "engine" in by:
        for ref, name in (("plain", "engine / (a)"), ("nanogpt", "engine / (b)")):
            if ref in by:
                lines.append(f"{name}: {by['engine'] / by[ref]:.2f}×")
    return "\n".join(lines)


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--shape", choices=("tiny", "gpt2-124m", "350m"), default="350m")
    p.add_argument("--seq", type=int, default=1024, help="sequence length (tokens per row)")
    p.add_argument("--batch", type=int, default=16, help="rows per step (one micro-batch)")
    p.add_argument("--steps", type=int, default=20, help="timed steps")
    p.add_argument("--warmup", type=int, default=5, help="untimed steps first (allocator, autotune, compile)")
    p.add_argument("--device", choices=("cpu", "cuda"), default="cuda" if torch.cuda.is_available() else "cpu")
    p.add_argument("--precision", choices=("bf16", "fp32"), default="bf16")
    p.add_argument("--compile", action="store_true", help="torch.compile the models of references (a) and (b)")
    p.add_argument("--zero", type=int, choices=(0, 1, 2, 3), default=0, help="engine's ZeRO stage")
    p.add_argument("--vocab", type=int, default=None, help="vocab size (default: 8192 for tiny, else 50304)")
    p.add_argument("--runs", default=",".join(RUNS), help=f"comma-separated subset of {','.join(RUNS)}")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--json", type=Path, default=None, help="also write the measurements (and MFU) here, for "
                   "benchmarks/gpu/run.sh's table")
    p.add_argument("--child", choices=RUNS, help=argparse.SUPPRESS)  # internal: run one measurement here
    args = p.parse_args(argv)
    if args.device == "cuda" and not torch.cuda.is_available():
        p.error("--device cuda: no CUDA device visible")
    unknown = set(args.runs.split(",")) - set(RUNS)
    if unknown:
        p.error(f"--runs: unknown {sorted(unknown)}")
    return args


def main() -> None:
    args = parse_args()
    if args.child:
        print("RESULT " + json.dumps(child(args)), flush=True)
        return
    runs = [r for r in RUNS if r in args.runs.split(",")]
    print(f"shape {args.shape}, seq {args.seq}, batch {args.batch}, {args.precision}, device {args.device}, "
          f"{args.steps} timed steps after {args.warmup} warm-up, compile {args.compile}, ZeRO {args.zero}"
          + (f", OMP_NUM_THREADS {os.environ.get('OMP_NUM_THREADS', '1')}" if args.device == "cpu" else ""),
          flush=True)
    results = [launch(args, run) for run in runs]
    if results and results[0]["device_name"] != "cpu":
        print(f"device: {results[0]['device_name']}")
    print(table(results, args))
    if args.json:
        rows = [{**r, "mfu": mfu_of(r, args.precision)} for r in results]
        keep = ("shape", "seq", "batch", "steps", "warmup", "device", "precision", "compile", "zero")
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps({"args": {k: getattr(args, k) for k in keep}, "results": rows}, indent=1))


if __name__ == "__main__":
    main()
