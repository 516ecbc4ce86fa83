"""Hostile input never crashes ingest, and every record read is kept or quarantined with a reason.

Drives `tasks.ingest.run` in-process on temp folders: hypothesis-generated folders of jsonl/txt/md/parquet/
binary files (random bytes, invalid UTF-8, lone surrogates, NUL bytes, deep nesting, wrong types, duplicate
ids, empty files), then one explicit case per hostile kind with the exact quarantine reasons expected.
"""

from __future__ import annotations

import io
import json
import os
import tempfile
from collections import Counter
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from specs.ingest import IngestSpec
from tasks import ingest
from tasks.core.runner import StagePaths
from tasks.data.records import QUARANTINE_REASONS, RAW_PREVIEW, read_all_records

MAX_CHARS = 1000  # ingest.max_doc_chars in these tests: small, so "oversized" is cheap to reach
BOM = b"\xef\xbb\xbf"
FUZZ = settings(max_examples=50, deadline=None, derandomize=True, database=None,
                suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])


# ---------------------------------------------------------------------------------------------- harness
def run_ingest(root: Path, files: dict[str | bytes, bytes], fields: dict | None = None,
               second_source: bool = False) -> dict[str, Any]:
    """Write `files` under root/in, ingest them, return counts, quarantine rows and kept records."""
    folder = root / "in"
    folder.mkdir(parents=True, exist_ok=True)
    for name, data in files.items():
        path = folder / (os.fsdecode(name) if isinstance(name, bytes) else name)
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(data)
    sources = [{"name": "a", "kind": "files", "paths": ["in"], "fields": fields or {}}]
    if second_source:  # default field mapping: every unmapped field goes to meta, ids come from file:line
        sources.append({"name": "b", "kind": "files", "paths": ["in/**/*"]})
    spec = IngestSpec.model_validate({"sources": sources, "max_doc_chars": MAX_CHARS, "shard_records": 3})
    result = ingest.run(spec, StagePaths(root=root, stage="ingest"))
    out = root / "data" / "ingest"
    return {"counts": result.counts, "quarantine": pq.read_table(out / "quarantine.parquet").to_pylist(),
            "records": read_all_records(out).to_pylist(),
            "stats_file": json.loads((out / "stats.json").read_text())}


def assert_accounted(out: dict[str, Any], expected_read: dict[str, int] | None = None) -> None:
    """The conservation law, checked from the written files rather than from ingest's own arithmetic."""
    counts = out["counts"]
    assert out["stats_file"] == counts
    q_by_source = Counter(r["source"] for r in out["quarantine"])
    kept_by_source = Counter(r["source"] for r in out["records"])
    for name, s in counts["by_source"].items():
        assert s["read"] == s["kept"] + s["quarantined"], (name, s)
        assert kept_by_source[name] == s["kept"], name
        assert q_by_source[name] == s["quarantined"], name
        reasons = Counter(r["reason"] for r in out["quarantine"] if r["source"] == name)
        assert dict(reasons) == s["by_reason"], name
        if expected_read is not None:
            assert s["read"] == expected_read[name], (name, s)
    for row in out["quarantine"]:
        assert row["reason"] in QUARANTINE_REASONS
        assert row["detail"] and row["origin"], row
        assert len(row["raw"]) <= RAW_PREVIEW
    ids = [r["id"] for r in out["records"]]
    assert len(ids) == len(set(ids)), "ids must be unique"
    for rec in out["records"]:
        assert rec["id"].startswith(rec["source"] + "/")
        assert rec["text"] and rec["text"] == rec["text"].strip() and len(rec["text"]) <= MAX_CHARS
        assert isinstance(json.loads(rec["meta"]), dict)


def candidates(name: str, data: bytes) -> int:
    """How many records a file offers: the unit every one of which must end up kept or quarantined."""
    suffix = Path(name).suffix.lower()
    if suffix == ".jsonl":
        return sum(1 for line in data.removeprefix(BOM).split(b"\n") if line.strip())  # non-blank lines
    if suffix == ".parquet":
        try:
            return pq.ParquetFile(io.BytesIO(data)).metadata.num_rows
        except Exception:
            return 1  # the whole file is one unreadable_file entry
    return 1  # txt/md: one document; anything else: one unsupported_format entry


