"""Vanity phone numbers for `tasks.data.privacy.pii`: a North American number whose last seven places are partly
spelled in letters (`Call Tony at 314-555-TONY`, `text Mrs. Kay: 1-206-555-KEYS`, `call 1-800-GOT-JUNK`).

Classified ads and flyers of private persons print them; the phone passes read digits only. Letters in a phone's
layout are also product codes and models (`SKU 555-TONY-01`, `Model XR-555-KEYS`, `ISO-8859-1`), so a vanity
number counts only with a phone cue earlier on its line (`call`, `text`, `phone`, `tel`, ...): a brand's number
named without one (`1-800-FLOWERS is a trademark`) stays.

`VANITY_PASSES` has the shape of `pii`'s pass table: `(kind, pattern, validator(match), group, hint)`.
"""

from __future__ import annotations

import re

# An optional `1`/`+1` country code, a NANP area code, then seven places (3 and 4, or 7 together) of capitals and
# digits. Bounded throughout: linear on any text.
# Dashes or dots only after the area code: `at 200 OKAYABC` is a status and a word.
_VANITY = re.compile(r"(?<![\w+.-])(?:\+?1[ .-])?(?:\([2-9]\d\d\)[ ]?|[2-9]\d\d[.-])"
                     r"(?P<rest>[A-Z0-9]{3}[.-]?[A-Z0-9]{4})(?![\w-])", re.ASCII)
# The cheap test (led by a character class, so `re` skips in C): a digit, maybe a group, then three capitals.
_HINT = re.compile(r"[0-9][ .)-]{0,2}(?:[A-Z0-9]{3}[.-]?)?[A-Z]{3}")
# A phone cue earlier on the same line, a few words before the number (`Call Tony at `, `text Mrs. Kay: `).
_CUE = re.compile(r"(?i)\b(?:call|text|txt|phone|tel|ring|dial|cell|mobile|reach|contact|fax|sms|whatsapp)\b"
                  r"[^\n]{0,30}$")
_LOOK_BACK = 48


def _vanity(m: re.Match[str]) -> bool:
    """Three letters or more in the seven places, and a phone cue before it on its line."""
    if sum(c.isalpha() for c in m.group("rest")) < 3:
        return False
    line_start = m.string.rfind("\n", max(0, m.start() - _LOOK_BACK), m.start()) + 1
    return _CUE.search(m.string, max(line_start, m.start() - _LOOK_BACK), m.start()) is not None


def _hint(text: str) -> bool:
    return _HINT.search(text) is not None


VANITY_PASSES = (("phone", _VANITY, _vanity, 0, _hint),)
