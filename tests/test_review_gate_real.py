"""The `auto` gate on real stage outputs: the synthetic mix (tests/helpers/pretrain.py), pretrain for 1 step or for
150, the real evaluate stage, then the review stage. A barely trained model and a run whose kept documents
still carry PII (scrubbing off) are rejected, each by the check meant to catch it; a trained model passes."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from specs.evaluate import EvaluateSpec
from specs.review import ReviewSpec
from tasks import evaluate, review
from tasks.core.runner import StagePaths
from tasks.data.records import RECORD_SCHEMA, write_table
from tests.helpers.pretrain import SEED, SPEC, run_stage

# The synthetic documents are random words: the prose quality rules flag nearly every text by construction, so
# the low_quality flag is off here (it is counted like the others; tests/test_review.py covers it).
EVALUATE = {"perplexity_batches": None, "sampling": {"max_new_tokens": 24},
            "spotcheck": {"flags": {"quality": {"enabled": False}}}}


def pretrain_for(root: Path, steps: int) -> None:
    spec = json.loads(json.dumps(SPEC))
    spec["train"].update(steps=steps, eval_every=steps, checkpoint_every=steps)
    spec["train"]["optim"]["lr"] = 1e-2
    shutil.rmtree(root / "checkpoints", ignore_errors=True)  # a fresh run, not a resume of the previous one
    run_stage(root, spec)


def evaluate_and_review(root: Path):
    paths = StagePaths(root=root, stage="evaluate", seed=SEED)
    shutil.rmtree(paths.out, ignore_errors=True)
    paths.out.mkdir(parents=True)
    evaluate.run(EvaluateSpec.model_validate(EVALUATE), paths)
    report = json.loads((paths.out / "report.json").read_text())
    gate = StagePaths(root=root, stage="review", seed=SEED)
    gate.out.mkdir(parents=True, exist_ok=True)
    return review.run(ReviewSpec(), gate), report  # the default thresholds


def fails(result) -> list[str]:
    return [line for line in result.summary.splitlines() if "FAIL" in line]


@pytest.fixture(scope="module")
def project(mixed, tmp_path_factory) -> Path:
    # A copy of the session's synthetic mix (tests/conftest.py `mixed`: tests/helpers/pretrain.py build_mixed,
    # clean shards included), which this module then changes (ledger, shards, pretrain outputs) in its own folder.
    root = tmp_path_factory.mktemp("gate")
    shutil.copytree(mixed, root, dirs_exist_ok=True)
    ledger = [{"id": "prose/900", "source": "prose", "reason": "toxic", "detail": "1 hit", "text": "shit, said he"}]
    pq.write_table(pa.Table.from_pylist(ledger), root / "data" / "clean" / "dropped.parquet")
    return root


def test_a_barely_trained_model_is_rejected_for_its_perplexity(project):
    pretrain_for(project, 1)
    result, report = evaluate_and_review(project)
    ratio = report["perplexity"]["perplexity"] / report["baseline"]["perplexity"]
    assert ratio > 1.0  # worse than predicting token frequencies
    assert not result.ok and result.counts["decision"] == "reject"
    assert [f.split(" (")[0] for f in fails(result)] == ["- val perplexity / unigram perplexity"]
    assert f"{ratio:.4g} > 0.8: FAIL" in result.summary


def test_a_trained_model_is_approved_and_a_pii_leak_is_rejected(project):
    pretrain_for(project, 150)
    result, report = evaluate_and_review(project)
    assert report["perplexity"]["perplexity"] / report["baseline"]["perplexity"] < 0.6
    assert result.ok, result.summary
    assert "share of toxic drops not flagged toxic 0 ≤ 0: pass" in result.summary  # the drop is confirmed

    # PII scrubbing off: the kept documents still hold addresses (look-alikes that are no PII stay in, too).
    for shard in sorted((project / "data" / "clean" / "shards").glob("*.parquet")):
        rows = pq.read_table(shard).to_pylist()
        for k, r in enumerate(rows):
            r["text"] += (f" write to ada{k}@example.org" if r["source"] == "prose"
                          else " version 3.11.2 at example dot org")
        write_table(rows, RECORD_SCHEMA, shard)
    result, _ = evaluate_and_review(project)
    assert not result.ok
    assert fails(result) == ["- share of kept documents flagged pii 0.5 > 0: FAIL"]  # 2 prose of 4 kept
    labels = {row["id"].split("/")[0]: row["label"] for row in result.table if row["id"].startswith("kept:")}
    assert labels == {"kept:prose": "bad", "kept:code": "ok"}


def test_the_unigram_baseline_equals_a_count_by_hand(project):
    """Add-one-smoothed train-target frequencies scored on the val targets, counted in plain Python."""
    import math
    from collections import Counter

    from tasks.data.mixing.packing import PackedDataset
    from tasks.eval.baseline import unigram_perplexity

    mix = project / "data" / "mix"
    vocab = json.loads((mix / "packing.json").read_text())["vocab_size"]
    train, val = (Counter(t for i in range(len(ds)) for t in ds[i][1:].tolist())
                  for ds in (PackedDataset(mix, "train"), PackedDataset(mix, "val")))
    n = sum(train.values())
    loss = -sum(c * math.log((train[t] + 1) / (n + vocab)) for t, c in val.items()) / sum(val.values())
    got = unigram_perplexity(mix)
    assert (got["train_tokens"], got["val_tokens"]) == (n, sum(val.values()))
    assert got["loss"] == pytest.approx(loss, abs=1e-6) and got["perplexity"] == pytest.approx(math.exp(loss), rel=1e-5)