def parquet_bytes(table: pa.Table, **kw) -> bytes:
    sink = io.BytesIO()
    pq.write_table(table, sink, **kw)
    return sink.getvalue()


# ---------------------------------------------------------------------------------------------- strategies
SURROGATES = ["\ud800", "\udfff", "\udcff", "\ud83d"]
SCALARS = st.one_of(st.none(), st.booleans(), st.integers(), st.floats(), st.text(max_size=12))
JSON_VALUES = st.recursive(SCALARS, lambda inner: st.lists(inner, max_size=3)
                           | st.dictionaries(st.text(max_size=6), inner, max_size=3), max_leaves=8)
TEXTS = st.one_of(
    st.text(max_size=60),
    st.sampled_from(["", "   \n\t", "\r\n", "a\x00b", "\ufeffBOM", "x" * (MAX_CHARS + 1)]),
    st.lists(st.sampled_from(SURROGATES + ["ok ", "é", "\x00"]), min_size=1, max_size=6).map("".join),
)
IDS = st.sampled_from(["a", "b", "a", 1, 1.0, True, None, "", [1], {"x": 1}, "\ud800"])  # repeats on purpose


@st.composite
def jsonl_lines(draw) -> bytes:
    kind = draw(st.sampled_from(["record", "record", "object", "value", "bytes", "nested", "bigint", "nul"]))
    if kind == "record":
        obj = {"id": draw(IDS), "text": draw(st.one_of(TEXTS, JSON_VALUES))}
        if draw(st.booleans()):
            obj["media"] = draw(st.one_of(JSON_VALUES, st.sampled_from(["m/cat.png", ["m/none.wav"], "\ud800"])))
        obj.update(draw(st.dictionaries(st.sampled_from(["k", "\ud800", "n"]), JSON_VALUES, max_size=2)))
        line = json.dumps(obj)  # ensure_ascii: lone surrogates become "\ud800" escapes, as in real files
    elif kind == "object":
        line = json.dumps(draw(st.dictionaries(st.sampled_from(["text", "id", "media", "z"]), JSON_VALUES)))
    elif kind == "value":
        line = json.dumps(draw(JSON_VALUES))
    elif kind == "bytes":
        return draw(st.binary(max_size=80)).replace(b"\n", b" ")
    elif kind == "nested":  # around and far beyond the interpreter's recursion limit
        depth = draw(st.sampled_from([50, 900, 990, 1500, 20_000]))
        line = '{"text": "t", "deep": ' + "[" * depth + "]" * depth + "}"
    elif kind == "bigint":  # beyond Python's 4300-digit int/str conversion limit
        line = '{"text": "t", "n": ' + "9" * draw(st.integers(4200, 4400)) + "}"
    else:  # a NUL inside a JSON string, raw (accepted: strict=False) or escaped; ingest strips it
        line = draw(st.sampled_from(['{"text": "a\x00b"}', '{"text": "a\\u0000b"}', '{"te\\u0000xt": "a"}']))
    return line.encode("utf-8", "surrogatepass")


PARQUET_TEXTS = {pa.string(): ["p text", None, "  ", "x" * (MAX_CHARS + 1), "ok"], pa.int64(): [1, None, 3, 4, 5],
                 pa.binary(): [b"\xff", None, b"b", b"", b"c"], pa.list_(pa.string()): [["a"], None, [], ["b"], ["c"]]}


