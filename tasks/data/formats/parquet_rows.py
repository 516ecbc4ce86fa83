"""A Parquet file's rows, streamed and measured: what ingest's Parquet reader and prefer_data's Parquet sources
share (tasks/data/formats/columnar.py, tasks/data/curation/preference.py). Memory holds one batch of a row group,
and a row over the caller's cap is reported by its size, never decoded. What pyarrow will decompress is judged by
the pages' own headers (tasks/data/formats/parquet_pages.py), not only by the footer, which may lie.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from typing import Any, BinaryIO, Iterator

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from tasks.data.formats.parquet_pages import DICTIONARY_PAGE, HeaderError, Page, chunk_pages, first_value_over

BATCH_ROWS = 1024
BATCH_BYTES = 64 << 20  # a batch whose values decode to more is turned into rows one at a time
PAGE_BYTES = 1 << 30    # a page decompressing to more is refused whatever its values (see `oversized_page`)
SCAN_BYTES = 64 << 20   # a page decompressing to more (or to twice the cap) is checked for a value over the cap


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
    page: str = ""                     # a row group refused by its page headers: which page, and why

    @property
    def group_note(self) -> str:
        """'' for a row measured by its own values; for a row group refused from the file's metadata (one entry
        stands for its rows), which rows and how they were measured, to append to a record_too_large reason."""
        if self.issue != "record_too_large" or not self.last:
            return ""
        if self.page:
            return f" (rows {self.number}-{self.last}, row group {self.group}: {self.page}; not read)"
        return (f" (rows {self.number}-{self.last}, row group {self.group}: {self.size:,} bytes a row uncompressed "
                "by the file's metadata; not decompressed)")


def parquet_rows(path: Path, cap: int) -> Iterator[ParquetRow]:
    """The rows of a Parquet file, row group by row group in batches, for any stage's Parquet source. Text columns
    are read dictionary-encoded and every row is measured before it is decoded (nested lists and structs by their
    strings): a row over `cap` bytes is `record_too_large` unread, and a batch over BATCH_BYTES is decoded a row
    at a time — a 2.7 KB file whose 1,000 rows all point at one 5 MB dictionary value decoded 5 GB in one batch
    before. A row group whose footer says its rows decompress to more than the cap (`oversized_group`) is one
    `record_too_large` entry (`last`: its last row), never decompressed, and so is one with a page over
    SCAN_BYTES that holds a value over the cap (by its header, or streamed a chunk at a time) or a page over
    PAGE_BYTES (`oversized_page`: the footer may lie, the page headers are what pyarrow allocates by). A damaged
    row group, or one whose page headers cannot be decoded, is one `unreadable_file` row (the other groups are
    read)."""
    try:
        schema = pq.read_schema(path)
        pf = pq.ParquetFile(path, read_dictionary=dictionary_columns(schema, pq.read_metadata(path).schema))
    except Exception as exc:  # pyarrow raises several types for a damaged file
        yield ParquetRow(0, None, "unreadable_file", error=exc)
        return
    # counted once: `schema.names` builds a new list at each call, and counting each name in it took 296 s
    # for an 11 MB file of 50,000 columns
    twice = sorted(n for n, k in Counter(schema.names).items() if k > 1)
    if twice:       # one would silently win (pyarrow's own `read_table` refuses such a file)
        yield ParquetRow(0, None, "unreadable_file", error=ValueError(f"column(s) {twice} appear more than once"))
        return
    row, group = 0, 0
    while group < pf.metadata.num_row_groups:
        run, rows, held = [], 0, 0      # consecutive small groups read by one pyarrow reader (`RUN_ROWS`)
        while group < pf.metadata.num_row_groups and rows < RUN_ROWS:
            size = pf.metadata.row_group(group).num_rows
            refused, pages = refused_group(path, pf, group, row + rows, cap)
            if refused is None and run and held + pages > BATCH_BYTES:
                break           # (its pages are read again with the next run: a group this large is rare)
            if refused is not None:
                if not run:
                    yield refused
                    row, group = row + size, group + 1
                break
            run.append((group, size))
            rows, held, group = rows + size, held + pages, group + 1
        if run:
            yield from read_run(pf, run, row, cap)
            row += rows


RUN_ROWS = BATCH_ROWS   # row groups are read together until they hold this many rows
# (one reader for each of 30,000 one-row groups took 37 s: ~1 ms of pyarrow's set-up and of measuring each batch)


def read_run(pf: pq.ParquetFile, run: list[tuple[int, int]], first: int, cap: int, skip: int = 0
             ) -> Iterator[ParquetRow]:
    """The rows of the row groups `run` ((group, rows) pairs, consecutive, checked by `refused_group`), the first
    numbered `first` + 1, `skip` of them not yielded. A damaged page (bad compression, bad encoding) inside an
    intact footer loses the rest of its row group, one `unreadable_file` entry standing for it; the other groups
    are read: after a failure in a run of several, from the group holding the next row, one at a time."""
    row, batches = first, pf.iter_batches(batch_size=BATCH_ROWS, row_groups=[g for g, _ in run])
    while True:
        try:
            batch = next_rows(batches)
            sizes = None if batch is None else row_bytes(batch)
        except Exception as exc:  # pyarrow raises several types
            if len(run) == 1:
                yield ParquetRow(row + 1, None, "unreadable_file", error=exc, last=first + run[0][1], group=run[0][0])
                return
            begin = first
            for k, (group, size) in enumerate(run):
                if begin + size > row:
                    yield from read_run(pf, [(group, size)], begin, cap, skip=row - begin if k else row - first)
                    for later, n in run[k + 1:]:
                        yield from read_run(pf, [(later, n)], begin + size, cap)
                        begin += n
                    return
                begin += size
            return
        if batch is None:
            return
        for n, data, unread in batch_rows(batch, sizes, cap):
            row += 1
            if row - first > skip:
                yield ParquetRow(row, None, "record_too_large", size=n) if data is None else \
                    ParquetRow(row, data, unread=unread or None)


def next_rows(batches: Iterator[pa.RecordBatch]) -> pa.RecordBatch | None:
    """The reader's next batches, up to BATCH_ROWS rows, as one batch; None at its end. (pyarrow gives each row
    group a batch of its own: a run's one-row groups, measured and decoded one by one, took ~0.3 ms each.)"""
    got, rows = [], 0
    while rows < BATCH_ROWS and (batch := next(batches, None)) is not None:
        got.append(batch)
        rows += batch.num_rows
    if len(got) <= 1 or rows == 0:
        return got[0] if got else None
    return pa.Table.from_batches(got).combine_chunks().to_batches()[0]


