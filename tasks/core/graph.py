"""The stage graph, declared once here; `dvc.yaml` is generated from it and checked against it.

`python -m tasks graph --write` regenerates dvc.yaml; `python -m tasks check` fails when the two drift.
The Prefect flow does not read this registry: it asks DVC for the order of the stages in dvc.yaml, so the
flow, `dvc repro` and this file are proven to agree by tests rather than assumed to.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

DATA_DIR = "data"
METRICS_DIR = "metrics"
RUNS_DIR = "runs"
REPORTS_DIR = "reports"

# Code every stage runs on, beyond its own module and spec.
COMMON_CODE = ("tasks/__main__.py", "tasks/core", "specs/base.py", "specs/results.py")


@dataclass(frozen=True)
class StageDef:
    """One node of the pipeline: its upstream stages, code, params sections and outputs."""

    name: str
    upstream: tuple[str, ...] = ()
    code: tuple[str, ...] = ()
    params: tuple[str, ...] = ()
    extra_outs: tuple[str, ...] = field(default=())
    # Outs DVC must not delete before a rerun (e.g. checkpoints a retried stage resumes from).
    persist_outs: tuple[str, ...] = field(default=())
    resumable: bool = False
    seeded: bool = False  # uses run.seed, so it is a DVC param of the stage
    # Paths outside data/ the stage reads (e.g. committed human review decisions): DVC deps too.
    extra_deps: tuple[str, ...] = field(default=())
    # The stage's code lives in tasks/<module>.py and specs/<module>.py (default: its name), so two stages can
    # share one implementation with their own params section (review and review_sft).
    module: str | None = None

    @property
    def module_name(self) -> str:
        return self.module or self.name

    @property
    def out_dir(self) -> str:
        return f"{DATA_DIR}/{self.name}"

    @property
    def metrics_file(self) -> str:
        return f"{METRICS_DIR}/{self.name}.json"

    def code_deps(self) -> list[str]:
        return [*COMMON_CODE, f"tasks/{self.module_name}.py", f"specs/{self.module_name}.py", *self.code]

    def param_keys(self) -> list[str]:
        return [self.name, *(["run.seed"] if self.seeded else []), *self.params]


STAGES: tuple[StageDef, ...] = (
    StageDef("ingest", code=("tasks/data",)),
    StageDef("validate", upstream=("ingest",), code=("tasks/data/records.py", "tasks/data/expectations.py")),
    # clean reads ingest's records but runs only after validate passed (its out is a dependency too).
    StageDef("clean", upstream=("ingest", "validate"), seeded=True, code=(
        "tasks/data/cleaning.py", "tasks/data/normalize.py", "tasks/data/pii.py", "tasks/data/quality.py",
        "tasks/data/toxicity.py", "tasks/data/wordlists", "tasks/data/minhash.py", "tasks/data/lsh.py",
        "tasks/data/records.py")),
    StageDef("mix", upstream=("clean",), seeded=True, code=(
        "tasks/data/tokenizer.py", "tasks/data/packing.py", "tasks/data/records.py")),
    # Checkpoints persist across reruns (a retried stage resumes from them) and stay out of the DVC cache.
    StageDef("pretrain", upstream=("mix",), seeded=True, params=("model", "parallel", "mix.adaptive"),
             code=("tasks/train", "tasks/data/packing.py", "tasks/data/tokenizer.py", "specs/mix.py"),
             persist_outs=("checkpoints/pretrain",)),
    StageDef("evaluate", upstream=("pretrain", "mix", "clean"), seeded=True, code=(
        "tasks/eval/__init__.py", "tasks/eval/generate.py", "tasks/eval/perplexity.py", "tasks/eval/spotcheck.py",
        "tasks/train/model.py", "tasks/train/tensor_parallel.py", "tasks/train/data.py", "tasks/data/packing.py",
        "tasks/data/tokenizer.py", "tasks/data/pii.py", "tasks/data/toxicity.py", "tasks/data/quality.py",
        "tasks/data/wordlists", "specs/clean.py", "specs/review.py")),
    # The gate before SFT: approves by policy (auto) or reads a human decision committed under reviews/.
    StageDef("review", upstream=("evaluate",), extra_deps=("reviews",), code=(
        "tasks/eval/review_gate.py", "tasks/eval/spotcheck.py", "specs/evaluate.py")),
    StageDef("instruct", seeded=True, params=("evaluate.prompts",), code=(
        "tasks/data/instructions.py", "tasks/data/decontaminate.py", "tasks/data/minhash.py", "tasks/data/lsh.py",
        "tasks/data/normalize.py", "tasks/data/embedded.py", "tasks/data/records.py", "specs/clean.py")),
    # Finetuning starts only from an approved model; it launches ranks like pretrain (launcher from `parallel`).
    StageDef("sft", upstream=("pretrain", "mix", "instruct", "review"), seeded=True, params=("parallel",),
             code=("tasks/train", "tasks/eval/generate.py", "tasks/eval/spotcheck.py", "tasks/data/tokenizer.py",
                   "tasks/data/packing.py", "tasks/data/pii.py", "tasks/data/toxicity.py", "tasks/data/quality.py",
                   "specs/pretrain.py", "specs/evaluate.py"),
             persist_outs=("checkpoints/sft",)),
    # The second gate (same implementation, its own params section): the finetuned model's answers.
    StageDef("review_sft", module="review", upstream=("sft",), extra_deps=("reviews",), code=(
        "tasks/eval/review_gate.py", "tasks/eval/spotcheck.py", "specs/evaluate.py")),
    StageDef("export", upstream=("sft", "review_sft"), code=(
        "tasks/train/hf_export.py", "tasks/train/chat.py", "tasks/train/model.py", "tasks/eval/generate.py")),
)

STAGE_NAMES = tuple(s.name for s in STAGES)

# `dvc plots show` / `dvc plots diff`: CSV curves the stages write inside their outs.
PLOTS: tuple[dict[str, Any], ...] = (
    {"pretrain_train_loss": {"template": "linear", "x": "step", "y": {"data/pretrain/plots/train_loss.csv": "loss"},
                             "title": "pretrain: train loss"}},
    {"pretrain_val_loss": {"template": "linear", "x": "step",
                           "y": {"data/pretrain/plots/val_loss.csv": "val_loss"},
                           "title": "pretrain: validation loss"}},
)


def stage(name: str) -> StageDef:
    for s in STAGES:
        if s.name == name:
            return s
    raise KeyError(f"unknown stage {name!r}; stages are: {', '.join(STAGE_NAMES)}")


def dvc_stage_entry(s: StageDef) -> dict[str, Any]:
    deps = [*s.code_deps(), *(stage(u).out_dir for u in s.upstream), *s.extra_deps]
    return {
        "cmd": f"python -m tasks {s.name}",
        "deps": deps,
        "params": s.param_keys(),
        "outs": [s.out_dir, *s.extra_outs, *({p: {"persist": True, "cache": False}} for p in s.persist_outs)],
        "metrics": [{s.metrics_file: {"cache": False}}],
    }


def dvc_yaml_data() -> dict[str, Any]:
    names = set(STAGE_NAMES)
    plots = [p for p in PLOTS if next(iter(p)).split("_")[0] in names]
    return {"stages": {s.name: dvc_stage_entry(s) for s in STAGES}, **({"plots": plots} if plots else {})}


HEADER = "# Generated from tasks/core/graph.py by `python -m tasks graph --write`; edit the registry, not this file.\n"


def dvc_yaml_text() -> str:
    return HEADER + yaml.safe_dump(dvc_yaml_data(), sort_keys=False, default_flow_style=False)


def check_dvc_yaml(root: Path) -> list[str]:
    """Problems with `root/dvc.yaml` relative to the registry (empty list: they agree)."""
    path = root / "dvc.yaml"
    if not path.exists():
        return ["dvc.yaml is missing: run `python -m tasks graph --write`"]
    on_disk = yaml.safe_load(path.read_text()) or {}
    want = dvc_yaml_data()["stages"]
    have = on_disk.get("stages", {})
    problems = []
    for name in sorted(set(want) | set(have)):
        if name not in have:
            problems.append(f"dvc.yaml: stage '{name}' is missing")
        elif name not in want:
            problems.append(f"dvc.yaml: stage '{name}' is not in the registry (tasks/core/graph.py)")
        elif have[name] != want[name]:
            keys = sorted(k for k in set(want[name]) | set(have[name]) if want[name].get(k) != have[name].get(k))
            problems.append(f"dvc.yaml: stage '{name}' differs from the registry in: {', '.join(keys)}")
    if problems:
        problems.append("regenerate it with `python -m tasks graph --write`")
    if on_disk.get("plots") != dvc_yaml_data().get("plots"):
        problems.append("dvc.yaml: plots differ from the registry; regenerate it with `python -m tasks graph --write`")
    for s in STAGES:
        for dep in s.code_deps():
            if not (root / dep).exists():
                problems.append(f"stage '{s.name}': code dependency {dep} does not exist")
    return problems


def missing_param_keys(raw_params: dict[str, Any]) -> list[str]:
    """Param keys that dvc.yaml tracks but params.yaml lacks (DVC refuses to run a stage without them, even
    when the schema has defaults)."""
    missing = []
    for s in STAGES:
        for key in s.param_keys():
            node: Any = raw_params
            for part in key.split("."):
                node = node.get(part) if isinstance(node, dict) else None
            if node is None:
                missing.append(f"params.yaml: '{key}' is missing (stage '{s.name}' tracks it: DVC needs "
                               f"the value written out even where the schema has a default)")
    return missing


def dvc_stage_order(root: Path, until: str | None = None) -> list[str]:
    """Stage names in the order DVC runs them (dependencies first), read from dvc.yaml by DVC itself.

    Ties are broken by the registry's order, so the order is stable. With `until`, only that stage and
    what it depends on.
    """
    import networkx as nx
    from dvc.repo import Repo

    with Repo(str(root)) as repo:
        g = repo.index.graph  # edges point from a stage to the stages it depends on
        # `name` of a dvc.yaml stage is its key there (`addressing` would carry a path relative to the cwd).
        by_name = {st.name: st for st in g.nodes if getattr(st, "cmd", None)}
        if until is not None:
            if until not in by_name:
                raise KeyError(f"unknown stage {until!r}; dvc.yaml has: {', '.join(sorted(by_name))}")
            keep = {until} | {st.name for st in nx.descendants(g, by_name[until]) if st.name in by_name}
        else:
            keep = set(by_name)
        rank = {name: i for i, name in enumerate(STAGE_NAMES)}
        deps_first = g.reverse(copy=True)
        ordered = nx.lexicographical_topological_sort(
            deps_first, key=lambda st: (rank.get(str(st.name), len(rank)), str(st.name)))
        return [st.name for st in ordered if st.name in keep and st.name in by_name]
