"""The global dedup phase's partitioned work: module-level functions the executor runs as tasks (a local process
pool or Dask workers), each reading the work folder's files and writing only its own output, atomically.

- `bucket_candidates(k)`: LSH candidate pairs of band bucket k, from every shard's slice of it. The same pairs
  as `lsh.candidate_pairs` restricted to that bucket's (band, key) groups: members in ascending row order, each
  linked to its next `lsh.MAX_WINDOW`, and in a group wider than that also to the group's best-ranked row.
  Written as sorted distinct codes g_i · N + g_j (g_i < g_j, row ids).
- `verify_range(lo, hi)`: candidates [lo, hi) of the merged candidate file judged by exact shingle-set Jaccard
  (of the shingles phase 1 stored, only the rows needed) or by the signature estimate; the pairs ≥ threshold
  are written in rank space, sorted by (worse rank, better rank), which is the order the greedy decision reads
  them in.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pyarrow.parquet as pq

from specs.clean import DedupSpec
from tasks.data.dedup import dedup_files
from tasks.data.dedup.lsh import are_duplicates, head_links, repeated_groups, sorted_unique, window_links
from tasks.data.dedup.minhash import distinct_runs, estimated_jaccard, jaccard_of_runs

# code = worse rank · N + better rank (the sort key); rows are the two documents' row ids
VERIFIED = np.dtype([("code", "<i8"), ("worse", "<i8"), ("better", "<i8"), ("sim", "<f8")])
ALIVE, RANK, CANDIDATES = "alive.npy", "rank.npy", "candidates.bin"


@dataclass(frozen=True)
class Layout:
    """Where the global phase's files are: the work folder, shard stems in order, and row offsets."""

    work: Path
    stems: tuple[str, ...]
    offsets: tuple[int, ...]          # [shards + 1]: shard s holds rows offsets[s]..offsets[s + 1]

    @property
    def total(self) -> int:
        return self.offsets[-1]

    def base(self, s: int) -> Path:
        return self.work / self.stems[s]

    def shard_of(self, rows: np.ndarray) -> np.ndarray:
        return np.searchsorted(np.asarray(self.offsets), rows, side="right") - 1


def bucket_candidates(layout: Layout, bucket: int, out: Path) -> int:
    """Candidate pairs of one band bucket, written to `out` (int64 codes, sorted, distinct); returns their count."""
    alive = np.load(layout.work / ALIVE, mmap_mode="r")
    keys, rows = [], []
    for s in range(len(layout.stems)):
        part = dedup_files.bucket_slice(layout.base(s), bucket)
        g = part["row"].astype(np.int64) + layout.offsets[s]
        live = alive[g].astype(bool)                                     # exact duplicates are out already
        keys.append(part["key"][live])
        rows.append(g[live])
    key = np.concatenate(keys) if keys else np.zeros(0, np.uint64)
    row = np.concatenate(rows) if rows else np.zeros(0, np.int64)
    # rows already ascend (shards in order, each slice in row order): groups keep their members by ascending row
    members = repeated_groups(key)                                       # members of groups with ≥ 2 rows
    key, row = key[members], row[members]
    rank = np.load(layout.work / RANK, mmap_mode="r")
    found = window_links(row, key, layout.total)
    found.append(head_links(row, key, layout.total, lambda group: int(group[np.argmin(rank[group])])))
    codes = sorted_unique(np.concatenate(found)) if found else np.zeros(0, np.int64)
    dedup_files.save_npy(out, codes)
    return len(codes)


def read_rows(layout: Layout, rows: np.ndarray, column: str) -> list:
    """Values of `column` of the given (sorted) rows, read shard by shard (only that column)."""
    values: list = []
    shard = layout.shard_of(rows)
    for s in sorted_unique(shard).tolist():
        mine = rows[shard == s] - layout.offsets[s]
        table = pq.read_table(dedup_files.at(layout.base(s), ".parquet"), columns=[column], memory_map=True,
                              use_threads=False)          # one column of one shard: threads only add overhead
        values.extend(table.column(0).take(mine).to_pylist())
    return values


def read_shingle_sets(layout: Layout, rows: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The shingle sets of the given (sorted) rows, from the shards' stored shingles (phase 1's): their sorted
    distinct uint32 values back to back and offsets [len(rows) + 1] (set k is values[offsets[k]:offsets[k + 1]])."""
    values, offsets, size = [], [np.zeros(1, np.int64)], 0
    shard = layout.shard_of(rows)
    for s in sorted_unique(shard).tolist():
        run, bounds = distinct_runs(*dedup_files.shingle_runs(layout.base(s), rows[shard == s] - layout.offsets[s]))
        values.append(run)
        offsets.append(bounds[1:] + size)
        size += len(run)
    return (np.concatenate(values) if values else np.zeros(0, np.uint32)), np.concatenate(offsets)


def read_signatures(layout: Layout, rows: np.ndarray) -> np.ndarray:
    """Signature rows of the given (sorted) rows, through memory maps of the shards' .sig.npy files."""
    shard = layout.shard_of(rows)
    parts = [np.load(dedup_files.at(layout.base(s), ".sig.npy"), mmap_mode="r")[rows[shard == s] - layout.offsets[s]]
             for s in sorted_unique(shard).tolist()]
    return np.concatenate(parts) if parts else np.zeros((0, 1), np.uint32)


def verify_range(layout: Layout, lo: int, hi: int, spec: DedupSpec, out: Path) -> int:
    """Candidates [lo, hi) judged; links (≥ threshold) written to `out` as VERIFIED rows; returns their count."""
    codes = np.asarray(dedup_files.int64_file(layout.work / CANDIDATES)[lo:hi])
    i, j = codes // layout.total, codes % layout.total
    docs = sorted_unique(np.concatenate([i, j]))                         # rows needed, ascending
    if spec.verify:
        values, offsets = read_shingle_sets(layout, docs)
        sims = jaccard_of_runs(values, offsets, np.searchsorted(docs, i), np.searchsorted(docs, j))
    else:
        sigs = read_signatures(layout, docs)
        sims = estimated_jaccard(sigs[np.searchsorted(docs, i)], sigs[np.searchsorted(docs, j)])
    keep = are_duplicates(sims, spec.threshold)
    rank = np.load(layout.work / RANK, mmap_mode="r")
    ri, rj = rank[i[keep]], rank[j[keep]]
    links = np.empty(int(keep.sum()), dtype=VERIFIED)
    gi, gj = i[keep], j[keep]
    links["worse"], links["better"] = np.where(ri > rj, gi, gj), np.where(ri > rj, gj, gi)
    links["code"] = np.maximum(ri, rj) * layout.total + np.minimum(ri, rj)
    links["sim"] = sims[keep]
    dedup_files.save_npy(out, links[np.argsort(links["code"], kind="stable")])
    return len(links)
