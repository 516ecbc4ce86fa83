"""WARC and WET files (Common Crawl's shape): records framed here, parsed by fastwarc; HTML → main text with
resiliparse.

Counted as records: `response` and `resource` records (HTML → main text; anything else is `not_html`, a page
whose main text is empty is `empty_extraction`) and WET `conversion` records (their text as is). `request`,
`metadata`, `warcinfo`, `revisit` and `continuation` records carry no document and are skipped, not counted.
Compression (gzip per record, as Common Crawl writes it, or zstd/bz2/xz) is undone by `open_stream`; a compressed
stream that breaks ends the file with one `truncated` entry.

Records are cut out here (`_records`), because fastwarc trusts every Content-Length: one claiming 10^15 bytes
swallowed every record after it, silently. A body must be followed by the record separator, or by newlines and the
next `WARC/` header (or the end of the file). A record that is not — its Content-Length too large, too small,
negative or no number — is `bad_length` (`truncated` when no header follows), and reading resumes at the first
version line after a blank line past its header: in the held body, in the held tail of a body skipped over the cap,
or by opening the file again. Text such as `WARC/1.0` inside a body is looked for only once its length has proved
wrong. Bytes that are no header are `unreadable_file`, skipped to the next one.

A payload is taken as the server sent it, then made into what a browser would render (`_payload`): a chunked
`Transfer-Encoding` and a gzip/deflate/br `Content-Encoding` are undone (Common Crawl has already done so and
renamed those headers `X-Crawler-*`, which are left alone); one that does not decode, or decodes beyond the record
cap, is `bad_encoding` / `record_too_large`. Binary bytes (NULs, image/PDF/archive signatures) are `not_html`
whatever type the server claimed. A charset label Python does not know is ignored (the bytes decide, as in
a browser), never an error that stops the file. A DOM nested deeper than `MAX_DEPTH` (browsers cap it near 512)
is extracted without the main-content heuristic, whose time grows with the square of the depth (a 40,000-deep
page took 36 s; 3 M deep never finished), and says so in its `extraction` meta; a start tag with more than
`MAX_ATTRIBUTES` attributes loses them before parsing (`tasks.data.html_limits`), and its `attributes_dropped`
meta says so.
"""

from __future__ import annotations

import codecs
import io
import re
from typing import Iterator, NamedTuple

from fastwarc.stream_io import BrotliReader, GzipReader
from fastwarc.warc import ArchiveIterator, WarcRecordType
from resiliparse.extract.html2text import extract_plain_text
from resiliparse.parse.encoding import bytes_to_str
from resiliparse.parse.html import HTMLTree
from resiliparse.parse.http import iterate_http_chunks

from tasks.data.formats.streams import REOPENS_MAX, Rewindable, Stream
from tasks.data.html_limits import MAX_ATTRIBUTES, without_attribute_floods
from tasks.data.records import Bad, Doc

WARC_MAGIC = b"WARC/"
HTML_TYPES = ("text/html", "application/xhtml+xml")
DOCUMENT_KINDS = ("response", "resource", "conversion")
MAX_DEPTH = 512  # DOM nesting beyond which the main-content heuristic is skipped (see the module docstring)
# image, PDF, archive and compressed-stream signatures: bytes no server-side label makes into a page
BINARY_SIGNATURES = (b"\x89PNG\r\n", b"%PDF-", b"GIF87a", b"GIF89a", b"\xff\xd8\xff", b"PK\x03\x04", b"\x1f\x8b",
                     b"\xfd7zXZ\x00", b"\x28\xb5\x2f\xfd")
HEADER_MAX = 1 << 20   # a header block longer than this is no header (Common Crawl's are under 2 KiB)
HEADER_PEEK = 8192     # bytes looked at for a whole header block at once
HEADER_END = re.compile(rb"\n\r?\n")
SCAN = 1 << 20         # bytes read at once when skipping a body or looking for the next header
# where a resync may resume: a version line after a blank line
NEXT_HEADER = re.compile(rb"\n\r?\n(WARC/[01]\.\d+\r?\n)")
# Whitespace between a body and the next header: the standard has CRLF CRLF, writers add more (and blank lines
# with spaces), and fastwarc takes any of it; SEPARATOR_MAX bytes of it are looked at at once.
SPACE = b" \t\r\n"
SEPARATOR_MAX = 4096


