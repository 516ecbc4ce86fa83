"""Streaming readers: every format, compressed by magic bytes, damaged files, the record cap, clean text.

Expected values are computed independently: the records a truncated stream still holds are counted with the
codec's own permissive decompressor (zlib/bz2/lzma/zstd objects decode up to the cut), CSV rows by hand.
"""

from __future__ import annotations

import bz2
import gzip
import json
import lzma
import zlib
from pathlib import Path

import pyarrow as pa
import pyarrow.ipc as ipc
import pyarrow.parquet as pq
import pytest
import zstandard

from specs import Params
from specs.ingest import FilesSource
from tasks.core.runner import run_stage
from tasks.data.formats import read_files
from tasks.data.records import Bad, read_all_records
from tests.helpers.readers import bads, docs, read

CODECS = {
    "gz": (gzip.compress, lambda c: zlib.decompressobj(wbits=31).decompress(c)),
    "zst": (lambda b: zstandard.ZstdCompressor().compress(b), lambda c: zstandard.ZstdDecompressor()
            .decompressobj().decompress(c)),
    "bz2": (lambda b: bz2.compress(b, 1), lambda c: bz2.BZ2Decompressor().decompress(c)),  # 100 kB blocks
    "xz": (lzma.compress, lambda c: lzma.LZMADecompressor().decompress(c)),
}


def jsonl_lines(n: int) -> list[str]:
    return [json.dumps({"id": f"r{i}", "text": f"record {i} " + "word " * (i % 23)}) for i in range(n)]


@pytest.mark.parametrize("codec", sorted(CODECS))
def test_compressed_jsonl_reads_every_record(tmp_path, codec):
    lines = jsonl_lines(3000)
    compress, _ = CODECS[codec]
    (tmp_path / f"d.jsonl.{codec}").write_bytes(compress(("\n".join(lines) + "\n").encode()))
    items = read(tmp_path, [f"d.jsonl.{codec}"], fields={"id": "id"})
    assert [(d.key, d.text) for d in items] == [(json.loads(x)["id"], json.loads(x)["text"]) for x in lines]


