"""The per-byte and per-shingle loops of MinHash, compiled with numba (one pass each, no temporaries).

numpy needs one full pass over memory per arithmetic step: 3 passes of [permutations × shingles] for the
signatures (multiply, add, min) and ~20 over the words for their hashes, which made hashing ~85 % of near
dedup. Compiled, each value is produced and consumed in registers: the signature loop runs the 128
permutations of four shingles at a time as SIMD lanes (~1.3 µs per 2 KB document; ~25 in numpy), the word loop
reads each byte once. Positions are unsigned where a loop indexes per byte or shingle: numba tests a signed
index for a negative value at every access (12-35 % of those loops). The arithmetic wraps exactly as numpy's does (uint64, or uint32 through explicit casts and masks),
so results are bit-identical to the definitions they replace (`wordhash.word_hashes(bytewise=True)` is the
oracle; datasketch's `MinHash` for the signatures). Single-threaded; `cache=True` keeps the compiled code, so
a new process loads it (~0.25 CPU-s) instead of compiling it again (~4 CPU-s), in `kernel_cache_dir()`: numba's
`NUMBA_CACHE_DIR` when the user sets it, else a folder of the user's own (`$XDG_CACHE_HOME/forgeline/numba`,
`~/.cache/forgeline/numba`), else a temporary one. Not the installed package's `__pycache__`: a read-only
install, or one shared by users, would have a user compile into (or fail to write) someone else's folder."""

from __future__ import annotations

import os
import tempfile

import numba
import numpy as np
from numba import njit


def kernel_cache_dir() -> str:
    """Where the compiled loops are cached: `NUMBA_CACHE_DIR`, else the user's cache folder, else a temporary
    one (the first of the last two that can be written)."""
    if numba.config.CACHE_DIR:                           # NUMBA_CACHE_DIR, read by numba at import
        return numba.config.CACHE_DIR
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    for folder in (os.path.join(base, "forgeline", "numba"),
                   os.path.join(tempfile.gettempdir(), f"forgeline-numba-{os.getuid()}")):
        try:
            os.makedirs(folder, exist_ok=True)
            tempfile.TemporaryFile(dir=folder).close()
            return folder
        except OSError:
            continue
    return ""                                           # numba's own fallbacks (or no cache) decide


# Before the first `@njit(cache=True)`: numba picks each function's cache folder when it is decorated. (Global
# to numba in this process: other cached functions go there too, which is what NUMBA_CACHE_DIR would do.)
numba.config.CACHE_DIR = kernel_cache_dir()

_M32 = np.uint64(0xFFFFFFFF)
_U0, _U1, _U2, _U4095 = np.uint64(0), np.uint64(1), np.uint64(2), np.uint64(4095)
_U16, _U13, _U33, _U32 = np.uint64(16), np.uint64(13), np.uint64(33), np.uint64(32)
_F32A, _F32B = np.uint64(0x85EBCA6B), np.uint64(0xC2B2AE35)
_F64A, _F64B = np.uint64(0xFF51AFD7ED558CCD), np.uint64(0xC4CEB9FE1A85EC53)


@njit(cache=True, inline="always")
def _fmix64(h):
    h ^= h >> _U33
    h *= _F64A
    h ^= h >> _U33
    h *= _F64B
    return h ^ (h >> _U33)


@njit(cache=True, inline="always")
def _fmix32(h):
    h ^= h >> _U16
    h = (h * _F32A) & _M32
    h ^= h >> _U13
    h = (h * _F32B) & _M32
    return h ^ (h >> _U16)


# [256] the term's factor of each byte of lowercased UTF-8: for a `\w` byte (ASCII letters, digits, "_", every byte of
# a multi-byte character) the byte + 1, an ASCII capital read as its lower case; 0 for a byte that ends a word.
# One table read gives the lower-casing and the factor, and `_WORD_MASK` the word test (all ones in a word).
# JOIN (0xFF, never a byte of UTF-8) marks a byte deleted in place (`wordfolds`: a contraction's apostrophe, an
# emphasis underscore): no term, no offset, no word starts or ends there (kind 4; the mask stays the last one)
JOIN = 0xFF
_WORD_VALUE = np.array([((c | 0x20) if 0x41 <= c <= 0x5A else c) + 1
                        if c != JOIN and (c >= 0x80 or 0x61 <= (c | 0x20) <= 0x7A or 0x30 <= c <= 0x39 or c == 0x5F)
                        else 0 for c in range(256)], dtype=np.uint64)
