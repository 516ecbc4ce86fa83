"""Hostile columnar files, a third review: pyarrow reads an Arrow record batch whole, and decompresses a Parquet
row group's pages for every column at once, before a row is measured against ingest.max_record_bytes.

- An Arrow IPC stream or file batch of one 600 MB string (20 KB with zstd buffer compression) was held whole,
  740 MB peak, before its row was refused; it is now `record_too_large` from its message metadata, unread.
- A batch whose metadata claims a 2^40-byte body was allocated (MemoryError, the rest of the file lost without
  saying how much); now that batch is refused and the stream's end inside it is `truncated`.
- A Parquet row group whose thirty columns each hold a 60 MB page (71 KB of zstd, every page under the page
  bounds) took 5.8 GB; the pages' sum is now held to the page bound, and such a group is one entry unread.
- A Parquet file of 50,000 columns (11 MB) took 296 s in the check for a column named twice (quadratic).
Each control reads an ordinary file exactly as pyarrow does.
"""

from __future__ import annotations

import json
import os
import struct
import subprocess
import sys
from pathlib import Path

import pyarrow as pa
import pyarrow.ipc as ipc
import pyarrow.parquet as pq
import pytest

from specs.ingest import FilesSource
from tasks.data.formats import parquet_rows as rows_module
from tasks.data.formats import read_files
from tasks.data.records import Bad, Doc

REPO = Path(__file__).resolve().parents[1]
MIB = 1 << 20


def table(texts: list[str]) -> pa.Table:
    return pa.table({"text": texts})


GOOD = table([f"good text {i}" for i in range(10)])


def write_stream(path: Path, tables: list[pa.Table], compression: str | None = None) -> None:
    with ipc.new_stream(path, tables[0].schema, options=ipc.IpcWriteOptions(compression=compression)) as w:
        for t in tables:
            w.write_table(t)


def write_file(path: Path, tables: list[pa.Table], compression: str | None = None) -> None:
    with ipc.new_file(path, tables[0].schema, options=ipc.IpcWriteOptions(compression=compression)) as w:
        for t in tables:
            w.write_table(t)


def read(path: Path, cap: int) -> list[Doc | Bad]:
    return list(read_files(FilesSource(name="u", paths=[path.name]), path.parent, cap))


def outcome(items: list[Doc | Bad]) -> list[str]:
    return [i.text if isinstance(i, Doc) else f"{i.location}: {i.reason}" for i in items]


GOOD_TEXTS = [f"good text {i}" for i in range(10)]


@pytest.mark.parametrize("writer", [write_stream, write_file], ids=["stream", "file"])
@pytest.mark.parametrize("compression", [None, "zstd"])
def test_an_arrow_batch_over_the_cap_is_refused_from_its_metadata(tmp_path, writer, compression):
    """A batch of one 4 MiB string under a 1 MiB cap: refused naming the batch and its rows; the batches around
    it are read. Before, the row was refused only after pyarrow had read (and decompressed) the batch, and the
    entry did not name it."""
    path = tmp_path / "x.arrow"
    writer(path, [GOOD, table(["y" * (4 * MIB)]), GOOD], compression)
    items = read(path, MIB)
    assert outcome(items) == GOOD_TEXTS + ["row 11: record_too_large"] + GOOD_TEXTS
    assert "record batch 1 (rows 11-11): 4,194,3" in items[10].detail and "not read" in items[10].detail


PEAK = """
import json, resource, sys
from pathlib import Path
import pyarrow as pa
from specs.ingest import FilesSource
from tasks.data.formats import read_files
path = Path(sys.argv[1])
items = list(read_files(FilesSource(name="u", paths=[path.name]), path.parent, int(sys.argv[2])))
print(json.dumps({"reasons": [getattr(i, "reason", "kept") for i in items],
                  "arrow_peak": pa.default_memory_pool().max_memory()}))
"""


