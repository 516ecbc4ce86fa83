"""LSH banding for MinHash signatures: choosing b × r, the S-curve, candidate pairs, and the keep/remove decision.

Bucket semantics are those of datasketch's `MinHashLSH(params=(b, r))`: band i covers signature slots
[i·r, (i + 1)·r), and two documents are candidates when any band is equal in every slot. The index here is a
sort per band over a 64-bit key of the band (numpy, no per-document Python objects): ~35× cheaper than
inserting into and querying datasketch's dict-of-sets storage (20k docs, 16 × 8: 0.05 s against 1.8 s), with
the same candidates (tests/test_minhash.py checks it; a 64-bit key collision could add a candidate, which
verification removes).
"""

from __future__ import annotations

from collections import defaultdict
from functools import lru_cache
from typing import Any, Callable

import numpy as np

MAX_WINDOW = 64     # a bucket larger than this links each member to its next 64 (not all g² pairs)
HeadFn = Callable[[np.ndarray], int]   # a bucket's members (doc indices) -> its best document
_MUL = np.uint64(0x9E3779B97F4A7C15)

# Weights (false positive, false negative) of the banding objective. With verification an LSH false positive
# costs one comparison (~50 µs even when exact) and is then discarded, while a false negative is a duplicate
# lost for good: weight misses 19:1. (near_duplicates now checks every candidate, by exact Jaccard or by the
# signature estimate, so it always uses these; the equal weights suit candidates taken as final.)
WEIGHTS_VERIFY = (0.05, 0.95)
WEIGHTS_NO_VERIFY = (0.5, 0.5)


def sorted_unique(values: np.ndarray) -> np.ndarray:
    """Sorted distinct values. (numpy 2.4's `np.unique` hashes integers and was measured 60× slower than this.)"""
    values = np.sort(values)
    keep = np.ones(len(values), dtype=bool)
    keep[1:] = values[1:] != values[:-1]
    return values[keep]


def stable_order(values: np.ndarray) -> np.ndarray:
    """`np.argsort(values, kind="stable")` of uint32 values, as numpy's radix sort of the low then the high 16
    bits (two linear passes: 4-5x its merge sort of 32-bit values, whose order it equals)."""
    order = np.argsort(values.astype(np.uint16), kind="stable")                # astype keeps the low 16 bits
    return order[np.argsort((values[order] >> 16).astype(np.uint16), kind="stable")]


def repeated_groups(keys: np.ndarray) -> np.ndarray:
    """Positions of the uint64 keys that occur more than once, grouped by key in ascending key order, each group
    in ascending position: a stable argsort of the keys less the keys seen once. The low 32 bits are sorted
    first (`stable_order`) and the keys seen once there dropped, so the high bits sort only the few left."""
    low = keys.astype(np.uint32)                                              # astype keeps the low 32 bits
    order = stable_order(low)
    order = order[in_runs(low[order])]
    order = order[stable_order((keys[order] >> np.uint64(32)).astype(np.uint32))]   # LSD: (high, low, position)
    return order[in_runs(keys[order])]


def in_runs(ordered: np.ndarray) -> np.ndarray:
    """bool [n]: which values of a sorted array equal a neighbour."""
    same = ordered[1:] == ordered[:-1]
    out = np.zeros(len(ordered), dtype=bool)
    out[1:] |= same
    out[:-1] |= same
    return out


def s_curve(bands: int, rows: int, points: int = 21) -> list[tuple[float, float]]:
    """(Jaccard s, P(candidate) = 1 − (1 − s^r)^b) at `points` evenly spaced s in [0, 1]."""
    s = np.linspace(0.0, 1.0, points)
    p = 1.0 - (1.0 - s**rows) ** bands
    return [(round(float(x), 4), round(float(y), 6)) for x, y in zip(s, p)]


