"""The stage graph, declared once here; `dvc.yaml` is generated from it and checked against it.

`python -m tasks graph --write` regenerates dvc.yaml; `python -m tasks check` fails when the two drift.
The Prefect flow does not read this registry: it asks DVC for the order of the stages in dvc.yaml, so the
flow, `dvc repro` and this file are proven to agree by tests rather than assumed to.

A stage's code deps are not declared: they are the import closure of what its process runs (the stage entry,
its module and spec, the rank workers it starts; tasks/core/closure.py), read with `ast` from the files on disk,
so an edit re-runs exactly the stages that can execute the edited file (and, through their outs, what is
downstream of them). `check` also refuses a stage whose deps hold another stage's module (`over_broad`).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from tasks.core import datadeps
from tasks.core.closure import CODE_PACKAGES, PACKAGE_DATA, STAGE_ENTRY, data_files, import_closure

DATA_DIR = "data"
METRICS_DIR = "metrics"
RUNS_DIR = "runs"
REPORTS_DIR = "reports"
MANIFEST = "manifest.json"  # what tasks/core/runner.py writes in every stage's out folder

# The checkout whose code the stages run: their code deps are computed from the files here (tasks/core/closure.py).
CODE_ROOT = Path(__file__).resolve().parents[2]


@dataclass(frozen=True)
class StageDef:
    """One node of the pipeline: its upstream stages, params sections and outputs (its code is computed)."""

    name: str
    upstream: tuple[str, ...] = ()
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
    # A gate's verdict: the file of its out that the stages after it depend on (DVC dep, manifest input), rather
    # than the whole folder, whose report and manifest also change with knobs that leave the verdict as it was.
    verdict: str | None = None
    # Stages whose record (manifest, or a gate's verdict) and metrics this stage reads besides its upstream outs
    # (export's model card lists them with their sha256): DVC deps too, so a rerun that changes any of them
    # re-runs this stage, even where the model it starts from came out the same.
    lineage: tuple[str, ...] = field(default=())
    # Params keys the stage reads raw (not through its spec; the card quotes them): DVC params, so a changed value
    # re-runs the stage, but not sections of its code closure (it runs none of their spec code).
    quotes_params: tuple[str, ...] = field(default=())

    @property
    def module_name(self) -> str:
        return self.module or self.name

    @property
    def out_dir(self) -> str:
        return f"{DATA_DIR}/{self.name}"

    @property
    def handed_on(self) -> str:
        """What a downstream stage depends on: the gate's verdict file, else the whole out folder."""
        return f"{self.out_dir}/{self.verdict}" if self.verdict else self.out_dir

    @property
    def metrics_file(self) -> str:
        return f"{METRICS_DIR}/{self.name}.json"

    @property
    def record(self) -> str:
        """The file that stands for the stage's run in a lineage: a gate's verdict, else its manifest."""
        return f"{self.out_dir}/{self.verdict or MANIFEST}"

    def code_deps(self, root: Path = CODE_ROOT) -> list[str]:
        """The files of `root` the stage's process can run, sorted: the import closure of the stage entry, the
        stage's module and spec, and the programs they start (rank workers), plus those modules' data files.
        Computed from the files on disk, so dvc.yaml cannot drift from the code without `check` noticing."""
        starts = [STAGE_ENTRY, f"tasks/{self.module_name}.py", f"specs/{self.module_name}.py"]
        modules = import_closure(root, starts, self.sections())
        return sorted(modules | data_files(root, modules))

    def sections(self) -> set[str]:
        """The params sections the stage reads: those of its DVC params, and its own."""
        return {key.split(".")[0] for key in self.spec_param_keys()} | {self.name}

    def spec_param_keys(self) -> list[str]:
        return [self.name, *(["run.seed"] if self.seeded else []), *self.params]

    def param_keys(self) -> list[str]:
        return [*self.spec_param_keys(), *self.quotes_params]