@pytest.mark.parametrize("codec", sorted(CODECS))
def test_truncated_stream_keeps_the_records_before_the_cut(tmp_path, codec):
    lines = jsonl_lines(20000)
    compress, decompress = CODECS[codec]
    packed = compress(("\n".join(lines) + "\n").encode())
    cut = packed[: len(packed) // 2]
    complete = decompress(cut).count(b"\n")  # whole lines the damaged stream still holds
    assert 0 < complete < len(lines)
    (tmp_path / f"d.jsonl.{codec}").write_bytes(cut)
    items = read(tmp_path, [f"d.jsonl.{codec}"])
    assert [d.text for d in docs(items)] == [json.loads(x)["text"] for x in lines[:complete]]
    assert bads(items) == [(f"line {complete + 1}", "truncated")]  # one entry for the lost rest, last
    assert isinstance(items[-1], Bad)


def test_truncated_compressed_text_file_is_one_truncated_document(tmp_path):
    story = ("Once upon a time there was a mill by the river. " * 4000).encode()
    packed = zstandard.ZstdCompressor().compress(story)
    (tmp_path / "story.md.zst").write_bytes(packed[:-8])
    (tmp_path / "whole.md.zst").write_bytes(packed)
    items = read(tmp_path, ["."])
    assert [(i.origin, i.reason) for i in items if isinstance(i, Bad)] == [("story.md.zst", "truncated")]
    assert [(d.origin, d.text) for d in docs(items)] == [("whole.md.zst", story.decode())]


def test_corrupt_gzip_block_is_damage_not_garbage(tmp_path):
    lines = jsonl_lines(20000)
    packed = bytearray(gzip.compress(("\n".join(lines) + "\n").encode()))
    packed[len(packed) // 2] ^= 0xFF
    (tmp_path / "d.jsonl.gz").write_bytes(bytes(packed))
    items = read(tmp_path, ["d.jsonl.gz"])
    assert bads(items)[-1][1] == "truncated" and isinstance(items[-1], Bad)
    assert 0 < len(docs(items)) < len(lines)


def test_compression_and_format_are_detected_from_content(tmp_path):
    good = jsonl_lines(3)
    plain = ("\n".join(good) + "\n").encode()
    (tmp_path / "gzip_named.jsonl").write_bytes(gzip.compress(plain))           # gzip behind a plain suffix
    (tmp_path / "plain_named.jsonl.gz").write_bytes(plain)                       # a lying .gz suffix
    (tmp_path / "story.txt.zst").write_bytes(zstandard.ZstdCompressor().compress(b"A zstd story."))
    pq.write_table(pa.table({"text": ["from parquet"]}), tmp_path / "table.jsonl")  # PAR1 beats .jsonl
    (tmp_path / "crawl.dat").write_bytes(warc_record("conversion", "http://x/", b"WET text."))  # WARC/ magic
    (tmp_path / "blob.jsonl.xz.bin").write_bytes(lzma.compress(b"no reader"))  # xz, but nothing to read inside
    items = read(tmp_path, ["."])
    texts = {(d.origin, d.text) for d in docs(items)}
    expected_lines = [json.loads(x)["text"] for x in good]
    assert texts == {*(("gzip_named.jsonl", t) for t in expected_lines),
                     *(("plain_named.jsonl.gz", t) for t in expected_lines),
                     ("story.txt.zst", "A zstd story."), ("table.jsonl", "from parquet"), ("crawl.dat", "WET text.")}
    assert [(i.origin, i.reason) for i in items if isinstance(i, Bad)] == [("blob.jsonl.xz.bin", "unsupported_format")]


def test_record_over_the_cap_is_skipped_to_the_next_newline(tmp_path):
    cap = 100
    at_cap = json.dumps({"text": "x" * (cap - 12)})                # exactly `cap` bytes: kept
    over = json.dumps({"text": "y" * (cap - 11)})                  # cap + 1 bytes: quarantined
    huge = json.dumps({"text": "z" * 50_000})                      # many chunks past the cap
    assert (len(at_cap), len(over)) == (cap, cap + 1)
    body = "\n".join([json.dumps({"text": "before"}), at_cap, over, huge, json.dumps({"text": "after"})]) + "\n"
    (tmp_path / "d.jsonl.gz").write_bytes(gzip.compress(body.encode()))
    (tmp_path / "big.txt").write_bytes(b"t" * (cap + 1))
    (tmp_path / "fits.txt").write_bytes(b"t" * cap)
    items = read(tmp_path, ["."], cap=cap)
    assert [d.text for d in docs(items)] == ["before", "x" * (cap - 12), "after", "t" * cap]
    too_large = [i for i in items if isinstance(i, Bad)]
    assert [(i.origin, i.location, i.reason) for i in too_large] == [
        ("big.txt", "", "record_too_large"), ("d.jsonl.gz", "line 3", "record_too_large"),
        ("d.jsonl.gz", "line 4", "record_too_large")]
    assert f"{len(huge) + 1:,} bytes" in too_large[2].detail  # its size was counted while skipping
    assert all(len(i.raw) <= 500 for i in too_large)


CSV = (
    'id,text,lang\n'
    'a,"Hello, world",en\n'                        # a quoted separator
    'b,"two\nlines",en\n'                          # a quoted newline: one record over two lines
    'c,only two fields\n'                          # bad_row: 2 fields, header has 3
    'd,"stray"quote,en\n'                          # bad_row: strict csv refuses the stray quote
    '\n'                                           # a blank line: not a record
    'e,plain,de\n'
)


@pytest.mark.parametrize("codec", ["none", "gz"])
def test_csv_reads_declared_columns_and_quarantines_bad_rows(tmp_path, codec):
    data = CSV.encode()
    (tmp_path / "t.csv").write_bytes(data if codec == "none" else gzip.compress(data))
    items = read(tmp_path, ["t.csv"], fields={"id": "id", "text": "text"})
    assert [(d.key, d.text, d.meta, d.location) for d in docs(items)] == [
        ("a", "Hello, world", {"lang": "en"}, "line 2"), ("b", "two\nlines", {"lang": "en"}, "line 3"),
        ("e", "plain", {"lang": "de"}, "line 8")]
    assert bads(items) == [("line 5", "bad_row"), ("line 6", "bad_row")]


def test_tsv_without_header_and_quoting_and_damage(tmp_path):
    rows = [f"k{i}\tText {i} with a \" quote" for i in range(4000)]
    packed = bz2.compress(("\n".join(rows) + "\n").encode(), 1)
    (tmp_path / "whole.tsv.bz2").write_bytes(packed)
    cut = packed[: len(packed) // 2]
    (tmp_path / "cut.tsv.bz2").write_bytes(cut)
    complete = bz2.BZ2Decompressor().decompress(cut).count(b"\n")
    opts = {"fields": {"id": "key", "text": "body"}, "csv": {"columns": ["key", "body"], "quotechar": None}}
    whole = read(tmp_path, ["whole.tsv.bz2"], **opts)
    assert [(d.key, d.text) for d in whole] == [(f"k{i}", f"Text {i} with a \" quote") for i in range(4000)]
    damaged = read(tmp_path, ["cut.tsv.bz2"], **opts)
    assert [d.key for d in docs(damaged)] == [f"k{i}" for i in range(complete)]
    assert bads(damaged) == [(f"line {complete + 1}", "truncated")]


def test_csv_row_over_the_cap_and_bad_bytes_cost_one_row(tmp_path):
    (tmp_path / "t.csv").write_bytes(b"text\nshort\n" + b"q" * 300 + b"\ncaf\xe9\nlast\n")
    items = read(tmp_path, ["t.csv"], cap=100)
    assert [d.text for d in docs(items)] == ["short", "last"]
    assert bads(items) == [("line 3", "record_too_large"), ("line 4", "invalid_utf8")]


def test_csv_without_the_text_column_is_one_entry(tmp_path):
    (tmp_path / "t.csv").write_text("body\nx\n")
    items = read(tmp_path, ["t.csv"])
    assert [(i.location, i.reason) for i in items] == [("line 1", "missing_text")]


def write_arrow_stream(path: Path, batches: list[dict[str, list]]) -> list[int]:
    """An Arrow IPC stream (what `Dataset.save_to_disk` writes); returns the file size after each batch."""
    sizes = []
    schema = pa.table(batches[0]).schema
    with pa.OSFile(str(path), "wb") as sink, ipc.new_stream(sink, schema) as writer:
        for batch in batches:
            writer.write_table(pa.table(batch, schema=schema))
            sizes.append(sink.tell())
    return sizes


def test_save_to_disk_folder_is_read_without_its_metadata(tmp_path):
    ds = tmp_path / "hf_saved"
    ds.mkdir()
    write_arrow_stream(ds / "data-00000-of-00002.arrow", [{"text": ["a0", "a1"], "n": [0, 1]}])
    write_arrow_stream(ds / "data-00001-of-00002.arrow", [{"text": ["b0"], "n": [2]}, {"text": ["b1"], "n": [3]}])
    (ds / "dataset_info.json").write_text(json.dumps({"features": {"text": {"dtype": "string"}}}))
    (ds / "state.json").write_text(json.dumps({"_data_files": [{"filename": "data-00000-of-00002.arrow"},
                                                                {"filename": "data-00001-of-00002.arrow"}]}))
    items = read(tmp_path, ["hf_saved"])
    first, second = "hf_saved/data-00000-of-00002.arrow", "hf_saved/data-00001-of-00002.arrow"
    assert [(d.text, d.meta, d.full_origin) for d in items] == [
        ("a0", {"n": 0}, f"{first}:1"), ("a1", {"n": 1}, f"{first}:2"),
        ("b0", {"n": 2}, f"{second}:1"), ("b1", {"n": 3}, f"{second}:2")]


def test_hub_layout_skips_the_dataset_card_but_not_an_ordinary_readme(tmp_path):
    hub = tmp_path / "hub"
    (hub / "data").mkdir(parents=True)
    (hub / "README.md").write_text("---\nlicense: mit\nconfigs:\n- config_name: default\n---\n# My dataset\n")
    pq.write_table(pa.table({"text": ["p0", "p1"]}), hub / "data" / "train-00000-of-00001.parquet")
    (hub / "data" / "extra.jsonl").write_text(json.dumps({"text": "j0"}) + "\n")
    (hub / "dataset_infos.json").write_text("{}")
    notes = tmp_path / "notes"
    notes.mkdir()
    (notes / "README.md").write_text("---\ntitle: my notes\n---\nA readme that is a document.\n")
    items = read(tmp_path, ["hub", "notes"])
    assert [(d.origin, d.text) for d in items] == [
        ("hub/data/extra.jsonl", "j0"), ("hub/data/train-00000-of-00001.parquet", "p0"),
        ("hub/data/train-00000-of-00001.parquet", "p1"),
        ("notes/README.md", "---\ntitle: my notes\n---\nA readme that is a document.\n")]


def test_arrow_stream_cut_mid_batch_and_compressed_and_file_format(tmp_path):
    batches = [{"text": [f"t{b}-{i}" for i in range(10)]} for b in range(3)]
    sizes = write_arrow_stream(tmp_path / "s.arrow", batches)
    whole = (tmp_path / "s.arrow").read_bytes()
    (tmp_path / "cut.arrow").write_bytes(whole[: sizes[1] + 40])   # inside the third batch's message
    (tmp_path / "s.arrow.zst").write_bytes(zstandard.ZstdCompressor().compress(whole))
    with ipc.new_file(str(tmp_path / "f.arrow"), pa.table(batches[0]).schema) as writer:
        writer.write_table(pa.table(batches[0]))
    (tmp_path / "junk.arrow").write_bytes(b"\xff\xff\xff\xff not an arrow message")
    expected = [f"t{b}-{i}" for b in range(3) for i in range(10)]
    assert [d.text for d in read(tmp_path, ["s.arrow"])] == expected
    assert [d.text for d in read(tmp_path, ["s.arrow.zst"])] == expected
    assert [d.text for d in read(tmp_path, ["f.arrow"])] == expected[:10]
    cut = read(tmp_path, ["cut.arrow"])
    assert [d.text for d in docs(cut)] == expected[:20] and bads(cut) == [("row 21", "truncated")]
    assert [(i.origin, i.reason) for i in read(tmp_path, ["junk.arrow"])] == [("junk.arrow", "unreadable_file")]


def warc_record(kind: str, uri: str, block: bytes, content_type: str = "") -> bytes:
    """One WARC/1.0 record, written by hand (the format: CRLF headers, a blank line, the block, two CRLFs)."""
    headers = [f"WARC-Type: {kind}", f"WARC-Record-ID: <urn:uuid:{abs(hash((kind, uri, block))):032x}>",
               "WARC-Date: 2024-05-06T07:08:09Z"]
    if uri:
        headers.append(f"WARC-Target-URI: {uri}")
    if content_type:
        headers.append(f"Content-Type: {content_type}")
    headers.append(f"Content-Length: {len(block)}")
    return ("WARC/1.0\r\n" + "\r\n".join(headers) + "\r\n\r\n").encode() + block + b"\r\n\r\n"


def http_response(body: bytes, ctype: str) -> bytes:
    return f"HTTP/1.1 200 OK\r\nContent-Type: {ctype}\r\nContent-Length: {len(body)}\r\n\r\n".encode() + body


ARTICLE = ("<html><head><title>T</title></head><body><nav><a href='/'>Home</a> | <a href='/x'>About</a></nav>"
           "<article><h1>Rivers</h1><p>The river turns the mill wheel every morning, and the miller counts "
           "the sacks of flour that pile up by the door before the carts arrive.</p></article>"
           "<footer>Copyright 2024</footer></body></html>").encode()
HTTP = "application/http; msgtype=response"


def crawl_records() -> list[bytes]:
    return [
        warc_record("warcinfo", "", b"software: hand-written\r\n", "application/warc-fields"),
        warc_record("request", "http://a.example/", b"GET / HTTP/1.1\r\nHost: a.example\r\n\r\n",
                    "application/http; msgtype=request"),
        warc_record("response", "http://a.example/", http_response(ARTICLE, "text/html; charset=utf-8"), HTTP),
        warc_record("metadata", "http://a.example/", b"fetchTimeMs: 12\r\n", "application/warc-fields"),
        warc_record("response", "http://b.example/x.png", http_response(b"\x89PNG....", "image/png"), HTTP),
        warc_record("response", "http://c.example/", http_response(b"<html><body></body></html>", "text/html"), HTTP),
        warc_record("response", "http://d.example/", http_response(ARTICLE.replace(b"Rivers", b"Mills"),
                                                                     "text/html"), HTTP),
    ]


def test_warc_gz_responses_become_main_text_and_the_rest_is_accounted(tmp_path):
    (tmp_path / "crawl.warc.gz").write_bytes(b"".join(gzip.compress(r) for r in crawl_records()))  # per record
    items = read(tmp_path, ["crawl.warc.gz"])
    kept = docs(items)
    assert [(d.location, d.meta["url"], d.meta["date"]) for d in kept] == [
        ("record 1", "http://a.example/", "2024-05-06T07:08:09Z"),
        ("record 4", "http://d.example/", "2024-05-06T07:08:09Z")]
    assert "The river turns the mill wheel" in kept[0].text
    assert "Home" not in kept[0].text and "Copyright" not in kept[0].text   # boilerplate gone: main content
    assert bads(items) == [("record 2", "not_html"), ("record 3", "empty_extraction")]  # 3 skipped kinds uncounted


def test_wet_conversion_records_are_kept_as_is(tmp_path):
    text = "Plain extracted text.\nSecond line with é."
    records = [warc_record("warcinfo", "", b"x: y\r\n"), warc_record("conversion", "http://e.example/",
                                                                     text.encode(), "text/plain")]
    (tmp_path / "c.warc.wet.gz").write_bytes(b"".join(gzip.compress(r) for r in records))
    assert [(d.text, d.meta["url"]) for d in read(tmp_path, ["c.warc.wet.gz"])] == [(text, "http://e.example/")]


def test_truncated_warc_gz_keeps_the_records_before_the_cut(tmp_path):
    members = [gzip.compress(r) for r in crawl_records()]
    packed = b"".join(members)
    (tmp_path / "cut.warc.gz").write_bytes(packed[: len(packed) - len(members[-1]) // 2])  # inside the last one
    items = read(tmp_path, ["cut.warc.gz"])
    assert [d.meta["url"] for d in docs(items)] == ["http://a.example/"]
    assert bads(items) == [("record 2", "not_html"), ("record 3", "empty_extraction"), ("record 4", "truncated")]


def ingest(root: Path, options: dict | None = None, **source) -> tuple[dict, dict[str, dict]]:
    params = Params.model_validate({"ingest": {"sources": [{"name": "u", "kind": "files", **source}],
                                               "max_record_bytes": 1000, **(options or {})}})
    result = run_stage("ingest", params, root)
    records = {r["id"]: r for r in read_all_records(root / "data/ingest").to_pylist()}
    return result.counts, records


def test_kept_text_has_no_control_characters_whatever_the_escaping(tmp_path):
    d = tmp_path / "in"
    d.mkdir()
    escaped = [{"id": "esc", "text": "nul\u0000bell\u0007esc\u001b end"},          # 3 removed
               {"id": "breaks", "text": "a\u000bb\u000cc\u0085d\u001ce"},           # 4 line-breaking controls
               {"id": "c1\u0000", "text": "c1 \u0080\u009f kept\ttab"},            # 2 in text + 1 in the id
               {"id": "only", "text": "\u0000\u0001 \u0002"}]                       # nothing left: empty_text
    lines = [json.dumps(o) for o in escaped] + ['{"id": "raw", "text": "raw\x00nul\x1fus"}']  # raw: 2
    (d / "e.jsonl").write_text("\n".join(lines) + "\n")
    (d / "raw.txt").write_bytes(b"line one\r\nNUL\x00here\x7f\r\nend\n")               # 2 (CR/LF not counted)
    (d / "raw.csv").write_bytes(b"id,text\nk,\"csv\x00 \x08cell\"\n")                  # 2
    counts, records = ingest(tmp_path, paths=["in"], fields={"id": "id"})
    texts = {k.removeprefix("u/"): r["text"] for k, r in records.items()}
    assert texts == {"esc": "nulbellesc end", "breaks": "a\nb\nc\nd\ne", "c1": "c1  kept\ttab",
                     "raw": "rawnulus", "in/raw.txt": "line one\nNULhere\nend", "k": "csv cell"}
    assert counts["by_source"]["u"]["control_chars_removed"] == counts["control_chars_removed"] == 3 + 4 + 3 + 2 + 2 + 2
    assert counts["by_source"]["u"]["by_reason"] == {"empty_text": 1}
    controls = {chr(c) for c in [*range(0x20), 0x7F, *range(0x80, 0xA0)]} - {"\t", "\n"}
    assert not any(set(r["text"]) & controls or set(r["id"]) & controls for r in records.values())


def test_ingest_report_counts_damage_by_reason(tmp_path):
    d = tmp_path / "in"
    d.mkdir()
    lines = jsonl_lines(20000)
    packed = lzma.compress(("\n".join(lines) + "\n").encode())
    cut = packed[: len(packed) // 3]
    (d / "cut.jsonl.xz").write_bytes(cut)
    complete = lzma.LZMADecompressor().decompress(cut).count(b"\n")
    (d / "big.jsonl").write_text(json.dumps({"id": "big", "text": "b" * 2000}) + "\n" + lines[0] + "\n")
    counts, records = ingest(tmp_path, paths=["in"], fields={"id": "id"})
    stats = counts["by_source"]["u"]
    # lines[0] (id r0) is in both files: the second copy, from cut.jsonl.xz (read after big.jsonl), is a duplicate
    assert stats["by_reason"] == {"duplicate_id": 1, "record_too_large": 1, "truncated": 1}
    assert stats["kept"] == complete and stats["read"] == complete + 3


def test_a_50_mb_gzip_file_streams_in_bounded_memory(tmp_path):
    import random
    import tracemalloc

    rng = random.Random(0)
    path = tmp_path / "big.jsonl.gz"
    lines = 0
    with gzip.open(path, "wb", compresslevel=1) as out:
        while path.stat().st_size < 50_000_000:
            block = "".join(json.dumps({"text": rng.randbytes(3000).hex()}) + "\n" for _ in range(2000))
            out.write(block.encode())
            lines += 2000
            out.flush()
    size = path.stat().st_size
    tracemalloc.start()
    try:
        count = chars = 0
        for doc in read_files(FilesSource(name="m", paths=[path.name]), tmp_path, 64 << 20):
            count += 1
            chars += len(doc.text)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert (count, chars) == (lines, lines * 6000)
    print(f"file {size:,} bytes, {lines:,} lines, reader peak {peak:,} bytes (tracemalloc)")
    assert size >= 50_000_000 and peak < 8_000_000, (size, peak)  # < 1/6 of the file: nothing held whole


def test_plain_warc_cut_in_a_header_or_holding_garbage_is_accounted(tmp_path):
    records = crawl_records()
    whole = b"".join(records)
    (tmp_path / "cut.warc").write_bytes(whole[: whole.index(b"WARC-Target-URI: http://d.example/")])
    (tmp_path / "junk.warc").write_bytes(records[2] + b"NOT A RECORD\r\n\r\n" + records[6])
    cut = read(tmp_path, ["cut.warc"])
    assert [d.meta["url"] for d in docs(cut)] == ["http://a.example/"]
    assert bads(cut) == [("record 2", "not_html"), ("record 3", "empty_extraction"), ("record 4", "truncated")]
    junk = read(tmp_path, ["junk.warc"])
    # the garbage is one entry; the record after it is read again from its header (it was lost with the garbage)
    assert [(d.location, d.meta["url"]) for d in docs(junk)] == [("record 1", "http://a.example/"),
                                                               ("record 3", "http://d.example/")]
    assert bads(junk) == [("record 2", "unreadable_file")]
