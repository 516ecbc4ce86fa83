"""Bounds on HTML handed to resiliparse's parser (lexbor), shared by the WARC reader and dedup's markup fold.

The parser's time grows with the square of one element's distinct attribute names: `<div a0=1 a1=1 …>` with
40,000 names took 5.7 s, 60,000 over a minute, in a 134 KB record (the same name repeated does not). A page's
text is never in its attributes, so a start tag holding more than `MAX_ATTRIBUTES` of them keeps only its name.
"""

from __future__ import annotations

import re

MAX_ATTRIBUTES = 1000   # attributes of one start tag beyond which they are dropped
LONG_TAG = 8192         # characters of a start tag's attributes below which they are not counted
# A tag's name, then LONG_TAG characters or more without `<` or `>`: the class stops at the next `<`, so one pass
# over the text is linear (a `<` without its `>` is not read to the text's end from every `<`).
_LONG_TAG = re.compile(rf"<[A-Za-z][^\s<>/]*(?P<attrs>[\s/][^<>]{{{LONG_TAG},}})")
_QUOTED = re.compile(r"\"[^\"]*\"|'[^']*'")                # a quoted value: its words are no names
_ATTRIBUTE = re.compile(r"[\s/][^\s\"'<>/=]")            # a name starts after a space or a `/`


def without_attribute_floods(html: str) -> tuple[str, int]:
    """`html` with the attributes of each start tag that holds more than MAX_ATTRIBUTES of them removed (the
    tag's name kept: `<div a0=1 … a59999=1>` → `<div>`), and how many tags lost theirs. Quoted values are
    skipped when counting (a long `alt` or `content` is one attribute)."""
    if len(html) <= LONG_TAG:
        return html, 0
    out, last, stripped = [], 0, 0
    for m in _LONG_TAG.finditer(html):
        if len(_ATTRIBUTE.findall(_QUOTED.sub(" ", m.group("attrs")))) > MAX_ATTRIBUTES:
            out.append(html[last:m.start("attrs")])
            last, stripped = m.end("attrs"), stripped + 1
    return ("".join(out) + html[last:], stripped) if stripped else (html, 0)