class _Record(NamedTuple):
    fields: dict[str, str]   # the header's fields, names lower-cased
    header: bytes            # the header block, lines joined with CRLF (LF-only headers are made standard)
    body: bytes | None       # None: over the cap, skipped unread
    length: int


def read_warc(stream: Stream, shown: str, cap: int) -> Iterator[Doc | Bad]:
    src = Rewindable(stream, cap)
    number = 0
    with src.reopened:
        for item in _records(src, cap):
            if isinstance(item, _Record) and item.fields.get("warc-type", "").strip().lower() not in DOCUMENT_KINDS:
                continue
            number += 1
            where = f"record {number}"
            if not isinstance(item, _Record):
                yield Bad(shown, where, *item)
            elif item.body is None:  # decided from the header: the body was skipped, never read
                yield Bad(shown, where, "record_too_large", f"{item.length:,}-byte record > the {cap:,}-byte cap "
                          f"(ingest.max_record_bytes); {item.fields.get('warc-target-uri', '')}")
            else:
                yield _parsed(item, shown, where, cap)


def _records(src: Rewindable, cap: int) -> Iterator[_Record | tuple[str, str, str]]:
    """Every record, checked to end where the next begins; a problem is (reason, detail, raw)."""
    while True:
        head = _header(src)
        if head is None or head[0] == "cut":
            if src.stream.damage is not None or head is not None:
                cause = src.stream.damage or "the file ends inside a record header"
                yield "truncated", f"{src.stream.compression or 'file'} stream broken at byte {src.pos:,} " \
                                   f"({cause}); the rest of the file is lost", ""
            return
        if head[0] == "bad":
            yield "unreadable_file", f"no WARC record {head[1]}; {_resync(src, None, None)[1]}", head[2]
            continue
        fields, header = head[1], head[2]
        raw, body_at = header[:500].decode("utf-8", "replace"), src.pos
        length = _length(fields.get("content-length"))
        if isinstance(length, str):
            yield "bad_length", f"{length}; {_resync(src, None, None)[1]}", raw
            continue
        if src.size is not None and body_at + length > src.size:  # known to overshoot: not read for nothing
            at, resumed = _resync(src, None, None)
            yield _lost(at), f"Content-Length {length:,}, but only {src.size - body_at:,} bytes follow the " \
                f"header; {resumed}", raw
            continue
        body, (first, window) = (src.read(length), (None, None)) if length <= cap else (None, _skip(src, length, cap))
        got = src.pos - body_at
        if got < length and src.stream.damage is not None:
            yield "truncated", f"body has {got:,} of its {length:,} bytes ({src.stream.damage}); the rest of the " \
                               "file is lost", raw
            return
        if got == length and _separated(src):
            yield _Record(fields, header, body, length)
            continue
        at, resumed = _resync(src, body if window is None else bytes(window), first)
        what = f"only {got:,} bytes follow the header" if got < length else "no record separator and header " \
               f"follow it at byte {body_at + length:,}"
        yield _lost(at), f"Content-Length {length:,}, but {what}; {resumed}", raw


