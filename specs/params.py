"""The whole `params.yaml`: one section per stage plus shared sections, loaded and checked in one place."""

from __future__ import annotations

import copy
import math
import os
import stat
from pathlib import Path
from typing import Any, Iterable

import yaml
from pydantic import Field, ValidationError, model_validator

from specs.base import ParamsError, StrictModel, describe_errors
from specs.benchmark import BenchmarkJob, BenchmarkSpec, compare_problems, with_benchmark_files
from specs.clean import CleanJob, CleanSpec
from specs.evaluate import EvaluateSpec
from specs.ingest import IngestSpec
from specs.instruct import InstructJob, InstructSpec
from specs.init import checkpoint_conflicts
from specs.mix import MixJob, MixSpec, TokenizerSpec
from specs.multimodal import MultimodalSpec
from specs.prefer import (PreferDataJob, PreferDataSpec, PreferJob, PreferRefJob, PreferRefSpec, PreferReviewSpec,
                          PreferSpec)
from specs.pretrain import ModelSpec, ParallelSpec, PretrainJob, PretrainSpec, layout_problems
from specs.review import ReviewSpec
from specs.run import RunSpec
from specs.export import ExportSpec
from specs.sft import SFTJob, SFTSpec
from specs.validate import ValidateSpec


class Params(StrictModel):
    """Every knob of a forgeline run. Each stage reads its own section (and `run`)."""

    run: RunSpec = Field(default_factory=RunSpec, description="Shared run identity and seed.")
    ingest: IngestSpec = Field(..., description="Sources and record normalization (stage `ingest`).")
    validate_: ValidateSpec = Field(
        default_factory=ValidateSpec, alias="validate", description="Expectation suites (stage `validate`)."
    )

    multimodal: MultimodalSpec = Field(default_factory=MultimodalSpec, description="Image/audio ↔ text "
                                       "alignment checks and the curated multimodal set (stage `multimodal`).")
    clean: CleanSpec = Field(default_factory=CleanSpec, description="Filters and dedup (stage `clean`).")
    mix: MixSpec = Field(
        default_factory=MixSpec, description="Tokenizer, train/val split, weighted mix, packing (stage `mix`)."
    )

    model: ModelSpec = Field(default_factory=ModelSpec, description="Model shape (pretrain, SFT, export).")
    parallel: ParallelSpec = Field(default_factory=ParallelSpec, description="Rank layout and ZeRO.")
    pretrain: PretrainSpec = Field(default_factory=PretrainSpec, description="Pretraining (stage `pretrain`).")
    evaluate: EvaluateSpec = Field(default_factory=EvaluateSpec, description="Perplexity, generations and the "
                                   "spot-check sample (stage `evaluate`).")
    review: ReviewSpec = Field(default_factory=ReviewSpec, description="The review gate before SFT (stage `review`).")
    instruct: InstructSpec = Field(default_factory=InstructSpec, description="Instruction curation (stage "
                                   "`instruct`).")
    sft: SFTSpec = Field(default_factory=SFTSpec, description="Supervised finetuning (stage `sft`).")
    review_sft: ReviewSpec = Field(default_factory=lambda: ReviewSpec(target="sft"), description="The review gate "
                                   "after SFT, before export (stage `review_sft`).")
    prefer_data: PreferDataSpec = Field(default_factory=PreferDataSpec, description="Preference pairs, curated "
                                        "(stage `prefer_data`).")
    prefer_ref: PreferRefSpec = Field(default_factory=PreferRefSpec, description="The reference log-probs, once "
                                      "(stage `prefer_ref`).")
    prefer: PreferSpec = Field(default_factory=PreferSpec, description="Preference tuning, DPO (stage `prefer`).")
    review_prefer: PreferReviewSpec = Field(default_factory=PreferReviewSpec, description="The review gate after "
                                            "preference tuning, before export (stage `review_prefer`).")
    benchmark: BenchmarkSpec = Field(default_factory=BenchmarkSpec, description="Standard benchmarks with lm-eval, "
                                     "offline (stage `benchmark`).")
    export: ExportSpec = Field(default_factory=ExportSpec, description="Hugging Face export (stage `export`).")

    model_config = StrictModel.model_config | {"populate_by_name": True}

    @model_validator(mode="after")
    def _sources_line_up(self) -> "Params":
        names = set(self.ingest.source_names())
        for where, keys in (("validate.per_source", self.validate_.per_source),
                            ("clean.quality.profiles", self.clean.quality.profiles),
                            ("mix.weights", self.mix.weights),
                            ("mix.adaptive.bounds", self.mix.adaptive.bounds),
                            ("mix.adaptive.targets", self.mix.adaptive.targets)):
            unknown = sorted(set(keys) - names)
            if unknown:
                raise ValueError(f"{where}: names unknown source(s) {unknown} (ingest declares {sorted(names)})")
        problems = layout_problems(self.model, self.parallel)
        p = self.parallel
        if p.sequence_parallel and p.tp > 1 and self.mix.seq_len % p.tp:
            # pretrain's sequence parallelism splits every packed row's seq_len tokens over the tensor ranks
            # (parallelize refuses it at launch): say so here, where `check` and the planner's paste land
            problems.append(f"parallel.sequence_parallel: mix.seq_len {self.mix.seq_len} does not split over "
                            f"parallel.tp {p.tp}: set mix.seq_len to a multiple of {p.tp}, or sequence_parallel: "
                            "false")
        problems += compare_problems(self.benchmark, self.model.init)
        # specs/init.py's rule: beside a checkpoint, mix uses its tokenizer; a tokenizer key set here cannot apply.
        problems += checkpoint_conflicts("mix.tokenizer", self.mix.tokenizer, TokenizerSpec.model_fields,
                                         self.model.init, "tokenizer.json")
        if problems:
            raise ValueError("; ".join(problems))
        missing = sorted(names - set(self.mix.weights)) if self.mix.weights else []
        if missing:
            raise ValueError(f"mix.weights: lacks ingest source(s) {missing} (give each a weight, 0 = leave out)")
        return self

    def section(self, stage: str) -> StrictModel:
        """The spec a stage's `run()` receives."""
        if stage == "pretrain":
            return PretrainJob(model=self.model, parallel=self.parallel, train=self.pretrain,
                               adaptive=self.mix.adaptive)
        if stage == "sft":
            return SFTJob.from_sections(self.sft, self.parallel, self.evaluate.spotcheck.flags)
        if stage == "mix":
            return MixJob(**self.mix.model_dump(), model_init=self.model.init)
        if stage == "clean":
            return CleanJob(clean=with_benchmark_files(self.clean, self.benchmark),
                            eval_prompts={p.id: p.text for p in self.evaluate.prompts})
        if stage == "benchmark":
            return BenchmarkJob(benchmark=self.benchmark, model_init=self.model.init)
        if stage == "prefer_data":
            return PreferDataJob(data=self.prefer_data, enabled=self.prefer.enabled,
                                 eval_prompts=[p.text for p in self.evaluate.prompts])
        if stage == "prefer_ref":
            return PreferRefJob(ref=self.prefer_ref, enabled=self.prefer.enabled)
        if stage == "prefer":
            return PreferJob.from_sections(self.prefer, self.parallel, self.evaluate.spotcheck.flags, self.sft.adapter)
        if stage == "instruct":
            return InstructJob(instruct=self.instruct, eval_prompts=[p.text for p in self.evaluate.prompts])
        return getattr(self, "validate_" if stage == "validate" else stage)

    def dump(self) -> dict[str, Any]:
        return self.model_dump(mode="json", by_alias=True)


