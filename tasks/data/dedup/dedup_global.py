"""Clean's corpus-wide dedup out of core: the decisions of `cleaning.deduplicate` (the in-memory reference,
identical results) from the per-shard files of `tasks.data.dedup.dedup_files`, in memory bounded by `clean.memory_gb`.

1. Ranks: a merge of the shards' best-first runs gives every kept row its global rank (−quality, then id).
2. Exact dedup over 128-bit digests: in each group of equal digests the best-ranked row stays.
3. Near dedup, as tasks on the executor (`tasks.data.dedup.dedup_tasks`): each band bucket's candidate pairs; one
   sorted, distinct candidate file (an external merge); verification over ranges of it; the links (pairs ≥
   threshold) streamed in (worse rank, better rank) order through a kept flag per rank: a document is removed
   for the first (best) kept document linked to it — exactly `lsh.greedy_keepers`' no-chain decision, since a
   document's own fate is final before any link where it is the better one is read.
4. The audit of `tasks.data.dedup.dedup_audit` on the same seeded sample, its shingles read back from the shards.

What stays in the stage's memory grows with the corpus only by a few per-document numpy arrays (rank 8 B,
flags 3 B; the exact-dedup sort ~40 B per kept document while it runs) and by the decisions (24 B per drop);
everything else is sized from the budget: the bucket count, the verification ranges and the merge chunks.
"""

from __future__ import annotations

import logging
import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow.parquet as pq

from specs.clean import CleanSpec
from specs.run import ExecutorSpec
from tasks.core.executors import available_cores
from tasks.core.shardmap import map_shards
from tasks.data.dedup import dedup_audit, dedup_files
from tasks.data.dedup.dedup_tasks import (ALIVE, CANDIDATES, RANK, VERIFIED, Layout, bucket_candidates,
                                    read_shingle_sets, verify_range)
from tasks.data.dedup.lsh import repeated_groups, s_curve, sorted_unique, spec_banding

log = logging.getLogger("forgeline.clean")
BUCKET_ENTRY_BYTES = 96     # a band entry in a bucket task: 12 B on disk, row id, sort keys and temporaries
MIN_VERIFY_PAIRS = 1024    # candidates per verification task at least (a task costs a process round trip)
VERIFY_DOC_BYTES = 4        # × the mean text size: text, words, shingle hashes and the set of one needed row


@dataclass
class Decisions:
    """Dedup drops, sorted by row id."""

    rows: np.ndarray        # int64 [d] dropped row ids
    near: np.ndarray        # bool [d] near duplicate (else exact)
    keeper: np.ndarray      # int64 [d] row id of the document kept for it
    sim: np.ndarray         # float64 [d] similarity to the keeper (near drops)


def task_budget(spec: CleanSpec, executor: ExecutorSpec) -> float:
    """Bytes one task may hold: the budget shared by the tasks that run at once."""
    return spec.memory_gb * 2**30 / (executor.workers or available_cores())


def plan_buckets(total_rows: int, spec: CleanSpec, executor: ExecutorSpec) -> int:
    """How many band buckets keep one bucket task's entries within its share of the budget."""
    entries = total_rows * spec_banding(spec.dedup)[0]
    return max(1, min(65_536, math.ceil(entries * BUCKET_ENTRY_BYTES / task_budget(spec, executor))))