def peak_of_reading(path: Path, cap: int) -> dict:
    """The peak of pyarrow's memory pool (bytes) while a fresh interpreter reads `path`, and the outcomes."""
    done = subprocess.run([sys.executable, "-c", PEAK, str(path), str(cap)], capture_output=True, text=True,
                          cwd=REPO, env={**os.environ, "PYTHONPATH": str(REPO)}, timeout=120, check=True)
    return json.loads(done.stdout.strip().splitlines()[-1])


@pytest.mark.parametrize("writer", [write_stream, write_file], ids=["stream", "file"])
def test_a_compressed_arrow_batch_is_not_decompressed_to_be_refused(tmp_path, writer):
    """96 MiB in one row (a few KB with zstd buffer compression) under the shipped 64 MiB cap: pyarrow's pool
    reached ~100 MiB before; now it never holds the batch."""
    path = tmp_path / "bomb.arrow"
    writer(path, [GOOD, table(["y" * (96 * MIB)]), GOOD], "zstd")
    assert path.stat().st_size < 64 << 10
    seen = peak_of_reading(path, 64 * MIB)
    assert seen["reasons"] == ["kept"] * 10 + ["record_too_large"] + ["kept"] * 10, seen
    assert seen["arrow_peak"] < 8 * MIB, seen


def body_length_at(data: bytes, message: int) -> int:
    """The byte offset of the bodyLength field in the metadata of the stream's `message`-th message (0: schema)."""
    pos = 0
    for _ in range(message):
        length = struct.unpack_from("<i", data, pos + 4)[0]
        pos += 8 + length + ipc.read_message(pa.py_buffer(data[pos:])).body.size
    length = struct.unpack_from("<i", data, pos + 4)[0]
    body = ipc.read_message(pa.py_buffer(data[pos:])).body.size
    return pos + 8 + data[pos + 8:pos + 8 + length].index(struct.pack("<q", body))


def test_a_batch_claiming_a_huge_body_is_refused_and_the_cut_is_named(tmp_path):
    """The second batch claims a 2^40-byte body. Before: pyarrow tried to allocate it, MemoryError, one
    `unreadable_file` for the file. Now: that batch is `record_too_large` unread (its rows named), and the stream
    ending inside the body it claims is `truncated`; the batch before is kept."""
    path = tmp_path / "lies.arrow"
    write_stream(path, [GOOD, GOOD, GOOD])
    data = bytearray(path.read_bytes())
    at = body_length_at(bytes(data), 2)
    data[at:at + 8] = struct.pack("<q", 1 << 40)
    path.write_bytes(bytes(data))
    items = read(path, 64 * MIB)
    assert outcome(items) == GOOD_TEXTS + ["row 11: record_too_large", "row 21: truncated"]
    assert "1,099,511,627,776 bytes" in items[10].detail and "ends" in items[11].detail


def wide(path: Path, columns: int, value: int, rows: int = 200) -> None:
    """`columns` text columns whose row 101 holds `value` bytes each, among short rows, zstd (a few KB)."""
    values = [f"short {i}" for i in range(rows)]
    values[100] = "y" * value
    column = pa.array(values, pa.string())      # shared by every column: the writer holds it once
    t = pa.table({"text": [f"doc {i}" for i in range(rows)]} | {f"c{i}": column for i in range(columns)})
    pq.write_table(t, path, compression="zstd", use_dictionary=False)


def test_parquet_pages_read_at_once_across_columns_are_bounded_together(tmp_path, monkeypatch):
    """Twelve columns of one 3 MiB page each, every page under the page bound (16 MiB here; 1 GiB shipped):
    pyarrow decompresses them all at once (30 x 60 MB took 5.8 GB). Before, the row group was read and only
    row 101 refused; now the group is one `record_too_large` entry naming the columns, unread."""
    monkeypatch.setattr(rows_module, "PAGE_BYTES", 16 * MIB)
    path = tmp_path / "wide.parquet"
    wide(path, 12, 3 * MIB)
    items = read(path, 4 * MIB)
    assert outcome(items) == ["row 1: record_too_large"]
    assert "rows 1-200, row group 0: columns up to 'c" in items[0].detail and "read at once" in items[0].detail


