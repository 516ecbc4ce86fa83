"""The `benchmark` section: standard benchmarks with lm-evaluation-harness, offline, on the run's models."""

from __future__ import annotations

from typing import Literal

from pydantic import Field, model_validator

from specs.base import StrictModel, require_unique
from specs.clean import CleanSpec
from specs.init import ModelInitSpec

TASK_NAME = r"^[A-Za-z][A-Za-z0-9_.-]{0,95}$"
SHIPPED_TASKS = ("forgeline_docstring_cloze", "forgeline_prose_choice", "forgeline_prose_ppl")
DATA_SUFFIXES = (".jsonl", ".json", ".parquet", ".csv")


class ShippedTasksSpec(StrictModel):
    """The small tasks forgeline builds at run time from text the model did not train on (README: benchmark)."""

    docs: int = Field(100, ge=1, le=100_000, description="Items built per shipped task (fewer when the held-out "
                      "text runs out; `limit` applies on top).")
    choices: int = Field(4, ge=2, le=10, description="Options per multiple-choice item (chance = 1/choices).")
    context_words: int = Field(48, ge=4, le=2_000, description="forgeline_prose_choice: words of the passage the "
                               "model reads.")
    continuation_words: int = Field(10, ge=1, le=200, description="forgeline_prose_choice: words of each option.")
    passage_words: int = Field(150, ge=8, le=20_000, description="forgeline_prose_ppl: words per scored passage.")
    prose_sources: list[str] | None = Field(
        None, description="Sources whose held-out documents (mix's val split) are the prose tasks' text. null: every "
        "source whose records carry a natural-language `lang` tag (2–3 letters, e.g. `en`), not code (`python`).",
    )


class TaskFileSpec(StrictModel):
    """A benchmark file you downloaded (ARC, HellaSwag, MMLU, GSM8K in their Hugging Face column layout), scored
    with lm-eval's own definition of that benchmark reading this file instead of the Hub."""

    name: str = Field(..., pattern=TASK_NAME, description="Task name to list in `benchmark.tasks` (e.g. arc_easy).")
    format: Literal["arc", "hellaswag", "mmlu", "gsm8k"] = Field(
        ..., description="Column layout and task definition: arc (allenai/ai2_arc: question, choices{text,label}, "
        "answerKey), hellaswag (Rowan/hellaswag: activity_label, ctx_a, ctx_b, endings, label), mmlu (cais/mmlu "
        "`all`: question, subject, choices, answer), gsm8k (openai/gsm8k: question, answer).",
    )
    path: str = Field(..., min_length=1, description="The test split: a .jsonl/.json/.parquet/.csv file, relative "
                      "to the project root or absolute.")
    fewshot_path: str | None = Field(None, min_length=1, description="Where few-shot examples come from (a train "
                                     "or dev split file); null: from the test file itself, the item never its own "
                                     "example.")
    max_gen_toks: int | None = Field(None, ge=1, le=8192, description="gsm8k: tokens generated at most (lm-eval's "
                                     "256 by default); must stay below the model's context length.")

    @model_validator(mode="after")
    def _known_file_types(self) -> "TaskFileSpec":
        for key, value in (("path", self.path), ("fewshot_path", self.fewshot_path)):
            if value is not None and not value.lower().endswith(DATA_SUFFIXES):
                raise ValueError(f"{key}: {value!r} must end in one of {', '.join(DATA_SUFFIXES)}")
        return self


class BenchmarkGateSpec(StrictModel):
    """Thresholds that fail the stage as a gate (not retried; export does not run): a minimum score per metric,
    and/or no regression of the final model against the starting one beyond a tolerance."""

    min_scores: dict[str, float] = Field(
        default_factory=dict, description="`task/metric` → the lowest accepted score of the final model, e.g. "
        "`forgeline_prose_choice/acc: 0.3`. Empty: no minimum.",
    )
    max_regression: float | None = Field(
        None, ge=0, description="Largest accepted drop (absolute, final minus starting model) of any metric where "
        "higher is better — or rise where lower is better — over the compared tasks. null: not checked.",
    )
    regression_metrics: list[str] = Field(
        default_factory=lambda: ["acc", "acc_norm", "exact_match"],
        description="Metric names the regression check reads (perplexities move by far more than accuracies).",
    )


