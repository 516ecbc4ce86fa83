"""Clean's per-shard dedup inputs on disk, and the external merge of sorted numpy runs that the global phase uses.

Phase 1 writes, beside each shard's work table, everything the global phase needs so that it never holds the
corpus:

- `<stem>.bands.npy` + `<stem>.bands.off.npy`: one entry (64-bit band key, row) per band of each document the
  filters kept, grouped by bucket (`key % buckets`) with offsets [buckets + 1], so bucket k's task reads one slice
  of every shard. The band index is mixed into the key, so one bucket holds whole (band, key) groups of all bands.
- `<stem>.shingles.npy` + `<stem>.shingles.off.npy`: the shingle hashes the signatures were made of, per row
  (repeats kept), for verification and the audit.
- `<stem>.exact.npy`: uint64 [n, 2], the 128-bit exact-dedup digest of each row (`normalize.exact_key`).
- `<stem>.order.arrow` (Arrow IPC): the kept rows sorted best first (highest quality, ties by id): merged over all shards
  (`rank_runs`) they give every document its global rank, the visiting order of the greedy decision.
- `<stem>.sig.npy`: uint32 [n, num_perm], the MinHash signatures, only when `dedup.verify` is off (candidates are
  then judged by the signature estimate; with verification on nothing reads them, so they are not written).

Row g of the corpus is the g-th row of the shards concatenated in shard order (`offsets`).
"""

from __future__ import annotations

import heapq
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from tasks.core.files import atomic_path
from tasks.data.dedup import hashloops
from tasks.data.dedup.lsh import band_keys

ENTRY = np.dtype([("key", "<u8"), ("row", "<i4")])
ORDER_SCHEMA = pa.schema([("neg_quality", pa.float64()), ("id", pa.string()), ("row", pa.int32())])
ORDER_BATCH = 4096
_BAND_MIX = np.uint64(0xD6E8FEB86659FD93)


def at(base: Path, suffix: str) -> Path:
    """`base` + suffix (not `with_suffix`, which would cut a stem holding a dot)."""
    return base.parent / (base.name + suffix)


def int64_file(path: Path) -> np.ndarray:
    """A raw int64 file, memory-mapped (read-only); an empty one (no candidates: a tiny or duplicate-free
    corpus) as an empty array, since numpy cannot map zero bytes."""
    if path.stat().st_size == 0:
        return np.zeros(0, dtype=np.int64)
    return np.memmap(path, dtype=np.int64, mode="r")


def save_npy(path: Path, array: np.ndarray) -> None:
    with atomic_path(path) as tmp:
        with open(tmp, "wb") as fh:
            np.save(fh, array)


def mixed_band_keys(sigs: np.ndarray, bands: int, rows: int) -> np.ndarray:
    """uint64 [n, bands]: `lsh.band_keys` with the band index mixed in (equal only for equal band AND key)."""
    keys = band_keys(sigs, bands, rows)                                   # [n, b]
    keys += np.arange(bands, dtype=np.uint64)[None, :] * _BAND_MIX        # wraps mod 2^64, as intended
    keys ^= keys >> np.uint64(29)
    return keys


def write_shard_inputs(base: Path, sigs: np.ndarray, ids: list[str], columns: Mapping[str, list], bands: int,
                       band_rows: int, buckets: int) -> None:
    """The dedup inputs of one shard (see the module docstring); `base` is the work path without suffix, `ids`
    the rows' ids and `columns` their work-table `reason`, `quality` and `exact_key` values."""
    alive = np.array([reason is None for reason in columns["reason"]], dtype=bool)       # [n]
    live = np.flatnonzero(alive).astype(np.int32)
    keys = mixed_band_keys(sigs[live], bands, band_rows) if len(live) else np.zeros((0, bands), np.uint64)
    entries = np.empty(keys.size, dtype=ENTRY)
    entries["key"] = keys.ravel()
    entries["row"] = np.repeat(live, bands)
    save_buckets(base, "bands", entries, entries["key"] % np.uint64(buckets), buckets)
    # the 32-hex-digit digests as two little-endian uint64 (one conversion for the whole shard)
    exact = np.frombuffer(bytes.fromhex("".join(columns["exact_key"])), dtype="<u8").reshape(-1, 2)
    save_npy(at(base, ".exact.npy"), exact)
    # Python floats: numpy scalars made the sort 10× slower
    neg = [-q if q is not None else np.inf for q in columns["quality"]]
    if any(q != q for q in neg):          # NaN has no order: the one sort on (−quality, id) tuples decides
        order = sorted(live.tolist(), key=lambda k: (neg[k], ids[k]))                  # best first, stable
    else:   # by id, then stably by −quality: the same order, without a tuple per row (~3× faster)
        order = sorted(sorted(live.tolist(), key=ids.__getitem__), key=neg.__getitem__)
    table = pa.table([pa.array([neg[k] for k in order], pa.float64()), pa.array([ids[k] for k in order], pa.string()),
                      pa.array(np.asarray(order, dtype=np.int32))], schema=ORDER_SCHEMA)
    with atomic_path(at(base, ".order.arrow")) as tmp, pa.OSFile(str(tmp), "wb") as sink:
        with pa.ipc.new_file(sink, ORDER_SCHEMA) as writer:      # batches the merge reads one at a time
            writer.write_table(table, max_chunksize=ORDER_BATCH)


