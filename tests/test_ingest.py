"""ingest reads user files of every kind; every bad record is quarantined with where and why; nothing is lost."""

from __future__ import annotations

import json
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from specs import Params
from tasks.core.files import sha256_file
from tasks.core.runner import run_stage
from tasks.data.records import read_all_records

NESTED = "[" * 100_000 + "]" * 100_000


def write_fixture(root: Path) -> dict[str, int]:
    """Files with one example of every kind of bad input; returns the expected quarantine count by reason."""
    d = root / "in"
    (d / "media").mkdir(parents=True)
    (d / "media" / "cat.png").write_bytes(b"\x89PNG fake")
    good = "A perfectly ordinary sentence about rivers and mills."
    lines = [
        json.dumps({"id": "ok1", "text": good}),
        json.dumps({"id": "ok2", "text": good + " Two.", "lang_hint": "en", "media": ["media/cat.png"]}).encode(),
        b'{"id": "bad-utf8", "text": "caf\xe9"}',                     # invalid_utf8 (latin-1 byte)
        b'{"id": "broken", "text": ',                                  # invalid_json
        json.dumps(["a", "list"]),                                     # wrong_type (a record must be an object)
        json.dumps({"text": good + " Nobody's."}),                     # missing_id
        json.dumps({"id": "notext", "body": good}),                   # missing_text
        json.dumps({"id": "empty", "text": "   \n\t "}),               # empty_text
        json.dumps({"id": "num", "text": 42}),                         # wrong_type (text)
        json.dumps({"id": {"x": 1}, "text": good}),                   # wrong_type (id)
        '{"id": "surrogate", "text": "bad \\ud800 char"}',              # invalid_utf8 (lone surrogate)
        json.dumps({"id": "huge", "text": "x" * 5000}),                # oversized
        json.dumps({"id": "nomedia", "text": good, "media": ["media/dog.wav"]}),  # missing_media
        json.dumps({"id": "badmedia", "text": good, "media": [3]}),    # bad_media
        NESTED,                                                        # invalid_json (too deep)
        "",                                                            # blank line: not a record
    ]
    data = b"\n".join(x if isinstance(x, bytes) else x.encode() for x in lines) + b"\n"
    (d / "records.jsonl").write_bytes(data)
    (d / "story.txt").write_text("Once upon a time.\r\nThe end.\r\n")
    (d / "page.md").write_text("# Title\n\nSome *markdown* text.\n")
    (d / "empty.txt").write_bytes(b"")                                 # empty_text
    (d / "latin1.txt").write_bytes(b"na\xefve")                        # invalid_utf8
    (d / "blob.bin").write_bytes(bytes(range(256)))                    # unsupported_format (+ media/cat.png)
    pq.write_table(pa.table({"id": ["p1", "p2"], "text": ["Parquet one.", None]}), d / "table.parquet")
    (d / "broken.parquet").write_bytes(b"PAR1 this is not parquet")    # unreadable_file
    return {"invalid_utf8": 3, "invalid_json": 2, "missing_id": 1, "missing_text": 2, "empty_text": 2,
            "wrong_type": 3, "oversized": 1, "missing_media": 1, "bad_media": 1, "unsupported_format": 2,
            "unreadable_file": 1}


def params_for(root: Path) -> Params:
    return Params.model_validate({
        "ingest": {
            "sources": [{"name": "user", "kind": "files", "paths": ["in"], "fields": {"id": "id", "media": "media"}}],
            "max_doc_chars": 1000, "shard_records": 2,
        }
    })


@pytest.fixture
def ingested(tmp_path):
    expected = write_fixture(tmp_path)
    result = run_stage("ingest", params_for(tmp_path), tmp_path)
    return tmp_path, result, expected


