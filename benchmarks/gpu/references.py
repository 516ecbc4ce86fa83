"""The plain-PyTorch yardsticks `benchmarks/pretrain_throughput.py` measures the stage against.

  plain             (a) forgeline's own `Transformer` in a plain loop, built and compiled as the stage's resolved
                    spec says (fused projections, per-block `torch.compile` when the stage compiles), bf16
                    autocast, fused AdamW on CUDA, grad clip 1.0: what the engine and the trainer around it cost.
  nanogpt           (b) a compact nanoGPT-style GPT (LayerNorm, GELU MLP, learned positions, causal SDPA, tied
                    head) with the flavor's depth, width and heads, eager.
  nanogpt-compiled  (b′) the same model as nanoGPT's train.py runs it: `torch.compile` of the whole model, fused
                    AdamW, TF32 matmuls, bf16 autocast, SDPA (flash/cuDNN kernels on a GPU): the bar to beat.

Every reference reads its loss back every `READ_EVERY` steps, as nanoGPT's loop does at its log interval, not
every step: a host read per step is a cost the stage must avoid, not one the yardstick should share.
"""

from __future__ import annotations

import math
import time
from typing import Any, Callable

import torch
import torch.nn.functional as F
from torch import nn

READ_EVERY = 10  # nanoGPT's log_interval: the loss is read back (a host synchronisation) this often
N_BATCHES = 4    # distinct synthetic batches cycled through (enough to defeat any caching of one input)


class GPTBlock(nn.Module):
    """Pre-LN GPT-2 block: x + attn(ln(x)), x + mlp(ln(x)); 4·d GELU MLP, biases on."""

    def __init__(self, d: int, n_heads: int):
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
        self.blocks = nn.ModuleList([GPTBlock(d, n_heads) for _ in range(n_layers)])
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
        from specs.architecture import transformer_flops_per_token

        n = sum(m.weight.numel() for b in self.blocks for m in b.modules() if isinstance(m, nn.Linear))
        n += self.head.weight.numel()
        d = self.wte.weight.size(1)
        return float(transformer_flops_per_token(n, len(self.blocks), d, seq_len))


def make_batches(batch: int, seq: int, vocab: int, seed: int) -> list[tuple[torch.Tensor, torch.Tensor]]:
    """Seeded random token rows [B, T + 1] split into (inputs, labels), on the host."""
    g = torch.Generator().manual_seed(seed)
    rows = [torch.randint(0, vocab, (batch, seq + 1), generator=g) for _ in range(N_BATCHES)]
    return [(r[:, :-1].contiguous(), r[:, 1:].contiguous()) for r in rows]


def sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def timed(step_fn: Callable[[int], None], warmup: int, steps: int, device: torch.device, trace: Any = None,
          trace_steps: int = 0) -> dict[str, Any]:
    """`step_fn(i)` for `warmup` untimed then `steps` timed steps: the first step's seconds (compilation lands
    there), the whole warm-up's, and the timed steps' (device synchronised at both ends of each span); with a
    `trace` (benchmarks/gpu/trace.py), `trace_steps` more steps under torch.profiler, outside the timing."""
    t0 = time.perf_counter()
    first = None
    for i in range(warmup):
        step_fn(i)
        if i == 0:
            sync(device)
            first = time.perf_counter() - t0
    sync(device)
    t1 = time.perf_counter()
    for i in range(warmup, warmup + steps):
        step_fn(i)
    sync(device)
    out: dict[str, Any] = {"first_step_s": first if first is not None else 0.0, "warmup_s": t1 - t0,
                           "seconds": time.perf_counter() - t1}
    if trace is not None and trace_steps:
        trace.start()
        for i in range(warmup + steps, warmup + steps + trace_steps):
            step_fn(i)
        sync(device)
        out["trace"] = trace.stop(trace_steps)
    return out


