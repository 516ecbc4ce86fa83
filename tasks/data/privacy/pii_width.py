"""Full-width forms for `tasks.data.privacy.pii`: PII written in full-width digits and letters (and in the digits
of other scripts, `_DIGIT_ZEROS`, or with Unicode's hyphens, `_HYPHENS`) is found, and the text around it keeps its
own characters.

CJK text often writes numbers, addresses and codes in full-width forms (`電話：０３－１２３４－５６７８`,
`ｊｏｈｎ＠ｅｘａｍｐｌｅ．ｃｏｍ`), which no ASCII pattern reads; the default normalization (NFC) keeps them,
since NFKC would change the kept text elsewhere too (superscripts, ligatures, CJK punctuation). So `pii.scrub_pii`
scrubs a view of the text with each full-width form (U+FF01–FF5E) and the ideographic space read as its ASCII
character — one character for one, so every offset stays — and `restore` puts the text's own characters back
around the placeholders: the scrubbed view is the view with some spans replaced by placeholders, so the kept
pieces between them are found in the view in order. The result is checked (its view must be the scrubbed view);
`None` when it is not, and the caller scrubs the text as written.
"""

from __future__ import annotations

import re
from collections.abc import Iterable

# Decimal digits of other scripts, read as ASCII digits too: phones and ids written in Arabic-Indic (`٠٥٠١٢٣٤٥٦٧`),
# Persian (`۰۹۱۲…`), Devanagari (`९८७६…`) or Bengali digits, as Arabic, Persian, Hindi and Bengali pages do; and the
# mathematical bold, double-struck, sans-serif, sans-serif bold and monospace digits (U+1D7CE-1D7FF), which styled
# social-media text writes numbers in (`𝟒𝟔𝟔𝟕…`) and NFC keeps (each one code point: offsets stay).
_DIGIT_ZEROS = (0x0660, 0x06F0, 0x0966, 0x09E6, 0x1D7CE, 0x1D7D8, 0x1D7E2, 0x1D7EC, 0x1D7F6)
# Hyphens that are `-` in all but line breaking: U+2010 HYPHEN, U+2011 NON-BREAKING HYPHEN (word processors put it
# in phone numbers and names to keep them on one line) and U+2012 FIGURE DASH (a dash a digit wide, for numbers).
# Read as text, a pass stopped at them and cut a phone in two, leaking its other half. (Not the en dash: a range's.)
_HYPHENS = (0x2010, 0x2011, 0x2012)
_WIDE = re.compile("[\uff01-\uff5e\u3000\u0660-\u0669\u06f0-\u06f9\u0966-\u096f\u09e6-\u09ef\u2010-\u2012"
                   "\U0001d7ce-\U0001d7ff]")
_TO_ASCII = {**{code: code - 0xFEE0 for code in range(0xFF01, 0xFF5F)}, 0x3000: 0x20,
             **{zero + d: 0x30 + d for zero in _DIGIT_ZEROS for d in range(10)}, **dict.fromkeys(_HYPHENS, 0x2D)}


def width_view(text: str) -> str | None:
    """The text with full-width forms read as ASCII, or None when it has none (nothing to fold)."""
    return text.translate(_TO_ASCII) if _WIDE.search(text) else None


def restore(text: str, view: str, scrubbed: str, placeholders: Iterable[str]) -> str | None:
    """`scrubbed` (the scrubbed `view`) with the kept pieces in `text`'s own characters, or None when the pieces
    cannot be placed in `view` (the result would not be `scrubbed` read as ASCII)."""
    placed = place_pieces(view, scrubbed, placeholders)
    if placed is None:
        return None
    restored = "".join(piece if isinstance(piece, str) else text[piece[0]:piece[1]] for piece in placed)
    return restored if restored.translate(_TO_ASCII) == scrubbed else None


def place_pieces(view: str, scrubbed: str, placeholders: Iterable[str]) -> list[tuple[int, int] | str] | None:
    """`scrubbed` (`view` with some spans replaced by placeholders) as its pieces in order: each kept piece as its
    (start, end) in `view` (the first one always, even empty), each placeholder as itself; None when a kept piece
    is not found in `view` after the one before it. Shared by the full-width view and the unfolded view
    (`pii_folded`), which map the kept spans back to the text's own characters each in their own way."""
    pieces = re.split("(" + "|".join(map(re.escape, sorted(set(placeholders), key=len, reverse=True))) + ")", scrubbed)
    out: list[tuple[int, int] | str] = []
    at = 0                          # pieces: kept, placeholder, kept, ..., kept; `at`: view offset read to
    for k in range(0, len(pieces), 2):
        kept = pieces[k]
        if k == 0:
            start = 0 if view.startswith(kept) else -1
        elif k == len(pieces) - 1:
            start = len(view) - len(kept) if len(view) - len(kept) >= at + 1 else -1
        elif kept:
            start = view.find(kept, at + 1)
        else:                        # two placeholders side by side: one replaced span, as far as the text goes
            out.append(pieces[k + 1])
            continue
        if start < 0 or view[start:start + len(kept)] != kept:
            return None
        out.append((start, start + len(kept)))
        at = start + len(kept)
        if k + 1 < len(pieces):
            out.append(pieces[k + 1])
    return out


def drop_spans(text: str, spans: list[tuple[int, int]]) -> tuple[str, list[int]]:
    """`text` without the sorted, disjoint `spans` and the offset in `text` of each character left (one more
    entry: the text's length). Shared by the unfolded view (`pii_folded`) and the untagged one (`pii_tags`)."""
    pieces, offsets, last = [], [], 0
    for start, end in spans:
        pieces.append(text[last:start])
        offsets.extend(range(last, start))
        last = end
    pieces.append(text[last:])
    offsets.extend(range(last, len(text) + 1))
    return "".join(pieces), offsets


def offsets_restore(text: str, view: str, offsets: list[int], scrubbed: str,
                    placeholders: Iterable[str]) -> str | None:
    """`scrubbed` (the scrubbed `view`, a view of `text` with `offsets[i]` the offset in `text` of its character i,
    one more entry: the text's length) with each kept piece in `text`'s own characters, or None when the pieces
    cannot be placed (`place_pieces`). A kept piece takes the text's characters up to the next piece's (what the
    view dropped right after it: a fold, a comment); the first takes those before it too; a replaced span, those
    inside it. Shared by the unfolded view (`pii_folded`) and the veiled one (`pii_veiled`)."""
    placed = place_pieces(view, scrubbed, placeholders)
    if placed is None:
        return None
    out, first = [], True
    for piece in placed:
        if isinstance(piece, str):
            out.append(piece)
            continue
        out.append(text[0 if first else offsets[piece[0]]:offsets[piece[1]]])
        first = False
    return "".join(out)
