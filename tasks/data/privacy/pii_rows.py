"""Random tokens in rows that name no column: a CSV export without its header line, an `INSERT INTO t VALUES
(...)` without a column list or a `CREATE TABLE` in the dump.

The column passes (`pii_columns`, `pii_sql`) need a column's name to judge its values; without one, a value is
judged by its own shape, and only where that shape is safe: a field of 24 to 128 letters and digits, in mixed
case with two digits or more (`pii_values.looks_random`), no run of more than eight lower-case letters (a
camelCase identifier has words), its digits in two runs or more, and none of base64's `+`, `/`, `=` (a digest in a lockfile or an ETag). Hex
digests (one case), UUIDs (dashes), versions, dates and numbers have other shapes. A probe of 30 headless CSV
rows and 20 positional `INSERT` rows kept all 50 API tokens; a field is one between two of a row's separators
(`,`, `;`, a tab, `|`, quoted or not; a SQL tuple's `(`, quoted), on a line with two separators or more. With
one run of digits (a token drawn from letters and digits often has one digit), a token is told from an
identifier by its letters' case, strewn at random (`_case_strewn`): a later probe found 89 of 105 such tokens
and kept all 12 identifiers of one digit run.

A phone number or a date of birth alone in a row that names no column, beside a person's name and e-mail
(`PERSON_ROW_PASSES`, run with `pii_labelrows`'): a CSV export without its header line, a `|`- or
tab-separated dump (`Ana Silva,ana.silva@gmail.com,2125551234,1985-03-12,gold`). The cued passes want a label
(`Phone:`, `DOB`), the column passes (`pii_columns`, `pii_labelrows`) a header; here neither stands, but the
row says what it is: a person's name and an e-mail
address (or the `<EMAIL>` an earlier pass put) make it a person's record, and in one a field that is only a
phone number or only a date is theirs. A line is split by the separator it holds most of (`,`, `;`, tab, `|`,
two at least); a field, quotes stripped, is replaced when it is
- a phone: `+` or `0` leading, or a bracketed area code, or groups set apart by `-`, `.` or blanks, 10 to 15
  digits; or ten bare digits read as a North American number (area code and exchange not led by 0 or 1);
- a date of birth: a date as `pii_personal` reads one, from 1900 to ten years ago, and the row's only date (two
  dates are a record's creation and update, not a birth).
A row without both a name and an address (a product's row: its number and release date) keeps everything.
"""

from __future__ import annotations

import re
from datetime import date

from tasks.data.privacy.pii_cells import LabelledValues, last_text_memo
from tasks.data.privacy.pii_personal import is_birth_date
from tasks.data.privacy.pii_values import looks_random

_FIELD = re.compile(r"[,;\t|(](?P<q>['\"]?)(?P<v>[A-Za-z0-9_-]{24,128})(?P=q)(?=[,;\t|)]|\r?$)", re.MULTILINE)
_LOWER_RUN = re.compile(r"[a-z]{9}")
_DIGIT_RUN = re.compile(r"\d+")


def _token(m: re.Match[str]) -> bool:
    value = m.group("v")
    if value == value.lower() or value == value.upper() or _LOWER_RUN.search(value):
        return False
    if "_" in value or "-" in value:            # a slug or an identifier (`build_2024_Q3_release_candidate`)
        return False
    # an identifier's digits stand together (`structEndArchive64Locator`); a random token's are strewn, or, with
    # one digit (`looks_random` wants two), its letters' case is
    if len(_DIGIT_RUN.findall(value)) < 2 or not looks_random(value):
        if not (len(_DIGIT_RUN.findall(value)) == 1 and _case_strewn(value)):
            return False
    text, sep = m.string, m.group()[0]
    if sep == "(" and not m.group("q"):        # a call's argument, unless quoted as a SQL tuple's string
        return False
    line_start = text.rfind("\n", 0, m.start()) + 1
    line_end = text.find("\n", m.end())
    line = text[line_start:len(text) if line_end < 0 else line_end]
    return line.count(sep if sep != "(" else ",") >= 2


# A lone lower-case letter between capitals (`xQvB`): a camelCase identifier has one only in a two-letter word
# (`ConvertToBase64`, `ParseAsUtf8`); random letters, one in eight
_LOWER_BETWEEN = re.compile(r"(?<=[A-Z])[a-z](?=[A-Z])")
_TWO_LETTER_WORDS = frozenset("to as is of on in by at or if do up go no my be we id ok an it so re ex un".split())


