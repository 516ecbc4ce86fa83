"""Parquet, and Arrow IPC (the `data-*.arrow` files of a Hugging Face `save_to_disk` folder), in batches.

Parquet and the Arrow *file* format need random access, so they are read from the path; the Arrow *stream*
format (what `datasets` writes) is read from the (possibly decompressed) stream, batch by batch. A batch that
cannot be read ends the file: the rows before it are kept and one entry stands for the rest.
"""

from __future__ import annotations

import io
import struct
from pathlib import Path
from typing import BinaryIO, Callable, Iterator

import pyarrow as pa
import pyarrow.ipc as ipc

from specs.ingest import FilesSource
from tasks.data.formats.objects import from_object
from tasks.data.formats.parquet_rows import PAGE_BYTES, batch_rows, parquet_rows, row_bytes
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
    unread. Arrow had no cap: a 300 MB string (10 KB of zstd) became a document, at 640 MB. A record batch is
    measured by its message metadata before pyarrow reads it (`_batch_verdict`): pyarrow holds a batch whole, so
    one of 600 MB was held (740 MB peak) before its row was refused, and a body length of 2^40 was allocated."""
    if stream.head(6) == ARROW_FILE_MAGIC:
        if stream.compression is not None:
            yield Bad(shown, "", "unsupported_format", f"an Arrow IPC file inside {stream.compression} needs random "
                      "access; decompress it first (the IPC stream format can be read compressed)")
            return
        yield from _arrow_file(path, shown, src, root, cap)
        return
    framed = _Framed(stream.buf, cap)
    try:
        reader = ipc.open_stream(framed)
    except (pa.ArrowException, OSError) as exc:
        yield Bad(shown, "", "unreadable_file", f"not a readable Arrow IPC stream: {framed.stop or exc}")
        return
    row = 0
    while True:
        try:
            batch = reader.read_next_batch()
        except StopIteration:
            batch = None
        except (pa.ArrowException, OSError) as exc:
            batch = exc
        for index, rows, size, why in framed.skipped:   # met before `batch`: pyarrow does not read ahead
            yield _refused(shown, index, row, rows, size, why)
            row += rows
        framed.skipped.clear()
        if isinstance(batch, Exception) or (batch is None and framed.stop):
            yield Bad(shown, f"row {row + 1}", "truncated", f"Arrow stream damaged after row {row}: "
                      f"{framed.stop or f'{batch.__class__.__name__}: {batch}'}; the rest of the file is lost")
            return
        if batch is None:
            break
        for item in _batch(batch, row, path, shown, src, root, cap):
            row += 1
            yield item
    if stream.damage is not None:  # the compressed container broke exactly between two messages
        yield Bad(shown, f"row {row + 1}", "truncated", f"{stream.compression} stream damaged after row {row}: "
                  f"{stream.damage}")


def _refused(shown: str, index: int, before: int, rows: int, size: int, why: str) -> Bad:
    return Bad(shown, f"row {before + 1}", "record_too_large", f"record batch {index} (rows {before + 1}-"
               f"{before + max(rows, 1)}): {size:,} bytes decoded, {why} (ingest.max_record_bytes); not read")


def _arrow_file(path: Path, shown: str, src: FilesSource, root: Path, cap: int) -> Iterator[Doc | Bad]:
    try:
        reader = ipc.open_file(path)
        blocks = _footer_blocks(path)
        if len(blocks) != reader.num_record_batches:
            raise ValueError(f"the footer lists {len(blocks)} record batches, pyarrow {reader.num_record_batches}")
    except (pa.ArrowException, OSError, ValueError) as exc:
        yield Bad(shown, "", "unreadable_file", f"not a readable Arrow IPC file: {exc}")
        return
    row = 0
    with path.open("rb") as handle:
        for i, (offset, meta_length, body_length) in enumerate(blocks):
            try:
                rows, buffers, size = _file_batch_size(handle, offset, meta_length, body_length)
                why = _batch_verdict(rows, buffers, size, cap)
                if why:
                    yield _refused(shown, i, row, rows, size, why)
                    row += rows
                    continue
                items = list(_batch(reader.get_batch(i), row, path, shown, src, root, cap))
            except (pa.ArrowException, OSError, ValueError) as exc:
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


# --- Arrow IPC messages measured before pyarrow reads them -------------------------------------------------------
# pyarrow reads a record batch whole (its body, and a compressed body's buffers decompressed) before a row of it
# can be measured. A message's metadata (a small FlatBuffer ahead of its body) states the body's length, the
# batch's row count and where each buffer lies; a compressed buffer starts with its decompressed length. So a
# batch's cost is known before it is read, from the few fields below (Arrow's Message.fbs and File.fbs).

META_MAX = 64 << 20     # a message's metadata: real ones are KBs (a schema with a dataset card: tens of KB)
RECORD_BATCH, DICTIONARY_BATCH = 3, 2


def _batch_verdict(rows: int, buffers: int, size: int, cap: int) -> str:
    """Why a batch of `buffers` buffers that decodes to `size` bytes is not read, or "": over PAGE_BYTES (or twice
    the cap, if more), as a Parquet page is, or over the cap a row once each buffer's share of offsets, bitmaps
    and padding (8 bytes a row and 128 a buffer, which `row_bytes` does not count) and 1 MiB are allowed, so that
    one of its rows is over the cap."""
    bound = max(PAGE_BYTES, 2 * cap + (1 << 20))
    if size > bound:
        return f"over the {bound:,}-byte batch bound"
    rows = max(rows, 1)
    if size > rows * cap + buffers * (8 * rows + 128) + (1 << 20):
        return f"{rows:,} row(s), so one is over the {cap:,}-byte cap"
    return ""


def _num(data: bytes, fmt: str, pos: int) -> int:
    """A little-endian number at `pos`; a position outside the data is a damaged message (ValueError)."""
    if pos < 0 or pos + struct.calcsize(fmt) > len(data):
        raise ValueError(f"Arrow IPC metadata points outside itself (byte {pos} of {len(data)})")
    return struct.unpack_from(fmt, data, pos)[0]


class _Flat:
    """One FlatBuffer table: just enough to read its scalar fields, sub-tables and vectors of structs."""

    def __init__(self, data: bytes, table: int) -> None:
        self.data, self.at = data, table

    def _slot(self, field: int) -> int:
        vtable = self.at - _num(self.data, "<i", self.at)
        entry = 4 + 2 * field
        return _num(self.data, "<H", vtable + entry) if entry + 2 <= _num(self.data, "<H", vtable) else 0

    def scalar(self, field: int, fmt: str) -> int:
        slot = self._slot(field)
        return _num(self.data, fmt, self.at + slot) if slot else 0

    def table(self, field: int) -> _Flat | None:
        slot = self._slot(field)
        return _Flat(self.data, self.at + slot + _num(self.data, "<I", self.at + slot)) if slot else None

    def structs(self, field: int, fmt: str) -> list[tuple]:
        slot = self._slot(field)
        if not slot:
            return []
        vector = self.at + slot + _num(self.data, "<I", self.at + slot)
        count, size = _num(self.data, "<I", vector), struct.calcsize(fmt)
        if vector + 4 + count * size > len(self.data):
            raise ValueError(f"Arrow IPC metadata claims {count:,} entries it does not hold")
        return [struct.unpack_from(fmt, self.data, vector + 4 + k * size) for k in range(count)]


def _message(meta: bytes) -> tuple[int, int, int, list[tuple[int, int]], bool]:
    """(message type, body length, rows, buffers (offset, length) in the body, whether they are compressed)."""
    msg = _Flat(meta, _num(meta, "<I", 0))
    kind, body, header = msg.scalar(1, "<B"), msg.scalar(3, "<q"), msg.table(2)
    batch = header if kind == RECORD_BATCH else header.table(1) if kind == DICTIONARY_BATCH and header else None
    if batch is None:
        return kind, body, 0, [], False
    # a negative row count (hostile) would number the rows after it backwards
    return kind, body, max(batch.scalar(0, "<q"), 0), batch.structs(2, "<qq"), batch.table(3) is not None


def _decoded(body: int, buffers: list[tuple[int, int]], compressed: bool, prefix: Callable[[int], bytes]) -> int:
    """Bytes the body decodes to: its length, or, compressed, the sum of its buffers' stated decompressed lengths
    (the int64 `prefix(offset)` each compressed buffer starts with; -1: stored as it is)."""
    if not compressed:
        return body
    total = 0
    for offset, length in buffers:
        if length >= 8:
            stated = int.from_bytes(prefix(offset), "little", signed=True)
            total += length - 8 if stated == -1 else max(stated, 0)
    return max(total, body)


class _Framed(io.RawIOBase):
    """An IPC stream as pyarrow is to read it, message by message, each measured by its metadata before its body
    is read: a record batch `_batch_verdict` refuses is dropped unread (skipped a chunk at a time, its body never
    held) and noted in `skipped`; a dictionary batch refused, or metadata over META_MAX, ends the stream (`stop`).
    A compressed body is held (it is under the bound) to read its buffers' decompressed lengths."""

    def __init__(self, src: BinaryIO, cap: int) -> None:
        self.src, self.cap, self.out, self.body_left, self.raw = src, cap, memoryview(b""), 0, False
        self.batches, self.done = 0, False
        self.skipped: list[tuple[int, int, int, str]] = []    # (batch index, rows, bytes decoded, why)
        self.stop: str | None = None

    def readable(self) -> bool:
        return True

    def readinto(self, b) -> int:
        data = self.read(len(b))
        b[:len(data)] = data
        return len(data)

    def read(self, n: int = -1) -> bytes:
        """Up to `n` bytes, fewer only at the end: pyarrow takes a short read for the end of the stream."""
        n = (1 << 62) if n is None or n < 0 else n
        parts, want = [], n
        while want:
            if self.out:
                piece, self.out = self.out[:want], self.out[want:]
            elif self.body_left or self.raw:
                piece = self.src.read(want if self.raw else min(want, self.body_left))
                self.body_left -= 0 if self.raw else len(piece)
                if not piece:
                    self.body_left, self.raw, self.done = 0, False, True
            elif self.done:
                break
            else:
                self._next()
                continue
            parts.append(bytes(piece))
            want -= len(piece)
        return b"".join(parts)

    def _next(self) -> None:
        """Read the next message's prefix and metadata, and decide what pyarrow gets of it."""
        prefix = self.src.read(4)
        if prefix == ARROW_STREAM_MAGIC:
            prefix += self.src.read(4)
        length = int.from_bytes(prefix[-4:], "little", signed=True) if len(prefix) in (4, 8) else 0
        if length <= 0:         # the end-of-stream marker, the end of the file, or a length pyarrow refuses
            self.out, self.done = memoryview(prefix), True
            return
        if length > META_MAX:
            self.stop, self.done = f"a message's metadata claims {length:,} bytes (over {META_MAX:,})", True
            return
        meta = self.src.read(length)
        try:
            kind, body, rows, buffers, compressed = _message(meta)
        except ValueError:      # not ours to judge: pyarrow reads on from here and reports what it finds
            self.out, self.raw = memoryview(prefix + meta), True
            return
        held = self.src.read(body) if compressed and 0 < body <= max(PAGE_BYTES, 2 * self.cap + (1 << 20)) \
            else None
        why = ""
        if kind in (RECORD_BATCH, DICTIONARY_BATCH):
            size = _decoded(body, buffers, held is not None, lambda at: held[at:at + 8]) if held is not None \
                else body
            why = _batch_verdict(rows, len(buffers), size, self.cap)
        if kind == RECORD_BATCH:
            self.batches += 1
        if why and kind == DICTIONARY_BATCH:
            self.stop, self.done = f"a dictionary batch of {size:,} bytes decoded, {why}", True
        elif why:
            self.skipped.append((self.batches - 1, rows, size, why))
            short = _drop(self.src, 0 if held is not None else body)
            if short:   # a body length that lies: what follows it cannot be found again
                self.stop, self.done = (f"record batch {self.batches - 1} states a body of {body:,} bytes and the "
                                        f"stream ends {short:,} bytes short of it"), True
        else:
            self.out = memoryview(prefix + meta + (held or b""))
            self.body_left = 0 if held is not None else max(body, 0)


