"""Hostile Parquet, by what pyarrow allocates rather than what the footer says: one huge value among short rows
of a row group (a few KB of zstd, gzip or brotli) is found by streaming its page a chunk at a time and the row
group is refused unread (a 300 MB value took 950 MB under a 64 MiB cap before); a footer that understates its
sizes no longer hides a bomb from the page headers; a page header that understates its own size is refused by
pyarrow itself (a named control); ordinary files read exactly as `pq.read_table` reads them (controls)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from tasks.data.formats import parquet_rows as rows_module
from tasks.data.formats.parquet_pages import HeaderError, chunk_pages, decode_header

REPO = Path(__file__).resolve().parents[1]
MIB = 1 << 20


def huge_among_small(path: Path, value_bytes: int, small: int = 200, codec: str = "zstd",
                     version: str = "1.0") -> None:
    """`small` rows of 100 bytes and one row of `value_bytes`, one row group, one page of text values."""
    texts = ["s" * 100] * small + ["h" * value_bytes]
    pq.write_table(pa.table({"id": list(range(small + 1)), "text": texts}), path, compression=codec,
                   use_dictionary=False, data_page_version=version)


def zigzag_varint(n: int, width: int) -> bytes:
    """`n` as Thrift's compact i32/i64, padded with continuation bytes to `width` bytes (readers accept it), so
    a patched size moves nothing else in the file."""
    n = (n << 1) ^ (n >> 63)
    out = bytearray()
    while True:
        out.append((n & 0x7F) | 0x80)
        n >>= 7
        if not n:
            break
    out[-1] &= 0x7F
    while len(out) < width:
        out[-1] |= 0x80
        out.append(0)
    return bytes(out)


def varint_width(value: int) -> int:
    return len(zigzag_varint(value, 0))


# ------------------------------------------------------------------------- one huge value among short rows
@pytest.mark.parametrize("codec, version", [("zstd", "1.0"), ("gzip", "2.0"), ("brotli", "1.0"), ("none", "2.0")])
def test_one_huge_value_among_short_rows_is_refused_without_decompressing_it(tmp_path, monkeypatch, codec,
                                                                            version):
    """8 MiB among 200 short rows averages 41 KB a row, under the 1 MiB cap: the footer check let pyarrow
    decompress the page and the row was refused afterwards. A page over SCAN_BYTES (64 MiB, lowered here) is
    now streamed and the value's length read: the group is one `record_too_large` entry naming the value's
    size, and no batch is read."""
    monkeypatch.setattr(rows_module, "SCAN_BYTES", 4 * MIB, raising=False)
    path = tmp_path / "mixed.parquet"
    huge_among_small(path, 8 * MIB, codec=codec, version=version)
    rows = list(rows_module.parquet_rows(path, MIB))
    assert [(r.number, r.last, r.issue, r.size) for r in rows] == [(1, 201, "record_too_large", 8 * MIB)]
    assert "holding a value of 8,388,608 bytes" in rows[0].group_note and "not read" in rows[0].group_note


PEAK = """
import json, resource, sys
from pathlib import Path
from tasks.data.formats.parquet_rows import parquet_rows
base = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
issues = [r.issue for r in parquet_rows(Path(sys.argv[1]), int(sys.argv[2]))]
import pyarrow as pa
print(json.dumps({"grew_kib": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - base, "issues": issues,
                  "arrow_peak": pa.default_memory_pool().max_memory()}))
