"""Emails written in an encoding that the plain email pass (`pii_emails`) reads only in part, for
`tasks.data.privacy.pii`; they run right before it.

- LaTeX escapes an underscore (`\\email{kenji\\_garcia@outlook.com}`, `\\texttt{...}`): the plain pass stops its
  local part at the backslash and left `kenji\\` before the placeholder.
- An HTML page that writes the `@` as an entity to dodge harvesters often writes the local part's dots, or every
  character, as entities too (`anna&#46;hassan&#64;web&#46;de`, `mailto:&#97;&#110;...`): the plain pass reads
  `&#64;` and a domain's `&#46;` but no entity in the local part, and left `anna&#46;` before the placeholder (or,
  all encoded, the whole address). Here the run of characters and entities around each `at` is decoded, the
  address is read in the decoded text and its span mapped back onto the entities.

`ENCODED_EMAIL_PASSES` has the shape of `pii`'s pass table: `(kind, pattern, validator(match), group to replace,
cheap test that the pass can match)`.
"""

from __future__ import annotations

import html
import re
from typing import Callable

_LABEL = r"[A-Za-z0-9](?:[A-Za-z0-9-]{0,61}[A-Za-z0-9])?"
_DOMAIN = rf"(?:{_LABEL}\.)+[A-Za-z]{{2,24}}"
# A local part with at least one `\_` (LaTeX's underscore), led by no word character, backslash or dot.
_LATEX_EMAIL = re.compile(r"(?<![\w.+\\-])[^\W_][\w.+-]{0,62}\\_(?:[\w.+-]|\\_){0,62}(?<![.])(?P<at>@)"
                          + _DOMAIN + r"(?![\w-])", re.ASCII)

_ENTITY = re.compile(r"&#(?:[0-9]{1,7}|[xX][0-9A-Fa-f]{1,6});")
_AT = re.compile(r"&#0*64;|&#[xX]0*40;|&commat;|@")
_LOCAL_DECODED = re.compile(r"[A-Za-z0-9](?:[A-Za-z0-9._%+'-]{0,63})")
_DOMAIN_DECODED = re.compile(_DOMAIN + r"(?![A-Za-z0-9-])")
_LOCAL_CHAR = frozenset("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789._%+'-")
_DOMAIN_CHAR = frozenset("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789.-")
_PLAIN_DOTS = ("&#46;", "&#x2e;", "&#x2E;", "&#X2e;", "&#X2E;")


def _unit_before(text: str, end: int) -> tuple[int, str] | None:
    """The character or numeric entity that ends at `end`: its start and what it decodes to."""
    if end <= 0:
        return None
    if text[end - 1] == ";":
        amp = text.rfind("&", max(0, end - 11), end)
        if amp >= 0 and _ENTITY.fullmatch(text, amp, end):
            return amp, html.unescape(text[amp:end])
    return end - 1, text[end - 1]


def _unit_at(text: str, start: int) -> tuple[int, str] | None:
    """The character or numeric entity that starts at `start`: its end and what it decodes to."""
    if start >= len(text):
        return None
    entity = _ENTITY.match(text, start) if text[start] == "&" else None
    if entity is not None:
        return entity.end(), html.unescape(entity.group())
    return start + 1, text[start]


def _walk(text: str, at: int, step: Callable[[str, int], tuple[int, str] | None], allowed: frozenset[str],
          limit: int) -> list[tuple[int, str]]:
    """The units from `at` on (backwards or forwards, as `step` reads them) that decode to `allowed` characters:
    (the position past each, its character)."""
    units, position = [], at
    while len(units) < limit and (unit := step(text, position)) is not None and unit[1] in allowed:
        position = unit[0]
        units.append(unit)
    return units


class EntityEncoded:
    """`sub(repl, text)`: each address around an `at` whose local part holds an entity, or whose domain holds one
    other than a dot's (the plain pass's), handed to `repl` as a match of its raw text (entities and all)."""

    def sub(self, repl: Callable[[re.Match[str]], str], text: str) -> str:
        out, last = [], 0
        for at in _AT.finditer(text):
            if at.start() < last:
                continue
            span = self._address(text, at, last)
            if span is None:
                continue
            start, end = span
            m = re.compile(re.escape(text[start:end])).match(text, start)
            out += (text[last:start], repl(m))
            last = end
        return "".join(out) + text[last:] if out else text

    @staticmethod
    def _address(text: str, at: re.Match[str], floor: int) -> tuple[int, int] | None:
        back = [u for u in _walk(text, at.start(), _unit_before, _LOCAL_CHAR, 64) if u[0] >= floor]
        ahead = _walk(text, at.end(), _unit_at, _DOMAIN_CHAR, 255)
        local = "".join(c for _, c in reversed(back))
        lead = len(local) - len(local.lstrip(".+%-'"))        # nothing of these opens a local part
        local_m = _LOCAL_DECODED.fullmatch(local, lead)
        domain_m = _DOMAIN_DECODED.match("".join(c for _, c in ahead))
        if local_m is None or local.endswith(".") or domain_m is None:
            return None
        start = back[len(back) - 1 - lead][0]
        end = ahead[domain_m.end() - 1][0]
        encoded_local = "&#" in text[start:at.start()]
        domain_raw = text[at.end():end]
        for dot in _PLAIN_DOTS:
            domain_raw = domain_raw.replace(dot, ".")
        return (start, end) if encoded_local or "&#" in domain_raw else None


ENCODED_EMAIL_PASSES = (
    ("email", _LATEX_EMAIL, bool, 0, lambda text: "\\_" in text and "@" in text),
    ("email", EntityEncoded(), bool, 0, lambda text: "&#" in text),
)
