"""Adaptive source weights (`mix.adaptive`) vs fixed weights: the tiny model trained on CPU on the same token
budget, per-source and average validation loss of each.

    python benchmarks/adaptive_mix.py                    # cleaned text of data/clean if present, else synthetic
    python benchmarks/adaptive_mix.py --steps 150 --synthetic
    python benchmarks/adaptive_mix.py --eta 5 --smoothing 0.2

A mix is built by the real mix stage (tasks.mix.run; a small tokenizer, seq_len 128) in a temporary folder from
the cleaned shards in `data/clean/shards` (the default pipeline's sources; weights from params.yaml restricted
to the sources present) or, with `--synthetic` or without them, from three generated sources of very different
difficulty: `prose` (words from a 300-word vocabulary), `code` (templated lines, nearly deterministic) and
`noise` (random letters: high loss that no weighting can lower). Then:

  fixed            mix.adaptive off: the fixed, seeded order of the mix's own proportions;
  control-eta0     mix.adaptive on with step_size 0: the per-source sampler at the base weights, i.e. the same
                   proportions in another order — the noise floor of the comparison;
  adaptive-initial reference initial: λ = ln(L / L at the first update) — upweight the sources that improved
                   least;
  adaptive-previous reference previous: λ = ln(L at the previous update / L) — upweight the sources still
                   improving fastest;
  adaptive-target  reference target, targets = the fixed run's final per-source val loss (DoReMi's recipe: a
                   reference model trained at the base weights; here that is the fixed run itself).

All runs: the same model, seed, steps, batch (hence the same tokens) and LR schedule; val loss measured on the
same val sequences. "mean" is the unweighted mean over sources (DoReMi's criterion: no source left behind),
"overall" the token-weighted val loss the pretrain stage reports. One seed per variant: differences of a few
hundredths are within run-to-run noise of such short runs.
"""

from __future__ import annotations

import argparse
import json
import shutil
import sys
import tempfile
import time
from functools import partial
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from specs.mix import AdaptiveMixSpec, MixSpec  # noqa: E402
from specs.pretrain import PretrainJob  # noqa: E402
from tasks import mix  # noqa: E402
from tasks.core.files import atomic_path  # noqa: E402
from tasks.core.runner import StagePaths  # noqa: E402
from tasks.data.records import RECORD_SCHEMA, write_table  # noqa: E402
from tasks.train.launch import environ, launch  # noqa: E402
from specs.ranks import PretrainRun  # noqa: E402
from tasks.train.objectives import reference as objective_reference  # noqa: E402
from tasks.train.objectives.pretrain import PretrainObjective  # noqa: E402


def synthetic_clean(root: Path, seed: int) -> dict[str, float]:
    """Three cleaned sources of different difficulty under root/data/clean/shards; returns equal weights."""
    rng = np.random.default_rng(seed)
    words = ["".join(rng.choice(list("abcdefghijklmnopqrstuvwxyz"), size=rng.integers(2, 9))) for _ in range(300)]
    zipf = 1.0 / np.arange(1, 301)
    zipf /= zipf.sum()
    texts = {
        "prose": lambda: " ".join(rng.choice(words, size=400, p=zipf)) + ".",
        "code": lambda: "\n".join(f"def f{i}(x):\n    return x * {i % 7} + {i % 5}" for i in
                                  range(int(rng.integers(0, 50)), int(rng.integers(60, 120)))),
        "noise": lambda: "".join(rng.choice(list("abcdefghijklmnopqrstuvwxyz "), size=2500)),
    }
    for source, make in texts.items():
        rows = [{"id": f"{source}/{k:04d}", "text": make(), "source": source, "lang": "en", "origin": "synthetic",
                 "meta": "{}", "media": []} for k in range(150)]
        with atomic_path(root / "data" / "clean" / "shards" / f"{source}-00000.parquet") as tmp:
            write_table(rows, RECORD_SCHEMA, tmp)
    return {s: 1.0 for s in texts}


def real_clean(root: Path, clean: Path) -> dict[str, float]:
    """Copy the cleaned shards; weights from params.yaml for the sources present (proportional if absent)."""
    dest = root / "data" / "clean" / "shards"
    dest.mkdir(parents=True)
    present = set()
    for f in sorted(clean.glob("*.parquet")):
        shutil.copy(f, dest / f.name)
        present.add(f.name.rsplit("-", 1)[0])
    try:
        import yaml

        weights = yaml.safe_load((ROOT / "params.yaml").read_text())["mix"]["weights"]
        return {s: float(w) for s, w in weights.items() if s in present and w > 0}
    except Exception:  # no params.yaml or no weights: proportional to size
        return {}


def build_mix(root: Path, weights: dict[str, float], seed: int, budget: int) -> Path:
    paths = StagePaths(root=root, stage="mix", seed=seed)
    paths.out.mkdir(parents=True, exist_ok=True)
    spec = MixSpec(tokenizer={"vocab_size": 2048, "train_chars": 400_000}, seq_len=128, token_budget=budget,
                   val_fraction=0.08, weights=weights)
    mix.run(spec, paths)
    return paths.out


