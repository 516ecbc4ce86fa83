"""The validate stage: GX suites per source over small hand-made ingest shards.

GX costs seconds to import and each run builds a context, so each dataset is validated once in a
module-scoped fixture and several tests read the same result.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from tasks.core import graph
from tasks.core.runner import StagePaths
from tasks.data.validation.verdict import VERDICT, require_validated
from tasks.validate import run
from tests.helpers.validate import SPEC, project, record, spec


def results(paths: StagePaths) -> dict[str, Any]:
    return json.loads((paths.out / "results.json").read_text())


def entry(report: dict[str, Any], suite: str, expect: str, column: str) -> dict[str, Any]:
    (s,) = [s for s in report["suites"] if s["name"] == suite]
    (e,) = [e for e in s["expectations"] if e["spec"]["expect"] == expect and e["spec"]["column"] == column]
    return e


@pytest.fixture(scope="module")
def clean(tmp_path_factory: pytest.TempPathFactory):
    root = tmp_path_factory.mktemp("clean")
    rows = [record("literature", i) for i in range(6)] + [record("code", i) for i in range(4)]
    rows[0]["media"] = [{"kind": "image", "path": "media/cat.png"}]                 # root-relative
    rows[1]["media"] = [{"kind": "image", "path": str(root / "media" / "cat.png")}]  # absolute
    paths = project(root, rows)
    return paths, run(spec(), paths)


@pytest.fixture(scope="module")
def broken(tmp_path_factory: pytest.TempPathFactory):
    rows = [record("literature", i) for i in range(10)] + [record("code", i) for i in range(5)]
    rows[1]["id"] = "literature/0"                                          # duplicate within a source
    rows[2]["media"] = [{"kind": "image", "path": "media/gone.png"}]        # missing media file
    rows[11]["text"] = ""                                                   # empty text in code
    rows[12]["lang"] = "en"                                                 # code's per-source lang check
    rows[13]["id"] = "literature/9"                                         # duplicate across sources only
    rows += [record("rogue", 0), record("rogue", 1)]                        # source outside the allowed set
    paths = project(tmp_path_factory.mktemp("broken"), rows)
    result = run(spec(), paths)
    first = (paths.out / "results.json").read_bytes()
    return paths, result, first


def test_clean_data_passes_the_gate(clean) -> None:
    paths, result = clean
    assert result.ok
    report = results(paths)
    assert report["success"] and report["records"] == 10
    assert [s["name"] for s in report["suites"]] == ["source:code", "source:literature", "all"]
    assert result.counts["by_source"] == {"code": {"rows": 4, "failed_expectations": 0},
                                          "literature": {"rows": 6, "failed_expectations": 0}}
    assert result.counts["failed_expectations"] == 0
    assert result.summary.startswith("validate passed:")
    # code gets its per-source lang check; the media of both path styles resolve.
    assert entry(report, "source:code", "in_set", "lang")["success"]
    assert entry(report, "source:literature", "media_exist", "media")["element_count"] == 6
    assert len(result.table) == sum(len(s["expectations"]) for s in report["suites"])
    # The records may go on: the verdict the gated stages depend on (no ingest manifest in a hand-made project).
    assert json.loads((paths.out / VERDICT).read_text()) == {"passed": True, "records": 10, "checked": None}
    assert require_validated(paths.out, "clean").passed


def test_report_page_is_written_and_self_contained(clean) -> None:
    paths, _ = clean
    page = (paths.reports / "data_docs" / "index.html").read_text()
    report = results(paths)
    # Every expectation of every suite is a row, with its label and counts.
    assert page.count("<tr><td><code>") == sum(len(s["expectations"]) for s in report["suites"])
    assert "<code>unique(id)</code>" in page and "<code>in_set(lang, values=[&#x27;python&#x27;])</code>" in page
    assert '<td class="n">6</td>' in page  # literature's element_count
    # Nothing that would make a browser fetch anything: no script, stylesheet link, image or outside URL.
    for needle in ("<script", "<link", "<img", "src=", "http://", "https://", "url("):
        assert needle not in page, needle
    assert not [p for p in paths.out.iterdir() if ".tmp-" in p.name]


def test_broken_data_fails_with_readable_summary(broken) -> None:
    paths, result, _ = broken
    assert not result.ok
    assert not (paths.out / VERDICT).exists()  # no verdict: clean and multimodal refuse to read the records
    with pytest.raises(ValueError, match="the validate gate has not let the records through"):
        require_validated(paths.out, "clean")
    report = results(paths)
    assert not report["success"]

    dup = entry(report, "source:literature", "unique", "id")
    assert (dup["success"], dup["unexpected_count"], dup["examples"]) == (False, 2, ["literature/0"])
    media = entry(report, "source:literature", "media_exist", "media")
    assert (media["success"], media["unexpected_count"], media["examples"]) == (False, 1, ["literature/2"])
    empty = entry(report, "source:code", "length_between", "text")
    assert (empty["unexpected_count"], empty["examples"]) == (1, ["code/1"])
    assert entry(report, "source:code", "in_set", "lang")["examples"] == ["code/2"]
    rogue = entry(report, "source:rogue", "in_set", "source")
    assert (rogue["unexpected_count"], rogue["unexpected_percent"]) == (2, 100.0)
    assert rogue["examples"] == ["rogue/0", "rogue/1"]
    # The per-source suites cannot see an id shared by two sources; the `all` suite does (examples come in
    # record order, and the code shard is read first).
    assert entry(report, "source:code", "unique", "id")["success"]
    assert entry(report, "all", "unique", "id")["examples"] == ["literature/9", "literature/0"]

    summary = result.summary
    assert "failed**" in summary and "the gate fails" in summary
    assert "`unique(id)` on source `literature`" in summary and "2 of 10 rows failed (20.00%)" in summary
    assert "`media_exist(media)` on source `literature`" in summary and "`literature/2`" in summary
    assert "source `rogue`" in summary and "`rogue/0`, `rogue/1`" in summary
    assert "`length_between(text, min=1, max=10000)` on source `code`" in summary and "`code/1`" in summary
    assert result.counts["failed_expectations"] == 6
    assert result.counts["by_source"]["rogue"] == {"rows": 2, "failed_expectations": 1}
    failed_rows = [r for r in result.table if not r["success"]]
    assert ("all", "unique(id)") in {(r["suite"], r["expectation"]) for r in failed_rows}
    assert ("source:rogue", "in_set(source, values=['literature', 'code'])") in {
        (r["suite"], r["expectation"]) for r in failed_rows}


def test_results_json_is_deterministic(broken) -> None:
    paths, _, first = broken
    run(spec(), paths)
    assert (paths.out / "results.json").read_bytes() == first


def test_fail_on_error_false_only_reports(broken) -> None:
    paths, _, _ = broken
    result = run(spec(fail_on_error=False, data_docs=False, examples=1), paths)
    assert result.ok
    assert result.counts["failed_expectations"] == 6
    assert "reported only" in result.summary
    assert entry(results(paths), "source:rogue", "in_set", "source")["examples"] == ["rogue/0"]
    assert not (paths.reports / "data_docs").exists()  # the previous run's site does not linger
    verdict = (paths.out / VERDICT).read_bytes()
    assert json.loads(verdict)["passed"] is False  # failures reported only: the records go on, on record

    # Another number of examples changes the report, not the verdict: the stages after the gate stay up to date.
    assert run(spec(fail_on_error=False, data_docs=False, examples=2), paths).ok
    assert entry(results(paths), "source:rogue", "in_set", "source")["examples"] == ["rogue/0", "rogue/1"]
    assert (paths.out / VERDICT).read_bytes() == verdict


def test_mostly_tolerates_a_small_failure_fraction(tmp_path: Path) -> None:
    rows = [record("literature", i) for i in range(20)]
    rows[5]["text"] = ""
    paths = project(tmp_path, rows)
    lenient = [{"expect": "length_between", "column": "text", "min": 1, "mostly": 0.9}]
    result = run(spec(expectations=lenient, per_source={}, data_docs=False), paths)
    assert result.ok, result.summary
    e = entry(results(paths), "source:literature", "length_between", "text")
    assert (e["success"], e["unexpected_count"], e["examples"]) == (True, 1, ["literature/5"])

    strict = [{**lenient[0], "mostly": 0.99}]
    result = run(spec(expectations=strict, per_source={}, data_docs=False), paths)
    assert not result.ok and "mostly=0.99" in result.summary


def test_no_records_fails_the_gate(tmp_path: Path) -> None:
    paths = project(tmp_path, [])
    result = run(spec(fail_on_error=False), paths)
    assert not result.ok and not (paths.out / VERDICT).exists()
    assert "no records" in result.summary
    assert results(paths)["success"] is False


def test_unknown_per_source_key_is_noted(tmp_path: Path) -> None:
    paths = project(tmp_path, [record("code", i) for i in range(3)])
    result = run(spec(per_source={"cod": SPEC["per_source"]["code"]}, data_docs=False), paths)
    assert result.ok
    assert "`per_source` names sources with no records: cod" in result.summary
    assert results(paths)["unused_per_source"] == ["cod"]
    # With one source there is no `all` suite: it would repeat source:code exactly.
    assert [s["name"] for s in results(paths)["suites"]] == ["source:code"]


def test_batches_of_any_size_give_the_same_results(broken) -> None:
    """Counts, verdicts and examples are corpus-wide however the records are cut into batches (here batches
    of 1, 4 and 7 rows: repeats and failures fall on both sides of batch and shard boundaries)."""
    paths, _, first = broken
    for rows in (1, 4, 7):
        run(spec(batch_rows=rows, data_docs=False), paths)
        assert (paths.out / "results.json").read_bytes() == first, rows


def test_mostly_is_judged_on_the_whole_corpus_not_per_batch(tmp_path: Path) -> None:
    # 1 failure in 20 rows passes mostly=0.9, though its batch of 5 alone (4/5 = 0.8) would not.
    rows = [record("literature", i) for i in range(20)]
    rows[5]["text"] = ""
    paths = project(tmp_path, rows)
    lenient = [{"expect": "length_between", "column": "text", "min": 1, "mostly": 0.9}]
    result = run(spec(expectations=lenient, per_source={}, data_docs=False, batch_rows=5), paths)
    assert result.ok, result.summary
    e = entry(results(paths), "source:literature", "length_between", "text")
    assert (e["element_count"], e["unexpected_count"], e["unexpected_percent"]) == (20, 1, 5.0)


def test_unique_counts_repeats_across_batches_and_shards(tmp_path: Path) -> None:
    """Planted repeats in different shards and batches; look-alike ids (case, trailing space, a prefix) are
    distinct; null ids are missing, not failures (GX's semantics). Expected values by brute force."""
    import collections

    ids = ["a/1", "a/2", "A/1", "a/1 ", "a/3", None, "a/2", "a/1", "a/", None, "a/4", "a/3", "b/9", "b/9x"]
    rows = [record("literature" if i < 7 else "code", i, id=rid) for i, rid in enumerate(ids)]
    paths = project(tmp_path, rows)
    unique = [{"expect": "unique", "column": "id", "mostly": 0.5}]
    run(spec(expectations=unique, per_source={}, data_docs=False, batch_rows=3, examples=10), paths)
    report = results(paths)
    in_order = [r["id"] for r in sorted(rows, key=lambda r: r["source"])]  # the code shard is read first
    counts = collections.Counter(i for i in in_order if i is not None)
    failing = [i for i in in_order if i is not None and counts[i] > 1]
    e = entry(report, "all", "unique", "id")
    assert e["unexpected_count"] == len(failing) == 6  # a/1 ×2, a/2 ×2, a/3 ×2
    assert e["element_count"] == len(ids)
    assert e["unexpected_percent"] == round(len(failing) / 12 * 100, 4)  # of the 12 non-null ids
    assert e["examples"] == list(dict.fromkeys(failing)) == ["a/1", "a/3", "a/2"]
    assert e["success"]  # 6 of 12 fail: (12 - 6) / 12 = 0.5 ≥ mostly
    lit = entry(report, "source:literature", "unique", "id")
    assert (lit["unexpected_count"], lit["examples"]) == (2, ["a/2"])  # within literature only a/2 repeats


def test_unique_tally_matches_brute_force_on_random_values() -> None:
    import collections
    import random

    import pandas as pd

    from specs.validate import ExpectationSpec
    from tasks.data.validation.tally import UniqueTally

    rng = random.Random(7)
    values = [None if rng.random() < 0.05 else f"id{rng.randrange(3000)}" for _ in range(5000)]
    tally = UniqueTally(ExpectationSpec(expect="unique", column="id"), failing_rows=25)
    for start in range(0, len(values), 333):
        tally.add(pd.Series(values[start:start + 333], dtype=object))
    tally.close()
    counts = collections.Counter(v for v in values if v is not None)
    failing = [i for i, v in enumerate(values) if v is not None and counts[v] > 1]
    assert tally.unexpected == len(failing) > 0
    assert tally.missing == values.count(None)
    assert tally.failing_positions.tolist() == failing[:25]


def test_batch_suite_keeps_no_result_per_batch() -> None:
    """GX stores every run's result in its context; run per batch, that store must be emptied each time or
    memory grows with the corpus. Counts per batch are GX's (checked by hand: 1 null of 3, 2 short of 3)."""
    import pandas as pd

    from specs.validate import ExpectationSpec
    from tasks.data.validation import expectations as ex

    context = ex.new_context()
    specs = [ExpectationSpec(expect="not_null", column="text"),
             ExpectationSpec(expect="length_between", column="text", min=3)]
    suite = ex.BatchSuite(context, "s", specs, examples=2)
    for _ in range(3):
        frame = pd.DataFrame({"id": ["a", "b", "c"], "text": ["abcd", None, "xy"]})
        nulls, short = suite.run(frame)
        assert (nulls["unexpected_count"], nulls["missing_count"], nulls["failing_ids"]) == (1, None, ["b"])
        assert (short["unexpected_count"], short["missing_count"], short["failing_ids"]) == (1, 1, ["c"])
    assert context.validation_results_store.list_keys() == []


def test_big_documents_cut_batches_by_bytes_with_the_same_results(tmp_path: Path, monkeypatch) -> None:
    """`batch_rows` rows of multi-megabyte documents were held at once (20,000 x 5 MB = 100 GB): a batch is now
    also cut at `records.BATCH_BYTES`; the results do not depend on where batches are cut."""
    from tasks.data import records as rec
    from tasks.data.records import RECORD_SCHEMA, write_table

    rows = [record("literature", i, text=("w%d " % i) * (1000 * (i % 5 + 1))) for i in range(12)]
    rows[3]["id"] = rows[9]["id"]  # a repeat across batches
    paths = project(tmp_path, rows[:2])
    for k in range(1, 6):  # six shards of two rows: batches used to gather 20,000 rows across them
        write_table(rows[2 * k: 2 * k + 2], RECORD_SCHEMA, paths.input("ingest") / "shards" / f"more-{k:05d}.parquet")
    run(spec(data_docs=False), paths)
    whole = (paths.out / "results.json").read_bytes()
    held: list[int] = []
    real = rec.iter_record_batches

    def spy(*args, **kw):
        for table in real(*args, max_bytes=20_000, **kw):
            held.append(table.nbytes)
            yield table

    monkeypatch.setattr("tasks.validate.iter_record_batches", spy)
    run(spec(data_docs=False), paths)
    assert (paths.out / "results.json").read_bytes() == whole
    biggest_row = max(len(r["text"].encode()) for r in rows) + 200
    assert len(held) > 2 and max(held) < 20_000 + biggest_row


def test_the_graph_hands_on_the_file_validate_writes(tmp_path: Path) -> None:
    assert graph.stage("validate").handed_on == f"data/validate/{VERDICT}"
    assert require_validated(tmp_path / "data" / "validate", "clean") is None  # no gate run: a library caller
