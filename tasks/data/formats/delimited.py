"""CSV/TSV with a declared text column (and optional id column), streamed through the csv module.

Physical lines come from `iter_lines` (bounded, damage-aware) and are decoded one at a time, so a bad byte costs
one row, not the file. Quoted fields may span lines; the lines of the row being parsed are held (they add up to
the cap at most). A row that fails — a quote that never closes, a stray quote — is quarantined with the lines it
spans, and the lines after its first are read again as rows: an unterminated quote costs its row, where it used
to swallow the rest of the file. A row over the cap is followed to its end by `_QuoteScan`, holding nothing:
when its quotes close, it was a long row (`record_too_large`) and reading goes on after it; when they never close
(or break csv's rules) it was a stray quote, quarantined as `bad_row`, and the file is opened again to read the
lines after the row's first (a compressed stream cannot go back).
"""

from __future__ import annotations

import codecs
import csv
import re
from collections import deque
from contextlib import ExitStack
from pathlib import Path
from typing import Iterator

from specs.ingest import FilesSource
from tasks.data.formats.objects import from_object
from tasks.data.formats.encodings import text_stream
from tasks.data.formats.streams import RAW, Line, Stream, iter_lines, open_stream
from tasks.data.records import Bad, Doc

START, UNQUOTED, QUOTED, QUOTE_IN_QUOTED, NEWLINE = range(5)  # csv's own parser states (Modules/_csv.c)
# The lines of a row are held until it ends, each a Line object of ~150 bytes beside its text: a quoted field that
# never closes followed by 48 MiB of 2-byte lines (under the cap) held 16.7M of them, 3.7 GB and 74 s. A row is
# followed to its end unheld (`_QuoteScan`) past this many lines, as it is past the byte cap.
MAX_ROW_LINES = 1_000_000
# The most fields a row may split into. Under the byte cap a row still amplifies: a line of 60 M commas made csv
# build a list of 60 M fields, 630 MB. Real rows have a handful of columns (a long text is one quoted field, its
# commas inside it); just under the cap a row of 2-byte fields grew a reader by 82 MB.
MAX_ROW_FIELDS = 1_000_000


class _RecordTooLarge(Exception):
    pass


class _QuoteScan:
    """csv's strict QUOTE_MINIMAL parser reduced to its state, over raw bytes: says where a row ends (`ended`),
    where it breaks csv's rules (`error`), and on which line its last quoted field opened (`opened`)."""

    def __init__(self, delimiter: str, quote: str) -> None:
        self.q, self.state, self.opened, self.ended, self.error = quote.encode(), START, 0, False, None
        self._special = re.compile(b"|".join(re.escape(c.encode()) for c in (delimiter, quote, "\r", "\n")))
        self._delimiter = delimiter.encode()

    def feed(self, data: bytes, number: int) -> None:
        at = 0
        while at < len(data) and not self.ended and self.error is None:
            if self.state == QUOTED:  # only a quote ends a quoted field; separators and newlines are its text
                at = data.find(self.q, at)
                if at < 0:
                    return
                self.state, at = QUOTE_IN_QUOTED, at + len(self.q)
                continue
            found = self._special.search(data, at)
            stop = found.start() if found else len(data)
            if stop > at:
                self._step(b"", number)  # ordinary characters
            if found is None:
                return
            self._step(found.group(), number)
            at = found.end()

    def _step(self, c: bytes, number: int) -> None:
        state = self.state
        if state == NEWLINE and c not in (b"\r", b"\n"):
            self.error = f"new-line character seen in unquoted field (line {number})"
        elif state == QUOTE_IN_QUOTED and c not in (self.q, self._delimiter, b"\r", b"\n"):
            self.error = f"'{self._delimiter.decode()}' expected after '{self.q.decode()}' (line {number})"
        elif c == b"\n":
            self.ended = True
        elif c == b"\r":
            self.state = NEWLINE
        elif c == self.q and state in (START, QUOTE_IN_QUOTED):
            self.state, self.opened = QUOTED, number if state == START else self.opened
        elif c == self._delimiter:
            self.state = START
        else:
            self.state = UNQUOTED