def plain_loop(model: nn.Module, batches: list, device: torch.device, *, bf16: bool, compiled: Callable | None,
               warmup: int, steps: int, loss_kwargs: dict[str, Any] | None = None, trace: Any = None,
               trace_steps: int = 0) -> dict[str, Any]:
    """A plain training step: autocast forward, backward, clip 1.0, (fused) AdamW, the loss read every
    READ_EVERY steps. `compiled`: how the forward is compiled (None: eager)."""
    from tasks.train.parallel.dsconfig import param_groups

    model = model.to(device).train()
    opt = torch.optim.AdamW(param_groups(model, 0.1), lr=3e-4, betas=(0.9, 0.95), fused=device.type == "cuda")
    fwd = compiled(model) if compiled else model
    if device.type == "cuda":  # copied each step (non_blocking from pinned memory), like the stage's inputs
        batches = [(x.pin_memory(), y.pin_memory()) for x, y in batches]
    kwargs = loss_kwargs or {}

    def step(i: int) -> None:
        x, y = batches[i % len(batches)]
        x, y = x.to(device, non_blocking=True), y.to(device, non_blocking=True)
        with torch.autocast(device.type, dtype=torch.bfloat16, enabled=bf16):
            loss = fwd(x, y, **kwargs)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        opt.zero_grad(set_to_none=True)
        if i % READ_EVERY == 0:
            float(loss.detach())

    return timed(step, warmup, steps, device, trace, trace_steps)


def run_reference(kind: str, cfg: Any, spec: Any, batches: list, device: torch.device, *, warmup: int, steps: int,
                  seed: int, backend: str, trace: Any = None, trace_steps: int = 0) -> dict[str, Any]:
    """Reference `kind` (plain, nanogpt, nanogpt-compiled) on `cfg`'s shape: timings, parameters, FLOPs/token.
    `spec`: the stage's resolved PretrainJob ((a) follows its precision and compile setting); `backend`: the
    torch.compile backend (inductor on a GPU; aot_eager keeps a CPU dry run from compiling C++)."""
    from specs.architecture import flops_per_token, param_count

    bf16 = spec.train.precision == "bf16"
    if kind == "plain":
        from tasks.train.modeling.model import Transformer
        from tasks.train.parallel.parallelize import compile_model, fused_projections

        model = Transformer(cfg, seed, fused=fused_projections(None))  # the projections the stage builds
        scope = spec.train.speed.scope_at(1, 1, spec.parallel.zero_stage) \
            if spec.train.speed.compiles(device.type == "cuda") else "no"
        if scope != "no":
            compile_model(model, scope)  # as the stage does (blocks in place or the whole forward; the loss math)
        z = {"z_loss": spec.train.z_loss} if getattr(spec.train, "z_loss", 0.0) else {}
        out = plain_loop(model, batches, device, bf16=bf16, compiled=None, warmup=warmup, steps=steps,
                         loss_kwargs=z, trace=trace, trace_steps=trace_steps)
        return {**out, "params": param_count(cfg), "flops_per_token": float(flops_per_token(cfg)),
                "compiled": scope}
    model = MiniGPT(cfg.vocab_size, cfg.seq_len, cfg.n_layers, cfg.n_heads, cfg.d_model, seed)
    params, fpt = sum(p.numel() for p in model.parameters()), model.flops_per_token(cfg.seq_len)
    compiled = None
    if kind == "nanogpt-compiled":
        torch.backends.cuda.matmul.allow_tf32 = True  # nanoGPT's train.py sets both
        torch.backends.cudnn.allow_tf32 = True
        compiled = lambda m: torch.compile(m, backend=backend)  # noqa: E731
    out = plain_loop(model, batches, device, bf16=bf16, compiled=compiled, warmup=warmup, steps=steps,
                     trace=trace, trace_steps=trace_steps)
    return {**out, "params": params, "flops_per_token": fpt,
            "compiled": f"whole model ({backend})" if compiled else "no"}
