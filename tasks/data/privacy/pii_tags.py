"""Values split by inline HTML tags: `john<span>@</span>example.com`, `+1 (415)</span> <span>555-0134`,
`<b>4111</b> <b>1111</b> ...`. Scraped pages mark up parts of a value (obfuscation against harvesters, styling
of area codes); the passes read the tags as text between the parts and find nothing.

After the scrub of the text as it is (attributes such as `href="mailto:..."` are read there), the text is read
once more with its inline tags left out (`tag_view`: the text phrasing elements of HTML, never block elements
such as `<td>` or `<p>`, whose edges separate values, nor `<sup>`/`<sub>` or code-like ones, whose contents are
not part of a neighbouring number). A value found only there is replaced from its first character to its last
in the text; the tags inside it are kept after the placeholder (`tag_restore`), so the markup is the text's own.
"""

from __future__ import annotations

import re
from collections.abc import Iterable

from tasks.data.privacy.pii_width import drop_spans, place_pieces

INLINE_TAGS = frozenset({"a", "abbr", "b", "bdi", "bdo", "big", "cite", "data", "dfn", "em", "font", "i", "mark",
                         "q", "s", "small", "span", "strong", "time", "tt", "u", "wbr"})
# a start or end tag; quoted attribute values may hold `>`
TAG = re.compile(r"</?([A-Za-z][A-Za-z0-9]*)(?:\s(?:[^<>\"']|\"[^\"]*\"|'[^']*')*)?/?>")


def tag_view(text: str) -> tuple[str, list[int]] | None:
    """The text without its inline tags and the offset in `text` of each character of it (one more entry: the
    text's length), or None when it has none."""
    if "<" not in text:
        return None
    spans = [(m.start(), m.end()) for m in TAG.finditer(text) if m.group(1).lower() in INLINE_TAGS]
    if not spans:
        return None
    view, offsets = drop_spans(text, spans)
    # a value's parts meet at a digit or an `@` (`555</b>-<b>0134`, `john<span>@`): where no removed tag
    # touches one, no value is split, and the second reading (a whole scrub) is not worth its time
    gaps = (i for i in range(len(view) + 1) if offsets[i] != (offsets[i - 1] + 1 if i else 0))
    if not any(c.isdigit() or c == "@" for i in gaps for c in view[max(0, i - 1):i + 1]):
        return None
    return view, offsets


def tag_restore(text: str, view: str, offsets: list[int], scrubbed: str,
                placeholders: Iterable[str]) -> str | None:
    """`text` with each span `scrubbed` replaced in `view` replaced from its first character to its last, the
    inline tags inside that range kept after the placeholder (`<b>842</b>-705-0882` → `<b><PHONE></b>`): the
    markup is exactly the text's, whatever its nesting; None when the kept pieces cannot be placed."""
    placed = place_pieces(view, scrubbed, placeholders)
    if placed is None:
        return None
    out: list[str] = []
    pos = kept_end = 0              # pos: text offset copied to; kept_end: view offset after the last kept piece
    pending: list[str] = []
    for piece in placed:
        if isinstance(piece, str):
            pending.append(piece)
            continue
        start, end = piece
        if pending:
            first = offsets[kept_end]
            last = offsets[start - 1] + 1 if start > kept_end else first
            out += [text[pos:first], *pending, *_kept_tags(text, first, last)]
            pos, pending = last, []
        kept_end = end
    out.append(text[pos:])
    return "".join(out)


def _kept_tags(text: str, first: int, last: int) -> list[str]:
    """The inline tags of text[first:last] that still matter once its text is gone: `<wbr>` and an element opened
    and closed inside with nothing left between (`<b></b>`) drop out; the rest keeps the nesting as it was."""
    kept: list[tuple[str, str]] = []
    for m in TAG.finditer(text, first, last):
        name, tag = m.group(1).lower(), m.group()
        if name not in INLINE_TAGS or name == "wbr":
            continue
        if tag.startswith("</") and kept and kept[-1][0] == name and not kept[-1][1].startswith("</"):
            kept.pop()
        else:
            kept.append((name, tag))
    return [tag for _, tag in kept]
