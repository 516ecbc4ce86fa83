"""The LM head's matmul and the cross entropy in one pass over chunks of tokens, so the [N, V] logits (and their
fp32 copy, softmax and gradient) never exist whole: at a 50k vocabulary, 16k tokens of fp32 logits are 3.3 GB,
read and written several times a step, where one chunk is a few hundred MB at most.

    loss = Σ_i w_i · (ce_i + z · lse_i²)      ce_i = lse_i - logit_i[label_i],  lse_i = log Σ_v exp logit_i[v]

with w_i = 1/N (the mean; labels -100 are left out of it, as `F.cross_entropy` does) or the caller's token
weights (SFT's assistant mask). The forward computes, chunk by chunk, the loss and also its gradients with
respect to the hidden states x [N, d] and the head's weight [V, d] (the technique of Liger Kernel's
FusedLinearCrossEntropy and Apple's Cut Cross-Entropy, written with torch ops): dlogits = w·(softmax·(1 + 2z·lse)
- onehot), dx = dlogits @ W, dW += dlogitsᵀ @ x. Backward only scales them by the incoming gradient (a loss
multiplier, DeepSpeed's fp16 loss scale). Matmuls run in the autocast dtype when autocast is on (bf16 on GPUs),
softmax and sums in fp32; dW accumulates in fp32. The same FLOPs as logits + autograd, a fraction of the memory.

Each chunk's elementwise work (fp32 copy, log-sum-exp, softmax, the one-hot, the weights) is some eight passes
over [c, V] in eager PyTorch: a third of a gpt2-124m step's GPU time on an H200 (benchmarks/gpu/profile_step.py).
With `compiled` (the stage's `speed.compile` on) it is `chunk_loss_and_grad` under torch.compile instead, which
fuses it into a reduction and one pointwise pass over the chunk.
"""

from __future__ import annotations

from functools import cache
from typing import Callable

import torch

IGNORE = -100                 # label of a token without loss (F.cross_entropy's default ignore_index)
CHUNK_ELEMENTS = 1 << 25      # logits per chunk (128 MiB in fp32): bounds the loss's working memory