# Code deps are not declared here: StageDef.code_deps computes them from the imports.
STAGES: tuple[StageDef, ...] = (
    StageDef("ingest"),
    # The gates hand on a verdict file: validate's is written only when the records may go on; a review's
    # decision says approve or reject, and the stage after it refuses a reject.
    StageDef("validate", upstream=("ingest",), verdict="verdict.json"),
    # Multimodal curation (image/audio ↔ text alignment) beside the text path: its own sources plus ingest's
    # records that reference media, after validate passed; nothing downstream reads it (training is text-only).
    StageDef("multimodal", upstream=("ingest", "validate"), seeded=True),
    # Before clean: clean decontaminates the pretraining corpus against instruct's held-out set.
    StageDef("instruct", seeded=True, params=("evaluate.prompts",)),
    # clean reads ingest's records but runs only after validate passed (its out is a dependency too); it
    # decontaminates against evaluate's prompts, instruct's held-out set (instruct has no upstream: no cycle) and
    # the benchmark's downloaded test files (`benchmark.files`, a param: benchmark runs long after clean).
    StageDef("clean", upstream=("ingest", "validate", "instruct"), seeded=True,
             params=("evaluate.prompts", "benchmark.files")),
    StageDef("mix", upstream=("clean",), seeded=True, params=("model.init",)),
    # Checkpoints persist across reruns (a retried stage resumes from them) and stay out of the DVC cache.
    StageDef("pretrain", upstream=("mix",), seeded=True, params=("model", "parallel", "mix.adaptive"),
             persist_outs=("checkpoints/pretrain",)),
    # The spot-check sample holds multimodal's stratum (thumbnails and clips beside their text) too.
    StageDef("evaluate", upstream=("pretrain", "mix", "clean", "multimodal"), seeded=True),
    # The gate before SFT: approves by policy (auto) or reads a human decision committed under reviews/.
    StageDef("review", upstream=("evaluate",), extra_deps=("reviews",), verdict="decision.json"),
    # Finetuning starts only from an approved model; it launches ranks like pretrain (launcher from `parallel`).
    StageDef("sft", upstream=("pretrain", "mix", "instruct", "review"), seeded=True,
             params=("parallel", "evaluate.spotcheck.flags"),
             persist_outs=("checkpoints/sft",)),
    # The second gate (same implementation, its own params section): the finetuned model's answers.
    StageDef("review_sft", module="review", upstream=("sft",), extra_deps=("reviews",), verdict="decision.json"),
    # Preference tuning after the SFT gate: curated pairs (the default's rejected answers are the SFT model's
    # own), the frozen SFT model's log-probs of them once, DPO on the one Trainer, and its own gate.
    StageDef("prefer_data", upstream=("instruct", "sft", "review_sft"), seeded=True,
             params=("prefer.enabled", "evaluate.prompts")),
    StageDef("prefer_ref", upstream=("sft", "prefer_data"), seeded=True, params=("prefer.enabled",)),
    StageDef("prefer", upstream=("sft", "review_sft", "prefer_data", "prefer_ref"), seeded=True,
             params=("parallel", "evaluate.spotcheck.flags"), persist_outs=("checkpoints/prefer",)),
    StageDef("review_prefer", module="review", upstream=("prefer",), extra_deps=("reviews",),
             verdict="decision.json"),
    # Standard benchmarks (lm-eval, offline) on the finished model (the preference-tuned one when prefer trained)
    # and the one it started from: before export,
    # so the model card shows the scores and a failed benchmark gate keeps the model unpublished.
    StageDef("benchmark", upstream=("clean", "mix", "pretrain", "sft", "prefer"), seeded=True,
             params=("model.init",)),
    # The model card lists every stage's record and headline metrics and quotes params sections (its lineage).
    StageDef("export", upstream=("sft", "review_sft", "benchmark", "prefer", "review_prefer"),
             lineage=("ingest", "validate", "clean", "mix", "pretrain", "evaluate", "review", "instruct", "sft",
                      "benchmark", "prefer_data", "prefer_ref", "prefer"),
             quotes_params=("model", "pretrain", "sft", "ingest.sources", "instruct.sources", "clean.pii.enabled",
                            "review.max_kept_pii_fraction", "review_sft.max_kept_pii_fraction")),
)