class FieldCount:
    """The fields csv's strict QUOTE_MINIMAL parser splits a row into, counted over its raw bytes line by line.
    Delimiters between quotes are text; a quote opens a field only at the field's start (elsewhere it is text);
    inside a field, a run of quotes of even length is escaped quotes and an odd one closes it. The work is bytes
    operations per run of quotes, so a row of 60 M commas is counted at C speed; counting stops past `cap` (a
    row of 15 M quoted fields took 20 s to count to its end)."""

    def __init__(self, delimiter: bytes, quote: bytes | None, cap: int) -> None:
        self.delimiter, self.quote, self.cap, self.fields, self.inside = delimiter, quote, cap, 1, False
        self._runs = re.compile(re.escape(quote) + b"+") if quote else None

    def feed(self, data: bytes) -> None:
        """Count the fields of the next line of the row (without its newline: no copy of a long line is made)."""
        at = 0
        for run in self._runs.finditer(data) if self._runs and self.fields <= self.cap else ():
            start, end = run.span()
            if self.inside:  # an odd run closes the field
                self.inside, at = (end - start) % 2 == 0, end
                continue
            self.fields += data.count(self.delimiter, at, start)
            if self.fields > self.cap:
                break
            if start == 0 or data[start - 1:start] == self.delimiter:  # the start of a field (a line's start too)
                self.inside = (end - start) % 2 == 1  # the first quote opens; pairs after it are escaped quotes
            at = end
        if self.fields > self.cap and self.quote:
            # The row is refused; whether it goes on past this line is guessed from the parity of the quotes left
            # (exact unless a quote stands inside an unquoted field) instead of walking millions of them.
            self.inside ^= data.count(self.quote, at) % 2 == 1
        elif not self.inside:
            self.fields += data.count(self.delimiter, at)