def chunk_tokens(vocab: int) -> int:
    """Tokens per chunk: about CHUNK_ELEMENTS logits, a multiple of 64 rows (GEMM-friendly), at least 64."""
    return max(64, CHUNK_ELEMENTS // vocab // 64 * 64)


def compute_dtype(x: torch.Tensor) -> torch.dtype:
    """What an `F.linear` on x would run in here: the autocast dtype when autocast is on for x's device."""
    kind = x.device.type
    return torch.get_autocast_dtype(kind) if torch.is_autocast_enabled(kind) else x.dtype


def chunk_loss_and_grad(logits: torch.Tensor, labels: torch.Tensor, weights: torch.Tensor, z_loss: float
                        ) -> tuple[torch.Tensor, torch.Tensor]:
    """One chunk's Σ w·(ce + z·lse²) (fp32) and its gradient with respect to the logits [c, V] (in the logits'
    dtype), written out of place, the form torch.compile fuses (the eager path below works in place instead)."""
    lf = logits.float()                                                            # [c, V]
    lse = torch.logsumexp(lf, dim=-1)                                              # [c]
    y = labels.clamp(min=0)                                                        # [c]
    target = lf.gather(1, y[:, None]).squeeze(1)                                   # [c]
    loss = (weights * (lse - target + z_loss * lse * lse)).sum()
    soft = torch.exp(lf - lse[:, None]) * (1 + 2 * z_loss * lse)[:, None]          # softmax · (1 + 2z·lse)
    onehot = torch.arange(lf.size(1), device=lf.device)[None, :] == y[:, None]     # [c, V] bool
    return loss, ((soft - onehot.float()) * weights[:, None]).to(logits.dtype)


@cache
def compiled_chunk() -> Callable:
    """`chunk_loss_and_grad` under torch.compile, made once per process (one graph per chunk shape: the last,
    shorter chunk of a step adds one)."""
    return torch.compile(chunk_loss_and_grad)


class LinearCrossEntropy(torch.autograd.Function):
    """Σ_i w_i (ce_i + z lse_i²) of logits x @ Wᵀ, with the gradients made in forward (module docstring)."""

    @staticmethod
    def forward(ctx, x, weight, labels, token_weights, z_loss, chunk, compiled=False):  # type: ignore[override]
        dtype, kind = compute_dtype(x), x.device.type
        with torch.autocast(kind, enabled=False):
            w = weight.to(dtype)                                                   # [V, d]
            total = torch.zeros((), dtype=torch.float32, device=x.device)
            # gradients only where autograd will ask for them (not under no_grad, not for a frozen head)
            want_x, want_w = ctx.needs_input_grad[0], ctx.needs_input_grad[1]
            dx = torch.empty(x.shape, dtype=x.dtype, device=x.device) if want_x else None
            dw = torch.zeros(weight.shape, dtype=torch.float32, device=x.device) if want_w else None
            for s in range(0, x.size(0), chunk):
                xc, yc, wc = x[s:s + chunk].to(dtype), labels[s:s + chunk], token_weights[s:s + chunk]
                if compiled and (dx is not None or dw is not None):
                    # traced inside a whole-model graph, the plain function (dynamo inlines it either way)
                    fn = chunk_loss_and_grad if torch.compiler.is_compiling() else compiled_chunk()
                    loss, g = fn(xc @ w.t(), yc, wc, z_loss)                       # [], [c, V] in dtype
                    total += loss
                    if dx is not None:
                        dx[s:s + chunk] = (g @ w).to(x.dtype)                      # [c, d]
                    if dw is not None:
                        dw.add_(g.t() @ xc)                                        # [V, d], fp32 sum
                    continue
                logits = (xc @ w.t()).float()                                      # [c, V] one chunk, fp32
                lse = torch.logsumexp(logits, dim=-1)                              # [c]
                rows = torch.arange(yc.size(0), device=x.device)
                target = logits[rows, yc.clamp(min=0)]                             # [c]
                total += (wc * (lse - target + z_loss * lse * lse)).sum()
                if dx is None and dw is None:
                    continue
                grad = logits.sub_(lse[:, None]).exp_()                            # softmax, in place [c, V]
                if z_loss:
                    grad.mul_((1 + 2 * z_loss * lse)[:, None])
                grad[rows, yc.clamp(min=0)] -= 1.0
                grad.mul_(wc[:, None])                                             # ignored rows: weight 0
                g = grad.to(dtype)
                if dx is not None:
                    dx[s:s + chunk] = (g @ w).to(x.dtype)                          # [c, d]
                if dw is not None:
                    dw.add_(g.t() @ xc)                                            # [V, d], fp32 sum
        ctx.save_for_backward(dx, dw)
        ctx.weight_dtype, ctx.used = weight.dtype, False
        return total

    @staticmethod
    def backward(ctx, grad_out):  # type: ignore[override]
        # Scaled in place: a second copy of dW ([V, d] fp32) would cost more than the logits chunk saved. So the
        # graph cannot be backpropagated twice (retain_graph) through this loss: refused, not silently doubled.
        if ctx.used:
            raise RuntimeError("linear_cross_entropy: backward ran twice (its gradients are scaled in place)")
        ctx.used = True
        dx, dw = ctx.saved_tensors
        gx = None if dx is None else dx.mul_(grad_out.to(dx.dtype))
        gw = None if dw is None else dw.mul_(grad_out).to(ctx.weight_dtype)
        return gx, gw, None, None, None, None, None


def linear_cross_entropy(x: torch.Tensor, weight: torch.Tensor, labels: torch.Tensor,
                         token_weights: torch.Tensor | None = None, z_loss: float = 0.0,
                         chunk: int | None = None, compiled: bool = False) -> torch.Tensor:
    """Cross entropy of `x @ weightᵀ` without the whole logits. x [..., d], weight [V, d], labels [...].

    `token_weights` None: the mean over tokens whose label is not -100 (plus z_loss · mean lse²), what
    `model.lm_loss` gives from logits; else Σ token_weights · (ce + z·lse²) (a sum: the caller normalises).
    `compiled`: each chunk's elementwise math fused by torch.compile (module docstring)."""
    flat_x = x.reshape(-1, x.size(-1))                                             # [N, d]
    flat_y = labels.reshape(-1)                                                    # [N]
    if token_weights is None:
        valid = (flat_y != IGNORE).float()
        token_weights = valid / valid.sum()  # no valid token: 0/0 = nan, as F.cross_entropy gives
    else:
        token_weights = token_weights.reshape(-1).float() * (flat_y != IGNORE)
    return LinearCrossEntropy.apply(flat_x, weight, flat_y, token_weights, float(z_loss),
                                    chunk or chunk_tokens(weight.size(0)), compiled)


class LinearTokenLogprobs(torch.autograd.Function):
    """log softmax(x @ Wᵀ)[label] per token, chunk by chunk (preference tuning's per-sequence sums are built from
    these). Unlike the cross entropy above, nothing of the gradient can be made in forward: the weight each token
    gets (dL/dlogp_i) is known only after its sequence's sum went through the DPO loss. So backward recomputes each
    chunk's logits — one more head matmul per chunk — and still never holds the whole [N, V]:
    dlogits = g·(onehot - softmax), dx = dlogits @ W, dW += dlogitsᵀ @ x."""

    @staticmethod
    def forward(ctx, x, weight, labels, chunk):  # type: ignore[override]
        dtype, kind = compute_dtype(x), x.device.type
        out = torch.zeros(x.size(0), dtype=torch.float32, device=x.device)             # [N]
        with torch.autocast(kind, enabled=False), torch.no_grad():
            w = weight.to(dtype)                                                   # [V, d]
            for s in range(0, x.size(0), chunk):
                yc = labels[s:s + chunk].clamp(min=0)
                logits = (x[s:s + chunk].to(dtype) @ w.t()).float()                 # [c, V] one chunk, fp32
                rows = torch.arange(yc.size(0), device=x.device)
                out[s:s + chunk] = logits[rows, yc] - torch.logsumexp(logits, dim=-1)
        out = out.masked_fill(labels == IGNORE, 0.0)
        ctx.save_for_backward(x, weight, labels)
        ctx.chunk, ctx.dtype = chunk, dtype
        return out

    @staticmethod
    def backward(ctx, grad_out):  # type: ignore[override]
        x, weight, labels = ctx.saved_tensors
        want_x, want_w = ctx.needs_input_grad[0], ctx.needs_input_grad[1]
        g_all = grad_out.float().masked_fill(labels == IGNORE, 0.0)                    # [N]
        dx = torch.empty(x.shape, dtype=x.dtype, device=x.device) if want_x else None
        dw = torch.zeros(weight.shape, dtype=torch.float32, device=x.device) if want_w else None
        with torch.autocast(x.device.type, enabled=False):
            w = weight.to(ctx.dtype)
            for s in range(0, x.size(0), ctx.chunk):
                xc, yc, g = x[s:s + ctx.chunk].to(ctx.dtype), labels[s:s + ctx.chunk].clamp(min=0), \
                    g_all[s:s + ctx.chunk]
                grad = torch.softmax((xc @ w.t()).float(), dim=-1)                 # [c, V]
                rows = torch.arange(yc.size(0), device=x.device)
                grad[rows, yc] -= 1.0
                grad.mul_(-g[:, None])                                             # g·(onehot - softmax)
                d = grad.to(ctx.dtype)
                if dx is not None:
                    dx[s:s + ctx.chunk] = (d @ w).to(x.dtype)                      # [c, d]
                if dw is not None:
                    dw.add_(d.t() @ xc)                                            # [V, d], fp32 sum
        return dx, None if dw is None else dw.to(weight.dtype), None, None


def linear_token_logprobs(x: torch.Tensor, weight: torch.Tensor, labels: torch.Tensor,
                          chunk: int | None = None) -> torch.Tensor:
    """log p(label) of every token under logits `x @ weightᵀ`, without the whole logits: x [..., d], weight
    [V, d], labels [...] -> [...] fp32 (0 where the label is -100)."""
    flat_x = x.reshape(-1, x.size(-1))                                             # [N, d]
    out = LinearTokenLogprobs.apply(flat_x, weight, labels.reshape(-1), chunk or chunk_tokens(weight.size(0)))
    return out.reshape(labels.shape)
