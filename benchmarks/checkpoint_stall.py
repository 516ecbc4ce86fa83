"""Checkpoint stall: how long training stands still per save, synchronous against asynchronous checkpoints
(`train.checkpoint_async`, issue #13; goal: async blocks < 10 % of sync).

    python benchmarks/checkpoint_stall.py --steps 4 --every 2   # the 350m shape (~304M parameters), 1 CPU rank
    python benchmarks/checkpoint_stall.py --shape tiny --steps 6 --every 2      # a quick check of the script
    python benchmarks/checkpoint_stall.py --steps 4 --every 2 --elastic on,off  # with and without the copy

`--elastic`: every save also writes the layout-free copy for elastic resume (`train.checkpoint_elastic`, on by
default: ~1.75x the bytes); `off` runs each mode without it.

Each mode is one real pretrain run of the stage's code path — `tasks.train.launch.launch` of a `PretrainJob`
(one rank, DeepSpeed ZeRO-0 fp32, the client AdamW) on a synthetic mix — in its own child process, so that its
memory is its own. The stall per save is what the trainer reports (`checkpoint_stall_s` in
reports/telemetry.jsonl: the seconds `Trainer._save` blocked the loop, including any wait for the previous
save's writer); the background write time comes from the writer's log line. The stability guard's initial
save is off (`max_rollbacks: 0`), so the first timed save of an async run copies into fresh host memory (page
faults) and later ones into the reused buffers: both are shown. s/step is the training steps alone: with async
saves it includes what the writer thread takes from the training threads while it runs.
"""

from __future__ import annotations

import argparse
import itertools
import json
import logging
import re
import resource
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

WRITTEN = re.compile(r"checkpoint (step\d+) saved \(written in ([0-9.]+) s in the background\)")


def job_spec(args: argparse.Namespace, asynchronous: bool, elastic: bool = True):
    from specs.pretrain import PretrainJob

    return PretrainJob.model_validate({
        "model": {"flavor": args.shape},
        "parallel": {},
        "train": {"steps": args.steps, "micro_batch_size": args.batch, "log_every": args.every,
                  "eval_every": 10 * args.steps, "eval_batches": 1, "checkpoint_every": args.every,
                  "keep_checkpoints": 1, "checkpoint_async": asynchronous, "cpu_threads": args.threads,
                  "checkpoint_elastic": elastic,
                  "precision": "fp32", "optim": {"warmup_steps": 1},
                  "stability": {"max_rollbacks": 0}, "telemetry": {"wandb": "disabled", "nvml": False},
                  "speed": {"compile": args.compile}},
    })


class Lines(logging.Handler):
    def __init__(self) -> None:
        super().__init__()
        self.lines: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.lines.append(record.getMessage())


def child(args: argparse.Namespace, mode: str, elastic: bool) -> dict:
    """One run in this process: per-save stalls and background write times, loop time, sizes."""
    from specs.architecture import ModelConfig, param_count
    from tasks.train.launch import launch
    from tasks.train.inputs.synthetic import make_job, synthetic_mix

    work = Path(args.work) / f"{mode}-elastic-{'on' if elastic else 'off'}"
    mix = synthetic_mix(work / "mix", vocab_size=256, seq_len=args.seq, docs=60, val_docs=4)
    spec = job_spec(args, mode == "async", elastic)
    lines = Lines()
    logging.getLogger("forgeline.pretrain").addHandler(lines)
    logging.getLogger("forgeline.pretrain").setLevel(logging.INFO)
    result = launch(make_job(work, mix, spec, seed=1), work / "launch")
    rows = [json.loads(x) for x in (work / "reports" / "telemetry.jsonl").read_text().splitlines()]
    stalls = [r["checkpoint_stall_s"] for r in rows if "checkpoint_stall_s" in r]
    writes = [float(m.group(2)) for m in map(WRITTEN.search, lines.lines) if m]
    tag = sorted((work / "checkpoints").glob("step*"))[-1]
    cfg = ModelConfig.from_dict(result.outputs["report"]["model"])
    return {"mode": mode, "elastic": elastic, "params": param_count(cfg), "stalls": stalls, "writes": writes,
            "checkpoint_bytes": sum(p.stat().st_size for p in tag.rglob("*") if p.is_file()),
            "train_s": result.timing.train_s, "s_per_step": result.timing.s_per_step,
            "peak_rss_gib": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20}