# PyYAML raises more than YAMLError: ValueError for a scalar that matches a tag's pattern but not its range
# (`2001-13-45` read as a date, `!!int x`, `0x_`) and RecursionError for deep nesting. All are params errors.
YAML_ERRORS = (yaml.YAMLError, ValueError, RecursionError)

# params.yaml is a few tens of KB; the cap refuses a runaway file (or a link to one) before it is read
MAX_PARAMS_BYTES = 16 << 20
_KINDS = ((stat.S_ISDIR, "a directory"), (stat.S_ISCHR, "a character device"), (stat.S_ISBLK, "a block device"),
          (stat.S_ISFIFO, "a FIFO"), (stat.S_ISSOCK, "a socket"))


class _UniqueKeyLoader(yaml.SafeLoader):
    """SafeLoader that refuses a key given twice in one mapping (PyYAML silently keeps the last one)."""

    def construct_mapping(self, node: yaml.MappingNode, deep: bool = False) -> dict:
        seen: set = set()
        for key_node, _ in node.value:
            if key_node.tag == "tag:yaml.org,2002:merge":  # `<<: *base` then overriding a key is intended
                continue
            key = self.construct_object(key_node, deep=deep)
            if isinstance(key, (str, int, float, bool)) or key is None:  # unhashable keys fail later, as before
                if (type(key), key) in seen:  # 1 and true are different keys
                    raise yaml.constructor.ConstructorError(
                        None, None, f"duplicate key {key!r}", key_node.start_mark)
                seen.add((type(key), key))
        return super().construct_mapping(node, deep=deep)

    def construct_huge_int(self, node: yaml.ScalarNode) -> int:
        """PyYAML's int, where one past Python's 4300-digit conversion limit is refused with its position (its
        ValueError named no key, only `<document>`)."""
        try:
            return self.construct_yaml_int(node)
        except ValueError:
            digits = sum(c.isdigit() for c in node.value)  # `!!int x` also lands here: not an integer at all
            why = (f"an integer of {digits:,} digits: must fit in 64 bits (|n| < 2^63)" if digits > 4000 else
                   f"tagged !!int but {node.value[:40]!r} is not an integer")
            raise HugeIntError(None, None, why, node.start_mark) from None


