"""Line-number and timestamp prefixes that near dedup's shingles do not see (`DedupSpec.fold_line_prefixes`).

A code listing copied with its line numbers (`  12  return x`), or a log whose lines carry other timestamps
(`2024-03-01 12:00:01,234 INFO …` logged again another day), puts a different token at the start of every line:
with lines of 5-10 words nearly every word 5-gram spans one, and no such copy was found
(`benchmarks/dedup_scripts.py`). In a text where most lines start with such a prefix — `MIN_LINES` non-blank
lines at least, `SHARE` of them prefixed, the first among them (so that a batch is searched by reading each
text's start only) — the prefixes are dropped before shingling. A text with a few numbered lines (a list, a
table with a year column) is left alone; so is every text of fewer lines.
"""

from __future__ import annotations

import re

import numpy as np

MIN_LINES = 3
SHARE = 0.8
LOOK = 16                   # bytes read at a text's start for its first non-blank one (all blank: a candidate)
_DATE_TIME = r"\[?\d{4}-\d{2}-\d{2}[T ]\d{2}:\d{2}(?::\d{2})?(?:[.,]\d+)?(?:Z|[+-]\d{2}:?\d{2})?\]?"
_TIME = r"\[?\d{2}:\d{2}:\d{2}(?:[.,]\d+)?\]?"
_LINE_NUMBER = r"\d{1,6}[:.|)]?"
# a prefix ends at a space, a tab or the line's end (`12:30 pm`, `3.14` or `10x` start no prefix)
_PREFIX = re.compile(rf"^[ \t]*(?:{_DATE_TIME}|{_TIME}|{_LINE_NUMBER})(?=[ \t]|$)", re.M)


def strip_line_prefixes(text: str) -> str:
    """`text` without the line numbers or timestamps starting its lines, when its first non-blank line starts with
    one and at least `SHARE` of its `MIN_LINES` or more non-blank lines do; else `text` itself."""
    if _PREFIX.match(text.lstrip()) is None:
        return text
    lines = sum(1 for line in text.split("\n") if line.strip())
    if lines < MIN_LINES:
        return text
    prefixes = sum(1 for _ in _PREFIX.finditer(text))
    return _PREFIX.sub("", text) if prefixes >= SHARE * lines else text


def prefixed_docs(data: np.ndarray, ends: np.ndarray) -> list[int]:
    """Which texts of a batch may qualify for `strip_line_prefixes` (a superset the caller checks): their bytes
    `data` (uint8, a `\\n` after each text, at `ends`) first non-blank byte is a digit or `[` (or lies past the
    first `LOOK` bytes). Only the texts' starts are read (a look at every line start cost ~0.26 CPU s a 50k-doc
    benchmark, half of its signatures)."""
    if len(ends) == 0:
        return []
    window = data[np.minimum(np.concatenate([[0], ends[:-1] + 1])[:, None] + np.arange(LOOK), len(data) - 1)]
    blank = (window == 32) | (window == 9) | (window == 10) | (window == 13)        # [n, LOOK]
    first = window[np.arange(len(ends)), np.argmax(~blank, axis=1)]
    return np.flatnonzero(blank.all(axis=1) | ((first >= 48) & (first <= 57)) | (first == 91)).tolist()
