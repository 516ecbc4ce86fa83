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
import os
import stat
import zlib
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import BinaryIO, Callable, Iterator

import zstandard

BUFFER = 1 << 20          # the read buffer; also the most a peek or a skip holds in memory at once
SKIP_CHUNK = 1 << 16
ZSTD_PIECE = 256    # compressed bytes fed to zstd at once (see _ZstdRaw)
REOPENS_MAX = 8     # times a Rewindable opens its file again (each time it rereads the file up to that point)
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
    """zstd frames decoded with a decompressobj, because `stream_reader` ends a truncated frame silently.

    A decompressobj returns everything its input decodes to, and zstd has no output limit per call: 64 KiB of
    RLE blocks decoded to 2 GiB in one call. Input is therefore fed ZSTD_PIECE bytes at a time: a block of
    128 KiB takes at least 4 bytes, so one piece decodes to at most ZSTD_PIECE * 32 KiB (8 MiB)."""

    def __init__(self, fh: BinaryIO) -> None:
        self._fh, self._dec, self._fed, self._out = fh, self._new(), False, memoryview(b"")
        self._pending, self._at = b"", 0  # compressed bytes read, and how many of them were fed
        self._damage: Exception | None = None  # raised once the frames decoded before it have been read

    @staticmethod
    def _new():
        # zstd --long=31 streams need the larger window; the default refuses them.
        return zstandard.ZstdDecompressor(max_window_size=2 ** 31).decompressobj()

    def readable(self) -> bool:
        return True

    def readinto(self, b) -> int:
        while not self._out:
            if self._damage is not None:
                raise self._damage
            if self._at >= len(self._pending):
                self._pending, self._at = self._fh.read(SKIP_CHUNK), 0
                if not self._pending:
                    if self._fed and not self._dec.eof:
                        raise EOFError("zstd stream ended inside a frame")
                    return 0
            self._at += ZSTD_PIECE
            self._out = memoryview(self._feed(self._pending[self._at - ZSTD_PIECE:self._at]))
        n = min(len(b), len(self._out))
        b[:n], self._out = self._out[:n], self._out[n:]
        return n

    def _feed(self, chunk: bytes) -> bytes:
        out = []
        while chunk:
            if self._dec.eof:  # concatenated frames: a new decompressor takes over after each frame
                self._dec, self._fed = self._new(), False
            try:
                out.append(self._dec.decompress(chunk))
            except zstandard.ZstdError as exc:
                damage = zstandard.ZstdError(_zstd_cause(exc, chunk if not self._fed else b""))
                if not out:
                    raise damage from exc
                # garbage after a complete frame in the same piece: deliver that frame's text first (gzip's
                # reader does the same), then report the damage
                self._damage = damage
                break
            self._fed = True
            chunk = self._dec.unused_data if self._dec.eof else b""
        return b"".join(out)


def _zstd_cause(exc: Exception, frame_start: bytes) -> str:
    """The error, naming the dictionary a frame was compressed with (forgeline has none to give it)."""
    try:
        dict_id = zstandard.get_frame_parameters(frame_start).dict_id if frame_start else 0
    except zstandard.ZstdError:
        dict_id = 0
    return f"{exc}; the frame needs zstd dictionary {dict_id}: decompress it first" if dict_id else str(exc)


class _Guard(io.RawIOBase):
    """Ends the stream at the first damage and records why, instead of raising from deep inside a reader."""

    def __init__(self, inner, limit: int | None = None) -> None:
        # read1, not read: GzipFile.read(n) loops until it has n bytes and drops what it decoded when the
        # stream breaks on the way; read1 returns each decoded piece, so the data before the damage survives.
        self.inner, self.damage, self.left = inner, None, limit     # `left`: bytes still to read, None: all
        self._read = getattr(inner, "read1", inner.read)

    def readable(self) -> bool:
        return True

    def readinto(self, b) -> int:
        if self.damage is not None or self.left == 0:
            return 0
        try:
            data = self._read(len(b) if self.left is None else min(len(b), self.left))
        except DAMAGE_ERRORS as exc:
            self.damage = f"{exc.__class__.__name__}: {exc}"
            return 0
        b[: len(data)] = data
        self.left = None if self.left is None else self.left - len(data)
        return len(data)


@dataclass
class Stream:
    buf: io.BufferedReader      # the decompressed bytes
    compression: str | None     # "gzip", "zstd", "bz2", "xz" or None
    guard: _Guard
    path: Path | None = None    # the file, for a reader that must read it again from the start
    size: int | None = None     # the size of the decompressed bytes, when known without reading them

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
        info = os.fstat(fh.fileno())
        size = info.st_size if kind is None and stat.S_ISREG(info.st_mode) else None  # /proc files say 0
        # a file still being written (a log) is read up to its size when opened: a writer appending as fast as
        # ingest read kept one file going forever (5.7 GB in 45 s)
        guard = _Guard(inner, size or None)
        yield Stream(io.BufferedReader(guard, BUFFER), kind, guard, path, size)


