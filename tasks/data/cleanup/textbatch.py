"""Batch forms of `tasks.data.cleanup.normalize`'s per-document functions, equal to them text for text, for clean's
per-shard pass.

`normalize_texts(texts, form)` is `[normalize_text(t, form) for t in texts]` and `exact_keys(texts)` is
`[exact_key(t) for t in texts]` (tests compare them on generated text, control characters and all). What
costs per document in those — a regex scan for the translation table's characters, substring scans for
trailing spaces and blank-line runs, `str.split` + `join` making a string per word — is done for the whole
batch by compiled scans over its UTF-8 bytes (`tasks.data.dedup.hashloops`): on realistic text ~20 and ~40 µs a
2 KB document before, a few µs now. Normalization itself is compiled for text whose characters are ASCII or
simple once the translation table is applied (`textscan.normalize_simple`: the table and the line rules,
NFC/NFKC being the identity there); other text (a few in a thousand) goes through `normalize_text` itself.
"""

from __future__ import annotations

import hashlib
import unicodedata
from collections.abc import Sequence
from dataclasses import dataclass, field
from functools import lru_cache

import numpy as np

from tasks.data.dedup import hashloops
from tasks.data.cleanup import textscan
from tasks.data.cleanup.normalize import (MARKUP_MIN, TRANSLATION_TABLE, NormalForm, exact_key, joiners_in,
                                          normalize_text, simple_chars, table_chars_in)

CONTROL, NON_ASCII, TRAILING, BLANK_RUN, NOT_SIMPLE = 1, 2, 4, 8, 16     # `hashloops.text_flags`' bits
TRANSLATED = 32                 # `textscan.normalize_simple`'s: the translation table changed a character
MARKUP, ENTITY = 64, 128        # hints (`hashloops.text_flags`): a text without them has no markup, no entity


def simple_table() -> np.ndarray:
    """`normalize.simple_chars()` as the uint8 [65536] the compiled loops read."""
    return np.frombuffer(simple_chars(), dtype=np.uint8)


@dataclass(frozen=True)
class Encoded:
    """A batch of texts as the compiled loops read it, made once and shared by the batch functions (normalize,
    exact keys, word shingles): UTF-8 back to back with a `\n` after each text, each separator's position, and
    each text's `hashloops.text_flags` (MARKUP and ENTITY, hints, may be set where they need not be)."""

    texts: Sequence[str]
    data: np.ndarray            # uint8 [B]
    ends: np.ndarray            # int64 [n]
    flags: list[int]
    _folds: dict[int, tuple[str, str]] = field(default_factory=dict, repr=False)     # (see `folds_of`)

    @classmethod
    def of(cls, texts: Sequence[str]) -> "Encoded":
        """The batch encoded and scanned."""
        data, ends = joined(texts)
        return cls(texts, data, ends, flags_of(data, ends).tolist())

    def byte_range(self, start: int, stop: int) -> tuple[int, int]:
        """Where texts [start, stop) are in `data` (their separators included)."""
        return (int(self.ends[start - 1]) + 1 if start else 0), (int(self.ends[stop - 1]) + 1 if stop else 0)

    def nfkc(self, k: int) -> bool:
        """Whether text k is in NFKC (ASCII and simple characters only: in NFKC, no quick check needed)."""
        return not self.flags[k] & NOT_SIMPLE or unicodedata.is_normalized("NFKC", self.texts[k])

    def folds_of(self, k: int) -> tuple[str, str] | None:
        """(its NFKC, the NFKC of that casefolded) of text k when `exact_keys` made them (a text with non-simple
        characters, no control or table character): the near-dup fold's steps for most such text."""
        return self._folds.get(k)

    def chunk(self, start: int, stop: int) -> "Encoded":
        """Texts [start, stop) as a batch of their own (views of this one's bytes; what is known carried over)."""
        lo, hi = self.byte_range(start, stop)
        folds = {k - start: v for k, v in self._folds.items() if start <= k < stop}
        return Encoded(self.texts[start:stop], self.data[lo:hi], self.ends[start:stop] - lo, self.flags[start:stop],
                       folds)

    def select(self, rows: Sequence[int]) -> "Encoded":
        """Texts `rows` (increasing) as a batch of their own: their bytes copied, what is known carried over."""
        starts = np.concatenate([[0], self.ends[:-1] + 1])[rows]                      # [m]
        stops = self.ends[rows] + 1                                                   # each with its separator
        data = np.concatenate([self.data[a:b] for a, b in zip(starts.tolist(), stops.tolist())] or
                              [np.zeros(0, np.uint8)])
        index = {k: i for i, k in enumerate(rows)}
        folds = {index[k]: v for k, v in self._folds.items() if k in index}
        return Encoded([self.texts[k] for k in rows], data, np.cumsum(stops - starts) - 1,
                       [self.flags[k] for k in rows], folds)


