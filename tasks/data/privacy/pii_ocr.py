"""Values garbled by OCR, for `tasks.data.privacy.pii_veiled`: read as the form meant them.

A scanned form's text layer confuses `O` and `0`, `l`/`I` and `1` (`Tel: O171 234 5678`, `DOB: O3/22/l979`,
`Card No: 4485 9139 O996 O3O4`), drops a space into a value (`SSN: 412-67- 9083`, `jonas.brandt@gmx. de`) or
letter-spaces a printed field (`Telefon : 0 1 7 1 4 8 2 9 1 7 3`). The passes read none of them. `ocr_spots(text)`
gives the spots (start, end, what the form meant) that `pii_veiled` reads through: each only after a value's cue
earlier on the same line (`Tel`, `SSN`, `IBAN`, `Card`, `DOB`, ...; for an address its `@`), so a model code
(`O171 series`) or a row of numbers without a label stays as written; and the passes' validators still decide
(Luhn, mod 97, the SSA's rules, a calendar date, a phone's digit count).
"""

from __future__ import annotations

import re

from tasks.data.privacy.pii_ids import valid_iban

Spot = tuple[int, int, str]

# A letter OCR reads for a digit, next to a digit (led by character classes: `re` skips the rest in C).
_CONFUSABLE = re.compile(r"[0-9][OolI]|[OolI][0-9]")
_AS_DIGIT = {"O": "0", "o": "0", "l": "1", "I": "1"}
# A word of digits and such letters only, with a digit (`O171`, `5O3`, `0l87`, `O3O4`, `l979`).
_WORD = re.compile(r"[0-9OolI]+")
# A value's label earlier on the line.
_CUE = re.compile(r"(?i)\b(?:tel|telefon|phone|fon|mobile?|mob|cell|handy|fax|ssn|social[ ]security|iban|konto"
                  r"|account|card|karte|date[ ]of[ ]birth|d\.?o\.?b|birth|geb|born|passport)\b")
_LOOK_BACK = 48
# An IBAN's groups may hold the letters `O` and `I` (`AD44 5456 2412 VOYE 38I7`): after an IBAN's cue a word is read
# as digits only when the IBAN it is in then passes mod 97.
_IBAN_CUE = re.compile(r"(?i)\b(?:iban|konto|account)\b")
_IBAN_RUN = re.compile(r"[A-Z]{2}[0-9]{2}(?:[ ]?[A-Z0-9OolI]{1,4}){2,8}")
# A space dropped between a value's groups: after a dash or slash that follows a digit (`412-67- 9083`).
_STRAY_SPACE = re.compile(r"[0-9][-/][ ](?=[0-9])")
# A letter-spaced field: seven single digits or more, one space apart (a dash between groups kept).
_SPACED = re.compile(r"[0-9](?<![\w.][0-9])(?:[ ](?:-[ ])?[0-9]){6,40}(?![\w.])")
# An address whose top-level domain OCR split off (`@gmx. de`): a common one, and the line or field ends there.
_SPLIT_TLD = re.compile(r"@[A-Za-z0-9-]{1,63}(?:\.[A-Za-z0-9-]{1,63}){0,4}\.([ ])(?:com|net|org|edu|gov|info|io|eu"
                        r"|de|at|ch|fr|it|es|pt|nl|be|pl|cz|sk|hu|ro|uk|ie|se|no|dk|fi|ru|jp|br|mx|ca|au|in)"
                        r"(?=[ \t]*(?:$|[\r\n,;)>]))", re.ASCII | re.MULTILINE)


def _cued(text: str, at: int) -> bool:
    line_start = text.rfind("\n", max(0, at - _LOOK_BACK), at) + 1
    return _CUE.search(text, max(line_start, at - _LOOK_BACK), at) is not None


def _letter_spots(text: str) -> list[Spot]:
    """`O`/`o` as 0 and `l`/`I` as 1 in a word of digits and such letters after a cue."""
    spots: list[Spot] = []
    last = 0
    for hit in _CONFUSABLE.finditer(text):
        if hit.start() < last:
            continue
        word = _WORD.match(text, _word_start(text, hit.start()))
        if word is None:
            last = hit.end()
            continue
        last = word.end()
        if text[word.end():word.end() + 1].isalnum() or not _cued(text, word.start()) or \
                not _iban_ok(text, word):
            continue
        spots += [(i, i + 1, _AS_DIGIT[text[i]]) for i in range(word.start(), word.end()) if text[i] in _AS_DIGIT]
    return spots


def _iban_ok(text: str, word: re.Match[str]) -> bool:
    """Not after an IBAN's cue, or the IBAN around the word valid once its confusable letters are read as digits."""
    line_start = text.rfind("\n", max(0, word.start() - _LOOK_BACK), word.start()) + 1
    if _IBAN_CUE.search(text, max(line_start, word.start() - _LOOK_BACK), word.start()) is None:
        return True
    for run in _IBAN_RUN.finditer(text, max(line_start, word.start() - _LOOK_BACK), word.end() + 40):
        if run.start() <= word.start() and word.end() <= run.end():
            digits = text[run.start():word.start()] + "".join(_AS_DIGIT.get(c, c) for c in word.group())
            return valid_iban((digits + text[word.end():run.end()]).replace(" ", ""))
    return False


def _word_start(text: str, at: int) -> int:
    """The start of the run of digits and confusable letters around `at`, or `at` past its end when a letter of
    another kind glues to it (`Model5O3` is a word, no value)."""
    start = at
    while start > max(0, at - 40) and text[start - 1] in "0123456789OolI":
        start -= 1
    return len(text) if start > 0 and text[start - 1].isalnum() else start


def _space_spots(text: str) -> list[Spot]:
    """A stray space in a value's groups, the spaces of a letter-spaced field, a split top-level domain."""
    spots: list[Spot] = []
    for m in _STRAY_SPACE.finditer(text):
        if _cued(text, m.start()):
            spots.append((m.end() - 1, m.end(), ""))
    for m in _SPACED.finditer(text):
        digits = "".join(c for c in m.group() if c.isdigit())
        # a counted row (`1 2 3 4 5 6 7 8`) or a bit pattern is no field
        if len(set(digits)) >= 4 and digits not in "0123456789" and digits not in "9876543210" and \
                _cued(text, m.start()):
            spots += [(i, i + 1, "") for i in range(m.start(), m.end()) if text[i] == " "]
    if "@" in text:
        spots += [(m.start(1), m.end(1), "") for m in _SPLIT_TLD.finditer(text)]
    return spots


def ocr_spots(text: str) -> list[Spot]:
    """Every OCR spot, unordered (`pii_veiled` sorts them and drops overlaps)."""
    return _letter_spots(text) + _space_spots(text)