class HugeIntError(yaml.constructor.ConstructorError):
    """An integer scalar too long for Python to convert; `read_params_file` names its key."""


_UniqueKeyLoader.add_constructor("tag:yaml.org,2002:int", _UniqueKeyLoader.construct_huge_int)
# no key takes bytes, and pydantic decoded `name: !!binary aGVsbG8=` to 'hello': an unknown tag, refused
_UniqueKeyLoader.add_constructor("tag:yaml.org,2002:binary", yaml.SafeLoader.construct_undefined)


def key_at(text: str, index: int) -> str | None:
    """The key path of the scalar at character `index` of the YAML `text` (composed, not constructed: aliases are
    nodes shared, walked once), or None."""
    try:
        todo: list[tuple[tuple, yaml.Node]] = [((), yaml.compose(text, Loader=yaml.SafeLoader))]
    except (yaml.YAMLError, RecursionError):
        return None
    seen: set[int] = set()
    while todo:
        path, node = todo.pop()
        if node is None or id(node) in seen:
            continue
        seen.add(id(node))
        if isinstance(node, yaml.ScalarNode) and node.start_mark.index == index:
            return ".".join(map(str, path)) or "<root>"
        if isinstance(node, yaml.MappingNode):
            for key, value in node.value:
                name = key.value if isinstance(key, yaml.ScalarNode) else "<key>"
                todo += [((*path, name), value), ((*path, "<key>"), key)]
        elif isinstance(node, yaml.SequenceNode):
            todo += [((*path, i), item) for i, item in enumerate(node.value)]
    return None


def parse_override(item: str) -> tuple[str, Any]:
    """`a.b.0.c=value` -> ("a.b.0.c", value); the value is read as YAML (numbers, booleans, lists)."""
    if "=" not in item:
        raise ParamsError([f"{item}: an override must look like key.path=value"], "override")
    key, raw = item.split("=", 1)
    key = key.strip()
    if not key or any(not part for part in key.split(".")):
        raise ParamsError([f"{item}: empty key in override"], "override")
    if not raw.strip():
        return key, ""
    try:
        value = yaml.load(raw, Loader=_UniqueKeyLoader)  # noqa: S506 — a SafeLoader subclass
    except YAML_ERRORS as exc:
        why = getattr(exc, "problem", None) or exc.__class__.__name__  # e.g. "duplicate key 'name'"
        raise ParamsError([f"{key}: value is not valid YAML ({why})"], "override") from None
    # the value is validated here as YAML 1.1 and read back from params.yaml by DVC as YAML 1.2: one the two
    # read apart (`seed=010`: 8 or 10, `yes`) is ambiguous, refused as in the file (DVC's own `exp run -S` goes
    # through Hydra's grammar, a third reading: `010` stays a string there)
    ours = {key: value}
    problems = reading_differences(ours, {key: dvc_reading(raw, Path(key))})
    if problems:
        raise ParamsError(problems, "override")
    return key, ours[key]