def flags_of(data: np.ndarray, ends: np.ndarray) -> np.ndarray:
    """`hashloops.text_flags` of a batch (uint8 [n])."""
    return hashloops.text_flags(data, ends, simple_table(), MARKUP_MIN)


def joined(texts: Sequence[str]) -> tuple[np.ndarray, np.ndarray]:
    """The texts' UTF-8 back to back with a `\n` after each (uint8 [B], read-only) and each `\n`'s position."""
    try:                        # (str.encode() without arguments takes CPython's fast path: ~20 % of the encode)
        parts = [t.encode() for t in texts]
    except UnicodeEncodeError:  # a lone surrogate somewhere
        parts = [t.encode("utf-8", "surrogatepass") for t in texts]
    ends = np.cumsum(np.fromiter(map(len, parts), np.int64, len(parts)) + 1) - 1
    return np.frombuffer(b"\n".join([*parts, b""]), dtype=np.uint8), ends     # one copy: a separator after each


def normalize_encoded(texts: Sequence[str], form: NormalForm = "NFC") -> Encoded:
    """`[normalize_text(t, form) for t in texts]`, encoded; a text it would leave unchanged stays the same object.

    One compiled pass (`textscan.normalize_simple`) normalizes every text whose characters are ASCII or simple
    once the translation table has been applied, and flags the others (a few in a thousand): those go through
    `normalize_text` itself where the table, NFC/NFKC or a joiner between ASCII characters could change them
    (`normalize.joiners_in`). A text the pass changed is decoded
    from its output."""
    data, ends = joined(texts)
    out = np.empty(len(data), np.uint8)
    flags, out_ends = textscan.normalize_simple(data, ends, simple_table(), translation_table(), MARKUP_MIN, out)
    result = list(texts)
    redo = [k for k in np.flatnonzero(flags & NOT_SIMPLE).tolist()
            if flags[k] & TRANSLATED or joiners_in(texts[k])
            or form != "none" and not unicodedata.is_normalized(form, texts[k])]
    # the others changed where the table changed a character or the line rules removed some (fewer bytes)
    changed = (flags & TRANSLATED) | (np.diff(out_ends, prepend=-1) != np.diff(ends, prepend=-1))
    raw, stops = memoryview(out), out_ends.tolist()
    for k in set(np.flatnonzero(changed).tolist()).difference(redo):
        result[k] = str(raw[stops[k - 1] + 1 if k else 0:stops[k]], "utf-8", "surrogatepass")
    flags = (flags & (NON_ASCII | NOT_SIMPLE | MARKUP | ENTITY)).tolist()     # the flags of what was written
    data, ends = out[:stops[-1] + 1 if stops else 0], out_ends
    if redo:
        for k in redo:              # (a text with a joiner that stays is equal, and stays the same object)
            new = normalize_text(texts[k], form)
            result[k] = texts[k] if new == texts[k] else new
        fresh = Encoded.of([result[k] for k in redo])
        for k, flag in zip(redo, fresh.flags):
            flags[k] = flag
        data, ends = splice(data, ends, redo, fresh.data, fresh.ends)
    return Encoded(result, data, ends, flags)


