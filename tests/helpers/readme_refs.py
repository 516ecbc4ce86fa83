"""What README.md names outside its recipes, read from its text (tests/test_readme_refs.py checks each resolves):
the shell commands of its ```bash blocks and `code spans`, the repository paths and Python modules it names, and
the params keys it names (`--set a.b=c`, `a.b.c`, `a.b: value`).

Static on purpose: the checks parse and look up, they run nothing, so the test stays within a few seconds while a
renamed file, flag, subcommand or params key fails CI at the README line that names it.
"""

from __future__ import annotations

import re
import shlex
from functools import lru_cache
import typing
from dataclasses import dataclass
from pathlib import Path

from pydantic import BaseModel

from tests.helpers.recipes import README, bash_commands

# Top-level folders and files a fresh clone has; a path under another first folder (data/, checkpoints/, runs/,
# reports/, metrics/: what the stages write) is an output, checked only for its stage name.
SOURCE_ROOTS = ("tasks", "specs", "flows", "tests", "benchmarks", "scripts", ".ci", ".dvc")
OUTPUT_ROOTS = ("data", "checkpoints", "runs", "reports", "metrics", "reviews")  # reviews/: a review's decision
TOP_FILES = ("params.yaml", "dvc.yaml", "dvc.lock", "prefect.yaml", "pyproject.toml")
PLACEHOLDER = re.compile(r"[<>…]|\.\.\.|NN|\bN\b|PROJECT")
SPAN = re.compile(r"`([^`]+)`")
COMMAND = re.compile(r"^(?:[A-Z_]+=(?:\"[^\"]*\"|'[^']*'|\S+)\s+)*(?:\.venv/bin/)?(python|bash|dvc|prefect|pytest)\b")


@dataclass(frozen=True)
class Ref:
    """One thing the README names: its text and the README line it is on (for the failure message)."""

    text: str
    line: int


@lru_cache(maxsize=4)  # read by every check of one README text
def prose_spans(text: str) -> tuple[Ref, ...]:
    """Every `code span` outside fenced blocks; a span may wrap onto the next line of its paragraph."""
    spans: list[Ref] = []
    paragraph: list[tuple[int, str]] = []
    fenced = False

    def flush() -> None:
        joined = "\n".join(line for _, line in paragraph)
        for m in SPAN.finditer(joined):
            line = paragraph[0][0] + joined.count("\n", 0, m.start())
            spans.append(Ref(" ".join(m.group(1).split()), line))
        paragraph.clear()

    for number, line in enumerate(text.splitlines(), 1):
        if line.lstrip().startswith("```"):
            flush()
            fenced = not fenced
        elif not fenced and line.strip() and not line.lstrip().startswith("|"):
            paragraph.append((number, line))
        else:
            flush()
            if not fenced and line.lstrip().startswith("|"):  # a table row is a paragraph of its own
                paragraph.append((number, line))
                flush()
    flush()
    return tuple(spans)


def readme_text() -> str:
    return README.read_text(encoding="utf-8")


@lru_cache(maxsize=4)
def commands(text: str) -> tuple[Ref, ...]:
    """Shell commands: each line of a ```bash block, and each span that starts like one (`python ...`,
    `A=b bash ...`, `dvc ...`, `prefect ...`); `[--opt ...]` optional parts kept as `--opt ...`."""
    found = [Ref(c, line) for c, line in bash_commands(text)]
    found += [span for span in prose_spans(text) if COMMAND.match(span.text)]
    return tuple(Ref(re.sub(r"\[([^\]]*)\]", r"\1", c.text).replace(" | ", " ; "), c.line) for c in found)


def words(command: str) -> list[str]:
    try:
        return shlex.split(command, comments=True)
    except ValueError:  # an unbalanced quote in a prose fragment: split on blanks
        return command.split()


# ------------------------------------------------------------------------------------------------ paths
def path_tokens(text: str) -> list[Ref]:
    """Repository paths named in spans and commands: tokens with a `/` under a known first folder, and the
    top-level files."""
    out: list[Ref] = []
    for ref in prose_spans(text) + commands(text):
        for token in re.split(r"[\s,;:()=]+(?![^{]*\})", ref.text):  # not a comma inside {a,b}
            token = token.strip("'\"`.").rstrip("/")
            first = token.split("/")[0]
            if token in TOP_FILES or (("/" in token) and first in SOURCE_ROOTS + OUTPUT_ROOTS):
                out += [Ref(t, ref.line) for t in expand_braces(token)]
    return out


def expand_braces(token: str) -> list[str]:
    """`a_{b,c}.py` -> a_b.py, a_c.py (the README's shorthand for sibling files)."""
    m = re.search(r"\{([^}]*)\}", token)
    return [token[:m.start()] + part + token[m.end():] for part in m.group(1).split(",")] if m else [token]


