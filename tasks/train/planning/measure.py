"""`python -m tasks plan --measure`: pick the parallel layout by timing it instead of estimating its memory.

Every dp × tp × pp layout of 1 … `ranks` local ranks (CPU ranks, or the GPUs of this machine) that passes the
divisibility checks and fits the memory per device (plan_memory.estimate_memory) trains a few real steps of the
params' model — the same launch path and training loop as the pretrain stage (tasks.train.launch), on a
throw-away synthetic mix of the params' vocabulary and sequence length, in a temporary folder. Each layout keeps
the params' micro_batch_size and grad_accum, so its global batch is micro_batch × grad_accum × dp; throughput
(tokens/s over all ranks) is therefore the fair yardstick across world sizes: a fixed token budget finishes
soonest on the layout with the most tokens/s. The first `warmup` steps (allocator warm-up, first collectives)
are not timed; start-up (process launch, DeepSpeed init) is reported but not judged.

Choice: the valid layout with the highest tokens/s; near ties (within `tie_tolerance`, timing noise) go to
fewer ranks, then to the least model parallelism (pp, then tp) — the memory planner's order.
"""

from __future__ import annotations

import json
import os
import tempfile
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from specs.batch import BatchGeometry
from specs.pretrain import ModelSpec, ParallelSpec, PretrainJob, PretrainSpec, layout_problems
from tasks.train.planning.plan_memory import GIB, estimate_memory
from tasks.train.planning.planner import candidate_layouts

if TYPE_CHECKING:
    from specs.params import Params
    from tasks.train.planning.cluster import ClusterSpec
    from tasks.train.planning.plan_calibrate import Observation


@dataclass
class Measurement:
    """One layout: its timing, or why it was not (or could not be) measured."""

    dp: int
    tp: int
    pp: int
    zero_stage: int
    global_batch: int                    # sequences per optimizer step
    s_per_step: float | None = None
    tokens_per_s: float | None = None
    startup_s: float | None = None       # launch + DeepSpeed init + first steps' set-up (not judged)
    problem: str | None = None           # rejected before measuring, or the error of a failed run

    @property
    def world(self) -> int:
        return self.dp * self.tp * self.pp

    @property
    def ok(self) -> bool:
        return self.problem is None and self.tokens_per_s is not None and self.tokens_per_s > 0


def default_ranks(accelerator: str = "auto") -> int:
    """The GPUs of this machine, or the CPU count capped at 4 (more CPU ranks than cores only thrash)."""
    import torch

    if accelerator != "cpu" and torch.cuda.is_available():
        return torch.cuda.device_count()
    return max(1, min(os.cpu_count() or 1, 4))


def candidates(model: ModelSpec, train: PretrainSpec, ranks: int, *, vocab_size: int, seq_len: int,
               zero_stage: int = 0, precision: str | None = None, memory_gb: float | None = None,
               cuda: bool = False) -> list[Measurement]:
    """Every layout of 1 … ranks ranks, those that cannot run with `problem` set (not to be measured); `cuda`:
    the ranks run on CUDA (bf16 is then priced in the mode `train.speed.mixed_precision` resolves to there)."""
    out = []
    for world in range(1, ranks + 1):
        for dp, tp, pp in candidate_layouts(world):
            # ZeRO shards over dp (nothing to shard at dp = 1); DeepSpeed allows ZeRO ≤ 1 with a pipeline.
            zero = 0 if dp == 1 else (min(zero_stage, 1) if pp > 1 else zero_stage)
            m = Measurement(dp, tp, pp, zero, BatchGeometry(train.micro_batch_size, train.grad_accum, dp).global_batch)
            # heads, kv heads and the SwiGLU width divisible by tp, layers by pp
            problems = layout_problems(model, ParallelSpec.model_construct(dp=dp, tp=tp, pp=pp))
            if not problems and memory_gb is not None:
                p = precision or train.precision
                p = "bf16" if p == "auto" else p  # auto is bf16 on GPUs
                est = estimate_memory(model, vocab_size, seq_len, train.micro_batch_size, p, dp, tp, pp, zero,
                                      train.activation_checkpointing, train.grad_accum,
                                      autocast=train.speed.autocast(p, cuda), compiled=train.speed.compiles(cuda))
                if est.total > memory_gb * GIB:
                    problems.append(f"needs {est.total / GIB:.1f} GiB > {memory_gb:g} GiB per device")
            m.problem = "; ".join(problems) or None
            out.append(m)
    return out


