"""NaN and ±Infinity in a record's meta are written as JSON null (they were written as bare `NaN`/`Infinity`, which
strict JSON readers refuse); the record itself is kept, by ingest and by multimodal's readers alike."""

from __future__ import annotations

import json
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq

from specs.ingest import IngestSpec
from specs.multimodal import FilesMMSource
from tasks.core.runner import StagePaths
from tasks.data.multimodal import readers
from tasks.data.multimodal.records import MMRecord
from tasks.data.records import meta_json


def strict(text: str):
    """json.loads as a strict reader (JavaScript's JSON.parse, Go, jq) reads it: a bare NaN/Infinity is an error."""
    def refuse(token: str):
        raise ValueError(f"not JSON: {token}")
    return json.loads(text, parse_constant=refuse)


def test_meta_json_writes_non_finite_numbers_as_null_at_any_depth():
    meta = {"a": float("nan"), "b": [1.5, float("inf"), {"c": float("-inf")}], "d": "NaN", "e": 2}
    text = meta_json(meta)
    assert strict(text) == {"a": None, "b": [1.5, None, {"c": None}], "d": "NaN", "e": 2}
    assert meta_json({"x": 0.1, "y": "z"}) == json.dumps({"x": 0.1, "y": "z"}, sort_keys=True)  # unchanged


def test_ingest_keeps_the_record_and_writes_its_nan_meta_as_null(tmp_path):
    import tasks.ingest as ingest

    (tmp_path / "in").mkdir()
    (tmp_path / "in" / "a.jsonl").write_text(
        '{"id": "1", "text": "A document with a score.", "score": NaN, "range": [-Infinity, Infinity]}\n'
        '{"id": "2", "text": "A document with a fine score.", "score": 0.5}\n', encoding="utf-8")
    pq.write_table(pa.table({"id": ["3", "4"], "text": ["Parquet text one.", "Parquet text two."],
                             "score": pa.array([float("nan"), 0.25], pa.float64())}), tmp_path / "in" / "b.parquet")
    spec = IngestSpec.model_validate({"sources": [{"name": "u", "kind": "files", "paths": ["in"],
                                                   "fields": {"id": "id"}}]})
    result = ingest.run(spec, StagePaths(root=tmp_path, stage="ingest"))
    assert result.counts["kept"] == 4 and result.counts["quarantined"] == 0
    rows = pq.read_table(tmp_path / "data" / "ingest" / "shards" / "u-00000.parquet").to_pylist()
    meta = {r["id"]: strict(r["meta"]) for r in rows}
    assert meta == {"u/1": {"score": None, "range": [None, None]}, "u/2": {"score": 0.5},
                    "u/3": {"score": None}, "u/4": {"score": 0.25}}


def test_multimodal_rows_with_nan_meta_keep_the_record_with_null(tmp_path):
    (tmp_path / "d").mkdir()
    (tmp_path / "d" / "rows.jsonl").write_text(
        '{"image": "x.png", "caption": "A red square.", "aesthetic": NaN, "clip": Infinity, "w": 3}\n',
        encoding="utf-8")
    got = list(readers.read_source(FilesMMSource(name="s", paths=["d"]), tmp_path))
    assert len(got) == 1 and isinstance(got[0], MMRecord)
    assert got[0].meta == {"aesthetic": None, "clip": None, "w": 3}
    strict(json.dumps(got[0].meta, allow_nan=False))   # what the shard's sample json will hold
