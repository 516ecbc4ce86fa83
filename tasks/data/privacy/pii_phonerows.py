"""Rows of numbers that a trunk-0 phone layout reads as a phone, for `tasks.data.privacy.pii_phones`.

A national number led by a trunk 0 and split into pairs (France's `01 23 45 67 89`) or fours (`0176 1234 5678`)
looks like any row of zero-padded numbers: a hex dump's bytes (`01 02 03 04 05 06 07 08`), lottery draws
(`04 12 23 31 38 45`), a bingo board, week numbers, a grid's rows, minutes past the hour (`07 14 21 28 35`),
zero-padded fields (`0128 0256 0320`). The NANP layout has its guard (three groups and no fourth); this is the
trunk 0's. A row of groups of one length is a phone only where it has a phone's count of pairs (France's five)
and stands alone: no digit group of the row goes on before or after it, across spaces or a line break.
"""

from __future__ import annotations

import re

# The groups of a match read as one row: all pairs, or all fours (what else is a phone's own layout).
_PAIRS = re.compile(r"\(?0\d\)?(?:[ .-]\d\d)+")
_FOURS = re.compile(r"\(?0\d{3}\)?(?:[ .-]\d{4})+")
# A group of the row's length right before or after the match, across blanks and at most one line break: the row
# goes on (`... 56 78 24h/24` or `... 5678 15 Uhr` does not).
_ROW_AFTER = {n: re.compile(rf"[ \t]*\n?[ \t]*\d{{{n}}}(?!\w)") for n in (2, 4)}
_ROW_BEFORE = {n: re.compile(rf"(?<!\w)\d{{{n}}}[ \t]*\n?[ \t]*$") for n in (2, 4)}
_FRENCH_PAIRS = 5
# a line that is one number of five pairs led by a trunk 0 (`06 12 34 56 78`), rising pairs under 60 excepted by
# the caller first (`01 02 03 04 05` is a sequence)
_PHONE_LINE = re.compile(r"[ \t]*\(?0\d\)?(?:[ .-]\d\d){4}[ \t]*")


def in_number_row(m: re.Match[str], text: str) -> bool:
    """The trunk-0 match `text` (its extension dropped) is a member of a row of numbers, not a phone."""
    pairs = _PAIRS.fullmatch(text) is not None
    if not pairs and _FOURS.fullmatch(text) is None:
        return False
    groups = [int(g) for g in re.findall(r"\d+", text)]
    if pairs and (len(groups) != _FRENCH_PAIRS or _ascending_minutes(groups)):
        return True
    # zero-padded fields (`0128 0256 0320`): a phone's later groups rarely all open with 0
    if not pairs and all(g.startswith("0") for g in re.findall(r"\d+", text)):
        return True
    string, size = m.string, 2 if pairs else 4
    row = _ROW_AFTER[size].match(string, m.end()) is not None or \
        _ROW_BEFORE[size].search(string, max(0, m.start() - 12), m.start()) is not None
    return row and not (pairs and _list_of_numbers(string, m.start(), m.end()))


def _list_of_numbers(string: str, start: int, end: int) -> bool:
    """The match is a line of its own, five pairs, and so is the line before or after it: a list of French phone
    numbers one per line (`01 23 45 67 89\n06 12 34 56 78`), not a row that goes on into the next line."""
    lo, hi = string.rfind("\n", 0, start) + 1, string.find("\n", end)
    hi = len(string) if hi < 0 else hi
    if _PHONE_LINE.fullmatch(string, lo, hi) is None:
        return False
    before = string.rfind("\n", 0, max(lo - 1, 0)) + 1 if lo else -1
    after = string.find("\n", hi + 1) if hi < len(string) else -1
    return (lo > 0 and _PHONE_LINE.fullmatch(string, before, lo - 1) is not None) or \
        (hi < len(string) and _PHONE_LINE.fullmatch(string, hi + 1, len(string) if after < 0 else after) is not None)


def _ascending_minutes(groups: list[int]) -> bool:
    """Pairs that rise and stay under 60 (`07 14 21 28 35`, `01 02 03 04 05`): minutes, a draw, a sequence; a
    French number's four later pairs rise and stay under 60 about one time in 200."""
    return all(a < b for a, b in zip(groups, groups[1:])) and groups[-1] < 60
