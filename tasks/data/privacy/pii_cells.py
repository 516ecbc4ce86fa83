"""A label in one HTML cell and its value in the next: `<td>Password</td><td>Kx8qz2Lp9w</td>`,
`<th>Date of birth</th><td>03.04.1987</td>`, `<dt>Phone</dt><dd>604 123 456</dd>`.

Admin pages, profile pages and exported reports lay a record out as a two-column table or a definition list; the
cued passes read a value right after its label on one line, never across the markup between two cells (a probe of
80 documents found all three above kept). Each pair of adjacent cells whose first names a kind — a credential
(`pii_keyed.is_credential_name`), a date of birth or a passport (`pii_columns.column_kind`), a phone — has its
second cell's text replaced when it reads as that kind's value. A pass per kind (`CELL_PASSES`, `pii`'s pass
table's shape), each only in a text that closes a `td`, `th` or `dt` cell.
"""

from __future__ import annotations

import re
from typing import Callable

from tasks.data.privacy.pii_columns import column_kind, valid_value
from tasks.data.privacy.pii_keyed import is_credential_name
from tasks.data.privacy.pii_markup import INLINE, INLINE_END
from tasks.data.privacy.pii_values import replace_spans, value_ok

_CELL_PAIR = re.compile(
    r"<(?P<tag>t[dh]|dt)\b[^<>]{0,200}>[ \t]*" + INLINE + r"(?P<label>[^<>\n]{2,60}?)[ \t]*[:：]?[ \t]*" + INLINE_END
    + r"[ \t]*</(?P=tag)>\s{0,40}<(?P<vtag>td|dd)\b[^<>]{0,200}>[ \t]*" + INLINE
    + r"(?P<value>[^<>\n]{1,200}?)[ \t]*" + INLINE_END + r"[ \t]*</(?P=vtag)>", re.IGNORECASE)
_CLOSERS = ("</td", "</th", "</dt", "</TD", "</TH", "</DT")
_PHONE_LABELS = frozenset("phone telephone tel mobile mobilephone cell cellphone phonenumber telephonenumber "
                          "mobilenumber fax telefon telefono teléfono téléphone handy handynummer telefonnummer "
                          "mobil portable celular".split())
_PHONE_VALUE = re.compile(r"\+?[\d(][\d ()./-]{5,22}\d")


def cell_kind(label: str, value: str) -> str | None:
    """The kind the value cell holds, given its label cell, or None (not a kind's label, or no such value)."""
    folded = re.sub(r"[\s_.\-]+", "", label).lower().rstrip(":：")
    if folded in _PHONE_LABELS:     # (first: a phone column's own kind wants bare digits, a cell its layouts too)
        digits = sum(c.isdigit() for c in value)
        return "phone" if _PHONE_VALUE.fullmatch(value) and 7 <= digits <= 15 else None
    kind = column_kind(label)
    if kind is not None:
        return kind if valid_value(kind, value, label) else None
    name = re.sub(r"\s+", "_", label.strip().rstrip(":："))
    if is_credential_name(name) and any(c.isdigit() for c in value) and value_ok(value, literal=True):
        return "secret"
    return None


class LabelledValues:
    """`sub(repl, text)`: each value of `kind` among `find(text)`'s (kind, value span) pairs replaced by `repl`."""

    def __init__(self, kind: str, find: Callable[[str], list[tuple[str, tuple[int, int]]]]) -> None:
        self.kind, self.find = kind, find

    def sub(self, repl: Callable[[re.Match[str]], str], text: str) -> str:
        spans = [span for kind, span in self.find(text) if kind == self.kind]
        return replace_spans(text, spans, repl) if spans else text


def last_text_memo(find: Callable[[str], list]) -> Callable[[str], list]:
    """`find`, answering again for the last text it read: the passes of several kinds read one text in turn (one
    (text, answer) tuple, swapped whole: another thread may replace it)."""
    last: list[tuple[str | None, list]] = [(None, [])]

    def remembered(text: str) -> list:
        seen = last[0]
        if seen[0] is not text:
            seen = (text, find(text))
            last[0] = seen
        return seen[1]
    return remembered


def _pairs(text: str) -> list[tuple[str, tuple[int, int]]]:
    """(kind, value span) of each labelled cell of `text`."""
    return [(kind, m.span("value")) for m in _CELL_PAIR.finditer(text)
            if (kind := cell_kind(m.group("label"), m.group("value"))) is not None]


def _closes_a_cell(text: str) -> bool:
    return any(closer in text for closer in _CLOSERS)


# (kind, pattern, validator, group, hint): `pii`'s pass table
_PAIRS = last_text_memo(_pairs)
CELL_PASSES = tuple((kind, LabelledValues(kind, _PAIRS), lambda m: True, 0, _closes_a_cell)
                    for kind in ("secret", "dob", "passport", "phone"))