def _drop(src: BinaryIO, n: int) -> int:
    """Read and drop `n` bytes, a chunk at a time; how many were missing."""
    while n > 0 and (piece := src.read(min(n, 1 << 20))):
        n -= len(piece)
    return max(n, 0)


def _footer_blocks(path: Path) -> list[tuple[int, int, int]]:
    """The IPC file footer's record batch blocks: (offset, metadata length, body length)."""
    with path.open("rb") as handle:
        size = handle.seek(0, 2)
        handle.seek(size - 10)
        length = int.from_bytes(handle.read(4), "little", signed=True)
        if not 0 < length <= size - 18:
            raise ValueError(f"footer length {length} does not fit the file")
        handle.seek(size - 10 - length)
        footer = handle.read(length)
    blocks = _Flat(footer, _num(footer, "<I", 0)).structs(3, "<qi4xq")
    return [(o, m, b) for o, m, b in blocks]


def _file_batch_size(handle: BinaryIO, offset: int, meta_length: int, body_length: int) -> tuple[int, int, int]:
    """(rows, buffers, bytes decoded) of the record batch a footer block points at, from its metadata alone."""
    if not 8 <= meta_length <= META_MAX or offset < 0:
        raise ValueError(f"a footer block states {meta_length:,} bytes of metadata at byte {offset}")
    handle.seek(offset)
    meta = handle.read(meta_length)
    meta = meta[8:] if meta[:4] == ARROW_STREAM_MAGIC else meta[4:]
    _kind, body, rows, buffers, compressed = _message(meta)
    start = offset + meta_length

    def prefix(at: int) -> bytes:
        handle.seek(start + at)
        return handle.read(8)
    return rows, len(buffers), _decoded(max(body, body_length), buffers, compressed, prefix)
