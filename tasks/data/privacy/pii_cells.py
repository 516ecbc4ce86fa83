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
from tasks.data.privacy.pii_values import replace_spans, value_ok

_INLINE = r"(?:<(?:b|strong|span|label|em|i)\b[^<>]{0,100}>)?"
_INLINE_END = r"(?:</(?:b|strong|span|label|em|i)>)?"
_CELL_PAIR = re.compile(
    r"<(?P<tag>t[dh]|dt)\b[^<>]{0,200}>[ \t]*" + _INLINE + r"(?P<label>[^<>\n]{2,60}?)[ \t]*[:：]?[ \t]*" + _INLINE_END
    + r"[ \t]*</(?P=tag)>\s{0,40}<(?P<vtag>td|dd)\b[^<>]{0,200}>[ \t]*" + _INLINE
    + r"(?P<value>[^<>\n]{1,200}?)[ \t]*" + _INLINE_END + r"[ \t]*</(?P=vtag)>", re.IGNORECASE)
_CLOSERS = ("</td", "</th", "</dt", "</TD", "</TH", "</DT")
_PHONE_LABELS = frozenset("phone telephone tel mobile mobilephone cell cellphone phonenumber telephonenumber "
                          "mobilenumber fax telefon telefono teléfono téléphone handy handynummer telefonnummer "
                          "mobil portable celular".split())
_PHONE_VALUE = re.compile(r"\+?[\d(][\d ()./-]{5,22}\d")


def cell_kind(label: str, value: str) -> str | None:
    """The kind the value cell holds, given its label cell, or None (not a kind's label, or no such value)."""
    folded = re.sub(r"[\s_.\-]+", "", label).lower().rstrip(":：")
    kind = column_kind(label)
    if kind is not None:
        return kind if valid_value(kind, value) else None
    if folded in _PHONE_LABELS:
        digits = sum(c.isdigit() for c in value)
        return "phone" if _PHONE_VALUE.fullmatch(value) and 7 <= digits <= 15 else None
    name = re.sub(r"\s+", "_", label.strip().rstrip(":："))
    if is_credential_name(name) and any(c.isdigit() for c in value) and value_ok(value, literal=True):
        return "secret"
    return None


class LabelCells:
    """`sub(repl, text)`: each value cell of `kind` after its label cell (see the module docstring)."""

    def __init__(self, kind: str) -> None:
        self.kind = kind

    def sub(self, repl: Callable[[re.Match[str]], str], text: str) -> str:
        spans = [span for kind, span in _pairs(text) if kind == self.kind]
        return replace_spans(text, spans, repl) if spans else text


_LAST: list[tuple[str, list[tuple[str, tuple[int, int]]]]] = []


def _pairs(text: str) -> list[tuple[str, tuple[int, int]]]:
    """(kind, value span) of each labelled cell of `text`, read once for the four passes (the last text's are
    kept; read once into a local, as another thread may replace them)."""
    seen = _LAST[0] if _LAST else None
    if seen is None or seen[0] is not text:
        found = [(kind, m.span("value")) for m in _CELL_PAIR.finditer(text)
                 if (kind := cell_kind(m.group("label"), m.group("value"))) is not None]
        seen = (text, found)
        _LAST[:] = [seen]
    return seen[1]


def _closes_a_cell(text: str) -> bool:
    return any(closer in text for closer in _CLOSERS)


# (kind, pattern, validator, group, hint): `pii`'s pass table
CELL_PASSES = tuple((kind, LabelCells(kind), lambda m: True, 0, _closes_a_cell)
                    for kind in ("secret", "dob", "passport", "phone"))