def deduplicate(layout: Layout, spec: CleanSpec, seed: int, executor: ExecutorSpec) -> dict[str, Any]:
    """Exact then near duplicates over the shards of `layout`; the decisions and the report's summary."""
    d = spec.dedup
    bases = [layout.base(s) for s in range(len(layout.stems))]
    rank = dedup_files.rank_runs(bases, np.asarray(layout.offsets), layout.total)        # [N]
    alive = rank >= 0
    exact = _exact(layout, rank) if d.exact else (np.zeros(0, np.int64), np.zeros(0, np.int64))
    alive[exact[0]] = False
    summary: dict[str, Any] = {"exact_dropped": len(exact[0])}
    detail: dict[str, Any] = {}
    near = (np.zeros(0, np.int64), np.zeros(0, np.int64), np.zeros(0, np.float64))
    dedup_files.save_npy(layout.work / RANK, rank)      # (near dedup's tasks and repeated lines' read it)
    if d.near and alive.any():
        dedup_files.save_npy(layout.work / ALIVE, alive.astype(np.uint8))
        near, stats = _near(layout, spec, executor, int(alive.sum()))
        sample = _audit(layout, spec, seed, alive, near)
        summary.update({"near_dropped": len(near[0]), **stats, "precision": sample["precision"],
                        "recall": sample["recall"], "f1": sample["f1"], "audit_pairs": sample["audit_pairs"],
                        "residual": sample["residual"]})
        detail = {"s_curve": s_curve(stats["bands"], stats["rows"]), "audit": sample}
    rows = np.concatenate([exact[0], near[0]])
    order = np.argsort(rows, kind="stable")
    decisions = Decisions(rows=rows[order], near=np.repeat([False, True], [len(exact[0]), len(near[0])])[order],
                          keeper=np.concatenate([exact[1], near[1]])[order],
                          sim=np.concatenate([np.zeros(len(exact[0])), near[2]])[order])
    return {"decisions": decisions, "summary": summary, "detail": detail}


