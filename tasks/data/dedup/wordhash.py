"""Stable 64-bit hashes of the lowercase `\\w+` words of many documents at once (the units of word shingles).

Word hash = fmix64(Σ_k POW[k & 4095] · (byte_k + 1)) over the word's UTF-8 bytes: a multilinear hash with fixed
odd multipliers (derived arithmetically, so identical on every machine and numpy version). Two computations of
the same function:

- compiled (the default, `tasks.data.dedup.hashloops.word_hashes`): one pass over the batch's bytes that finds the
  words and sums their terms in registers (~3× faster than the previous numpy way, which read 8 bytes per step
  through byte-pair tables and needed ~20 passes over the words).
- byte-wise (`bytewise=True`): numpy, one term per byte and an `add.reduceat` per word; kept as the oracle
  for the compiled one (tests compare them).
"""

from __future__ import annotations

import re
from collections.abc import Sequence

import numpy as np

from tasks.data.dedup import hashloops

MUL = np.uint64(0x9E3779B97F4A7C15)   # odd: the n-gram combine g·M + u is order-sensitive and invertible
WORD = re.compile(r"\w+")       # the units of word shingles (and the regex the compiled split matches)
# the ends of English contractions, which a copy stripped of punctuation writes joined (`dont`) and one with
# punctuation replaced by spaces apart (`don t`): `join_words` reads both as the original's `don't`
CONTRACTION_TAILS = frozenset({"t", "s", "d", "m", "ll", "re", "ve"})
APOSTROPHE_GAPS = ("'", "\u2019")
_ESCAPE = re.compile(r"\\[ntrNTR]")     # either case: the word loop reads some texts lowered first
# ASCII punctuation but the backslash itself: CommonMark reads `\\_` as `_`, and Turndown, html2text and pandoc
# escape every `_ * ` # [` they write (`prompt\\_toolkit`, one word, shingled `prompt` `_toolkit`). A backslash
# before a backslash stays: `\\\\n` (a JSON string inside a JSON string) is still read as the escape `\\n`
ESCAPED_PUNCTUATION = "!\"#$%&'()*+,-./:;<=>?@[]^_`{|}~"
# (and `’`, which the word loop reads as `'` for `join_contractions`)
_ESCAPED_MARK = re.compile("\\\\(?=[!-/:-@\\[\\]^_`{-~\u2019])")


def read_escapes(text: str) -> str:
    """`text` with each escape `\\n`, `\\t`, `\\r` written out as two characters (a JSON or CSV string literal's)
    read as two spaces: `line one\\nline two` would otherwise shingle `nline` (`DedupSpec.fold_escapes`); and the
    backslash before ASCII punctuation but `\\` dropped first (`ESCAPED_PUNCTUATION`: a markdown escape,
    `snake\\_case` → `snake_case`, `don\\'t` → `don't`; each backslash by the character right after it)."""
    if "\\" not in text:
        return text
    return _ESCAPE.sub("  ", _ESCAPED_MARK.sub("", text))


def join_words(text: str, word: re.Pattern[str] = WORD) -> list[str]:
    """The `word` matches of `text`, two of them one word where only an apostrophe (`'` or `’`) is between them
    (`don't` → `dont`), and a contraction's end (`CONTRACTION_TAILS`, any case) joined to the word before it where
    one space, or one non-ASCII character that is no word character, is between them (`don t` → `dont`): the
    definition of `DedupSpec.join_contractions`, which `wordfolds.mark_joins` reads in bytes."""
    words: list[str] = []
    last = 0
    for m in word.finditer(text):
        gap, found = text[last:m.start()], m.group()
        if words and (gap in APOSTROPHE_GAPS or (
                (gap == " " or (len(gap) == 1 and not gap.isascii()))
                and found.isascii() and found.lower() in CONTRACTION_TAILS)):
            words[-1] += found
        else:
            words.append(found)
        last = m.end()
    return words


def fmix64(h: np.ndarray) -> np.ndarray:
    """MurmurHash3's 64-bit finalizer (a bijection that avalanches every input bit); modifies h in place."""
    h ^= h >> np.uint64(33)
    h *= np.uint64(0xFF51AFD7ED558CCD)
    h ^= h >> np.uint64(33)
    h *= np.uint64(0xC4CEB9FE1A85EC53)
    h ^= h >> np.uint64(33)
    return h