def _case_strewn(value: str) -> bool:
    """Letters cased at random, as a token's drawn from 52 letters: the case changes at three letters in ten or
    more (camelCase changes it about once a word, `structEndArchive64Locator` 5 in 25), with two lone lower-case
    letters between capitals that are no two-letter word (a probe: 87 % of 24-48 letter tokens, none of 24
    identifiers with one digit)."""
    switches = sum(a.isupper() != b.isupper() for a, b in zip(value, value[1:]) if a.isalpha() and b.isalpha())
    lone = sum(value[m.start() - 1:m.end()].lower() not in _TWO_LETTER_WORDS for m in _LOWER_BETWEEN.finditer(value))
    return switches >= 0.3 * len(value) and lone >= 2


def _value_span(m: re.Match[str]) -> tuple[int, int]:
    return m.start("v") - m.start(), m.end("v") - m.start()


# (pattern, validator, group, hint): `pii_secrets.SECRET_PASSES`' shape, after them (a named column's value is theirs)
ROW_PASSES = ((_FIELD, _token, _value_span, lambda text: True),)


# --- a person's record: a phone number or a date of birth beside a name and an e-mail address -----------------
_SEPARATORS = (",", ";", "\t", "|")
# An address, or a placeholder an earlier pass put for one
_EMAIL = re.compile(r"<EMAIL>|[\w.%+'-]+@(?:[A-Za-z0-9-]+\.)+[A-Za-z]{2,24}")
# A person's name: two to four capitalised words, a particle (`de Vries`, `van der Berg`) among them
_NAME = re.compile(r"[A-Z][a-z'’-]*[a-z](?:[ ](?:(?:de|da|di|del|der|den|van|von|le|la|bin|al)[ ])*"
                   r"[A-Z][A-Za-z'’-]*[a-z]){1,3}")
_PHONE = re.compile(r"\+?(?:\(\d{2,5}\)[ .-]?)?\d[\d .-]{6,20}\d")
_GROUPED = re.compile(r"\d[ .-]\d|\)")
_NANP = re.compile(r"1?[2-9]\d\d[2-9]\d{6}")
_DATE_HINT = re.compile(r"\d{1,4}[-/.]\d{1,2}[-/.]\d{1,4}")
_QUOTES = "\"' "


def _phone(value: str) -> bool:
    digits = re.sub(r"\D", "", value)
    if not 10 <= len(digits) <= 15 or _PHONE.fullmatch(value) is None or _DATE_HINT.fullmatch(value):
        return False
    return value[0] in "+0(" or _GROUPED.search(value) is not None or _NANP.fullmatch(digits) is not None


def _birth_date(value: str) -> bool:
    year = re.search(r"\d{4}", value)
    return is_birth_date(value) and year is not None and int(year.group()) <= date.today().year - 10


def _record(line: str, offset: int) -> list[tuple[str, tuple[int, int]]]:
    """(kind, span) of the phone numbers and the date of birth of a person's record on `line`."""
    sep = max(_SEPARATORS, key=line.count)
    if line.count(sep) < 2:
        return []
    fields, at = [], 0
    for raw in line.split(sep):
        value = raw.strip(_QUOTES)
        start = offset + at + (raw.find(value) if value else 0)
        fields.append((value, start))
        at += len(raw) + 1
    values = [value for value, _ in fields]
    if not any(_EMAIL.fullmatch(v) for v in values) or not any(_NAME.fullmatch(v) for v in values):
        return []
    found = [("phone", (start, start + len(value))) for value, start in fields if value and _phone(value)]
    dates = [(value, start) for value, start in fields if _DATE_HINT.search(value)]
    if len(dates) == 1 and _birth_date(dates[0][0]):
        found.append(("dob", (dates[0][1], dates[0][1] + len(dates[0][0]))))
    return found


def _records(text: str) -> list[tuple[str, tuple[int, int]]]:
    """(kind, span) of each person's record's phone and date of birth: only lines with an `@` or `<EMAIL>` are
    split. Each needle's next place is kept till a line passes it (found anew per line, an absent one was
    searched to the text's end from every line)."""
    found: list[tuple[str, tuple[int, int]]] = []
    nxt = {needle: _find(text, needle, 0) for needle in ("@", "<EMAIL>")}
    while (first := min(nxt.values())) < len(text):
        start = text.rfind("\n", 0, first) + 1
        end = _find(text, "\n", first)
        found += _record(text[start:end].rstrip("\r"), start)
        nxt = {needle: at if at > end else _find(text, needle, end + 1) for needle, at in nxt.items()}
    return sorted(found, key=lambda item: item[1])


def _find(text: str, needle: str, start: int) -> int:
    at = text.find(needle, start)
    return len(text) if at < 0 else at


_FOUND = last_text_memo(_records)
# (kind, pattern, validator, group, hint): `pii`'s pass table, after the e-mail passes (an address may be a
# placeholder by then)
PERSON_ROW_PASSES = tuple((kind, LabelledValues(kind, _FOUND), lambda m: True, 0,
                           lambda text: "@" in text or "<EMAIL>" in text) for kind in ("phone", "dob"))