def apply_overrides(data: dict[str, Any], overrides: dict[str, Any] | Iterable[str]) -> dict[str, Any]:
    """Return a copy of `data` with dotted-key overrides set; list items are addressed by index."""
    if not isinstance(overrides, dict):
        overrides = dict(parse_override(o) for o in overrides)
    data = copy.deepcopy(data)
    for key, value in overrides.items():
        parts = key.split(".")
        node: Any = data
        for depth, part in enumerate(parts[:-1]):
            where = ".".join(parts[: depth + 1])
            if isinstance(node, list):
                node = node[_list_index(node, part, where)]
            elif isinstance(node, dict):
                # Unknown intermediate keys become dicts so the schema names the bad key afterwards.
                node = node.setdefault(part, {})
            else:
                raise ParamsError([f"{where}: is a value, not a section"], "override")
        last = parts[-1]
        if isinstance(node, list):
            node[_list_index(node, last, key)] = value
        elif isinstance(node, dict):
            node[last] = value
        else:
            raise ParamsError([f"{key}: parent is a value, not a section"], "override")
    return data


def _list_index(node: list, part: str, where: str) -> int:
    # ASCII digits from 0: `a.-1`, `a.２` were second names of an item (two overrides of it passed together)
    if not (part.isascii() and part.isdigit()) or not int(part) < len(node):
        raise ParamsError([f"{where}: list index must be 0..{len(node) - 1}, got {part!r}"], "override")
    return int(part)


def read_text_capped(path: Path) -> str:
    """The file's text, refused unread when it is not a regular file or is over MAX_PARAMS_BYTES: a link to
    /dev/zero was a MemoryError, a FIFO hung `check` and 300 MB of comments took 1.2 GB."""
    try:
        # O_NONBLOCK: opening a FIFO for reading otherwise waits for a writer, before fstat could refuse it
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK)
    except FileNotFoundError as exc:
        raise ParamsError([f"{path}: file not found"], str(path)) from exc
    except OSError as exc:  # a permission problem, a link loop
        raise ParamsError([f"{path}: cannot be read ({exc.strerror or exc})"], str(path)) from None
    info = os.fstat(fd)   # of what was opened, so the file cannot be swapped after the check
    if not stat.S_ISREG(info.st_mode) or info.st_size > MAX_PARAMS_BYTES:
        os.close(fd)
        kind = next((k for test, k in _KINDS if test(info.st_mode)), "a special file")
        raise ParamsError([f"{path}: not a regular file ({kind})" if not stat.S_ISREG(info.st_mode) else
                           f"{path}: {info.st_size:,} bytes, over the {MAX_PARAMS_BYTES:,} allowed"], str(path))
    with os.fdopen(fd, "rb") as f:
        raw = f.read(MAX_PARAMS_BYTES + 1)   # a file that grew since fstat is still read no further
    if len(raw) > MAX_PARAMS_BYTES:
        raise ParamsError([f"{path}: over the {MAX_PARAMS_BYTES:,} bytes allowed"], str(path))
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise ParamsError([f"byte {exc.start}: not UTF-8 text ({exc.reason})"], str(path)) from None


def read_params_file(path: str | Path) -> dict[str, Any]:
    """Read params.yaml as plain data, turning YAML syntax errors into a ParamsError with a line number."""
    path = Path(path)
    text = read_text_capped(path)
    try:
        data = yaml.load(text, Loader=_UniqueKeyLoader)
    except HugeIntError as exc:
        mark = exc.problem_mark
        where = f"line {mark.line + 1}, column {mark.column + 1}"
        key = key_at(text, mark.index)
        raise ParamsError([f"{key} ({where}): {exc.problem}" if key else f"{where}: {exc.problem}"],
                          str(path)) from None
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f"line {mark.line + 1}, column {mark.column + 1}" if mark else "unknown position"
        raise ParamsError([f"{where}: {getattr(exc, 'problem', None) or exc}"], str(path)) from exc
    except (ValueError, RecursionError) as exc:
        reason = "nested too deeply" if isinstance(exc, RecursionError) else f"a value cannot be read ({exc})"
        raise ParamsError([f"<document>: {reason}"], str(path)) from None
    if data is None:
        data = {}
    if not isinstance(data, dict):
        raise ParamsError([f"<root>: must be a mapping of sections, got {type(data).__name__}"], str(path))
    dvc_data = dvc_reading(text, path)
    # an empty file is {} to both: DVC's parse_yaml reads it `or {}`
    problems = reading_differences(data, {} if dvc_data is None else dvc_data)
    if problems:
        raise ParamsError(problems, str(path))
    return data


