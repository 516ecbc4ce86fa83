"""Values veiled by how a page or document writes them, for `tasks.data.privacy.pii`: read as a reader sees them.

A page renders `+1&nbsp;415&nbsp;555&nbsp;2671` and LaTeX `+44~20~7946~0958` as spaced phones, hides an HTML
comment inside a value against harvesters (`john<!-- x -->@example.com`, `555<!---->-0100`), and people write
SSNs with a word processor's en dash (`219–57–4232`), a card's groups with `/` or `_` (`Card: 4111/1111/...`),
an IBAN in dotted groups (`DE89.3704.0044.0532.0130.00`), obfuscated addresses (`pii_veiled_emails`) and a
scanned form's OCR slips after a value's label (`Tel: O171 234 5678`, `SSN: 412-67- 9083`: `pii_ocr`). The
passes read none of them. `veiled_view(text)` gives the text with each such spot read as what it means (an
entity as a space, a comment dropped, a separator as a space or `-`) and, for each of its characters, its
offset in `text`; `pii.scrub_pii` scrubs that view, `veiled_restore` puts the text's own pieces back around
the placeholders, and the result is scrubbed once more as written (a dropped comment may also have glued a value
to the word after it). Each spot is narrow (a digit next to the entity, a card cue before the groups, a valid IBAN
behind the dots), so the view differs from the text only where a value may be; the validators still decide.
"""

from __future__ import annotations

import re
from collections.abc import Iterable

from tasks.data.privacy.pii_ids import valid_iban
from tasks.data.privacy.pii_ocr import ocr_spots
from tasks.data.privacy.pii_veiled_emails import email_spots
from tasks.data.privacy.pii_width import offsets_restore

Spot = tuple[int, int, str]     # (start, end, what the reader sees there) in the text

# A comment whose neighbours are both a value's characters, one of them a digit or `@` (a value's two parts
# meet there); the text a comment holds is bounded: a longer one is a page's, not an obfuscation.
_COMMENT = re.compile(r"<!--.{0,200}?-->", re.S)
_VALUE_CHAR = re.compile(r"[\w@.+()-]")
# A non-breaking space (entity or character, or the narrow and thin spaces numbers are grouped with) next to a
# digit: rendered, it is the space between a number's groups.
# (led by one character class: an alternation led by `&` and a class is tried at every character)
_NBSP = re.compile(r"[&\u00a0\u202f\u2009](?:(?<=&)(?:nbsp|#160|#[xX][aA]0);|(?<!&))")
_NBSP_LITERALS = ("&nbsp;", "&#160;", "&#xa0;", "&#xA0;", "&#XA0;", "&#Xa0;", "\u00a0", "\u202f", "\u2009")
_DIGITISH_BEFORE, _DIGITISH_AFTER = frozenset("0123456789)"), frozenset("0123456789(+")
# LaTeX's `~` (a tie, a non-breaking space) in a run of at least three digit groups (a phone's) that stands alone
# after a blank, a brace or a tie (`\phone{+44~20~7946~0958}`, `Tel.~+44~20~...`); one `~` between two numbers is a
# range (`3~5 days`), and a run glued to other characters is part of a token (`pw=a!1~2~3`), not a phone.
_TIE_RUN = re.compile(r"(?<![^\s{>~])(?<![\w)]~)\+?\(?\d[\d()-]*(?:~\(?\d[\d()-]*){2,}(?![\w~])")
_TIE = re.compile(r"[0-9)]~[(+]?[0-9]")     # a class-led test first: `_TIE_RUN`, led by lookbehinds, is slow
# An SSN's layout with en dashes (U+2013); a range has one dash, and the SSN pass still checks the SSA's rules.
_EN_DASHED_SSN = re.compile(r"\u2013(?<![\w.+/\u2013-]\d{3}\u2013)(?<=\d{3}\u2013)\d\d\u2013\d{4}(?![\w\u2013-])")
# Four digit groups with `/` or `_` between (a path or an identifier otherwise) after a card cue on the same
# line; the card pass still checks the issuer and Luhn. (Digit-led, then the cue before it: led by the cue's
# `\b`, the scan was tried at every character, a tenth of the whole scrub's time on prose.)
_SLASHED_CARD = re.compile(r"[0-9](?<![\w/][0-9])\d{3}([/_])\d{4}\1\d{4}\1\d{1,4}(?:\1\d{1,3})?(?![\w/])", re.ASCII)
_CARD_CUE_BEFORE = re.compile(r"(?i)\b(?:card|credit|debit|visa|master[ ]?card|amex|american[ ]express|discover|"
                              r"maestro|kreditkarte|karte|carte|tarjeta|carta|cc)"
                              r"(?:[ _-]?(?:number|num|no\.?|nr\.?|\#))?\b[^\n\d]{0,20}$")