@st.composite
def hostile_folders(draw) -> dict[str, bytes]:
    files: dict[str, bytes] = {"m/cat.png": b"\x89PNG\r\n\x1a\n"}
    for i in range(draw(st.integers(1, 5))):
        suffix = draw(st.sampled_from([".jsonl", ".jsonl", ".txt", ".md", ".parquet", ".bin", ".png", ""]))
        if suffix == ".jsonl":
            rows = draw(st.lists(jsonl_lines(), max_size=8))
            sep = draw(st.sampled_from([b"\n", b"\r\n", b"\n\n"]))
            data = (BOM if draw(st.booleans()) else b"") + sep.join(rows) + draw(st.sampled_from([b"", b"\n"]))
        elif suffix in (".txt", ".md"):
            data = draw(st.one_of(st.binary(max_size=200), TEXTS.map(lambda t: t.encode("utf-8", "surrogatepass"))))
        elif suffix == ".parquet" and draw(st.booleans()):
            column = draw(st.sampled_from(list(PARQUET_TEXTS)))  # text columns of the right and wrong types
            n = draw(st.integers(0, 5))
            data = parquet_bytes(pa.table({"text": pa.array(PARQUET_TEXTS[column][:n], column),
                                           "id": pa.array(["r1", "r2", "r1", None, "r5"][:n])}))
        else:  # random bytes: garbage parquet, binary blobs, zero-length files
            data = draw(st.binary(max_size=300))
        files[f"f{i}{suffix}"] = data
    return files


@FUZZ
@given(files=hostile_folders())
def test_fuzzed_folders_are_fully_accounted(files):
    with tempfile.TemporaryDirectory() as tmp:
        out = run_ingest(Path(tmp), files, fields={"id": "id", "media": "media"}, second_source=True)
    expected = sum(candidates(name, data) for name, data in files.items())
    assert_accounted(out, {"a": expected, "b": expected})


# ---------------------------------------------------------------------------------------------- explicit cases
def lines(*items: str | bytes) -> bytes:
    return b"\n".join(x if isinstance(x, bytes) else x.encode() for x in items) + b"\n"


