"""Stage `benchmark`: standard benchmarks with lm-evaluation-harness, fully offline, on the finetuned model and the
model it started from, so the model card shows before → after and a gate can stop a regressed model.

Inputs: the finished model (tasks/eval/finished.py: data/prefer/ when preference tuning trained, else data/sft/;
model.safetensors, config.json, tokenizer.json), data/pretrain/ (the model before finetuning), data/mix/ (tokenizer.json; packing.json's end-of-document id; train/val indexes: which
documents the model never trained on), data/clean/ (those documents' text); for `compare: start` the model.init
checkpoint folder; the files and include_path folders the params name (tracked by DVC as params, like
model.init.path: replace a file under a new name to re-run).
Outputs (data/benchmark/):
  tasks/       lm-eval task YAML + data: the shipped tasks built from held-out text, the definitions of
               downloaded benchmark files — what `lm_eval run --include_path data/benchmark/tasks` reads
  scores.json  per task and metric the final (`after`) and starting (`before`) model's score with its standard
               error, n, the models, the gate's checks and the equivalent `lm_eval` command line
Scratch (not a DVC out): work/benchmark/ (HF_HOME with the datasets cache; `backend: hf` conversions).
Byte-identical on rerun: seeds from run.seed, a fixed thread count, scores rounded to 10 significant digits.

Two ways in, the same scores (tests/test_benchmark_parity.py): forgeline's own checkpoints through
`ForgelineLM` (tasks/eval/lm_eval_adapter.py, `backend: forgeline`) or converted and read by lm-eval's Hugging Face
backend (`backend: hf`); a Hugging Face starting checkpoint always through the HF backend.
"""

from __future__ import annotations

import contextlib
import json
import logging
import time
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import pyarrow.parquet as pq

from specs.benchmark import SHIPPED_TASKS, BenchmarkGateSpec, BenchmarkJob, BenchmarkSpec
from specs.results import StageResult
from tasks.core.files import write_json_atomic
from tasks.core.graph import stage as stage_def
from tasks.core.runner import StagePaths
from tasks.data.shard_rows import select_rows
from tasks.eval import lm_eval_tasks as shipped
from tasks.eval.finished import finished_model
from tasks.eval.generate import torch_threads
from tasks.eval.lm_eval_offline import offline, offline_problems
from tasks.eval.lm_eval_run import cli_command, evaluate, forgeline_lm, scores

log = logging.getLogger("forgeline.benchmark")

TASKS_DIR, SCORES = "tasks", "scores.json"
WORK_DIR = "work/benchmark"
EXPORTED = "data/export/hf"  # what the recorded `lm_eval` command scores: the folder export publishes


@dataclass(frozen=True)
class ModelRef:
    """One model to score: `role` before/after, `what` it is, where, and through which lm-eval backend."""

    role: str
    what: str
    path: Path
    backend: str
    tokenizer: Path | None = None  # forgeline checkpoints: the tokenizer.json their ids come from


def run(spec: BenchmarkJob, paths: StagePaths) -> StageResult:
    bench = spec.benchmark
    inputs = {s: paths.input(s) for s in ("pretrain", "mix", "clean")}
    inputs["final"], final_stage = finished_model(paths)  # what export publishes
    for needed in (inputs["final"] / "config.json", inputs["mix"] / "packing.json", inputs["mix"] / "tokenizer.json"):
        if not needed.is_file():
            raise FileNotFoundError(f"benchmark: {needed} not found (run the stages before it first)")
    prefix_id = prefix_token(spec, inputs["mix"])
    built = build_tasks(bench, paths, inputs["mix"], inputs["clean"])
    models = model_refs(spec, inputs, final_stage)
    include = [paths.out / TASKS_DIR, *(paths.root / p for p in bench.include_path)]
    missing = [str(p) for p in include if not p.is_dir()]
    if missing:
        raise FileNotFoundError(f"benchmark.include_path: {', '.join(missing)} is not a folder")
    measured: dict[str, dict[str, Any]] = {}
    with offline(paths.root / WORK_DIR / "hf_home"), contextlib.chdir(paths.root), torch_threads(bench.threads):
        from lm_eval.tasks import TaskManager

        # Only the folders named here are indexed: lm-eval's built-in tasks read the Hub (and take ~18 s to index).
        manager = TaskManager(include_path=[str(p) for p in include], include_defaults=False)
        problems = offline_problems(bench.tasks, manager.task_index, paths.root)
        if problems:
            raise ValueError("benchmark: these tasks cannot run offline from local files:\n  " + "\n  ".join(problems))
        for ref in models:
            t0 = time.perf_counter()
            model, model_args = load(ref, bench, paths, prefix_id)
            measured[ref.role] = scores(evaluate(model, bench, manager, paths.seed, model_args))
            log.info("benchmark: %s model (%s, %s backend) scored in %.1f s", ref.role, ref.what, ref.backend,
                     time.perf_counter() - t0)
    table = merge(measured)
    checks = gate_checks(bench.gate, table)
    report = {
        "models": {r.role: {"what": r.what, "path": _rel(r.path, paths.root), "backend": r.backend} for r in models},
        "tasks": {name: {**row, "source": "shipped" if name in SHIPPED_TASKS else "user",
                         **({"built_docs": built[name]} if name in built else {})} for name, row in table.items()},
        "gate": checks,
        "lm_eval": {"version": _version("lm_eval"), "seed": paths.seed, "limit": bench.limit,
                    "num_fewshot": bench.num_fewshot, "command_on_export": cli_command(
                        bench, f"{stage_def('benchmark').out_dir}/{TASKS_DIR}", EXPORTED, paths.seed, prefix_id)},
    }
    report["card"] = card_section(report)
    write_json_atomic(paths.out / SCORES, report)
    ok = all(c["passed"] for c in checks)
    return StageResult(stage="benchmark", ok=ok, counts=_counts(table, checks), summary=_summary(report, ok),
                       table=_rows(table))


