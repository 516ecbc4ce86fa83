"""The README's recipes, read from the README text itself, and the tiny projects they run in (tests/test_recipes.py).

A recipe is the part of README.md between `<!-- recipe: NAME -->` and `<!-- /recipe -->`: its ```yaml blocks are
a params.yaml fragment (merged in order), its ```bash blocks the commands (one a line, `\\` continues a line, `#`
starts a comment), its ```console blocks `$ command` lines each followed by the output the README promises. The
marker may add `; not run: why` (a recipe that needs a GPU, package registries or minutes of real training:
listed, never run here) or `; tested by: FILE` (another test module runs those very commands). Tests run what the
README says, so the two cannot drift.

A recipe runs on the params.yaml that ships (the file a user edits), with its fragment merged in and then only the
keys of TINY changed, the shapes that make it run in seconds (fewer documents and steps, short sequences). TINY
may set a key the fragment sets only when that key is in SCALE_KEYS (steps, sizes): anything else the recipe
says reaches the stages as written.
"""

from __future__ import annotations

import copy
import os
import re
import shutil
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

REPO = Path(__file__).resolve().parents[2]
README = REPO / "README.md"
MARK = re.compile(r"<!--\s*recipe:\s*(?P<name>[a-z0-9][a-z0-9-]*)\s*(?P<attrs>(?:;[^>]*)?)-->")
END = re.compile(r"<!--\s*/recipe\s*-->")
FENCE = re.compile(r"^(?P<indent>\s*)```(?P<lang>[a-z]*)\s*$")
ATTR = re.compile(r";\s*(?=[a-z][a-z ]*:)")


@dataclass
class Recipe:
    """One README recipe: its params fragment, commands, promised console outputs and how it is run."""

    name: str
    line: int
    params: dict[str, Any] = field(default_factory=dict)
    commands: list[str] = field(default_factory=list)
    console: list[tuple[str, list[str]]] = field(default_factory=list)  # (command, the output lines promised)
    not_run: str = ""  # why the tests do not run it (a GPU, package registries, real training); "" = they do
    tested_by: str = ""  # the test module that runs it, when not tests/test_recipes.py


def _blocks(lines: list[str]) -> list[tuple[str, list[str]]]:
    """(language, dedented lines) of each fenced block in `lines`."""
    blocks, i = [], 0
    while i < len(lines):
        m = FENCE.match(lines[i])
        if not m:
            i += 1
            continue
        indent, body, i = len(m.group("indent")), [], i + 1
        while i < len(lines) and not FENCE.match(lines[i]):
            body.append(lines[i][indent:] if lines[i][:indent].strip() == "" else lines[i])
            i += 1
        blocks.append((m.group("lang"), body))
        i += 1
    return blocks


def _uncomment(line: str) -> str:
    """`line` without its shell comment (a `#` starting a word outside quotes); operators and quoting kept as
    written, since the line runs in bash."""
    quote = None
    for i, ch in enumerate(line):
        if quote:
            quote = None if ch == quote else quote
        elif ch in "'\"":
            quote = ch
        elif ch == "#" and (i == 0 or line[i - 1].isspace()):
            return line[:i].rstrip()
    return line.rstrip()


def _commands(body: list[str]) -> list[str]:
    """Shell commands of a bash block: continuation lines joined, comments and blank lines left out."""
    text = "\n".join(body).replace("\\\n", " ")
    return [" ".join(cmd.split()) if "'" not in cmd and '"' not in cmd else cmd.strip()
            for cmd in map(_uncomment, text.splitlines()) if cmd.strip()]


def _console(body: list[str]) -> list[tuple[str, list[str]]]:
    runs: list[tuple[str, list[str]]] = []
    for line in body:
        if line.startswith("$ "):
            runs.append((line[2:].strip(), []))
        elif runs:
            runs[-1][1].append(line.rstrip())
    return runs


