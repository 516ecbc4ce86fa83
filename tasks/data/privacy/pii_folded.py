"""Folded lines for `tasks.data.privacy.pii`: iCalendar/vCard content lines and mail header fields that a writer
broke over several lines are scrubbed as the single lines they mean.

RFC 5545 (iCalendar) and RFC 6350 (vCard) fold a long content line by inserting CRLF and one space or tab, anywhere,
even inside a word: `ORGANIZER:mailto:wei.whitfield@eecs.b` / ` erkeley.edu`. Read as written, neither half is
an address (a probe of invitations found 24 of 32 folded e-mails, phones and passwords kept or cut). RFC 5322
folds a header field before whitespace (`X-Api-Key:` / ` <key>`, `Authorization: Bearer` / `  <token>`): the
value stands alone on its line, with no name before it. Unfolding is what a reader of either format does: the
calendar's fold (line break and the one blank) is dropped, the mail's line break is (its blank stays).

`fold_view(text)` gives the unfolded text and, for each of its characters, its offset in `text`; `pii` scrubs the
view and `unfold_restore` puts the text's own pieces, folds included, back around the placeholders.
"""

from __future__ import annotations

import re
from collections.abc import Iterable

from tasks.data.privacy.pii_width import drop_spans, offsets_restore

# A calendar or card object: its folds are dropped between its BEGIN and END lines (to the text's end if cut).
_CALENDAR = re.compile(r"BEGIN:(?:VCALENDAR|VEVENT|VTODO|VCARD)\r?\n(?:.*?\nEND:(?:VCALENDAR|VCARD)\b|.*)", re.S)
_CALENDAR_FOLD = re.compile(r"\r?\n[ \t]")
# A mail header block: two or more header fields in a row, one of them a field every message has, then
# continuation lines (opening with a blank) belong to the field above them; the block ends at a blank line.
# (one blank, then anything: `[ \t]+[^\n]*` would split a line's indentation in as many ways as it has blanks,
# and a failed block would try them all, line by line)
_HEADER_LINE = r"[A-Za-z][A-Za-z0-9-]{0,40}:[^\n]*\n(?:[ \t][^\n]*\n)*"
_HEADER_BLOCK = re.compile(rf"(?m)^(?:{_HEADER_LINE}){{2,}}")
_MESSAGE_FIELD = re.compile(r"(?im)^(?:from|to|subject|received|return-path|message-id|delivered-to|mime-version|"
                            r"date|cc|reply-to):")
# A message's fields as mail software writes them (a cheap test before the block scan)
_FIELD_LITERALS = ("From:", "To:", "Subject:", "Received:", "Return-Path:", "Message-ID:", "Message-Id:",
                   "Delivered-To:", "MIME-Version:")
_MAIL_FOLD = re.compile(r"\r?\n(?=[ \t])")


def _fold_spans(text: str) -> list[tuple[int, int]]:
    """(start, end) of each fold to drop, in order."""
    spans: list[tuple[int, int]] = []
    if "BEGIN:V" in text:
        for block in _CALENDAR.finditer(text):
            spans += [(f.start(), f.end()) for f in _CALENDAR_FOLD.finditer(text, block.start(), block.end())]
    if any(field in text for field in _FIELD_LITERALS):
        for block in _HEADER_BLOCK.finditer(text):
            if _MESSAGE_FIELD.search(block.group()) is None:
                continue
            spans += [(f.start(), f.end()) for f in _MAIL_FOLD.finditer(text, block.start(), block.end() - 1)
                      if not any(s <= f.start() < e for s, e in spans)]
    return sorted(spans)


def fold_view(text: str) -> tuple[str, list[int]] | None:
    """The text with its folds dropped and the offset in `text` of each character of it (one more entry: the
    text's length), or None when it has no fold."""
    if "\n " not in text and "\n\t" not in text:
        return None
    spans = _fold_spans(text)
    return drop_spans(text, spans) if spans else None


def unfold_restore(text: str, view: str, offsets: list[int], scrubbed: str,
                   placeholders: Iterable[str]) -> str | None:
    """`scrubbed` (the scrubbed `view`) with each kept piece in `text`'s own characters (its folds back in), or
    None when the kept pieces cannot be placed in `view` in order (`pii_width.place_pieces`)."""
    return offsets_restore(text, view, offsets, scrubbed, placeholders)  # its folds back in
