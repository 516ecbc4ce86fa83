"""WARC records whose Content-Length lies (tasks/data/formats/warc.py frames records itself now).

Before, fastwarc trusted every Content-Length: a record claiming 10^15 bytes was `record_too_large` and every
record after it vanished without an entry; one a little too long or too short, or negative, or not a number, made
the rest of the file one `unreadable_file`. Now such a record is `bad_length` with the declared and the available
length, and reading resumes at the next header: found in the held body, in the tail of a body skipped over the cap,
or by opening the file again. A body that quotes a WARC header is still one record, and Common Crawl's one gzip
member per record is read to the end.
"""

from __future__ import annotations

import gzip
import re

import pytest

from tests.helpers.readers import bads, docs, read
from tests.test_readers_formats import ARTICLE, HTTP, http_response, warc_record


def page(uri: str, body: bytes = ARTICLE) -> bytes:
    return warc_record("response", uri, http_response(body, "text/html"), HTTP)


def with_length(record: bytes, value: bytes) -> bytes:
    """`record` with its WARC Content-Length (the last header line) replaced by `value`."""
    return re.sub(rb"Content-Length: [^\r]*\r\n\r\nHTTP", b"Content-Length: " + value + b"\r\n\r\nHTTP", record, 1)


PAGES = [page(f"http://p{i}.example/") for i in range(5)]
BLOCK = len(http_response(ARTICLE, "text/html"))


def urls(items) -> list[str]:
    return [d.meta["url"].split("//")[1].split(".")[0] for d in docs(items)]


@pytest.mark.parametrize("value", [b"1000000000000000", str(BLOCK + 150).encode(), str(BLOCK - 150).encode(),
                                   b"-5", b"abc", b"12 34", b"9" * 40])
@pytest.mark.parametrize("packing", ["plain", "gzip per record", "gzip whole"])
def test_a_lying_content_length_costs_its_record_only(tmp_path, value, packing):
    records = [PAGES[0], with_length(PAGES[1], value), *PAGES[2:]]
    data = b"".join(gzip.compress(r) for r in records) if packing == "gzip per record" else b"".join(records)
    (tmp_path / "c.warc.gz").write_bytes(gzip.compress(data) if packing == "gzip whole" else data)
    items = read(tmp_path, ["c.warc.gz"])
    assert urls(items) == ["p0", "p2", "p3", "p4"]
    assert bads(items) == [("record 2", "bad_length")]
    detail = items[1].detail
    assert "reading resumes at the next record header" in detail and value.decode()[:20] in detail.replace(",", "")


def test_the_detail_names_the_declared_and_the_available_length(tmp_path):
    liar = with_length(PAGES[1], b"1000000000000000")
    (tmp_path / "c.warc").write_bytes(PAGES[0] + liar + PAGES[2])
    (tmp_path / "last.warc.gz").write_bytes(gzip.compress(PAGES[0] + with_length(PAGES[1], b"900000")))
    huge = read(tmp_path, ["c.warc"])[1]
    left = len(liar) - liar.index(b"\r\n\r\nHTTP") - 4 + len(PAGES[2])
    assert f"Content-Length 1,000,000,000,000,000, but only {left:,} bytes follow the header" in huge.detail
    assert f"(byte {len(PAGES[0]) + len(liar):,})" in huge.detail  # where the next record begins
    last = read(tmp_path, ["last.warc.gz"])  # nothing after it: the file may just be cut short
    assert urls(last) == ["p0"] and bads(last) == [("record 2", "truncated")]
    assert "Content-Length 900,000, but only" in last[1].detail and "the rest of the file is lost" in last[1].detail


@pytest.mark.parametrize("packing", ["plain", "gzip"])
def test_an_over_cap_length_is_checked_after_the_skip_and_the_file_read_again(tmp_path, packing):
    """A body over the cap is skipped unread: its length is checked at the end of the skip, and the records it
    swallowed are read from the tail of the skip (held up to the cap) or, past that, from the file opened again."""
    cap = 2 * len(PAGES[0])
    records = [PAGES[0], with_length(PAGES[1], str(cap * 3).encode()), *PAGES[2:], *PAGES[2:], *PAGES[2:]]
    tail_fits = [PAGES[0], with_length(PAGES[1], str(cap + 10).encode()), *PAGES[2:]]
    for name, recs in (("far", records), ("near", tail_fits)):
        data = b"".join(recs)
        (tmp_path / f"{name}.warc").write_bytes(gzip.compress(data) if packing == "gzip" else data)
    far, near = read(tmp_path, ["far.warc"], cap=cap), read(tmp_path, ["near.warc"], cap=cap)
    assert urls(far) == ["p0"] + ["p2", "p3", "p4"] * 3 and bads(far) == [("record 2", "bad_length")]
    assert urls(near) == ["p0", "p2", "p3", "p4"] and bads(near) == [("record 2", "bad_length")]
    assert "the file was read again" in far[1].detail and "read again" not in near[1].detail
    legit = page("http://p1.example/", ARTICLE + b" " * cap)  # a true length over the cap
    (tmp_path / "big.warc").write_bytes(PAGES[0] + legit + PAGES[2])
    big = read(tmp_path, ["big.warc"], cap=cap)
    assert urls(big) == ["p0", "p2"] and bads(big) == [("record 2", "record_too_large")]


