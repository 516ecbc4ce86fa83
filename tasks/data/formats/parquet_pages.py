"""The page headers of a Parquet column chunk, read from the file itself rather than from its footer.

pyarrow decompresses a whole page before a row of it can be measured, into a buffer of the size the page's own
header states; the footer's column-chunk sizes are not what it allocates by. So the page headers, not the footer,
say what reading a row group will cost: a footer can understate its sizes (hand-made or damaged) and one huge
value among small rows hides in a row group's average. Only the few fields needed are decoded from the Thrift
compact encoding; the rest of a header is skipped without being built.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, BinaryIO, Iterator

import pyarrow as pa
import pyarrow.parquet as pq

MAX_HEADER_BYTES = 16 << 20   # pyarrow's own limit on one page header
MAX_DEPTH = 32                # Thrift structs nest a few levels in a page header; deeper is a hostile header
DICTIONARY_PAGE = 2
STREAMED = {"GZIP": "gzip", "ZSTD": "zstd", "BROTLI": "brotli"}  # Parquet codecs pyarrow can stream
CHUNK = 1 << 20               # what `first_value_over` holds of a page at a time


class HeaderError(ValueError):
    """A page header that cannot be decoded (damaged, truncated or hostile)."""


@dataclass(frozen=True)
class Page:
    """One page of a column chunk, as its header describes it."""
    kind: int            # 0 data, 2 dictionary, 3 data v2 (PageType)
    uncompressed: int    # what pyarrow allocates to decompress it
    compressed: int      # its bytes in the file, after the header
    values: int          # values (data pages: with nulls and list entries) or dictionary entries
    encoding: int = 0    # of its values: 0 PLAIN (the only one `plain_values` reads)
    start: int = 0       # where its bytes begin in the file
    levels: int = 0      # data page v2: bytes of repetition and definition levels, stored uncompressed first
    packed: bool = True  # data page v2: whether its values are compressed
    level_encodings: tuple[int, int] = (3, 3)   # data page v1: of its repetition and definition levels (3 RLE)


def chunk_pages(handle: BinaryIO, meta: pq.ColumnChunkMetaData, file_size: int) -> Iterator[Page]:
    """The pages of one column chunk, header by header from its first page to the end the footer gives it (or
    the end of the file, if nearer). A header that cannot be decoded raises HeaderError."""
    starts = [o for o in (meta.dictionary_page_offset, meta.data_page_offset) if o is not None and o > 0]
    offset = min(starts) if starts else 0
    end = min(offset + max(meta.total_compressed_size, 0), file_size)
    while offset < end:
        page = _read_header(handle, offset)
        if page.compressed < 0 or page.uncompressed < 0 or page.levels < 0:
            raise HeaderError(f"page at byte {offset} states a negative size")
        yield page
        offset = page.start + page.compressed


def _read_header(handle: BinaryIO, offset: int) -> Page:
    """The header at `offset`: read 256 bytes, and more (doubling) while a header runs past them."""
    want = 256
    while True:
        handle.seek(offset)
        data = handle.read(want)
        try:
            return decode_header(data, offset)
        except IndexError:  # the header runs past what was read
            if len(data) < want:
                raise HeaderError(f"page header at byte {offset} runs past the end of the file") from None
            if want >= MAX_HEADER_BYTES:
                raise HeaderError(f"page header at byte {offset} is over {MAX_HEADER_BYTES:,} bytes") from None
            want *= 2


def decode_header(data: bytes, offset: int = 0) -> Page:
    """PageHeader fields 1-3 (type, uncompressed and compressed size) and, of whichever page header it holds
    (fields 5, 7, 8), the value count and encoding, and for a v2 page its level lengths and whether its values
    are compressed; everything else is skipped."""
    reader = _Compact(data)
    found: dict[tuple[int, int], int] = {}
    for field, kind in reader.fields():
        if field in (1, 2, 3) and kind == 5:
            found[field, 0] = reader.varint_signed()
        elif field in (5, 7, 8) and kind == 12:
            for inner, inner_kind in reader.fields():
                if inner_kind == 5:
                    found[field, inner] = reader.varint_signed()
                elif inner_kind in (1, 2):      # a boolean field carries its value in its type
                    found[field, inner] = int(inner_kind == 1)
                else:
                    reader.skip(inner_kind, 1)
        else:
            reader.skip(kind, 0)
    if not {(1, 0), (2, 0), (3, 0)} <= found.keys():
        raise HeaderError(f"page header at byte {offset} lacks its type or sizes")
    kind = found[1, 0]
    inner = {0: 5, 2: 7, 3: 8}.get(kind, 0)
    # DataPageHeader: 1 num_values, 2 encoding; DataPageHeaderV2: 1 num_values, 4 encoding, 5 and 6 level bytes,
    # 7 is_compressed (true unless written)
    return Page(kind, found[2, 0], found[3, 0], found.get((inner, 1), 0),
                found.get((inner, 4 if kind == 3 else 2), 0), offset + reader.pos,
                found.get((8, 5), 0) + found.get((8, 6), 0), bool(found.get((8, 7), 1)),
                (found.get((5, 4), 3), found.get((5, 3), 3)))


def first_value_over(handle: BinaryIO, page: Page, codec: str, levels: tuple[int, int],
                     cap: int) -> int | None:
    """The length of the first value over `cap` in a PLAIN BYTE_ARRAY data page, 0 if it holds none, or None if
    that cannot be told a chunk at a time (another encoding, a codec pyarrow cannot stream — Snappy, LZ4 — or a
    stream that does not decode, which pyarrow will then refuse itself). `levels`: the column's maximum
    repetition and definition levels. The page is decompressed as a stream, CHUNK bytes held at a time, and each
    value's 4-byte length read and the value skipped: one 300 MB string among small ones costs a chunk, not the
    300 MB (and more) that decompressing the page whole costs."""
    if page.kind not in (0, 3) or page.encoding != 0 or (codec not in STREAMED and codec != "UNCOMPRESSED"):
        return None
    if page.kind == 0 and any(m and enc != 3 for m, enc in zip(levels, page.level_encodings)):
        return None     # BIT_PACKED levels carry no length prefix to skip them by
    skip = min(page.levels, page.compressed) if page.kind == 3 else 0   # v2 levels: stored uncompressed
    stream: Any = _Slice(handle, page.start + skip, page.compressed - skip)
    if codec != "UNCOMPRESSED" and (page.kind == 0 or page.packed):
        # the compressed page is held (pyarrow holds its whole column chunk): a bomb's is a few KB
        stream = pa.CompressedInputStream(pa.BufferReader(stream.read(page.compressed)), STREAMED[codec])
    values = _Chunks(stream)
    try:
        if page.kind == 0:                      # v1: each level run is prefixed by its length
            for _ in range(sum(1 for m in levels if m)):
                values.skip(values.length())
        while (n := values.length()) is not None:
            if n > cap:
                return n
            values.skip(n)
    except (pa.ArrowException, OSError, EOFError):
        return None
    return 0


class _Slice:
    """Bytes `start` to `start + size` of an open file, read as a stream."""

    def __init__(self, handle: BinaryIO, start: int, size: int) -> None:
        self.handle, self.pos, self.left = handle, start, max(size, 0)

    def read(self, n: int) -> bytes:
        self.handle.seek(self.pos)
        data = self.handle.read(min(n, self.left))
        self.pos, self.left = self.pos + len(data), self.left - len(data)
        return data


class _Chunks:
    """A stream read CHUNK bytes at a time: 4-byte little-endian lengths, and skips (an offset into the chunk
    held, so a page of many short values is not copied once a value)."""

    def __init__(self, stream: Any) -> None:
        self.stream, self.held, self.pos = stream, b"", 0

    def length(self) -> int | None:
        """The next 4-byte length; None at the end of the stream."""
        if len(self.held) - self.pos < 4:
            self.held, self.pos = self.held[self.pos:] + self.stream.read(CHUNK), 0
            if not self.held:
                return None
            if len(self.held) < 4:
                raise EOFError("a length cut short")
        self.pos += 4
        return int.from_bytes(self.held[self.pos - 4:self.pos], "little")

    def skip(self, n: int) -> None:
        """Step over n bytes, reading (and dropping) what is not held yet."""
        while n > len(self.held) - self.pos:
            n -= len(self.held) - self.pos
            self.held, self.pos = self.stream.read(min(n, CHUNK)), 0
            if not self.held:
                raise EOFError("a value cut short")
        self.pos += n


class _Compact:
    """Just enough of Thrift's compact protocol to walk a struct; reading past the data raises IndexError."""

    def __init__(self, data: bytes) -> None:
        self.data, self.pos = data, 0

    def byte(self) -> int:
        b = self.data[self.pos]
        self.pos += 1
        return b

    def varint(self) -> int:
        shift = result = 0
        while True:
            b = self.byte()
            result |= (b & 0x7F) << shift
            if not b & 0x80:
                return result
            shift += 7
            if shift > 70:
                raise HeaderError("varint longer than ten bytes")

    def varint_signed(self) -> int:
        n = self.varint()
        return (n >> 1) ^ -(n & 1)

    def fields(self) -> Iterator[tuple[int, int]]:
        """(field id, compact type) of each field of the struct at `pos`, up to its stop byte."""
        last = 0
        while True:
            head = self.byte()
            if head == 0:
                return
            delta, kind = head >> 4, head & 0x0F
            last = last + delta if delta else self.varint_signed()
            yield last, kind

    def element(self, kind: int, depth: int) -> None:
        """Step over one element of a list, set or map: a boolean there takes a byte of its own."""
        if kind in (1, 2):
            self.pos += 1
        else:
            self.skip(kind, depth)

    def skip(self, kind: int, depth: int) -> None:
        """Step over one value of compact type `kind`."""
        if depth > MAX_DEPTH:
            raise HeaderError("page header nests too deep")
        if kind in (1, 2):          # booleans live in the field header
            return
        if kind == 3:
            self.pos += 1
        elif kind in (4, 5, 6):
            self.varint()
        elif kind == 7:
            self.pos += 8
        elif kind == 8:
            length = self.varint()    # read first: `pos += varint()` would add to the pos before the varint
            self.pos += length
        elif kind in (9, 10):
            head = self.byte()
            count = head >> 4 if head >> 4 != 15 else self.varint()
            for _ in range(count):
                self.element(head & 0x0F, depth + 1)
        elif kind == 11:
            count = self.varint()
            types = self.byte() if count else 0
            for _ in range(count):
                self.element(types >> 4, depth + 1)
                self.element(types & 0x0F, depth + 1)
        elif kind == 12:
            for _, inner in self.fields():
                self.skip(inner, depth + 1)
        else:
            raise HeaderError(f"unknown Thrift compact type {kind}")
        if self.pos > len(self.data):
            raise IndexError("past the data")
