"""Training throughput: the pretrain (and sft) stage's own loop against plain PyTorch yardsticks (issues #4, #29).

    python benchmarks/pretrain_throughput.py                        # GPU: 350m, seq 1024, micro-batch 16
    python benchmarks/pretrain_throughput.py --shape gpt2-124m --json out.json      # + the figures as JSON
    python benchmarks/pretrain_throughput.py --shape 1b --runs engine --zero 0,3     # ZeRO-3 against ZeRO-0
    python benchmarks/pretrain_throughput.py --shape gpt2-124m --runs sft            # packed SFT rows
    python benchmarks/pretrain_throughput.py --shape gpt2-124m --runs engine,plain --trace-steps 3 --json o.json
                                                     # + torch.profiler tables of 3 more steps beside o.json
    python benchmarks/pretrain_throughput.py --device cpu --shape tiny --seq 64 --batch 2 --steps 2 --warmup 1 \
        --compile-backend aot_eager                                                  # a CPU check of the script

Runs (`--runs`, each in its own child process, so its peak memory is its own and no DeepSpeed state or compiled
code leaks into the next):
  engine            the pretrain stage's loop (benchmarks/gpu/stage_steps.py): the spec's own defaults resolved for
                    the device — precision, DeepSpeed config from `tasks.train.parallel.dsconfig`, compile, fused AdamW,
                    stability guard, telemetry, data loader — on a synthetic mix; once per `--zero` stage given
                    (default: the spec's). `--set key=value` overrides the job for an experiment.
  sft               the sft stage's loop on packed conversations with an assistant-only loss (benchmarks/gpu/
                    sft_inputs.py: random pretrained weights of the shape, a word-level tokenizer).
  plain             (a) forgeline's model in a plain loop, compiled as the stage compiles it (benchmarks/gpu/references.py)
  nanogpt           (b) a nanoGPT-style GPT of the same depth/width/heads, eager
  nanogpt-compiled  (b′) the same, as nanoGPT trains it: torch.compile, fused AdamW, TF32, SDPA — the bar to beat

tokens/s is timed over --steps steps after --warmup untimed ones (the first step, where compilation lands, and
the whole warm-up are reported apart: compile time counts against a run's budget, not its speed), the device
synchronised at both ends. MFU = tokens/s · FLOPs/token / device peak (tasks.train.loop.telemetry; PaLM's 6·N + 12·L·d·T
count, specs.architecture); CPU gives "unknown". The JSON (--json) is rewritten after every run, so a run that
is cut short still leaves the rows it finished.
"""

from __future__ import annotations

import argparse
import collections
import json
import os
import resource
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import torch  # noqa: E402  (after the sys.path insert above)

RUNS = ("engine", "sft", "plain", "nanogpt", "nanogpt-compiled")
DEFAULT_RUNS = "engine,nanogpt-compiled,plain"  # the bar first: a part cut short still has the ratio that matters
LABELS = {"engine": "engine (pretrain stage)", "sft": "sft stage", "plain": "(a) plain loop, same model",
          "nanogpt": "(b) nanoGPT eager", "nanogpt-compiled": "(b′) nanoGPT compiled"}


def model_config(args: argparse.Namespace):
    from specs.pretrain import ModelSpec
    from specs.architecture import ModelConfig

    return ModelConfig.from_spec(ModelSpec(flavor=args.shape), vocab_of(args), args.seq)


def vocab_of(args: argparse.Namespace) -> int:
    return args.vocab or (8192 if args.shape == "tiny" else 50304)  # tokenizer-like for tiny; GPT-2's padded


def peak_memory(device: torch.device) -> int:
    """Bytes: CUDA peak allocated, or this process's peak RSS (Linux ru_maxrss is in KiB)."""
    if device.type == "cuda":
        return torch.cuda.max_memory_allocated(device)
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024


def stage_spec(args: argparse.Namespace):
    """The pretrain stage's resolved job for this shape (what the engine run trains; (a) follows it)."""
    from benchmarks.gpu.stage_steps import TIMING_SETTINGS, apply_overrides, parse_sets
    from specs.pretrain import PretrainJob
    from tasks.train.launch import resolved_precision

    data = {"model": {"flavor": args.shape}, "parallel": {"accelerator": args.device},
            "train": {"steps": args.warmup + args.steps + 1, "micro_batch_size": args.batch}}
    return resolved_precision(PretrainJob.model_validate(apply_overrides(data, {**TIMING_SETTINGS,
                                                                                **parse_sets(args.set)})))


