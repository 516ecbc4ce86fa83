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

from specs.ingest import FilesSource
from tasks.data.formats.objects import from_object
from tasks.data.formats.parquet_rows import batch_rows, parquet_rows, row_bytes
from tasks.data.formats.streams import Stream
from tasks.data.records import Bad, Doc

ARROW_FILE_MAGIC = b"ARROW1"
ARROW_STREAM_MAGIC = b"\xff\xff\xff\xff"  # the continuation marker that opens every IPC stream message


def read_parquet(path: Path, shown: str, src: FilesSource, root: Path, cap: int) -> Iterator[Doc | Bad]:
    """Ingest's records of a Parquet file (`parquet_rows`), each row one object."""
    for r in parquet_rows(path, cap):
        if r.issue == "unreadable_file" and r.number == 0:
            yield Bad(shown, "", "unreadable_file", f"not a readable Parquet file: {r.error}")
        elif r.issue == "unreadable_file":
            yield Bad(shown, f"row {r.number}", "unreadable_file", f"rows {r.number}-{r.last} (row group "
                      f"{r.group}) could not be read: {r.error.__class__.__name__}: {r.error}")
        elif r.issue == "record_too_large":
            yield Bad(shown, f"row {r.number}", "record_too_large", f"{r.size:,} bytes of text columns > the "
                      f"{cap:,}-byte cap (ingest.max_record_bytes){r.group_note}")
        else:
            yield _record(r.data, r.unread, path, shown, f"row {r.number}", src, root)


def _record(obj: dict, unread: dict[str, str] | None, path: Path, shown: str, where: str, src: FilesSource,
            root: Path) -> Doc | Bad:
    """A row as ingest's record; a row whose text, id or media column could not be decoded (`decode_rows`) is
    `invalid_utf8` (bytes that are no UTF-8) or `wrong_type` (a value outside Python's range); another column that
    could not be is left out of its meta."""
    fields = src.fields
    failed = [f for f in (fields.text, fields.id, fields.media) if f is not None and unread and f in unread]
    if failed:
        error = unread[failed[0]]
        reason = "invalid_utf8" if error.startswith("UnicodeDecodeError") else "wrong_type"
        return Bad(shown, where, reason, f"column {failed[0]!r} could not be read: {error}")
    return from_object(obj, path, shown, where, src, root, "")


def read_arrow(stream: Stream, path: Path, shown: str, src: FilesSource, root: Path,
               cap: int = 1 << 62) -> Iterator[Doc | Bad]:
    """An Arrow IPC file (`ARROW1` magic; needs the path) or stream (what `Dataset.save_to_disk` writes). Rows
    are measured before they are decoded (`row_bytes`), as Parquet's are: a row over `cap` is `record_too_large`
    unread. Arrow had no cap: a 300 MB string (10 KB of zstd) became a document, at 640 MB."""
    if stream.head(6) == ARROW_FILE_MAGIC:
        if stream.compression is not None:
            yield Bad(shown, "", "unsupported_format", f"an Arrow IPC file inside {stream.compression} needs random "
                      "access; decompress it first (the IPC stream format can be read compressed)")
            return
        yield from _arrow_file(path, shown, src, root, cap)
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
        for item in _batch(batch, row, path, shown, src, root, cap):
            row += 1
            yield item
    if stream.damage is not None:  # the compressed container broke exactly between two messages
        yield Bad(shown, f"row {row + 1}", "truncated", f"{stream.compression} stream damaged after row {row}: "
                  f"{stream.damage}")


def _arrow_file(path: Path, shown: str, src: FilesSource, root: Path, cap: int) -> Iterator[Doc | Bad]:
    try:
        reader = ipc.open_file(path)
    except (pa.ArrowException, OSError) as exc:
        yield Bad(shown, "", "unreadable_file", f"not a readable Arrow IPC file: {exc}")
        return
    row = 0
    for i in range(reader.num_record_batches):
        try:
            items = list(_batch(reader.get_batch(i), row, path, shown, src, root, cap))
        except (pa.ArrowException, OSError) as exc:
            yield Bad(shown, f"row {row + 1}", "unreadable_file", f"record batch {i} could not be read: {exc}; "
                      "the rest of the file is lost")
            return
        row += len(items)
        yield from items


def _batch(batch: pa.RecordBatch, before: int, path: Path, shown: str, src: FilesSource, root: Path,
           cap: int) -> Iterator[Doc | Bad]:
    """The records of one Arrow batch whose first row is row `before` + 1; a row over `cap` is refused unread."""
    for row, (n, obj, unread) in enumerate(batch_rows(batch, row_bytes(batch), cap), before + 1):
        if obj is None:
            yield Bad(shown, f"row {row}", "record_too_large", f"{n:,} bytes of text columns > the {cap:,}-byte cap "
                      "(ingest.max_record_bytes); not decoded")
        else:
            yield _record(obj, unread, path, shown, f"row {row}", src, root)
