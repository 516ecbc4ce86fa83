"""The clean stage end to end on a small real corpus with planted problems: every record kept or dropped with
a reason, PII gone before anything downstream, duplicates resolved to the best copy, and a killed run resumes."""

from __future__ import annotations

import json
import subprocess
import sys

import pyarrow.parquet as pq
import pytest
import yaml

from specs import Params
from tasks.core.runner import run_stage
from tasks.data.records import read_all_records
from tests.helpers.clean import PARAMS, build_corpus


@pytest.fixture(scope="module")
def cleaned(tmp_path_factory):
    root = tmp_path_factory.mktemp("clean")
    planted = build_corpus(root)
    result = run_stage("clean", Params.model_validate(PARAMS), root)
    return root, result, planted


def test_counts_are_conserved_and_ledger_matches(cleaned):
    root, result, _ = cleaned
    c = result.counts
    assert c["in"] == 24 + 6 + 5 == c["kept"] + c["dropped"]
    ledger = pq.read_table(root / "data/clean/dropped.parquet").to_pylist()
    assert len(ledger) == c["dropped"] == sum(c["dropped_by_reason"].values())
    kept_ids = set(read_all_records(root / "data/clean").column("id").to_pylist())
    assert len(kept_ids) == c["kept"] and not kept_ids & {r["id"] for r in ledger}


def test_planted_problems_are_dropped_for_the_right_reason(cleaned):
    root, _, planted = cleaned
    ledger = {r["id"]: r for r in pq.read_table(root / "data/clean/dropped.parquet").to_pylist()}
    for rid, (why, original) in planted.items():
        if why == "kept":
            assert rid not in ledger
        elif why == "near_duplicate":  # one of the pair goes (the lower quality); the ledger names the survivor
            pair = {rid, original}
            (gone,) = [i for i in pair if i in ledger]
            assert ledger[gone]["reason"] == "near_duplicate" and ledger[gone]["kept_id"] in pair - {gone}
        else:
            assert ledger[rid]["reason"] == why, (rid, ledger.get(rid))
            if original:
                assert ledger[rid]["kept_id"] == original


def test_pii_is_replaced_before_output(cleaned):
    root, result, _ = cleaned
    kept = {r["id"]: r["text"] for r in read_all_records(root / "data/clean").to_pylist()}
    text = kept["wiki/zz-pii"]
    assert "jane.doe" not in text and "555-0132" not in text and "4111" not in text
    assert "<EMAIL>" in text and "<PHONE>" in text and "<CREDIT_CARD>" in text
    assert result.counts["pii_replaced"]["email"] >= 1
    # the kept record says what was scrubbed (hand count of the planted line: one of each)
    meta = {r["id"]: json.loads(r["meta"]) for r in read_all_records(root / "data/clean").to_pylist()}
    assert meta["wiki/zz-pii"]["pii"] == {"credit_card": 1, "email": 1, "phone": 1}


def test_code_is_judged_by_code_rules(cleaned):
    root, _, _ = cleaned
    kept = read_all_records(root / "data/clean").column("source").to_pylist()
    assert kept.count("code") == 6


def test_report_has_lsh_curve_and_precision(cleaned):
    root, _, _ = cleaned
    report = json.loads((root / "data/clean/report.json").read_text())
    curve = report["dedup_detail"]["s_curve"]
    assert curve[0][1] < 0.01 and curve[-1][1] > 0.99
    assert report["dedup"]["bands"] * report["dedup"]["rows"] <= 128
    # the audit is exhaustive on this small corpus: every pair of the documents left after exact dedup
    d, audit = report["dedup"], report["dedup_detail"]["audit"]
    alive = report["kept"] + d["near_dropped"]
    assert d["audit_pairs"] == alive * (alive - 1) // 2 == audit["audit_pairs"]
    assert audit["true_pairs"] >= 1 and d["recall"] == 1.0 and 0 < d["f1"] <= 1


def test_killed_run_resumes_and_matches_uninterrupted(cleaned, tmp_path):
    reference, _, _ = cleaned
    root = tmp_path / "p"
    root.mkdir()
    build_corpus(root)
    # In-process, so exactly the shards finished before the kill are on disk (a pool: tests/test_executors.py).
    (root / "params.yaml").write_text(yaml.safe_dump({**PARAMS, "run": {**PARAMS["run"], "executor": {"workers": 1}}}))
    cmd = [sys.executable, "-m", "tasks", "--root", str(root), "clean"]
    env_kill = {"FORGELINE_FAULT": "clean.shard_done=2"}
    import os

    killed = subprocess.run(cmd, env={**os.environ, **env_kill}, capture_output=True, text=True)
    assert killed.returncode == -9, killed.stderr
    assert not (root / "data/clean/manifest.json").exists()
    finished = list((root / "work/clean").glob("*/mixed-*.parquet"))
    assert len(finished) == 2
    resumed = subprocess.run(cmd, capture_output=True, text=True)
    assert resumed.returncode == 0, resumed.stderr
    assert "resumed: 2 of 6 shards were already finished" in resumed.stderr
    for f in ("dropped.parquet", "report.json", *(f"shards/{p.name}" for p in (reference / "data/clean/shards").iterdir())):
        assert (root / "data/clean" / f).read_bytes() == (reference / "data/clean" / f).read_bytes(), f
    assert not (root / "work/clean").exists() or not any((root / "work/clean").iterdir())


def test_quality_curve_matches_a_direct_count(cleaned):
    """The curve recounted from scratch: every output text (kept shards + ledger) re-scored by quality_score."""
    from specs.clean import QualitySpec
    from tasks.data.filtering.quality import quality_score

    root, _, _ = cleaned
    spec = QualitySpec(profiles={"code": "code"})
    texts = [(r["source"], r["text"]) for r in read_all_records(root / "data/clean").to_pylist()]
    texts += [(r["source"], r["text"]) for r in pq.read_table(root / "data/clean/dropped.parquet").to_pylist()]
    scored = [(s, quality_score(t, getattr(spec, spec.profiles.get(s, "prose"))).score, len(t.split()))
              for s, t in texts]
    lines = (root / "data/clean/quality_curve.csv").read_text().splitlines()
    header = lines[0].split(",")
    assert len(lines) == 1 + 7
    for line in lines[1:]:
        row = dict(zip(header, line.split(",")))
        t = float(row["threshold"])
        for src in ("code", "wiki"):
            kept = [w for s, score, w in scored if s == src and score >= t]
            assert (int(row[f"docs:{src}"]), int(row[f"words:{src}"])) == (len(kept), sum(kept)), (t, src)
        assert int(row["docs"]) == sum(score >= t for _, score, _ in scored)
    report = json.loads((root / "data/clean/report.json").read_text())
    assert {r["threshold"] for r in report["quality_curve"]} == {0.3, 0.4, 0.5, 0.6, 0.7, 0.8, 0.9}