def refused_group(path: Path, pf: pq.ParquetFile, group: int, start: int, cap: int) -> tuple[ParquetRow | None, int]:
    """The one entry standing for a row group that is not read (its first row `start` + 1), or None: over the
    cap by its footer (`oversized_group`) or by its page headers (`oversized_page`), or a page header that
    cannot be decoded (`unreadable_file`, as pyarrow would fail on it too); and the bytes its pages hold at once
    when read (0 when refused)."""
    meta = pf.metadata.row_group(group)
    first, last = start + 1, start + meta.num_rows
    per_row = oversized_group(meta, cap)
    if per_row:
        return ParquetRow(first, None, "record_too_large", size=per_row, last=last, group=group), 0
    try:
        page, page_size = oversized_page(path, pf, group, cap)
    except (HeaderError, OSError) as exc:
        return ParquetRow(first, None, "unreadable_file", error=exc, last=last, group=group), 0
    if page:
        return ParquetRow(first, None, "record_too_large", size=page_size, last=last, group=group, page=page), 0
    return None, page_size


def oversized_group(meta: pq.RowGroupMetaData, cap: int) -> int:
    """Bytes a row of this row group decompresses to on average, by the footer's column-chunk sizes, when that is
    over the cap (else 0): such a group is refused without decompressing a page.

    The row check in `parquet_rows` measures decoded values, but pyarrow decompresses a whole page first: a 19 KB
    zstd file holding one 600 MB string reached 1.86 GB before its row was measured. The footer records each
    column chunk's uncompressed size, so a group averaging more than the cap a row holds a row over it; the
    threshold is twice the cap plus 1 MiB, as uncompressed pages also hold headers, levels and length prefixes
    the row check does not count. Not caught here: one huge value among many small rows (the average stays
    low), and a hand-made footer that understates the sizes — `oversized_page` reads the page headers for both."""
    rows = max(meta.num_rows, 1)
    total = sum(max(meta.column(c).total_uncompressed_size, 0) for c in range(meta.num_columns))
    return -(-total // rows) if total > rows * 2 * cap + (1 << 20) else 0


def oversized_page(path: Path, pf: pq.ParquetFile, group: int, cap: int) -> tuple[str, int]:
    """Why this row group cannot be read within the memory bound, by its pages' own headers (what pyarrow
    allocates by) and values, and the size that says so; when it can, "" and the bytes its pages hold at once.

    pyarrow decompresses a page whole before any row of it is measured: one 300 MB string among 50 short rows
    (a few KB of zstd) kept the row group's average under the cap in `oversized_group` and was decompressed
    (950 MB under a 64 MiB cap), and a footer understating its sizes passed that check whatever the pages held.
    A data page over SCAN_BYTES that could hold a value over the cap is measured first (`page_verdict`); a page
    over PAGE_BYTES (or twice the cap, if more) is refused as it stands, as a page is only ever read whole. Not
    bounded here: a Snappy or LZ4 page (pyarrow cannot stream them; their ratio is ~20:1 and ~250:1) and a
    DELTA-encoded one are only held to PAGE_BYTES."""
    meta, bound = pf.metadata.row_group(group), max(PAGE_BYTES, 2 * cap + (1 << 20))
    size, together = path.stat().st_size, 0
    with path.open("rb") as handle:
        for c in range(meta.num_columns):
            column, levels = meta.column(c), (pf.schema.column(c).max_repetition_level,
                                              pf.schema.column(c).max_definition_level)
            largest = {DICTIONARY_PAGE: 0, 0: 0}
            for page in chunk_pages(handle, column, size):
                why, n = page_verdict(handle, page, column, levels, cap)
                if not why and page.uncompressed > bound:
                    why, n = f"over the {bound:,}-byte page bound", page.uncompressed
                if why:
                    held = "dictionary page" if page.kind == DICTIONARY_PAGE else "page"
                    return (f"column {column.path_in_schema!r} has a {held} of {page.uncompressed:,} bytes "
                            f"uncompressed, {why}"), n
                kind = DICTIONARY_PAGE if page.kind == DICTIONARY_PAGE else 0
                largest[kind] = max(largest[kind], page.uncompressed)
            # pyarrow holds every column's dictionary and current page at once: thirty 60 MB pages, each under
            # the page bounds (71 KB of zstd), took 5.8 GB before the row they make up was refused
            together += largest[DICTIONARY_PAGE] + largest[0]
            if together > bound:
                return (f"columns up to {column.path_in_schema!r} hold pages of {together:,} bytes uncompressed "
                        f"that are read at once (each column's dictionary and largest page), over the "
                        f"{bound:,}-byte page bound"), together
    return "", together


def page_verdict(handle: BinaryIO, page: Page, column: pq.ColumnChunkMetaData,
                 levels: tuple[int, int], cap: int) -> tuple[str, int]:
    """Why a data page over SCAN_BYTES and over twice the cap (plus 1 MiB, as `oversized_group` allows) holds a
    value over the cap, and that value's size; ("", 0) if it does not or cannot be told. Such a page is refused
    with its row group: its good rows cannot be reached without decompressing it. A page of more than `cap`
    bytes (plus a 4-byte length) a value has one, by its header alone; else a page of text values is
    decompressed as a stream, a chunk at a time, and each value's length read (`first_value_over`). A smaller
    page is read as before (its rows measured one by one, only those over the cap refused: pyarrow writes 1 MiB
    pages, and a small cap must not cost a group its good rows), and so is a dictionary page, which may hold
    values no row uses (its values are measured per row, `row_bytes`)."""
    if page.kind == DICTIONARY_PAGE or page.uncompressed <= max(SCAN_BYTES, 2 * cap + (1 << 20)):
        return "", 0    # as cheap to read as a row the cap allows: its rows are measured one by one, as before
    if page.uncompressed > max(page.values, 1) * (cap + 4) + (1 << 20):
        return f"{page.values:,} values, so one is over the cap", page.uncompressed
    if column.physical_type != "BYTE_ARRAY":
        return "", 0
    n = first_value_over(handle, page, column.compression, levels, cap)
    return (f"holding a value of {n:,} bytes (measured as the page streamed; not decompressed whole)", n) if n \
        else ("", 0)


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


def dictionary_columns(schema: pa.Schema, leaves: pq.ParquetSchema) -> list[str]:
    """The columns read dictionary-encoded, so that a value many rows repeat is held once and measured before it
    is decoded: top-level text columns by name, and the text leaves inside lists and structs by their Parquet
    path (`chat.list.element.content`). Nested leaves were decoded whole: 1.4 KB of Parquet whose 200 rows each
    list one 5 MiB dictionary value took 2.3 GB (1,024 rows a batch: 5 GB). Leaves under a map are left as they
    were (their rows are measured by buffer size)."""
    nested = {f.name for f in schema if _nests(f.type) and not _has_map(f.type)}
    paths = [leaves.column(i) for i in range(len(leaves))]
    return [f.name for f in schema if _is_text(f.type)] + [
        c.path for c in paths if "." in c.path and c.path.split(".")[0] in nested
        and c.physical_type == "BYTE_ARRAY" and c.logical_type.type in ("STRING", "NONE")]


def _nests(t: pa.DataType) -> bool:
    return pa.types.is_list(t) or pa.types.is_large_list(t) or pa.types.is_fixed_size_list(t) or \
        pa.types.is_struct(t)


def _has_map(t: pa.DataType) -> bool:
    if pa.types.is_map(t):
        return True
    if pa.types.is_struct(t):
        return any(_has_map(f.type) for f in t)
    return _nests(t) and _has_map(t.value_type)


def _is_text(t: pa.DataType) -> bool:
    return pa.types.is_string(t) or pa.types.is_large_string(t) or pa.types.is_binary(t) or \
        pa.types.is_large_binary(t)


def batch_rows(batch: pa.RecordBatch, sizes: list[int], cap: int
               ) -> Iterator[tuple[int, dict[str, Any] | None, dict[str, str]]]:
    """Per row of `batch` (measured by `row_bytes`): its size, its values (None when over `cap`: never decoded)
    and the columns that could not be decoded. A batch over BATCH_BYTES, or holding a row over the cap, is decoded
    a row at a time."""
    whole = decode_rows(batch) if sum(sizes) <= BATCH_BYTES and max(sizes, default=0) <= cap else None
    for i, n in enumerate(sizes):
        if n > cap:
            yield n, None, {}
            continue
        (data,), (unread,) = ([whole[0][i]], [whole[1][i]]) if whole is not None else decode_rows(batch.slice(i, 1))
        yield n, data, unread


def row_bytes(batch: pa.RecordBatch) -> list[int]:
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