def test_control_parquet_columns_under_the_bound_together_read_as_before(tmp_path, monkeypatch):
    """Four such columns (12 MiB) stay under the 16 MiB bound: read, row 101 alone refused, as before."""
    monkeypatch.setattr(rows_module, "PAGE_BYTES", 16 * MIB)
    path = tmp_path / "wide.parquet"
    wide(path, 4, 3 * MIB)
    items = read(path, 4 * MIB)
    assert [i.location for i in items if isinstance(i, Bad)] == ["row 101"] and len(items) == 200


def test_control_parquet_ordinary_wide_file_reads_as_pyarrow_does(tmp_path):
    path = tmp_path / "ok.parquet"
    wide(path, 40, 1000, rows=3000)
    pq.write_table(pq.read_table(path), path, row_group_size=1000)
    assert outcome(read(path, 64 * MIB)) == pq.read_table(path).column("text").to_pylist()


def ordinary_tables() -> list[pa.Table]:
    texts = [f"document {i} " + "word " * (i % 300) for i in range(3000)]
    return [table(texts[i:i + 1000]) for i in range(0, 3000, 1000)]


@pytest.mark.parametrize("writer", [write_stream, write_file], ids=["stream", "file"])
@pytest.mark.parametrize("compression", [None, "zstd", "lz4"])
def test_control_ordinary_arrow_reads_as_pyarrow_does(tmp_path, writer, compression):
    """Batches of 1,000 rows (~0.9 MB each, over the 256 KiB cap given, every row under it) are all read."""
    path = tmp_path / "ok.arrow"
    tables = ordinary_tables()
    writer(path, tables, compression)
    expected = [t for tab in tables for t in tab.column("text").to_pylist()]
    assert outcome(read(path, 256 << 10)) == expected


def test_control_dictionary_encoded_arrow_stream_reads_as_pyarrow_does(tmp_path):
    """Dictionary batches (and a delta) pass through the framing as they are."""
    path = tmp_path / "dict.arrow"
    schema = pa.schema([("text", pa.dictionary(pa.int32(), pa.string())), ("id", pa.string())])
    batches = [pa.record_batch([pa.array(["a", "b", "a"]).dictionary_encode(), pa.array(["1", "2", "3"])],
                               schema=schema),
               pa.record_batch([pa.DictionaryArray.from_arrays(pa.array([0, 1, 2], pa.int32()),
                                                               pa.array(["a", "b", "c"])), pa.array(["4", "5", "6"])],
                               schema=schema)]
    with ipc.new_stream(path, schema, options=ipc.IpcWriteOptions(emit_dictionary_deltas=True)) as w:
        for b in batches:
            w.write_batch(b)
    assert outcome(read(path, 64 * MIB)) == ["a", "b", "a", "a", "b", "c"]


def test_control_a_stream_cut_mid_batch_is_still_truncated(tmp_path):
    path = tmp_path / "cut.arrow"
    write_stream(path, [GOOD, GOOD])
    data = path.read_bytes()
    path.write_bytes(data[:len(data) - 100])
    items = read(path, 64 * MIB)
    assert outcome(items) == GOOD_TEXTS + ["row 11: truncated"]


def test_a_parquet_file_of_many_columns_is_read_in_linear_time(tmp_path):
    """15,000 columns of two rows (3 MB): the check for a column named twice counted every name in a list
    rebuilt for each of them (50,000 columns, 11 MB: 296 s; here ~30 s). Now ~1 s; the columns named twice are
    still refused (control in tests/test_readers_hostile_cells.py)."""
    import time

    path = tmp_path / "many.parquet"
    column = pa.array(["a", "b"])
    pq.write_table(pa.table({"text": ["hello", "world"]} | {f"c{i}": column for i in range(15_000)}), path)
    start = time.perf_counter()
    first = next(rows_module.parquet_rows(path, 64 * MIB))
    assert first.data is not None and first.data["text"] == "hello"
    assert time.perf_counter() - start < 8, time.perf_counter() - start