def train(name: str, mix_dir: Path, work: Path, steps: int, seed: int, micro_batch: int, adaptive: dict | None
          ) -> dict:
    spec = PretrainJob.model_validate({
        "model": {"flavor": "tiny"}, "parallel": {},
        "train": {"steps": steps, "micro_batch_size": micro_batch, "log_every": max(1, steps // 10),
                  "eval_every": max(1, steps // 10), "eval_batches": 16, "checkpoint_every": steps,
                  "keep_checkpoints": 1, "optim": {"warmup_steps": max(1, steps // 10)},
                  # a rollback (to step 0: one checkpoint at the end) would replay other data: not what is compared
                  "stability": {"enabled": False},
                  "telemetry": {"wandb": "disabled", "nvml": False}},
    })
    base = work / name
    (base / "out").mkdir(parents=True)
    if adaptive:
        spec = spec.model_copy(update={"adaptive": AdaptiveMixSpec.model_validate(adaptive)})
    job = PretrainRun(spec=spec, mix_dir=str(mix_dir), out_dir=str(base / "out"), ckpt_dir=str(base / "ckpt"),
                      reports_dir=str(base / "reports"), marker_dir=str(base / "markers"), seed=seed,
                      objective_ref=objective_reference(PretrainObjective))
    t0 = time.perf_counter()
    with environ(WANDB_MODE="disabled"):
        result = launch(job, base / "launch")
    report = result.outputs["report"]
    by = report["val_loss_by_source"]
    return {"name": name, "by_source": by, "overall": report["val_loss"], "mean": float(np.mean(list(by.values()))),
            "tokens": report["tokens"], "seconds": time.perf_counter() - t0,
            "weights": result.outputs.get("adaptive_mix")}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--steps", type=int, default=200)
    ap.add_argument("--micro-batch", type=int, default=8, help="sequences per step (one rank, no accumulation)")
    ap.add_argument("--threads", type=int, default=1,
                    help="torch threads (1: steady timings on a shared machine; the run is in-process)")
    ap.add_argument("--seed", type=int, default=7)
    ap.add_argument("--budget", type=int, default=600_000, help="mix token budget (train tokens on disk)")
    ap.add_argument("--eta", type=float, default=4.0, help="mix.adaptive.step_size of the adaptive runs")
    ap.add_argument("--smoothing", type=float, default=0.1)
    ap.add_argument("--synthetic", action="store_true", help="generated sources even when data/clean exists")
    ap.add_argument("--clean", type=Path, default=ROOT / "data" / "clean" / "shards")
    args = ap.parse_args()
    import torch

    torch.set_num_threads(args.threads)

    with tempfile.TemporaryDirectory(prefix="forgeline-adaptive-") as tmp:
        root = Path(tmp)
        real = not args.synthetic and any(args.clean.glob("*.parquet"))
        weights = real_clean(root, args.clean) if real else synthetic_clean(root, args.seed)
        t0 = time.perf_counter()
        mix_dir = build_mix(root, weights, args.seed, args.budget)
        layout = json.loads((mix_dir / "packing.json").read_text())
        print(f"mix: {'cleaned shards of ' + str(args.clean) if real else 'synthetic sources'}, weights "
              f"{weights or 'proportional'}, {layout['splits']['train']['sequences']} train sequences of "
              f"{layout['seq_len']} tokens, vocab {layout['vocab_size']} ({time.perf_counter() - t0:.0f} s)")
        common = {"enabled": True, "step_size": args.eta, "smoothing": args.smoothing, "min_weight": 0.05,
                  "max_weight": 0.8}
        run = partial(train, mix_dir=mix_dir, work=root / "runs", steps=args.steps, seed=args.seed,
                      micro_batch=args.micro_batch)
        runs = [run("fixed", adaptive=None)]
        # control: the per-source sampler at the base weights (η = 0, no smoothing): how much of a difference is
        # only another data order, not another weighting
        runs.append(run("control-eta0", adaptive={**common, "step_size": 0.0, "smoothing": 0.0}))
        for reference in ("initial", "previous"):
            runs.append(run(f"adaptive-{reference}", adaptive={**common, "reference": reference}))
        targets = runs[0]["by_source"]  # DoReMi's reference model: the run at the base weights
        runs.append(run("adaptive-target", adaptive={**common, "reference": "target", "targets": targets}))
    print_table(runs, args)
    return 0


def print_table(runs: list[dict], args: argparse.Namespace) -> None:
    sources = sorted(runs[0]["by_source"])
    print(f"\n{args.steps} steps × {args.micro_batch} sequences × 128 tokens = {runs[0]['tokens']:,} train tokens "
          f"per run; tiny model; seed {args.seed}; adaptive: step_size {args.eta}, smoothing {args.smoothing}, "
          f"bounds [0.05, 0.8], update every eval ({max(1, args.steps // 10)} steps)\n")
    head = "| run | " + " | ".join(sources) + " | mean | overall | final weights | s |"
    print(head)
    print("|---|" + "---:|" * (len(sources) + 2) + "---|---:|")
    for r in runs:
        w = r["weights"]
        weights = "base" if w is None else " ".join(f"{s}={x:.2f}" for s, x in zip(w["sources"], w["final"]))
        cells = [f"{r['by_source'].get(s, float('nan')):.4f}" for s in sources]
        print(f"| {r['name']} | " + " | ".join(cells) + f" | {r['mean']:.4f} | {r['overall']:.4f} | {weights} | "
              f"{r['seconds']:.0f} |")
    base = next((r for r in runs if r["weights"]), None)  # every adaptive run starts from the same base
    if base:
        print("\nbase weights (train-sequence shares): "
              + " ".join(f"{s}={x:.2f}" for s, x in zip(base["weights"]["sources"], base["weights"]["base"])))


if __name__ == "__main__":
    sys.exit(main())
