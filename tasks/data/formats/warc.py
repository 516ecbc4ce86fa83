"""WARC and WET files (Common Crawl's shape), read with fastwarc; HTML → main text with resiliparse.

Counted as records: `response` and `resource` records (HTML → main text; anything else is `not_html`, a page
whose main text is empty is `empty_extraction`) and WET `conversion` records (their text as is). `request`,
`metadata`, `warcinfo`, `revisit` and `continuation` records carry no document and are skipped, not counted.
Compression (gzip per record, as Common Crawl writes it, or zstd/bz2/xz) is undone by `open_stream`; a body
shorter than its Content-Length, or a compressed stream that breaks, ends the file with one `truncated` entry.

A payload is taken as the server sent it, then made into what a browser would render (`_payload`): a chunked
`Transfer-Encoding` and a gzip/deflate/br `Content-Encoding` are undone (Common Crawl has already done so and
renamed those headers `X-Crawler-*`, which are left alone); one that does not decode, or decodes beyond the record
cap, is `bad_encoding` / `record_too_large`. Binary bytes (NULs, image/PDF/archive signatures) are `not_html`
whatever type the server claimed. A charset label Python does not know is ignored (the bytes decide, as in
a browser), never an error that stops the file. A DOM nested deeper than `MAX_DEPTH` (browsers cap it near 512)
is extracted without the main-content heuristic, whose time grows with the square of the depth (a 40,000-deep
page took 36 s; 3 M deep never finished), and says so in its `extraction` meta.
"""

from __future__ import annotations

import codecs
import io
from typing import Iterator

from fastwarc.stream_io import BrotliReader, GzipReader
from fastwarc.warc import ArchiveIterator, WarcRecordType
from resiliparse.extract.html2text import extract_plain_text
from resiliparse.parse.encoding import bytes_to_str
from resiliparse.parse.html import HTMLTree
from resiliparse.parse.http import iterate_http_chunks

from tasks.data.formats.streams import Stream
from tasks.data.records import Bad, Doc

WARC_MAGIC = b"WARC/"
HTML_TYPES = ("text/html", "application/xhtml+xml")
DOCUMENT_TYPES = WarcRecordType.response | WarcRecordType.resource | WarcRecordType.conversion
MAX_DEPTH = 512  # DOM nesting beyond which the main-content heuristic is skipped (see the module docstring)
# image, PDF, archive and compressed-stream signatures: bytes no server-side label makes into a page
BINARY_SIGNATURES = (b"\x89PNG\r\n", b"%PDF-", b"GIF87a", b"GIF89a", b"\xff\xd8\xff", b"PK\x03\x04", b"\x1f\x8b",
                     b"\xfd7zXZ\x00", b"\x28\xb5\x2f\xfd")


class _Positioned(io.RawIOBase):
    """A forward-only stream that can say where it is: fastwarc asks for `tell()` (through a seek to the
    current position) and panics, from Rust, on a stream that refuses it. Any other seek is still refused."""

    def __init__(self, inner: io.BufferedReader) -> None:
        self._inner, self._pos = inner, 0

    def readable(self) -> bool:
        return True

    def seekable(self) -> bool:
        return True

    def tell(self) -> int:
        return self._pos

    def seek(self, offset: int, whence: int = io.SEEK_SET) -> int:
        if (offset if whence == io.SEEK_SET else self._pos + offset if whence == io.SEEK_CUR else -1) != self._pos:
            raise io.UnsupportedOperation("this stream reads forward only")
        return self._pos

    def readinto(self, b) -> int:
        data = self._inner.read1(len(b))
        b[: len(data)] = data
        self._pos += len(data)
        return len(data)


def read_warc(stream: Stream, shown: str, cap: int) -> Iterator[Doc | Bad]:
    records = iter(ArchiveIterator(_Positioned(stream.buf), record_types=DOCUMENT_TYPES, parse_http=True))
    number = 0
    while True:
        try:
            record = next(records, None)
        except (OSError, ValueError) as exc:  # fastwarc: "Invalid WARC header" (garbage between records)
            yield Bad(shown, f"record {number + 1}", "unreadable_file", f"no valid WARC record after record "
                      f"{number}: {exc.__class__.__name__}: {exc}; the rest of the file is lost")
            return
        if record is None:
            break
        number += 1
        bad = _damage(record, stream, shown, f"record {number}", cap)
        if bad is not None:
            yield bad
            if bad.reason == "truncated":
                return
            continue
        body = record.reader.read()
        if len(body) < record.content_length:
            yield Bad(shown, f"record {number}", "truncated", f"body has {len(body):,} of its "
                      f"{record.content_length:,} bytes ({stream.damage or 'the file ends'}); the rest of the file "
                      "is lost", body[:500].decode("utf-8", "replace"))
            return
        yield _document(record, body, shown, f"record {number}", cap)
    if stream.damage is not None:
        yield Bad(shown, f"record {number + 1}", "truncated", f"{stream.compression} stream damaged after record "
                  f"{number}: {stream.damage}; the rest of the file is lost")


