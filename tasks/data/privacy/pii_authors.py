"""Grouped author addresses: `{alice, bob}@example.org`, `\\{alice, bob\\}@cs.example.edu` (LaTeX), `(alice|bob)@...`
and `alice|bob@...`, several people's addresses sharing one domain.

Papers list their authors' addresses this way; the e-mail pass reads only the last local part with the domain
(`{alice, <EMAIL>`), leaving the others' names, and the LaTeX form not at all (a probe of 8 papers kept all 16
braced groups). The whole group, braces and domain, is replaced by one placeholder. A bare `a|b@host` is a group
only where its line has no other `|` (a pipe-separated row, `1|alice|alice@host`, is fields, not a group); a
braced set without an `@` and a host with a dot after it (`{x, y}`, `{a, b}@decorator`) is none, and neither is
a Slack link's `<mailto:a@host|a@host>` (the part before the `|` is an address's domain).
"""

from __future__ import annotations

import re
from typing import Callable

from tasks.data.privacy.pii_values import replace_spans

_LOCAL = r"[A-Za-z0-9][\w.+-]{0,63}"
_DOMAIN = r"(?:[A-Za-z0-9](?:[A-Za-z0-9-]{0,61}[A-Za-z0-9])?\.)+[A-Za-z]{2,24}(?![\w-])"
# Each led by its first character, so that `re` scans for it in C (a pattern opening with a lookbehind is tried at
# every character): a brace or bracket; the bare group's first `|`, its first name found by walking back.
_BRACED = re.compile(rf"(?:\\\{{|\{{|\()[ \t]*{_LOCAL}(?:[ \t]*[,;|][ \t]*{_LOCAL})+[ \t]*(?:\\?\}}|\))@{_DOMAIN}")
_PIPED = re.compile(rf"\|(?:{_LOCAL}\|)*{_LOCAL}@{_DOMAIN}")
_LOCAL_CHARS = frozenset("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_.+-")


_CLOSE_AT = re.compile(r"[})]@")
_OPEN_BACK = 400        # a group's longest run of names before its closing brace


class CloseLed:
    """`sub(repl, text)` like `_BRACED`'s, tried only on the line before each `}@` or `)@` (`(` opens many calls in
    code: tried at each, `_BRACED` cost 10 ms a megabyte)."""

    def sub(self, repl: Callable[[re.Match[str]], str], text: str) -> str:
        spans: list[tuple[int, int]] = []
        for close in _CLOSE_AT.finditer(text):
            lo = max(text.rfind("\n", 0, close.start()) + 1, close.start() - _OPEN_BACK, spans[-1][1] if spans else 0)
            m = _BRACED.search(text, lo, close.end() + 260)
            if m is not None and m.start() <= close.start() < m.end():
                spans.append(m.span())
        return replace_spans(text, spans, repl) if spans else text


class PipeLed:
    """`sub(repl, text)` for `alice|bob@host`: each `_PIPED` tail, taken back to the start of the name before its
    first `|` (a name's characters, opening with a letter or digit, after none of `|`, `@`, `:`)."""

    def sub(self, repl: Callable[[re.Match[str]], str], text: str) -> str:
        spans = []
        for m in _PIPED.finditer(text):
            start = m.start()
            while start > max(0, m.start() - 64) and text[start - 1] in _LOCAL_CHARS:
                start -= 1
            if start < m.start() and text[start].isalnum() and (start == 0 or text[start - 1] not in "|@:\\") \
                    and not (spans and start < spans[-1][1]):
                spans.append((start, m.end()))
        return replace_spans(text, spans, repl) if spans else text


def _group(m: re.Match[str]) -> bool:
    """A braced group always; a bare `a|b@host` where no other `|` stands on its line."""
    if m.group()[0] in "{(\\":
        return True
    text = m.string
    line_start, line_end = text.rfind("\n", 0, m.start()) + 1, text.find("\n", m.end())
    line_end = len(text) if line_end < 0 else line_end
    return "|" not in text[line_start:m.start()] and "|" not in text[m.end():line_end]


# (kind, pattern, validator, group, hint): `pii`'s pass table; before the e-mail pass, which would take the last name
AUTHOR_PASSES = (("email", CloseLed(), _group, 0, lambda text: "}@" in text or ")@" in text),
                 ("email", PipeLed(), _group, 0, lambda text: "|" in text and "@" in text))