def test_every_bad_record_is_quarantined_with_its_reason(ingested):
    root, result, expected = ingested
    stats = result.counts["by_source"]["user"]
    assert stats["by_reason"] == expected
    # ok1, ok2, story.txt, page.md, table.parquet row 1 are kept; table.parquet row 2 (text None) -> missing_text
    assert stats["kept"] == 5
    assert stats["read"] == stats["kept"] + stats["quarantined"] == 5 + sum(expected.values())

    q = pq.read_table(root / "data/ingest/quarantine.parquet").to_pylist()
    by_loc = {(r["origin"], r["location"]): r for r in q}
    assert by_loc[("in/records.jsonl", "line 3")]["reason"] == "invalid_utf8"
    assert by_loc[("in/records.jsonl", "line 4")]["reason"] == "invalid_json"
    assert by_loc[("in/records.jsonl", "line 11")]["reason"] == "invalid_utf8"  # lone surrogate
    # what is wrong, named: a missing field is missing (not "wrong_type ... got NoneType"), a type is a JSON type
    assert (by_loc[("in/table.parquet", "row 2")]["reason"], by_loc[("in/table.parquet", "row 2")]["detail"]) == \
        ("missing_text", "text field 'text' is null")
    assert (by_loc[("in/records.jsonl", "line 6")]["reason"], by_loc[("in/records.jsonl", "line 6")]["detail"]) == \
        ("missing_id", "id field 'id' is missing")
    assert by_loc[("in/records.jsonl", "line 5")]["detail"] == "a record must be a JSON object, got array"
    assert by_loc[("in/records.jsonl", "line 10")]["detail"] == "id field 'id' must be a string or number, got object"
    assert by_loc[("in/latin1.txt", "byte 2")]["reason"] == "invalid_utf8"
    assert by_loc[("in/broken.parquet", "")]["reason"] == "unreadable_file"
    assert "dog.wav" in next(r for r in q if r["reason"] == "missing_media")["detail"]
    assert all(len(r["raw"]) <= 500 for r in q)  # the 100k-deep JSON line is previewed, not copied


def test_kept_records_are_normalized(ingested):
    root, _, _ = ingested
    records = {r["id"]: r for r in read_all_records(root / "data/ingest").to_pylist()}
    assert set(records) == {"user/ok1", "user/ok2", "user/in/story.txt", "user/in/page.md", "user/p1"}
    assert records["user/in/story.txt"]["text"] == "Once upon a time.\nThe end."
    assert records["user/ok2"]["media"] == [{"kind": "image", "path": "in/media/cat.png"}]
    assert json.loads(records["user/ok2"]["meta"]) == {"lang_hint": "en"}
    assert records["user/ok1"]["origin"] == "in/records.jsonl:1"
    shards = sorted(p.name for p in (root / "data/ingest/shards").iterdir())
    assert shards == ["user-00000.parquet", "user-00001.parquet", "user-00002.parquet"]  # 5 records, 2 per shard


def test_manifest_records_lineage(ingested):
    root, result, _ = ingested
    manifest = json.loads((root / "data/ingest/manifest.json").read_text())
    assert manifest["stage"] == "ingest"
    assert manifest["counts"] == result.counts
    outputs = {o["path"]: o for o in manifest["outputs"]}
    assert "data/ingest/quarantine.parquet" in outputs and "data/ingest/manifest.json" not in outputs
    for path, rec in outputs.items():
        assert rec["sha256"] == sha256_file(root / path)
    assert "pyarrow" in manifest["packages"]
    run_record = json.loads((root / "runs/ingest.json").read_text())
    assert run_record["manifest_sha256"] == sha256_file(root / "data/ingest/manifest.json")
    assert run_record["duration_s"] >= 0 and run_record["ok"] is True


def test_rerun_is_byte_identical(ingested):
    root, _, _ = ingested
    first = {p.relative_to(root): p.read_bytes() for p in (root / "data/ingest").rglob("*") if p.is_file()}
    run_stage("ingest", params_for(root), root)
    second = {p.relative_to(root): p.read_bytes() for p in (root / "data/ingest").rglob("*") if p.is_file()}
    assert first == second


def test_glob_matching_nothing_fails_naming_source(tmp_path):
    params = Params.model_validate({"ingest": {"sources": [{"name": "x", "kind": "files", "paths": ["no/*.jsonl"]}]}})
    with pytest.raises(FileNotFoundError, match="ingest source 'x': path 'no/\\*.jsonl' matched no files"):
        run_stage("ingest", params, tmp_path)


def test_max_docs_limits_kept_records(tmp_path):
    write_fixture(tmp_path)
    params = params_for(tmp_path)
    params.ingest.sources[0].max_docs = 2
    result = run_stage("ingest", params, tmp_path)
    assert result.counts["kept"] == 2
    assert result.counts["read"] == result.counts["kept"] + result.counts["quarantined"]
