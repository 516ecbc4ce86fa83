"""Kernels and bytes of one eager training step, counted on CPU (issue #29 item 5; tests/helpers/census.py).

    python benchmarks/step_census.py                        # 124M shape: 12 blocks, d 768, vocab 50304, seq 128
    python benchmarks/step_census.py --layers 2 --batch 2   # what tests/test_step_census.py holds

One forward + backward under bf16 autocast (as a GPU runs it), after one warm-up step, for:
  fast        forgeline's training build: fused q/k/v and gate/up, F.rms_norm, RoPE by roll, the chunked loss
  separate    the same model with separate linears and the loss from whole logits (the reference path)
  llama-ref   a compact Llama of the same shape written the usual way (tests/helpers/reference_llama.py): the bar
  nanogpt     the GPT-2 nanoGPT-style model of the same widths (benchmarks/gpu/references.py), for scale
ops = non-view ATen ops dispatched (about one kernel each), MB = bytes of the new tensors they return. Then the loss
alone at vocabulary 50k: the chunked loss against the logits + cross entropy path (peak live bytes, largest
tensor). Counts, not times: the same on any CPU, and what a change that brings back a copy moves.
"""

from __future__ import annotations

import argparse
import importlib.util
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import torch  # noqa: E402
import torch.nn.functional as F  # noqa: E402

MB = 1e6


def gpt_reference():
    spec = importlib.util.spec_from_file_location("gpu_references", ROOT / "benchmarks" / "gpu" / "references.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.MiniGPT


def step_rows(args: argparse.Namespace) -> list[tuple[str, object]]:
    from specs.pretrain import ModelSpec
    from specs.architecture import ModelConfig
    from tasks.train.modeling.model import Transformer, lm_loss
    from tests.helpers.census import census_of_step
    from tests.helpers.reference_llama import RefLlama

    cfg = ModelConfig.from_spec(ModelSpec(flavor=args.shape, n_layers=args.layers), args.vocab, args.seq)
    g = torch.Generator().manual_seed(0)
    ids = torch.randint(0, args.vocab, (args.batch, args.seq), generator=g)
    labels = torch.randint(0, args.vocab, (args.batch, args.seq), generator=g)
    models = {
        "fast": (Transformer(cfg, 0, fused=True), None),
        "separate": (Transformer(cfg, 0), lambda m, i, y: lm_loss(m(i), y)),
        "llama-ref": (RefLlama(args.vocab, args.seq, cfg.n_layers, cfg.n_heads, cfg.n_kv_heads, cfg.d_model,
                               cfg.ffn_hidden), None),
        "nanogpt": (gpt_reference()(args.vocab, args.seq, cfg.n_layers, cfg.n_heads, cfg.d_model, 0), None),
    }
    return [(name, census_of_step(model, ids, labels, loss_fn=fn)) for name, (model, fn) in models.items()]


def loss_rows(vocab: int, tokens: int, d: int) -> list[tuple[str, object]]:
    from tasks.train.modeling.loss import linear_cross_entropy
    from tasks.train.modeling.model import lm_loss
    from tests.helpers.census import count

    g = torch.Generator().manual_seed(1)
    x = torch.randn(tokens, d, generator=g, requires_grad=True)
    w = (torch.randn(vocab, d, generator=g) * 0.05).requires_grad_()
    y = torch.randint(0, vocab, (tokens,), generator=g)
    return [("chunked loss", count(lambda: linear_cross_entropy(x, w, y).backward())),
            ("logits + cross entropy", count(lambda: lm_loss(F.linear(x, w), y).backward()))]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--shape", default="gpt2-124m")
    ap.add_argument("--layers", type=int, default=12)
    ap.add_argument("--vocab", type=int, default=50304)
    ap.add_argument("--seq", type=int, default=128)
    ap.add_argument("--batch", type=int, default=2)
    ap.add_argument("--loss-tokens", type=int, default=4096)
    ap.add_argument("--threads", type=int, default=2)
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    rows = step_rows(args)
    bar = dict(rows)["llama-ref"]
    print(f"one training step, {args.shape} widths × {args.layers} blocks, batch {args.batch} × seq {args.seq}, "
          f"vocab {args.vocab}, bf16 autocast, CPU\n")
    print("| build | ops | MB written | ops / llama-ref | MB / llama-ref |")
    print("|---|---:|---:|---:|---:|")
    for name, c in rows:
        print(f"| {name} | {c.total_ops} | {c.total_bytes / MB:,.1f} | {c.total_ops / bar.total_ops:.2f} | "
              f"{c.total_bytes / bar.total_bytes:.2f} |")
    print(f"\nthe loss alone: {args.loss_tokens} tokens, d 768, vocab {args.vocab}, fp32, forward + backward\n")
    print("| loss | peak MB alive | largest tensor MB | MB written |")
    print("|---|---:|---:|---:|")
    for name, c in loss_rows(args.vocab, args.loss_tokens, 768):
        print(f"| {name} | {c.peak / MB:,.1f} | {c.largest / MB:,.1f} | {c.total_bytes / MB:,.1f} |")


if __name__ == "__main__":
    main()
