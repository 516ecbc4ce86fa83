"""Parity: forgeline's lm-eval adapter scores an exported model as lm-eval's own Hugging Face backend does (every
request type: multiple choice, rolling log-likelihood, generation; ARC/HellaSwag/MMLU/GSM8K-format files
included), and the stage's scores equal the `lm_eval` command line it records, run on the exported folder."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from specs.benchmark import BenchmarkSpec, TaskFileSpec
from tasks.eval import lm_eval_tasks as T
from tasks.eval.lm_eval_offline import offline
from tasks.eval.lm_eval_run import evaluate, forgeline_lm, scores
from tests.helpers.benchmark import checkpoint, export, gsm8k_rows, make_upstream, run_stage, write_tasks

pytestmark = pytest.mark.slow

REPO = Path(__file__).resolve().parents[1]


def downloaded_files(folder: Path) -> list[TaskFileSpec]:
    """Small files in the Hub datasets' column layouts, as a user would have downloaded them."""
    folder.mkdir(parents=True, exist_ok=True)
    arc = [{"id": f"q{i}", "question": f"Which one grinds grain number {i}?",
            "choices": {"text": ["a mill", "a river", "a cloud", "a song"], "label": ["A", "B", "C", "D"]},
            "answerKey": "A"} for i in range(6)]
    swag = [{"ind": i, "activity_label": "Baking", "ctx_a": "A man kneads dough.", "ctx_b": f"he [title] step {i}",
             "ctx": "", "endings": ["bakes it.", "sings.", "flies away.", "reads."], "label": str(i % 4)}
            for i in range(6)]
    mmlu = pa.table({"question": [f"What is {i} + {i}?" for i in range(6)], "subject": ["elementary_mathematics"] * 6,
                     "choices": [[str(2 * i), str(i), "7", "9"] for i in range(6)], "answer": [0] * 6})
    (folder / "arc.jsonl").write_text("".join(json.dumps(r) + "\n" for r in arc))
    (folder / "hellaswag.jsonl").write_text("".join(json.dumps(r) + "\n" for r in swag))
    pq.write_table(mmlu, folder / "mmlu.parquet")
    (folder / "gsm8k.jsonl").write_text("".join(json.dumps(r) + "\n" for r in gsm8k_rows()))
    rel = folder.name
    return [TaskFileSpec(name="my_arc", format="arc", path=f"{rel}/arc.jsonl"),
            TaskFileSpec(name="my_hellaswag", format="hellaswag", path=f"{rel}/hellaswag.jsonl"),
            TaskFileSpec(name="my_mmlu", format="mmlu", path=f"{rel}/mmlu.parquet"),
            TaskFileSpec(name="my_gsm8k", format="gsm8k", path=f"{rel}/gsm8k.jsonl", max_gen_toks=12)]


@pytest.fixture(scope="module")
def scored(tmp_path_factory):
    """The same tasks scored by both backends: the adapter on the checkpoint, lm-eval's HF backend on its export."""
    root = tmp_path_factory.mktemp("bench-parity")
    folder = checkpoint(root / "ckpt")
    hf_dir = export(folder, root / "hf")
    tasks = root / "tasks"
    names = write_tasks(tasks, "tasks")
    for f in downloaded_files(root / "downloads"):
        names.append(T.write_file_task(tasks, f))
    spec = BenchmarkSpec(tasks=names, limit=8, batch_size=4, num_fewshot=1)
    from lm_eval.tasks import TaskManager

    cwd = Path.cwd()
    os.chdir(root)
    try:
        with offline(root / "hf_home"):
            manager = TaskManager(include_path=str(tasks), include_defaults=False)
            ours = evaluate(forgeline_lm(folder, folder / "tokenizer.json", prefix_id=0, eot_id=0, batch_size=4,
                                         seed=1), spec, manager, 1)
            theirs = evaluate("hf", spec, manager, 1, {"pretrained": str(hf_dir), "dtype": "float32",
                                                        "prefix_token_id": 0})
    finally:
        os.chdir(cwd)
    return scores(ours), scores(theirs)


def test_every_task_and_metric_is_scored_by_both(scored):
    ours, theirs = scored
    assert set(ours) == set(theirs) == {"forgeline_docstring_cloze", "forgeline_prose_choice", "forgeline_prose_ppl",
                                        "my_arc", "my_hellaswag", "my_mmlu", "my_gsm8k"}
    assert {"exact_match,strict-match", "exact_match,flexible-extract"} <= set(ours["my_gsm8k"]["metrics"])
    assert all(row["n"] == (8 if t.startswith("forgeline") else 6) for t, row in ours.items())


def test_adapter_scores_equal_the_hf_backends(scored):
    ours, theirs = scored
    for task, row in ours.items():
        for metric, cell in row["metrics"].items():
            other = theirs[task]["metrics"][metric]
            # accuracies are counts over items (equal exactly); perplexities differ in the last float bits
            assert cell["value"] == pytest.approx(other["value"], rel=1e-5), (task, metric)
            assert (cell["stderr"] is None) == (other["stderr"] is None), (task, metric)


def test_stage_scores_equal_the_recorded_lm_eval_command_on_the_exported_folder(tmp_path):
    root = make_upstream(tmp_path / "proj")
    _, stage = run_stage(root)
    export(root / "data" / "sft", root / "data" / "export" / "hf")
    command = stage["lm_eval"]["command_on_export"].split()
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "HF_DATASETS_OFFLINE": "1", "HF_HOME": str(tmp_path / "hf_home")}
    lm_eval = str(Path(sys.executable).parent / "lm_eval")
    subprocess.run([lm_eval, *command[1:], "--output_path", str(tmp_path / "out")], cwd=root, env=env, check=True,
                   capture_output=True, text=True)
    (result_file,) = (tmp_path / "out").rglob("results_*.json")
    cli = scores(json.loads(result_file.read_text()))
    for task, row in stage["tasks"].items():
        assert cli[task]["n"] == row["n"]
        for metric, cell in row["metrics"].items():
            assert cli[task]["metrics"][metric]["value"] == pytest.approx(cell["after"], rel=1e-5), (task, metric)
            if cell["after_stderr"] is not None:
                assert cli[task]["metrics"][metric]["stderr"] == pytest.approx(cell["after_stderr"], rel=1e-5)


def test_generations_equal_the_hf_backends_token_for_token(tmp_path):
    from lm_eval.api.instance import Instance
    from lm_eval.models.huggingface import HFLM

    folder = checkpoint(tmp_path / "ckpt")
    hf_dir = export(folder, tmp_path / "hf")
    contexts = ["The mill by the river", "Question: Tom has 3 apples.\nAnswer:", "A", "Once upon a time there was"]
    requests = [Instance(request_type="generate_until", doc={}, arguments=(c, {"until": ["\n\n"], "max_gen_toks": 10,
                                                                               "do_sample": False}), idx=0)
                for c in contexts]
    with offline(tmp_path / "hf_home"):
        ours = forgeline_lm(folder, folder / "tokenizer.json", prefix_id=0, eot_id=0, batch_size=3,
                            seed=1).generate_until(requests)
        theirs = HFLM(pretrained=str(hf_dir), dtype="float32", prefix_token_id=0, batch_size=3,
                      device="cpu").generate_until(requests)
    assert ours == theirs and sum(len(t) for t in ours) > 20  # real text, not empty strings
