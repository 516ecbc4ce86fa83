"""JSON Lines of the files sources that stages other than ingest read (instruct, prefer_data, multimodal): streamed
by `file_lines` (one line held at a time, a line over the source's cap reported unread, a damaged compressed file
ended by one `truncated` line), each line parsed as strict UTF-8 JSON. Each stage words the reasons its own way
(a ledger row, a quarantine row); what a line is, and what makes it no record, is decided here once.

Ingest's reader (tasks/data/formats/text.py) does more for documents: it decodes UTF-16 files, reads raw control
characters leniently and refuses a mapped key given twice.
"""

from __future__ import annotations

import codecs
import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterator

from tasks.data.formats.streams import MAX_JSON_VALUES, RAW, file_lines, json_values_over, too_many_values

PARSE_ISSUES = ("invalid_utf8", "invalid_json")


@dataclass(frozen=True)
class JsonLine:
    """One non-blank line of `json_lines`: its parsed `value`, or why it has none (`issue`)."""
    number: int                        # 1-based line number in the decompressed text
    data: bytes                        # the line as read (only its first bytes when the stream reported it)
    value: Any = None
    issue: str | None = None           # record_too_large | truncated (the stream's) | invalid_utf8 | invalid_json
    detail: str = ""
    error: Exception | None = None     # invalid_utf8 / invalid_json: what decoding or parsing raised

    @property
    def text(self) -> str:
        """The line as text for an excerpt: bytes that are not UTF-8 shown as escapes."""
        return self.data.decode("utf-8", "backslashreplace")


def json_lines(path: Path, cap: int, knob: str) -> Iterator[JsonLine]:
    """Every non-blank line of the file at `path` (`cap` and `knob` as `file_lines` takes them). A UTF-8 byte-order
    mark (Windows tools; also where files were concatenated) is not part of a record, as ingest reads it. Opening
    may raise OSError."""
    for line in file_lines(path, cap, knob):
        if line.issue is not None:
            yield JsonLine(line.number, line.data, issue=line.issue, detail=line.detail)
            continue
        raw = line.data.removeprefix(codecs.BOM_UTF8)
        if not raw.strip():
            continue  # blank lines (the usual trailing newline included) are not records
        if (values := json_values_over(raw, MAX_JSON_VALUES)) is not None:
            yield JsonLine(line.number, line.data[:RAW], issue="record_too_large", detail=too_many_values(values))
            continue
        try:
            value = json.loads(raw.decode("utf-8"))
        except UnicodeDecodeError as exc:
            yield JsonLine(line.number, line.data, issue="invalid_utf8", detail=f"{exc.reason} at byte {exc.start}",
                           error=exc)
        except (ValueError, RecursionError) as exc:
            # ValueError, not only JSONDecodeError: an integer longer than Python's int_max_str_digits (4300) is
            # valid JSON syntax that json.loads refuses with a plain ValueError (it stopped a stage before).
            yield JsonLine(line.number, line.data, issue="invalid_json", error=exc,
                           detail="nested too deep" if isinstance(exc, RecursionError) else str(exc))
        else:
            yield JsonLine(line.number, line.data, value)