def trace_of(args: argparse.Namespace, zero: int | None):
    """A StepTrace for this run's `--trace-steps` (None without): its table beside the JSON (so run.sh's tar
    carries it), `<json stem>.<run>[-zero<N>].trace.txt`."""
    if not args.trace_steps:
        return None
    from benchmarks.gpu.trace import StepTrace

    folder = args.json.parent if args.json else Path(args.work or tempfile.gettempdir())
    stem = args.json.stem if args.json else "tput"
    name = f"{stem}.{args.child}" + (f"-zero{zero}" if zero is not None else "") + ".trace.txt"
    return StepTrace(folder / name, args.device == "cuda")


def child(args: argparse.Namespace) -> dict:
    """One run in this process; returns its measurements."""
    from benchmarks.gpu.stage_steps import parse_sets, pretrain_run, time_stage

    torch.manual_seed(args.seed)
    device = torch.device(args.device)
    if device.type == "cuda":
        torch.cuda.set_device(0)
        torch.cuda.reset_peak_memory_stats(device)
    cfg = model_config(args)
    total = args.warmup + args.steps + args.trace_steps + 1  # one more: the loop's last step saves and evaluates
    zero = int(args.zero) if args.child == "engine" and args.zero is not None else None
    trace = trace_of(args, zero)
    if args.child in ("engine", "sft"):
        from specs.architecture import flops_per_token, param_count

        with tempfile.TemporaryDirectory(prefix=f"tput-{args.child}-", dir=args.work) as tmp:
            if args.child == "engine":
                job = pretrain_run(Path(tmp), args.shape, args.seq, args.batch, cfg.vocab_size, zero, args.device,
                                   total, parse_sets(args.set), args.seed)
            else:
                from benchmarks.gpu.sft_inputs import sft_run

                job = sft_run(Path(tmp), cfg, args.batch, args.device, total, parse_sets(args.set), args.seed)
            out = time_stage(job, args.warmup, args.steps, trace, args.trace_steps)
        out.update(params=param_count(cfg), flops_per_token=float(flops_per_token(cfg)))
        rows_per_step = out["config"]["micro_batch"] * out["config"]["grad_accum"]
    else:
        from benchmarks.gpu.references import make_batches, run_reference

        spec = stage_spec(args)
        batches = make_batches(args.batch, args.seq, cfg.vocab_size, args.seed)
        out = run_reference(args.child, cfg, spec, batches, device, warmup=args.warmup, steps=args.steps,
                            seed=args.seed, backend=args.compile_backend, trace=trace,
                            trace_steps=args.trace_steps)
        out["config"] = {"precision": spec.train.precision, "compile": out.pop("compiled")}
        rows_per_step = args.batch
    return {"run": args.child, **out, "tokens_per_s": args.steps * rows_per_step * args.seq / out["seconds"],
            "peak_bytes": peak_memory(device),
            "device_name": torch.cuda.get_device_name(device) if device.type == "cuda" else "cpu"}


def mfu_of(result: dict) -> float | None:
    from tasks.train.loop.telemetry import UnknownDeviceError, mfu, peak_flops

    try:
        peak = peak_flops(result["device_name"], result["config"]["precision"]).flops
    except UnknownDeviceError:
        return None
    return mfu(result["tokens_per_s"], result["flops_per_token"], peak, 1)


def launch(args: argparse.Namespace, run: str, zero: str | None) -> dict:
    """Run `run` in a child process (same arguments) and parse its RESULT line."""
    env = dict(os.environ)
    if args.device == "cpu":
        env["DS_ACCELERATOR"] = "cpu"  # DeepSpeed's CPU accelerator without the fallback warning
        env.setdefault("OMP_NUM_THREADS", "1")  # oversubscribed threads made CPU steps 10-30x slower (FACTS.md)
    cmd = [sys.executable, str(Path(__file__).resolve()), *sys.argv[1:], "--child", run]
    if zero is not None:
        cmd += ["--zero", zero]
    # the child's output passes through as it comes (a part cut short keeps each run's warnings: recompiles,
    # DeepSpeed) and its last lines name a failure
    result, tail = None, collections.deque(maxlen=15)
    with subprocess.Popen(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True) as proc:
        for line in proc.stdout:
            if line.startswith("RESULT "):
                result = json.loads(line[len("RESULT "):])
            else:
                sys.stderr.write(line)
                tail.append(line.rstrip())
    if result is not None and proc.returncode == 0:
        return result
    raise RuntimeError(f"run {run} failed (exit {proc.returncode}):\n" + "\n".join(tail))


def line_of(r: dict) -> str:
    m = mfu_of(r)
    zero = f" ZeRO-{r['config']['zero']}" if "zero" in r["config"] else ""
    return (f"{LABELS[r['run']]}{zero}: {r['tokens_per_s']:,.0f} tok/s, MFU {'unknown' if m is None else f'{m:.1%}'}, "
            f"peak {r['peak_bytes'] / 2**30:.2f} GiB, first step {r['first_step_s']:.1f} s, warm-up "
            f"{r['warmup_s']:.1f} s, {r['params'] / 1e6:.1f}M params" + trace_words(r))


