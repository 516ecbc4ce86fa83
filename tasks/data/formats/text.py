"""JSON Lines (one object per line) and plain text / markdown (one document per file), streamed.

Both are read as UTF-8 through `text_stream`: a UTF-16/UTF-32 file (byte-order mark, or unambiguous without
one) is decoded first, and a JSON Lines file with classic-Mac CR line ends is split at its CRs (also a line
whose records turn out to be CR-separated further in: `_cr_separated`).
"""

from __future__ import annotations

import codecs
import json
from pathlib import Path
from typing import Iterator

from specs.ingest import FilesSource
from tasks.data.formats.objects import from_object
from tasks.data.formats.encodings import text_stream
from tasks.data.formats.streams import (JSON_BLANK, MAX_JSON_VALUES, RAW, Stream, iter_lines, json_values_over,
                                        read_capped, too_many_values)
from tasks.data.records import Bad, Doc

# json.loads(text, strict=False) builds this decoder for every line (a tenth of a small record's read time)
LENIENT_JSON = json.JSONDecoder(strict=False)


def read_jsonl(stream: Stream, path: Path, shown: str, src: FilesSource, root: Path, cap: int) -> Iterator[Doc | Bad]:
    stream, encoding = text_stream(stream, lines=b"{")
    for line in iter_lines(stream, cap, blank=lambda: JSON_BLANK):  # blank lines are no records: skipped in bulk
        where = f"line {line.number}"
        raw = line.data
        if line.issue is not None:
            yield Bad(shown, where, line.issue, line.detail, raw.decode("utf-8", "backslashreplace"))
            continue
        # A byte-order mark (Windows tools) is not part of a record, on line 1 or on the first line of a file
        # that was appended to this one (`cat a.jsonl b.jsonl`), where json.loads refused the line before.
        raw = raw.removeprefix(codecs.BOM_UTF8)
        if not raw.strip():
            continue  # blank lines (including the usual trailing newline) are not records
        if (values := json_values_over(raw, MAX_JSON_VALUES)) is not None:  # parsing it would amplify memory
            yield Bad(shown, where, "record_too_large", too_many_values(values),
                      raw[:RAW].decode("utf-8", "backslashreplace"))
            continue
        try:
            text = raw.decode("utf-8")
        except UnicodeDecodeError as exc:
            yield Bad(shown, where, "invalid_utf8", _undecodable(encoding, f"{exc.reason} at byte {exc.start} of the "
                      "line"), raw.decode("utf-8", "backslashreplace"))
            continue
        try:
            # strict=False: a raw control character inside a string (common in scraped dumps) does not make
            # the record invalid; ingest strips it from the kept text like its escaped form "\u0000".
            obj = LENIENT_JSON.decode(text)
        except (ValueError, RecursionError) as exc:
            # ValueError, not only JSONDecodeError: an integer longer than Python's int_max_str_digits (4300)
            # is valid JSON syntax that json.loads still refuses with a plain ValueError.
            if (parts := _cr_separated(text)) is not None:
                for k, (part, obj) in enumerate(parts, 1):
                    if twice := _mapped_twice(part, src):
                        yield Bad(shown, f"{where} record {k}", "invalid_json", f"key {twice!r} appears more than "
                                  "once in the object", part)
                    else:
                        yield from_object(obj, path, shown, f"{where} record {k}", src, root, part)
                continue
            detail = "nesting too deep to parse" if isinstance(exc, RecursionError) else str(exc)
            yield Bad(shown, where, "invalid_json", detail, text)
            continue
        if isinstance(obj, dict) and (twice := _mapped_twice(text, src)):
            # json keeps the last of two equal keys; which one a writer meant is undefined (RFC 8259), and the
            # other value (a whole document) would vanish without a trace
            yield Bad(shown, where, "invalid_json", f"key {twice!r} appears more than once in the object", text)
            continue
        yield from_object(obj, path, shown, where, src, root, text)


def _cr_separated(text: str) -> list[tuple[str, object]] | None:
    """A line that is records ended by bare CRs, each (text, object), or None. A file whose line ends turn from LF
    to classic-Mac CR after its first 64 KiB (two files concatenated) is split at LFs only: its CR part was one
    line, and 1,000 records were one `invalid_json`."""
    if "\r" not in text.rstrip("\r"):
        return None
    parts = [part for part in text.split("\r") if part.strip()]
    try:
        objs = [LENIENT_JSON.decode(part) for part in parts]
    except (ValueError, RecursionError):
        return None
    return list(zip(parts, objs)) if all(isinstance(obj, dict) for obj in objs) else None


def _mapped_twice(text: str, src: FilesSource) -> str | None:
    """A field the source maps (text, id, media) that the line's top-level object holds more than once, else None.
    Only a line naming one of them twice in quotes (rare) is parsed again, keeping every pair."""
    names = [n for n in (src.fields.text, src.fields.id, src.fields.media) if n is not None]
    if not any(text.count(json.dumps(n)) > 1 for n in names):
        return None
    pairs: list[list[tuple[str, object]]] = []
    json.JSONDecoder(strict=False, object_pairs_hook=lambda p: pairs.append(p) or dict(p)).decode(text)
    keys = [k for k, _ in pairs[-1]]  # the outermost object is built last
    return next((n for n in names if keys.count(n) > 1), None)


def read_text_file(stream: Stream, shown: str, fmt: str, cap: int) -> Iterator[Doc | Bad]:
    """A .txt/.md file is one document: held whole only when it fits under the cap (in UTF-8 bytes)."""
    stream, encoding = text_stream(stream, lines=None)
    data, size = read_capped(stream, cap)
    if stream.damage is not None:
        yield Bad(shown, "", "truncated", f"{stream.compression} stream damaged after {size:,} bytes: "
                  f"{stream.damage}; the document is incomplete", data[:500].decode("utf-8", "backslashreplace"))
        return
    if size > cap:
        yield Bad(shown, "", "record_too_large", f"document of {size:,} bytes > the {cap:,}-byte cap "
                  "(ingest.max_record_bytes)", data.decode("utf-8", "backslashreplace"))
        return
    bom = len(codecs.BOM_UTF8) if data.startswith(codecs.BOM_UTF8) else 0  # a byte-order mark is not text
    try:
        text = data[bom:].decode("utf-8")
    except UnicodeDecodeError as exc:
        at = exc.start + bom  # offsets stay those of the (decompressed) file
        yield Bad(shown, f"byte {at}", "invalid_utf8", _undecodable(encoding, str(exc)),
                  data[max(0, at - 40): at + 40].decode("utf-8", "backslashreplace"))
        return
    yield Doc(key=shown, text=text, origin=shown, meta={"file": shown, "format": fmt})


def _undecodable(encoding: str | None, detail: str) -> str:
    """The detail of a decoding error; in a UTF-16/32 file it names that encoding and the UTF-8 it became."""
    if encoding is None:
        return detail
    name = encoding.upper().replace("-LE", "LE").replace("-BE", "BE")
    return f"not valid {name} (a lone surrogate or a cut code unit); in its UTF-8 re-encoding: {detail}"