GOOD = "A plain sentence about rivers."
HOSTILE: dict[str, tuple[dict[str | bytes, bytes], dict[str, int], int]] = {
    # kind: (files, expected quarantine count by reason, expected kept)
    # r.jsonl: split at each b"\n" into 5 lines; the first (bytes 0-9) is UTF-8 but not JSON, the others hold
    # bytes >= 0x80 that are not UTF-8. r.md: NUL bytes are valid UTF-8, but kept text holds no control
    # characters, and nothing else is left: empty_text.
    "random_bytes": ({"r.jsonl": bytes(range(256)) * 4, "r.txt": bytes(range(128, 256)), "r.md": b"\x00" * 9},
                     {"invalid_utf8": 5, "invalid_json": 1, "empty_text": 1}, 0),
    "invalid_utf8": ({"u.jsonl": lines(b'{"text": "caf\xe9"}', b'{"text": "\xc0\xaf"}', b'{"text": "\xed\xa0\x80"}'),
                      "u.txt": b"na\xefve",
                      # UTF-16 with its byte-order mark is decoded, not invalid UTF-8 (it used to be)
                      "u.md": b"\xff\xfe" + "utf-16".encode("utf-16-le")},
                     {"invalid_utf8": 4}, 1),
    "surrogates": ({"s.jsonl": lines(r'{"text": "bad \ud800"}', r'{"text": "ok", "id": "\udfff"}',
                                     r'{"text": "ok", "meta": {"\ud800": 1}}', r'{"text": "ok", "media": "\ud83d.png"}',
                                     r'{"body": "\ud800"}', json.dumps({"text": GOOD}))},
                   {"invalid_utf8": 3, "bad_media": 1, "missing_text": 1}, 1),
    "nul_bytes": ({"n.jsonl": lines('{"text": "a\x00b"}', '{"text": "a\\u0000b"}', '{"text": "\\u0000"}',
                                    '{"text": "ok", "media": "x\\u0000.png"}'),
                   "n.txt": b"nul\x00inside", "n.bin": b"\x00" * 64},
                  {"empty_text": 1, "unsupported_format": 1, "missing_media": 1}, 3),  # raw or escaped NUL: stripped
    "deep_json": ({"d.jsonl": lines("[" * 100_000 + "]" * 100_000, '{"text": ' + "[" * 500 + "]" * 500 + "}",
                                    '{"text": "t", "m": ' + '{"a": ' * 400 + "1" + "}" * 400 + "}",
                                    '{"list": ' + "[" * 300 + "]" * 300 + ', "text": "t"}')},
                  {"invalid_json": 1, "wrong_type": 1}, 2),  # deep but parseable fields are kept in meta
    "wrong_types": ({"w.jsonl": lines(*(o if isinstance(o, str) else json.dumps(o) for o in [
        {"id": 1, "text": 42}, {"id": 2, "text": 1.5}, {"id": 3, "text": True}, {"id": 4, "text": None},
        {"id": 5, "text": ["a"]}, {"id": 6, "text": {"a": 1}},
        {"text": GOOD, "id": None}, {"text": GOOD, "id": ""}, {"text": GOOD, "id": [1]}, {"text": GOOD, "id": {}},
        {"id": 8, "text": GOOD, "media": 3}, {"id": 9, "text": GOOD, "media": [{"kind": 1, "path": "x.png"}]},
        {"id": 10, "text": GOOD, "media": ""}, '"just a string"', "17", [GOOD], {"text": GOOD, "id": 7},
        '{"text": "x", "n": ' + "9" * 5000 + "}"])),  # an int over Python's 4300-digit limit
        "w.parquet": parquet_bytes(pa.table({"text": pa.array([b"\xff", b"ok"]), "id": ["p1", "p2"]}))},
        # a null text is missing_text, a null or blank id missing_id; a top-level non-object is wrong_type too
        {"wrong_type": 12, "bad_media": 3, "missing_id": 2, "missing_text": 1, "invalid_json": 1}, 1),
    "duplicate_ids": ({"a.jsonl": lines(*(json.dumps({"id": i, "text": f"{GOOD} {n}"}) for n, i in
                                          enumerate(["x", "y", "x", 1, "1", 1.0]))),
                       "b.jsonl": lines(json.dumps({"id": "y", "text": GOOD}))},
                      {"duplicate_id": 3}, 4),  # "x" again, "1" == str(1), "y" in the second file; "1.0" is new
    "zero_length": ({"e.jsonl": b"", "e.txt": b"", "e.md": b"", "e.parquet": b"", "e.bin": b"", "e": b"",
                     "ws.txt": b" \r\n\t"},
                    {"empty_text": 3, "unreadable_file": 1, "unsupported_format": 2}, 0),
    "non_text_in_glob": ({"img.png": b"\x89PNG\r\n\x1a\n" + bytes(100), "arc.gz": b"\x1f\x8b\x08" + bytes(50),
                          "elf": b"\x7fELF\x02\x01", "fake.txt": b"\x89PNG\r\n\x1a\n\xff",
                          "fake.parquet": b"PAR1xxxxPAR1",
                          "sub/deeper/x.jsonl": lines(json.dumps({"text": GOOD}))},
                         {"unsupported_format": 3, "invalid_utf8": 1, "unreadable_file": 1}, 1),
    "enormous": ({"big.jsonl": lines(json.dumps({"text": "y" * 4_000_000}), "z" * 4_000_000),
                  "big.txt": b"w" * 4_000_000},
                 {"oversized": 2, "invalid_json": 1}, 0),
    # nothing visible: zero-width characters, bidi controls, tag characters, variation selectors, Hangul fillers
    # and a BOM were kept as documents (before); text with one visible letter among them is kept as it is
    "invisible_only": ({"i.jsonl": lines(*(json.dumps({"text": t}) for t in [
        "\u200b\u200c\u200d\u2060", "\u202e\u202d\u202c \u2066\u2069", "\U000e0001\U000e0041", "\ufe0f\u034f",
        "\u115f\u3164\uffa0", " \ufeff ", "\u200bx\u200b", "\u202eevil\u202c"]))},
                       {"empty_text": 6}, 2),
    # two values for a mapped field: json keeps the last, the first document vanished (before); another field
    # twice, or "text" twice inside a nested object, is no question of which document the record is
    "duplicate_keys": ({"k.jsonl": lines('{"id": 0, "text": "first", "text": "second"}', '{"id": 1, "text": "a", "id": 2}',
                                         '{"id": 3, "text": "ok", "n": 1, "n": 2}',
                                         '{"id": 4, "text": "ok2", "m": {"text": 1, "text": 2}}',
                                         '{"id": 5, "text": "says \\"text\\" twice: \\"text\\""}')},
                       {"invalid_json": 2}, 3),
    "byte_order_mark": ({"bom.jsonl": BOM + lines(json.dumps({"text": GOOD})), "bom.txt": BOM + b"Hello.",
                         "bom_bad.txt": BOM + b"caf\xe9"},
                        {"invalid_utf8": 1}, 2),
}