def _damage(record, stream: Stream, shown: str, where: str, cap: int) -> Bad | None:
    """A record that cannot be read: its header block was cut (no Content-Length), or its body is over the cap."""
    if "Content-Length" not in record.headers:  # mandatory in every WARC record: the headers were cut short
        cause = stream.damage or "the file ends inside the header block"
        return Bad(shown, where, "truncated", f"record header has no Content-Length ({cause}); the rest of the "
                   "file is lost")
    if record.content_length > cap:  # decided from the header: the body is skipped, never read
        return Bad(shown, where, "record_too_large", f"{record.content_length:,}-byte body > the {cap:,}-byte cap "
                   f"(ingest.max_record_bytes); {record.headers.get('WARC-Target-URI', '')}")
    return None


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
        if isinstance(body, Bad):
            return Bad(shown, where, body.reason, f"{body.detail}; {meta['url']}")
    else:  # a `resource` record: the payload's type is the record's own Content-Type
        value = record.headers.get("Content-Type", "")
        ctype, charset = value.split(";")[0].strip().lower() or None, _charset(value)
    if ctype not in HTML_TYPES and not (ctype is None and _looks_like_html(body)) or _binary(body):
        what = ctype or "of unknown type"
        return Bad(shown, where, "not_html", f"payload is {what}{' (binary bytes)' if _binary(body) else ''}, not "
                   f"HTML; {meta['url']}", body[:500].decode("utf-8", "replace"))
    html = bytes_to_str(body, _known(charset) or "utf-8")  # falls back to UTF-8, then cp1252, when the label lies
    tree = HTMLTree.parse(html)
    deep = html.count("<") > MAX_DEPTH and _deeper_than(tree, MAX_DEPTH)
    text = extract_plain_text(tree, main_content=not deep)
    if not text.strip():
        return Bad(shown, where, "empty_extraction", f"no main text in {len(body):,} bytes of HTML; {meta['url']}",
                   html[:500])
    kind = "response" if record.is_http else "resource"
    extra = {"extraction": f"plain (DOM deeper than {MAX_DEPTH})"} if deep else {}
    return Doc(key=key, text=text, origin=shown, location=where, meta={**meta, "warc_type": kind, **extra})


def _payload(headers, body: bytes, cap: int) -> bytes | Bad:
    """The HTTP body as the server meant it: chunked transfer coding, then gzip/deflate/br content codings,
    undone; a `Bad` (no origin yet) when one does not decode or the result passes `cap`."""
    where = ("", "")
    if "chunked" in headers.get("Transfer-Encoding", "").lower():
        decoded = b"".join(iterate_http_chunks(io.BytesIO(body)))
        if body.strip() and not decoded:
            return Bad(*where, "bad_encoding", "Transfer-Encoding: chunked, but the body is not chunked")
        body = decoded
    for coding in reversed([c.strip().lower() for c in headers.get("Content-Encoding", "").split(",")]):
        if coding in ("", "identity"):
            continue
        if coding not in ("gzip", "x-gzip", "deflate", "br"):
            return Bad(*where, "bad_encoding", f"Content-Encoding {coding!r} is not one forgeline decodes")
        reader = (BrotliReader(io.BytesIO(body)) if coding == "br"
                  else GzipReader(io.BytesIO(body), zlib=coding == "deflate"))
        try:
            body = reader.read(cap + 1)  # a decompression bomb stops at the cap
        except (OSError, ValueError) as exc:
            return Bad(*where, "bad_encoding", f"Content-Encoding {coding} does not decode: {exc}")
        if len(body) > cap:
            return Bad(*where, "record_too_large", f"{coding}-decoded body > the {cap:,}-byte cap "
                       "(ingest.max_record_bytes)")
    return body


def _binary(body: bytes) -> bool:
    """Bytes no HTML page is made of: a NUL in the first 4 KiB, or an image/PDF/archive signature."""
    head = body.lstrip()[:4096]
    return b"\x00" in head or head.startswith(BINARY_SIGNATURES)


def _known(charset: str | None) -> str | None:
    """The label when Python knows the codec (`x-klingon` would raise LookupError); else None."""
    try:
        return charset if charset and codecs.lookup(charset) else None
    except LookupError:
        return None


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