# ------------------------------------------------------------------------------------------------ modules
def dotted_names(text: str) -> list[Ref]:
    """`tasks.x.y`, `specs.x`, `tests.helpers.x`, ... names in spans (a module, or a module's top-level name)."""
    package = re.compile(r"\b(?:tasks|specs|flows|tests|benchmarks)(?:\.\w+)+")
    return [Ref(t, s.line) for s in prose_spans(text) for t in package.findall(s.text)
            if not s.text.startswith(("python", "--set"))]


def resolve_dotted(root: Path, name: str) -> bool:
    """Whether `name` is a module of the repository, or a name defined at the top of one (read, not imported)."""
    parts = name.split(".")
    for cut in range(len(parts), 0, -1):
        base = root.joinpath(*parts[:cut])
        module = base.with_suffix(".py") if base.with_suffix(".py").is_file() else base / "__init__.py"
        if not module.is_file():
            continue
        rest = parts[cut:]
        if not rest:
            return True
        source = module.read_text(encoding="utf-8")
        return len(rest) <= 2 and bool(re.search(rf"^(?:def|class|async def) {rest[0]}\b|^{rest[0]}\s*[:=]|"
                                                 rf"^from \S+ import .*\b{rest[0]}\b", source, re.M))
    return False


# ------------------------------------------------------------------------------------------------ params keys
def params_keys(text: str) -> list[Ref]:
    """Params keys: the key of every `--set KEY=V`/`--set-param KEY=V` and every span `a.b[.c]`, `a.b: value`
    or `a/b.c` whose first part is a section of params.yaml (or `train.`, a training job's spec)."""
    from specs.params import Params

    sections = {f.alias or name for name, f in Params.model_fields.items()} | {"train"}
    keys: list[Ref] = []
    for ref in commands(text) + prose_spans(text):  # `--set a=1 b=2` takes several; inside quotes too
        for m in re.finditer(r"--set(?:-param)?((?:[\s=]+[a-z_]+(?:\.\w+)+=\S*)+)", ref.text):
            keys += [Ref(kv.split("=")[0], ref.line) for kv in m.group(1).split()]
    for span in prose_spans(text):
        m = re.fullmatch(r"([a-z_]+(?:/[a-z_]+)?)((?:\.[a-z0-9_]+)+)(?::\s.*)?", span.text)
        if m and m.group(1).split("/")[0] in sections:
            keys += [Ref(head + m.group(2), span.line) for head in m.group(1).split("/")]
    return [k for k in keys if k.text.split(".")[0] in sections]


def _models(annotation: typing.Any) -> list[type[BaseModel]]:
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return [annotation]
    return [m for arg in typing.get_args(annotation) for m in _models(arg)]


def _containers(annotation: typing.Any) -> bool:
    """Whether a field holds a list/dict of values (the next key part is an index or a free name)."""
    origins = {typing.get_origin(a) for a in (annotation, *typing.get_args(annotation))}
    return bool(origins & {list, dict, tuple})


def resolve_key(model: type[BaseModel], parts: list[str]) -> bool:
    """Whether the dotted key `parts` names a field of `model` (through nested models, lists and mappings)."""
    if not parts:
        return True
    fields = {f.alias or name: f for name, f in model.model_fields.items()}
    field = fields.get(parts[0])
    if field is None:
        return False
    rest, annotation = parts[1:], field.annotation
    if rest and _containers(annotation):
        rest = rest[1:]  # a list index or a mapping's own key (a source name)
    models = _models(annotation)
    if not rest:
        return True
    return any(resolve_key(m, rest) for m in models)


def key_resolves(key: str) -> bool:
    from specs.params import Params
    from specs.pretrain import PretrainJob

    return resolve_key(PretrainJob if key.startswith("train.") else Params, key.split("."))


def yaml_fragments(text: str) -> list[tuple[int, str]]:
    """(line, text) of every ```yaml block outside a recipe: a params.yaml fragment the README shows to paste
    (a recipe's own blocks are run by tests/test_recipes.py)."""
    from tests.helpers.recipes import END, FENCE, MARK

    lines, out, in_recipe, i = text.splitlines(), [], False, 0
    while i < len(lines):
        in_recipe = bool(MARK.search(lines[i])) or (in_recipe and not END.search(lines[i]))
        fence = FENCE.match(lines[i])
        if fence and fence.group("lang") == "yaml" and not in_recipe:
            end = next(j for j in range(i + 1, len(lines)) if FENCE.match(lines[j]))
            out.append((i + 1, "\n".join(lines[i + 1:end])))
            i = end
        i += 1
    return out
