"""Activation memory one sequence-parallel block saves for backward, per TP rank: the old path (each norm
gathers its output, the q/k/v and gate/up matmuls save that gathered [B, T, d]) against `gather_linears`
(tasks/train/parallel/sequence_parallel.py: one all-gather inside the linears' autograd function, only the rank's
[B, T/tp, d] input saved), on local gloo CPU ranks, both in the same run.

    python benchmarks/sp_memory.py                         # tp 2 and 4, T 2048, d 1024, 16 heads, bf16
    python benchmarks/sp_memory.py --tp 2 --seq-len 4096

Per rank: the distinct storages of every tensor autograd saves in the block's forward, its parameters excluded
(tests/helpers/train.py saved_activations / saved_bytes). The old path is rebuilt from the same TP block
(tests/helpers/sequence_parallel.py sp_block: the gathering norm, attention's and SwiGLU's plain projections).
The expected difference is the two column regions' inputs, 2 × s·b·h·bytes × (1 − 1/tp): the planner's
4 + 30/t → 34/t (tasks/train/planning/planner.py block_activation_bytes).
"""

from __future__ import annotations

import argparse
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
GB = 1e9


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--tp", type=int, nargs="+", default=[2, 4])
    ap.add_argument("--seq-len", type=int, default=2048)
    ap.add_argument("--d-model", type=int, default=1024)
    ap.add_argument("--heads", type=int, default=16)
    ap.add_argument("--kv-heads", type=int, default=16)
    ap.add_argument("--ffn-hidden", type=int, default=2816)  # ≈ 8/3·d, a multiple of 256 (Llama's rule)
    ap.add_argument("--dtype", default="bfloat16")
    args = ap.parse_args()

    import torch

    from specs.architecture import ModelConfig
    from tasks.train.planning.planner import block_activation_bytes
    from tests.helpers.train import spawn_gloo
    from tests.helpers.sequence_parallel import block_saved_rank

    cfg = ModelConfig(vocab_size=256, seq_len=args.seq_len, n_layers=1, n_heads=args.heads,
                      n_kv_heads=args.kv_heads, d_model=args.d_model, ffn_hidden=args.ffn_hidden)
    act_bytes = torch.empty(0, dtype=getattr(torch, args.dtype)).element_size()
    sbh = args.seq_len * args.d_model  # micro-batch 1
    print(f"one block, T {args.seq_len}, d {args.d_model}, {args.heads}/{args.kv_heads} heads, ffn "
          f"{args.ffn_hidden}, {args.dtype}, batch 1; saved activation GB per rank (max over ranks)")
    print(f"{'tp':>3} {'old (gather in norm)':>21} {'new (gather_linears)':>21} {'saved':>8} {'expected':>9} "
          f"{'planner old→new':>16}")
    for tp in args.tp:
        got = {}
        for old in (True, False):
            with tempfile.TemporaryDirectory() as tmp:
                ranks = spawn_gloo(block_saved_rank, tp, (cfg.to_dict(), 0, old, args.dtype), Path(tmp))
            got[old] = max(r["bytes"] for r in ranks)
        expected = 2 * sbh * act_bytes * (1 - 1 / tp)
        new_plan = block_activation_bytes(args.seq_len, 1, args.d_model, args.heads, tp, act_bytes, True, True)
        old_plan = int(sbh * (4 + 30 / tp) * act_bytes / 2)
        print(f"{tp:>3} {got[True] / GB:>21.4f} {got[False] / GB:>21.4f} {(got[True] - got[False]) / GB:>8.4f} "
              f"{expected / GB:>9.4f} {old_plan / GB:>7.4f}→{new_plan / GB:.4f}")


if __name__ == "__main__":
    main()