def _exact(layout: Layout, rank: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(dropped rows, their keepers): in each group of equal digests among ranked rows, all but the best."""
    rows = np.flatnonzero(rank >= 0)
    digest = np.concatenate([np.load(dedup_files.at(layout.base(s), ".exact.npy"))
                             for s in range(len(layout.stems))])[rows]          # [A, 2]
    maybe = repeated_groups(digest[:, 0])           # only rows whose first half repeats can have a duplicate
    rows, digest = rows[maybe], digest[maybe]
    order = np.lexsort((rank[rows], digest[:, 1], digest[:, 0]))                 # groups, best first
    rows, digest = rows[order], digest[order]
    first = np.ones(len(rows), dtype=bool)
    first[1:] = np.any(digest[1:] != digest[:-1], axis=1)
    keeper = rows[np.maximum.accumulate(np.where(first, np.arange(len(rows)), 0))]
    return rows[~first], keeper[~first]


def _near(layout: Layout, spec: CleanSpec, executor: ExecutorSpec,
          alive: int) -> tuple[tuple[np.ndarray, np.ndarray, np.ndarray], dict[str, Any]]:
    work, budget = layout.work, task_budget(spec, executor)
    buckets = len(np.load(dedup_files.at(layout.base(0), ".bands.off.npy"))) - 1
    cand = [work / f"cand-{k:05d}.npy" for k in range(buckets)]
    map_shards(bucket_candidates, [(layout, k, p) for k, p in enumerate(cand)], [p.stem for p in cand], executor,
               "clean dedup: candidates")
    total = 0
    with open(work / CANDIDATES, "wb") as fh:                 # the external merge: one sorted, distinct file
        for part in dedup_files.merge_sorted(cand, None, _chunk(spec, len(cand), 8)):
            part = sorted_unique(part)
            fh.write(part.astype("<i8").tobytes())
            total += len(part)
    per_task = max(MIN_VERIFY_PAIRS, int(budget / (2 * VERIFY_DOC_BYTES * _mean_text_bytes(layout))))
    ranges = [(lo, min(lo + per_task, total)) for lo in range(0, total, per_task)]
    ver = [work / f"links-{t:05d}.npy" for t in range(len(ranges))]
    if ranges:
        map_shards(verify_range, [(layout, lo, hi, spec.dedup, p) for (lo, hi), p in zip(ranges, ver)],
                   [p.stem for p in ver], executor, "clean dedup: verification")
    log.info("dedup: %d alive, %d buckets, %d candidates in %d verification ranges", alive, buckets, total,
             len(ranges))
    dropped, links = _decide(ver, layout.total, _chunk(spec, len(ver), VERIFIED.itemsize))
    bands, rows = spec_banding(spec.dedup)
    near = (np.array([x[0] for x in dropped], np.int64), np.array([x[1] for x in dropped], np.int64),
            np.array([x[2] for x in dropped], np.float64))
    return near, {"bands": bands, "rows": rows, "candidate_pairs": total, "verified_pairs": links,
                  "clusters": len(set(near[1].tolist()))}


def _decide(ver: list[Path], total: int, chunk: int) -> tuple[list[tuple[int, int, float]], int]:
    """The greedy no-chain decision over the links, read in (worse rank, better rank) order: a document is
    removed for the first kept one linked to it. (dropped row, keeper row, similarity) per removal; the links."""
    kept = np.ones(total, dtype=bool)                         # by rank; a flag is final once it is read as better
    dropped: list[tuple[int, int, float]] = []
    links = 0
    for part in dedup_files.merge_sorted(ver, "code", chunk):
        links += len(part)
        w, b = part["code"] // total, part["code"] % total
        for k in np.flatnonzero(kept[b] & kept[w]).tolist():  # (a flag only ever turns off) decide in order
            if kept[w[k]] and kept[b[k]]:
                kept[w[k]] = False
                dropped.append((int(part["worse"][k]), int(part["better"][k]), float(part["sim"][k])))
    return dropped, links


def _chunk(spec: CleanSpec, runs: int, itemsize: int) -> int:
    """Rows read per sorted run in a merge: all runs' chunks, their concatenation and its sort order (~4×) in
    the budget."""
    return max(4096, int(spec.memory_gb * 2**30 / (4 * max(runs, 1) * (itemsize + 8))))


def text_bytes(layout: Layout) -> int:
    """Uncompressed size of all the work tables' texts, from their Parquet metadata (nothing is read)."""
    size = 0
    for s in range(len(layout.stems)):
        meta = pq.ParquetFile(dedup_files.at(layout.base(s), ".parquet")).metadata
        col = meta.schema.names.index("text")
        size += sum(meta.row_group(g).column(col).total_uncompressed_size for g in range(meta.num_row_groups))
    return size


def _mean_text_bytes(layout: Layout) -> float:
    """Mean uncompressed size of a row's text (`text_bytes`)."""
    return max(text_bytes(layout) / max(layout.total, 1), 256.0)


class _Candidates:
    """The merged candidate file as `dedup_audit.audit_sample` indexes it: pairs of alive-document indices."""

    def __init__(self, layout: Layout, alive: np.ndarray):
        self.codes = dedup_files.int64_file(layout.work / CANDIDATES)
        self.total, self.alive = layout.total, alive

    def __len__(self) -> int:
        return len(self.codes)

    def __getitem__(self, picked: np.ndarray) -> np.ndarray:
        codes = np.asarray(self.codes[np.asarray(picked, dtype=np.int64)])
        rows = np.stack([codes // self.total, codes % self.total], axis=1)      # [k, 2] row ids
        return np.cumsum(self.alive)[rows] - 1                                  # their indices among alive


def _audit(layout: Layout, spec: CleanSpec, seed: int, alive: np.ndarray,
           near: tuple[np.ndarray, np.ndarray, np.ndarray]) -> dict[str, Any]:
    """`dedup_audit.audit` of this decision on its seeded sample (indices over the alive documents)."""
    live = np.flatnonzero(alive)
    sample = dedup_audit.audit_sample(len(live), _Candidates(layout, alive), spec.dedup, seed)
    rows = live[sample]
    sets = read_shingle_sets(layout, rows)
    keeper_of = dict(zip(near[0].tolist(), near[1].tolist()))
    group = [keeper_of.get(r, r) for r in rows.tolist()]
    removed = np.array([r in keeper_of for r in rows.tolist()], dtype=bool)
    bands, band_rows = spec_banding(spec.dedup)
    return dedup_audit.audit_groups(sets, group, removed, spec.dedup, bands, band_rows)


def layout_of(work: Path, stems: list[str]) -> Layout:
    sizes = [np.load(work / f"{s}.exact.npy", mmap_mode="r").shape[0] for s in stems]
    return Layout(work, tuple(stems), tuple(np.concatenate([[0], np.cumsum(sizes, dtype=np.int64)]).tolist()))