_WORD_MASK = np.where(_WORD_VALUE != 0, np.uint64(0xFFFFFFFFFFFFFFFF), np.uint64(0))
# 1 for an `e`/`E`, 2 for the vowel of a German digraph before it (`a o u`, either case): the word loop's
# `marks.fold_digraphs` (one table read a byte; the loop takes ~1.5x as long as without the digraphs); 4: JOIN
_DIGRAPH = np.array([1 if c in b"eE" else 2 if c in b"aouAOU" else 4 if c == JOIN else 0 for c in range(256)],
                    dtype=np.uint64)


@njit(cache=True)
def word_hashes(data, doc_ends, pow_, digraphs):
    """fmix64(Σ_k pow_[k & 4095] · (byte_k + 1)) of each maximal run of word bytes, ASCII letters read as lower
    case, and the runs per document.

    data: uint8 bytes of the batch; doc_ends[d]: the position of document d's separator (a non-word byte);
    digraphs: uint64 [m], 1 where document d's `ae`, `oe`, `ue` are read as `a`, `o`, `u` (an `e` right after one
    of those vowels is no byte of its word: `marks.fold_digraphs`, for the texts no Python fold read), else 0.
    A JOIN byte is read as no byte at all (but no `e` after it is a digraph's).
    Returns (uint64 [T], int64 [m]).
    """
    out = np.empty(len(data) // 2 + 2, np.uint64)      # a word needs ≥ 1 byte and a non-word byte after it
    counts = np.zeros(len(doc_ends), np.int64)
    t, lo = _U0, _U0
    for d in range(len(doc_ends)):
        t0, acc, k, prev, vowel, fold = t, _U0, _U0, _U0, _U0, digraphs[d]
        # Branch-free: a word ends at an unpredictable byte, so every byte stores the running sum and moves
        # `t` on only where a word just ended (the previous byte's mask set, this one's clear), and masks (not
        # multiplies: shorter dependency chain) reset the sum; measured ~1.5× faster than a loop that branches
        # on each byte's class. The mask from a table and the end test from the previous mask (not from `k`)
        # keep the chains to `t` short (~20 % of the loop); every index is unsigned (numba checks a signed one
        # for a negative value at every access: ~30 % of the loop). A digraph's `e` (`skip` all ones) adds no term
        # and moves no offset, masks again.
        end = np.uint64(doc_ends[d]) + _U1                # the separator ends the document's last word
        i = lo
        while i < end:
            c = data[i]
            kind = _DIGRAPH[c]
            joined = _U0 - (kind >> _U2)                   # all ones for a JOIN: the mask stays the previous one
            value, mask = _WORD_VALUE[c], _WORD_MASK[c] | (joined & prev)   # value 0, mask 0: not a word byte
            skip = _U0 - (kind & vowel) | joined           # all ones for an `e` after a vowel, or a JOIN
            out[t] = acc
            t += prev & ~mask & _U1
            prev = mask
            acc = (acc + pow_[k & _U4095] * (value & ~skip)) & mask
            k = (k + _U1 + skip) & mask
            vowel = (kind >> _U1) & fold & _U1             # (0 after a JOIN)
            i += _U1
        counts[d] = np.int64(t - t0)
        lo = end
    n = np.int64(t)
    for s in range(n):
        out[s] = _fmix64(out[s])
    return out[:n], counts


@njit(cache=True)
def ngram_hashes(units, lengths, n, mul):
    """Shingle hashes of several documents: each window of n units u0..u(n-1) → ((u0·mul + u1)·mul + …),
    avalanched, top 32 bits. A document of 1..n−1 units gets one shingle of all of them, one of 0 units a
    placeholder 0 (the caller hashes its text instead). Returns (uint32 [S], int64 offsets [m + 1])."""
    m = len(lengths)
    offsets = np.zeros(m + 1, np.int64)
    for d in range(m):
        offsets[d + 1] = offsets[d] + max(lengths[d] - n + 1, 1)
    out = np.zeros(offsets[m], np.uint32)
    u0 = _U0                                           # unsigned positions: no negative-index checks (~35 %)
    for d in range(m):
        size = lengths[d]
        width = n if size >= n else size               # shorter than n: one window of the whole document
        if width == 0:                                 # (its placeholder stays 0)
            continue
        first = np.uint64(offsets[d])
        for s in range(offsets[d + 1] - offsets[d]):
            at = u0 + np.uint64(s)
            g = units[at]
            for k in range(1, width):
                g = g * mul + units[at + np.uint64(k)]
            out[first + np.uint64(s)] = np.uint32(_fmix64(g) >> _U32)
        u0 += np.uint64(size)
    return out, offsets


@njit(cache=True)
def minhash_rows(hashes, offsets, a, b, out):
    """out[d, p] = min over document d's shingles h of (a[p] · fmix32(h) + b[p]) mod 2^32 (datasketch affine32).

    hashes: uint32 [S]; offsets: int64 [m + 1] (each document ≥ 1 shingle); a, b: uint32 [P]; out: uint32 [m, P].
    Four shingles per pass over the permutations (the SIMD lanes): the running minima are read and written once
    per four shingles instead of once per shingle (2.6× the one-shingle loop; min is order-free, so the same).
    """
    num_perm = len(a)
    acc = np.empty(num_perm, np.uint32)                # one document's running minima (stays in L1)
    for d in range(len(offsets) - 1):
        acc[:] = np.uint32(0xFFFFFFFF)
        s, end = offsets[d], offsets[d + 1]
        while s + 4 <= end:
            h0 = np.uint32(_fmix32(np.uint64(hashes[s])))
            h1 = np.uint32(_fmix32(np.uint64(hashes[s + 1])))
            h2 = np.uint32(_fmix32(np.uint64(hashes[s + 2])))
            h3 = np.uint32(_fmix32(np.uint64(hashes[s + 3])))
            for p in range(num_perm):                  # vectorised: permutations are the SIMD lanes
                ap, bp = a[p], b[p]                    # the casts keep the low 32 bits: mod 2^32
                v = min(min(np.uint32(ap * h0 + bp), np.uint32(ap * h1 + bp)),
                        min(np.uint32(ap * h2 + bp), np.uint32(ap * h3 + bp)))
                if v < acc[p]:
                    acc[p] = v
            s += 4
        while s < end:                                 # the last 0-3 shingles one at a time
            h = np.uint32(_fmix32(np.uint64(hashes[s])))
            for p in range(num_perm):
                v = np.uint32(a[p] * h + b[p])
                if v < acc[p]:
                    acc[p] = v
            s += 1
        out[d] = acc


@njit(cache=True)
def gather_runs(values, starts, stops):
    """values[starts[k]:stops[k]] for each k, back to back, and their offsets (int64 [k + 1]): one copy of the
    rows wanted (numpy's way, an index array of every position, wrote and read 16 bytes per 4-byte value)."""
    offsets = np.zeros(len(starts) + 1, np.int64)
    for k in range(len(starts)):
        offsets[k + 1] = offsets[k] + (stops[k] - starts[k])
    out = np.empty(offsets[-1], values.dtype)
    for k in range(len(starts)):
        out[offsets[k]:offsets[k + 1]] = values[starts[k]:stops[k]]
    return out, offsets


@njit(cache=True)
def intersection_sizes(values, offsets, i, j):
    """|set i[k] ∩ set j[k]| for each k, set d being the sorted distinct values[offsets[d]:offsets[d + 1]]: a
    merge of the two runs (the previous per-pair numpy searchsorted cost ~30 µs of call overhead per pair)."""
    out = np.zeros(len(i), np.int64)
    for k in range(len(i)):
        x, x_end = offsets[i[k]], offsets[i[k] + 1]
        y, y_end = offsets[j[k]], offsets[j[k] + 1]
        common = 0
        while x < x_end and y < y_end:
            vx, vy = values[x], values[y]
            common += vx == vy
            x += vx <= vy
            y += vy <= vx
        out[k] = common
    return out


# [256] 1 for the bytes `str.split()` splits on, in ASCII: \t \n \v \f \r, the separators \x1c-\x1f, space
_SPACE_BYTE = np.array([int(c in (9, 10, 11, 12, 13, 28, 29, 30, 31, 32)) for c in range(256)], dtype=np.uint64)
# [256] the byte written for each byte: ASCII letters in lower case, whitespace as a space
_COLLAPSED = np.array([32 if _SPACE_BYTE[c] else c + 32 if 65 <= c <= 90 else c for c in range(256)], dtype=np.uint8)


@njit(cache=True, inline="always")
def code_point(data, i):
    """(code point, byte length) of the UTF-8 sequence at data[i] (a lead byte ≥ 0x80); -1 for a 4-byte one or a
    stray byte (none of them simple)."""
    c = np.int64(data[i])
    if 0xC2 <= c <= 0xDF:
        return ((c & 0x1F) << 6) | (np.int64(data[i + 1]) & 0x3F), 2
    if 0xE0 <= c <= 0xEF:
        return ((c & 0x0F) << 12) | ((np.int64(data[i + 1]) & 0x3F) << 6) | (np.int64(data[i + 2]) & 0x3F), 3
    return -1, 4 if c >= 0xF0 else 1


# [256] 1 for printable ASCII but `<` and `&` (which the scans look at apart): the test their hot branch makes
PLAIN = np.array([int(32 <= c < 127 and c not in (38, 60)) for c in range(256)], dtype=np.uint8)


@njit(cache=True, inline="always")
def markup_opens(data, i, end, c):
    """(1, 0) for a `<` that may open an HTML tag, (0, 128) for an `&` that may start an entity: the next byte a
    letter (or `/`, `#`), or one a fold could still remove or change (not printable ASCII); else (0, 0)."""
    n = data[i + _U1] if i + _U1 < end else 10
    if n < 32 or n >= 127 or 0x61 <= (n | 0x20) <= 0x7A:
        return (1, 0) if c == 60 else (0, 128)
    if c == 60:
        return (1, 0) if n == 47 else (0, 0)
    return (0, 128) if n == 35 else (0, 0)


@njit(cache=True)
def text_flags(data, doc_ends, simple, tags_min):
    """What `normalize`'s folds could change in each document (bytes data[lo:doc_ends[d]], a separator between
    documents), one scan for a batch: 1 an ASCII control character other than tab and newline (CR included) or
    DEL, 2 a non-ASCII character, 4 a space or tab right before a newline, 8 four newlines in a row, 16 a
    character outside `normalize.simple_chars` (`simple`: uint8 [65536]), 64 `tags_min` `<` that may open an
    HTML tag and 128 an `&` that may start an entity (`markup_opens`: what `normalize.has_markup` and `entity_in`
    need, so that only those texts are asked). The printable-ASCII test comes first: that branch is nearly
    always taken (2x faster than testing each class in turn)."""
    out = np.zeros(len(doc_ends), np.uint8)
    lo = _U0                                           # unsigned positions: no negative-index check (~15 %)
    for d in range(len(doc_ends)):
        f, run, prev, i, tags = 0, 0, 10, lo, 0
        end = np.uint64(doc_ends[d])
        while i < end:
            c = data[i]
            if PLAIN[c]:
                run = 0
            elif c == 60 or c == 38:
                run = 0
                tag, entity = markup_opens(data, i, end, c)
                tags += tag
                f |= entity
            elif c == 10:
                run += 1
                if run >= 4:
                    f |= 8
                if prev == 32 or prev == 9:
                    f |= 4
            elif c < 128:
                run = 0
                f |= 0 if c == 9 else 1
            else:
                run = 0
                code, size = code_point(data, np.int64(i))
                f |= 2 if code >= 0 and simple[code] else 18
                prev = 0
                i += np.uint64(size)
                continue
            prev = c
            i += _U1
        out[d] = f | (64 if tags >= tags_min else 0)
        lo = end + _U1
    return out


@njit(cache=True)
def blank_non_words(data, doc_ends, docs, breaks, spelled):
    """Every BMP character of the documents `docs` with `breaks[code]` == 1 (those that are no `\\w`: typographic
    quotes, dashes, ...; `wordfolds.word_breaks`) overwritten by a space, and each with `spelled[code]` != 0 by
    the one or two ASCII bytes it holds (the first in the low byte: `marks.latin_bytes`, `é` → `e`, `æ` → `ae`), in
    place: the word loop then splits and reads there as the regex `\\w+` split of the folded text does, with no
    Python per document. Where a character got shorter the document's next bytes move up, and spaces (no word)
    fill its end. Only the documents holding non-ASCII text need it (the others are not read at all).
    doc_ends[d]: the position of document d's separator, as for `word_hashes`; docs: int64 [k]."""
    for d in docs:
        i = doc_ends[d - 1] + 1 if d > 0 else 0
        w, end = i, doc_ends[d]
        while i < end:
            if data[i] < 128:
                data[w] = data[i]
                i += 1
                w += 1
                continue
            code, size = code_point(data, i)
            if code >= 0 and breaks[code] == 1:
                data[w] = 32
                w += 1
            elif code >= 0 and spelled[code] != 0:
                data[w] = spelled[code] & 0xFF
                w += 1
                if spelled[code] > 0xFF:
                    data[w] = spelled[code] >> 8
                    w += 1
            else:
                for k in range(size):
                    data[w + k] = data[i + k]
                w += size
            i += size
        data[w:end] = 32


@njit(cache=True)
def docs_holding(data, doc_ends, docs, table):
    """uint8 [k]: 1 for each document of `docs` holding a BMP character with table[code] == 1 or a 4-byte one of
    planes 2-3 (lead bytes F0 A0..B1: the astral ideographs); `segment.unspaced_docs` reads only the documents
    holding non-ASCII text, and these skip their ASCII bytes one test each. Layout as for `blank_non_words`."""
    out = np.zeros(len(docs), np.uint8)
    for n in range(len(docs)):
        d = docs[n]
        i = doc_ends[d - 1] + 1 if d > 0 else 0
        while i < doc_ends[d]:
            if data[i] < 128:
                i += 1
                continue
            code, size = code_point(data, i)
            if (code >= 0 and table[code] == 1) or (data[i] == 0xF0 and 0xA0 <= data[i + 1] <= 0xB1):
                out[n] = 1
                break
            i += size
    return out


@njit(cache=True)
def collapse_lower(data, doc_ends, out):
    """Each document with ASCII letters in lower case and every run of ASCII whitespace (`_SPACE_BYTE`) as one
    space, none at either end: `" ".join(text.lower().split())` for ASCII text, written to `out` back to back.
    Returns the end offset of each document in `out` (int64 [m]). Branch-free: every byte is written, and the
    write position moves on for a non-space or for the first space after one (2x the branching loop: where a
    word ends is unpredictable)."""
    ends = np.empty(len(doc_ends), np.int64)
    t, lo = _U0, _U0                                   # unsigned: no negative-index check per access (~17 %)
    for d in range(len(doc_ends)):
        start, word = t, _U0
        end = np.uint64(doc_ends[d])
        i = lo
        while i < end:
            c = data[i]
            space = _SPACE_BYTE[c]
            out[t] = _COLLAPSED[c]
            t += (_U1 - space) | word
            word = _U1 - space
            i += _U1
        if word == _U0 and t > start:                  # a space written after the last word
            t -= _U1
        ends[d] = np.int64(t)
        lo = end + _U1
    return ends


@njit(cache=True)
def distinct_runs(values, offsets):
    """Each sorted run values[offsets[d]:offsets[d + 1]] without its repeats, compacted in place: (the distinct
    values back to back, a view of `values`, and their offsets int64 [d + 1]). One pass; numpy's way (a mask,
    its cumsum, a boolean gather and a split) made four over the shingles of a verification task."""
    out = np.zeros(len(offsets), np.int64)
    t = 0
    for d in range(len(offsets) - 1):
        lo, hi = offsets[d], offsets[d + 1]
        if lo < hi:
            prev = values[lo]
            values[t] = prev                       # t ≤ k: a write never reaches a value not yet read
            t += 1
            for k in range(lo + 1, hi):
                if values[k] != prev:
                    prev = values[k]
                    values[t] = prev
                    t += 1
        out[d + 1] = t
    return values[:t], out
