"""Parquet files of many small row groups are read a run of groups at a time (`parquet_rows.read_run`): one
pyarrow reader for each of 30,000 one-row groups cost ~1 ms a group (37 s for the file, a hostile-input probe; the
rows measured and decoded one batch a group too). Rows, their numbers and the per-group damage rule stay as they
were: a damaged page loses the rest of its own row group only, whichever run it is in."""

from __future__ import annotations

from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from tasks.data.formats import parquet_rows as rows_module
from tasks.data.formats.parquet_pages import chunk_pages


def small_groups(path: Path, sizes: list[int], codec: str = "zstd") -> list[str]:
    """A file whose row groups hold `sizes` rows each; returns the texts in order."""
    texts, schema = [], pa.schema([("text", pa.string()), ("n", pa.int64())])
    with pq.ParquetWriter(path, schema, compression=codec) as writer:
        for g, size in enumerate(sizes):
            batch = [f"group {g} row {k} " + "word " * (k % 7) for k in range(size)]
            writer.write_table(pa.table({"text": batch, "n": list(range(len(texts), len(texts) + size))}, schema))
            texts += batch
    return texts


@pytest.fixture
def readers(monkeypatch) -> list[int]:
    """Counts the pyarrow readers `parquet_rows` opens (one `iter_batches` each)."""
    opened: list[int] = []
    original = pq.ParquetFile.iter_batches

    def counted(self, *args, **kwargs):
        opened.append(len(kwargs.get("row_groups") or []))
        return original(self, *args, **kwargs)
    monkeypatch.setattr(pq.ParquetFile, "iter_batches", counted)
    return opened


def test_one_row_groups_are_read_by_a_reader_a_run(tmp_path, readers):
    path = tmp_path / "tiny.parquet"
    texts = small_groups(path, [1] * 3000 + [5] * 40 + [2000, 1])
    rows = list(rows_module.parquet_rows(path, 1 << 20))
    assert [r.number for r in rows] == list(range(1, len(texts) + 1))
    assert [r.data["text"] for r in rows] == texts and [r.data["n"] for r in rows] == list(range(len(texts)))
    assert pq.read_table(path).column("text").to_pylist() == texts
    # 3,000 + 40 + 2 readers before; a run holds up to 1,024 rows, a group of 2,000 is read alone
    assert len(readers) <= 7 and max(readers) == rows_module.RUN_ROWS


def test_groups_whose_pages_are_large_are_read_alone(tmp_path, readers, monkeypatch):
    path = tmp_path / "wide.parquet"
    texts = small_groups(path, [3] * 12)
    monkeypatch.setattr(rows_module, "BATCH_BYTES", 1)     # every group's pages already fill a run's budget
    assert [r.data["text"] for r in rows_module.parquet_rows(path, 1 << 20)] == texts
    assert readers == [1] * 12


@pytest.mark.parametrize("damaged", [0, 17, 39])
def test_a_damaged_page_inside_a_run_loses_only_its_own_group(tmp_path, damaged):
    path = tmp_path / "damaged.parquet"
    texts = small_groups(path, [3] * 40)
    meta = pq.ParquetFile(path).metadata.row_group(damaged).column(0)
    with path.open("rb") as handle:
        pages = list(chunk_pages(handle, meta, path.stat().st_size))
    data = bytearray(path.read_bytes())
    for page in pages:          # the payload garbled, the headers intact: pyarrow fails while decompressing
        data[page.start:page.start + page.compressed] = b"\x17" * page.compressed
    path.write_bytes(bytes(data))
    rows = list(rows_module.parquet_rows(path, 1 << 20))
    lost = [r for r in rows if r.issue]
    first, last = 3 * damaged + 1, 3 * damaged + 3
    assert [(r.number, r.last, r.group, r.issue) for r in lost] == [(first, last, damaged, "unreadable_file")]
    kept = [r for r in rows if not r.issue]
    assert [r.number for r in kept] == [n for n in range(1, 121) if not first <= n <= last]
    assert [r.data["text"] for r in kept] == [t for n, t in enumerate(texts, 1) if not first <= n <= last]
