"""Start-up memory with ZeRO-3: peak RSS per rank of building a model and `deepspeed.initialize` over it, on
2 gloo CPU ranks, the old path (the whole plain model built in fp32 on every rank, partitioned by DeepSpeed)
against the new one (`tasks.train.parallel.parallelize.build_module`: meta device, each linear materialised then
partitioned at once) — issue #13.

    python benchmarks/init_memory.py                        # ~0.5 B parameters (d 1536, 16 layers), bf16
    python benchmarks/init_memory.py --d-model 2048 --layers 16 --precision fp32
    python benchmarks/init_memory.py --sub-group-size 5e7   # speed.stage3_sub_group_size: smaller transients

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


# ZeRO-3 optimizer steps inside `deepspeed.initialize` (DeepSpeed 0.19, runtime/zero/stage3.py), each timed as
# its own phase of the breakdown: what each allocates is in the README's table.
ZERO3_PHASES = (("_create_fp16_partitions_with_defragmentation", "flat bf16/fp32 partition (defragment)"),
                ("_create_fp32_partitions", "fp32 master partition"),
                ("initialize_optimizer_states", "initialize_optimizer_states (fp32 gradient buffer)"),
                ("_setup_for_real_optimizer", "gradient partition buffer, IPG buckets"))


class Phases:
    """Peak and current RSS growth (over `base`) of consecutive phases: `mark(name)` closes the phase running
    since the previous mark and resets the peak mark, so each phase's peak is its own."""

    def __init__(self, base: int):
        from tests.helpers.init_meta import peak_growth, start_peak

        self.base, self.rows, self.peak_growth, self.start_peak = base, [], peak_growth, start_peak

    def mark(self, name: str) -> None:
        peak = self.peak_growth(self.base)
        self.rows.append((name, peak, self.start_peak() - self.base))

    def instrument(self) -> None:
        """Mark before and after each of ZeRO-3's set-up steps (the gaps between them are phases too)."""
        from deepspeed.runtime.zero.stage3 import DeepSpeedZeroOptimizer_Stage3 as Zero3

        for method, label in ZERO3_PHASES:
            def wrapped(self_, *a, _orig=getattr(Zero3, method), _label=label, **k):
                self.mark(f"before: {_label}")
                out = _orig(self_, *a, **k)
                self.mark(_label)
                return out
            setattr(Zero3, method, wrapped)

    def peak(self) -> int:
        return max(p for _, p, _ in self.rows)


def rank_main(rank: int, world: int, cfg_dict: dict, path: str, precision: str, sub_group: int | None = None
              ) -> dict:
    import deepspeed
    import torch

    from specs.pretrain import ParallelSpec, PretrainSpec
    from specs.architecture import ModelConfig
    from tasks.train.parallel.dsconfig import ds_config, make_optimizer
    from tasks.train.modeling.model import Transformer
    from tasks.train.parallel.parallelize import build_layout, build_module, init_distributed
    from tests.helpers.init_meta import start_peak

    init_distributed()
    par = ParallelSpec(dp=world, zero_stage=3)
    train = PretrainSpec(precision=precision, micro_batch_size=1,
                         speed={"stage3_sub_group_size": sub_group} if sub_group else {})
    cfg, ds_cfg = ModelConfig.from_dict(cfg_dict), ds_config(train, par)
    layout = build_layout(par)
    with torch.device("meta"):  # torch's meta kernels import once (~80 MB): not the model's memory
        Transformer(cfg, 0)
    base, t0 = start_peak(), time.perf_counter()
    if path == "new":
        module = build_module(cfg, layout, 0, zero3=ds_cfg)
    else:  # what build_module did before: the whole plain model in fp32; deepspeed.initialize partitions it
        module = Transformer(cfg, 0)
    t1 = time.perf_counter()
    phases = Phases(base)
    phases.mark("module built")
    phases.instrument()
    deepspeed.initialize(model=module, optimizer=make_optimizer(module, train.optim), config=ds_cfg)
    phases.mark("rest of initialize")
    return {"module": phases.rows[0][1], "engine": phases.peak(), "build_s": t1 - t0,
            "total_s": time.perf_counter() - t0, "phases": phases.rows}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--d-model", type=int, default=1536)
    ap.add_argument("--layers", type=int, default=16)
    ap.add_argument("--vocab", type=int, default=32000)
    ap.add_argument("--precision", choices=["bf16", "fp32"], default="bf16")
    ap.add_argument("--ranks", type=int, default=2)
    ap.add_argument("--sub-group-size", type=float, default=None,
                    help="pretrain.speed.stage3_sub_group_size for both paths (default 1e9, DeepSpeed's)")
    args = ap.parse_args()

    from specs.pretrain import ModelSpec
    from specs.architecture import ModelConfig, param_count
    from tests.helpers.train import spawn_gloo

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
            rows[path] = spawn_gloo(rank_main, args.ranks, (cfg.to_dict(), path, args.precision,
                                                                    int(args.sub_group_size or 0) or None), Path(tmp))
    print("| path | rank | peak RSS growth, module built (GB) | × fp32 model | peak RSS growth, engine ready (GB) "
          "| × fp32 model | build (s) | build + initialize (s) |")
    print("|---|---|---|---|---|---|---|---|")
    for path, ranks in rows.items():
        for r, out in enumerate(ranks):
            print(f"| {path} | {r} | {out['module'] / GB:.2f} | {out['module'] / full:.2f} | "
                  f"{out['engine'] / GB:.2f} | {out['engine'] / full:.2f} | {out['build_s']:.1f} | "
                  f"{out['total_s']:.1f} |")
    print("\nPhases of rank 0 (peak RSS growth within the phase / RSS growth at its end, GB; a phase \"before: X\" "
          "is what ran between the previous step and X):\n")
    print("| phase | " + " | ".join(f"{path} peak | {path} at end" for path in rows) + " |")
    print("|---|" + "---|---|" * len(rows))
    for i, (name, *_) in enumerate(rows["new"][0]["phases"]):
        cells = [f"{r[0]['phases'][i][1] / GB:.2f} | {r[0]['phases'][i][2] / GB:.2f}" for r in rows.values()]
        print(f"| {name} | " + " | ".join(cells) + " |")
    for key in ("module", "engine"):
        ratio = max(o[key] for o in rows["new"]) / max(o[key] for o in rows["old"])
        print(f"new / old peak ({key}): {ratio:.2f}  (goal ≤ 0.60)")


if __name__ == "__main__":
    main()