def choose(measurements: list[Measurement], tie_tolerance: float = 0.02) -> Measurement | None:
    """The fastest valid layout (highest tokens/s); within `tie_tolerance` of it, the fewest ranks, then the least
    pipeline and tensor parallelism."""
    ok = [m for m in measurements if m.ok]
    if not ok:
        return None
    best = max(m.tokens_per_s for m in ok)
    near = [m for m in ok if m.tokens_per_s >= best * (1 - tie_tolerance)]
    return min(near, key=lambda m: (m.world, m.pp, m.tp, m.zero_stage, -m.tokens_per_s))


def measure_layout(m: Measurement, model: ModelSpec, train: PretrainSpec, mix_dir: Path, work: Path, *,
                   steps: int, warmup: int, seed: int, accelerator: str) -> Measurement:
    """Train `warmup + steps` real steps at layout `m` (spawned local ranks) and read rank 0's telemetry."""
    from tasks.train.inputs.synthetic import make_job
    from tasks.train.launch import environ, launch

    total = warmup + steps
    short = train.model_copy(update={
        "steps": total, "log_every": total, "eval_every": total, "eval_batches": 1, "checkpoint_every": total,
        "keep_checkpoints": 1, "sanity_overfit": False,
        "stability": train.stability.model_copy(update={"enabled": False}),
        "telemetry": train.telemetry.model_copy(update={"warmup_steps": warmup, "throughput_window": steps,
                                                        "wandb": "disabled", "nvml": False})})
    parallel = ParallelSpec(dp=m.dp, tp=m.tp, pp=m.pp, zero_stage=m.zero_stage, accelerator=accelerator)
    spec = PretrainJob(model=model, parallel=parallel, train=short)
    base = Path(work) / f"dp{m.dp}-tp{m.tp}-pp{m.pp}"
    job = make_job(base, mix_dir, spec, seed)
    try:
        with environ(WANDB_MODE="disabled"):
            result = launch(job, base / "launch")
    except Exception as exc:  # one layout failing (e.g. out of memory) must not end the comparison
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else ""
        m.problem = f"run failed: {type(exc).__name__}: {first}"
        return m
    rows = [json.loads(x) for x in (base / "reports" / "telemetry.jsonl").read_text().splitlines() if x.strip()]
    last = next((r for r in reversed(rows) if r.get("tokens_per_s")), None)
    if last is None:
        m.problem = "no timed steps (raise --measure-steps)"
        return m
    m.tokens_per_s, m.s_per_step = float(last["tokens_per_s"]), float(last["step_time_s"])
    m.startup_s = result.timing.startup_s if result.timing else None
    return m


Runner = Callable[..., Measurement]


def measure_layouts(rows: list[Measurement], model: ModelSpec, train: PretrainSpec, *, vocab_size: int,
                    seq_len: int, steps: int = 5, warmup: int = 2, seed: int = 0, accelerator: str = "auto",
                    work_dir: Path | None = None, runner: Runner | None = None,
                    progress: Callable[[str], None] | None = None) -> list[Measurement]:
    """Measure every row without a `problem` (in place, in order); a synthetic mix is written once."""
    from tasks.train.inputs.synthetic import synthetic_mix

    runner = runner or measure_layout
    with tempfile.TemporaryDirectory(prefix="forgeline-measure-", dir=work_dir) as tmp:
        # uint16 shards: a vocabulary beyond 65,536 ids is timed at 65,536 (the embedding is a small share of
        # a step at that size); the sources' token bands only need to exist
        mix_dir = synthetic_mix(Path(tmp) / "mix", vocab_size=min(vocab_size, 1 << 16), seq_len=seq_len,
                                docs=64, val_docs=8, seed=seed)
        for m in rows:
            if m.problem is None:
                if progress:
                    progress(f"measuring dp={m.dp} tp={m.tp} pp={m.pp} zero={m.zero_stage} ...")
                runner(m, model, train, mix_dir, Path(tmp), steps=steps, warmup=warmup, seed=seed,
                       accelerator=accelerator)
    return rows


