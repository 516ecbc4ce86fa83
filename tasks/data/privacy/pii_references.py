"""SSN-shaped reference numbers for `tasks.data.privacy.pii`: a ticket's, an order's or an invoice's number in the
`AAA-GG-SSSS` layout (`Ticket 123-45-6789`, `Order #219-57-4232`, `Invoice No. 219-57-4232`) is the shop's or the
help desk's, not a person's. The phone pass already leaves such codes after their label (`pii_phones`); the SSN
passes (`pii_ids.ID_PASSES`) are given the same exception by `without_references` for the US layout (a NINO's or
SIN's letters and cues are no code's), unless an SSN cue stands earlier on the line (`SSN of the ticket holder: …`).
A bare `ref` is not such a label: it is how a letter or a form points to any value, a person's number included.
"""

from __future__ import annotations

import re
from typing import Callable

# The label right before the number: a word for a code, then its `no`/`#`/`id`, a colon, a `#`.
_REFERENCE_BEFORE = re.compile(
    r"(?i)\b(?:ticket|order|invoice|case|tracking|confirmation|booking|reservation|transaction|"
    r"rma|sku|serial|part|item|model|claim|po)(?:[ .-]*(?:id|no|nr|number|num|\#))?\.?[ \t]*[:#]?[ \t]*\#?[ \t]*$")
_US_LAYOUT = re.compile(r"\d{3}([ -])\d\d\1\d{4}")
_SSN_CUE_ON_LINE = re.compile(r"(?i)\b(?:ssn|ss\#|social[ _-]security|tax[ _-]?id|tin)\b[^\n]*$")


def is_reference(m: re.Match[str]) -> bool:
    """An SSN-shaped number with a reference number's label right before it, and no SSN cue earlier on its line."""
    text, start = m.string, m.start()
    return _US_LAYOUT.fullmatch(m.group()) is not None and \
        _REFERENCE_BEFORE.search(text, max(0, start - 32), start) is not None and \
        _SSN_CUE_ON_LINE.search(text, max(0, start - 80), start) is None


def without_references(passes: tuple) -> tuple:
    """The `(kind, pattern, validator, group, hint)` passes with each `ssn` pass's validator refusing a reference."""
    def gated(valid: Callable[[re.Match[str]], bool]) -> Callable[[re.Match[str]], bool]:
        return lambda m: not is_reference(m) and valid(m)
    return tuple((kind, pattern, gated(valid) if kind == "ssn" else valid, group, hint)
                 for kind, pattern, valid, group, hint in passes)
