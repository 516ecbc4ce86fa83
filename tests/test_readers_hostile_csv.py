"""CSV/TSV rows with quotes that never close (tasks/data/formats/delimited.py).

Before, a quote that never closed swallowed the rest of the file into one `bad_row` (to the end of the file) or,
past the cap, left the reader inside the quoted field: every later quote flipped meaning, and the lines of a
legitimately long quoted field came out as rows of their own. Now the failed row is quarantined with where its
quote opened and the lines after its first are read again as rows (from memory, or from the file opened again when
they were read past); a long row whose quotes do close is one `record_too_large`, and reading goes on after it.
"""

from __future__ import annotations

import bz2
import gzip

import pytest

from tests.helpers.readers import bads, docs, read

ROWS = b"".join(b"r%d,row %d\n" % (i, i) for i in range(3, 9))
PACK = {"plain": lambda b: b, "gz": gzip.compress, "bz2": bz2.compress}


def keys(items) -> list[str]:
    return [d.key for d in docs(items)]


@pytest.mark.parametrize("codec", sorted(PACK))
def test_an_unterminated_quote_costs_its_row(tmp_path, codec):
    (tmp_path / "t.csv").write_bytes(PACK[codec](b'id,text\nr1,fine\nr2,"never closed\n' + ROWS))
    items = read(tmp_path, ["t.csv"], fields={"id": "id"})
    assert keys(items) == ["r1"] + [f"r{i}" for i in range(3, 9)]
    assert bads(items) == [("line 3", "bad_row")]
    assert "opened on line 3" in items[1].detail and "runs to line 9" in items[1].detail


def test_a_stray_quote_that_breaks_a_later_line_costs_its_row(tmp_path):
    """The quote of line 2 ran on until csv refused line 4: rows 3 and 4 were lost inside the bad row."""
    (tmp_path / "t.csv").write_bytes(b'id,text\nr1,"oops\nr2,plain\nr3,"ok"\nr4,fine\n')
    items = read(tmp_path, ["t.csv"], fields={"id": "id"})
    assert keys(items) == ["r2", "r3", "r4"] and bads(items) == [("line 2", "bad_row")]
    assert "expected after" in items[0].detail and "the lines after line 2 are read again" in items[0].detail


@pytest.mark.parametrize("codec", ["plain", "gz"])
def test_past_the_cap_an_open_quote_is_followed_to_the_end_and_the_file_read_again(tmp_path, codec):
    """The bad row passes the cap: nothing more of it is held, its quote state is followed to the end of the
    file, and the lines after its first come from the file opened again (a gzip stream cannot go back)."""
    filler = b"".join(b"f%d,%s\n" % (i, b"x" * 60) for i in range(20))  # rows the open quote swallows
    (tmp_path / "t.csv").write_bytes(PACK[codec](b'id,text\nr1,"open ' + b"y" * 300 + b"\n" + filler + ROWS))
    items = read(tmp_path, ["t.csv"], cap=400, fields={"id": "id"})
    assert keys(items) == [f"f{i}" for i in range(20)] + [f"r{i}" for i in range(3, 9)]
    assert bads(items) == [("line 2", "bad_row")]
    assert "never closes before the end of the file (opened on line 2)" in items[0].detail


def test_a_long_quoted_field_is_one_row_over_the_cap_not_rows_of_its_lines(tmp_path):
    """A quoted field of 100 lines (each `a,b`) past the cap: before, the reader resumed inside it and its lines
    became 50 records `a`/`b`; now the row is one `record_too_large` that spans them, and the rows after it
    read as before."""
    long_row = b'r1,"long\n' + b"a,b\n" * 100 + b'end"\n'
    (tmp_path / "t.csv").write_bytes(b"id,text\n" + long_row + ROWS)
    (tmp_path / "last.csv").write_bytes(b"id,text\n" + ROWS + b'r9,"' + b"z" * 500 + b'"')  # no final newline
    items = read(tmp_path, ["t.csv"], cap=200, fields={"id": "id"})
    assert keys(items) == [f"r{i}" for i in range(3, 9)]
    assert bads(items) == [("line 2", "record_too_large")] and "spans lines 2-103" in items[0].detail
    last = read(tmp_path, ["last.csv"], cap=200, fields={"id": "id"})
    assert keys(last) == [f"r{i}" for i in range(3, 9)] and bads(last) == [("line 8", "record_too_large")]


def test_an_over_cap_line_in_a_quoted_field_keeps_the_quote_state(tmp_path):
    """One line of the quoted field is itself over the cap (skipped in chunks by the line reader): the quote scan
    sees those chunks, so the `"` that closes the field inside it is not missed."""
    (tmp_path / "t.csv").write_bytes(b'id,text\nr1,"start\n' + b"w" * 1000 + b'"\n' + ROWS)
    items = read(tmp_path, ["t.csv"], cap=200, fields={"id": "id"})
    assert keys(items) == [f"r{i}" for i in range(3, 9)] and bads(items) == [("line 2", "record_too_large")]


def test_a_damaged_stream_inside_a_quoted_field_is_not_read_again(tmp_path):
    """A gzip cut inside a multi-line quoted field: the quote may well close in the part that is lost, so the
    row is one bad row and the truncation one entry; its lines are not turned into rows."""
    packed = gzip.compress(b"id,text\nr1,ok\nr2,\"" + b"".join(b"line %d, of text\n" % i for i in range(3000)))
    (tmp_path / "t.csv.gz").write_bytes(packed[: len(packed) // 2])
    items = read(tmp_path, ["t.csv.gz"], fields={"id": "id"})
    assert keys(items) == ["r1"] and [r for _, r in bads(items)] == ["bad_row", "truncated"]


def test_bom_at_a_row_start_cr_line_ends_and_utf16(tmp_path):
    """Files joined with `cat` keep the second one's byte-order mark: it is not part of the first field. Old Mac
    Excel ends rows with a bare CR, and Excel's "Unicode text" is UTF-16 with a mark: both were one bad row or
    invalid UTF-8 on every line before."""
    (tmp_path / "bom.csv").write_bytes(b"\xef\xbb\xbfid,text\nr1,one\n\xef\xbb\xbfr2,two\n")
    (tmp_path / "mac.csv").write_bytes(b'id,text\rr1,one\rr2,"two\rlines"\r')
    (tmp_path / "u16.tsv").write_bytes("id\ttext\nr1\thé\nr2\twörld\n".encode("utf-16"))
    assert [(d.key, d.text) for d in read(tmp_path, ["bom.csv"], fields={"id": "id"})] == [("r1", "one"),
                                                                                          ("r2", "two")]
    assert [(d.key, d.text) for d in read(tmp_path, ["mac.csv"], fields={"id": "id"})] == [
        ("r1", "one"), ("r2", "two\nlines")]
    assert [(d.key, d.text) for d in read(tmp_path, ["u16.tsv"], fields={"id": "id"})] == [("r1", "hé"),
                                                                                          ("r2", "wörld")]
