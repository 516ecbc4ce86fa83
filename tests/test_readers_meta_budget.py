"""A record's `meta` is bounded (`fields.meta_max_bytes`, tasks/data/formats/objects.py `bounded_meta`).

With `fields.meta: null` every unmapped field is copied into meta: a dataset with a raw-HTML or an embedding column
stored it all again beside the text (the corpus doubled). Now, past the budget, the largest fields are left out, the
record's meta names them with their sizes under `_dropped`, and the record is kept.
"""

from __future__ import annotations

import json
from pathlib import Path

from specs import Params
from tasks.core.runner import run_stage
from tasks.data.records import read_all_records

HTML = "<div><p>" * 4000                      # 32,000 bytes of markup
EMBEDDING = [0.1234567890123] * 2000          # 2,000 floats: about 32 KB of JSON


def rows(n: int) -> list[dict]:
    return [{"id": f"r{i}", "text": f"document {i}", "url": f"https://x.example/{i}", "score": i / 10,
             "html": HTML, "embedding": EMBEDDING} for i in range(n)]


def ingest(root: Path, **fields) -> list[dict]:
    params = Params.model_validate({"ingest": {"sources": [{"name": "u", "kind": "files", "paths": ["in"],
                                                            "fields": {"id": "id", **fields}}]}})
    counts = run_stage("ingest", params, root).counts
    assert counts["by_source"]["u"]["quarantined"] == 0
    records = read_all_records(root / "data/ingest").to_pylist()
    trimmed = sum("_dropped" in json.loads(r["meta"]) for r in records)
    assert counts["by_source"]["u"]["meta_trimmed"] == trimmed  # stats.json counts the records that lost fields
    return records


def test_bulky_fields_leave_meta_and_are_named_there(tmp_path):
    (tmp_path / "in").mkdir()
    (tmp_path / "in" / "a.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows(3)))
    records = ingest(tmp_path)
    html_size = len(json.dumps({"html": HTML})) - 2
    emb_size = len(json.dumps({"embedding": EMBEDDING})) - 2
    assert [json.loads(r["meta"]) for r in records] == [
        {"url": f"https://x.example/{i}", "score": i / 10, "_dropped": {"embedding": emb_size, "html": html_size}}
        for i in range(3)]
    assert [r["text"] for r in records] == [f"document {i}" for i in range(3)]
    assert all(len(r["meta"]) < 200 for r in records)  # was 65 KB per record
    stats = json.loads((tmp_path / "data/ingest/stats.json").read_text())
    assert stats["by_source"]["u"]["meta_trimmed"] == 3


def test_largest_first_until_the_rest_fits_and_the_budget_is_a_knob(tmp_path):
    (tmp_path / "in").mkdir()
    (tmp_path / "in" / "a.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows(1)))
    one = ingest(tmp_path, meta_max_bytes=40_000)  # room for one of the two bulky fields: the smaller stays
    assert set(json.loads(one[0]["meta"])) == {"url", "score", "html", "_dropped"}
    assert list(json.loads(one[0]["meta"])["_dropped"]) == ["embedding"]
    every = ingest(tmp_path, meta_max_bytes=1 << 20)
    assert json.loads(every[0]["meta"])["embedding"] == EMBEDDING and "_dropped" not in every[0]["meta"]
    named = ingest(tmp_path, meta=["url", "html"])  # an explicit list is bounded the same way
    html_size = len(json.dumps({"html": HTML})) - 2
    assert json.loads(named[0]["meta"]) == {"url": "https://x.example/0", "_dropped": {"html": html_size}}


def test_a_field_nested_too_deep_to_write_is_left_out():
    """json.loads takes nesting that the writer, deeper in the stack, may refuse (RecursionError out of the whole
    stage): such a field is dropped, its size null, whatever the budget."""
    from tasks.data.formats.objects import bounded_meta

    deep: list = []
    for _ in range(5000):
        deep = [deep]
    assert bounded_meta({"n": 1, "deep": deep}, 1 << 30) == {"n": 1, "_dropped": {"deep": None}}
    assert bounded_meta({"n": 1, "s": "x" * 10}, 1 << 30) == {"n": 1, "s": "x" * 10}