def _header(src: Rewindable) -> tuple | None:
    """("ok", fields, header block), ("cut", why) when the file ends in it, ("bad", why, raw) for bytes that are no
    header; None at the end of the file."""
    block = src.peek(HEADER_PEEK)
    while block and block[:1] in SPACE:  # blank (or whitespace-only) lines between records, as fastwarc skips them
        src.read(len(block) - len(block.lstrip(SPACE)))
        block = src.peek(HEADER_PEEK)
    if not block:
        return None
    start = src.pos
    if not block.startswith(WARC_MAGIC):
        first = src.readline(HEADER_MAX)
        return "bad", f"at byte {start:,}: {first[:40]!r} is not a WARC version line", first[:500].decode(
            "utf-8", "replace")
    blank = HEADER_END.search(block)
    if blank is not None:  # the usual case: the whole block at once
        lines = [line.rstrip(b"\r") for line in src.read(blank.end()).split(b"\n")[:-2]]
    else:
        lines = []
        while not lines or lines[-1]:
            line = src.readline(HEADER_MAX - sum(len(x) + 2 for x in lines) + 1)
            if not line.endswith(b"\n"):
                return ("cut", "") if len(line) <= HEADER_MAX - sum(len(x) + 2 for x in lines) else \
                    ("bad", f"at byte {start:,}: header block over {HEADER_MAX:,} bytes", "")
            lines.append(line.rstrip(b"\r\n"))
        lines.pop()
    fields: dict[str, str] = {}
    for at, text in enumerate(lines[1:], 1):
        name, colon, value = text.partition(b":")
        if text[:1] in (b" ", b"\t") and fields:  # a folded line continues the field before it
            key = next(reversed(fields))
            fields[key] += " " + text.strip().decode("utf-8", "replace")
        elif colon:
            fields[name.strip().lower().decode("utf-8", "replace")] = value.strip().decode("utf-8", "replace")
        else:
            return "bad", f"at byte {start:,}: header line {at + 1} ({text[:40]!r}) has no field name", \
                b"\n".join(lines)[:500].decode("utf-8", "replace")
    return "ok", fields, b"\r\n".join(lines) + b"\r\n\r\n"


def _length(value: str | None) -> int | str:
    """The Content-Length, or why it is not one."""
    if value is None:
        return "the record header has no Content-Length"
    if not re.fullmatch(r"[0-9]{1,18}", value):
        return f"Content-Length {value[:40]!r} is not a number of bytes"
    return int(value)


def _skip(src: Rewindable, length: int, cap: int) -> tuple[int | None, bytearray | None]:
    """Skip a body over the cap unread; the offset of the first header line after a blank line in it, if any, and
    the bytes from there on while they fit under the cap (a resync then needs no second reading of the file)."""
    left, first, window, before = length, None, None, b"\r\n\r\n"
    while left > 0 and (chunk := src.read(min(left, SCAN))):
        left -= len(chunk)
        if window is not None and len(window) + len(chunk) <= cap:
            window += chunk
        elif window is not None:
            window = None  # too far to hold: a resync opens the file again
        elif first is None and (found := NEXT_HEADER.search(before + chunk)) is not None:
            first = src.pos - len(chunk) - len(before) + found.start(1)
            window = bytearray((before + chunk)[found.start(1):])
            window = window if len(window) <= cap else None
        before = (before + chunk[-16:])[-16:]
    return first, window


def _separated(src: Rewindable) -> bool:
    """Whether a body ends where its Content-Length says: it is followed by the record separator (CRLF CRLF: what
    comes after it is the next header's business), or by a few newlines and a header or the end of the file (as
    fastwarc takes them); the newlines are read when it is."""
    probe = src.peek(SEPARATOR_MAX + len(WARC_MAGIC))
    if probe.startswith(b"\r\n\r\n"):
        src.read(4)
        return True
    rest = probe.lstrip(SPACE)
    if rest.startswith(WARC_MAGIC) or not probe or (not rest and len(probe) < SEPARATOR_MAX + len(WARC_MAGIC)):
        src.read(len(probe) - len(rest))
        return True
    if not rest:  # a long run of whitespace: still no body byte; `_header` skips the rest of it
        return True
    return False


