"""Perceptual-hash dedup of media across the corpus, with text dedup's clustering rule.

Images: an imagehash hash (phash by default, 64 bits) of the decoded thumbnail. Candidates by the pigeonhole
rule: split the bits into `max_distance + 1` bands; two hashes within `max_distance` bits agree exactly on at
least one band, so records sharing a band value are linked (each to its next 64 in the band's bucket, and a
wider bucket's members also to its best record: `tasks.data.dedup.lsh.window_links/head_links`, as near dedup does),
then verified by the Hamming distance. Audio: records whose decoded samples (as 16-bit PCM) are identical.
The decision is `tasks.data.dedup.lsh.greedy_keepers`: best-first (most pixels or the longest clip, ties by id), a
record not yet removed is kept and removes the undecided ones linked to *it* (no chains).
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence

import numpy as np

from specs.multimodal import MediaDedupSpec
from tasks.data.dedup.lsh import greedy_keepers, head_links, window_links
from tasks.data.multimodal.records import MMRecord


def fingerprint(rec: MMRecord, spec: MediaDedupSpec) -> np.ndarray | bytes | None:
    """What dedup compares, computed while the record is decoded: an image's hash as a flat bool array of
    hash_size² bits, a clip's digest of its samples as 16-bit PCM; None for other kinds."""
    if rec.media.kind == "image":
        import imagehash

        fn = getattr(imagehash, spec.hash)
        return np.asarray(fn(rec.decoded.thumb, hash_size=spec.hash_size).hash, dtype=bool).ravel()
    if rec.media.kind == "audio":
        samples = np.clip(rec.decoded.samples, -1.0, 1.0)
        return hashlib.blake2b((samples * 32767).astype("<i2").tobytes(), digest_size=16).digest()
    return None


def _rank(recs: Sequence[MMRecord]) -> np.ndarray:
    """Each record's place in best-first order (0 = best): most pixels / longest clip, then id."""
    order = sorted(range(len(recs)), key=lambda i: (-(recs[i].decoded.width * recs[i].decoded.height
                                                      + recs[i].decoded.duration_s), recs[i].id))
    rank = np.empty(len(recs), dtype=np.int64)
    rank[order] = np.arange(len(recs))
    return rank


def _bucket_links(keys: np.ndarray, rank: np.ndarray, members: np.ndarray, n: int) -> list[np.ndarray]:
    """Link codes i·n + j for records sharing a key (members sorted by key, then rank)."""
    order = np.lexsort((rank[members], keys))
    m, k = members[order], keys[order]
    links = window_links(m, k, n)
    links.append(head_links(m, k, n, lambda group: int(group[np.argmin(rank[group])])))
    return links


def image_pairs(bits: np.ndarray, idx: np.ndarray, rank: np.ndarray, n: int, max_distance: int) -> np.ndarray:
    """[e, 2] verified pairs (i < j) of records `idx` whose hashes (`bits` rows) are within `max_distance`."""
    if len(idx) < 2:
        return np.zeros((0, 2), dtype=np.int64)
    bands = np.array_split(np.arange(bits.shape[1]), min(max_distance + 1, bits.shape[1]))
    weights = [1 << np.arange(len(b), dtype=np.uint64) for b in bands]
    codes: list[np.ndarray] = []
    for b, (cols, w) in enumerate(zip(bands, weights)):
        keys = (bits[:, cols].astype(np.uint64) * w).sum(axis=1) + np.uint64(b << 40)
        codes += _bucket_links(keys.astype(np.int64), rank, idx, n)
    code = np.unique(np.concatenate(codes)) if codes else np.zeros(0, np.int64)
    i, j = code // n, code % n
    i, j = np.minimum(i, j), np.maximum(i, j)
    pos = np.full(n, -1, dtype=np.int64)
    pos[idx] = np.arange(len(idx))
    dist = (bits[pos[i]] != bits[pos[j]]).sum(axis=1)
    ok = (dist <= max_distance) & (i != j)
    return np.stack([i[ok], j[ok]], axis=1)


def dedup(recs: Sequence[MMRecord], prints: Sequence[np.ndarray | bytes | None],
          spec: MediaDedupSpec) -> dict[int, tuple[int, int]]:
    """Removed record index -> (its keeper's index, Hamming distance; 0 for identical audio), from each
    record's `fingerprint`."""
    n = len(recs)
    if n < 2:
        return {}
    rank = _rank(recs)
    images = np.array([i for i, p in enumerate(prints) if isinstance(p, np.ndarray)], dtype=np.int64)
    bits = np.stack([prints[i] for i in images]) if len(images) else np.zeros((0, spec.hash_size ** 2), bool)
    pairs = [image_pairs(bits, images, rank, n, spec.max_distance)]
    audio = np.array([i for i, p in enumerate(prints) if isinstance(p, bytes)], dtype=np.int64)
    if len(audio) > 1:
        ids = {d: k for k, d in enumerate(sorted({prints[i] for i in audio}))}
        code = np.unique(np.concatenate(_bucket_links(np.array([ids[prints[i]] for i in audio]), rank, audio, n)))
        pairs.append(np.stack([np.minimum(code // n, code % n), np.maximum(code // n, code % n)], axis=1))
    allpairs = np.concatenate(pairs).astype(np.int64)
    removed, edge = greedy_keepers(allpairs, rank)
    pos = np.full(n, -1, dtype=np.int64)
    pos[images] = np.arange(len(images))
    out = {}
    for r, e in zip(removed.tolist(), edge.tolist()):
        a, b = allpairs[e].tolist()
        kept = a if b == r else b
        dist = int((bits[pos[r]] != bits[pos[kept]]).sum()) if pos[r] >= 0 else 0
        out[r] = (kept, dist)
    return out