# ------------------------------------------------------------------------------------------------- models
def prefix_token(spec: BenchmarkJob, mix: Path) -> int:
    """The token an empty context and every rolling window start from: a starting checkpoint's BOS when it has
    one (what lm-eval's HF backend uses), else the end-of-document token that precedes every packed document."""
    if spec.model_init.kind == "hf":
        folder = Path(spec.model_init.path or "")
        conf = folder / "tokenizer_config.json"
        bos = json.loads(conf.read_text()).get("bos_token") if conf.is_file() else None
        bos = bos.get("content") if isinstance(bos, dict) else bos
        if isinstance(bos, str):
            from tasks.data.mixing.tokenizer import load_tokenizer

            bos_id = load_tokenizer(mix / "tokenizer.json").token_to_id(bos)
            if bos_id is not None:
                return bos_id
    return int(json.loads((mix / "packing.json").read_text())["eos_id"])


def model_refs(spec: BenchmarkJob, inputs: dict[str, Path], final_stage: str = "sft") -> list[ModelRef]:
    """The finished model (`after`: `final_stage`'s) and, per `compare`, the one it is compared with (`before`)."""
    bench = spec.benchmark
    refs = [ModelRef("after", final_stage, inputs["final"], bench.backend, inputs["final"] / "tokenizer.json")]
    compare = bench.compare
    if compare == "auto":
        compare = "start" if spec.model_init.kind == "hf" else "pretrain"
    if compare == "start":
        refs.append(ModelRef("before", "model.init", Path(spec.model_init.path or ""), "hf"))
    elif compare == "pretrain":
        refs.append(ModelRef("before", "pretrain", inputs["pretrain"], bench.backend,
                             inputs["mix"] / "tokenizer.json"))
    return refs


def load(ref: ModelRef, bench: BenchmarkSpec, paths: StagePaths, prefix_id: int) -> tuple[Any, dict | None]:
    """(an LM instance, None) or ("hf", model_args) for lm-eval's `simple_evaluate`."""
    if ref.backend == "forgeline":
        return forgeline_lm(ref.path, ref.tokenizer, prefix_id=prefix_id, eot_id=prefix_id,
                            batch_size=bench.batch_size, seed=paths.seed, device=bench.device), None
    folder, extra = ref.path, {}
    if ref.tokenizer is not None:  # a forgeline checkpoint: converted as export converts it (tasks/train/hf/hf_export.py)
        folder, extra = hf_conversion(ref, paths), {"prefix_token_id": prefix_id}
    return "hf", {"pretrained": str(folder), "dtype": "float32", **extra}


def hf_conversion(ref: ModelRef, paths: StagePaths) -> Path:
    """`ref`'s checkpoint as a Hugging Face folder under work/benchmark/ (rewritten each run)."""
    from tasks.train.hf.hf_export import export_hf
    from tasks.train.modeling.model import ModelConfig
    from tasks.train.checkpointing.weights import load_weights

    cfg = ModelConfig.from_dict(json.loads((ref.path / "config.json").read_text())["model"])
    cfg = replace(cfg, seq_len=max(cfg.max_positions or 0, cfg.seq_len))  # the context export states
    out = paths.root / WORK_DIR / f"{ref.role}-hf"
    export_hf(load_weights(ref.path), cfg, ref.tokenizer, out, card={"name": f"forgeline {ref.what} (benchmark)"})
    return out


