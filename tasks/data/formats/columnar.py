"""Parquet, and Arrow IPC (the `data-*.arrow` files of a Hugging Face `save_to_disk` folder), in batches.

Parquet and the Arrow *file* format need random access, so they are read from the path; the Arrow *stream*
format (what `datasets` writes) is read from the (possibly decompressed) stream, batch by batch. A batch that
cannot be read ends the file: the rows before it are kept and one entry stands for the rest.
"""

from __future__ import annotations

from pathlib import Path
from typing import Iterator

import pyarrow as pa
import pyarrow.ipc as ipc
import pyarrow.parquet as pq

from specs.ingest import FilesSource
from tasks.data.formats.objects import from_object
from tasks.data.formats.streams import Stream
from tasks.data.records import Bad, Doc

ARROW_FILE_MAGIC = b"ARROW1"
ARROW_STREAM_MAGIC = b"\xff\xff\xff\xff"  # the continuation marker that opens every IPC stream message
BATCH_ROWS = 1024


def read_parquet(path: Path, shown: str, src: FilesSource, root: Path) -> Iterator[Doc | Bad]:
    try:
        pf = pq.ParquetFile(path)
    except Exception as exc:  # pyarrow raises several types for a damaged file
        yield Bad(shown, "", "unreadable_file", f"not a readable Parquet file: {exc}")
        return
    row = 0
    for group in range(pf.metadata.num_row_groups):
        start, size = row, pf.metadata.row_group(group).num_rows
        batches = pf.iter_batches(batch_size=BATCH_ROWS, row_groups=[group])
        while True:
            try:
                objs = next(batches, None)
                objs = None if objs is None else objs.to_pylist()
            except Exception as exc:  # a damaged page (bad compression, bad encoding) inside an intact footer
                # The rest of this row group is lost; one entry stands for it, the other row groups are read.
                yield Bad(shown, f"row {row + 1}", "unreadable_file", f"rows {row + 1}-{start + size} (row group "
                          f"{group}) could not be read: {exc.__class__.__name__}: {exc}")
                break
            if objs is None:
                break
            for obj in objs:
                row += 1
                yield from_object(obj, path, shown, f"row {row}", src, root, "")
        row = start + size


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
