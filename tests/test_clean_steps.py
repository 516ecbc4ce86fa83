"""Clean's per-shard pass as a step list (tasks/data/cleanup/steps.py): the list follows `clean.filters`, a drop is
final (later steps never see the row), report.json's fields are exactly the steps' own plus the outcomes, and the
dedup inputs hold the signatures only when the global phase reads them, and their best-first run is the order of
(−quality, id)."""

from __future__ import annotations

import json

import numpy as np
import pyarrow as pa
import pytest

from specs.clean import CleanSpec, DedupSpec
from tasks.data.cleanup import clean_outputs, cleaning
from tasks.data.cleanup.normalize import exact_key
from tasks.data.cleanup.steps import ReportFacts, Step, write_dedup_inputs
from tasks.data.dedup import minhash
from tasks.data.filtering.filters import FunctionFilter, Verdict, clean_filters


def test_the_step_list_follows_clean_filters(tmp_path):
    spec = CleanSpec(filters=["toxicity", "quality"], decontamination={"enabled": False})
    names = [step.name for step in cleaning.shard_steps(spec, clean_filters(spec, tmp_path))]
    assert names == ["normalize", "pii", "empty", "toxicity", "quality", "exact_key"]


def test_a_drop_is_final_and_ledgered_by_its_step():
    seen: dict[str, list[str]] = {"first": [], "second": []}

    def make(name: str, drops: str) -> FunctionFilter:
        def fn(doc):
            seen[name].append(doc["id"])
            return Verdict(drops not in doc["text"], None if drops not in doc["text"] else f"{name}_drop", {"x": 0.5})
        return FunctionFilter(name, fn)

    records = [{"id": k, "text": text, "meta": None, "source": "s", "lang": "en"}
               for k, text in (("a", "alpha text"), ("b", "beta text"), ("c", "  \n "), ("d", "delta"))]
    spec = CleanSpec(quality={"enabled": False}, pii={"enabled": False})
    rows = cleaning.clean_records(records, spec, None, [make("first", "alpha"), make("second", "beta")])
    assert seen == {"first": ["a", "b", "d"], "second": ["b", "d"]}    # the blank text reached no filter
    assert [r["reason"] for r in rows] == ["first_drop", "second_drop", "empty", None]
    assert json.loads(rows[0]["detail"]) == {"filter": "first", "signals": {"x": 0.5}}
    assert [r["quality"] for r in rows] == [1.0] * 4                   # quality off: every row ranks equal


def test_report_fields_are_the_steps_own(tmp_path, monkeypatch):
    facts = ReportFacts(CleanSpec(), tmp_path, [], {"summary": {"exact_dropped": 0}, "detail": {}},
                        {"enabled": False})
    fields = {k for kind in cleaning.STEP_KINDS for k in kind.report(facts)}
    assert fields == set(clean_outputs.LAYOUT) - {"in", "kept", "dropped", "dropped_by_reason", "by_source"}

    class Extra(Step):  # a step whose field report.json does not lay out is refused, not silently dropped
        @classmethod
        def report(cls, facts):
            return {"extra": 1}

    tallies = [{"counts": {"s": {"in": 1, "kept": 1}}, "kept": {"s": 1}, "steps": {}}]
    assert clean_outputs.write_report(tallies, facts)["kept"] == 1
    monkeypatch.setattr(clean_outputs, "STEP_KINDS", (*cleaning.STEP_KINDS, Extra))
    with pytest.raises(AssertionError, match="report fields"):
        clean_outputs.write_report(tallies, facts)


