"""The user files each stage reads, as params.yaml names them: DVC deps of that stage.

A stage's code and its upstream outputs are deps by construction (tasks/core/graph.py). The files a user points a
source at are named in params.yaml, whose values DVC tracks but not those files' bytes: a file added to or edited
in `my_data/` left `dvc status` up to date and every stage from ingest on stale, the opposite of "DVC re-runs
exactly what changed". `python -m tasks graph --write` now lists them in dvc.yaml from params.yaml, `check` fails
while dvc.yaml lacks one, and a stage that `dvc repro` starts refuses to run without its own (`unlisted`), naming
the command that fixes it.

What each stage reads (`named`): ingest, instruct, prefer_data and multimodal their `kind: files` sources' paths
(multimodal also ingest's when `from_ingest`: the records' media lie beside them; prefer_data also its
decontamination `benchmark_files`); clean the decontamination
`benchmark_files` plus the benchmark's downloaded `.jsonl` files it indexes (the job `Params.section` builds);
benchmark its task files, few-shot files and `include_path` folders. A Hugging Face checkpoint (`model.init.path`)
is a param, not a dep: hashing hundreds of GB at every status is not worth it for a folder users do not edit.

A glob is listed as its folder before the first wildcard (`my_data/**/*.jsonl` -> `my_data`), a folder as itself:
DVC hashes a folder once and then re-hashes only files whose size or mtime changed, so a terabyte corpus is read
whole once, not at every `dvc status`. Where that folder would hold or lie inside the project's own outputs
(`*.jsonl` at the project root, a path under data/) the matched files are listed instead.
"""

from __future__ import annotations

import glob
import os
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

from tasks.core.globs import glob_base, glob_once

# Stages whose deps may hold user files, in the registry's order (the others read only upstream outputs).
READERS = ("ingest", "multimodal", "instruct", "clean", "prefer_data", "benchmark")


def _file_paths(sources: Iterable[Any]) -> list[str]:
    return [p for s in sources if getattr(s, "kind", None) == "files" for p in s.paths]


def named(params: Any, stage: str) -> list[str]:
    """The paths, directories and globs `params` (a validated `specs.Params`) names for `stage` to read."""
    if stage == "ingest":
        return _file_paths(params.ingest.sources)
    if stage == "multimodal":
        mm = params.multimodal
        return _file_paths(mm.sources) + (_file_paths(params.ingest.sources) if mm.from_ingest else [])
    if stage == "instruct":
        return _file_paths(params.instruct.sources)
    if stage == "prefer_data":  # its decontamination files too: an edited benchmark changes which pairs survive
        return _file_paths(params.prefer_data.sources) + list(params.prefer_data.benchmark_files)
    if stage == "clean":  # the job clean receives indexes the benchmark's .jsonl files too (`Params.section`)
        return list(params.section("clean").clean.decontamination.benchmark_files)
    if stage == "benchmark":
        files = params.benchmark.files
        return ([f.path for f in files] + [f.fewshot_path for f in files if f.fewshot_path]
                + list(params.benchmark.include_path))
    return []


def _inside(a: str, b: str) -> bool:
    """Whether path `a` is `b` or lies under it (both normalised, relative to the project or absolute)."""
    return a == b or b == "." or a.startswith(b.rstrip("/") + "/")


def dep_paths(pattern: str, project: Path, outs: Sequence[str]) -> list[str]:
    """What DVC should hash for one named path: itself, or a glob's folder before its first wildcard; the
    glob's matched files instead where that folder holds or lies in one of the project's `outs`."""
    top = os.path.normpath(glob_base(pattern))
    if not any(_inside(top, o) or _inside(o, top) for o in outs):
        return [top]
    base = Path(pattern) if Path(pattern).is_absolute() else project / pattern
    matched = sorted(map(str, glob_once(str(base)))) if glob.has_magic(pattern) else [str(base)]
    rel = [os.path.relpath(m, project) if not Path(pattern).is_absolute() else m for m in matched]
    return [r for r in rel if os.path.isfile(Path(project, r))]


def stage_deps(params: Any, stage: str, project: Path, outs: Sequence[str]) -> list[str]:
    """`named(params, stage)` as DVC deps, in order, each once; a path inside another listed one is left out."""
    listed: list[str] = []
    for pattern in named(params, stage):
        listed += [d for d in dep_paths(pattern, project, outs) if d not in listed]
    return [d for d in listed if not any(d != other and _inside(d, other) for other in listed)]


def project_deps(project: Path, outs: Sequence[str]) -> dict[str, list[str]]:
    """Stage -> its data deps, from the project's params.yaml; empty when the file is missing or invalid (then
    `check` reports the params, and dvc.yaml is written without data deps until they are fixed)."""
    from specs import ParamsError, load_params

    try:
        params = load_params(project / "params.yaml")
    except (ParamsError, FileNotFoundError):
        return {}
    deps = {stage: stage_deps(params, stage, project, outs) for stage in READERS}
    return {stage: d for stage, d in deps.items() if d}


def unlisted(dvc_yaml: Mapping[str, Any], stage: str, wanted: Sequence[str]) -> list[str]:
    """The data deps `wanted` for `stage` that dvc.yaml (parsed) does not list among the stage's deps."""
    entry = (dvc_yaml.get("stages") or {}).get(stage) or {}
    have = {str(d) for d in entry.get("deps") or []}
    return [d for d in wanted if d not in have]
