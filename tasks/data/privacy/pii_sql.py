"""Values in SQL dumps, under the column that names them: `INSERT INTO users (id, birth_date, passport_no,
access_token) VALUES (1, '1986-11-12', 'X1234567', '...')`, mysqldump's `INSERT INTO `users` VALUES (...)` under
the table's `CREATE TABLE`, and pg_dump's `COPY users (id, birth_date, ...) FROM stdin;` with its tab-separated
rows up to `\\.`.

A dump names each column once, away from its values, so no cued pass reads them: a probe of SQL dumps found 40
of 164 planted values kept that way (dates of birth, passports and tokens; emails and phones are found by their
shapes anyway). Here each value is paired with its column's name and judged as a labelled cell is
(`pii_cells.cell_kind`: a credential name and a credential's value, a date-of-birth or passport column and a
valid date or number, a phone column and a phone's digits). A pass per kind (`SQL_PASSES`, `pii`'s pass table's
shape), each only in a text with an `INSERT` or a `COPY`.
"""

from __future__ import annotations

import re
from typing import Iterator

from tasks.data.privacy.pii_cells import LabelledValues, cell_kind, last_text_memo

_NAME = r"(?:[\w$]+|`[^`\n]+`|\"[^\"\n]+\"|\[[^\]\n]+\])"      # `users`, "users", [users]; schema-qualified
_TABLE = rf"(?P<table>{_NAME}(?:\.{_NAME})*)"
_INSERT = re.compile(rf"(?i:insert)[ \t]+(?:(?i:ignore)[ \t]+)?(?i:into)[ \t]+{_TABLE}[ \t]*"
                     r"(?:\((?P<columns>[^()]{1,4000})\))?\s*(?i:values)\s*(?=\()")
_COPY = re.compile(rf"(?i:copy)[ \t]+{_TABLE}[ \t]*\((?P<columns>[^()]{{1,4000}})\)[ \t]+(?i:from)[ \t]+"
                   r"(?i:stdin)[^;\n]*;[ \t]*\r?\n")
_CREATE = re.compile(rf"(?i:create)[ \t]+(?:(?i:temporary|temp)[ \t]+)?(?i:table)[ \t]+"
                     rf"(?:(?i:if)[ \t]+(?i:not)[ \t]+(?i:exists)[ \t]+)?{_TABLE}[ \t]*\(")
# One value of a VALUES tuple: a quoted string ('' or \' inside), or anything up to `,`/`)` (a number, NULL, a
# call with its own parentheses: `NOW()`), then the comma or the tuple's end. A bare value takes a run of spaces
# whole, and only where no `,`/`)` follows it (the shortest value a lazy `*?` found, without its n^2 retries)
_VALUE = re.compile(r"\s*(?:[EeNn]?'(?P<quoted>(?:[^'\\]|''|\\.)*)'|"
                    r"(?P<bare>[^,()'\s](?:[^,()'\s]|\([^()]*\)|\s+(?![\s,)]))*))\s*(?P<end>[,)])", re.S)
# Not columns: a CREATE TABLE body's constraints and indexes
_NOT_COLUMNS = frozenset("constraint primary unique foreign key index check fulltext spatial exclude".split())
_MAX_ROWS = 100_000         # a dump's statement is read in one pass; a runaway one is not followed further


def _unquote(name: str) -> str:
    return name.split(".")[-1].strip("`\"[] \t\r\n")


def _column_list(columns: str) -> list[str]:
    return [_unquote(c) for c in columns.split(",")]


def _create_columns(text: str, m: re.Match[str]) -> list[str]:
    """The column names of a `CREATE TABLE` body (its top-level items but constraints)."""
    names, depth, item = [], 0, []
    for at in range(m.end(), min(len(text), m.end() + 20_000)):
        c = text[at]
        if c == "(":
            depth += 1
        elif c == ")" and depth == 0 or c == "," and depth == 0:
            word = "".join(item).split()
            if word and word[0].lower() not in _NOT_COLUMNS:
                names.append(_unquote(word[0]))
            item = []
            if c == ")":
                return names
            continue
        elif c == ")":
            depth -= 1
        if depth == 0:
            item.append(c)
    return []


def _tuples(text: str, at: int, width: int) -> Iterator[list[tuple[int, int]]]:
    """The value spans of each `(...)` tuple from `at` on (`VALUES (...), (...);`), each of `width` values."""
    for _ in range(_MAX_ROWS):
        while at < len(text) and text[at] in " \t\r\n,":
            at += 1
        if text[at:at + 1] != "(":
            return
        at += 1
        spans = []
        while (m := _VALUE.match(text, at)) is not None:
            group = "quoted" if m.group("quoted") is not None else "bare"
            spans.append(m.span(group))
            at = m.end()
            if m.group("end") == ")":
                break
        else:
            return                  # no value where one should be: not a dump's tuple
        if len(spans) == width:
            yield spans


def _copy_rows(text: str, at: int, width: int) -> Iterator[list[tuple[int, int]]]:
    """pg_dump's `COPY ... FROM stdin;` rows: tab-separated fields to the `\\.` line."""
    for _ in range(_MAX_ROWS):
        end = text.find("\n", at)
        end = len(text) if end < 0 else end
        line = text[at:end].rstrip("\r")
        if line == "\\." or not line:
            return
        spans, start = [], at
        for field in line.split("\t"):
            spans.append((start, start + len(field)))
            start += len(field) + 1
        if len(spans) == width:
            yield spans
        at = end + 1


def _labelled_values(text: str) -> Iterator[tuple[str, tuple[int, int]]]:
    """(kind, span) of each value whose column names a kind."""
    tables = {_unquote(m.group("table")).lower(): _create_columns(text, m) for m in _CREATE.finditer(text)}
    statements = [(m, _tuples) for m in _INSERT.finditer(text)] + [(m, _copy_rows) for m in _COPY.finditer(text)]
    for m, rows in statements:
        columns = _column_list(m.group("columns")) if m.group("columns") else \
            tables.get(_unquote(m.group("table")).lower(), [])
        if not columns:
            continue
        for spans in rows(text, m.end(), len(columns)):
            for name, (start, end) in zip(columns, spans):
                if end > start and (kind := cell_kind(name, text[start:end])) is not None:
                    yield kind, (start, end)


def _values(text: str) -> list[tuple[str, tuple[int, int]]]:
    return sorted(set(_labelled_values(text)), key=lambda found: found[1])


def _has_statement(text: str) -> bool:
    """An `INSERT ... VALUES` or a `COPY ... FROM stdin` may be in the text (prose says "insert" and "copy")."""
    return "stdin" in text or any(word in text for word in ("VALUES", "values", "Values")) and \
        any(word in text for word in ("INSERT", "insert", "Insert"))


# (kind, pattern, validator, group, hint): `pii`'s pass table
_VALUES = last_text_memo(_values)
SQL_PASSES = tuple((kind, LabelledValues(kind, _VALUES), lambda m: True, 0, _has_statement)
                   for kind in ("secret", "dob", "passport", "phone"))
