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
    last: int = 0                      # unreadable_file inside a row group: the group's last row
    group: int = 0                     # ... and the group


def parquet_rows(path: Path, cap: int) -> Iterator[ParquetRow]:
    """The rows of a Parquet file, row group by row group in batches, for any stage's Parquet source. Text columns
    are read dictionary-encoded and every row is measured before it is decoded (nested lists and structs by their
    strings): a row over `cap` bytes is `record_too_large` unread, and a batch over BATCH_BYTES is decoded a row
    at a time — a 2.7 KB file whose 1,000 rows all point at one 5 MB dictionary value decoded 5 GB in one batch
    before. A damaged row group is one `unreadable_file` row (the other groups are read)."""
    try:
        texts = [f.name for f in pq.read_schema(path) if _is_text(f.type)]
        pf = pq.ParquetFile(path, read_dictionary=texts)
    except Exception as exc:  # pyarrow raises several types for a damaged file
        yield ParquetRow(0, None, "unreadable_file", error=exc)
        return
    row = 0
    for group in range(pf.metadata.num_row_groups):
        start, size = row, pf.metadata.row_group(group).num_rows
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
            whole = batch.to_pylist() if sum(sizes) <= BATCH_BYTES and max(sizes, default=0) <= cap else None
            for i, n in enumerate(sizes):
                row += 1
                if n > cap:
                    yield ParquetRow(row, None, "record_too_large", size=n)
                    continue
                yield ParquetRow(row, whole[i] if whole is not None else batch.slice(i, 1).to_pylist()[0])
        row = start + size


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