@dataclass
class Line:
    number: int                 # 1-based line number in the decompressed text
    data: bytes                 # the line without its newline; only the first RAW bytes when `issue` is set
    issue: str | None = None    # None, "record_too_large" or "truncated"
    detail: str = ""


RAW = 2000  # bytes of a rejected line kept for the quarantine preview
# The most values (objects, arrays, keys, scalars) one line may parse to. Under the byte cap a line still amplifies:
# 60 MB of `[{},{},...]` built 20 M dicts, 1.5 GB, in json.loads. A record of text has a handful of values (a long
# text is one string); token-id or embedding arrays run to tens of thousands. Just under the cap a line of floats
# grew a reader by 52 MB (empty dicts, counted twice each, 28 MB): a worker stays bounded.
MAX_JSON_VALUES = 1_000_000
# json_values_over's second count walks the line in slices of this many bytes: one slice's pieces are held at a time.
SCAN_SLICE = 1 << 16


# What a blank line of JSON Lines may hold besides its newline (bytes.isspace's set: json ignores them all).
JSON_BLANK = b" \t\r\x0b\x0c"


def iter_lines(stream: Stream, cap: int, watch: Callable[[bytes], None] | None = None,
               knob: str = "ingest.max_record_bytes", blank: Callable[[], bytes | None] | None = None
               ) -> Iterator[Line]:
    """Every line of `stream`; a line over `cap` bytes is reported, never held (`watch`, when given, sees each
    of its chunks as it is skipped; `knob` is the setting the report names as the cap); damage ends the
    iteration. `blank`, when given, is asked on a blank line which characters besides newlines make a line
    blank there (None: none, the line is yielded); blank lines are then not yielded, and the run of them that
    follows is skipped from the buffer in bulk — a line at a time, 97 KB of gzip (100 M newlines) kept a reader
    busy for two minutes. Line numbers count the skipped lines."""
    number = 0
    while True:
        line = stream.buf.readline(cap + 1)
        if not line:
            break
        number += 1
        if line.endswith(b"\n"):
            if blank is not None and line.isspace() and (chars := blank()) is not None \
                    and not line[:-1].strip(chars):
                number += _skip_blank_run(stream.buf, chars)
                continue
            yield Line(number, line[:-1].removesuffix(b"\r"))
        elif len(line) > cap:
            size = len(line) + _skip_line(stream, line, watch)
            yield Line(number, line[:RAW], "record_too_large", f"line of {size:,} bytes > the {cap:,}-byte "
                       f"cap ({knob}); skipped to the next newline")
        elif stream.damage is None:
            yield Line(number, line)  # the last line, without a trailing newline: complete
        else:
            number -= 1  # a last line cut by the damage is part of the damage, reported below
            break
    if stream.damage is not None:
        yield Line(number + 1, b"", "truncated", f"{stream.compression or 'file'} stream damaged after line "
                   f"{number}: {stream.damage}; the rest of the file is lost")


def file_lines(path: Path, cap: int, knob: str) -> Iterator[Line]:
    """`iter_lines` of the file at `path` (decompressed by its first bytes), for any stage's jsonl: one line held
    at a time, a line over `cap` bytes one `record_too_large` Line, blank lines (no record in JSON Lines) not
    yielded. Opening may raise OSError."""
    with open_stream(path) as stream:
        yield from iter_lines(stream, cap, knob=knob, blank=lambda: JSON_BLANK)


def _skip_blank_run(buf: io.BufferedReader, chars: bytes) -> int:
    """Consume the whole blank lines (newlines and `chars`) at the front of `buf`, a buffer at a time; return
    how many there were. A blank run not ended by a newline (the start of the next line) is left in place."""
    skipped = 0
    while True:
        ahead = buf.peek(BUFFER)[:BUFFER]
        run = len(ahead) - len(ahead.lstrip(chars + b"\n"))
        cut = ahead.rfind(b"\n", 0, run) + 1  # only whole lines: the run may end in the next line's indent
        if cut == 0:
            return skipped
        skipped += ahead.count(b"\n", 0, cut)
        buf.read(cut)
        if cut < len(ahead):
            return skipped


def _skip_line(stream: Stream, first: bytes, watch: Callable[[bytes], None] | None) -> int:
    """Consume the rest of the current line in bounded chunks; return how many bytes were skipped."""
    skipped = 0
    if watch is not None:
        watch(first)
    while True:
        chunk = stream.buf.readline(SKIP_CHUNK)
        if watch is not None:
            watch(chunk)
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