def _resync(src: Rewindable, held: bytes | None, first: int | None) -> tuple[int | None, str]:
    """Resync after a record that does not end where it says: at the first header line after a blank line in the
    bytes `held` up to here (its body, or the end of a body skipped over the cap), else at `first` (a header seen
    in a skipped body: the file is opened again), else at the next one ahead. Returns where reading resumes (None:
    no header follows) and the words that say so."""
    found = NEXT_HEADER.search(b"\r\n\r\n" + held) if held else None
    if found is not None and src.unread(held[found.start(1) - 4:]):
        return src.pos, f"reading resumes at the next record header (byte {src.pos:,})"
    if first is not None and src.reopen_at(first):
        return first, f"reading resumes at the next record header (byte {first:,}; the file was read again)"
    missed = first if found is None else src.pos - len(held) + found.start(1) - 4
    at = _scan_to_header(src)
    lost = "" if missed is None else f"; the records from byte {missed:,} on were not read again (reading a file " \
        f"again is bounded: {REOPENS_MAX} reopenings, and as many bytes again as it holds plus the cap)"
    if at is None:
        return None, f"no record header follows: the rest of the file is lost{lost}"
    return at, f"reading resumes at the next record header (byte {at:,}){lost}"


def _scan_to_header(src: Rewindable) -> int | None:
    """Skip to the next version line after a blank line; its offset, or None at the end of the file."""
    while True:
        before = src.last
        chunk = src.read(SCAN)
        if not chunk:
            return None
        found = NEXT_HEADER.search(data := before + chunk)
        if found is not None:
            src.unread(data[found.start(1):], count=False)
            return src.pos


def _lost(at: int | None) -> str:
    """A record whose length is wrong is `bad_length`; with no record after it, the file may just be cut short."""
    return "truncated" if at is None else "bad_length"


def _parsed(record: _Record, shown: str, where: str, cap: int) -> Doc | Bad:
    """The record parsed by fastwarc (HTTP headers included), made into a document."""
    try:
        parsed = next(iter(ArchiveIterator(io.BytesIO(record.header + record.body), parse_http=True)), None)
        body, why = (parsed.reader.read(), "") if parsed is not None else (b"", "no record")
    except (OSError, ValueError) as exc:
        parsed, body, why = None, b"", f"{exc.__class__.__name__}: {exc}"
    if parsed is None:
        return Bad(shown, where, "unreadable_file", f"fastwarc cannot parse the record ({why}); "
                   f"{record.fields.get('warc-target-uri', '')}", record.header[:500].decode("utf-8", "replace"))
    return _document(parsed, body, shown, where, cap)


def _document(record, body: bytes, shown: str, where: str, cap: int) -> Doc | Bad:
    key = f"{shown}:{where.split()[-1]}"
    meta = {"url": record.headers.get("WARC-Target-URI", ""), "date": record.headers.get("WARC-Date", ""),
            "warc_record_id": record.headers.get("WARC-Record-ID", "")}
    if record.record_type == WarcRecordType.conversion:  # WET: text already extracted by the crawler
        return Doc(key=key, text=bytes_to_str(body, "utf-8"), origin=shown, location=where,
                   meta={**meta, "warc_type": "conversion"})
    if record.is_http:
        ctype, charset = record.http_content_type, record.http_charset
        body = _payload(record.http_headers, body, cap)
        if isinstance(body, tuple):
            return Bad(shown, where, body[0], f"{body[1]}; {meta['url']}")
    else:  # a `resource` record: the payload's type is the record's own Content-Type
        value = record.headers.get("Content-Type", "")
        ctype, charset = value.split(";")[0].strip().lower() or None, _charset(value)
    binary = _binary(body)
    if ctype not in HTML_TYPES and not (ctype is None and _looks_like_html(body)) or binary:
        what = ctype or "of unknown type"
        return Bad(shown, where, "not_html", f"payload is {what}{' (binary bytes)' if binary else ''}, not "
                   f"HTML; {meta['url']}", body[:500].decode("utf-8", "replace"))
    html, stripped = without_attribute_floods(_decoded(body, charset))
    tree = HTMLTree.parse(html)
    deep = html.count("<") > MAX_DEPTH and _deeper_than(tree, MAX_DEPTH)
    text = extract_plain_text(tree, main_content=not deep)
    if not text.strip():
        return Bad(shown, where, "empty_extraction", f"no main text in {len(body):,} bytes of HTML; {meta['url']}",
                   html[:500])
    kind = "response" if record.is_http else "resource"
    extra = {"extraction": f"plain (DOM deeper than {MAX_DEPTH})"} if deep else {}
    if stripped:
        extra["attributes_dropped"] = f"{stripped} element(s) with over {MAX_ATTRIBUTES:,} attributes"
    return Doc(key=key, text=text, origin=shown, location=where, meta={**meta, "warc_type": kind, **extra})


