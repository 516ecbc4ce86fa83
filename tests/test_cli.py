"""`python -m tasks plan`: the planner as a user meets it, from params.yaml and a described cluster."""

from __future__ import annotations

import subprocess
import sys

from tests.conftest import REPO


def tasks_cli(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "tasks", *args], cwd=REPO, capture_output=True, text=True)


def test_plan_for_the_default_model_on_one_cpu_accepts_the_params_layout():
    proc = tasks_cli("plan")
    assert proc.returncode == 0, proc.stderr
    assert "chosen: dp=1 tp=1 pp=1 zero_stage=0" in proc.stdout
    assert "params.yaml's own layout dp=1 tp=1 pp=1 zero_stage=0: valid for this cluster" in proc.stdout


def test_plan_answers_with_a_recipe_when_the_params_layout_does_not_match_the_cluster():
    """Issue #32: a plan that was found exits 0 whatever params.yaml's own layout says; that layout's problem is
    reported beside the recipe that replaces it."""
    proc = tasks_cli("plan", "--nodes", "1", "--gpus-per-node", "8", "--memory-gb", "80", "--device", "h100-sxm",
                     "--set", "parallel.tp=2")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "chosen: dp=8 tp=1 pp=1" in proc.stdout  # the seed rule: data parallel while the model fits
    assert "--set parallel.dp=8 parallel.tp=1 parallel.pp=1" in proc.stdout
    assert "params.yaml's own layout dp=1 tp=2 pp=1" in proc.stdout and "the world size is 8" in proc.stdout


def test_review_interactive_walks_the_sample_and_writes_the_decision(tmp_path):
    """`python -m tasks review --interactive` in a project with an evaluate sample: scripted answers on stdin."""
    import json
    import shutil

    from specs.evaluate import SpotItem
    from tasks.eval.spotcheck import sample_text

    shutil.copy(REPO / "params.yaml", tmp_path / "params.yaml")
    items = [SpotItem(id="generation:p1", kind="generation", stratum="generation:prose", source="prose",
                      prompt="The mill", text="ground the grain", chars=16, flags=[], flag_detail="")]
    (tmp_path / "data" / "evaluate").mkdir(parents=True)
    (tmp_path / "data" / "evaluate" / "spotcheck.jsonl").write_text(sample_text(items))
    proc = subprocess.run([sys.executable, "-m", "tasks", "--root", str(tmp_path), "review", "--interactive",
                           "--reviewer", "ada"], cwd=REPO, capture_output=True, text=True,
                          input="b\nmade up\nr\nnot yet\n")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    decision = json.loads((tmp_path / "reviews" / "pretrain.json").read_text())
    assert decision["decision"] == "reject" and decision["reviewer"] == "ada" and decision["mode"] == "terminal"
    assert decision["items"] == [{"id": "generation:p1", "label": "bad", "note": "made up"}]
