"""A Parquet file's rows, streamed and measured: what ingest's Parquet reader and prefer_data's Parquet sources
share (tasks/data/formats/columnar.py, tasks/data/curation/preference.py). Memory holds one batch of a row group,
and a row over the caller's cap is reported by its size, never decoded.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterator

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

BATCH_ROWS = 1024
BATCH_BYTES = 64 << 20  # a batch whose values decode to more is turned into rows one at a time


@dataclass(frozen=True)
class ParquetRow:
    """One row of `parquet_rows`: its values (`data`), or why it has none (`issue`)."""
    number: int                        # 1-based; 0 stands for the whole file (it cannot be opened)
    data: dict[str, Any] | None
    issue: str | None = None           # record_too_large | unreadable_file
    size: int = 0                      # record_too_large: the bytes the row's values decode to
    error: Exception | None = None     # unreadable_file: what pyarrow raised
    last: int = 0                      # unreadable_file inside a row group, or a row group refused from its
    #                                    metadata (record_too_large, `size` a row on average): the group's last row
    unread: dict[str, str] | None = None    # columns whose value could not be decoded (left out of `data`)
    group: int = 0                     # ... and the group

    @property
    def group_note(self) -> str:
        """'' for a row measured by its own values; for a row group refused from the file's metadata (one entry
        stands for its rows), which rows and how they were measured, to append to a record_too_large reason."""
        if self.issue != "record_too_large" or not self.last:
            return ""
        return (f" (rows {self.number}-{self.last}, row group {self.group}: {self.size:,} bytes a row uncompressed "
                "by the file's metadata; not decompressed)")


def parquet_rows(path: Path, cap: int) -> Iterator[ParquetRow]:
    """The rows of a Parquet file, row group by row group in batches, for any stage's Parquet source. Text columns
    are read dictionary-encoded and every row is measured before it is decoded (nested lists and structs by their
    strings): a row over `cap` bytes is `record_too_large` unread, and a batch over BATCH_BYTES is decoded a row
    at a time — a 2.7 KB file whose 1,000 rows all point at one 5 MB dictionary value decoded 5 GB in one batch
    before. A row group whose footer says its rows decompress to more than the cap (`oversized_group`) is one
    `record_too_large` entry (`last`: its last row), never decompressed. A damaged row group is one
    `unreadable_file` row (the other groups are read)."""
    try:
        schema = pq.read_schema(path)
        texts = [f.name for f in schema if _is_text(f.type)]
        pf = pq.ParquetFile(path, read_dictionary=texts)
    except Exception as exc:  # pyarrow raises several types for a damaged file
        yield ParquetRow(0, None, "unreadable_file", error=exc)
        return
    twice = sorted({n for n in schema.names if schema.names.count(n) > 1})
    if twice:       # one would silently win (pyarrow's own `read_table` refuses such a file)
        yield ParquetRow(0, None, "unreadable_file", error=ValueError(f"column(s) {twice} appear more than once"))
        return
    row = 0
    for group in range(pf.metadata.num_row_groups):
        start, size = row, pf.metadata.row_group(group).num_rows
        per_row = oversized_group(pf.metadata.row_group(group), cap)
        if per_row:
            yield ParquetRow(start + 1, None, "record_too_large", size=per_row, last=start + size, group=group)
            row = start + size
            continue
        batches = pf.iter_batches(batch_size=BATCH_ROWS, row_groups=[group])
        while True:
            try:
                batch = next(batches, None)
                sizes = None if batch is None else _row_bytes(batch)
            except Exception as exc:  # a damaged page (bad compression, bad encoding) inside an intact footer
                # The rest of this row group is lost; one entry stands for it, the other row groups are read.
                yield ParquetRow(row + 1, None, "unreadable_file", error=exc, last=start + size, group=group)
                break
            if batch is None:
                break
            whole = decode_rows(batch) if sum(sizes) <= BATCH_BYTES and max(sizes, default=0) <= cap else None
            for i, n in enumerate(sizes):
                row += 1
                if n > cap:
                    yield ParquetRow(row, None, "record_too_large", size=n)
                    continue
                (data,), (unread,) = ([whole[0][i]], [whole[1][i]]) if whole is not None else \
                    decode_rows(batch.slice(i, 1))
                yield ParquetRow(row, data, unread=unread or None)
        row = start + size


def oversized_group(meta: pq.RowGroupMetaData, cap: int) -> int:
    """Bytes a row of this row group decompresses to on average, by the footer's column-chunk sizes, when that is
    over the cap (else 0): such a group is refused without decompressing a page.

    The row check in `parquet_rows` measures decoded values, but pyarrow decompresses a whole page first: a 19 KB
    zstd file holding one 600 MB string reached 1.86 GB before its row was measured. The footer records each
    column chunk's uncompressed size, so a group averaging more than the cap a row holds a row over it; the
    threshold is twice the cap plus 1 MiB, as uncompressed pages also hold headers, levels and length prefixes
    the row check does not count. Not caught here: one huge value among many small rows (the average stays
    low), and a hand-made footer that understates the sizes — both are decompressed a page at a time as before
    and the row is then refused by the row check."""
    rows = max(meta.num_rows, 1)
    total = sum(max(meta.column(c).total_uncompressed_size, 0) for c in range(meta.num_columns))
    return -(-total // rows) if total > rows * 2 * cap + (1 << 20) else 0


_UNREAD = object()


def decode_rows(batch: pa.RecordBatch) -> tuple[list[dict[str, Any]], list[dict[str, str]]]:
    """The rows of `batch` as dicts, and per row the columns whose value could not be decoded (column → what was
    raised). pyarrow does not validate on read: a string column may hold invalid UTF-8 (a writer that does not
    check, a damaged uncompressed page, an Arrow stream's corrupt offsets), and a timestamp or date may lie outside
    Python's range (Postgres' `infinity`, INT64 max). Such a value is left out of its row and the rest is read;
    `to_pylist` raised for the whole batch, and one file stopped the stage."""
    try:
        return batch.to_pylist(), [{} for _ in range(batch.num_rows)]
    except Exception:  # noqa: BLE001 (UnicodeDecodeError, OverflowError, ValueError, SystemError: the cell's)
        pass
    rows: list[dict[str, Any]] = [{} for _ in range(batch.num_rows)]
    unread: list[dict[str, str]] = [{} for _ in range(batch.num_rows)]
    for name, column in zip(batch.schema.names, batch.columns):
        try:
            values = column.to_pylist()
        except Exception:  # noqa: BLE001
            values = [_cell(column, i, unread[i], name) for i in range(len(column))]
        for row, value in zip(rows, values):
            if value is not _UNREAD:
                row[name] = value
    return rows, unread


def _cell(column: pa.Array, i: int, unread: dict[str, str], name: str) -> Any:
    try:
        return column[i].as_py()
    except Exception as exc:  # noqa: BLE001
        unread[name] = f"{exc.__class__.__name__}: {str(exc)[:200]}"
        return _UNREAD


def _is_text(t: pa.DataType) -> bool:
    return pa.types.is_string(t) or pa.types.is_large_string(t) or pa.types.is_binary(t) or \
        pa.types.is_large_binary(t)


def _row_bytes(batch: pa.RecordBatch) -> list[int]:
    """Bytes each row's values decode to (text exactly, from their dictionary's value lengths; inside lists and
    structs too; other values their buffers' share), without decoding any."""
    total = np.zeros(batch.num_rows, dtype=np.int64)
    for column in batch.columns:
        total += _value_bytes(column)
    return total.tolist()


def _value_bytes(arr: pa.Array) -> np.ndarray:
    """Per element of `arr`: the bytes its value decodes to. Nested values add up their children's (a list of
    chat messages counts every message's strings), so one huge row among small ones is not averaged away."""
    t = arr.type
    if pa.types.is_dictionary(t) and _is_text(t.value_type):
        lengths = pc.take(pc.binary_length(arr.dictionary), arr.indices)
    elif _is_text(t):
        lengths = pc.binary_length(arr)
    elif pa.types.is_list(t) or pa.types.is_large_list(t) or pa.types.is_fixed_size_list(t):
        child, parents = _value_bytes(pc.list_flatten(arr)), pc.list_parent_indices(arr).to_numpy()
        return np.bincount(parents, weights=child, minlength=len(arr)).astype(np.int64)
    elif pa.types.is_struct(t):
        out = np.zeros(len(arr), dtype=np.int64)
        for field in arr.flatten():
            out += _value_bytes(field)
        return out
    else:
        return np.full(len(arr), arr.nbytes // max(len(arr), 1), dtype=np.int64)
    return pc.fill_null(lengths, 0).to_numpy(zero_copy_only=False).astype(np.int64)