# Two letters, two digits and dotted groups of four (the IBAN pass reads spaced groups): a valid IBAN only.
_DOTTED_IBAN_ANCHOR = re.compile(r"[0-9](?<=[A-Z]{2}[0-9])[0-9]\.", re.ASCII)
_DOTTED_IBAN = re.compile(r"(?<![\w.])[A-Z]{2}\d\d(?:\.[A-Z0-9]{4}){2,7}(?:\.[A-Z0-9]{1,4})?(?![\w]|\.\w)", re.ASCII)


def _comment_spots(text: str) -> list[Spot]:
    """HTML comments inside a value, dropped."""
    spots = []
    for m in _COMMENT.finditer(text) if "<!--" in text else ():
        before, after = text[m.start() - 1:m.start()], text[m.end():m.end() + 1]
        if _VALUE_CHAR.match(before) and _VALUE_CHAR.match(after) and \
                any(c.isdigit() or c == "@" for c in before + after):
            spots.append((m.start(), m.end(), ""))
    return spots


def _space_spots(text: str) -> list[Spot]:
    """Non-breaking spaces next to a digit and LaTeX ties in a phone's groups, read as spaces."""
    spots = []
    for m in _NBSP.finditer(text) if any(literal in text for literal in _NBSP_LITERALS) else ():
        if text[m.start() - 1:m.start()] in _DIGITISH_BEFORE or text[m.end():m.end() + 1] in _DIGITISH_AFTER:
            spots.append((m.start(), m.end(), " "))
    if "~" in text and _TIE.search(text):
        for run in _TIE_RUN.finditer(text):
            spots += [(i, i + 1, " ") for i in range(run.start(), run.end()) if text[i] == "~"]
    return spots


def _separator_spots(text: str) -> list[Spot]:
    """En-dashed SSNs, a card's slashed or underscored groups after a cue, a valid IBAN's dots."""
    spots: list[Spot] = []
    if "\u2013" in text:
        for m in _EN_DASHED_SSN.finditer(text):
            spots += [(m.start(), m.start() + 1, "-"), (m.start() + 3, m.start() + 4, "-")]
    if "/" in text or "_" in text:
        for m in _SLASHED_CARD.finditer(text):
            if _CARD_CUE_BEFORE.search(text, max(0, m.start() - 48), m.start()):
                spots += [(i, i + 1, " ") for i in range(m.start(), m.end()) if text[i] == m.group(1)]
    for anchor in _DOTTED_IBAN_ANCHOR.finditer(text):
        m = _DOTTED_IBAN.match(text, anchor.start() - 2)
        if m is not None and valid_iban(m.group().replace(".", "")):
            spots += [(i, i + 1, " ") for i in range(m.start(), m.end()) if text[i] == "."]
    return spots


def _spots(text: str) -> list[Spot]:
    """Every spot, in order; one that overlaps an earlier one is left out."""
    kept: list[Spot] = []
    for spot in sorted(_comment_spots(text) + _space_spots(text) + _separator_spots(text) + email_spots(text) +
                       ocr_spots(text)):
        if not kept or spot[0] >= kept[-1][1]:
            kept.append(spot)
    return kept


def veiled_view(text: str) -> tuple[str, list[int]] | None:
    """The text read as a reader sees it and the offset in `text` of each character of it (one more entry: the
    text's length), or None when nothing in it is veiled."""
    spots = _spots(text)
    if not spots:
        return None
    pieces: list[str] = []
    offsets: list[int] = []
    last = 0
    for start, end, seen in spots:
        pieces += [text[last:start], seen]
        offsets += [*range(last, start), *[start] * len(seen)]
        last = end
    pieces.append(text[last:])
    offsets += range(last, len(text) + 1)
    return "".join(pieces), offsets


def veiled_restore(text: str, view: str, offsets: list[int], scrubbed: str,
                   placeholders: Iterable[str]) -> str | None:
    """`scrubbed` (the scrubbed `view`) with each kept piece in `text`'s own characters (a dropped comment at a
    kept piece's end goes with it, a spot inside a replaced value goes with the value), or None when the pieces
    cannot be placed. (Unlike `pii_width.restore`, the result is not checked to read as `scrubbed`: a kept
    `&nbsp;` next to a placeholder no longer touches a digit and reads as itself. Each kept piece is the text
    that its view characters stand for, by the offsets; and `pii` scrubs the result again as written.)"""
    return offsets_restore(text, view, offsets, scrubbed, placeholders)