def _payload(headers, body: bytes, cap: int) -> bytes | tuple[str, str]:
    """The HTTP body as the server meant it: chunked transfer coding, then gzip/deflate/br content codings,
    undone; (reason, detail) when one does not decode or the result passes `cap`."""
    if "chunked" in headers.get("Transfer-Encoding", "").lower():
        decoded = b"".join(iterate_http_chunks(io.BytesIO(body)))
        if body.strip() and not decoded:
            return "bad_encoding", "Transfer-Encoding: chunked, but the body is not chunked"
        body = decoded
    for coding in reversed([c.strip().lower() for c in headers.get("Content-Encoding", "").split(",")]):
        if coding in ("", "identity"):
            continue
        if coding not in ("gzip", "x-gzip", "deflate", "br"):
            return "bad_encoding", f"Content-Encoding {coding!r} is not one forgeline decodes"
        reader = (BrotliReader(io.BytesIO(body)) if coding == "br"
                  else GzipReader(io.BytesIO(body), zlib=coding == "deflate"))
        try:
            body = reader.read(cap + 1)  # a decompression bomb stops at the cap
        except (OSError, ValueError) as exc:
            return "bad_encoding", f"Content-Encoding {coding} does not decode: {exc}"
        if len(body) > cap:
            return "record_too_large", f"{coding}-decoded body > the {cap:,}-byte cap (ingest.max_record_bytes)"
    return body


def _binary(body: bytes) -> bool:
    """Bytes no HTML page is made of: a NUL in the first 4 KiB, or an image/PDF/archive signature."""
    head = body.lstrip()[:4096]
    return b"\x00" in head or head.startswith(BINARY_SIGNATURES)


def _known(charset: str | None) -> str | None:
    """The label when Python knows it as a text encoding; else None: `x-klingon` would raise LookupError, and a
    bytes-to-bytes codec (`charset=rot13`, `base64`, `hex`, `zlib`) LookupError when decoding, so one page's label
    stopped the whole stage."""
    try:
        return charset if charset and codecs.lookup(charset)._is_text_encoding else None
    except LookupError:
        return None


def _decoded(body: bytes, charset: str | None) -> str:
    """`body` as text by its label (resiliparse falls back to UTF-8, then cp1252, when the label lies); a label of
    a codec that is no web charset and raises (`punycode`, `idna`, `unicode_escape`) is ignored."""
    try:
        return bytes_to_str(body, _known(charset) or "utf-8")
    except (LookupError, UnicodeError, ValueError):
        return bytes_to_str(body, "utf-8")


def _deeper_than(tree: HTMLTree, limit: int) -> bool:
    """Whether any element of `tree` sits more than `limit` elements deep (stops at the first one that does)."""
    stack = [(tree.document, 0)]
    while stack:
        node, depth = stack.pop()
        if depth > limit:
            return True
        child = node.first_element_child
        while child is not None:
            stack.append((child, depth + 1))
            child = child.next_element_sibling
    return False


def _charset(content_type: str) -> str | None:
    for part in content_type.split(";")[1:]:
        name, _, value = part.partition("=")
        if name.strip().lower() == "charset" and value.strip():
            return value.strip().strip('"')
    return None


def _looks_like_html(body: bytes) -> bool:
    return body.lstrip()[:15].lower().startswith((b"<!doctype html", b"<html"))