STAGE_NAMES = tuple(s.name for s in STAGES)

# `dvc plots show` / `dvc plots diff`: CSV curves the stages write inside their outs.
PLOTS: tuple[dict[str, Any], ...] = (
    {"pretrain_train_loss": {"template": "linear", "x": "step", "y": {"data/pretrain/plots/train_loss.csv": "loss"},
                             "title": "pretrain: train loss"}},
    {"pretrain_val_loss": {"template": "linear", "x": "step",
                           "y": {"data/pretrain/plots/val_loss.csv": "val_loss"},
                           "title": "pretrain: validation loss"}},
    {"clean_quality_curve": {"template": "linear", "x": "threshold",
                             "y": {"data/clean/quality_curve.csv": ["docs_share", "words_share"]},
                             "title": "clean: share of documents and words each quality threshold keeps"}},
)


def stage(name: str) -> StageDef:
    for s in STAGES:
        if s.name == name:
            return s
    raise KeyError(f"unknown stage {name!r}; stages are: {', '.join(STAGE_NAMES)}")


def lineage_files(s: StageDef) -> list[str]:
    """What `s` reads of its lineage stages that its upstream deps do not already hold: each one's record and,
    for a stage that is not a gate, its metrics (tasks/eval/export_card.py `lineage_rows`)."""
    held = [stage(u).handed_on for u in s.upstream]
    files = []
    for name in s.lineage:
        ls = stage(name)
        files += [f for f in (ls.record, None if ls.verdict else ls.metrics_file) if f is not None]
    return [f for f in files if not any(f == h or f.startswith(f"{h}/") for h in held)]


def project_outputs() -> list[str]:
    """Folders and files the stages write in a project (a user's source may not be hashed as one of them)."""
    return [DATA_DIR, METRICS_DIR, RUNS_DIR, REPORTS_DIR,
            *(o for s in STAGES for o in (*s.extra_outs, *s.persist_outs))]


def dvc_stage_entry(s: StageDef, root: Path = CODE_ROOT, data_deps: Sequence[str] = ()) -> dict[str, Any]:
    """`s` as a dvc.yaml stage; `data_deps`: the user files its params name (tasks/core/datadeps.py)."""
    deps = [*s.code_deps(root), *(stage(u).handed_on for u in s.upstream), *s.extra_deps, *lineage_files(s),
            *data_deps]
    return {
        "cmd": f"python -m tasks.core.run {s.name}",
        "deps": deps,
        "params": s.param_keys(),
        "outs": [s.out_dir, *s.extra_outs, *({p: {"persist": True, "cache": False}} for p in s.persist_outs)],
        "metrics": [{s.metrics_file: {"cache": False}}],
    }


def dvc_yaml_data(root: Path = CODE_ROOT, project: Path | None = None,
                  data: dict[str, list[str]] | None = None) -> dict[str, Any]:
    """dvc.yaml as the registry generates it, with the code deps computed from the files under `root` and the
    data deps `data` (default: from `project`'s params.yaml, else `root`'s)."""
    names = set(STAGE_NAMES)
    plots = [p for p in PLOTS if next(iter(p)).split("_")[0] in names]
    if data is None:
        data = datadeps.project_deps(project or root, project_outputs())
    return {"stages": {s.name: dvc_stage_entry(s, root, data.get(s.name, ())) for s in STAGES},
            **({"plots": plots} if plots else {})}


HEADER = "# Generated from tasks/core/graph.py by `python -m tasks graph --write`; edit the registry, not this file.\n"