# -------------------------------------------------------------------------------------------------- tasks
def heldout_texts(mix: Path, clean: Path, sources: list[str] | None) -> tuple[list[str], set[str]]:
    """(texts of held-out prose documents — mix's val split — sorted by id, origins of the documents in mix's
    train split). Prose: `sources`, or every source whose `lang` is a language tag (2–3 letters), not code's."""
    def ids(index: str) -> set[str]:
        return {i for row in pq.read_table(mix / index, columns=["doc_ids"]).column("doc_ids").to_pylist()
                for i in row}

    def prose(source: str, lang: Any) -> bool:
        if sources is not None:
            return source in sources
        return isinstance(lang, str) and lang.isalpha() and 2 <= len(lang) <= 3

    val, train = ids("val.idx.parquet"), ids("train.idx.parquet")
    texts: dict[str, str] = {}
    trained: set[str] = set()
    for shard in sorted((clean / "shards").glob("*.parquet")):
        rows = pq.read_table(shard, columns=["id", "source", "lang", "origin"]).to_pylist()
        trained.update(r["origin"] for r in rows if r["id"] in train)
        wanted = {r["id"] for r in rows if r["id"] in val and prose(r["source"], r["lang"])}
        if wanted:  # the text of the few held-out rows only, a batch at a time (not the shard's whole text column)
            texts.update((r["id"], r["text"]) for r in select_rows([shard], ["id", "text"], wanted))
    return [texts[k] for k in sorted(texts)], trained


def build_tasks(bench: BenchmarkSpec, paths: StagePaths, mix: Path, clean: Path) -> dict[str, int]:
    """Write the YAML + data of the shipped tasks `bench.tasks` names and of `bench.files`; {task: docs built}."""
    folder = paths.out / TASKS_DIR
    folder.mkdir(parents=True, exist_ok=True)
    rel = f"{stage_def('benchmark').out_dir}/{TASKS_DIR}"
    configs, built = shipped.shipped_configs(rel), {}
    wanted = [t for t in SHIPPED_TASKS if t in bench.tasks]
    if wanted:
        texts, trained = heldout_texts(mix, clean, bench.shipped.prose_sources)
        makers = {
            shipped.DOCSTRING_CLOZE: lambda: shipped.choice_docs(
                shipped.docstring_items(paths.seed, bench.shipped.docs, trained), bench.shipped.choices, paths.seed,
                shipped.DOCSTRING_CLOZE),
            shipped.PROSE_CHOICE: lambda: shipped.prose_choice_items(texts, bench.shipped, paths.seed),
            shipped.PROSE_PPL: lambda: shipped.prose_ppl_docs(texts, bench.shipped),
        }
        for name in wanted:
            docs = makers[name]()
            if not docs:
                raise ValueError(f"benchmark: no held-out text to build {name} from (mix's val split has no prose "
                                 "document long enough; see benchmark.shipped): remove it from benchmark.tasks")
            shipped.write_task(folder, configs[name], docs)
            built[name] = len(docs)
    for f in bench.files:
        for p in (f.path, f.fewshot_path):
            if p is not None and not (paths.root / p).is_file():
                raise FileNotFoundError(f"benchmark.files: {f.name}: {p} not found")
        shipped.write_file_task(folder, f)
    return built


# --------------------------------------------------------------------------------------------- results
def merge(measured: dict[str, dict[str, dict[str, Any]]]) -> dict[str, dict[str, Any]]:
    """{task: {n, num_fewshot, metrics: {metric: {after, after_stderr, before, before_stderr, higher_is_better}}}}."""
    table: dict[str, dict[str, Any]] = {}
    for role in ("after", "before"):
        for task, row in (measured.get(role) or {}).items():
            entry = table.setdefault(task, {"n": row["n"], "num_fewshot": row["num_fewshot"], "metrics": {}})
            for metric, m in row["metrics"].items():
                cell = entry["metrics"].setdefault(metric, {"higher_is_better": m["higher_is_better"]})
                cell[role], cell[f"{role}_stderr"] = m["value"], m["stderr"]
    return table