class _Lines:
    """Decoded lines for csv.reader; raises between rows (a class, not a generator, so it can go on after).

    Lines come from `replay` (lines of a failed row, to be read again) before the file."""

    def __init__(self, stream: Stream, path: Path, cap: int, dialect: dict) -> None:
        self.path, self.cap, self.dialect = path, cap, dialect
        self.source, self.skip_below = iter_lines(stream, cap, self._watch, blank=self._blank), 0
        self.replay: deque[Line] = deque()
        self.row: list[Line] = []        # the lines of the row being parsed
        self.number, self.pulled, self.since_row, self.end = 0, 0, 0, None
        self.bad_bytes: list[int] = []   # line numbers whose bytes were not UTF-8 (decoded as surrogates)
        self.scan: _QuoteScan | None = None  # set while a row over the cap is followed to its end
        # the row's delimiters once its bytes reach MAX_ROW_FIELDS, and its FieldCount once they do
        self.delimiters: int | None = None
        self.counter: FieldCount | None = None
        self.reopened = ExitStack()

    def __iter__(self):
        return self

    def start_row(self) -> None:
        self.row, self.since_row, self.row_after = [], 0, self.number
        self.delimiters, self.counter = None, None

    def row_start(self) -> int:
        """The line the row just read began on (blank lines before it were skipped unseen)."""
        return self.row[0].number if self.row else self.row_after + 1

    def __next__(self) -> str:
        line = self.replay.popleft() if self.replay else self._pull()
        self.number = line.number
        if line.issue == "truncated":
            self.end = line
            raise StopIteration
        if line.issue is not None or self.since_row + len(line.data) > self.cap or len(self.row) >= MAX_ROW_LINES:
            raise _RecordTooLarge(line)
        self._count_fields(line)
        data = line.data.removeprefix(codecs.BOM_UTF8) if not self.row else line.data  # a mark is not a field
        self.row.append(line)
        self.since_row += len(line.data) + 1
        try:
            return data.decode("utf-8") + "\n"
        except UnicodeDecodeError:
            self.bad_bytes.append(line.number)
            return data.decode("utf-8", "surrogateescape") + "\n"

    def _count_fields(self, line: Line) -> None:
        """Raise _RecordTooLarge before csv splits the row into more than MAX_ROW_FIELDS fields. A row has at most
        its delimiters + 1 fields (counted once it has that many bytes); only a row with that many delimiters is
        counted exactly (`FieldCount`), so a long quoted text full of commas is still read."""
        if self.since_row + len(line.data) < MAX_ROW_FIELDS:  # fewer bytes than the cap, so fewer delimiters
            return
        delimiter = self.dialect["delimiter"].encode()
        if self.delimiters is None:  # the row just grew past MAX_ROW_FIELDS bytes: its held lines are counted once
            self.delimiters = sum(held.data.count(delimiter) for held in self.row)
        self.delimiters += line.data.count(delimiter)
        if self.delimiters < MAX_ROW_FIELDS:
            return
        quoted = self.dialect["quoting"] != csv.QUOTE_NONE
        if self.counter is None:
            quote = self.dialect["quotechar"].encode() if quoted else None
            self.counter = FieldCount(delimiter, quote, MAX_ROW_FIELDS)
            for held in self.row:  # as csv reads them: without a byte-order mark before a row's first quote
                self.counter.feed(held.data.removeprefix(codecs.BOM_UTF8))
        self.counter.feed(line.data.removeprefix(codecs.BOM_UTF8))
        if self.counter.fields <= MAX_ROW_FIELDS:
            return
        if quoted:  # where the row ends is known: finish_long_row follows an open quoted field from here
            self.scan = _QuoteScan(self.dialect["delimiter"], self.dialect["quotechar"])
            self.scan.state, self.scan.ended = (QUOTED, False) if self.counter.inside else (START, True)
            self.scan.opened = line.number
        raise _RecordTooLarge(Line(line.number, line.data[:RAW], "record_too_large", f"row of "
                              f"more than {MAX_ROW_FIELDS:,} fields (MAX_ROW_FIELDS) at line {line.number}; refused "
                              "unparsed"))

    def _pull(self) -> Line:
        while True:
            line = next(self.source)
            self.pulled = line.number
            if line.number >= self.skip_below or line.issue == "truncated":
                return line

    def _blank(self) -> bytes | None:
        """Between rows an empty line is no record (csv reads it as an empty row): iter_lines may skip a run of
        them in bulk. Inside a row (a quoted field) it is part of a field, and a line of spaces is a row."""
        return b"\r" if not self.row and not self.replay else None

    def _watch(self, chunk: bytes) -> None:
        """Sees the chunks of a line over the cap as iter_lines skips them: the quote state goes on through them."""
        if self.pulled + 1 < self.skip_below or self.dialect["quoting"] == csv.QUOTE_NONE:
            return
        if self.scan is None:
            self.scan = self.new_scan(self.row)
        self.scan.feed(chunk, self.pulled + 1)

    def new_scan(self, lines: list[Line]) -> _QuoteScan:
        scan = _QuoteScan(self.dialect["delimiter"], self.dialect["quotechar"])
        for line in lines:
            scan.feed(line.data + b"\n", line.number)
        return scan

    def finish_long_row(self, trigger: Line) -> tuple[str, int, _QuoteScan | None]:
        """Follow a row over the cap to its end: ("ended" | "error" | "eof" | "truncated", its last line, the scan)."""
        if self.dialect["quoting"] == csv.QUOTE_NONE:
            return "ended", trigger.number, None
        if self.scan is None:  # the row passed the cap on a line that fits: it was read whole
            self.scan = self.new_scan([*self.row, trigger])
        scan, last = self.scan, trigger.number
        while not scan.ended and scan.error is None:
            line = next(self.source, None)
            if line is None:
                scan.ended = scan.state != QUOTED  # the end of the file ends a row, as csv's does, unless quoted
                break
            self.pulled = last = line.number
            if line.issue == "truncated":
                self.end = line
                break
            if line.issue is None:
                scan.feed(line.data + b"\n", line.number)  # a line over the cap was fed by _watch
        self.scan = None
        outcome = "ended" if scan.ended else "error" if scan.error else "truncated" if self.end else "eof"
        return outcome, last, scan

    def read_again(self, first: int) -> None:
        """Read the lines after line `first` (the first of a failed row) again: held ones from memory, the rest by
        opening the file again when they were read past."""
        held = [line for line in self.row if line.number > first]
        resume = (held[-1].number if held else first) + 1
        if resume < (self.replay[0].number if self.replay else self.pulled + 1):  # some were read past: reopen
            self.reopened.close()
            stream, _ = text_stream(self.reopened.enter_context(open_stream(self.path)), lines=b"")
            self.source, self.skip_below, self.end = iter_lines(stream, self.cap, self._watch, blank=self._blank), resume, None
            self.replay.clear()  # the reopened file gives those lines again
        self.replay.extendleft(reversed(held))
        self.number = first


