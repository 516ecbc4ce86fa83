"""`normalize.fold_words` as the compiled word path reads it, for the texts no Python fold reads.

`minhash._word_units` hands the word loop most texts as their own UTF-8 (ASCII, or simple characters only: no
markup, no entity, NFKC already), and folds only the others in Python. The folds of `fold_words` change words in
texts of every kind — `Gebühren`, `donʼt`, `_italic_`, and in English too the digraphs of `queue` —, so these
texts read them here, in bytes, bit for bit as their folded text would shingle
(`tests/helpers/shingle_definition.py`), with no Python per text:

- the apostrophe look-alike letters `ʼ ʹ ʻ` (`textmarks.fold_apostrophes` reads them as `'`, which is no word
  character) are blanked with the characters that are no `\\w` (`word_breaks`);
- a Latin letter with diacritics is written as its ASCII spelling (`marks.latin_bytes`: `é` → `e`, `æ` → `ae`)
  by the same compiled pass (`hashloops.blank_non_words`), which already decodes every non-ASCII character
  (one byte for one character, as the text has it: the emphasis rule counts characters);
- `_x_` and `__x y__` (`textmarks.fold_emphasis`) have their underscores blanked (`blank_emphasis`, compiled,
  over the `_` bytes numpy finds: a quarter of `benchmarks/dedup_real.py`'s texts, its code, hold a `__init__`
  or a `_private`, and sent to the Python folds they tripled the cost of the signatures);
- `ae`, `oe`, `ue` are read as `a`, `o`, `u` by the word loop itself (`hashloops.word_hashes`' `digraphs`: one
  more table read a byte, ~1.5x the loop's time; a pass that marks or moves the bytes first measured ~2.6x, a
  regex per text ~12 ns a character).
"""

from __future__ import annotations

from functools import lru_cache

import numpy as np
from numba import njit

from specs.clean import DedupSpec
from tasks.data.cleanup.textmarks import APOSTROPHES, EMPHASIS_CHARS
from tasks.data.dedup import hashloops
from tasks.data.dedup.marks import latin_bytes, mark_words
from tasks.data.dedup.wordhash import WORD

@lru_cache(maxsize=4)
def word_breaks(marks: bool = False, apostrophes: bool = False) -> np.ndarray:
    """uint8 [65536]: 1 for each BMP character that is not `\\w` (the regex's own answer, ~10 ms once per
    process), which `hashloops.blank_non_words` overwrites with spaces; 0 for the others. `marks`: the combining
    marks that join their word (`marks.mark_words`) are 0 too; `apostrophes`: the look-alike letters `ʼ ʹ ʻ` are
    1 (`textmarks.fold_apostrophes` reads them as `'`)."""
    table = np.ones(0x10000, np.uint8)
    for m in WORD.finditer("".join(map(chr, range(0x10000)))):
        table[m.start():m.end()] = 0
    if marks:
        table[mark_words()[0] == 1] = 0
    if apostrophes:
        table[[ord(c) for c in APOSTROPHES]] = 1
    return table


@lru_cache(maxsize=1)
def _no_spelling() -> np.ndarray:
    return np.zeros(0x10000, np.uint16)


def fold_plain(data: np.ndarray, ends: np.ndarray, non_ascii: np.ndarray, plain: np.ndarray,
               spec: DedupSpec) -> np.ndarray:
    """Blank the non-word characters of the texts `non_ascii` of a batch (UTF-8 `data`, a `\\n` after each text,
    at `ends`; in place), and read `fold_words`' folds, as `spec` turns them on, in the texts `plain` (bool [n]:
    those no Python fold read; their characters are simple, `normalize.simple_chars`): Latin letters and the
    apostrophe look-alikes in every text of `non_ascii` (a folded one holds none), emphasis underscores in the
    plain ones. Returns the word loop's `digraphs` (uint64 [n]: 1 for the plain texts)."""
    spelled = latin_bytes() if spec.fold_unicode else _no_spelling()
    hashloops.blank_non_words(data, ends, non_ascii, word_breaks(spec.marks_in_words, spec.fold_unicode), spelled)
    if spec.fold_markup:
        at = np.flatnonzero(data == 95)
        if len(at):
            blank_emphasis(data, at[plain[np.searchsorted(ends, at)]], EMPHASIS_CHARS)
    return plain.astype(np.uint64) if spec.fold_unicode else np.zeros(len(ends), np.uint64)


# [256] the bytes of `[^\W_]`, in a text whose non-word characters are blanked: ASCII letters and digits, and every
# byte of a multi-byte character (a word character's there)
_LETTER = np.array([c >= 0x80 or chr(c).isalnum() for c in range(256)], dtype=np.bool_)


@njit(cache=True)
def blank_emphasis(data, at, limit):
    """`textmarks.fold_emphasis` in bytes, in place: each `_x_` or `__x y__` of the text in `data` (UTF-8, no
    non-word character left but ASCII ones, `\\n` ends every text) has its underscores overwritten by spaces (where
    the fold drops them: a space splits the same words, as no word character is beside either run's outer side).
    at: int64 [k], the sorted positions of the `_` bytes to read (those of the plain texts). As the regex, left to
    right: a run of one or two `_` after no word character and before a letter or digit opens; the first run of
    the same length after a letter or digit and before no word character, ≤ `limit` + 1 characters on and on the
    same line, closes; the search goes on after it."""
    n, resume = len(data), 0
    for p in at:
        if p < resume or (p > 0 and (data[p - 1] == 95 or _LETTER[data[p - 1]])):
            continue                                          # inside a run, or after a word character
        width = 2 if data[p + 1] == 95 else 1
        if not _LETTER[data[p + width]]:
            continue                                          # `___`, or no letter after the run
        q, chars = p + width, 0
        while q < n and data[q] != 10 and chars <= limit:
            size = 1                                          # the character at q: its bytes
            while q + size < n and 0x80 <= data[q + size] < 0xC0:
                size += 1
            q += size
            chars += 1
            if _LETTER[data[q - 1]] and data[q] == 95 and (width == 1 or data[q + 1] == 95) \
                    and data[q + width] != 95 and not _LETTER[data[q + width]]:
                data[p:p + width] = 32
                data[q:q + width] = 32
                resume = q + width
                break