def save_shingles(base: Path, hashes: np.ndarray, offsets: np.ndarray) -> None:
    """A shard's shingle hashes as its signatures were made of them (uint32, repeats kept) and each row's offset
    into them: verification and the audit read the few rows they need instead of each needed shard's texts
    (a whole text column through Parquet, then the folds and the hashing again)."""
    save_npy(at(base, ".shingles.npy"), hashes)
    save_npy(at(base, ".shingles.off.npy"), offsets)


def shingle_runs(base: Path, rows: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The stored shingle hashes of the given rows of one shard, back to back, and their offsets [len(rows) + 1]
    (memory-mapped: only those rows are read)."""
    offsets = np.load(at(base, ".shingles.off.npy"), mmap_mode="r")
    starts, stops = np.asarray(offsets[rows]), np.asarray(offsets[rows + 1])
    return hashloops.gather_runs(np.asarray(np.load(at(base, ".shingles.npy"), mmap_mode="r")), starts, stops)


def row_columns(rows: list[dict]) -> tuple[list[str], dict[str, list]]:
    """(ids, columns) of work rows given as dicts (tests, benchmarks), as `write_shard_inputs` takes them."""
    return [r["id"] for r in rows], {k: [r[k] for r in rows] for k in ("reason", "quality", "exact_key")}


def save_buckets(base: Path, kind: str, entries: np.ndarray, bucket: np.ndarray, buckets: int) -> None:
    """`entries` grouped by their `bucket` (stable: each bucket keeps their order) as `<base>.<kind>.npy`, with
    offsets [buckets + 1] as `<base>.<kind>.off.npy`, so bucket k's task reads one slice (`bucket_slice`)."""
    if buckets > 1:     # (at most 65,536 buckets: as uint16, numpy's stable sort is a radix sort, ~10x faster)
        order = np.argsort(bucket.astype(np.uint16) if buckets <= 1 << 16 else bucket, kind="stable")
        entries, bucket = entries[order], bucket[order]
    offsets = np.searchsorted(bucket, np.arange(buckets + 1, dtype=np.uint64))
    save_npy(at(base, f".{kind}.npy"), entries)
    save_npy(at(base, f".{kind}.off.npy"), offsets.astype(np.int64))


def bucket_slice(base: Path, bucket: int, kind: str = "bands") -> np.ndarray:
    """Bucket `bucket`'s entries of one shard (`save_buckets`'s `kind`: band keys, or repeated lines' hashes),
    read through a memory map: only that slice is paged in."""
    offsets = np.load(at(base, f".{kind}.off.npy"))
    return np.load(at(base, f".{kind}.npy"), mmap_mode="r")[offsets[bucket]: offsets[bucket + 1]]


def rank_runs(bases: Sequence[Path], offsets: np.ndarray, total: int) -> np.ndarray:
    """int64 [total]: each kept row's global rank in best-first order (−quality, then id), −1 for rows the
    filters dropped. A merge of the shards' sorted runs a batch (ORDER_BATCH rows) per run at a time, as
    `merge_sorted` does: each round ranks, with one Arrow sort, the rows no unread row can precede."""
    rank = np.full(total, -1, dtype=np.int64)
    readers = [pa.ipc.open_file(pa.memory_map(str(at(b, ".order.arrow")))) for b in bases]
    if any(np.isnan(r.get_batch(k).column(0).to_numpy()).any() for r in readers for k in range(r.num_record_batches)):
        return _heap_ranks(readers, offsets, rank)            # NaN has no order: keep the heap merge's own
    read, heads, done = [0] * len(readers), [None] * len(readers), 0
    while True:
        for s, reader in enumerate(readers):                   # an exhausted head takes its run's next batch
            if (heads[s] is None or not len(heads[s])) and read[s] < reader.num_record_batches:
                heads[s] = _global_rows(reader.get_batch(read[s]), offsets[s])
                read[s] += 1
        live = [s for s in range(len(readers)) if heads[s] is not None and len(heads[s])]
        if not live:
            return rank
        # rows ≤ the smallest last row of the heads whose run goes on are safe to rank (as Python tuples order)
        ends = [_row_key(heads[s], len(heads[s]) - 1) for s in live if read[s] < readers[s].num_record_batches]
        bound = min(ends) if ends else None
        parts = []
        for s in live:
            take = len(heads[s]) if bound is None else _at_most(heads[s], bound)
            parts.append(heads[s].slice(0, take))
            heads[s] = heads[s].slice(take)
        table = pa.Table.from_batches(parts)
        order = pc.sort_indices(table, sort_keys=[(name, "ascending") for name in ORDER_SCHEMA.names])
        rows = table.column("row").take(order).to_numpy()
        rank[rows] = np.arange(done, done + len(rows))
        done += len(rows)


def _global_rows(batch: pa.RecordBatch, offset: int) -> pa.RecordBatch:
    """An order batch with its rows as global row ids (int64)."""
    rows = pa.array(batch.column(2).to_numpy().astype(np.int64) + int(offset))
    return pa.RecordBatch.from_arrays([batch.column(0), batch.column(1), rows], names=ORDER_SCHEMA.names)


def _row_key(batch: pa.RecordBatch, k: int) -> tuple[float, str, int]:
    return batch.column(0)[k].as_py(), batch.column(1)[k].as_py(), batch.column(2)[k].as_py()


def _at_most(batch: pa.RecordBatch, bound: tuple[float, str, int]) -> int:
    """How many leading rows of a sorted batch are ≤ `bound` in (−quality, id, row) order."""
    q, ids, rows = batch.column(0).to_numpy(), batch.column(1), batch.column(2).to_numpy()
    same_q = q == bound[0]
    id_lt = pc.less(ids, bound[1]).to_numpy(zero_copy_only=False)
    id_eq = pc.equal(ids, bound[1]).to_numpy(zero_copy_only=False)
    return int(np.sum((q < bound[0]) | (same_q & (id_lt | (id_eq & (rows <= bound[2]))))))


def _heap_ranks(readers: list, offsets: np.ndarray, rank: np.ndarray) -> np.ndarray:
    """`rank_runs` by a heap merge of Python tuples (−quality, id, row), whatever order NaN gets there."""
    def run(s: int) -> Iterator[tuple[float, str, int]]:
        for k in range(readers[s].num_record_batches):
            b = readers[s].get_batch(k)
            q, ids, rows = b.column(0).to_pylist(), b.column(1).to_pylist(), b.column(2).to_numpy()
            yield from zip(q, ids, (rows + offsets[s]).tolist())

    # Equal (−quality, id) across shards fall to the row, which grows with the shard index: the order a stable
    # merge on (−quality, id) gives.
    for r, (_, _, g) in enumerate(heapq.merge(*(run(s) for s in range(len(readers))))):
        rank[g] = r
    return rank


def merge_sorted(paths: Sequence[Path], key: str | None, chunk: int) -> Iterator[np.ndarray]:
    """The rows of several .npy files, each sorted by `key` (a field; None: the values), in one sorted stream
    of chunks, at most `chunk` rows per file in memory. When no file repeats a key, all rows with one key value
    are in the same chunk (so duplicates across files can be dropped chunk by chunk). Ties keep file order."""
    runs = [np.load(p, mmap_mode="r") for p in paths]
    at = [0] * len(runs)
    of = (lambda a: a[key]) if key else (lambda a: a)
    while True:
        heads = [(r, np.asarray(run[at[r]: at[r] + chunk])) for r, run in enumerate(runs) if at[r] < len(run)]
        if not heads:
            return
        # rows ≤ the smallest last key of the chunks that do not reach their run's end are safe to emit
        open_ends = [of(h)[-1] for r, h in heads if at[r] + len(h) < len(runs[r])]
        bound = min(open_ends) if open_ends else None
        parts = []
        for r, h in heads:
            take = len(h) if bound is None else int(np.searchsorted(of(h), bound, side="right"))
            parts.append(h[:take])
            at[r] += take
        out = np.concatenate(parts)
        yield out[np.argsort(of(out), kind="stable")]
