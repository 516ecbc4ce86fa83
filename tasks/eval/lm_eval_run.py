"""Run lm-eval on one model and read its results back as plain numbers: the benchmark stage's engine, also what the
parity tests call. Everything here runs inside `lm_eval_offline.offline(...)` (the caller's duty)."""

from __future__ import annotations

import contextlib
import json
import math
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from specs.benchmark import BenchmarkSpec
from tasks.data.mixing.tokenizer import load_tokenizer
from tasks.train.modeling.model import ModelConfig
from tasks.train.checkpointing.weights import load_weights, model_from_state

SIGNIFICANT = 10  # digits kept of a score: the last bits of a float sum differ between BLAS builds, not these


@contextlib.contextmanager
def without_env_report() -> Iterator[None]:
    """lm-eval's `add_env_info` runs torch's collect_env (pip, nvidia-smi, ... subprocesses: 5–15 s on a busy
    2-core machine) only to describe the machine in its results; the stage's manifest records the versions that
    matter, so the report is skipped (restored afterwards)."""
    import lm_eval.evaluator as evaluator

    real = evaluator.add_env_info
    evaluator.add_env_info = lambda storage: None
    try:
        yield
    finally:
        evaluator.add_env_info = real


def forgeline_lm(folder: Path, tokenizer_json: Path, *, prefix_id: int, eot_id: int, batch_size: int, seed: int,
                 device: str = "cpu") -> Any:
    """A `ForgelineLM` over the consolidated checkpoint in `folder` (model.safetensors + config.json)."""
    from tasks.eval.lm_eval_adapter import ForgelineLM

    cfg = ModelConfig.from_dict(json.loads((folder / "config.json").read_text())["model"])
    model = model_from_state(cfg, load_weights(folder), device)
    return ForgelineLM(model, load_tokenizer(tokenizer_json), prefix_id=prefix_id, eot_id=eot_id,
                       batch_size=batch_size, seed=seed)


def evaluate(model: Any, spec: BenchmarkSpec, task_manager: Any, seed: int, model_args: dict[str, Any] | None = None
             ) -> dict[str, Any]:
    """lm-eval's results dict for `model` (an LM instance, or a registered name such as "hf" with `model_args`)
    on `spec.tasks`, seeded like `lm_eval run --seed <seed>`."""
    import lm_eval

    with without_env_report():
        return lm_eval.simple_evaluate(
            model=model, model_args=model_args, tasks=list(spec.tasks), task_manager=task_manager,
            num_fewshot=spec.num_fewshot, limit=spec.limit, batch_size=spec.batch_size, device=spec.device,
            bootstrap_iters=spec.bootstrap_iters, log_samples=False, random_seed=seed, numpy_random_seed=seed,
            torch_random_seed=seed, fewshot_random_seed=seed)


def _number(value: Any) -> float | None:
    if isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value):
        return float(f"{value:.{SIGNIFICANT}g}")
    return None  # lm-eval writes "N/A" for a metric without a standard error


def scores(results: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """{task: {n, num_fewshot, metrics: {name: {value, stderr, higher_is_better}}}} from lm-eval's results; a
    metric computed under a filter other than `none` is named `metric,filter` (gsm8k's strict-match)."""
    out: dict[str, dict[str, Any]] = {}
    for task, row in sorted(results["results"].items()):
        metrics: dict[str, dict[str, Any]] = {}
        for key, value in row.items():
            if "," not in key or "_stderr," in key:
                continue
            metric, filt = key.split(",", 1)
            name = metric if filt == "none" else key
            better = (results.get("higher_is_better", {}).get(task) or {}).get(metric)
            metrics[name] = {"value": _number(value), "stderr": _number(row.get(f"{metric}_stderr,{filt}")),
                             "higher_is_better": better}
        n = (results.get("n-samples", {}).get(task) or {}).get("effective")
        out[task] = {"n": n, "num_fewshot": results.get("n-shot", {}).get(task), "metrics": metrics}
    return out


def cli_command(spec: BenchmarkSpec, include_path: str, hf_dir: str, seed: int, prefix_id: int | None) -> str:
    """The `lm_eval` command line that scores the exported folder `hf_dir` as the stage scores its model."""
    args = ["pretrained=" + hf_dir, "dtype=float32", *([f"prefix_token_id={prefix_id}"] if prefix_id is not None
                                                       else [])]
    parts = ["lm_eval run --model hf --model_args", ",".join(args), "--tasks", ",".join(spec.tasks),
             "--include_path", include_path, "--batch_size", str(spec.batch_size), "--device", spec.device,
             "--seed", str(seed)]
    if spec.limit is not None:
        parts += ["--limit", str(spec.limit)]
    if spec.num_fewshot is not None:
        parts += ["--num_fewshot", str(spec.num_fewshot)]
    return " ".join(parts)
