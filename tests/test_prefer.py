"""Stages `prefer_data` -> `prefer_ref` -> `prefer` on a real (tiny) SFT model: the loss starts at ln 2 (the
reference read from prefer_ref's file equals the policy at step 0), held-out preference accuracy rises above the
SFT model's, the outputs are byte-identical on rerun and after a SIGKILL mid-run, data-parallel ranks under ZeRO-3
and gradient accumulation give the single-rank losses, LoRA starts at ln 2 and trains, and the gate rejects a run
that did not improve."""

from __future__ import annotations

import json
import math
import shutil
from pathlib import Path

import pytest
import torch

from tests.conftest import kill_point, seed_note
from tests.helpers.killed import run_killed
from tests.helpers.prefer import approve, outputs, run_data, run_prefer
from tests.helpers.sft import conversations, decide, run_sft, write_jsonl



@pytest.fixture(scope="module")
def tuned_sft(pretrained_run, tmp_path_factory) -> Path:
    """A root with a tiny SFT model (6 steps on 40 conversations), approved by review_sft, and prefer_data's
    embedded pairs (rejected: the SFT model's greedy answers or another prompt's answer) and their reference."""
    root = tmp_path_factory.mktemp("prefer")
    shutil.copytree(pretrained_run[0], root, dirs_exist_ok=True)
    write_jsonl(root / "data" / "instruct" / "train.jsonl", conversations(40))
    write_jsonl(root / "data" / "instruct" / "heldout.jsonl", conversations(10, offset=100))
    decide(root, "approve")
    run_sft(root)
    approve(root, "review_sft")
    run_data(root)
    return root


def copy_inputs(src: Path, dest: Path) -> Path:
    for name in ("sft", "review_sft", "prefer_data", "prefer_ref"):
        shutil.copytree(src / "data" / name, dest / "data" / name)
    return dest


@pytest.fixture(scope="module")
def reference(tuned_sft, tmp_path_factory):
    root = copy_inputs(tuned_sft, tmp_path_factory.mktemp("prefer-ref"))
    result = run_prefer(root)
    return root, outputs(root), result


def rows(ref: dict[str, bytes], kind: str) -> list[dict]:
    return [r for r in map(json.loads, ref["metrics.jsonl"].decode().splitlines()) if r["kind"] == kind]


def test_starts_at_ln2_and_accuracy_rises(reference):
    root, ref, result = reference
    report = json.loads(ref["report.json"])
    pref = report["preference"]
    assert abs(pref["start_loss"] - math.log(2)) < 1e-5, pref["start_loss"]  # margins 0: policy = reference
    assert pref["before"]["reward_accuracy"] == 0.0 and abs(pref["before"]["margin"]) < 1e-5
    assert pref["accuracy_after"] > pref["accuracy_before"], pref
    assert pref["after"]["margin"] > 0 and pref["after"]["reward_accuracy"] > 0.5
    train = rows(ref, "train")
    assert abs(train[0]["loss"] - math.log(2)) < 1e-5 and train[-1]["loss"] < train[0]["loss"]
    assert {"reward_chosen", "reward_rejected", "margin", "reward_accuracy"} <= train[0].keys()
    counts = result.counts
    assert counts["heldout_accuracy_after"] == pref["accuracy_after"] and "chosen_logp_collapse" in counts
    assert report["perplexity"]["perplexity"] and report["baseline"]["perplexity"]
    comparisons = [json.loads(x) for x in ref["comparisons.jsonl"].decode().splitlines()]
    assert len(comparisons) == 3 and all({"sft", "tuned", "sft_tokens", "tuned_tokens"} <= c.keys()
                                         for c in comparisons)
    assert pref["generation_length_ratio"] is not None
    ref_report = json.loads((root / "data" / "prefer_ref" / "report.json").read_text())
    assert ref_report["splits"]["heldout"]["accuracy"] == pref["accuracy_before"]  # one truth, two passes


def test_rerun_is_byte_identical(reference, tuned_sft, tmp_path):
    _, ref, _ = reference
    other = copy_inputs(tuned_sft, tmp_path / "other")
    run_prefer(other)
    assert outputs(other) == ref


@pytest.mark.slow
def test_killed_prefer_resumes_to_the_same_end(reference, tuned_sft, tmp_path):
    _, ref, _ = reference
    step = kill_point("prefer-step", 1, 8)
    root = copy_inputs(tuned_sft, tmp_path / "p")
    code, out = run_killed(run_prefer, root, fault=f"prefer.step_done={step}", timeout=600)
    assert code == -9, (step, seed_note(), out[-2000:])
    result = run_prefer(root)
    assert f"resumed from checkpoint step{2 * (step // 2):06d}" in result.summary, (step, seed_note())
    assert outputs(root) == ref, (step, seed_note())


@pytest.mark.slow
@pytest.mark.parametrize("layout", [{"dp": 2, "zero_stage": 3, "micro_batch_size": 1},
                                    {"grad_accum": 2, "micro_batch_size": 1}, {"tp": 2}],
                         ids=["dp2-zero3", "accum2", "tp2"])
