"""An audit of the near-dedup decision that can fail: exact Jaccard of every pair of a seeded document sample.

Verified pairs are ≥ threshold by construction, so sampling them measures nothing. Instead the audit draws a
seeded sample of the documents the decision was made over (`audit_sample` of them) plus both documents of a
seeded sample of LSH candidate pairs (`precision_sample` pairs: without them a sample of a large corpus holds
almost no duplicate pair), computes the exact shingle-set Jaccard of ALL pairs of that sample by brute force
(a sparse incidence-matrix product, so only pairs sharing a shingle cost anything), and compares:

- true pairs: exact Jaccard ≥ threshold;
- predicted pairs: both documents in one group (a keeper and the documents removed for it), the definition
  of benchmarks/dedup.py's pair F1;
- precision, recall and F1 of predicted against true, and `residual`: true pairs whose documents were both kept
  (duplicates left in the output).

Pairs found by the candidate sample are LSH candidates by construction, so they test the verification and the
keeper choice but not the banding; pairs between documents of the random part test everything, banding
included (on a corpus no larger than `audit_sample` the audit is exhaustive).
"""

from __future__ import annotations

from collections.abc import Callable, Hashable, Sequence
from typing import Any

import numpy as np
import scipy.sparse as sp

from specs.clean import DedupSpec
from tasks.data.dedup.lsh import are_duplicates, in_runs, stable_order
from tasks.data.dedup.minhash import DedupResult, shingle_sets


def pairwise_jaccard(sets: Sequence[np.ndarray]) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Exact Jaccard of every pair (i < j) of shingle sets that share ≥ 1 shingle: (i [k], j [k], J [k]).

    Pairs sharing nothing have Jaccard 0 and are not listed. Each set must hold distinct values.
    """
    return pairwise_jaccard_runs(*runs_of(sets))


def runs_of(sets: Sequence[np.ndarray]) -> tuple[np.ndarray, np.ndarray]:
    """Sets back to back: (values [N], offsets [m + 1]), set d being values[offsets[d]:offsets[d + 1]]."""
    sizes = np.fromiter(map(len, sets), dtype=np.int64, count=len(sets))         # [m]
    values = np.concatenate(sets) if len(sets) else np.zeros(0, np.uint32)
    return values, np.concatenate([[0], np.cumsum(sizes)])


def pairwise_jaccard_runs(values: np.ndarray, offsets: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """`pairwise_jaccard` of the sets given back to back (`runs_of`'s layout: no list of arrays to build)."""
    sizes = np.diff(offsets)                                                     # [m]
    if len(sizes) < 2 or sizes.sum() == 0:
        empty = np.zeros(0, dtype=np.int64)
        return empty, empty, np.zeros(0, dtype=np.float64)
    # the incidence matrix by columns: one column per value held by ≥ 2 sets, its rows the sets holding it (a
    # value of one set alone adds to no intersection; most are alone, so the product's work shrinks). A stable
    # sort by value lists each value's sets in ascending order, as CSC wants them.
    order = stable_order(values) if values.dtype == np.uint32 else np.argsort(values, kind="stable")
    ordered = values[order]
    twice = in_runs(ordered)
    held = ordered[twice]
    owner = np.repeat(np.arange(len(sizes), dtype=np.int32), sizes)[order[twice]]      # each held value's set
    first = np.ones(len(held), dtype=bool)
    first[1:] = held[1:] != held[:-1]
    indptr = np.append(np.flatnonzero(first), len(held))
    incidence = sp.csc_matrix((np.ones(len(held), dtype=np.int32), owner, indptr),
                              shape=(len(sizes), len(indptr) - 1))               # [m, V] 0/1
    shared = sp.triu(incidence @ incidence.T, k=1).tocoo()                       # [m, m] intersection sizes
    i, j, inter = shared.row.astype(np.int64), shared.col.astype(np.int64), shared.data.astype(np.float64)
    keyed = np.lexsort((j, i))                                                   # deterministic order
    i, j, inter = i[keyed], j[keyed], inter[keyed]
    return i, j, inter / (sizes[i] + sizes[j] - inter)


def audit_sample(n: int, candidates: np.ndarray, spec: DedupSpec, seed: int) -> np.ndarray:
    """Sorted distinct document indices: a seeded sample of `spec.audit_sample` of n documents plus both
    documents of a seeded sample of `spec.precision_sample` candidate pairs."""
    rng = np.random.default_rng([seed, 0xA0D1])          # its own stream: other seeded draws stay unchanged
    docs = rng.choice(n, size=min(spec.audit_sample, n), replace=False)
    picked = rng.choice(len(candidates), size=min(spec.precision_sample, len(candidates)), replace=False)
    return np.unique(np.concatenate([docs, candidates[picked].ravel()]).astype(np.int64))


def audit(
    ids: Sequence[str],
    text_of: Callable[[str], str],
    result: DedupResult,
    spec: DedupSpec,
    seed: int,
) -> dict[str, Any]:
    """Pair precision / recall / F1 of `result` (made over `ids`) on the exact Jaccard of a seeded sample."""
    sample = audit_sample(len(ids), result.candidate_index, spec, seed)          # [m]
    keeper_of = {dropped: kept for dropped, kept, _ in result.dropped}
    group = [keeper_of.get(ids[d], ids[d]) for d in sample.tolist()]             # a keeper's group is its id
    removed = np.array([ids[d] in keeper_of for d in sample.tolist()], dtype=bool)
    sets = shingle_sets([text_of(ids[d]) for d in sample.tolist()], spec)
    return audit_groups(runs_of(sets), group, removed, spec, result.bands, result.rows)


def audit_groups(sets: tuple[np.ndarray, np.ndarray], group: Sequence[Hashable], removed: np.ndarray,
                 spec: DedupSpec, bands: int, rows: int) -> dict[str, Any]:
    """The audit's figures for sampled documents: their shingle sets (back to back, as `runs_of` lays them
    out), the group each ended in (a keeper's label) and whether it was removed; `bands` × `rows` is the
    banding the decision used."""
    i, j, jac = pairwise_jaccard_runs(*sets)
    true = are_duplicates(jac, spec.threshold)
    true_i, true_j = i[true], j[true]
    members: dict[Hashable, int] = {}
    for g in group:
        members[g] = members.get(g, 0) + 1
    predicted = sum(k * (k - 1) // 2 for k in members.values())
    hits = sum(group[a] == group[b] for a, b in zip(true_i.tolist(), true_j.tolist()))
    m = len(group)
    precision = hits / predicted if predicted else None
    recall = hits / len(true_i) if len(true_i) else None
    f1 = None
    if precision is not None and recall is not None:
        f1 = 2 * precision * recall / (precision + recall) if precision + recall else 0.0
    t = spec.threshold
    return {
        "audit_docs": m,
        "audit_pairs": m * (m - 1) // 2,
        "true_pairs": int(len(true_i)),
        "predicted_pairs": int(predicted),
        "precision": None if precision is None else round(precision, 6),
        "recall": None if recall is None else round(recall, 6),
        "f1": None if f1 is None else round(f1, 6),
        "residual": int(np.sum(~removed[true_i] & ~removed[true_j])),
        "p_candidate_at_threshold": round(float(1.0 - (1.0 - t**rows) ** bands), 6),
    }