def parse(text: str) -> dict[str, Recipe]:
    """Every recipe of a README text, by name (a name given twice, or a marker never closed, is an error)."""
    lines = text.splitlines()
    recipes: dict[str, Recipe] = {}
    for start, line in enumerate(lines):
        m = MARK.search(line)
        if not m:
            continue
        end = next((j for j in range(start + 1, len(lines)) if END.search(lines[j]) or MARK.search(lines[j])), None)
        if end is None or not END.search(lines[end]):
            raise ValueError(f"README line {start + 1}: recipe {m.group('name')!r} has no <!-- /recipe --> before "
                             "the next recipe or the end")
        recipe = Recipe(m.group("name"), start + 1)
        # `; key: value` pairs; a value may hold a `;` of its own (only `; word words:` starts a new pair)
        for attr in filter(None, (a.strip() for a in ATTR.split(m.group("attrs").strip().removeprefix(";")))):
            key, _, value = attr.partition(":")
            if key.strip() == "not run":
                recipe.not_run = value.strip()
            elif key.strip() == "tested by":
                recipe.tested_by = value.strip()
            else:
                raise ValueError(f"README line {start + 1}: unknown recipe attribute {key.strip()!r}")
        for lang, body in _blocks(lines[start + 1:end]):
            if lang == "yaml":
                recipe.params = merge(recipe.params, yaml.safe_load("\n".join(body)) or {})
            elif lang == "bash":
                recipe.commands += _commands(body)
            elif lang == "console":
                recipe.console += _console(body)
        if recipe.name in recipes:
            raise ValueError(f"README line {start + 1}: recipe {recipe.name!r} is defined twice")
        recipes[recipe.name] = recipe
    return recipes


def bash_commands(text: str) -> list[tuple[str, int]]:
    """(command, line of its block's fence) of every ```bash block of a README text, in recipes or not."""
    lines, out = text.splitlines(), []
    starts = [i for i, line in enumerate(lines) if FENCE.match(line) and FENCE.match(line).group("lang")]
    for start in starts:
        if FENCE.match(lines[start]).group("lang") == "bash":
            (lang, body), = _blocks(lines[start:start + 1 + next(
                j for j in range(1, len(lines) - start) if FENCE.match(lines[start + j])) + 1])
            out += [(command, start + 1) for command in _commands(body)]
    return out


def readme_recipes() -> dict[str, Recipe]:
    return parse(README.read_text(encoding="utf-8"))


def merge(base: dict[str, Any], fragment: dict[str, Any]) -> dict[str, Any]:
    """`base` with `fragment` merged in: mappings key by key, anything else (lists included) replaced."""
    out = copy.deepcopy(base)
    for key, value in fragment.items():
        if isinstance(value, dict) and isinstance(out.get(key), dict):
            out[key] = merge(out[key], value)
        else:
            out[key] = copy.deepcopy(value)
    return out


def leaf_keys(data: dict[str, Any], prefix: str = "") -> set[str]:
    """Dotted paths of the non-mapping values of `data`."""
    keys: set[str] = set()
    for key, value in data.items():
        path = f"{prefix}{key}"
        keys |= leaf_keys(value, path + ".") if isinstance(value, dict) and value else {path}
    return keys


# The shapes a recipe runs at here: the shipped sources with a few documents each, short sequences, a few steps.
# Source names stay those of the shipped params.yaml, so its per-source keys (validate, clean, mix.weights) hold.
TINY: dict[str, Any] = {
    "ingest": {"sources": [
        {"name": "literature", "kind": "embedded", "corpus": "literature", "max_docs": 5},
        {"name": "encyclopedia", "kind": "embedded", "corpus": "encyclopedia", "max_docs": 4},
        # The stdlib's first modules hold 96-character files that fail the shipped length expectation's 95 %:
        # this project's own modules are code of the same kind, one record a file.
        {"name": "code", "kind": "files", "paths": ["tasks/core/[a-z]*.py"], "format": "txt", "lang": "python",
         "max_docs": 12},
        {"name": "docs", "kind": "embedded", "corpus": "docs", "max_docs": 12}],
        "shard_records": 8},
    "validate": {"data_docs": False},
    "clean": {"dedup": {"audit_sample": 200, "precision_sample": 20}},
    "mix": {"seq_len": 64, "token_budget": None},
    "pretrain": {"steps": 4, "micro_batch_size": 2, "eval_every": 2, "eval_batches": 1, "checkpoint_every": 2,
                 "log_every": 1, "optim": {"warmup_steps": 1}, "telemetry": {"wandb": "disabled"}},
    "evaluate": {"perplexity_batches": 2, "batch_size": 4, "sampling": {"max_new_tokens": 8},
                 "spotcheck": {"per_stratum": 1}},
    "instruct": {"sources": [{"name": "chatterbot", "kind": "embedded", "corpus": "chatterbot", "max_pairs": 200},
                             {"name": "pydoc_topics", "kind": "embedded", "corpus": "pydoc_topics", "max_pairs": 60}],
                 "max_train_pairs": 150},
    "sft": {"steps": 4, "micro_batch_size": 2, "eval_every": 2, "checkpoint_every": 2, "log_every": 1,
            "compare_prompts": 2, "sampling": {"max_new_tokens": 8}, "optim": {"warmup_steps": 1},
            "telemetry": {"wandb": "disabled"}},
    "prefer_data": {"sources": [{"name": "instruct", "kind": "embedded", "max_pairs": 24, "max_new_tokens": 8}]},
    "prefer": {"steps": 4, "micro_batch_size": 2, "eval_every": 2, "checkpoint_every": 2, "log_every": 1,
               "compare_prompts": 2, "sampling": {"max_new_tokens": 8}, "optim": {"warmup_steps": 1},
               "telemetry": {"wandb": "disabled"}},
}
# Keys a recipe may set that TINY scales down; TINY overriding any other key of a recipe is refused.
SCALE_KEYS = frozenset({"pretrain.steps", "pretrain.optim.warmup_steps", "sft.steps", "sft.optim.warmup_steps",
                        "mix.seq_len", "ingest.sources", "parallel.dp", "parallel.zero_stage"})