def gate_checks(gate: BenchmarkGateSpec, table: dict[str, dict[str, Any]]) -> list[dict[str, Any]]:
    """One check per minimum score and per compared metric of the regression check, each passed or not."""
    checks = []
    for key, minimum in sorted(gate.min_scores.items()):
        task, metric = key.split("/")
        value = ((table.get(task) or {}).get("metrics", {}).get(metric) or {}).get("after")
        checks.append({"check": f"{key} ≥ {minimum:g}", "measured": value,
                       "passed": value is not None and value >= minimum})
    if gate.max_regression is None:
        return checks
    for task, row in sorted(table.items()):
        for metric, cell in sorted(row["metrics"].items()):
            if metric.split(",")[0] not in gate.regression_metrics or cell.get("before") is None \
                    or cell.get("after") is None or cell["higher_is_better"] is None:
                continue
            drop = cell["before"] - cell["after"] if cell["higher_is_better"] else cell["after"] - cell["before"]
            checks.append({"check": f"{task}/{metric} regression ≤ {gate.max_regression:g}",
                           "measured": round(drop, 10), "passed": drop <= gate.max_regression})
    return checks


def _counts(table: dict[str, dict[str, Any]], checks: list[dict[str, Any]]) -> dict[str, Any]:
    """metrics/benchmark.json: scores and standard errors per model, task and metric (`dvc metrics diff`)."""
    counts: dict[str, Any] = {}
    for task, row in table.items():
        for metric, cell in row["metrics"].items():
            for role in ("after", "before"):
                if cell.get(role) is not None:
                    counts.setdefault(role, {}).setdefault(task, {})[metric] = cell[role]
                    if cell.get(f"{role}_stderr") is not None:
                        counts[role][task][f"{metric}_stderr"] = cell[f"{role}_stderr"]
    return {**counts, "gate_checks": len(checks), "gate_failed": sum(not c["passed"] for c in checks)}


def _rows(table: dict[str, dict[str, Any]]) -> list[dict[str, Any]]:
    return [{"task": task, "metric": metric, "before": cell.get("before"), "after": cell.get("after"),
             "stderr": cell.get("after_stderr"), "n": row["n"]}
            for task, row in table.items() for metric, cell in row["metrics"].items()]


def card_section(report: dict[str, Any]) -> dict[str, Any]:
    """What export's model card shows (`## Benchmarks`): a table of task, metric, before → after with lm-eval's
    standard errors, n (columns and rows apart: JSON files here are written with sorted keys), and a note on how
    the scores were made and are reproduced on the exported folder."""
    roles = [r for r in ("before", "after") if r in report["models"]]
    columns = ["task", "metric", *(f"{r} ({report['models'][r]['what']})" for r in roles), "n"]
    rows = [[task, metric, *(_fmt(cell.get(r), cell.get(f"{r}_stderr")) for r in roles), row["n"]]
            for task, row in report["tasks"].items() for metric, cell in row["metrics"].items()]
    lm = report["lm_eval"]
    note = (f"Scored offline with lm-evaluation-harness {lm['version']} (seed {lm['seed']}, at most "
            f"{lm['limit'] or 'all'} items per task) by forgeline's `benchmark` stage; the `forgeline_*` tasks are "
            f"built from text the model did not train on. The same scores from this folder: "
            f"`{lm['command_on_export']}` (run from the project root).")
    return {"columns": columns, "rows": rows, "note": note}


def _fmt(value: Any, stderr: Any = None) -> str:
    if value is None:
        return "—"
    return f"{value:.4g}" + (f" ± {stderr:.2g}" if stderr is not None else "")


def _summary(report: dict[str, Any], ok: bool) -> str:
    models = report["models"]
    before = models.get("before")
    lines = [f"**benchmark**: {models['after']['what']} ({models['after']['backend']} backend)"
             + (f" vs {before['what']} ({before['backend']})" if before else "")
             + f", lm-eval {report['lm_eval']['version']}, offline.", "",
             "| task | metric | before | after | n |", "|---|---|---|---|---|"]
    for task, row in report["tasks"].items():
        for metric, cell in row["metrics"].items():
            lines.append(f"| {task} | {metric} | {_fmt(cell.get('before'), cell.get('before_stderr'))} | "
                         f"{_fmt(cell.get('after'), cell.get('after_stderr'))} | {row['n']} |")
    if report["gate"]:
        lines += ["", "Gate: " + ("passed" if ok else "**FAILED** — export does not run") + "."]
        lines += [f"- {c['check']}: measured {_fmt(c['measured'])} — {'pass' if c['passed'] else 'FAIL'}"
                  for c in report["gate"]]
    lines += ["", f"Same scores on the exported model: `{report['lm_eval']['command_on_export']}`"]
    return "\n".join(lines)


def _rel(path: Path, root: Path) -> str:
    try:
        return path.resolve().relative_to(root.resolve()).as_posix()
    except ValueError:
        return str(path)


def _version(package: str) -> str | None:
    from importlib import metadata

    try:
        return metadata.version(package)
    except metadata.PackageNotFoundError:
        return None