"""


def peak_of_reading(path: Path, cap: int) -> dict:
    """Peak RSS growth (KiB) of reading `path` in a fresh interpreter, after the imports, the peak of pyarrow's
    memory pool (bytes: RSS alone varies with what the allocator hands back) and the issues."""
    done = subprocess.run([sys.executable, "-c", PEAK, str(path), str(cap)], capture_output=True, text=True,
                          cwd=REPO, env={**os.environ, "PYTHONPATH": str(REPO)}, timeout=60, check=True)
    return json.loads(done.stdout.strip().splitlines()[-1])


def test_one_huge_value_costs_a_chunk_of_memory_not_the_page(tmp_path):
    """96 MiB among 200 short rows (a few KB of zstd), SCAN_BYTES as shipped: reading it grew the process by
    ~340 MB before."""
    path = tmp_path / "mixed.parquet"
    huge_among_small(path, 96 * MIB)
    assert path.stat().st_size < 64 << 10
    seen = peak_of_reading(path, MIB)
    assert seen["issues"] == ["record_too_large"] and seen["grew_kib"] < 40 << 10, seen
    assert seen["arrow_peak"] < 8 * MIB, seen


def test_a_dictionary_value_repeated_inside_lists_is_measured_before_it_is_decoded(tmp_path):
    """Text inside lists and structs was decoded whole: a 2 KB file whose 100 rows each list one 4 MiB dictionary
    value took 965 MB to read (200 rows of 5 MiB: 2.3 GB). Nested text leaves are read dictionary-encoded
    now, as top-level text columns were, so each row is measured before it is decoded."""
    big = pa.DictionaryArray.from_arrays(pa.array([0] * 100, pa.int32()), pa.array(["x" * (4 * MIB)]))
    tags = pa.ListArray.from_arrays(pa.array(list(range(101)), pa.int32()), big)
    path = tmp_path / "nested.parquet"
    # store_schema=False: no Arrow schema in the file to ask for the dictionary back, as other writers write it
    pq.write_table(pa.table({"text": [f"doc {i}" for i in range(100)], "tags": tags}), path, compression="zstd",
                   dictionary_pagesize_limit=64 * MIB, store_schema=False)
    assert path.stat().st_size < 64 << 10
    seen = peak_of_reading(path, MIB)
    assert seen["issues"] == ["record_too_large"] * 100 and seen["arrow_peak"] < 32 * MIB, seen
    assert seen["grew_kib"] < 200 << 10, seen


# ------------------------------------------------------------------------------------ sizes that lie
def test_a_footer_that_understates_its_sizes_does_not_hide_the_bomb(tmp_path, monkeypatch):
    """A row group of one 8 MiB value is refused from its footer; with the footer's sizes patched down to 1,000
    bytes that check passed and pyarrow decompressed the page. The page header says what pyarrow will allocate,
    so the group is still refused unread (a page over SCAN_BYTES, lowered here)."""
    monkeypatch.setattr(rows_module, "SCAN_BYTES", 4 * MIB, raising=False)
    path = tmp_path / "liar.parquet"
    pq.write_table(pa.table({"text": ["h" * (8 * MIB)]}), path, compression="zstd", use_dictionary=False)
    meta = pq.ParquetFile(path).metadata
    data = bytearray(path.read_bytes())
    footer = len(data) - 8 - int.from_bytes(data[-8:-4], "little")
    for size in {meta.row_group(0).column(0).total_uncompressed_size, meta.row_group(0).total_byte_size}:
        old = zigzag_varint(size, 0)
        at = data.index(old, footer)
        data[at:at + len(old)] = zigzag_varint(1000, len(old))
    path.write_bytes(bytes(data))
    assert pq.ParquetFile(path).metadata.row_group(0).column(0).total_uncompressed_size == 1000
    read: list = []

    class Spy(pq.ParquetFile):
        def iter_batches(self, *args, **kwargs):
            read.append(kwargs.get("row_groups"))
            return super().iter_batches(*args, **kwargs)
    monkeypatch.setattr(rows_module.pq, "ParquetFile", Spy)
    rows = list(rows_module.parquet_rows(path, MIB))
    assert [(r.number, r.last, r.issue) for r in rows] == [(1, 1, "record_too_large")] and not read
    assert "1 values, so one is over the cap" in rows[0].group_note


def patch_page_size(path: Path, column: int, new_size: int) -> None:
    """Rewrite the uncompressed_page_size of `column`'s largest page in place."""
    meta = pq.ParquetFile(path).metadata.row_group(0).column(column)
    with path.open("rb") as handle:
        pages = list(chunk_pages(handle, meta, path.stat().st_size))
    big = max(pages, key=lambda p: p.uncompressed)
    start = min(o for o in (meta.dictionary_page_offset, meta.data_page_offset) if o)
    for page in pages[:pages.index(big)]:
        start = page.start + page.compressed
    data = bytearray(path.read_bytes())
    assert data[start] == 0x15 and data[start + 2] == 0x15   # fields 1 and 2, both i32
    width = varint_width(big.uncompressed)
    data[start + 3:start + 3 + width] = zigzag_varint(new_size, width)
    path.write_bytes(bytes(data))