@pytest.mark.parametrize("kind", sorted(HOSTILE))
def test_each_hostile_kind_is_quarantined_with_its_reason(tmp_path, kind):
    files, by_reason, kept = HOSTILE[kind]
    # Only these kinds carry ids; elsewhere a mapped id field would make every record a wrong_type.
    fields = {"id": "id", "media": "media"} if kind in ("wrong_types", "duplicate_ids", "duplicate_keys") else {"media": "media"}
    out = run_ingest(tmp_path, files, fields=fields)
    stats = out["counts"]["by_source"]["a"]
    assert stats["by_reason"] == {r: n for r, n in by_reason.items() if n}
    assert stats["kept"] == kept
    assert_accounted(out, {"a": sum(candidates(os.fsdecode(n), d) for n, d in files.items())})


def test_enormous_inputs_are_previewed_not_copied(tmp_path):
    out = run_ingest(tmp_path, HOSTILE["enormous"][0])
    assert {r["location"] for r in out["quarantine"]} == {"line 1", "line 2", ""}
    assert all(0 < len(r["raw"]) <= RAW_PREVIEW for r in out["quarantine"])
    assert "4000000 characters > ingest.max_doc_chars" in out["quarantine"][0]["detail"]


def test_kept_hostile_text_is_preserved_exactly(tmp_path):
    out = run_ingest(tmp_path, {**HOSTILE["nul_bytes"][0], **HOSTILE["byte_order_mark"][0]})
    texts = {r["origin"]: r["text"] for r in out["records"]}
    # Kept text holds no control characters: a NUL goes, raw or escaped, in jsonl and in txt alike.
    assert texts["in/n.jsonl:1"] == texts["in/n.jsonl:2"] == "ab"
    assert texts["in/n.txt"] == "nulinside"
    assert texts["in/bom.jsonl:1"] == GOOD and texts["in/bom.txt"] == "Hello."  # BOM dropped, text intact
    bad = next(r for r in out["quarantine"] if r["origin"] == "in/bom_bad.txt")
    assert bad["location"] == "byte 6"  # offsets count the BOM: they point into the file on disk


def test_duplicate_ids_keep_the_first_and_name_it(tmp_path):
    files = HOSTILE["duplicate_ids"][0]
    out = run_ingest(tmp_path, files, fields={"id": "id"}, second_source=True)
    assert sorted(r["id"] for r in out["records"] if r["source"] == "a") == ["a/1", "a/1.0", "a/x", "a/y"]
    dupes = {(r["origin"], r["location"]): r["detail"] for r in out["quarantine"] if r["source"] == "a"}
    assert dupes == {("in/a.jsonl", "line 3"): "id 'a/x' was already given to the record from in/a.jsonl:1",
                     ("in/a.jsonl", "line 5"): "id 'a/1' was already given to the record from in/a.jsonl:4",
                     ("in/b.jsonl", "line 1"): "id 'a/y' was already given to the record from in/a.jsonl:2"}
    # Source b derives ids from file:line, so it keeps all 7; equal ids in different sources do not collide.
    assert out["counts"]["by_source"]["b"]["kept"] == 7