def table(results: list[dict]) -> str:
    out = [f"model: {results[0]['params'] / 1e6:.0f}M parameters", "",
           "| mode | layout-free copy | checkpoint (GiB) | saves | first save blocked (s) | later saves blocked, "
           "median (s) | background write, median (s) | s/step | train loop (s) | peak RSS (GiB) |",
           "|---|---|---|---|---|---|---|---|---|---|"]
    for r in results:
        later = statistics.median(r["stalls"][1:]) if len(r["stalls"]) > 1 else float("nan")
        write = f"{statistics.median(r['writes']):.2f}" if r["writes"] else "— (in the stall)"
        out.append(f"| {r['mode']} | {'on' if r['elastic'] else 'off'} | {r['checkpoint_bytes'] / 2**30:.2f} | "
                   f"{len(r['stalls'])} | {r['stalls'][0]:.3f} | {later:.3f} | {write} | {r['s_per_step']:.2f} | "
                   f"{r['train_s']:.1f} | {r['peak_rss_gib']:.1f} |")
    out.append("")
    for elastic in (True, False):
        by = {r["mode"]: r for r in results if r["elastic"] == elastic}
        if {"sync", "async"} <= set(by) and len(by["sync"]["stalls"]) > 1 and len(by["async"]["stalls"]) > 1:
            s, a = by["sync"]["stalls"], by["async"]["stalls"]
            later = statistics.median(a[1:]) / statistics.median(s[1:])
            out.append(f"layout-free copy {'on' if elastic else 'off'}: async blocks "
                       f"{statistics.median(a) / statistics.median(s):.1%} of sync per save (median over all saves; "
                       f"first save {a[0] / s[0]:.1%}, later saves {later:.1%}); goal < 10 %")
    return "\n".join(out)


def summary(r: dict) -> str:
    """One line per finished mode, printed at once: a run cut short by its time limit still says what it saw."""
    stalls = ", ".join(f"{x:.2f}" for x in r["stalls"])
    return (f"{r['mode']} (layout-free copy {'on' if r['elastic'] else 'off'}): {r['checkpoint_bytes'] / 2**30:.2f} "
            f"GiB per checkpoint, saves blocked {stalls} s, {r['s_per_step']:.3f} s/step")


def write_results(path: Path | None, results: list[dict]) -> None:
    if path is not None:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.with_suffix(".tmp").write_text(json.dumps(results, indent=1))
        path.with_suffix(".tmp").replace(path)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--shape", choices=("tiny", "gpt2-124m", "350m", "1b"), default="350m")
    p.add_argument("--seq", type=int, default=64, help="sequence length of the synthetic mix")
    p.add_argument("--batch", type=int, default=1, help="micro-batch size")
    p.add_argument("--steps", type=int, default=6)
    p.add_argument("--every", type=int, default=2, help="checkpoint_every (enough steps to hide one write)")
    p.add_argument("--threads", type=int, default=2, help="train.cpu_threads")
    p.add_argument("--compile", choices=("auto", "on", "off"), default="auto", help="train.speed.compile (auto: "
                   "the spec's default; off spares a GPU run the compile, which says nothing about a save's stall)")
    p.add_argument("--modes", default="sync,async")
    p.add_argument("--elastic", default="on", help="on, off or on,off: train.checkpoint_elastic of the runs")
    p.add_argument("--work", default=None, help="folder for the runs (default: a temp folder, removed)")
    p.add_argument("--json", type=Path, default=None, help="also write the raw results here (rewritten after "
                   "every mode, so a run cut short keeps the modes it finished)")
    p.add_argument("--child", default=None, help=argparse.SUPPRESS)
    args = p.parse_args()
    if args.child:
        print("RESULT " + json.dumps(child(args, args.child, args.elastic == "on")), flush=True)
        return
    results = []
    with tempfile.TemporaryDirectory(prefix="ckpt-stall-") as tmp:
        for elastic, mode in itertools.product(args.elastic.split(","), args.modes.split(",")):
            print(f"{mode} run (layout-free copy {elastic}): {args.shape}, {args.steps} steps, a save every "
                  f"{args.every}", flush=True)
            cmd = [sys.executable, __file__, "--child", mode, "--work", args.work or tmp, f"--elastic={elastic}",
                   *[f"--{k}={getattr(args, k)}"
                     for k in ("shape", "seq", "batch", "steps", "every", "threads", "compile")]]
            proc = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True)
            line = next((x for x in proc.stdout.splitlines() if x.startswith("RESULT ")), None)
            if proc.returncode != 0 or line is None:
                sys.exit(f"{mode} run failed:\n{proc.stderr[-3000:]}")
            results.append(json.loads(line[len("RESULT "):]))
            print("  " + summary(results[-1]), flush=True)
            write_results(args.json, results)
    print(table(results))


if __name__ == "__main__":
    main()