def shipped_params() -> dict[str, Any]:
    from specs.params import read_params_file

    return read_params_file(REPO / "params.yaml")


def recipe_params(recipe: Recipe, base: dict[str, Any] | None = None) -> dict[str, Any]:
    """The shipped params.yaml (or `base`) with the recipe's fragment merged in, then scaled down by TINY."""
    clash = sorted(k for k in leaf_keys(recipe.params) & leaf_keys(TINY) if k not in SCALE_KEYS)
    assert not clash, f"recipe {recipe.name}: TINY would override what the README sets: {clash}"
    return merge(merge(shipped_params() if base is None else base, recipe.params), TINY)


def env() -> dict[str, str]:
    """The environment a user's shell has after `. .venv/bin/activate`: this interpreter's bin/ first on PATH."""
    bin_dir = str(Path(sys.executable).parent)
    return {**os.environ, "PATH": bin_dir + os.pathsep + os.environ.get("PATH", ""), "VIRTUAL_ENV":
            str(Path(sys.executable).parent.parent), "DVC_NO_ANALYTICS": "1", "WANDB_MODE": "disabled"}


def sh(command: str, cwd: Path, check: bool = True, timeout: float = 1800, **kw) -> subprocess.CompletedProcess:
    """Run one README command as a user's shell would (bash, in `cwd`)."""
    proc = subprocess.run(["bash", "-c", command], cwd=cwd, env=kw.pop("env", None) or env(), capture_output=True,
                          text=True, timeout=timeout, **kw)
    if check and proc.returncode != 0:
        raise AssertionError(f"`{command}` failed ({proc.returncode}) in {cwd}:\n{proc.stdout[-4000:]}\n"
                             f"{proc.stderr[-4000:]}")
    return proc


def write_params(project: Path, params: dict[str, Any]) -> None:
    """params.yaml as a user's edited file: the keys given, nothing filled in from the schema."""
    (project / "params.yaml").write_text(yaml.safe_dump(params, sort_keys=False, allow_unicode=True))


def clone(src: Path, dest: Path) -> Path:
    """A copy of a prepared project (git, DVC cache, outputs): stages already run stay up to date in it."""
    shutil.copytree(src, dest, symlinks=True)
    return dest


def new_project(dest: Path, params: dict[str, Any]) -> Path:
    """A fresh clone's layout (the code, dvc.yaml, prefect.yaml) with `params` as its params.yaml, made a git + DVC
    repository with one commit."""
    from tests.conftest import make_project

    return make_project(dest, params, as_given=True)


def stages_before(first: str) -> list[str]:
    """The stages of the graph that `first` does not feed, directly or through others (tasks/core/graph.py)."""
    from tasks.core.graph import STAGES

    below = {first}
    for s in STAGES:  # registry order is a topological order
        if below & set(s.upstream):
            below.add(s.name)
    return [s.name for s in STAGES if s.name not in below]


def data_project(dest: Path) -> Path:
    """The shipped params.yaml at TINY shapes with every stage that mix does not feed run (ingest, validate,
    instruct, clean, ...): what every training recipe shares; each clones it and runs from mix on."""
    project = new_project(dest, merge(shipped_params(), TINY))
    sh("dvc repro " + " ".join(stages_before("mix")), project)
    return project
