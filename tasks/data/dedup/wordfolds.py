"""`normalize.fold_words` as the compiled word path reads it, for the texts no Python fold reads.

`minhash._word_units` hands the word loop most texts as their own UTF-8 (ASCII, or simple characters only: no
markup, no entity, NFKC already), and folds only the others in Python. The folds of `fold_words` change words in
texts of every kind — `Gebühren`, `donʼt`, `_italic_`, and in English too the digraphs of `queue` —, so these
texts read them here, in bytes, bit for bit as their folded text would shingle
(`tests/helpers/shingle_definition.py`), with no Python per text:

- the apostrophe look-alike letters `ʼ ʹ ʻ` (`textmarks.fold_apostrophes` reads them as `'`, which is no word
  character) are blanked with the characters that are no `\\w` (`word_breaks`), or with `join_contractions`
  written as `'`, and so is `’` (`_tables`);
- a Latin letter with diacritics is written as its ASCII spelling (`marks.latin_bytes`: `é` → `e`, `æ` → `ae`)
  by the same compiled pass (`hashloops.blank_non_words`), which already decodes every non-ASCII character
  (one byte for one character, as the text has it: the emphasis rule counts characters);
- `_x_` and `__x y__` (`textmarks.fold_emphasis`) have their underscores deleted (`blank_emphasis`, compiled,
  over the `_` bytes numpy finds: a quarter of `benchmarks/dedup_real.py`'s texts, its code, hold a `__init__`
  or a `_private`, and sent to the Python folds they tripled the cost of the signatures);
- `ae`, `oe`, `ue` are read as `a`, `o`, `u` by the word loop itself (`hashloops.word_hashes`' `digraphs`: one
  more table read a byte, ~1.5x the loop's time; a pass that marks or moves the bytes first measured ~2.6x, a
  regex per text ~12 ns a character);
- last, in every text, the escapes `\\n`, `\\t`, `\\r` are read as spaces, a backslash before ASCII punctuation is
  dropped (`snake\\_case`) and contractions joined
  (`wordhash.read_escapes`, `join_words`: `mark_joins`, a byte deleted in place written as `hashloops.JOIN`).
"""

from __future__ import annotations

from functools import lru_cache

import numpy as np
from numba import njit

from specs.clean import DedupSpec
from tasks.data.cleanup.textmarks import APOSTROPHES, EMPHASIS_CHARS
from tasks.data.dedup import hashloops
from tasks.data.dedup.marks import latin_bytes, mark_words
from tasks.data.dedup.wordhash import ESCAPED_PUNCTUATION, WORD

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


@lru_cache(maxsize=8)
def _tables(marks: bool, unicode: bool, contractions: bool) -> tuple[np.ndarray, np.ndarray]:
    """`blank_non_words`' tables: `word_breaks`, and the ASCII spellings (`marks.latin_bytes` with `unicode`);
    with `contractions`, `’` (and with `unicode` the look-alikes `ʼ ʹ ʻ`) spelled `'`, for `mark_joins`."""
    breaks = word_breaks(marks, unicode)
    spelled = latin_bytes() if unicode else np.zeros(0x10000, np.uint16)
    if contractions:
        codes = [0x2019] + ([ord(c) for c in APOSTROPHES] if unicode else [])
        breaks, spelled = breaks.copy(), spelled.copy()
        breaks[codes], spelled[codes] = 0, ord("'")
    return breaks, spelled


_APOSTROPHE, _SPACE, _BACKSLASH = 0x27, 0x20, 0x5C
# [256] word bytes as the word loop reads them (`hashloops.word_hashes`: ASCII letters, digits, `_`, any byte of a
# multi-byte character; JOIN none); ESCAPED: the letters of `\n`, `\t`, `\r` (either case,
# `wordhash.read_escapes`); TAIL1/TAIL2: a contraction's end of one letter, and those of two (`CONTRACTION_TAILS`)
_WORD = np.array([c != hashloops.JOIN and (c >= 0x80 or chr(c).isalnum() or c == 0x5F) for c in range(256)],
                 dtype=np.bool_)
_ESCAPED = np.array([chr(c) in "ntrNTR" for c in range(256)], dtype=np.bool_)
# the bytes a backslash is dropped before (`wordhash.read_escapes`): ASCII punctuation but `\\`; its `'`
# stands for `’` too (spelled `'` here for `join_contractions`; the definition's class holds it)
_MARKED = np.array([chr(c) in ESCAPED_PUNCTUATION for c in range(256)], dtype=np.bool_)
_TAIL1 = np.array([chr(c) in "tsdmTSDM" for c in range(256)], dtype=np.bool_)
# RULE: the rule a byte starts (1 a space before a contraction's end, 2 an apostrophe); NEXT: the rules the byte
# after it may go on with (a deleted byte, JOIN, any)
_RULE = np.array([1 if c == _SPACE else 2 if c == _APOSTROPHE else 0 for c in range(256)], dtype=np.uint8)
_NEXT = np.array([3 if c == hashloops.JOIN else (1 if chr(c) in "tsdmlrvTSDMLRV" else 0) | (2 if _WORD[c] else 0)
                  for c in range(256)], dtype=np.uint8)
_TAILS2 = np.array([(ord("l") << 8) | ord("l"), (ord("r") << 8) | ord("e"), (ord("v") << 8) | ord("e")], np.int64)


