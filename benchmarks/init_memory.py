"""Start-up memory with ZeRO-3: peak RSS per rank of building a model and `deepspeed.initialize` over it, on
2 gloo CPU ranks, the old path (the whole plain model built in fp32 on every rank, partitioned by DeepSpeed)
against the new one (`tasks.train.parallelize.build_module`: meta device, each linear materialised then
partitioned at once) — issue #13.

    python benchmarks/init_memory.py                        # ~0.5 B parameters (d 1536, 16 layers), bf16
    python benchmarks/init_memory.py --d-model 2048 --layers 16 --precision fp32

Each (path, rank) runs in its own fresh process (spawned). Peak RSS (VmHWM, reset just before the build) is
reported as growth over the RSS just before the build (the imported libraries, ~0.5 GB, excluded),
after the module is built and after the engine is ready (the engine adds ZeRO-3's flat fp32 master partition
and its gradient buffers). Goal (#13): the new path's peak ≤ 0.6 × the old path's.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
GB = 1e9


def rank_main(rank: int, world: int, cfg_dict: dict, path: str, precision: str) -> dict:
    import deepspeed
    import torch

    from specs.pretrain import ParallelSpec, PretrainSpec
    from tasks.train.config import ModelConfig
    from tasks.train.dsconfig import ds_config, make_optimizer
    from tasks.train.model import Transformer
    from tasks.train.parallelize import build_layout, build_module, init_distributed
    from tests.helpers.init_meta import peak_growth, start_peak

    init_distributed()
    par = ParallelSpec(dp=world, zero_stage=3)
    train = PretrainSpec(precision=precision, micro_batch_size=1)
    cfg, ds_cfg = ModelConfig.from_dict(cfg_dict), ds_config(train, par)
    layout = build_layout(par)
    with torch.device("meta"):  # torch's meta kernels import once (~80 MB): not the model's memory
        Transformer(cfg, 0)
    base, t0 = start_peak(), time.perf_counter()
    if path == "new":
        module = build_module(cfg, layout, 0, zero3=ds_cfg)
    else:  # what build_module did before: the whole plain model in fp32; deepspeed.initialize partitions it
        module = Transformer(cfg, 0)
    built, t1 = peak_growth(base), time.perf_counter()
    deepspeed.initialize(model=module, optimizer=make_optimizer(module, train.optim), config=ds_cfg)
    return {"module": built, "engine": peak_growth(base), "build_s": t1 - t0,
            "total_s": time.perf_counter() - t0}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--d-model", type=int, default=1536)
    ap.add_argument("--layers", type=int, default=16)
    ap.add_argument("--vocab", type=int, default=32000)
    ap.add_argument("--precision", choices=["bf16", "fp32"], default="bf16")
    ap.add_argument("--ranks", type=int, default=2)
    args = ap.parse_args()

    from specs.pretrain import ModelSpec
    from tasks.train.config import ModelConfig, param_count
    from tasks.train.testing import spawn_gloo

    spec = ModelSpec(flavor="tiny", n_layers=args.layers, d_model=args.d_model, n_heads=args.d_model // 128,
                     n_kv_heads=args.d_model // 128, tie_embeddings=False)
    cfg = ModelConfig.from_spec(spec, vocab_size=args.vocab, seq_len=256)
    n = param_count(cfg)
    full = 4 * n
    print(f"{n / 1e9:.2f} B parameters, whole fp32 model {full / GB:.2f} GB, ZeRO-3 on {args.ranks} CPU ranks, "
          f"{args.precision}")
    rows = {}
    for path in ("old", "new"):
        with tempfile.TemporaryDirectory() as tmp:
            rows[path] = spawn_gloo(rank_main, args.ranks, (cfg.to_dict(), path, args.precision), Path(tmp))
    print("| path | rank | peak RSS growth, module built (GB) | × fp32 model | peak RSS growth, engine ready (GB) "
          "| × fp32 model | build (s) | build + initialize (s) |")
    print("|---|---|---|---|---|---|---|---|")
    for path, ranks in rows.items():
        for r, out in enumerate(ranks):
            print(f"| {path} | {r} | {out['module'] / GB:.2f} | {out['module'] / full:.2f} | "
                  f"{out['engine'] / GB:.2f} | {out['engine'] / full:.2f} | {out['build_s']:.1f} | "
                  f"{out['total_s']:.1f} |")
    for key in ("module", "engine"):
        ratio = max(o[key] for o in rows["new"]) / max(o[key] for o in rows["old"])
        print(f"new / old peak ({key}): {ratio:.2f}  (goal ≤ 0.60)")


if __name__ == "__main__":
    main()