def test_a_body_quoting_a_warc_header_is_one_record(tmp_path):
    """The text `WARC/1.0` after a blank line inside a body is content while the Content-Length holds."""
    quoted = (b"<html><body><article><p>The river turns the mill wheel every morning. A WARC file reads:</p><pre>"
              b"\r\n\r\nWARC/1.0\r\nWARC-Type: response\r\nContent-Length: 5\r\n\r\nhello\r\n\r\n</pre>"
              b"</article></body></html>")
    (tmp_path / "q.warc.gz").write_bytes(b"".join(gzip.compress(r) for r in (PAGES[0], page("http://q.x/", quoted),
                                                                             PAGES[2])))
    items = read(tmp_path, ["q.warc.gz"])
    assert urls(items) == ["p0", "q", "p2"] and not bads(items)
    assert "WARC-Type: response" in docs(items)[1].text


def test_garbage_and_a_header_without_length_are_skipped_to_the_next_record(tmp_path):
    no_length = re.sub(rb"Content-Length: \d+\r\n\r\nHTTP", b"\r\nHTTP", PAGES[1], 1)
    (tmp_path / "g.warc").write_bytes(b"\r\n\r\nnot a warc at all\r\n\r\n" + PAGES[0] + b"\x00\x01 binary junk\r\n\r\n"
                                      + PAGES[2] + no_length + PAGES[3])
    items = read(tmp_path, ["g.warc"])
    assert urls(items) == ["p0", "p2", "p3"]
    assert bads(items) == [("record 1", "unreadable_file"), ("record 3", "unreadable_file"),
                           ("record 5", "bad_length")]
    assert "is not a WARC version line" in items[0].detail and "no Content-Length" in items[4].detail


def test_common_crawl_members_and_lf_only_headers_are_read_completely(tmp_path):
    many = [page(f"http://n{i}.example/") for i in range(400)]
    (tmp_path / "cc.warc.gz").write_bytes(b"".join(gzip.compress(r) for r in many))
    header, block = PAGES[0].split(b"\r\n\r\n", 1)
    # a hand-made WARC whose header has LF line ends: fastwarc read it as one unknown record and stopped
    (tmp_path / "lf.warc").write_bytes(header.replace(b"\r\n", b"\n") + b"\n\n" + block + PAGES[1])
    assert urls(read(tmp_path, ["cc.warc.gz"])) == [f"n{i}" for i in range(400)]
    lf = read(tmp_path, ["lf.warc"])
    assert urls(lf) == ["p0", "p1"] and not bads(lf)


def test_rereading_is_bounded_when_every_length_lies(tmp_path):
    """300 records that all claim 30,000 bytes: each resync rereads what it overshot, so rereading is capped
    (bytes read again <= bytes read + the cap): the entries say what was not read again, and every entry is
    still there to account for the file."""
    data = b"".join(with_length(page(f"http://m{i}.example/"), b"30000") for i in range(300))
    (tmp_path / "m.warc.gz").write_bytes(gzip.compress(data))
    items = read(tmp_path, ["m.warc.gz"], cap=100_000)
    assert not docs(items) and {r for _, r in bads(items)} <= {"bad_length", "truncated"}
    assert 1 < len(items) < 300 and any("were not read again" in i.detail for i in items)


def test_a_huge_length_in_a_big_gzip_is_recovered_in_bounded_memory(tmp_path):
    """24 MiB of WET records behind a record claiming 10^15 bytes, cap 1 MiB: before, one entry and 1,500 records
    gone; now every one is read, and the reader holds little more than the cap (the skip holds at most the cap
    of what it passes, then the file is opened again)."""
    import tracemalloc

    from specs.ingest import FilesSource
    from tasks.data.formats import read_files

    filler = [warc_record("conversion", f"http://c{i}/", b"text of the page " * 1000, "text/plain")
              for i in range(1500)]
    data = PAGES[0] + with_length(PAGES[1], b"1000000000000000") + b"".join(filler)
    (tmp_path / "m.warc.gz").write_bytes(gzip.compress(data, 1))
    kept, entries = 0, []
    tracemalloc.start()
    try:
        for item in read_files(FilesSource(name="t", paths=["m.warc.gz"]), tmp_path, 1 << 20):
            kept += hasattr(item, "key")
            entries += [] if hasattr(item, "key") else [(item.location, item.reason)]
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert (kept, entries) == (1501, [("record 2", "bad_length")])
    assert peak < 16 << 20, peak


@pytest.mark.parametrize("separator", [b"\n" * 25, b"\r\n" + b"\n" * 20, b"\r\n\r\n \r\n", b"\r\n \r\n",
                                       b"\r\n\r\n\t\r\n\r\n", b"\r\n\r\n" + b" " * 5000 + b"\r\n"])
def test_whitespace_between_records_is_a_separator(tmp_path, separator):
    """fastwarc reads records apart by any whitespace (a review found writers that leave long newline runs or
    blank lines with spaces); the framing must not call those bodies' lengths wrong."""
    data = b"".join(page(f"http://p{i}.example/").removesuffix(b"\r\n\r\n") + separator for i in range(4))
    (tmp_path / "c.warc").write_bytes(data + b"   \n")                  # and whitespace at the end of the file
    items = read(tmp_path, ["c.warc"])
    assert bads(items) == [] and urls(items) == ["p0", "p1", "p2", "p3"]