def test_ranks_and_accumulation_give_the_single_rank_losses(reference, tuned_sft, tmp_path, layout):
    """The same global batch (2 rows) as one micro-batch on one rank, split over two ZeRO-3 ranks, over two
    accumulated micro-batches, or with each layer split over two tensor-parallel ranks (the head's log-probs
    from its vocabulary shards): the loss is a mean over the step's pairs, so the curves agree."""
    _, ref, _ = reference
    root = copy_inputs(tuned_sft, tmp_path / "p")
    run_prefer(root, **layout, compare_prompts=0)
    got = [r["loss"] for r in rows(outputs(root), "train")]
    want = [r["loss"] for r in rows(ref, "train")]
    assert len(got) == len(want) == 8 and max(abs(a - b) for a, b in zip(got, want)) < 1e-4, (got, want)


@pytest.mark.slow
def test_lora_starts_at_ln2_and_trains(tuned_sft, tmp_path):
    root = copy_inputs(tuned_sft, tmp_path / "p")
    run_prefer(root, adapter={"kind": "lora", "r": 4, "alpha": 8.0}, steps=6, compare_prompts=0,
               optim={"lr": 1e-2, "warmup_steps": 1})
    report = json.loads((root / "data" / "prefer" / "report.json").read_text())
    assert abs(report["preference"]["start_loss"] - math.log(2)) < 1e-5  # adapter off (B = 0): the reference
    assert report["preference"]["after"]["margin"] > 0
    assert (root / "data" / "prefer" / "adapter" / "adapter.json").is_file()


def test_switched_off_writes_a_stub_the_gate_passes(tuned_sft, tmp_path):
    from specs.prefer import PreferReviewSpec
    from tasks import review
    from tasks.core.runner import StagePaths

    root = copy_inputs(tuned_sft, tmp_path / "p")
    result = run_prefer(root, enabled=False)
    assert result.counts == {"enabled": False}
    assert not (root / "data" / "prefer" / "model.safetensors").exists()
    paths = StagePaths(root=root, stage="review_prefer", seed=0)
    paths.out.mkdir(parents=True)
    gate = review.run(PreferReviewSpec(), paths)
    decision = json.loads((paths.out / "decision.json").read_text())
    assert gate.ok and decision["reviewed"] is False and decision["decision"] == "approve"


def test_gate_rejects_no_gain_and_a_collapse_and_leaves_other_gates_alone():
    from specs.prefer import PreferReviewSpec
    from specs.review import GateReport, ReviewSpec
    from tasks.eval.gate_policy import auto_checks

    def report(before: float, after: float, drop: float, collapse: bool) -> GateReport:
        return GateReport.model_validate({
            "perplexity": {"perplexity": 10.0}, "baseline": {"perplexity": 9.0, "kind": "SFT model"},
            "generations": {"count": 0, "flagged_fraction": {}},
            "preference": {"accuracy_before": before, "accuracy_after": after, "chosen_logp_drop": drop,
                           "collapse": collapse, "collapse_threshold": 1.0}})

    def verdicts(spec, rep) -> dict[str, bool]:
        return {c.what.split(" (")[0]: c.passed for c in auto_checks(spec, rep, [])}

    gate = PreferReviewSpec()
    assert all(verdicts(gate, report(0.3, 0.6, 0.2, False)).values())
    assert not verdicts(gate, report(0.6, 0.6, 0.2, False))["held-out preference accuracy before − after"]
    assert not verdicts(gate, report(0.3, 0.6, 1.5, True))["held-out chosen log-prob drop per token"]
    assert not verdicts(PreferReviewSpec(min_accuracy_gain=0.4), report(0.3, 0.6, 0.2, False))[
        "held-out preference accuracy before − after"]
    assert verdicts(PreferReviewSpec(min_accuracy_gain=0.3), report(0.3, 0.6, 0.2, False))[
        "held-out preference accuracy before − after"]  # exactly the gain asked for
    assert not any("preference" in w or "collapse" in w for w in verdicts(ReviewSpec(), report(0.6, 0.1, 3.0, True)))


@pytest.mark.slow
def test_export_publishes_the_tuned_model_with_its_card(reference):
    """export takes prefer's folder when it trained: the HF weights are the tuned ones, the card says how."""
    from safetensors.torch import load_file

    from specs.export import ExportSpec
    from tasks import export
    from tasks.core.runner import StagePaths
    from tasks.train.checkpointing.weights import load_weights

    root = reference[0]
    paths = StagePaths(root=root, stage="export", seed=0)
    paths.out.mkdir(parents=True, exist_ok=True)
    export.run(ExportSpec(), paths)
    hf = load_file(str(root / "data" / "export" / "hf" / "model.safetensors"))
    tuned, sft = load_weights(root / "data" / "prefer"), load_weights(root / "data" / "sft")
    emb = "model.embed_tokens.weight"
    assert torch.equal(hf[emb], tuned["layers.0.weight"]) and not torch.equal(hf[emb], sft["layers.0.weight"])
    card = (root / "data" / "export" / "hf" / "README.md").read_text()
    assert "## Preference tuning" in card and "heldout accuracy (after)" in card