def read_delimited(stream: Stream, path: Path, shown: str, src: FilesSource, root: Path, cap: int,
                   fmt: str) -> Iterator[Doc | Bad]:
    opts = src.csv
    delimiter = opts.delimiter or ("\t" if fmt == "tsv" else ",")
    # The field limit is process-wide in the csv module; the record cap already bounds every field.
    csv.field_size_limit(max(csv.field_size_limit(), cap))
    dialect = {"delimiter": delimiter, "strict": True, "quotechar": opts.quotechar or '"',
               "quoting": csv.QUOTE_MINIMAL if opts.quotechar else csv.QUOTE_NONE}
    lines = _Lines(text_stream(stream, lines=b"")[0], path, cap, dialect)
    header = list(opts.columns) if opts.columns else None
    with lines.reopened:
        while True:
            rows = _rows(csv.reader(lines, **dialect), lines)
            try:
                for where, row, problem in rows:
                    if problem is not None:
                        yield Bad(shown, where, problem[0], problem[1], delimiter.join(row))
                    elif header is None:
                        header = row
                        if src.fields.text not in header:
                            yield Bad(shown, where, "missing_text", f"text column {src.fields.text!r} is not in "
                                      f"the header {header}; no row of this file can be read", delimiter.join(row))
                            return
                        twice = sorted(_read_twice(header, src))
                        if twice:   # `dict(zip(...))` would keep the last such column and drop the first unseen
                            yield Bad(shown, where, "bad_row", f"the header names {twice} more than once; no row of "
                                      "this file can be read", delimiter.join(row))
                            return
                    elif len(row) != len(header):
                        yield Bad(shown, where, "bad_row", f"{len(row)} fields, the header has {len(header)}",
                                  delimiter.join(row))
                    else:
                        yield from_object(dict(zip(header, row)), path, shown, where, src, root, delimiter.join(row))
                break
            except _RecordTooLarge as exc:  # a fresh csv.reader resumes after the row, the header kept
                yield _long_row(lines, exc.args[0], shown)
    if lines.end is not None:
        yield Bad(shown, f"line {lines.end.number}", "truncated", lines.end.detail)


def _long_row(lines: _Lines, trigger: Line, shown: str) -> Bad:
    """The entry for a row that passed the cap at line `trigger`, followed to its end first (see the docstring)."""
    first = lines.row[0] if lines.row else trigger
    raw = first.data[:500].decode("utf-8", "backslashreplace")
    limit = f"{MAX_ROW_LINES:,} lines (MAX_ROW_LINES)" if len(lines.row) >= MAX_ROW_LINES else \
        f"the {lines.cap:,}-byte cap (ingest.max_record_bytes)"
    outcome, last, scan = lines.finish_long_row(trigger)
    span = f"line {first.number}" if last == first.number else f"lines {first.number}-{last}"
    if outcome in ("ended", "truncated"):
        lines.number = last
        cause = trigger.detail or f"row over {limit} at line {trigger.number}"
        return Bad(shown, f"line {first.number}", "record_too_large", f"{cause}; the row spans {span}", raw)
    lines.read_again(first.number)
    why = "a quoted field never closes before the end of the file" if outcome == "eof" else f"csv: {scan.error}"
    opened = f" (opened on line {scan.opened})" if outcome == "eof" and scan.opened else ""
    return Bad(shown, f"line {first.number}", "bad_row", f"{why}{opened}: the row from line {first.number} runs "
               f"past {limit} to line {last}; the lines after line {first.number} are read "
               "again as rows", raw)


def _rows(reader, lines: _Lines) -> Iterator[tuple[str, list[str], tuple[str, str] | None]]:
    """(location, fields, problem) per row; problem is (reason, detail) for a malformed or undecodable row."""
    while True:
        lines.start_row()
        try:
            row = next(reader)
        except StopIteration:
            return
        except csv.Error as exc:  # strict mode: a stray quote, an unterminated quoted field
            start = lines.row_start()
            yield f"line {start}", [], ("bad_row", _failed_row(lines, start, exc))
            continue
        start = lines.row_start()
        if not row:
            continue  # a blank line is not a record
        if lines.bad_bytes and lines.bad_bytes[-1] >= start:
            shown = [f.encode("utf-8", "surrogateescape").decode("utf-8", "backslashreplace") for f in row]
            yield f"line {start}", shown, ("invalid_utf8", f"line {lines.bad_bytes[-1]} is not valid UTF-8")
            continue
        yield f"line {start}", row, None


def _failed_row(lines: _Lines, start: int, exc: csv.Error) -> str:
    """The detail of a row csv refused; a row of many lines has them read again (see the module docstring), unless
    a damaged stream cut it (then its quote may well have closed in the part that is lost)."""
    last = lines.number
    if last <= start or lines.end is not None:
        return f"csv: {exc}" if last <= start else f"csv: {exc}: the row from line {start} is cut at line {last}"
    scan = lines.new_scan(lines.row) if lines.dialect["quoting"] != csv.QUOTE_NONE else None
    opened = f"; its quoted field opened on line {scan.opened}" if scan is not None and scan.opened else ""
    lines.read_again(start)
    return f"csv: {exc}: the row from line {start} runs to line {last}{opened}; the lines after line {start} are " \
           "read again as rows"



def _read_twice(header: list[str], src: FilesSource) -> set[str]:
    """Columns the header names more than once that a record reads: text, id, media, the listed meta fields (or
    every column, when meta lists none)."""
    f, twice = src.fields, {n for n in header if header.count(n) > 1}
    return twice if f.meta is None else twice & ({f.text, f.id, f.media} | set(f.meta))
