"""Stable 64-bit hashes of the lowercase `\\w+` words of many documents at once (the units of word shingles).

Word hash = fmix64(Σ_k POW[k] · (byte_k + 1)) over the word's UTF-8 bytes: a multilinear hash with fixed odd
multipliers (derived arithmetically, so identical on every machine and numpy version). Two computations of
the same function:

- chunked (the default): each word's bytes are read 8 at a time through an unaligned uint64 view of the batch,
  masked to the word's length; the first 8 bytes are combined with their POW by 4 look-ups in tables of byte
  pairs, further bytes by a small [words, 8] @ [8] integer product; Σ_k POW[k] for the "+ 1" comes from a
  prefix-sum table. Cost is per word, not per byte:
  ~4–6× faster than the byte-wise way on English-like text. Words over 64 bytes (rare: URLs, base64 blobs)
  take the byte-wise way, so a pathological token cannot make the chunk loop long.
- byte-wise (`bytewise=True`): one term per byte and an `add.reduceat` per word; the previous implementation,
  kept as the oracle for the chunked one (tests compare them) and as the long-word fallback.
"""

from __future__ import annotations

import re
from collections.abc import Sequence

import numpy as np

MUL = np.uint64(0x9E3779B97F4A7C15)   # odd: the n-gram combine g·M + u is order-sensitive and invertible
LONG_WORD = 64                        # bytes; longer words are hashed byte-wise
_WORD = re.compile(r"\w+")


def fmix64(h: np.ndarray) -> np.ndarray:
    """MurmurHash3's 64-bit finalizer (a bijection that avalanches every input bit); modifies h in place."""
    h ^= h >> np.uint64(33)
    h *= np.uint64(0xFF51AFD7ED558CCD)
    h ^= h >> np.uint64(33)
    h *= np.uint64(0xC4CEB9FE1A85EC53)
    h ^= h >> np.uint64(33)
    return h


POW = fmix64(np.arange(4096, dtype=np.uint64) + MUL) | np.uint64(1)      # [4096] per-offset multipliers
_PREFIX = np.concatenate([np.zeros(1, np.uint64), np.cumsum(POW, dtype=np.uint64)])   # [4097] Σ_{k<i} POW[k]
_MASK = np.array([(1 << (8 * k)) - 1 for k in range(8)] + [2**64 - 1], dtype=np.uint64)   # [9] low k bytes
# [4, 65536]: _PAIRS[j][b0 + 256·b1] = POW[2j]·b0 + POW[2j+1]·b1, so a word's first 8 bytes (4 uint16 lanes)
# cost 4 table look-ups (2 MB of tables, of which ASCII text touches ~200 KB) instead of 8 multiply-adds.
_BYTE = np.arange(256, dtype=np.uint64)
_PAIRS = np.stack([POW[2 * j] * np.tile(_BYTE, 256) + POW[2 * j + 1] * np.repeat(_BYTE, 256) for j in range(4)])


def _batch_bytes(texts: Sequence[str]) -> tuple[bytes, list[bytes]]:
    # ASCII text is split on its non-word bytes directly; other text is first re-spelled as its `\w+` words
    # joined by spaces, so the byte-level split yields exactly the regex's words either way.
    parts = [t.lower().encode() if t.isascii() else " ".join(_WORD.findall(t.lower())).encode("utf-8", "surrogatepass")
             for t in texts]
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


def _chunked(raw: bytes, starts: np.ndarray, lengths: np.ndarray) -> np.ndarray:
    """Same sums as `_bytewise` for words of ≤ LONG_WORD bytes, 8 bytes per step."""
    # uint64 at every byte offset (unaligned; np.take gathers from it ~1.7× faster than fancy indexing)
    window = np.ndarray((len(raw) - 7,), dtype="<u8", buffer=raw, strides=(1,))
    rem = np.minimum(lengths, 8)
    key = np.take(window, starts) & _MASK[rem]                          # [T] first ≤ 8 bytes, zero-padded
    lanes = key.view(np.uint16).reshape(-1, 4).T.copy()                 # [4, T] contiguous byte-pair lanes
    sums = np.take(_PAIRS[0], lanes[0])
    for j in range(1, 4):
        sums += np.take(_PAIRS[j], lanes[j])
    sums += _PREFIX[rem]                                                # Σ POW[k] over real bytes: the "+ 1"
    sel = np.flatnonzero(lengths > 8)                                   # the few longer words, 8 bytes a step
    for c in range(8, LONG_WORD, 8):
        sel = sel[lengths[sel] > c]
        if len(sel) == 0:
            break
        rem = np.minimum(lengths[sel] - c, 8)
        key = np.take(window, starts[sel] + c) & _MASK[rem]
        part = key.view(np.uint8).reshape(-1, 8).astype(np.uint64) @ POW[c: c + 8]   # Σ POW[c+k]·byte_k
        part += _PREFIX[c + rem] - _PREFIX[c]
        sums[sel] += part
    return sums


def word_hashes(texts: Sequence[str], bytewise: bool = False) -> tuple[np.ndarray, np.ndarray]:
    """Hashes of the lowercase `\\w+` words of several documents: (uint64 [T] concatenated, int64 [m] per doc)."""
    raw, parts = _batch_bytes(texts)
    data = np.frombuffer(raw, dtype=np.uint8)                           # [B + 8]
    word = _word_bytes(data)
    edge = np.empty(len(data), dtype=bool)                              # starts and ends of words alternate
    edge[0] = word[0]
    np.not_equal(word[1:], word[:-1], out=edge[1:])
    bounds = np.flatnonzero(edge)
    starts, lengths = bounds[0::2], bounds[1::2] - bounds[0::2]         # [T] (the pad ends every word)
    if bytewise:
        sums = _bytewise(data, starts, lengths)
    else:
        sums = _chunked(raw, starts, lengths)
        long = np.flatnonzero(lengths > LONG_WORD)
        sums[long] = _bytewise(data, starts[long], lengths[long])
    doc_ends = np.cumsum(np.fromiter(map(len, parts), np.int64, len(parts)) + 1) - 1   # [m] separator positions
    return fmix64(sums), np.diff(np.searchsorted(starts, doc_ends), prepend=0)
