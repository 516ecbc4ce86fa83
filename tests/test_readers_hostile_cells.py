"""One hostile value must cost its record, never the stage (a hostile-input probe of ingest found each of these
stopping the whole stage, every source lost, the file never named): a WARC page labelled with a codec that is no
charset (`rot13`, `base64`, `punycode`), a Parquet or Arrow string cell of invalid UTF-8 (pyarrow does not validate
on read), a timestamp outside Python's range (Postgres' `infinity`); a column named twice lost one silently; and
invisible characters inside an ASCII token hid PII from clean."""

from __future__ import annotations

import pyarrow as pa
import pyarrow.ipc as ipc
import pyarrow.parquet as pq
import pytest

from tasks.data.cleanup.normalize import normalize_text
from tasks.data.formats import parquet_rows as rows_module
from tasks.data.privacy.pii import scrub_pii
from tests.helpers.readers import bads, docs, read
from tests.test_readers_formats import ARTICLE
from tests.test_readers_hostile_warc import RIVERS, between_good_pages, response


@pytest.mark.parametrize("label", ["rot13", "base64", "hex", "zlib", "punycode", "idna", "unicode_escape"])
def test_a_codec_that_is_no_charset_does_not_stop_the_file(tmp_path, label):
    middle = between_good_pages(tmp_path, response("http://c.example/", ARTICLE, f"text/html; charset={label}"))
    assert [d.meta["url"] for d in middle] == ["http://c.example/"] and RIVERS in middle[0].text


def _strings(values: list[bytes]) -> pa.Array:
    """A string array holding `values` as they are, valid UTF-8 or not (as a writer that does not check makes)."""
    offsets, data = [0], b""
    for v in values:
        data += v
        offsets.append(len(data))
    return pa.Array.from_buffers(pa.string(), len(values), [None, pa.py_buffer(pa.array(offsets, pa.int32())
                                                                              .buffers()[1]), pa.py_buffer(data)])


def _table() -> pa.Table:
    texts = [b"first good text", b"bad \xff\xfe bytes", b"third good text"]
    notes = [b"ok", b"ok", b"also \xc3\x28 bad"]
    infinity = pa.array([0, 2**63 - 1, 1_700_000_000_000_000], pa.timestamp("us"))
    return pa.table({"id": ["a", "b", "c"], "text": _strings(texts), "note": _strings(notes), "until": infinity})


def test_a_parquet_cell_that_does_not_decode_costs_its_row_or_its_column(tmp_path):
    pq.write_table(_table(), tmp_path / "t.parquet", compression="none", use_dictionary=False)
    items = read(tmp_path, ["t.parquet"], fields={"id": "id"})
    kept = {d.key: d for d in docs(items)}
    assert bads(items) == [("row 2", "invalid_utf8")]           # its text: the record is quarantined
    assert sorted(kept) == ["a", "c"] and kept["a"].text == "first good text"
    # a meta column that does not decode is left out of that row's meta; the row is read (infinity too)
    assert "note" not in kept["c"].meta and kept["a"].meta["note"] == "ok"
    assert "until" in kept["c"].meta and "until" in kept["a"].meta


def test_decode_rows_reads_around_the_cells_it_cannot(tmp_path):
    batch = _table().to_batches()[0]
    rows, unread = rows_module.decode_rows(batch)
    assert [sorted(u) for u in unread] == [[], ["text", "until"], ["note"]]
    assert rows[1] == {"id": "b", "note": "ok"} and rows[2]["text"] == "third good text"


def test_an_arrow_stream_cell_that_does_not_decode_costs_its_row(tmp_path):
    with ipc.new_stream(tmp_path / "d.arrow", _table().schema) as writer:
        writer.write_table(_table())
    items = read(tmp_path, ["d.arrow"], fields={"id": "id"})
    assert bads(items) == [("row 2", "invalid_utf8")] and [d.key for d in docs(items)] == ["a", "c"]


def test_a_nan_id_is_a_missing_id(tmp_path):
    # pandas writes a missing value of a float column as NaN: it became the id `t/nan`
    pq.write_table(pa.table({"id": [1.0, float("nan")], "text": ["one", "two"]}), tmp_path / "n.parquet")
    items = read(tmp_path, ["n.parquet"], fields={"id": "id"})
    assert [d.text for d in docs(items)] == ["one"] and bads(items) == [("row 2", "missing_id")]


def test_a_column_named_twice_is_refused_not_halved(tmp_path):
    (tmp_path / "d.csv").write_text("id,text,text\n1,FIRST half,SECOND half\n")
    pq.write_table(pa.Table.from_arrays([pa.array(["FIRST"]), pa.array(["SECOND"])], names=["text", "text"]),
                   tmp_path / "d.parquet")
    items = read(tmp_path, ["d.csv", "d.parquet"])
    assert not docs(items) and sorted(b[1] for b in bads(items)) == ["bad_row", "unreadable_file"]
    # a column read by no field may repeat when meta lists the fields it keeps
    (tmp_path / "ok.csv").write_text("id,text,x,x\n1,kept,a,b\n")
    assert [d.text for d in docs(read(tmp_path, ["ok.csv"], fields={"meta": ["id"]}))] == ["kept"]


def test_a_reader_that_fails_costs_its_file_not_the_stage(tmp_path, monkeypatch):
    import tasks.data.formats as formats

    (tmp_path / "a.txt").write_text("a good file")
    (tmp_path / "b.md").write_text("a file whose reader fails")
    real = formats.read_text_file

    def failing(stream, shown, fmt, cap):
        if fmt == "md":
            raise OverflowError("date value out of range")
        return real(stream, shown, fmt, cap)

    monkeypatch.setattr(formats, "read_text_file", failing)
    items = read(tmp_path, ["a.txt", "b.md"])
    assert [d.text for d in docs(items)] == ["a good file"]
    assert [(i.reason, "OverflowError" in i.detail) for i in items if not hasattr(i, "text")] == \
        [("unreadable_file", True)]


@pytest.mark.parametrize("text, expected", [
    ("my card 4111\u20631111\u20631111\u20631111", "my card <CREDIT_CARD>"),
    ("my ssn 123\ufe0f-45-6789", "my ssn <SSN>"), ("phone 212\ufe00-867\ufe0f-5309", "phone <PHONE>"),
    ("john\u034f.doe\u034f@\u034fexample.com", "<EMAIL>"), ("call 415\u202e555\u202c2671 now", "call <PHONE> now"),
    # kept where they mean something: an emoji's variation, a keycap, a flag's tags, bidi around another script
    ("ok ❤\ufe0f ok", None), ("keycap 1\ufe0f\u20e3 ok", None),
    ("flag 🏴\U000e0067\U000e0062\U000e0073\U000e0063\U000e0074\U000e007f ok", None), ("שלום\u202c abc", None),
])
def test_invisible_characters_inside_ascii_no_longer_hide_pii(text, expected):
    normalized = normalize_text(text)
    if expected is None:
        assert normalized == text
    else:
        assert scrub_pii(normalized)[0] == expected
        assert scrub_pii(text)[0] != expected            # (what clean saw before: the raw text's tokens)
