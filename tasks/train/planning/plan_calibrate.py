"""The step-time model against measured steps: each measured run (a layout timed by `plan --measure`, an engine
row of the GPU script's throughput JSON, a recorded figure) priced by the planner with its whole recipe fixed,
and the relative error of the estimate.

Used by `python -m tasks plan --measure` (an estimate column when the device's peak is known or given with
--peak-tflops) and by benchmarks/planner_calibration.py (the README's estimate-vs-measured table). Pure Python.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

from specs.batch import BatchGeometry
from specs.pretrain import ModelSpec
from tasks.train.planning.cluster import ClusterSpec
from tasks.train.planning.plan_cost import StepCost
from tasks.train.planning.planner import search
from tasks.train.loop.telemetry import canonical_device

# The vocabulary benchmarks/pretrain_throughput.py trains when its JSON does not record one.
THROUGHPUT_DEFAULT_VOCAB = {"tiny": 8192}
THROUGHPUT_FALLBACK_VOCAB = 50304


@dataclass(frozen=True)
class Observation:
    """One measured (or still pending) training step of a fully given recipe."""

    label: str
    source: str                       # where the figure comes from (command, file, document)
    model: ModelSpec
    vocab_size: int
    seq_len: int
    cluster: ClusterSpec              # the devices the run used (nodes × gpus_per_node = dp·tp·pp)
    dp: int
    tp: int
    pp: int
    zero_stage: int
    micro_batch: int
    grad_accum: int
    checkpointing: str = "off"
    measured_s_per_step: float | None = None   # None: not measured yet (a pending row)

    @property
    def tokens_per_step(self) -> int:
        return BatchGeometry(self.micro_batch, self.grad_accum, self.dp).tokens(self.seq_len)


def estimate(obs: Observation) -> StepCost | None:
    """The cost model's step time for the observation's recipe (None: no peak FLOP/s for its device)."""
    fixed = {"dp": obs.dp, "tp": obs.tp, "pp": obs.pp, "zero_stage": obs.zero_stage,
             "micro_batch": obs.micro_batch, "grad_accum": obs.grad_accum, "checkpointing": obs.checkpointing,
             "sequence_parallel": False}
    p = search(obs.model, obs.cluster, vocab_size=obs.vocab_size, seq_len=obs.seq_len, fixed=fixed,
               checkpointing=(obs.checkpointing,))
    priced = [r for r in p.rows if r.memory is not None]   # the one recipe, fitting the memory or not
    return priced[0].cost if priced else None


def relative_error(obs: Observation, cost: StepCost | None) -> float | None:
    """(estimated − measured) / measured step time; None when either is missing."""
    if cost is None or not obs.measured_s_per_step:
        return None
    return cost.step_s / obs.measured_s_per_step - 1


def comparison_table(observations: list[Observation]) -> str:
    """Markdown: one row per observation, estimate beside measurement, and the mean absolute error."""
    lines = ["| run | source | recipe | measured s/step | estimated s/step | error |",
             "|---|---|---|---:|---:|---:|"]
    errors = []
    for obs in observations:
        cost = estimate(obs)
        err = relative_error(obs, cost)
        if err is not None:
            errors.append(abs(err))
        recipe = (f"dp {obs.dp}, tp {obs.tp}, pp {obs.pp}, ZeRO-{obs.zero_stage}, mb {obs.micro_batch} × "
                  f"{obs.grad_accum}, ckpt {obs.checkpointing}")
        measured = "pending" if obs.measured_s_per_step is None else f"{obs.measured_s_per_step:.4g}"
        est = "no peak" if cost is None else f"{cost.step_s:.4g}"
        lines.append(f"| {obs.label} | {obs.source} | {recipe} | {measured} | {est} | "
                     f"{'-' if err is None else f'{err:+.0%}'} |")
    if errors:
        lines.append(f"\nmean |error| over {len(errors)} measured rows: {sum(errors) / len(errors):.0%}")
    return "\n".join(lines)


def zero_of(row: dict, args: dict) -> int:
    """A throughput row's ZeRO stage: its own config's (a run over several stages, `--zero 0,3`, records each
    row's), else the single stage the run was given, else 0."""
    config_zero = row.get("config", {}).get("zero")
    if config_zero is not None:
        return int(config_zero)
    given = str(args.get("zero") or "0")
    return int(given) if "," not in given else 0


def throughput_observations(folder: Path, memory_gb: float = 140.0) -> list[Observation]:
    """The engine rows of benchmarks/gpu/run.sh's throughput parts (`<folder>/tput-*.json`, written by
    benchmarks/pretrain_throughput.py --json): one device, dp = tp = pp = 1, the recorded micro-batch,
    accumulation and ZeRO stage; activation checkpointing off (the stage's default)."""
    out = []
    for file in sorted(Path(folder).glob("tput-*.json")):
        data = json.loads(file.read_text())
        args = data.get("args", {})
        for row in data.get("results", []):
            if row.get("run") != "engine" or not row.get("tokens_per_s"):
                continue
            config = row.get("config", {})
            mb, ga = int(config.get("micro_batch", args["batch"])), int(config.get("grad_accum", 1))
            shape, seq = args["shape"], int(args["seq"])
            device = canonical_device(row.get("device_name", "")) or row.get("device_name", "unknown")
            cluster = ClusterSpec(nodes=1, gpus_per_node=1, memory_gb=memory_gb, device=device, inter_node="none",
                                  precision=config.get("precision", "bf16"), overhead_gb=0)
            out.append(Observation(
                f"{shape} engine", file.name, ModelSpec(flavor=shape),
                int(args.get("vocab") or THROUGHPUT_DEFAULT_VOCAB.get(shape, THROUGHPUT_FALLBACK_VOCAB)), seq,
                cluster, 1, 1, 1, zero_of(row, args), mb, ga,
                measured_s_per_step=mb * ga * seq / float(row["tokens_per_s"])))
    return out