@pytest.mark.parametrize("codec", ["zstd", "gzip", "snappy"])
def test_control_a_page_header_that_understates_its_size_is_refused_by_pyarrow(tmp_path, codec):
    """Control (passes on the old code too): pyarrow decompresses into a buffer of the header's size, so a page
    whose content is bigger than its header says fails there — one `unreadable_file` entry, bounded memory."""
    path = tmp_path / "liar.parquet"
    huge_among_small(path, 8 * MIB, codec=codec)
    patch_page_size(path, 1, 1000)
    rows = list(rows_module.parquet_rows(path, MIB))
    assert [(r.number, r.last, r.issue) for r in rows] == [(1, 201, "unreadable_file")]


def test_a_page_header_that_overstates_its_size_is_refused_unread(tmp_path):
    """A header claiming 1.5 GB for 8 MiB of content: pyarrow allocated what the header claimed and failed on
    the content; the claim alone is over the page bound now, so nothing is allocated."""
    path = tmp_path / "liar.parquet"
    huge_among_small(path, 8 * MIB)
    patch_page_size(path, 1, 1_500_000_000)
    rows = list(rows_module.parquet_rows(path, 64 * MIB))
    assert [(r.number, r.last, r.issue) for r in rows] == [(1, 201, "record_too_large")]


def test_control_a_hostile_page_header_is_an_unreadable_group_not_a_crash(tmp_path):
    """Control for the old code (pyarrow refuses such a header too), and the header parser's own bounds: Thrift
    structs nested 40 deep, and a header cut short, raise; `parquet_rows` reports the group as `unreadable_file`
    and reads the next one."""
    with pytest.raises(HeaderError):
        decode_header(b"\x15\x00\x15\x02\x15\x02" + b"\x1c" * 40 + b"\x00" * 41)
    with pytest.raises(IndexError):
        decode_header(b"\x15\x00\x15")
    path = tmp_path / "two.parquet"
    with pq.ParquetWriter(path, pa.schema([("text", pa.string())]), compression="none") as writer:
        writer.write_table(pa.table({"text": ["first group"]}))
        writer.write_table(pa.table({"text": ["second group"]}))
    meta = pq.ParquetFile(path).metadata.row_group(0).column(0)
    data = bytearray(path.read_bytes())
    start = min(o for o in (meta.dictionary_page_offset, meta.data_page_offset) if o)
    data[start:start + 8] = b"\x1c" * 8      # a struct field where the page type should be, opened and never closed
    path.write_bytes(bytes(data))
    rows = list(rows_module.parquet_rows(path, MIB))
    assert [r.issue for r in rows] == ["unreadable_file", None] and rows[1].data == {"text": "second group"}


# ------------------------------------------------------------------------------------------ controls
def ordinary_files(folder: Path) -> list[Path]:
    import pandas as pd

    frame = pd.DataFrame({"text": [f"doc {i} " * (i % 40 + 1) for i in range(3000)], "n": range(3000),
                          "tags": [["a", "b"][: i % 3] for i in range(3000)],
                          "maybe": [None if i % 3 else f"x{i}" for i in range(3000)],
                          "chat": [[{"role": "user", "content": f"hi {i}"}] for i in range(3000)]})
    table = pa.Table.from_pandas(frame, preserve_index=False)
    out = [folder / "pandas.parquet", folder / "v2.parquet", folder / "gzip_groups.parquet", folder / "plain.parquet"]
    frame.to_parquet(out[0])
    pq.write_table(table, out[1], data_page_version="2.0", compression="zstd")
    pq.write_table(table, out[2], compression="gzip", row_group_size=700, data_page_size=4096)
    pq.write_table(table, out[3], compression="brotli", use_dictionary=False, data_page_size=2048)
    return out


@pytest.mark.parametrize("cap", [64 * MIB, 300])
def test_control_ordinary_files_read_as_pyarrow_reads_them(tmp_path, cap):
    """Control: pandas and pyarrow files (v1 and v2 pages, dictionaries, nulls, lists, structs, many small pages
    that a 300-byte cap makes the reader stream) read row for row as `pq.read_table` reads them."""
    for path in ordinary_files(tmp_path):
        expected = pq.read_table(path).to_pylist()
        rows = list(rows_module.parquet_rows(path, cap))
        assert all(r.issue in (None, "record_too_large") for r in rows), path
        assert [r.data for r in rows if r.issue is None] == \
            [e for e, r in zip(expected, rows) if r.issue is None], path
        if cap > MIB:
            assert len(rows) == len(expected) and all(r.issue is None for r in rows), path
