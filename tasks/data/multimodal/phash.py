"""Perceptual-hash dedup of media across the corpus, with text dedup's clustering rule.

Images: an imagehash hash (phash by default, 64 bits) of the decoded thumbnail. Candidates by the pigeonhole
rule: split the bits into `max_distance + 1` bands; two hashes within `max_distance` bits agree exactly on at
least one band, so records sharing a band value are linked (each to its next 64 in the band's bucket, and a
wider bucket's members also to its best record: `tasks.data.dedup.lsh.window_links/head_links`, as near dedup does),
then verified by the Hamming distance and by a coarse colour signature (`colour_tolerance`). Audio: records whose
decoded samples (as 16-bit PCM) are identical.

The hash is taken on the grayscale thumbnail, so it is blind to colour: every flat-colour image hashed alike (a
red square removed a blue one, an 88-MP black PNG any flat image) and so did the same shapes in other colours.
The signature is the mean RGB of each cell of a COLOUR_GRID × COLOUR_GRID grid over the thumbnail; a pair is a
duplicate only if no cell's channel differs by more than the tolerance (copies resized and re-encoded as JPEG
stay well under it: the spec field says what was measured) once a uniform brightness shift is taken out: the
signatures' mean difference over all cells and channels, at most `brightness_tolerance` either way. A copy
brightened by 15 differed by 15 in every cell and was kept; a hue turn or a local edit moves that mean little
and its cells' differences from it stay as large as before.

The decision is `tasks.data.dedup.lsh.greedy_keepers`: best-first (most pixels or the longest clip, ties by id), a
record not yet removed is kept and removes the undecided ones linked to *it* (no chains).
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from specs.multimodal import MediaDedupSpec
from tasks.data.dedup.lsh import greedy_keepers, head_links, window_links
from tasks.data.multimodal.records import MMRecord


COLOUR_GRID = 4   # cells per side of the colour signature: 4×4 cells × RGB = 48 means


@dataclass(frozen=True, eq=False)   # arrays: compared field by field in `image_pairs`, never as a whole
class ImagePrint:
    """What dedup compares for an image: the hash's hash_size² bits and the colour signature (COLOUR_GRID² × 3
    mean channel values, 0–255, cells row by row)."""

    bits: np.ndarray
    colour: np.ndarray


def colour_signature(thumb) -> np.ndarray:
    """Mean RGB per cell of a COLOUR_GRID × COLOUR_GRID grid over the RGB thumbnail (Pillow's box filter, whose
    output is integers: the same thumbnail gives the same signature on every run)."""
    from PIL import Image

    cells = thumb.convert("RGB").resize((COLOUR_GRID, COLOUR_GRID), Image.BOX)
    return np.asarray(cells, dtype=np.uint8).reshape(-1).astype(np.int16)


def fingerprint(rec: MMRecord, spec: MediaDedupSpec) -> ImagePrint | bytes | None:
    """What dedup compares, computed while the record is decoded: an image's `ImagePrint` (hash as a flat bool
    array of hash_size² bits, and colour signature), a clip's digest of its samples as 16-bit PCM; None for other
    kinds."""
    if rec.media.kind == "image":
        import imagehash

        fn = getattr(imagehash, spec.hash)
        bits = np.asarray(fn(rec.decoded.thumb, hash_size=spec.hash_size).hash, dtype=bool).ravel()
        return ImagePrint(bits, colour_signature(rec.decoded.thumb))
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


def image_pairs(bits: np.ndarray, idx: np.ndarray, rank: np.ndarray, n: int, max_distance: int,
                colours: np.ndarray | None = None, tolerance: float = 255.0, brightness: float = 0.0) -> np.ndarray:
    """[e, 2] verified pairs (i < j) of records `idx` whose hashes (`bits` rows) are within `max_distance` and,
    given `colours` (rows as `bits`; NaN: unknown, agrees with any), whose colour signatures differ by at most
    `tolerance` in every cell and channel after the one is shifted by their mean difference, clipped to
    ±`brightness` (0: no shift, the difference itself is compared)."""
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
    if colours is not None and len(i):
        # the hash alone cannot tell a red square from a blue one; candidates stay the hash's (bands above)
        diff = np.nan_to_num(colours[pos[i]] - colours[pos[j]], nan=0.0)
        # a uniform brightness change moves all 48 values alike; a hue turn or a local edit barely moves their mean
        shift = np.clip(diff.mean(axis=1), -brightness, brightness)
        gap = np.abs(diff - shift[:, None]).max(axis=1)
        ok &= gap <= tolerance
    return np.stack([i[ok], j[ok]], axis=1)


def _image_rows(prints: list, nbits: int) -> tuple[np.ndarray, np.ndarray]:
    """The prints' hash bits [m, bits] and colour signatures [m, COLOUR_GRID² · 3] (NaN rows where unknown)."""
    width = COLOUR_GRID * COLOUR_GRID * 3
    if not prints:
        return np.zeros((0, nbits), bool), np.zeros((0, width))
    bits = np.stack([p.bits if isinstance(p, ImagePrint) else p for p in prints])
    colours = np.stack([p.colour.astype(np.float64) if isinstance(p, ImagePrint) else np.full(width, np.nan)
                        for p in prints])
    return bits, colours


def dedup(recs: Sequence[MMRecord], prints: Sequence[ImagePrint | np.ndarray | bytes | None],
          spec: MediaDedupSpec) -> dict[int, tuple[int, int]]:
    """Removed record index -> (its keeper's index, Hamming distance; 0 for identical audio), from each
    record's `fingerprint` (a bare bool array is an image hash without a colour signature: the hash decides)."""
    n = len(recs)
    if n < 2:
        return {}
    rank = _rank(recs)
    images = np.array([i for i, p in enumerate(prints) if isinstance(p, (ImagePrint, np.ndarray))], dtype=np.int64)
    bits, colours = _image_rows([prints[i] for i in images], spec.hash_size ** 2)
    pairs = [image_pairs(bits, images, rank, n, spec.max_distance, colours, spec.colour_tolerance,
                         spec.brightness_tolerance)]
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
