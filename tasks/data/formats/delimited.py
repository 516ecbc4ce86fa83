"""CSV/TSV with a declared text column (and optional id column), streamed through the csv module.

Physical lines come from `iter_lines` (bounded, damage-aware) and are decoded one at a time, so a bad byte costs
one row, not the file. Quoted fields may span lines; a record whose lines add up to more than the cap is
quarantined and the reader restarts at the next line.
"""

from __future__ import annotations

import codecs
import csv
from pathlib import Path
from typing import Iterator

from specs.ingest import FilesSource
from tasks.data.formats.objects import from_object
from tasks.data.formats.streams import Line, Stream, iter_lines
from tasks.data.records import Bad, Doc


class _RecordTooLarge(Exception):
    pass


class _Lines:
    """Decoded lines for csv.reader; raises between rows (a class, not a generator, so it can go on after)."""

    def __init__(self, stream: Stream, cap: int) -> None:
        self._lines = iter_lines(stream, cap)
        self.cap, self.number, self.since_row, self.end = cap, 0, 0, None
        self.bad_bytes: list[int] = []   # line numbers whose bytes were not UTF-8 (decoded as surrogates)

    def __iter__(self):
        return self

    def __next__(self) -> str:
        line: Line = next(self._lines)
        self.number = line.number
        if line.issue == "truncated":
            self.end = line
            raise StopIteration
        if line.issue is not None or self.since_row + len(line.data) > self.cap:
            raise _RecordTooLarge(line.detail or f"record over the {self.cap:,}-byte cap (ingest.max_record_bytes)"
                                  f" at line {line.number}", line.data[:500].decode("utf-8", "backslashreplace"))
        self.since_row += len(line.data) + 1
        data = line.data.removeprefix(codecs.BOM_UTF8) if line.number == 1 else line.data
        try:
            return data.decode("utf-8") + "\n"
        except UnicodeDecodeError:
            self.bad_bytes.append(line.number)
            return data.decode("utf-8", "surrogateescape") + "\n"


def read_delimited(stream: Stream, path: Path, shown: str, src: FilesSource, root: Path, cap: int,
                   fmt: str) -> Iterator[Doc | Bad]:
    opts = src.csv
    delimiter = opts.delimiter or ("\t" if fmt == "tsv" else ",")
    # The field limit is process-wide in the csv module; the record cap already bounds every field.
    csv.field_size_limit(max(csv.field_size_limit(), cap))
    dialect = {"delimiter": delimiter, "strict": True, "quotechar": opts.quotechar or '"',
               "quoting": csv.QUOTE_MINIMAL if opts.quotechar else csv.QUOTE_NONE}
    lines = _Lines(stream, cap)
    header = list(opts.columns) if opts.columns else None
    while True:
        rows = _rows(csv.reader(lines, **dialect), lines)
        try:
            for where, row, problem in rows:
                if problem is not None:
                    yield Bad(shown, where, problem[0], problem[1], delimiter.join(row))
                elif header is None:
                    header = row
                    if src.fields.text not in header:
                        yield Bad(shown, where, "missing_text", f"text column {src.fields.text!r} is not in the "
                                  f"header {header}; no row of this file can be read", delimiter.join(row))
                        return
                elif len(row) != len(header):
                    yield Bad(shown, where, "bad_row", f"{len(row)} fields, the header has {len(header)}",
                              delimiter.join(row))
                else:
                    yield from_object(dict(zip(header, row)), path, shown, where, src, root, delimiter.join(row))
            break
        except _RecordTooLarge as exc:  # a fresh csv.reader resumes at the next line, the header kept
            yield Bad(shown, f"line {lines.number}", "record_too_large", exc.args[0], exc.args[1])
    if lines.end is not None:
        yield Bad(shown, f"line {lines.end.number}", "truncated", lines.end.detail)


def _rows(reader, lines: _Lines) -> Iterator[tuple[str, list[str], tuple[str, str] | None]]:
    """(location, fields, problem) per row; problem is (reason, detail) for a malformed or undecodable row."""
    while True:
        start = lines.number + 1
        lines.since_row = 0
        try:
            row = next(reader)
        except StopIteration:
            return
        except csv.Error as exc:  # strict mode: a stray quote, an unterminated quoted field
            yield f"line {start}", [], ("bad_row", f"csv: {exc}")
            continue
        if not row:
            continue  # a blank line is not a record
        if lines.bad_bytes and lines.bad_bytes[-1] >= start:
            shown = [f.encode("utf-8", "surrogateescape").decode("utf-8", "backslashreplace") for f in row]
            yield f"line {start}", shown, ("invalid_utf8", f"line {lines.bad_bytes[-1]} is not valid UTF-8")
            continue
        yield f"line {start}", row, None
