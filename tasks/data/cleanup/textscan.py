"""Clean's normalization of a batch of texts as one compiled pass over their UTF-8 (`normalize_simple`), for
`tasks.data.cleanup.textbatch.normalize_encoded`; the other scans of the batch (flags, the exact keys' collapse)
are in `tasks.data.dedup.hashloops`, whose import sets numba's cache folder before the kernel below is compiled
(`hashloops.kernel_cache_dir`)."""

from __future__ import annotations

import numpy as np
from numba import njit

from tasks.data.dedup.hashloops import PLAIN, code_point, markup_opens

_U0, _U1, _U2, _U3 = np.uint64(0), np.uint64(1), np.uint64(2), np.uint64(3)


@njit(cache=True, inline="always")
def _newline(out, t, keep, start):
    """A newline written after out[start:keep] (what follows `keep`, trailing spaces and tabs, dropped), unless it
    would lead the document or be the fourth in a row. Returns the new end."""
    t = keep
    if t != start and not (t - start >= _U3 and out[t - _U1] == 10 and out[t - _U2] == 10 and out[t - _U3] == 10):
        out[t] = 10
        t += _U1
    return t


@njit(cache=True)
def normalize_simple(data, doc_ends, simple, table, tags_min, out):
    """`normalize.normalize_text` of each document whose non-ASCII characters are all simple once normalize's
    translation table has been applied, written to `out` (uint8, ≥ len(data)) with a `\\n` after each; one scan
    for a batch. Returns (flags uint8 [m], the position of each output separator int64 [m]). Per document, the
    `hashloops.text_flags` of what was written: 2 a non-ASCII character; 16 one outside `simple` (only for such
    a document is the output not `normalize_text`'s: the caller redoes it where NFC/NFKC or the table could
    change it); 64 and 128, hints read before the table applies (a `<` or `&` before a character the table
    changes counts); and 32 when the table changed a character (CR or another control character, a non-ASCII
    space or line break, an invisible character).

    The rules, in normalize_text's order: `\\r\\n` and a lone `\\r` read as one newline; each table character
    (`table[code]`: 0 none, 1 removed, 2 a newline, 3 a space) replaced; NFC/NFKC (the identity on ASCII and
    simple characters); then the line rules of `normalize_layout`. Streamed: a space or tab is written at once
    and taken back (`t = keep`) when a newline or the end follows it; a newline at the start or a fourth in a
    row is not written. Once the table is applied every white space character is ASCII space, tab or newline
    (the others are controls or in the table), so the line rules need no other."""
    m = len(doc_ends)
    flags = np.zeros(m, np.uint8)
    out_ends = np.empty(m, np.int64)
    t, lo = _U0, _U0                                   # unsigned positions: no negative-index check
    for d in range(m):
        f, start, tags = 0, t, 0
        keep = t                                       # the output's end without its trailing spaces and tabs
        end = np.uint64(doc_ends[d])
        i = lo
        while i < end:
            c = data[i]
            if PLAIN[c]:                              # (nearly always taken: tested first)
                shift = i - t                          # a run of them is copied as it is (~13 % faster
                while True:                            # than one pass of the outer loop per byte)
                    out[i - shift] = c
                    i += _U1
                    if c != 32:
                        keep = i - shift
                    if i >= end:
                        break
                    c = data[i]
                    if not PLAIN[c]:
                        break
                t = i - shift
                continue
            if c == 60 or c == 38:
                out[t] = c
                t += _U1
                keep = t
                tag, entity = markup_opens(data, i, end, c)
                tags += tag
                f |= entity
                i += _U1
                continue
            if c < 128:                                # tab, newline, control characters (DEL included)
                i += _U1
                if c == 9:
                    out[t] = 9
                    t += _U1
                    continue
                if c == 10:
                    if i - _U1 > lo and data[i - _U2] == 13:    # the newline of a CRLF: read with the CR
                        continue
                    kind = 2
                else:
                    kind = table[c]
                    f |= 32
            else:
                code, size = code_point(data, np.int64(i))
                kind = table[code] if code >= 0 else 0
                if kind == 0:                          # kept: simple or not
                    f |= 2 if code >= 0 and simple[code] else 18
                    for _ in range(size):
                        out[t] = data[i]
                        t += _U1
                        i += _U1
                    keep = t
                    continue
                f |= 32
                i += np.uint64(size)
            if kind == 2:
                t = _newline(out, t, keep, start)
                keep = t
            elif kind == 3:
                out[t] = 32
                t += _U1
        t = keep
        while t > start and out[t - _U1] == 10:
            t -= _U1
        out_ends[d] = np.int64(t)
        out[t] = 10
        t += _U1
        flags[d] = f | (64 if tags >= tags_min else 0)
        lo = end + _U1
    return flags, out_ends