POW = fmix64(np.arange(4096, dtype=np.uint64) + MUL) | np.uint64(1)      # [4096] per-offset multipliers


def spell_words(text: str, word: re.Pattern[str] = WORD, escapes: bool = False, joins: bool = False,
                sep: str = " ") -> str:
    """`text` lowered and re-spelled as its `word` matches separated by `sep`, after `read_escapes` (`escapes`) and
    as `join_words` joins them (`joins`)."""
    low = text.lower()
    low = read_escapes(low) if escapes else low
    return sep.join(join_words(low, word) if joins else word.findall(low))


def _batch_bytes(texts: Sequence[str], word: re.Pattern[str] = WORD) -> tuple[bytes, list[bytes]]:
    # ASCII text is split on its non-word bytes directly; other text is first re-spelled as its `\w+` words
    # joined by spaces, so the byte-level split yields exactly the regex's words either way.
    # (the compiled loop lowercases ASCII letters itself; the byte-wise oracle is given lowered bytes)
    parts = [t.encode() if t.isascii() else spell_words(t, word).encode("utf-8", "surrogatepass") for t in texts]
    return b" ".join(parts) + b" " + bytes(8), parts        # one separator after each doc; 8 pad bytes


def _word_bytes(data: np.ndarray) -> np.ndarray:
    """[B] bool: `\\w` bytes (ASCII letters, digits, "_", and every byte of a multi-byte character)."""
    folded = data | np.uint8(0x20)                                      # ASCII letters → lowercase
    word = (data >= 0x80) | ((folded >= 0x61) & (folded <= 0x7A)) | ((data >= 0x30) & (data <= 0x39))
    word |= data == 0x5F
    return word


def _bytewise(data: np.ndarray, starts: np.ndarray, lengths: np.ndarray) -> np.ndarray:
    """Σ_k POW[k & 4095] · (byte_k + 1) of the given words, one term per byte (before fmix64)."""
    if len(starts) == 0:
        return np.zeros(0, dtype=np.uint64)
    heads = np.cumsum(lengths) - lengths                                # [w] each word's first term
    offset = np.arange(int(lengths.sum())) - np.repeat(heads, lengths)  # [Bw] byte index inside its word
    at = np.repeat(starts, lengths) + offset                            # [Bw] positions of the words' bytes
    terms = POW[offset & 4095] * (data[at].astype(np.uint64) + np.uint64(1))
    return np.add.reduceat(terms, heads)


def word_hashes(texts: Sequence[str], bytewise: bool = False, word: re.Pattern[str] = WORD,
                escapes: bool = False, joins: bool = False) -> tuple[np.ndarray, np.ndarray]:
    """Hashes of the lowercase `\\w+` words (or `word` matches, in non-ASCII text) of several documents: (uint64
    [T] concatenated, int64 [m] per doc); with `escapes` and `joins`, those of `spell_words` (the definitions of
    `DedupSpec.fold_escapes` and `join_contractions`)."""
    if escapes or joins:
        texts = [spell_words(t, word, escapes, joins) for t in texts]
    raw, parts = _batch_bytes(texts, word)
    data = np.frombuffer(raw, dtype=np.uint8)                           # [B + 8]
    doc_ends = np.cumsum(np.fromiter(map(len, parts), np.int64, len(parts)) + 1) - 1   # [m] separator positions
    if not bytewise:
        return hashloops.word_hashes(data, doc_ends, POW, np.zeros(len(doc_ends), np.uint64))   # no digraph read
    data = np.where((data >= 65) & (data <= 90), data | np.uint8(0x20), data)       # as the compiled loop reads
    word = _word_bytes(data)
    edge = np.empty(len(data), dtype=bool)                              # starts and ends of words alternate
    edge[0] = word[0]
    np.not_equal(word[1:], word[:-1], out=edge[1:])
    bounds = np.flatnonzero(edge)
    starts, lengths = bounds[0::2], bounds[1::2] - bounds[0::2]         # [T] (the pad ends every word)
    sums = _bytewise(data, starts, lengths)
    return fmix64(sums), np.diff(np.searchsorted(starts, doc_ends), prepend=0)