class Rewindable:
    """A stream's bytes read forward, that can go back: bytes just read are pushed back to be read again, or the
    file is opened again and read up to an offset (a compressed stream cannot seek). Bytes read again are bounded
    by the bytes read plus `cap`, and reopenings by REOPENS_MAX, so no file can make a reader go back and forth
    without end. Tracks its offset (`pos`), the bytes just before it (`last`: the start of the file, and bytes
    pushed back unless told otherwise, count as following a blank line) and, once known, the file's size."""

    def __init__(self, stream: Stream, cap: int) -> None:
        self.stream, self.buf, self.cap, self.reopened = stream, stream.buf, cap, ExitStack()
        self.back, self.at, self.pos, self.size = b"", 0, 0, stream.size
        self.last = b"\r\n\r\n"           # the bytes just before `pos`
        self.fresh = self.again = self.reopens = 0

    def read(self, n: int) -> bytes:
        out = self._held(self.at + n)
        if len(out) < n:
            more = self.buf.read(n - len(out))
            if len(more) < n - len(out) and self.stream.damage is None:
                self.size = self.pos + len(out) + len(more)  # the end of the file
            out += more
            self.fresh += len(more)
        return self._advance(out)

    def readline(self, limit: int) -> bytes:
        end = self.back.find(b"\n", self.at, self.at + limit)
        out = self._held(end + 1 if end >= 0 else self.at + limit)
        if end < 0 and len(out) < limit:
            more = self.buf.readline(limit - len(out))
            out += more
            self.fresh += len(more)
        return self._advance(out)

    def peek(self, n: int) -> bytes:
        if self.at + n <= len(self.back):
            return self.back[self.at:self.at + n]
        last, data = self.last, self.read(n)
        self.unread(data, last, count=False)
        return data

    def unread(self, data: bytes, before: bytes = b"\n\r\n", count: bool = True) -> bool:
        """Push back `data`, the bytes just read, to be read again (refused past the budget when `count`)."""
        if count and self.again + len(data) > self.fresh + self.cap:
            return False
        self.again += len(data) if count else 0
        self.back, self.at, self.pos, self.last = data + self.back[self.at:], 0, self.pos - len(data), before
        return True

    def reopen_at(self, offset: int) -> bool:
        """Open the file again and read up to `offset`, where reading goes on."""
        if self.stream.path is None or self.reopens >= REOPENS_MAX:
            return False
        self.reopens += 1
        self.reopened.close()
        self.stream = self.reopened.enter_context(open_stream(self.stream.path))
        self.buf, self.back, self.at, self.pos = self.stream.buf, b"", 0, 0
        while self.pos < offset and self.read(min(BUFFER, offset - self.pos)):
            pass
        self.last = b"\n\r\n"
        return self.pos == offset

    def _held(self, stop: int) -> bytes:
        out = self.back[self.at:stop]
        self.at += len(out)
        if self.at >= len(self.back):
            self.back, self.at = b"", 0
        return out

    def _advance(self, out: bytes) -> bytes:
        self.pos += len(out)
        self.last = (self.last + out[-16:])[-16:]
        return out


def json_values_over(raw: bytes, cap: int) -> int | None:
    """How many values the JSON text `raw` parses to at most, when that is over `cap`; None when it is within.

    Every value but the line's first follows a `[`, `{`, `,` or `:`, so counting those bytes bounds the values
    json builds (exactly, for valid JSON without empty containers). The count is C-speed over the raw bytes; only
    a line it puts over the cap (a long text full of commas, as code is) is counted again outside its strings: a
    real record is never refused for what its text holds."""
    if len(raw) < cap or _structural(raw) + 1 <= cap:  # each of those is a byte: a shorter line is within
        return None
    values = _outside_strings(raw) + 1
    return values if values > cap else None


def too_many_values(values: int) -> str:
    """The detail of a line refused by `json_values_over`."""
    return f"line holds up to {values:,} JSON values > the {MAX_JSON_VALUES:,}-value cap (MAX_JSON_VALUES); " \
        "refused unparsed"


def _structural(data: bytes) -> int:
    return data.count(b"{") + data.count(b"[") + data.count(b",") + data.count(b":")


def _outside_strings(raw: bytes) -> int:
    """The `_structural` bytes of `raw` that lie outside JSON strings, by bytes operations only. A regex over the
    strings was tried: with 20 M escapes or 20 M short strings it held 3 GB itself. Escapes go first (an escaped
    backslash, then an escaped quote: the order JSON reads them), so every quote left opens or closes a string;
    then slices are split at quotes, and the pieces outside strings counted."""
    data = raw.replace(b"\\\\", b"").replace(b'\\"', b"")  # one copy of the line at a time, dropped on return
    inside, count = False, 0
    for at in range(0, len(data), SCAN_SLICE):
        pieces = data[at:at + SCAN_SLICE].split(b'"')
        count += _structural(b"".join(pieces[1 if inside else 0::2]))
        inside ^= len(pieces) % 2 == 0  # an odd number of quotes in the slice
    return count
