"""The whole `params.yaml`: one section per stage plus shared sections, loaded and checked in one place."""

from __future__ import annotations

import copy
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


def parse_override(item: str) -> tuple[str, Any]:
    """`a.b.0.c=value` -> ("a.b.0.c", value); the value is read as YAML (numbers, booleans, lists)."""
    if "=" not in item:
        raise ParamsError([f"{item}: an override must look like key.path=value"], "override")
    key, raw = item.split("=", 1)
    key = key.strip()
    if not key or any(not part for part in key.split(".")):
        raise ParamsError([f"{item}: empty key in override"], "override")
    try:
        value = yaml.safe_load(raw) if raw.strip() else ""
    except YAML_ERRORS as exc:
        raise ParamsError([f"{key}: value is not valid YAML ({exc.__class__.__name__})"], "override") from None
    return key, value


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
    if not part.lstrip("-").isdigit() or not -len(node) <= int(part) < len(node):
        raise ParamsError([f"{where}: list index must be 0..{len(node) - 1}, got {part!r}"], "override")
    return int(part)


def read_params_file(path: str | Path) -> dict[str, Any]:
    """Read params.yaml as plain data, turning YAML syntax errors into a ParamsError with a line number."""
    path = Path(path)
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError as exc:
        raise ParamsError([f"{path}: file not found"], str(path)) from exc
    except UnicodeDecodeError as exc:
        raise ParamsError([f"byte {exc.start}: not UTF-8 text ({exc.reason})"], str(path)) from None
    except OSError as exc:  # a directory, a permission problem
        raise ParamsError([f"{path}: cannot be read ({exc.strerror or exc})"], str(path)) from None
    try:
        data = yaml.load(text, Loader=_UniqueKeyLoader)
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
    return data


def validate_params(data: dict[str, Any], source: str = "params") -> Params:
    try:
        return Params.model_validate(data)
    except ValidationError as exc:
        raise ParamsError(describe_errors(exc, Params), source) from None


def load_params(path: str | Path = "params.yaml", overrides: dict[str, Any] | Iterable[str] = ()) -> Params:
    """Load, override and validate params; raises ParamsError naming every bad key before any work."""
    data = apply_overrides(read_params_file(path), overrides)
    return validate_params(data, str(path) + (" (with overrides)" if overrides else ""))