def test_undecodable_file_name_and_dangling_symlink(tmp_path):
    (tmp_path / "in").mkdir()
    os.symlink(tmp_path / "nowhere.jsonl", tmp_path / "in" / "gone.jsonl")
    os.symlink("loop.txt", tmp_path / "in" / "loop.txt")  # a link to itself
    out = run_ingest(tmp_path, {b"caf\xe9.txt": b"Latin-1 name.", b"\xff.jsonl": lines(json.dumps({"text": GOOD}))})
    assert sorted(r["id"] for r in out["records"]) == ["a/in/\\xff.jsonl:1", "a/in/caf\\xe9.txt"]
    unreadable = {r["origin"] for r in out["quarantine"] if r["reason"] == "unreadable_file"}
    assert unreadable == {"in/gone.jsonl", "in/loop.txt"}
    assert_accounted(out, {"a": 4})


def test_damaged_row_group_loses_only_itself(tmp_path):
    table = pa.table({"text": [f"row {i} " + "words " * 30 for i in range(30)]})
    data = bytearray(parquet_bytes(table, row_group_size=10, compression="zstd"))
    chunk = pq.ParquetFile(io.BytesIO(bytes(data))).metadata.row_group(1).column(0)
    start = chunk.data_page_offset + 8  # past the page header's first bytes: garble the compressed payload
    data[start: start + 64] = bytes(64)
    out = run_ingest(tmp_path, {"t.parquet": bytes(data)})
    kept = sorted(int(r["origin"].rsplit(":", 1)[1]) for r in out["records"])
    assert kept == list(range(1, 11)) + list(range(21, 31))  # row groups 0 and 2 survive, row numbers intact
    (bad,) = out["quarantine"]
    assert (bad["reason"], bad["location"]) == ("unreadable_file", "row 11")
    assert bad["detail"].startswith("rows 11-20 (row group 1) could not be read")


def test_hostile_ingest_is_byte_identical_on_rerun(tmp_path):
    files = {k: v for kind in ("surrogates", "wrong_types", "duplicate_ids", "zero_length") for k, v in
             HOSTILE[kind][0].items()}
    outputs = []
    for name in ("one", "two"):
        run_ingest(tmp_path / name, files, fields={"media": "media"}, second_source=True)
        out = tmp_path / name / "data" / "ingest"
        outputs.append({p.relative_to(out): p.read_bytes() for p in sorted(out.rglob("*")) if p.is_file()})
    assert outputs[0] == outputs[1] and len(outputs[0]) > 3


def test_media_outside_the_source_folder_is_refused(tmp_path):
    # A record's media path is a file the multimodal data will read: "../" or an absolute path (or a link) out of
    # the source's folder would carry the project's or the system's files in, as a symbolic link would.
    png = b"\x89PNG\r\n\x1a\n"
    (tmp_path / "secret.png").write_bytes(png)
    (tmp_path / "in" / "img").mkdir(parents=True)
    os.symlink(tmp_path / "secret.png", tmp_path / "in" / "img" / "link.png")
    rows = [{"text": "inside", "media": "img/ok.png"}, {"text": "up", "media": "../secret.png"},
            {"text": "abs", "media": str(tmp_path / "secret.png")}, {"text": "link", "media": "img/link.png"},
            {"text": "mixed", "media": ["img/ok.png", "../secret.png"]}]
    out = run_ingest(tmp_path, {"img/ok.png": png, "m.jsonl": lines(*map(json.dumps, rows))},
                     fields={"media": "media"})
    assert [r["text"] for r in out["records"]] == ["inside"]
    bad = {r["location"]: r for r in out["quarantine"] if r["reason"] == "bad_media"}
    assert sorted(bad) == ["line 2", "line 3", "line 4", "line 5"]
    assert "outside the source's folder (in): secret.png" in bad["line 2"]["detail"]
    assert_accounted(out, {"a": 5 + 2})  # the two image files are unsupported_format entries of the folder
    # `symlinks: follow` trusts the corpus: everything that exists is kept
    spec = IngestSpec.model_validate({"sources": [{"name": "a", "kind": "files", "paths": ["in"],
                                                   "fields": {"media": "media"}, "symlinks": "follow"}]})
    result = ingest.run(spec, StagePaths(root=tmp_path, stage="ingest"))
    assert result.counts["by_source"]["a"]["kept"] == 5