def render(rows: list[Measurement], chosen: Measurement | None, header: str = "") -> str:
    cols = (f"{'dp':>3} {'tp':>3} {'pp':>3} {'zero':>4} {'ranks':>5} {'batch':>5} | {'s/step':>8} "
            f"{'tokens/s':>10} {'start s':>7} | chosen | note")
    lines = ([header] if header else []) + [cols, "-" * len(cols)]
    for m in rows:
        s = "-" if m.s_per_step is None else f"{m.s_per_step:.4f}"
        t = "-" if m.tokens_per_s is None else f"{m.tokens_per_s:,.0f}"
        up = "-" if m.startup_s is None else f"{m.startup_s:.1f}"
        mark = "*" if m is chosen else ""
        line = (f"{m.dp:>3} {m.tp:>3} {m.pp:>3} {m.zero_stage:>4} {m.world:>5} {m.global_batch:>5} | {s:>8} "
                f"{t:>10} {up:>7} | {mark:^6} | {m.problem or ''}")
        lines.append(line.rstrip())
    lines.append("")
    lines.append(f"chosen: dp={chosen.dp} tp={chosen.tp} pp={chosen.pp} zero_stage={chosen.zero_stage} "
                 f"({chosen.tokens_per_s:,.0f} tokens/s, {chosen.s_per_step:.4f} s/step)" if chosen
                 else "chosen: none (no layout could be measured)")
    return "\n".join(lines)


def observations(rows: list[Measurement], params: Params, train: PretrainSpec, cluster: ClusterSpec,
                 source: str = "plan --measure") -> list[Observation]:
    """The measured rows as plan_calibrate observations on one node of `cluster`'s device (each row on its own
    ranks), for the estimate-vs-measured comparison."""
    from tasks.train.planning.plan_calibrate import Observation

    out = []
    for m in rows:
        if not m.ok:
            continue
        node = cluster.model_copy(update={"nodes": 1, "gpus_per_node": m.world, "inter_node": "none",
                                          "intra_node": "shm" if cluster.device == "cpu" else cluster.intra_node,
                                          "precision": train.precision})
        out.append(Observation(f"dp {m.dp} tp {m.tp} pp {m.pp}", source, params.model,
                               params.mix.tokenizer.vocab_size, params.mix.seq_len, node, m.dp, m.tp, m.pp,
                               m.zero_stage, train.micro_batch_size, train.grad_accum,
                               "full" if train.activation_checkpointing else "off", m.s_per_step))
    return out


def run_measure(params: Params, *, ranks: int | None = None, steps: int = 5, warmup: int = 2,
                memory_gb: float | None = None, precision: str | None = None, runner: Runner | None = None,
                echo: Callable[[str], None] = print, cluster: ClusterSpec | None = None) -> int:
    """The `plan --measure` command: measure, print the table and the choice; 0 when one was chosen, else 2.
    With `cluster` (the plan options: its device and --peak-tflops), also each layout's estimated step time
    beside the measured one (plan_calibrate)."""
    acc = params.parallel.accelerator
    ranks = ranks or default_ranks(acc)
    from tasks.train.launch import use_cpu

    train = params.pretrain if precision is None else params.pretrain.model_copy(update={"precision": precision})
    if train.precision == "auto":  # measured here, on this machine's devices
        train = train.model_copy(update={"precision": "fp32" if use_cpu(acc) else "bf16"})
    vocab, seq_len = params.mix.tokenizer.vocab_size, params.mix.seq_len
    rows = candidates(params.model, train, ranks, vocab_size=vocab, seq_len=seq_len,
                      zero_stage=params.parallel.zero_stage, precision=train.precision, memory_gb=memory_gb,
                      cuda=not use_cpu(acc))
    measure_layouts(rows, params.model, train, vocab_size=vocab, seq_len=seq_len, steps=steps, warmup=warmup,
                    seed=params.run.seed, accelerator=acc, runner=runner, progress=echo)
    chosen = choose(rows)
    r = params.model.resolved()
    header = (f"measured: {params.model.flavor} (layers {r['n_layers']}, d_model {r['d_model']}, vocab {vocab}, "
              f"seq_len {seq_len}), micro_batch {train.micro_batch_size} × grad_accum {train.grad_accum} per "
              f"replica, {train.precision}, {steps} timed steps after {warmup} warm-up, up to {ranks} local ranks "
              f"({'GPU' if acc != 'cpu' and _cuda() else 'CPU'})")
    echo(render(rows, chosen, header))
    if cluster is not None:
        from tasks.train.planning.plan_calibrate import comparison_table

        echo("\nestimate vs measured (the step-time model of `plan`, each layout's recipe fixed):\n"
             + comparison_table(observations(rows, params, train, cluster)))
    return 0 if chosen is not None else 2


def _cuda() -> bool:
    import torch

    return torch.cuda.is_available()


__all__ = ["Measurement", "candidates", "choose", "default_ranks", "measure_layout", "measure_layouts",
           "observations", "render", "run_measure"]