def splice(data: np.ndarray, ends: np.ndarray, docs: list[int], new_data: np.ndarray, new_ends: np.ndarray
           ) -> tuple[np.ndarray, np.ndarray]:
    """The batch (data, ends: a separator after each text) with texts `docs` (ascending) replaced by the texts
    of (new_data, new_ends), in that order: (uint8 [B'], a new array; int64 [n]). The runs of texts kept are
    copied whole (numpy's memcpy: a compiled loop copied a byte at a time, ~3 GB/s)."""
    at = np.asarray(docs, np.int64)
    starts = np.where(at > 0, ends[at - 1] + 1, 0).tolist()           # where each replaced text is ...
    stops = (ends[at] + 1).tolist()
    fresh = [0, *(new_ends + 1).tolist()]                               # ... and where its new one is
    pieces, kept = [], 0
    for j, (start, stop) in enumerate(zip(starts, stops)):
        pieces += [data[kept:start], new_data[fresh[j]:fresh[j + 1]]]
        kept = stop
    sizes = np.diff(ends, prepend=-1)
    sizes[at] = np.diff(new_ends, prepend=-1)
    return np.concatenate([*pieces, data[kept:ends[-1] + 1 if len(ends) else 0]]), np.cumsum(sizes) - 1


@lru_cache(maxsize=1)
def translation_table() -> np.ndarray:
    """`normalize.TRANSLATION_TABLE` as the uint8 [65536] `textscan.normalize_simple` reads: 0 not in it,
    1 removed, 2 a newline, 3 a space."""
    table = np.zeros(0x10000, np.uint8)
    for code, to in TRANSLATION_TABLE.items():
        table[code] = {None: 1, "\n": 2, " ": 3}[to]
    return table


def normalize_texts(texts: Sequence[str], form: NormalForm = "NFC") -> list[str]:
    """`[normalize_text(t, form) for t in texts]`; a text it would leave unchanged is returned as it is."""
    return list(normalize_encoded(texts, form).texts)


def exact_keys(texts: Sequence[str] | Encoded) -> list[str]:
    """`[exact_key(t) for t in texts]`: the digest of the folded text with its whitespace collapsed.

    Folding is NFKC + casefold (`exact_key`'s); for ASCII text without control characters it is lower case,
    which the compiled collapse does byte by byte. Non-ASCII text without table characters is folded here
    (the NFKC of normalize_text is the only change normalize_text could make that survives the collapse) and
    collapsed by the same loop: after NFKC and casefold such text holds no whitespace outside ASCII (every
    other white space character is in normalize's table or NFKC-decomposes to a space)."""
    batch = texts if isinstance(texts, Encoded) else Encoded.of(texts)
    texts, flags = batch.texts, batch.flags
    # The fold of a simple NFKC text is its ASCII letters in lower case, which the collapse does: its bytes
    # stay. Other non-ASCII text is folded here, or (with a table character) left to `exact_key` itself. Only
    # the texts with a control or a non-simple character are looked at (~2 % here; a Python step each).
    whole: list[int] = []
    folded: dict[int, str] = {}
    for k in np.flatnonzero(np.array(flags, np.uint8) & (CONTROL | NOT_SIMPLE)).tolist():
        text = texts[k]
        if flags[k] & CONTROL or table_chars_in(text) or joiners_in(text):   # normalize_text changes it first
            whole.append(k)
        else:
            nfkc = _nfkc(text)
            folded[k] = _nfkc(nfkc.casefold())
            batch._folds[k] = (nfkc, folded[k])          # (kept for the shingles' fold of the same text)
    keys = _digests(batch.data, batch.ends)                    # every text's bytes as they stand ...
    if folded:                                                  # ... then those whose fold differs
        more = Encoded.of(list(folded.values()))
        for k, key in zip(folded, _digests(more.data, more.ends)):
            keys[k] = key
    for k in whole:
        keys[k] = exact_key(texts[k])
    return keys


def _digests(data: np.ndarray, ends: np.ndarray) -> list[str]:
    """Each document's 16-byte blake2b in hex, of its bytes lower-cased and whitespace-collapsed (the compiled
    collapse, into one buffer): `exact_key`'s digest for text whose fold is ASCII lower case."""
    out = np.empty(len(data), dtype=np.uint8)
    stops = hashloops.collapse_lower(data, ends, out).tolist()
    raw, blake = memoryview(out), hashlib.blake2b
    return [blake(raw[a:b], digest_size=16).hexdigest() for a, b in zip([0, *stops[:-1]], stops)]


def _nfkc(text: str) -> str:
    return text if unicodedata.is_normalized("NFKC", text) else unicodedata.normalize("NFKC", text)