@lru_cache(maxsize=64)
def choose_banding(threshold: float, num_perm: int, verify: bool = True) -> tuple[int, int]:
    """b × r ≤ num_perm minimizing w_fp·∫P(s) over [t − w, t] + w_fn·∫(1 − P(s)) over [t, t + w].

    The objective of datasketch's `_optimal_param` (weighted false-positive and false-negative areas under
    the S-curve P(s) = 1 − (1 − s^r)^b), except that the false-positive area spans [t − w, t] with
    w = min(t, 1 − t), symmetric to the false-negative one, since pairs far below t are no candidates for any
    sensible banding (it picks the same b × r as datasketch at t = 0.8). What decides is the weighting. Equal
    weights (datasketch's default, used here without verification) give 9 × 13 at t = 0.8, 128 perms: the
    S-curve crosses 0.5 at J ≈ 0.84, so a pair at J = 0.8 is a candidate only 40 % of the time, the right
    trade only when candidates are final. With verification (WEIGHTS_VERIFY) it is 16 × 8: P(candidate) =
    0.947 at J = 0.8, 0.994 at 0.85, and 0.90–0.99 at J = t for any t in [0.5, 0.95] and 16–1024 perms;
    verification then removes the extra candidates (1.6× as many as 9 × 13 on the synthetic benchmark).
    """
    w_fp, w_fn = WEIGHTS_VERIFY if verify else WEIGHTS_NO_VERIFY
    width = min(threshold, 1.0 - threshold)
    below = np.linspace(threshold - width, threshold, 201)               # [201]
    above = np.linspace(threshold, threshold + width, 201)               # [201]
    best, best_error = (2, 1), np.inf
    for b in range(2, num_perm + 1):
        r = np.arange(1, num_perm // b + 1, dtype=np.float64)[:, None]   # [R, 1]
        fp = np.trapezoid(1.0 - (1.0 - below**r) ** b, below, axis=1)    # [R]
        fn = np.trapezoid((1.0 - above**r) ** b, above, axis=1)          # [R]
        error = w_fp * fp + w_fn * fn
        k = int(np.argmin(error))
        if error[k] < best_error - 1e-12:
            best, best_error = (b, k + 1), float(error[k])
    return best


def spec_banding(spec: Any) -> tuple[int, int]:
    """(bands, rows) of a dedup spec: its own `bands` × `rows` when set, else `choose_banding` for its threshold
    and signature length, leaning to recall (every candidate is checked before it links anything)."""
    return (spec.bands, spec.rows) if spec.bands else choose_banding(spec.threshold, spec.num_perm, True)


def are_duplicates(similarity: np.ndarray, threshold: float) -> np.ndarray:
    """Which pairs link [c] bool: similarity at or above the threshold (a pair exactly at it is a duplicate; the
    in-memory path, the out-of-core one and the audit's ground truth all decide here)."""
    return similarity >= threshold


def band_keys(sigs: np.ndarray, bands: int, rows: int) -> np.ndarray:
    """uint64 [n, bands]: one 64-bit key per band (equal bands → equal keys)."""
    keys = np.empty((len(sigs), bands), dtype=np.uint64)
    for s in range(0, len(sigs), 8192):                                   # temporaries of 8192 × bands
        block = sigs[s: s + 8192, : bands * rows].reshape(-1, bands, rows)  # [m, b, r] view
        key = block[:, :, 0].astype(np.uint64)                            # [m, b]
        for j in range(1, rows):
            key *= _MUL
            key += block[:, :, j]
        key ^= key >> np.uint64(33)                                       # finalize: spread the high bits
        key *= np.uint64(0xFF51AFD7ED558CCD)
        key ^= key >> np.uint64(33)
        keys[s: s + 8192] = key
    return keys


def candidate_pairs(sigs: np.ndarray, bands: int, rows: int, head_of: HeadFn | None = None) -> np.ndarray:
    """Distinct (i < j) pairs sharing at least one band bucket: int64 [c, 2], sorted.

    With `head_of`, the members of a bucket wider than the window are also linked to its best document (see
    `head_links`).
    """
    n = len(sigs)
    if bands * rows > sigs.shape[1]:
        raise ValueError(f"bands × rows = {bands * rows} exceeds the signature length {sigs.shape[1]}")
    keys = band_keys(sigs, bands, rows)                                   # [n, b]
    found: list[np.ndarray] = []
    for band in range(bands):
        order = np.argsort(keys[:, band], kind="stable")                  # [n] same key → ascending doc index
        sorted_keys = keys[order, band]
        same = sorted_keys[1:] == sorted_keys[:-1]                        # [n − 1]
        if not same.any():
            continue
        in_bucket = np.zeros(n, dtype=bool)                               # members of buckets with ≥ 2 docs
        in_bucket[1:] |= same
        in_bucket[:-1] |= same
        members, member_keys = order[in_bucket], sorted_keys[in_bucket]   # [k] grouped by bucket
        found += window_links(members, member_keys, n)
        if head_of is not None:
            found.append(head_links(members, member_keys, n, head_of))
    if not found:
        return np.zeros((0, 2), dtype=np.int64)
    codes = sorted_unique(np.concatenate(found))                          # i·n + j, i < j
    return np.stack([codes // n, codes % n], axis=1)


def window_links(members: np.ndarray, keys: np.ndarray, n: int) -> list[np.ndarray]:
    """Codes i·n + j linking each member of a bucket to its next MAX_WINDOW (`members` grouped by `keys`, each
    group in ascending order)."""
    found = []
    for d in range(1, MAX_WINDOW + 1):                                    # pairs d apart inside one bucket
        linked = keys[d:] == keys[:-d]
        if not linked.any():
            break                                                         # buckets are contiguous runs
        found.append(members[:-d][linked] * n + members[d:][linked])
    return found


def head_links(members: np.ndarray, keys: np.ndarray, n: int, head_of: HeadFn) -> np.ndarray:
    """Codes linking every member of a bucket wider than the window to `head_of(bucket)`, its best document.

    The window alone leaves such a bucket (a spam template copied thousands of times) with a keeper per ~65
    members: a member more than 64 places from every keeper is never compared with one. The greedy decision
    visits the best document first, so linking it to every member lets it remove the whole cluster, at one
    extra pair per member.
    """
    starts = np.flatnonzero(np.r_[True, keys[1:] != keys[:-1]])          # [g] first member of each bucket
    sizes = np.diff(np.r_[starts, len(members)])                          # [g]
    found = [np.zeros(0, dtype=np.int64)]
    for start, size in zip(starts[sizes > MAX_WINDOW + 1].tolist(), sizes[sizes > MAX_WINDOW + 1].tolist()):
        group = members[start: start + size]
        head = head_of(group)
        others = group[group != head]
        found.append(np.minimum(others, head) * n + np.maximum(others, head))
    return np.concatenate(found)


def clusters_of(pairs: np.ndarray, n: int) -> list[list[int]]:
    """Connected components (union-find) of the pair graph: sorted lists of ≥ 2 sorted doc indices. Not the
    dedup decision (see `greedy_keepers`); kept for the benchmark's transitive baselines."""
    parent: dict[int, int] = {}

    def find(x: int) -> int:
        root = x
        while parent[root] != root:
            root = parent[root]
        while parent[x] != root:                                           # path compression
            parent[x], x = root, parent[x]
        return root

    for i, j in pairs.tolist():
        parent.setdefault(i, i)
        parent.setdefault(j, j)
        ri, rj = find(i), find(j)
        if ri != rj:
            parent[max(ri, rj)] = min(ri, rj)
    groups: dict[int, list[int]] = defaultdict(list)
    for x in parent:
        groups[find(x)].append(x)
    return sorted(sorted(g) for g in groups.values())


def greedy_keepers(pairs: np.ndarray, rank: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Which documents to remove, and for which kept document: (removed [d], edge [d]) with pairs[edge[k]]
    linking removed[k] to its keeper.

    `pairs` [e, 2] are the links (pairs already judged ≥ threshold) and `rank` [n] each document's position in
    best-first order (0 = best; only documents in `pairs` need a meaningful rank). Documents are visited best-first; one not yet removed becomes a
    keeper and removes its not-yet-decided neighbours. So every removed document is linked to (within the
    threshold of) its own keeper; unlike connected components, a chain A~B~C with J(A, C) below the
    threshold cannot remove C for A: when B is removed for A, C stays undecided and is kept (or removed by a
    later keeper it is linked to). The loop is over links only (a few per duplicate), not over documents.
    """
    if len(pairs) == 0:
        return np.zeros(0, dtype=np.int64), np.zeros(0, dtype=np.int64)
    e = np.arange(len(pairs), dtype=np.int64)
    src = np.concatenate([pairs[:, 0], pairs[:, 1]])                       # [2e] both directions
    dst = np.concatenate([pairs[:, 1], pairs[:, 0]])
    edge = np.concatenate([e, e])
    forward = rank[dst] > rank[src]                                        # only worse neighbours can be removed
    src, dst, edge = src[forward], dst[forward], edge[forward]
    order = np.lexsort((rank[dst], rank[src]))                             # by keeper rank, then neighbour rank
    src, dst, edge = src[order].tolist(), dst[order].tolist(), edge[order].tolist()
    removed: dict[int, int] = {}                                           # removed doc -> edge to its keeper
    for u, v, k in zip(src, dst, edge):
        # u's own fate is final here: only better-ranked keepers, whose links sort earlier, can remove it
        if u not in removed and v not in removed:
            removed[v] = k
    docs = np.fromiter(removed.keys(), dtype=np.int64, count=len(removed))
    return docs, np.fromiter(removed.values(), dtype=np.int64, count=len(removed))
