"""Batch forms of `tasks.data.cleanup.normalize`'s per-document functions, equal to them text for text, for clean's
per-shard pass.

`normalize_texts(texts, form)` is `[normalize_text(t, form) for t in texts]` and `exact_keys(texts)` is
`[exact_key(t) for t in texts]` (tests compare them on generated text, control characters and all). What
costs per document in those — a regex scan for the translation table's characters, substring scans for
trailing spaces and blank-line runs, `str.split` + `join` making a string per word — is done for the whole
batch by one compiled scan over its UTF-8 bytes (`tasks.data.dedup.hashloops`): on realistic text ~20 and ~40 µs a
2 KB document before, a few µs now. A document the scan flags (a control character, CR, a trailing space, a
run of blank lines, a leading newline, trailing whitespace; non-ASCII text holding a table character or not
in normal form) goes through the per-document function itself, so the rules live in one place.
"""

from __future__ import annotations

import hashlib
import unicodedata
from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np

from tasks.data.dedup import hashloops
from tasks.data.cleanup.normalize import (NormalForm, exact_key, normalize_layout, normalize_text, simple_chars,
                                          table_chars_in)

CONTROL, NON_ASCII, TRAILING, BLANK_RUN, NOT_SIMPLE = 1, 2, 4, 8, 16     # `hashloops.text_flags`' bits


def simple_table() -> np.ndarray:
    """`normalize.simple_chars()` as the uint8 [65536] the compiled loops read."""
    return np.frombuffer(simple_chars(), dtype=np.uint8)


@dataclass(frozen=True)
class Encoded:
    """A batch of texts as the compiled loops read it, made once and shared by the batch functions (normalize,
    exact keys, word shingles): UTF-8 back to back with a `\n` after each text, each separator's position, and
    each text's `hashloops.text_flags`."""

    texts: Sequence[str]
    data: np.ndarray            # uint8 [B]
    ends: np.ndarray            # int64 [n]
    flags: list[int]
    parts: list[bytes] = field(default_factory=list, repr=False)        # each text's UTF-8
    _nfkc_known: dict[int, bool] = field(default_factory=dict, repr=False)

    @classmethod
    def of(cls, texts: Sequence[str], parts: list[bytes] | None = None, flags: list[int | None] | None = None
           ) -> "Encoded":
        """The batch encoded; `parts`/`flags`: what is known already (a text's bytes, its flags; None: unknown)."""
        parts = parts if parts is not None else [t.encode("utf-8", "surrogatepass") for t in texts]
        ends = np.cumsum(np.fromiter(map(len, parts), np.int64, len(parts)) + 1) - 1
        data = np.frombuffer(b"\n".join([*parts, b""]), dtype=np.uint8)    # one copy: a separator after each
        if flags is None or None in flags:
            flags = hashloops.text_flags(data, ends, simple_table()).tolist()
        return cls(texts, data, ends, flags, parts)

    def byte_range(self, start: int, stop: int) -> tuple[int, int]:
        """Where texts [start, stop) are in `data` (their separators included)."""
        return (int(self.ends[start - 1]) + 1 if start else 0), (int(self.ends[stop - 1]) + 1 if stop else 0)

    def nfkc(self, k: int) -> bool:
        """Whether text k is in NFKC (asked by the exact keys and the shingles alike: checked once)."""
        if k not in self._nfkc_known:       # ASCII and simple characters only: in NFKC (no quick check needed)
            self._nfkc_known[k] = not self.flags[k] & NOT_SIMPLE or unicodedata.is_normalized("NFKC", self.texts[k])
        return self._nfkc_known[k]

    def chunk(self, start: int, stop: int) -> "Encoded":
        """Texts [start, stop) as a batch of their own (views of this one's bytes; what is known carried over)."""
        lo, hi = self.byte_range(start, stop)
        known = {k - start: v for k, v in self._nfkc_known.items() if start <= k < stop}
        return Encoded(self.texts[start:stop], self.data[lo:hi], self.ends[start:stop] - lo, self.flags[start:stop],
                       self.parts[start:stop], known)


def normalize_encoded(texts: Sequence[str], form: NormalForm = "NFC") -> Encoded:
    """`[normalize_text(t, form) for t in texts]`, encoded; a text it would leave unchanged stays the same object
    and keeps its bytes and flags (only the changed ones are encoded and scanned again)."""
    batch = Encoded.of(texts)
    out, changed = list(texts), []
    for k, (text, flag) in enumerate(zip(texts, batch.flags)):
        # text of ASCII and simple characters (no NOT_SIMPLE) holds no table character and is in NFC and NFKC
        if flag & (CONTROL | TRAILING | BLANK_RUN) or text[:1] == "\n" or text[-1:].isspace() or (
                flag & NOT_SIMPLE and (table_chars_in(text) or form != "none" and
                                       not unicodedata.is_normalized(form, text))):
            # ASCII without control characters: only the line rules can change it (`normalize_layout`)
            out[k] = normalize_text(text, form) if flag & (CONTROL | NON_ASCII) else normalize_layout(text)
            changed += [k] if out[k] is not text else []
    if not changed:
        return batch
    fresh = Encoded.of([out[k] for k in changed])
    parts, flags = list(batch.parts), list(batch.flags)
    for k, part, flag in zip(changed, fresh.parts, fresh.flags):
        parts[k], flags[k] = part, flag
    return Encoded.of(out, parts, flags)


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
    # the texts with a control or a non-ASCII character are looked at (~11 % here; a Python step each).
    whole: list[int] = []
    folded: dict[int, str] = {}
    for k in np.flatnonzero(np.array(flags, np.uint8) & (CONTROL | NON_ASCII)).tolist():
        text = texts[k]
        if flags[k] & CONTROL:  # normalize_text removes it (or makes it a newline) before the collapse
            whole.append(k)
        elif flags[k] & NOT_SIMPLE or not batch.nfkc(k):
            if table_chars_in(text):
                whole.append(k)
            else:
                folded[k] = _nfkc(_nfkc(text).casefold())
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