def dvc_yaml_text(project: Path | None = None) -> str:
    """dvc.yaml's text for the project at `project` (default: this checkout): its params name its data deps."""
    return HEADER + yaml.safe_dump(dvc_yaml_data(project=project), sort_keys=False, default_flow_style=False)


def _dep_drift(name: str, have: list[Any], want: list[Any], data: Sequence[str] = ()) -> list[str]:
    """One line per dep that dvc.yaml lists for stage `name` but the registry does not generate, or the reverse
    (a code dep comes from the stage's import closure, a data dep from params.yaml, any other from the
    registry)."""
    def why(dep: Any) -> str:
        if dep in data:
            return "params.yaml's sources (files the stage reads)"
        return "its import closure" if str(dep).split("/")[0] in CODE_PACKAGES else "the registry"

    missing = [d for d in want if d not in have]
    extra = [d for d in have if d not in want]
    lines = [f"dvc.yaml: stage '{name}' does not depend on {d}, which {why(d)} holds" for d in missing]
    lines += [f"dvc.yaml: stage '{name}' depends on {d}, which {why(d)} does not hold" for d in extra]
    return lines or [f"dvc.yaml: stage '{name}' lists its deps in another order than the registry"]


def _registry_problems() -> list[str]:
    """Declarations that name code which is no longer there."""
    problems = [f"closure.py: PACKAGE_DATA names {p}, which does not exist"
                for paths in PACKAGE_DATA.values() for p in paths if not (CODE_ROOT / p).exists()]
    return problems + [f"closure.py: PACKAGE_DATA names module {m}, which does not exist"
                       for m in PACKAGE_DATA if not (CODE_ROOT / m).is_file()]


def over_broad(root: Path = CODE_ROOT) -> list[str]:
    """Stages whose code deps hold another stage's own module (`tasks/<other>.py`): a stage module is the entry
    of its stage only, so importing one from another ties their reruns together; shared code belongs in a
    library (tasks/core, tasks/data, tasks/train, tasks/eval)."""
    modules = {f"tasks/{s.module_name}.py": s.name for s in STAGES}
    problems = []
    for s in STAGES:
        for dep in s.code_deps(root):
            if dep in modules and modules[dep] != s.name and dep != f"tasks/{s.module_name}.py":
                problems.append(f"stage '{s.name}' depends on {dep}, stage '{modules[dep]}''s module: move what "
                                f"it uses into a library")
    return problems


def check_dvc_yaml(root: Path) -> list[str]:
    """Problems with `root/dvc.yaml` relative to the registry and the code's imports (empty list: they agree)."""
    path = root / "dvc.yaml"
    if not path.exists():
        return ["dvc.yaml is missing: run `python -m tasks graph --write`"]
    on_disk = yaml.safe_load(path.read_text()) or {}
    data = datadeps.project_deps(root, project_outputs())
    generated = dvc_yaml_data(data=data)
    want, have = generated["stages"], on_disk.get("stages", {})
    problems = []
    for name in sorted(set(want) | set(have)):
        if name not in have:
            problems.append(f"dvc.yaml: stage '{name}' is missing")
        elif name not in want:
            problems.append(f"dvc.yaml: stage '{name}' is not in the registry (tasks/core/graph.py)")
        elif have[name] != want[name]:
            keys = sorted(k for k in set(want[name]) | set(have[name]) if want[name].get(k) != have[name].get(k))
            if "deps" in keys:
                problems += _dep_drift(name, have[name].get("deps") or [], want[name]["deps"], data.get(name, ()))
            if set(keys) - {"deps"}:
                problems.append(f"dvc.yaml: stage '{name}' differs from the registry in: "
                                f"{', '.join(k for k in keys if k != 'deps')}")
    if problems:
        problems.append("regenerate it with `python -m tasks graph --write`")
    if on_disk.get("plots") != generated.get("plots"):
        problems.append("dvc.yaml: plots differ from the registry; regenerate it with `python -m tasks graph --write`")
    return problems + _registry_problems() + over_broad()


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
