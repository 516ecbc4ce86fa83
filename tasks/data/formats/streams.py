"""Files as streams of decompressed bytes (compression chosen by magic bytes), read line by line under a cap.

Nothing here reads a whole file: every stream is a 1 MiB-buffered reader, lines come from `readline(cap + 1)`,
and a line longer than the cap is skipped chunk by chunk up to its newline. Damage inside a compressed stream
(truncation, a corrupt block, a bad checksum) ends the stream and is remembered on `Stream.damage`, so a reader
keeps the records before it and reports the rest of the file once.
"""

from __future__ import annotations

import bz2
import gzip
import io
import lzma
import zlib
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import BinaryIO, Iterator

import zstandard

BUFFER = 1 << 20          # the read buffer; also the most a peek or a skip holds in memory at once
SKIP_CHUNK = 1 << 16
# Magic numbers from each format's specification (RFC 1952, RFC 8878, bzip2, xz file format 1.1).
COMPRESSION_MAGIC = ((b"\x1f\x8b", "gzip"), (b"\x28\xb5\x2f\xfd", "zstd"), (b"BZh", "bz2"),
                     (b"\xfd7zXZ\x00", "xz"))
COMPRESSION_SUFFIXES = {".gz": "gzip", ".gzip": "gzip", ".zst": "zstd", ".zstd": "zstd", ".bz2": "bz2",
                        ".xz": "xz"}
# What a damaged stream raises: truncation (EOFError, or ZstdTruncated below), corrupt data (zlib.error,
# LZMAError, ZstdError, OSError from bz2 "Invalid data stream" and gzip.BadGzipFile).
DAMAGE_ERRORS = (EOFError, OSError, zlib.error, lzma.LZMAError, zstandard.ZstdError)


def sniff_compression(head: bytes) -> str | None:
    return next((kind for magic, kind in COMPRESSION_MAGIC if head.startswith(magic)), None)


def inner_suffix(path: Path) -> str:
    """The suffix that names the content: `.jsonl` for `data.jsonl.zst` and for a plain `data.jsonl`."""
    suffixes = [s.lower() for s in path.suffixes]
    while suffixes and suffixes[-1] in COMPRESSION_SUFFIXES:
        suffixes.pop()
    return suffixes[-1] if suffixes else ""


class _ZstdRaw(io.RawIOBase):
    """zstd frames decoded with a decompressobj, because `stream_reader` ends a truncated frame silently."""

    def __init__(self, fh: BinaryIO) -> None:
        self._fh, self._dec, self._fed, self._out = fh, self._new(), False, b""

    @staticmethod
    def _new():
        # zstd --long=31 streams need the larger window; the default refuses them.
        return zstandard.ZstdDecompressor(max_window_size=2 ** 31).decompressobj()

    def readable(self) -> bool:
        return True

    def readinto(self, b) -> int:
        while not self._out:
            chunk = self._fh.read(SKIP_CHUNK)  # small input chunks bound each decompressed piece
            if not chunk:
                if self._fed and not self._dec.eof:
                    raise EOFError("zstd stream ended inside a frame")
                return 0
            self._out = self._feed(chunk)
        n = min(len(b), len(self._out))
        b[:n], self._out = self._out[:n], self._out[n:]
        return n

    def _feed(self, chunk: bytes) -> bytes:
        out = []
        while chunk:
            if self._dec.eof:  # concatenated frames: a new decompressor takes over after each frame
                self._dec, self._fed = self._new(), False
            out.append(self._dec.decompress(chunk))
            self._fed = True
            chunk = self._dec.unused_data if self._dec.eof else b""
        return b"".join(out)


class _Guard(io.RawIOBase):
    """Ends the stream at the first damage and records why, instead of raising from deep inside a reader."""

    def __init__(self, inner) -> None:
        # read1, not read: GzipFile.read(n) loops until it has n bytes and drops what it decoded when the
        # stream breaks on the way; read1 returns each decoded piece, so the data before the damage survives.
        self.inner, self.damage = inner, None
        self._read = getattr(inner, "read1", inner.read)

    def readable(self) -> bool:
        return True

    def readinto(self, b) -> int:
        if self.damage is not None:
            return 0
        try:
            data = self._read(len(b))
        except DAMAGE_ERRORS as exc:
            self.damage = f"{exc.__class__.__name__}: {exc}"
            return 0
        b[: len(data)] = data
        return len(data)


@dataclass
class Stream:
    buf: io.BufferedReader      # the decompressed bytes
    compression: str | None     # "gzip", "zstd", "bz2", "xz" or None
    guard: _Guard

    @property
    def damage(self) -> str | None:
        return self.guard.damage

    def head(self, n: int = 8) -> bytes:
        return self.buf.peek(n)[:n]


@contextmanager
def open_stream(path: Path) -> Iterator[Stream]:
    """`path` decompressed by what its first bytes say (a gzip file named `x.jsonl` is still gunzipped)."""
    with path.open("rb") as fh:
        kind = sniff_compression(fh.read(6))
        fh.seek(0)
        if kind == "gzip":
            inner = gzip.GzipFile(fileobj=fh)  # reads concatenated members, e.g. per-record gzipped WARC
        elif kind == "zstd":
            inner = _ZstdRaw(fh)
        elif kind == "bz2":
            inner = bz2.BZ2File(fh)
        elif kind == "xz":
            inner = lzma.LZMAFile(fh)
        else:
            inner = fh
        guard = _Guard(inner)
        yield Stream(io.BufferedReader(guard, BUFFER), kind, guard)


@dataclass
class Line:
    number: int                 # 1-based line number in the decompressed text
    data: bytes                 # the line without its newline; only the first RAW bytes when `issue` is set
    issue: str | None = None    # None, "record_too_large" or "truncated"
    detail: str = ""


RAW = 2000  # bytes of a rejected line kept for the quarantine preview


def iter_lines(stream: Stream, cap: int) -> Iterator[Line]:
    """Every line of `stream`; a line over `cap` bytes is reported, never held; damage ends the iteration."""
    number = 0
    while True:
        line = stream.buf.readline(cap + 1)
        if not line:
            break
        number += 1
        if line.endswith(b"\n"):
            yield Line(number, line[:-1].removesuffix(b"\r"))
        elif len(line) > cap:
            size = len(line) + _skip_line(stream)
            yield Line(number, line[:RAW], "record_too_large", f"line of {size:,} bytes > the {cap:,}-byte "
                       "cap (ingest.max_record_bytes); skipped to the next newline")
        elif stream.damage is None:
            yield Line(number, line)  # the last line, without a trailing newline: complete
        else:
            number -= 1  # a last line cut by the damage is part of the damage, reported below
            break
    if stream.damage is not None:
        yield Line(number + 1, b"", "truncated", f"{stream.compression or 'file'} stream damaged after line "
                   f"{number}: {stream.damage}; the rest of the file is lost")


def _skip_line(stream: Stream) -> int:
    """Consume the rest of the current line in bounded chunks; return how many bytes were skipped."""
    skipped = 0
    while True:
        chunk = stream.buf.readline(SKIP_CHUNK)
        skipped += len(chunk)
        if not chunk or chunk.endswith(b"\n"):
            return skipped


def read_capped(stream: Stream, cap: int) -> tuple[bytes, int]:
    """Up to `cap` bytes of the stream and its total size; past the cap the rest is counted, not kept."""
    data = stream.buf.read(cap + 1)
    if len(data) <= cap:
        return data, len(data)
    size = len(data)
    head = data[:RAW]
    del data
    while chunk := stream.buf.read(BUFFER):
        size += len(chunk)
    return head, size
