"""Memory of the LM loss under tensor parallelism: the gathered logits + `F.cross_entropy` (before #13's
vocab-parallel loss) against `tensor_parallel.vocab_parallel_cross_entropy` on the same rank's columns, on local
gloo CPU ranks, side by side in one run.

    python benchmarks/vocab_loss_memory.py                       # tp 2, 2048 tokens, V 65536, d 512, bf16
    python benchmarks/vocab_loss_memory.py --tp 4 --tokens 4096

Each (path, rank) is its own fresh spawned process. Per rank: the bytes autograd keeps for backward after the
loss's forward (distinct storages of every saved tensor, the head's weight and input excluded: what the loss
itself adds), and the peak RSS growth of forward + backward over the RSS just before (VmHWM, reset there).
"""

from __future__ import annotations

import argparse
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
GB = 1e9


def loss_rank(rank: int, world: int, path: str, tokens: int, vocab: int, d_model: int) -> dict[str, float]:
    import torch
    import torch.distributed as dist

    from tasks.train.modeling.model import lm_loss
    from tasks.train.parallel.tensor_parallel import vocab_parallel_lm_loss, vocab_parallel_logits
    from tasks.train.parallel.tp_context import TPContext
    from tests.helpers.train import saved_activations, saved_bytes
    from tests.helpers.init_meta import peak_growth, start_peak

    tp = TPContext(rank, world, dist.new_group(list(range(world))))
    gen = torch.Generator().manual_seed(0)  # TP peers see the same input and labels; each holds its own rows
    x = torch.randn(1, tokens, d_model, generator=gen).bfloat16().requires_grad_()   # the final norm's output
    labels = torch.randint(0, vocab, (1, tokens), generator=gen)
    rows = torch.Generator().manual_seed(1 + rank)
    w = (torch.randn(vocab // world, d_model, generator=rows) * 0.02).bfloat16().requires_grad_()  # [V/tp, d]

    def loss_of(x: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
        if path == "gathered":
            return lm_loss(vocab_parallel_logits(x, w, tp), labels)                  # [1, T, V] on every rank
        return vocab_parallel_lm_loss(vocab_parallel_logits(x, w, tp, gather=False), labels, tp)

    base = start_peak()
    loss, saved = saved_activations(loss_of, x, w, exclude=[x, w])
    loss.backward()
    return {"saved_gb": saved_bytes(saved) / GB, "peak_gb": peak_growth(base) / GB, "loss": loss.item()}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--tp", type=int, default=2)
    ap.add_argument("--tokens", type=int, default=2048)
    ap.add_argument("--vocab", type=int, default=65536)
    ap.add_argument("--d-model", type=int, default=512)
    args = ap.parse_args()
    from tests.helpers.train import spawn_gloo

    full = args.tokens * args.vocab * 4 / GB
    print(f"tp {args.tp}, {args.tokens} tokens, vocab {args.vocab}, d {args.d_model}, bf16 logits; "
          f"the whole [N, V] in fp32 is {full:.2f} GB\n")
    print("| loss | rank | saved for backward (GB) | peak RSS growth, fwd + bwd (GB) | loss |")
    print("|---|---|---|---|---|")
    with tempfile.TemporaryDirectory() as tmp:
        for path in ("gathered", "vocab-parallel"):
            outs = spawn_gloo(loss_rank, args.tp, (path, args.tokens, args.vocab, args.d_model),
                              Path(tmp) / path)
            for rank, out in enumerate(outs):
                print(f"| {path} | {rank} | {out['saved_gb']:.3f} | {out['peak_gb']:.3f} | {out['loss']:.5f} |")


if __name__ == "__main__":
    main()
