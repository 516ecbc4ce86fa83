"""A row of labels with the values on the lines below: plain-text tables and fixed-width reports.

    Name              Phone               Date of birth     Passport No.
    ----------------  ------------------  ----------------  ------------
    Ana Silva         +44 7262 535190     05.12.1967        CH8530124

`pii_columns` follows a header only through rows split by one separator (`,`, `;`, tab, `|`); here the columns are
set apart by runs of two or more blanks, and a value sits under its label's column (a probe of 8 reports kept all
dates of birth and passport numbers so laid out). A line of two or more such fields, one of them a kind's label
(`pii_cells.cell_kind`: a credential, a date of birth, a passport, a phone), heads the table; an underline of
dashes may follow; each line after it, to a blank line or at most `_MAX_ROWS`, is split the same way, and a field
belongs to the label of its rank where a row has as many fields as labels, else to the column whose label
starts at or before it (two characters of slack: a right-aligned value). Columns may be set apart by tabs
too (a report pasted from a spreadsheet, `Name<TAB><TAB>Phone`): a tab's width is the writer's, so a field's
column is read with tabs stopping every 8 characters, and a row of as many fields as labels goes by rank. The
field is replaced when `cell_kind` reads it as the column's kind's value — so a table whose `Date` column holds
release dates, or whose `Password` column a word, keeps them.
"""

from __future__ import annotations

import re
from functools import lru_cache

from tasks.data.privacy.pii_cells import LabelledValues, cell_kind, last_text_memo
from tasks.data.privacy.pii_rows import PERSON_ROW_PASSES

# A label of a kind, somewhere on a line: a cheap test before the line is read as a header
_LABEL_HINT = re.compile(r"(?i)phone|mobile|\btel\b|birth|\bdob\b|geburt|passport|pass(?:word|wd)|secret|token|"
                         r"api[ _-]?key")
# A field: words with single blanks between them (a tab or two blanks end it)
_FIELD = re.compile(r"\S+(?:[ ]\S+)*")
# Two labels two blanks apart: where a header may stand (led by the blanks, a fast literal scan; a letter-led scan
# tries a Unicode class at every character, 60 ms a megabyte)
# (or a tab after a label's letter)
_GAP = re.compile(r"(?:[ ][ ](?<=[^\W\d_.][ ][ ])|\t(?<=[^\W\d_.]\t))[ \t]*(?=[^\W\d_])")
_RULE = re.compile(r"[ \t]*[-=+|]{3,}(?:[ \t]+[-=+|]{3,})*[ \t]*")
_LABEL = re.compile(r"[^\W\d_][^\W\d]*\.?(?:[ ][^\W\d_][^\W\d]*\.?){0,4}")     # `Date of birth`, `Passport No.`
# A value of each kind a label can name: a phone, a date of birth, a passport number, a password
_SAMPLES = ("+44 7700 900123", "05.12.1967", "GA1329754", "Kx8qz2Lp9w")
_MAX_ROWS = 200
_SLACK = 2


def _fields(line: str, offset: int) -> list[tuple[int, int, str]]:
    """(column, offset in the text, field) of each field of the line (fields set apart by two blanks or more)."""
    return [(column, offset + start, field) for column, start, field in _columns(line)]


def _columns(line: str) -> list[tuple[int, int, str]]:
    """(display column, offset in the line, field) of each field: tabs stop every 8 characters (counted on as
    the fields are read: a long line of tabs is read once)."""
    if "\t" not in line:
        return [(m.start(), m.start(), m.group()) for m in _FIELD.finditer(line)]
    found, column, pos = [], 0, 0
    for m in _FIELD.finditer(line):
        for ch in line[pos:m.start()]:
            column = column + 8 - column % 8 if ch == "\t" else column + 1
        pos = m.start()
        found.append((column, pos, m.group()))
    return found


def _header(line: str) -> list[tuple[int, str]] | None:
    """(column, label) of each field when the line is a header row: two or more fields, two blanks apart, each a
    short label (words, no digit, no colon: `Phone: ...` is a label and its value on one line), one a kind's."""
    fields = [(column, field) for column, _, field in _columns(line)]
    if len(fields) < 2 or not all(_LABEL.fullmatch(label) for _, label in fields):
        return None
    return fields if any(_labels_a_kind(label) for _, label in fields) else None


@lru_cache(maxsize=1024)
def _labels_a_kind(label: str) -> bool:
    """Whether a value of some kind under the label reads as one (`cell_kind` judges a label with its value)."""
    return any(cell_kind(label, sample) is not None for sample in _SAMPLES)


def _column(header: list[tuple[int, str]], column: int) -> str:
    """The label of the column holding a field that starts at `column`."""
    label = header[0][1]
    for start, name in header:
        if start <= column + _SLACK:
            label = name
    return label


def _rows(text: str, at: int, header: list[tuple[int, str]]) -> list[tuple[str, tuple[int, int]]]:
    """(kind, span) of each labelled value in the rows after the header line ending at `at`."""
    found: list[tuple[str, tuple[int, int]]] = []
    for count in range(_MAX_ROWS + 1):
        if at >= len(text):
            break
        end = text.find("\n", at + 1)
        end = len(text) if end < 0 else end
        line = text[at + 1:end]
        if count == 0 and _RULE.fullmatch(line):
            at = end
            continue
        if not line.strip() or _LABEL_HINT.search(line) and _header(line) is not None:
            break                                   # a blank line, or another header: its own table
        fields = _fields(line, at + 1)
        # as many fields as labels: the n-th under the n-th (a placeholder put in an earlier pass moved the rest)
        whole = len(fields) == len(header)
        for n, (column, offset, value) in enumerate(fields):
            kind = cell_kind(header[n][1] if whole else _column(header, column), value)
            if kind is not None:
                found.append((kind, (offset, offset + len(value))))
        at = end
    return found


def _labelled_rows(text: str) -> list[tuple[str, tuple[int, int]]]:
    """(kind, span) of each value under a header row's labelled column."""
    found: list[tuple[str, tuple[int, int]]] = []
    done = -1
    for gap in _GAP.finditer(text):
        if gap.start() < done:
            continue
        start = text.rfind("\n", 0, gap.start()) + 1
        end = text.find("\n", gap.end())
        end = len(text) if end < 0 else end
        done = end
        header = _header(text[start:end]) if _LABEL_HINT.search(text, start, end) else None
        if header is not None:
            rows = _rows(text, end, header)
            found += rows
            done = rows[-1][1][1] if rows else end
    return sorted(found, key=lambda item: item[1])


def _has_wide_gap(text: str) -> bool:
    return "  " in text or "\t" in text


_FOUND = last_text_memo(_labelled_rows)
# (kind, pattern, validator, group, hint): `pii`'s pass table; a headless person's row (`pii_rows`) with them
LABEL_ROW_PASSES = tuple((kind, LabelledValues(kind, _FOUND), lambda m: True, 0, _has_wide_gap)
                         for kind in ("secret", "dob", "passport", "phone")) + PERSON_ROW_PASSES