@pytest.mark.parametrize("verify", [True, False])
def test_signatures_are_kept_only_when_the_estimate_judges(tmp_path, verify):
    spec = DedupSpec(verify=verify)
    texts = ["the tide came in over the harbour wall at noon", "a ferry left the island before the storm broke"]
    columns = {"text": texts, "reason": [None, None], "quality": [1.0, 0.5], "exact_key": list(map(exact_key, texts))}
    write_dedup_inputs(tmp_path / "s", ["a", "b"], columns, spec, 1, 2)
    assert (tmp_path / "s.shingles.npy").exists() and (tmp_path / "s.sig.npy").exists() is not verify
    if not verify:
        assert np.array_equal(np.load(tmp_path / "s.sig.npy"), minhash.signatures(texts, spec, 1))


@pytest.mark.parametrize("nan", [False, True])
def test_the_best_first_run_is_the_order_of_minus_quality_then_id(tmp_path, nan):
    quality = [0.5, None, 0.5, 0.0, -0.0, 0.9, 0.5, None, 0.9] + ([float("nan")] if nan else [])
    ids = ["d", "b", "a", "z", "y", "c", "a", "a", "e", "n"][:len(quality)]      # a repeated id, too
    reasons = [None] * len(ids)
    reasons[5] = "low_quality"                                                   # dropped: not in the run
    texts = [f"text number {k} of the run" for k in range(len(ids))]
    columns = {"text": texts, "reason": reasons, "quality": quality, "exact_key": list(map(exact_key, texts))}
    write_dedup_inputs(tmp_path / "s", ids, columns, DedupSpec(), 1, 1)
    run = pa.ipc.open_file(pa.memory_map(str(tmp_path / "s.order.arrow"))).read_all().column("row").to_pylist()
    neg = [-q if q is not None else float("inf") for q in quality]
    assert run == sorted((k for k in range(len(ids)) if reasons[k] is None), key=lambda k: (neg[k], ids[k]))
    if not nan:
        assert run == [8, 2, 6, 0, 4, 3, 7, 1]      # 0.0 and −0.0 tie, and so do two None: by id


@pytest.mark.parametrize("verify", [True, False])
def test_rows_a_filter_dropped_are_not_shingled_and_the_kept_rows_inputs_are_unchanged(tmp_path, verify):
    spec = DedupSpec(verify=verify)
    texts = [f"document {k} tells of the {'harbour' if k % 3 else 'island'} and its {k * 7} boats at dawn"
             for k in range(12)]
    reasons = [None if k % 4 else "low_quality" for k in range(12)]
    ids = [f"d{k:02d}" for k in range(12)]
    columns = {"text": texts, "reason": reasons, "quality": [k / 10 for k in range(12)],
               "exact_key": list(map(exact_key, texts))}
    write_dedup_inputs(tmp_path / "s", ids, columns, spec, 1, 2, signatures=True)
    write_dedup_inputs(tmp_path / "all", ids, {**columns, "reason": [None] * 12}, spec, 1, 2, signatures=True)
    live = np.array([k for k in range(12) if reasons[k] is None])
    shingles, offsets = (np.load(tmp_path / f"s.shingles{x}.npy") for x in ("", ".off"))
    full, full_offsets = (np.load(tmp_path / f"all.shingles{x}.npy") for x in ("", ".off"))
    assert np.diff(offsets)[[k for k in range(12) if reasons[k]]].tolist() == [0, 0, 0]     # dropped: nothing
    assert np.diff(full_offsets).min() > 0
    for k in live.tolist():
        assert np.array_equal(shingles[offsets[k]:offsets[k + 1]], full[full_offsets[k]:full_offsets[k + 1]])
    sigs, full_sigs = np.load(tmp_path / "s.sig.npy"), np.load(tmp_path / "all.sig.npy")
    dropped = [k for k in range(12) if reasons[k]]
    assert np.array_equal(sigs[live], full_sigs[live]) and not sigs[dropped].any()
    # the band keys of the kept rows are those every row would have had
    bands = np.load(tmp_path / "s.bands.npy")
    all_bands = np.load(tmp_path / "all.bands.npy")
    assert sorted(bands.tolist()) == sorted(e for e in all_bands.tolist() if e[1] in set(live.tolist()))
