"""WARC and WET files (Common Crawl's shape), read with fastwarc; HTML → main text with resiliparse.

Counted as records: `response` and `resource` records (HTML → main text; anything else is `not_html`, a page
whose main text is empty is `empty_extraction`) and WET `conversion` records (their text as is). `request`,
`metadata`, `warcinfo`, `revisit` and `continuation` records carry no document and are skipped, not counted.
Compression (gzip per record, as Common Crawl writes it, or zstd/bz2/xz) is undone by `open_stream`; a body
shorter than its Content-Length, or a compressed stream that breaks, ends the file with one `truncated` entry.
"""

from __future__ import annotations

import io
from typing import Iterator

from fastwarc.warc import ArchiveIterator, WarcRecordType
from resiliparse.extract.html2text import extract_plain_text
from resiliparse.parse.encoding import bytes_to_str

from tasks.data.formats.streams import Stream
from tasks.data.records import Bad, Doc

WARC_MAGIC = b"WARC/"
HTML_TYPES = ("text/html", "application/xhtml+xml")
DOCUMENT_TYPES = WarcRecordType.response | WarcRecordType.resource | WarcRecordType.conversion


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
        yield _document(record, body, shown, f"record {number}")
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


def _document(record, body: bytes, shown: str, where: str) -> Doc | Bad:
    key = f"{shown}:{where.split()[-1]}"
    meta = {"url": record.headers.get("WARC-Target-URI", ""), "date": record.headers.get("WARC-Date", ""),
            "warc_record_id": record.headers.get("WARC-Record-ID", "")}
    if record.record_type == WarcRecordType.conversion:  # WET: text already extracted by the crawler
        return Doc(key=key, text=bytes_to_str(body, "utf-8"), origin=shown, location=where,
                   meta={**meta, "warc_type": "conversion"})
    if record.is_http:
        ctype, charset = record.http_content_type, record.http_charset
    else:  # a `resource` record: the payload's type is the record's own Content-Type
        value = record.headers.get("Content-Type", "")
        ctype, charset = value.split(";")[0].strip().lower() or None, _charset(value)
    if ctype not in HTML_TYPES and not (ctype is None and _looks_like_html(body)):
        return Bad(shown, where, "not_html", f"payload is {ctype or 'of unknown type'}, not HTML; {meta['url']}",
                   body[:500].decode("utf-8", "replace"))
    html = bytes_to_str(body, charset or "utf-8")  # falls back to UTF-8, then cp1252, when the label lies
    text = extract_plain_text(html, main_content=True)
    if not text.strip():
        return Bad(shown, where, "empty_extraction", f"no main text in {len(body):,} bytes of HTML; {meta['url']}",
                   html[:500])
    kind = "response" if record.is_http else "resource"
    return Doc(key=key, text=text, origin=shown, location=where, meta={**meta, "warc_type": kind})


def _charset(content_type: str) -> str | None:
    for part in content_type.split(";")[1:]:
        name, _, value = part.partition("=")
        if name.strip().lower() == "charset" and value.strip():
            return value.strip().strip('"')
    return None


def _looks_like_html(body: bytes) -> bool:
    return body.lstrip()[:15].lower().startswith((b"<!doctype html", b"<html"))
