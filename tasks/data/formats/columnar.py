"""Parquet, and Arrow IPC (the `data-*.arrow` files of a Hugging Face `save_to_disk` folder), in batches.

Parquet and the Arrow *file* format need random access, so they are read from the path; the Arrow *stream*
format (what `datasets` writes) is read from the (possibly decompressed) stream, batch by batch. A batch that
cannot be read ends the file: the rows before it are kept and one entry stands for the rest.
"""

from __future__ import annotations

from pathlib import Path
from typing import Iterator

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.ipc as ipc
import pyarrow.parquet as pq

from specs.ingest import FilesSource
from tasks.data.formats.objects import from_object
from tasks.data.formats.streams import Stream
from tasks.data.records import Bad, Doc

ARROW_FILE_MAGIC = b"ARROW1"
ARROW_STREAM_MAGIC = b"\xff\xff\xff\xff"  # the continuation marker that opens every IPC stream message
BATCH_ROWS = 1024
BATCH_BYTES = 64 << 20  # a batch whose values decode to more is turned into rows one at a time


def read_parquet(path: Path, shown: str, src: FilesSource, root: Path, cap: int) -> Iterator[Doc | Bad]:
    """Row groups in batches. Text columns are read dictionary-encoded and measured before they are decoded: a
    2.7 KB file whose 1,000 rows all point at one 5 MB dictionary value decoded 5 GB in one batch before; now a
    row over `cap` is `record_too_large` unread, and a batch over BATCH_BYTES is decoded a row at a time."""
    try:
        texts = [f.name for f in pq.read_schema(path) if _is_text(f.type)]
        pf = pq.ParquetFile(path, read_dictionary=texts)
    except Exception as exc:  # pyarrow raises several types for a damaged file
        yield Bad(shown, "", "unreadable_file", f"not a readable Parquet file: {exc}")
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
                yield Bad(shown, f"row {row + 1}", "unreadable_file", f"rows {row + 1}-{start + size} (row group "
                          f"{group}) could not be read: {exc.__class__.__name__}: {exc}")
                break
            if batch is None:
                break
            whole = batch.to_pylist() if sum(sizes) <= BATCH_BYTES and max(sizes, default=0) <= cap else None
            for i, n in enumerate(sizes):
                row += 1
                if n > cap:
                    yield Bad(shown, f"row {row}", "record_too_large", f"{n:,} bytes of text columns > the "
                              f"{cap:,}-byte cap (ingest.max_record_bytes)")
                    continue
                obj = whole[i] if whole is not None else batch.slice(i, 1).to_pylist()[0]
                yield from_object(obj, path, shown, f"row {row}", src, root, "")
        row = start + size


def _is_text(t: pa.DataType) -> bool:
    return pa.types.is_string(t) or pa.types.is_large_string(t) or pa.types.is_binary(t) or \
        pa.types.is_large_binary(t)


def _row_bytes(batch: pa.RecordBatch) -> list[int]:
    """Bytes each row's values decode to (text columns exactly, from their dictionary's value lengths; other
    columns their buffers' share), without decoding any."""
    total = np.zeros(batch.num_rows, dtype=np.int64)
    for column in batch.columns:
        if pa.types.is_dictionary(column.type) and _is_text(column.type.value_type):
            lengths = pc.take(pc.binary_length(column.dictionary), column.indices)
        elif _is_text(column.type):
            lengths = pc.binary_length(column)
        else:
            total += column.nbytes // max(batch.num_rows, 1)
            continue
        total += pc.fill_null(lengths, 0).to_numpy(zero_copy_only=False).astype(np.int64)
    return total.tolist()


def read_arrow(stream: Stream, path: Path, shown: str, src: FilesSource, root: Path) -> Iterator[Doc | Bad]:
    """An Arrow IPC file (`ARROW1` magic; needs the path) or stream (what `Dataset.save_to_disk` writes)."""
    if stream.head(6) == ARROW_FILE_MAGIC:
        if stream.compression is not None:
            yield Bad(shown, "", "unsupported_format", f"an Arrow IPC file inside {stream.compression} needs random "
                      "access; decompress it first (the IPC stream format can be read compressed)")
            return
        yield from _arrow_file(path, shown, src, root)
        return
    try:
        reader = ipc.open_stream(stream.buf)
    except (pa.ArrowException, OSError) as exc:
        yield Bad(shown, "", "unreadable_file", f"not a readable Arrow IPC stream: {exc}")
        return
    row = 0
    while True:
        try:
            batch = reader.read_next_batch()
        except StopIteration:
            break
        except (pa.ArrowException, OSError) as exc:
            yield Bad(shown, f"row {row + 1}", "truncated", f"Arrow stream damaged after row {row}: "
                      f"{exc.__class__.__name__}: {exc}; the rest of the file is lost")
            return
        for obj in batch.to_pylist():
            row += 1
            yield from_object(obj, path, shown, f"row {row}", src, root, "")
    if stream.damage is not None:  # the compressed container broke exactly between two messages
        yield Bad(shown, f"row {row + 1}", "truncated", f"{stream.compression} stream damaged after row {row}: "
                  f"{stream.damage}")


def _arrow_file(path: Path, shown: str, src: FilesSource, root: Path) -> Iterator[Doc | Bad]:
    try:
        reader = ipc.open_file(path)
    except (pa.ArrowException, OSError) as exc:
        yield Bad(shown, "", "unreadable_file", f"not a readable Arrow IPC file: {exc}")
        return
    row = 0
    for i in range(reader.num_record_batches):
        try:
            objs = reader.get_batch(i).to_pylist()
        except (pa.ArrowException, OSError) as exc:
            yield Bad(shown, f"row {row + 1}", "unreadable_file", f"record batch {i} could not be read: {exc}; "
                      "the rest of the file is lost")
            return
        for obj in objs:
            row += 1
            yield from_object(obj, path, shown, f"row {row}", src, root, "")