def trace_words(r: dict) -> str:
    t = r.get("trace")
    if not t:
        return ""
    idle = "" if t["device_idle_share"] is None else f", device idle {t['device_idle_share']:.1%}"
    return f"; {t['steps']} traced steps{idle} ({t['file']})"


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--shape", choices=("tiny", "gpt2-124m", "350m", "1b"), default="350m")
    p.add_argument("--seq", type=int, default=1024, help="sequence length (tokens per row)")
    p.add_argument("--batch", type=int, default=16, help="rows per micro-batch")
    p.add_argument("--steps", type=int, default=15, help="timed steps")
    p.add_argument("--warmup", type=int, default=3, help="untimed steps first (compile, allocator, autotune)")
    p.add_argument("--device", choices=("cpu", "cuda"), default="cuda" if torch.cuda.is_available() else "cpu")
    p.add_argument("--zero", default=None, help="engine's ZeRO stage(s), e.g. 0 or 0,3 (default: the spec's)")
    p.add_argument("--set", action="append", default=[], metavar="KEY=VALUE",
                   help="override the stage's job (dotted path, e.g. train.speed.mixed_precision=torch_autocast)")
    p.add_argument("--compile-backend", default="inductor", help="torch.compile backend of (b′) (aot_eager: a "
                   "CPU check without C++ compilation)")
    p.add_argument("--trace-steps", type=int, default=0, help="after the timed steps, this many more under "
                   "torch.profiler: each run's top ops and the device's idle share, beside --json "
                   "(benchmarks/gpu/trace.py); 0: none")
    p.add_argument("--vocab", type=int, default=None, help="vocab size (default: 8192 for tiny, else 50304)")
    p.add_argument("--runs", default=DEFAULT_RUNS, help=f"comma-separated subset of {','.join(RUNS)}")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--work", default=None, help="folder for the runs' files (default: the system temp folder)")
    p.add_argument("--json", type=Path, default=None, help="also write the measurements (and MFU) here, for "
                   "benchmarks/gpu/run.sh's table")
    p.add_argument("--child", choices=RUNS, help=argparse.SUPPRESS)  # internal: run one measurement here
    args = p.parse_args(argv)
    if args.device == "cuda" and not torch.cuda.is_available():
        p.error("--device cuda: no CUDA device visible")
    unknown = set(args.runs.split(",")) - set(RUNS)
    if unknown:
        p.error(f"--runs: unknown {sorted(unknown)}")
    if args.warmup < 1:
        p.error("--warmup: at least 1 (the first step compiles and allocates)")
    return args


def write_json(args: argparse.Namespace, results: list[dict], errors: list[str]) -> None:
    if args.json is None:
        return
    keep = ("shape", "seq", "batch", "steps", "warmup", "device", "zero", "runs", "set", "compile_backend",
            "trace_steps")
    args.json.parent.mkdir(parents=True, exist_ok=True)
    tmp = args.json.with_suffix(".tmp")
    tmp.write_text(json.dumps({"args": {k: getattr(args, k) for k in keep},
                               "results": [{**r, "mfu": mfu_of(r)} for r in results], "errors": errors}, indent=1))
    tmp.replace(args.json)


def main() -> int:
    args = parse_args()
    if args.child:
        print("RESULT " + json.dumps(child(args)), flush=True)
        return 0
    plan = [(run, z) for run in args.runs.split(",")
            for z in (args.zero.split(",") if run == "engine" and args.zero else [None])]
    print(f"shape {args.shape}, seq {args.seq}, micro-batch {args.batch}, device {args.device}, {args.steps} timed "
          f"steps after {args.warmup} warm-up; runs {', '.join(r for r, _ in plan)}", flush=True)
    results, errors = [], []
    for run, zero in plan:
        try:
            results.append(launch(args, run, zero))
            print(line_of(results[-1]), flush=True)
        except RuntimeError as exc:  # the others still run: the table says which one failed and why
            errors.append(f"{run}: {str(exc).strip().splitlines()[-1][:300]}")
            print(exc, file=sys.stderr, flush=True)
        write_json(args, results, errors)
    by = {r["run"]: r["tokens_per_s"] for r in results}
    for ref in ("nanogpt-compiled", "plain", "nanogpt"):
        if "engine" in by and ref in by:
            print(f"engine / {LABELS[ref].split()[0]}: {by['engine'] / by[ref]:.2f}×")
    return 1 if errors else 0


if __name__ == "__main__":
    raise SystemExit(main())
