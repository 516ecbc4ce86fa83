"""Combining marks and line-break hyphens as near dedup's word shingles read them (`DedupSpec.marks_in_words`,
`fold_pointing`, `fold_hyphenation`).

- Combining marks (Unicode Mn/Mc) are no `\\w`. In Devanagari, Bengali, Tamil and the other Indic scripts the
  vowel signs and viramas are marks, so `हिन्दी` split into `ह`, `न`, `द`: a 5-gram spanned two written words,
  and two different texts drawn from one vocabulary shared far more fragment 5-grams than word 5-grams.
  `mark_words` reads a mark as part of the word it sits on. The marks of the scripts `segment` spaces out
  character by character (Thai, Lao, Khmer, Myanmar, kana voicing marks) keep dropping out as they did: there
  each character is a unit already, and a mark would be a unit of its own.
- Optional pointing: Arabic harakat (fatha, kasra, damma, sukun, shadda, tanwin, superscript alef, Quranic
  marks), Hebrew niqqud and cantillation, and stress accents (a combining acute) on Cyrillic vowels are
  added to teaching texts, scripture and dictionaries and left out of ordinary writing: a copy with or without
  them is the same text, yet each mark split its word in two (`كَتَبَ` → `ك`, `ت`, `ب`), and no pointed copy was
  found. `drop_pointing` removes them. Marks that are letters (the Indic vowel signs) are never dropped:
  datatrove's strip-all-marks would make distinct words collide.
- A word hyphenated at a line break (`exam-\\nple`, hard-wrapped or OCR'd text; a lower-case letter after the
  break) is read as one word (`join_hyphenated`) where the text spells it whole elsewhere: a compound broken at
  its hyphen (`left-\\nhand`) is not joined.
"""

from __future__ import annotations

import re
import unicodedata
from functools import lru_cache

import numpy as np

from tasks.data.dedup.segment import script_table

_POINTS = ("\u0591-\u05bd\u05bf\u05c1\u05c2\u05c4\u05c5\u05c7\u0610-\u061a\u064b-\u065f\u0670\u06d6-\u06dc"
           "\u06df-\u06e4\u06e7\u06e8\u06ea-\u06ed")
_POINTING = re.compile(f"[{_POINTS}]|(?<=[\u0400-\u04ff])\u0301")
_MAYBE_POINTING = re.compile(f"[{_POINTS}\u0301]")     # one class: `re` scans for it at C speed
# starts with its literal, which `re` finds by a fast search (a leading lookbehind for the letter before the
# hyphen made it try every position: 0.47 CPU s for 20,000 documents, ~40 % of their shingles); that letter is
# asked in Python, at the few matches
_HYPHEN_BREAK = re.compile(r"-\n[ \t]*(?=([^\W\d_]))")
_WORD = re.compile(r"\w+")
_LAST_WORD = re.compile(r"\w+$")


def drop_pointing(text: str) -> str:
    """`text` without Arabic harakat, Hebrew niqqud/cantillation and Cyrillic stress accents (itself when ASCII
    or without any)."""
    if text.isascii() or _MAYBE_POINTING.search(text) is None:
        return text
    return _POINTING.sub("", text)


def join_hyphenated(text: str) -> str:
    """`text` with each letter-hyphen-line break-lower-case letter (`exam-\\n  ple`) joined into one word
    (`example`) where the text spells that word whole elsewhere; `text` itself when it has none.

    The evidence test is what tells a word cut by the typesetter from a compound that a wrapper broke at its
    hyphen (`keyword-\\nonly`, `left-\\nhand`: Python's `textwrap` breaks there, and on the embedded help
    texts, code and plays these were most of the breaks); joining those lost 3 of 10,055 true pairs of
    `benchmarks/dedup_real.py`, whose copies re-wrap them. A capital after the break is a dash that interrupts
    a speech (`to whose falls-\\nHeaven prosper`), not a word cut in two."""
    if "-\n" not in text:
        return text
    words: set[str] = set()

    def join(m: re.Match[str]) -> str:
        at = m.start()
        if not (at and text[at - 1].isalpha() and m.group(1).islower()):
            return m.group()
        head, tail = _LAST_WORD.search(text, max(0, at - 64), at), _WORD.match(text, m.end())
        if not words:
            words.update(_WORD.findall(text.lower()))
        return "" if head and tail and (head.group() + tail.group()).lower() in words else m.group()
    joined = _HYPHEN_BREAK.sub(join, text)
    return text if joined == text else joined


def hyphenated_docs(data: np.ndarray, ends: np.ndarray) -> list[int]:
    """Which texts of a batch (UTF-8 bytes `data`, a `\\n` after each, at `ends`) hold a `-` directly before a
    line break, after an ASCII letter or a non-ASCII byte: a superset of those `join_hyphenated` changes (numpy
    passes over the bytes; `--\\n`, ` -\\n` and `x = y -\\n` in code are not asked)."""
    at = np.flatnonzero((data[1:-1] == 45) & (data[2:] == 10)) + 1
    before = data[at - 1] | np.uint8(0x20)
    at = at[(before >= 0x80) | ((before >= 0x61) & (before <= 0x7A))]
    return sorted(set(np.searchsorted(ends, at).tolist())) if len(at) else []


def _marks() -> list[int]:
    """Code points of category Mn/Mc outside `segment.SCRIPT_RANGES`. They live in planes 0, 1 and 14 (the
    variation selectors supplement), as the format characters do (`normalize._format_codes`; a test scans every
    plane): reading only those is ~0.05 s once per process instead of ~0.3."""
    table = script_table()
    return [c for plane in (0, 1, 14) for c in range(max(plane << 16, 0x300), (plane + 1) << 16)
            if unicodedata.category(chr(c)) in ("Mn", "Mc") and not (c < 0x10000 and table[c])]


@lru_cache(maxsize=1)
def mark_words() -> tuple[np.ndarray, re.Pattern[str]]:
    """The marks that join their word: as a uint8 [65536] table (1 for a BMP one) and the astral path's word
    regex (`\\w` or one of them; built once per process, ~0.3 s)."""
    codes = _marks()
    table = np.zeros(0x10000, np.uint8)
    table[[c for c in codes if c < 0x10000]] = 1
    return table, re.compile("[\\w" + "".join(re.escape(chr(c)) for c in codes) + "]+")