@njit(cache=True, inline="always")
def _after(data, i):
    """The position of the first byte after i that is no JOIN (a deleted byte), or len(data)."""
    i += 1
    while i < len(data) and data[i] == hashloops.JOIN:
        i += 1
    return i


@njit(cache=True, inline="always")
def _word_before(data, i):
    """Whether the last byte before i that is no JOIN is a word byte."""
    i -= 1
    while i >= 0 and data[i] == hashloops.JOIN:
        i -= 1
    return i >= 0 and _WORD[data[i]]


@njit(cache=True, inline="always")
def _ends_tail(data, i):
    """Whether a contraction's end (`CONTRACTION_TAILS`, any case), then a non-word byte, starts at i."""
    n = len(data)
    if i >= n or data[i] >= 0x80:
        return False
    j = _after(data, i)
    if _TAIL1[data[i]] and (j >= n or not _WORD[data[j]]):
        return True
    if j >= n or data[j] >= 0x80:
        return False
    pair = (np.int64(data[i] | 0x20) << 8) | np.int64(data[j] | 0x20)
    k = _after(data, j)
    return (pair == _TAILS2[0] or pair == _TAILS2[1] or pair == _TAILS2[2]) and (k >= n or not _WORD[data[k]])


_ONES, _HIGHS = np.uint64(0x0101010101010101), np.uint64(0x8080808080808080)
_BACKSLASHES = np.uint64(0x5C5C5C5C5C5C5C5C)                # `\` in each byte of a word


@njit(cache=True, inline="always")
def _read_backslash(data, i):
    """The escape or the dropped backslash at i, if the backslash there starts one (`read_backslashes`)."""
    j = _after(data, i)
    if j < len(data) and _ESCAPED[data[j]]:
        data[i] = _SPACE
        data[j] = _SPACE
    elif j < len(data) and _MARKED[data[j]]:       # `\\_`, `\\'`: the backslash is no byte
        data[i] = hashloops.JOIN


@njit(cache=True)
def read_backslashes(data):
    """`wordhash.read_escapes` in bytes, in place, left to right, JOINs skipped: each escape's two bytes become
    spaces, a backslash before ASCII punctuation but `\\` (`_MARKED`) becomes `hashloops.JOIN`. Its own pass, before
    the joins: they look ahead, past a backslash the definition has dropped already (`\\_\\'\\_` joins `_'_`), and
    read in their loop that lookahead tripled its time. Eight bytes a step (a word holding no `\\` byte: the
    zero-byte test of `x ^ 0x5C…`), ~0.15 ns a byte where one test a byte took ~0.4."""
    whole = len(data) // 8 * 8
    words = data[:whole].view(np.uint64)
    for k in range(len(words)):
        x = words[k] ^ _BACKSLASHES
        if (x - _ONES) & ~x & _HIGHS:
            for i in range(8 * k, 8 * k + 8):
                if data[i] == _BACKSLASH:
                    _read_backslash(data, i)
    for i in range(whole, len(data)):
        if data[i] == _BACKSLASH:
            _read_backslash(data, i)


@njit(cache=True)
def mark_joins(data, escapes, contractions):
    """`wordhash.read_escapes` (`escapes`: `read_backslashes`) and `join_words` in the bytes the word loop reads
    (UTF-8, non-word characters blanked and emphasis underscores deleted by `fold_plain`; a non-word byte after
    each text), in place, left to right, JOINs (deleted bytes) skipped: with `contractions` an apostrophe between
    two word bytes, and one space after a word byte before a contraction's end, become `hashloops.JOIN`."""
    if escapes:
        read_backslashes(data)
    for i in range(len(data) - 1 if contractions else 0):
        # a byte a rule starts at, before a byte it may go on with (~0.5 % of text: one predictable branch
        # a byte; testing the rules in turn, a space in five bytes mispredicted, took ~2 ns a byte)
        c = data[i]
        if _RULE[c] & _NEXT[data[i + 1]] == 0:
            continue
        if _word_before(data, i):
            j = _after(data, i)
            if (c == _APOSTROPHE and j < len(data) and _WORD[data[j]]) or (c == _SPACE and _ends_tail(data, j)):
                data[i] = hashloops.JOIN


def fold_plain(data: np.ndarray, ends: np.ndarray, non_ascii: np.ndarray, plain: np.ndarray,
               spec: DedupSpec) -> np.ndarray:
    """Blank the non-word characters of the texts `non_ascii` of a batch (UTF-8 `data`, a `\\n` after each text,
    at `ends`; in place), and read `fold_words`' folds, as `spec` turns them on, in the texts `plain` (bool [n]:
    those no Python fold read; their characters are simple, `normalize.simple_chars`): Latin letters and the
    apostrophe look-alikes in every text of `non_ascii` (a folded one holds none), emphasis underscores in the
    plain ones. Returns the word loop's `digraphs` (uint64 [n]: 1 for the plain texts)."""
    breaks, spelled = _tables(spec.marks_in_words, spec.fold_unicode, spec.join_contractions)
    hashloops.blank_non_words(data, ends, non_ascii, breaks, spelled)
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
    non-word character left but ASCII ones, `\\n` ends every text) has its underscores deleted where the fold
    drops them (overwritten by `hashloops.JOIN`, which the word loop reads as no byte: a space split the same words,
    but not the same contractions, `_Hamlet_'s`).
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
                data[p:p + width] = hashloops.JOIN
                data[q:q + width] = hashloops.JOIN
                resume = q + width
                break