def dvc_reading(text: str, path: Path) -> Any:
    """The file as DVC reads it (ruamel's safe loader, YAML 1.2, libyaml's parser when installed): what `dvc
    params diff`, `dvc exp` and the flows' ruamel re-dump see, where specs read YAML 1.1 with PyYAML."""
    from ruamel.yaml import YAML, YAMLError as DVCYAMLError

    try:
        return YAML(typ="safe").load(text)
    except DVCYAMLError as exc:   # DVC stops every command on it ("YAML file structure is corrupted")
        mark = getattr(exc, "problem_mark", None)
        where = f"line {mark.line + 1}, column {mark.column + 1}" if mark else "<document>"
        problem = getattr(exc, "problem", None) or str(exc).splitlines()[0]
        raise ParamsError([f"{where}: DVC's YAML reader (ruamel) cannot read it: {problem}"], str(path)) from None
    except (ValueError, RecursionError) as exc:
        raise ParamsError([f"<document>: DVC's YAML reader (ruamel) cannot read it ({type(exc).__name__})"],
                          str(path)) from None


def reading_differences(ours: Any, theirs: Any, limit: int = 20) -> list[str]:
    """Where PyYAML's YAML 1.1 reading and DVC's YAML 1.2 one differ (`010` is 8 or 10, `1:20:00` 4800 or a
    string, `yes` True or a string): forgeline would validate and train on one value while DVC tracks the other.
    A number YAML 1.1 reads as a string (`1e-4`, no dot) is set in `ours` to DVC's float: the same number.
    Each pair of containers is walked once, so an alias bomb costs its nodes, not its expansion."""
    problems: list[str] = []
    seen: set[tuple[int, int]] = set()
    todo: list[tuple[tuple, Any, Any, Any]] = [((), ours, theirs, None)]
    while todo and len(problems) < limit:
        path, a, b, parent = todo.pop()
        where = ".".join(map(str, path)) or "<root>"
        if isinstance(a, (dict, list)) and type(a) is type(b):
            if (id(a), id(b)) in seen:
                continue
            seen.add((id(a), id(b)))
        if isinstance(a, dict) and isinstance(b, dict):
            theirs_by, ours_keys = {(type(k), k): v for k, v in b.items()}, {(type(k), k) for k in a}
            extra = [k for k in b if (type(k), k) not in ours_keys]
            for key, value in reversed(a.items()):
                if (type(key), key) in theirs_by:
                    todo.append(((*path, key), value, theirs_by[type(key), key], a))
                else:
                    other = f"reads key {extra.pop(0)!r}" if extra else "lacks it"
                    problems.append(f"{where}: YAML 1.1 reads key {_shown(key)}, DVC (YAML 1.2) {other}: quote it "
                                    "or write the key as DVC reads it")
        elif isinstance(a, list) and isinstance(b, list) and len(a) == len(b):
            todo.extend(((*path, i), x, y, a) for i, x, y in reversed(list(zip(range(len(a)), a, b))))
        elif isinstance(a, str) and type(b) is float and _as_float(a) == b:
            parent[path[-1]] = b
        elif not _same(a, b):
            problems.append(f"{where}: YAML 1.1 reads {_shown(a)}, DVC (YAML 1.2) reads {_shown(b)}: quote it or "
                            "write the value as DVC reads it")
    return problems


def _as_float(text: str) -> float | None:
    try:
        return float(text)
    except ValueError:
        return None


def _same(a: Any, b: Any) -> bool:
    # type first: `1 == True` and `1 == 1.0` in Python, not in a schema; NaN is the one value unequal to itself
    return type(a) is type(b) and (a == b or (isinstance(a, float) and math.isnan(a) and math.isnan(b)))


def _shown(value: Any) -> str:
    if isinstance(value, int) and value.bit_length() > 14_000:  # repr raises past 4,300 digits (0o7…, 1:1:…)
        return f"an integer of {int(value.bit_length() * 0.30102999566398120) + 1:,} digits"
    text = repr(value)
    return text if len(text) <= 80 else text[:77] + "..."


def validate_params(data: dict[str, Any], source: str = "params") -> Params:
    try:
        return Params.model_validate(data)
    except ValidationError as exc:
        raise ParamsError(describe_errors(exc, Params), source) from None


def load_params(path: str | Path = "params.yaml", overrides: dict[str, Any] | Iterable[str] = ()) -> Params:
    """Load, override and validate params; raises ParamsError naming every bad key before any work."""
    data = apply_overrides(read_params_file(path), overrides)
    return validate_params(data, str(path) + (" (with overrides)" if overrides else ""))