class BenchmarkSpec(StrictModel):
    """Score the finetuned model (and the model it started from) on lm-eval tasks from local files only: no Hub
    request ever (README: benchmark). Results go to metrics/benchmark.json (`dvc metrics diff`), the model card and
    the optional gate."""

    tasks: list[str] = Field(
        default_factory=lambda: list(SHIPPED_TASKS), min_length=1,
        description="lm-eval task (or group) names: the shipped `forgeline_*` tasks, `files[].name`, and tasks "
        "defined by YAML under `include_path`. lm-eval's built-in tasks are not indexed (they read the Hub).",
    )
    include_path: list[str] = Field(
        default_factory=list, description="Folders of lm-eval task YAML (relative to the project root or absolute) "
        "whose datasets are local files: `dataset_path: json` + `dataset_kwargs: {data_files: ...}`.",
    )
    files: list[TaskFileSpec] = Field(default_factory=list, description="Downloaded benchmark files to score with "
                                      "lm-eval's own definition of their benchmark.")
    num_fewshot: int | None = Field(None, ge=0, le=64, description="Few-shot examples per item for every task; null: "
                                    "each task's own (0 for the shipped ones, 5 for gsm8k).")
    limit: int | None = Field(100, ge=1, description="Items scored per task at most (the first ones, in file order); "
                              "null: all.")
    batch_size: int = Field(8, ge=1, le=4096, description="Requests per forward pass.")
    backend: Literal["forgeline", "hf"] = Field(
        "forgeline", description="How forgeline's own checkpoints are scored: `forgeline` (an lm-eval LM over "
        "forgeline's model and KV cache, no conversion) or `hf` (lm-eval's Hugging Face backend on the checkpoint "
        "converted as export converts it, in work/benchmark/). Same scores either way (tested).",
    )
    compare: Literal["auto", "start", "pretrain", "none"] = Field(
        "auto", description="The `before` model the card and the regression gate compare with: `start` (the "
        "model.init checkpoint, through lm-eval's HF backend), `pretrain` (data/pretrain: before finetuning), "
        "`auto` (start when model.init.kind is hf, else pretrain), `none`.",
    )
    bootstrap_iters: int = Field(1000, ge=0, le=100_000, description="lm-eval's bootstrap draws for the standard "
                                 "error of metrics without a closed form (0: none).")
    threads: int = Field(1, ge=1, le=256, description="Torch CPU threads while scoring (fixed, so the same params "
                         "give the same scores on any machine).")
    device: str = Field("cpu", pattern=r"^(cpu|cuda(:\d+)?)$", description="Device the models run on.")
    shipped: ShippedTasksSpec = Field(default_factory=ShippedTasksSpec, description="Size of the shipped tasks.")
    gate: BenchmarkGateSpec = Field(default_factory=BenchmarkGateSpec, description="Optional score thresholds.")

    @model_validator(mode="after")
    def _names(self) -> "BenchmarkSpec":
        require_unique([f.name for f in self.files], "files[].name")
        require_unique(self.tasks, "tasks")
        clash = sorted({f.name for f in self.files} & set(SHIPPED_TASKS))
        if clash:
            raise ValueError(f"files: {clash} are shipped task names; choose another name")
        if self.compare == "none" and self.gate.max_regression is not None:
            raise ValueError("gate.max_regression: needs a starting model to compare with (compare: none)")
        for key in self.gate.min_scores:
            if key.count("/") != 1 or key.split("/")[0] not in self.tasks:
                raise ValueError(f"gate.min_scores: {key!r} must be `task/metric` with the task in `tasks`")
        return self


class BenchmarkJob(StrictModel):
    """What the stage receives: its section and where the run's weights started (`model.init`), whose checkpoint
    is the `before` model with `compare: start`/`auto`."""

    benchmark: BenchmarkSpec = Field(default_factory=BenchmarkSpec, description="The `benchmark` section.")
    model_init: ModelInitSpec = Field(default_factory=ModelInitSpec, description="`model.init` (read only).")

    @model_validator(mode="after")
    def _comparable(self) -> "BenchmarkJob":
        problems = compare_problems(self.benchmark, self.model_init)
        if problems:
            raise ValueError("; ".join(problems))
        return self


def compare_problems(bench: BenchmarkSpec, init: ModelInitSpec) -> list[str]:
    """What `compare` cannot do with this model.init (checked with the whole params, before any work)."""
    if bench.compare == "start" and init.kind != "hf":
        return ["benchmark.compare: start needs model.init.kind: hf (a starting checkpoint); use auto or pretrain"]
    return []


def with_benchmark_files(clean: CleanSpec, bench: BenchmarkSpec) -> CleanSpec:
    """`clean` whose decontamination also indexes the test files of `bench.files` (the `.jsonl` ones: what the
    13-gram check reads), so pretraining text that holds a benchmark's items is dropped as `contaminated`."""
    d = clean.decontamination
    extra = [f.path for f in bench.files if f.path.endswith(".jsonl") and f.path not in d.benchmark_files]
    if not extra:
        return clean
    return clean.model_copy(update={"decontamination": d.model_copy(
        update={"benchmark_files": [*d.benchmark_files, *extra]})})
