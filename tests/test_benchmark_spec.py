"""The `benchmark` params: typed and checked before any work, named in errors; the stage's job carries model.init;
downloaded test files reach clean's decontamination."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from specs import ParamsError, load_params
from specs.benchmark import SHIPPED_TASKS, BenchmarkJob, BenchmarkSpec
from tasks.core import graph

REPO = Path(__file__).resolve().parents[1]


def _params(tmp_path: Path, **benchmark) -> Path:
    data = yaml.safe_load((REPO / "params.yaml").read_text())
    data["benchmark"] = {**data["benchmark"], **benchmark}
    path = tmp_path / "params.yaml"
    path.write_text(yaml.safe_dump(data))
    return path


def test_shipped_params_run_the_shipped_tasks_with_their_defaults():
    params = load_params(REPO / "params.yaml")
    assert params.benchmark.tasks == list(SHIPPED_TASKS)
    assert params.benchmark.model_dump() == BenchmarkSpec().model_dump()  # params.yaml states the defaults
    job = params.section("benchmark")
    assert isinstance(job, BenchmarkJob) and job.model_init == params.model.init


@pytest.mark.parametrize("change, says", [
    ({"limits": 5}, "benchmark.limits"),
    ({"limit": 0}, "benchmark.limit"),
    ({"backend": "vllm"}, "benchmark.backend"),
    ({"tasks": []}, "benchmark.tasks"),
    ({"tasks": ["a", "a"]}, "benchmark: tasks must be unique"),
    ({"gate": {"min_scores": {"mmlu/acc": 0.3}}}, "gate.min_scores: 'mmlu/acc' must be `task/metric` with the task"),
    ({"files": [{"name": "arc", "format": "arc", "path": "arc.txt"}]}, "path: 'arc.txt' must end in one of"),
    ({"files": [{"name": "forgeline_prose_ppl", "format": "arc", "path": "a.jsonl"}]}, "are shipped task names"),
    ({"files": [{"name": "x", "format": "squad", "path": "a.jsonl"}]}, "benchmark.files.0.format"),
    ({"compare": "start"}, "benchmark.compare: start needs model.init.kind: hf"),
    ({"compare": "none", "gate": {"max_regression": 0.02}}, "benchmark.gate.max_regression: needs a starting model"),
])
def test_bad_benchmark_params_fail_before_any_work_naming_the_key(tmp_path, change, says):
    with pytest.raises(ParamsError) as err:
        load_params(_params(tmp_path, **change))
    assert says in str(err.value)


def test_downloaded_test_files_are_indexed_by_cleans_decontamination(tmp_path):
    files = [{"name": "arc_easy", "format": "arc", "path": "downloads/arc.jsonl",
              "fewshot_path": "downloads/arc-train.jsonl"},
             {"name": "mmlu", "format": "mmlu", "path": "downloads/mmlu.parquet"}]
    params = load_params(_params(tmp_path, files=files, tasks=["arc_easy", "mmlu"]))
    indexed = params.section("clean").clean.decontamination.benchmark_files
    # the test split (JSON lines, what the 13-gram check reads); few-shot examples are not test items
    assert indexed == [*params.clean.decontamination.benchmark_files, "downloads/arc.jsonl"]
    assert params.clean.decontamination.benchmark_files == []  # the params themselves are untouched
    assert "benchmark.files" in graph.stage("clean").param_keys()  # a changed list re-runs clean
