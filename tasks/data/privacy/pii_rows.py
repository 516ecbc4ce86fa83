"""Random tokens in rows that name no column: a CSV export without its header line, an `INSERT INTO t VALUES
(...)` without a column list or a `CREATE TABLE` in the dump.

The column passes (`pii_columns`, `pii_sql`) need a column's name to judge its values; without one, a value is
judged by its own shape, and only where that shape is safe: a field of 24 to 128 letters and digits, in mixed
case with two digits or more (`pii_values.looks_random`), no run of more than eight lower-case letters (a
camelCase identifier has words), its digits in two runs or more, and none of base64's `+`, `/`, `=` (a digest in a lockfile or an ETag). Hex
digests (one case), UUIDs (dashes), versions, dates and numbers have other shapes. A probe of 30 headless CSV
rows and 20 positional `INSERT` rows kept all 50 API tokens; a field is one between two of a row's separators
(`,`, `;`, a tab, `|`, quoted or not; a SQL tuple's `(`, quoted), on a line with two separators or more.
"""

from __future__ import annotations

import re

from tasks.data.privacy.pii_values import looks_random

_FIELD = re.compile(r"[,;\t|(](?P<q>['\"]?)(?P<v>[A-Za-z0-9_-]{24,128})(?P=q)(?=[,;\t|)]|\r?$)", re.MULTILINE)
_LOWER_RUN = re.compile(r"[a-z]{9}")
_DIGIT_RUN = re.compile(r"\d+")


def _token(m: re.Match[str]) -> bool:
    value = m.group("v")
    if not looks_random(value) or value == value.lower() or value == value.upper() or _LOWER_RUN.search(value):
        return False
    if "_" in value or "-" in value:            # a slug or an identifier (`build_2024_Q3_release_candidate`)
        return False
    # an identifier's digits stand together (`structEndArchive64Locator`); a random token's are strewn
    if len(_DIGIT_RUN.findall(value)) < 2:
        return False
    text, sep = m.string, m.group()[0]
    if sep == "(" and not m.group("q"):        # a call's argument, unless quoted as a SQL tuple's string
        return False
    line_start = text.rfind("\n", 0, m.start()) + 1
    line_end = text.find("\n", m.end())
    line = text[line_start:len(text) if line_end < 0 else line_end]
    return line.count(sep if sep != "(" else ",") >= 2


def _value_span(m: re.Match[str]) -> tuple[int, int]:
    return m.start("v") - m.start(), m.end("v") - m.start()


# (pattern, validator, group, hint): `pii_secrets.SECRET_PASSES`' shape, after them (a named column's value is theirs)
ROW_PASSES = ((_FIELD, _token, _value_span, lambda text: True),)
