"""Text files in other encodings than UTF-8, read as UTF-8 streams: UTF-16/UTF-32 by their byte-order mark or by
their bytes, and classic Mac OS files whose lines end with a bare CR (split from streams.py, which opens and
decompresses the files this decodes).
"""

from __future__ import annotations

import codecs
import io

from tasks.data.formats.streams import BUFFER, Stream

# Byte-order marks, UTF-32 first: its little-endian mark begins with UTF-16's.
BOMS = ((codecs.BOM_UTF32_LE, "utf-32-le"), (codecs.BOM_UTF32_BE, "utf-32-be"), (codecs.BOM_UTF16_LE, "utf-16-le"),
        (codecs.BOM_UTF16_BE, "utf-16-be"))
SNIFF = 1 << 16  # bytes looked at to guess a text file's encoding and line ends
UNDECODABLE = "forgeline.undecodable"
# A code unit that does not decode becomes byte 0xFF after re-encoding: never valid UTF-8, so the line (or the
# file) it is in is quarantined as invalid, as a bad byte of a UTF-8 file is, and the rest decodes on.
codecs.register_error(UNDECODABLE, lambda exc: ("\udcff", exc.end))


class _Recode(io.RawIOBase):
    """The bytes of `inner` decoded from `encoding` (None: they are UTF-8 already) and written as UTF-8, with every
    CR made LF when `cr_lines`."""

    def __init__(self, inner: io.BufferedReader, encoding: str | None, cr_lines: bool) -> None:
        self._inner, self._cr, self._out, self._done = inner, cr_lines, memoryview(b""), False
        self._dec = codecs.getincrementaldecoder(encoding)(UNDECODABLE) if encoding else None

    def readable(self) -> bool:
        return True

    def readinto(self, b) -> int:
        while not self._out and not self._done:
            chunk = self._inner.read1(BUFFER)
            self._done = not chunk
            data = chunk if self._dec is None else \
                self._dec.decode(chunk, final=self._done).encode("utf-8", "surrogateescape")
            self._out = memoryview(data.replace(b"\r", b"\n") if self._cr else data)
        n = min(len(b), len(self._out))
        b[:n], self._out = self._out[:n], self._out[n:]
        return n


def text_stream(stream: Stream, lines: bytes | None) -> tuple[Stream, str | None]:
    """`stream` as UTF-8 text, and the encoding it was decoded from (None when it is UTF-8 already).

    UTF-16 and UTF-32 files are decoded: by their byte-order mark (removed), or without one when the first bytes
    are unambiguously UTF-16/32 text (see `sniff_encoding`). For a line reader (`lines`: what each of its lines
    starts with, b"" for anything), a file whose first bytes end such lines with a bare CR and hold no LF (classic
    Mac OS; old Mac Excel's CSV) has its CRs read as LFs, so the whole file is not one line; files with any LF up
    front are left alone, since a raw CR inside a JSON string or a quoted CSV field is content there. UTF-8's own
    mark is left to each reader."""
    head = stream.buf.peek(SNIFF)[:SNIFF]
    encoding, bom = sniff_encoding(head)
    text = head if encoding is None else head[bom:].decode(encoding, "replace").encode("utf-8")
    ends = [] if lines is None or b"\n" in text else [x.strip() for x in text.split(b"\r")[:-1] if x.strip()]
    # a JSON line also ends its object: `{"text": "a\r{b}"}` (a raw CR in a string) is one line, not two
    closes = b"}" if lines == b"{" else b""
    cr_lines = bool(ends) and all(x.removeprefix(codecs.BOM_UTF8).startswith(lines) and x.endswith(closes)
                                  for x in ends[:8])
    if encoding is None and not cr_lines:
        return stream, None
    stream.buf.read(bom)
    return Stream(io.BufferedReader(_Recode(stream.buf, encoding, cr_lines), BUFFER), stream.compression,
                  stream.guard, stream.path), encoding


def sniff_encoding(head: bytes) -> tuple[str | None, int]:
    """(codec, byte-order-mark length) for UTF-16/UTF-32 text, (None, 0) for anything else.

    Without a mark, text is taken for UTF-16/32 only when it cannot be much else: many of its bytes are NUL, all
    at the high-byte positions of the code units (as in ASCII-range text), hardly any at the low byte, and the first
    SNIFF bytes decode in that byte order to text with no NUL and hardly any control or unassigned character.
    Binary data, or UTF-8 text (which holds no NUL), never passes; a file that does is decoded rather than
    quarantined line by line, since its text is then certain. A file with a mark must decode to text too (a
    binary file may start with those bytes), with some slack for units that do not decode: they cost a line."""
    for bom, name in BOMS:
        if head.startswith(bom):  # still checked: a binary file may start with these bytes too
            # (a NUL counts as one more odd character here: a mark and text around it decide, and refusing the
            # file sent every line of a UTF-16 export with one NUL in it to quarantine as invalid UTF-8)
            return (name, len(bom)) if _plain_text(head[len(bom):], name, UNDECODABLE, 10, nul=True) else (None, 0)
    n = len(head) // 4 * 4
    if n < 16 or head.count(0, 0, n) < n // 8:
        return None, 0
    # (codec, unit width, positions that are NUL in its ASCII-range text, the position of the low byte)
    for name, width, high, low in (("utf-32-le", 4, (2, 3), 0), ("utf-32-be", 4, (0, 1), 3),
                                   ("utf-16-le", 2, (1,), 0), ("utf-16-be", 2, (0,), 1)):
        units, zeros = n // width, [head[i:n:width].count(0) for i in range(width)]
        nul = min(zeros[i] for i in high)
        if nul >= units * (0.9 if width == 4 else 0.3) and zeros[low] <= nul // 20 and \
                _plain_text(head[:n], name, "strict", 100):
            return name, 0
    return None, 0


def _plain_text(data: bytes, encoding: str, errors: str, per_odd: int, nul: bool = False) -> bool:
    """Whether `data` decodes to text with no NUL (with `nul`, NULs among the odd characters) and at most one
    character in `per_odd` that is a control, unassigned or (with `errors` UNDECODABLE) undecodable."""
    try:
        text = codecs.getincrementaldecoder(encoding)(errors).decode(data)  # not final: a cut pair at the end
    except UnicodeDecodeError:
        return False
    odd = sum(1 for c in text if not (c.isprintable() or c in "\t\n\r\f\v"))
    return (nul or "\x00" not in text) and odd <= len(text) // per_odd
