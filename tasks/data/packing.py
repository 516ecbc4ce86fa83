"""Pack documents into fixed-length token sequences on disk, and read them back with np.memmap.

Files per split (`train`, `val`) in the output folder:
  <split>-NNNNN.bin      raw little-endian token ids (uint16/uint32, see packing.json), no header
  <split>.idx.parquet    one row per sequence: seq, shard, offset, doc_ids, sources, starts
  packing.json           shared layout: seq_len, window, dtype, special token ids, shards per split

Layout of a sequence (L = seq_len): a split's documents, each followed by the end-of-document token, form one
stream; sequence i is stream[i*L : i*L + L + 1]. It holds L + 1 tokens, so inputs = seq[:-1] and
targets = seq[1:] (nanoGPT style), and consecutive sequences share one token: every token after the first
is a target exactly once and nothing is lost at the joins. A shard holds whole sequences: its n sequences'
tokens plus the one shared token at its end (n*L + 1 tokens), sequence j of the shard at offset j*L. The
tail that does not fill a sequence is dropped and counted.

The index says what a sequence contains: `doc_ids` and `sources` list every document that has tokens in
the window (a repeated document appears once per copy), and `starts` the window position (0..L) where each
one's tokens begin, so a trainer can report loss per source and name the documents of a bad batch.
"""

from __future__ import annotations

import json
import logging
from pathlib import Path
from typing import Any, Sequence

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from tasks.core.files import atomic_path, write_json_atomic

log = logging.getLogger("forgeline.mix")
LAYOUT_FILE = "packing.json"
LAYOUT_FORMAT = "forgeline-packed-v1"

INDEX_SCHEMA = pa.schema([
    ("seq", pa.int64()),                 # sequence number within the split
    ("shard", pa.int32()),               # which <split>-NNNNN.bin holds it
    ("offset", pa.int64()),              # first token of the sequence inside that shard (in tokens)
    ("doc_ids", pa.list_(pa.string())),  # documents with tokens in the window, in stream order
    ("sources", pa.list_(pa.string())),  # their sources (parallel to doc_ids)
    ("starts", pa.list_(pa.int32())),    # window position where each document's tokens begin (first is 0)
])


def shard_name(split: str, k: int) -> str:
    return f"{split}-{k:05d}.bin"


def pack_split(docs: Sequence[np.ndarray], doc_ids: Sequence[str], sources: Sequence[str], out: Path,
               split: str, seq_len: int, eos_id: int, dtype: str, shard_sequences: int) -> dict[str, Any]:
    """Write the shards and index of one split; return its layout entry (files, sequences, tokens)."""
    L = seq_len
    lengths = np.fromiter((len(d) + 1 for d in docs), dtype=np.int64, count=len(docs))  # [n_docs] incl. eos
    ends = np.cumsum(lengths)                 # [n_docs] exclusive end of each document in the stream
    starts = ends - lengths                   # [n_docs] first token of each document
    total = int(ends[-1]) if len(docs) else 0
    n_seq = max(0, (total - 1) // L)          # full windows of L + 1 tokens, sharing one token at the joins

    eos = np.asarray([eos_id], dtype=dtype)
    stream = np.concatenate([part for d in docs for part in (d.astype(dtype, copy=False), eos)]) \
        if len(docs) else np.zeros(0, dtype=dtype)  # [total]

    shards = []
    for k, s0 in enumerate(range(0, n_seq, shard_sequences)):
        s1 = min(n_seq, s0 + shard_sequences)
        tokens = stream[s0 * L: s1 * L + 1]   # [(s1 - s0) * L + 1]
        with atomic_path(out / shard_name(split, k)) as tmp:
            tokens.tofile(tmp)
        shards.append({"file": shard_name(split, k), "sequences": s1 - s0, "tokens": int(tokens.size)})
    if not n_seq and total:
        log.warning("pack %s: %d tokens do not fill one sequence of %d+1; the split is empty", split, total, L)
    if n_seq:
        log.info("pack %s: %d sequences of %d+1 tokens in %d shard(s)", split, n_seq, L, len(shards))

    index = _index_table(starts, ends, doc_ids, sources, n_seq, L, shard_sequences)
    with atomic_path(out / f"{split}.idx.parquet") as tmp:
        pq.write_table(index, tmp, compression="zstd")
    return {"sequences": n_seq, "documents_packed": len(docs), "stream_tokens": total,
            "dropped_tail_tokens": total - (n_seq * L + 1) if n_seq else total, "shards": shards,
            "index": f"{split}.idx.parquet"}


def _index_table(starts: np.ndarray, ends: np.ndarray, doc_ids: Sequence[str], sources: Sequence[str],
                 n_seq: int, L: int, shard_sequences: int) -> pa.Table:
    """One row per window [i*L, i*L + L + 1): which documents overlap it, found by binary search."""
    win_start = np.arange(n_seq, dtype=np.int64) * L                # [n_seq]
    first = np.searchsorted(ends, win_start, side="right")           # first doc ending after the window starts
    last = np.searchsorted(starts, win_start + L + 1, side="left") - 1  # last doc starting before it ends
    count = last - first + 1                                         # [n_seq] ≥ 1
    offsets = np.zeros(n_seq + 1, dtype=np.int64)
    np.cumsum(count, out=offsets[1:])                                # list offsets into the flat columns
    # Flatten (sequence, k-th doc) pairs: doc index = first[seq] + k.
    seq_of = np.repeat(np.arange(n_seq), count)                      # [n_pairs]
    flat = first[seq_of] + (np.arange(offsets[-1]) - offsets[seq_of])
    begin = np.maximum(starts[flat] - win_start[seq_of], 0).astype(np.int32)  # [n_pairs] position in window
    list_offsets = pa.array(offsets.astype(np.int32))

    def listed(values: pa.Array) -> pa.Array:
        return pa.ListArray.from_arrays(list_offsets, values)

    return pa.Table.from_arrays([
        pa.array(np.arange(n_seq, dtype=np.int64)),
        pa.array((np.arange(n_seq) // shard_sequences).astype(np.int32)),
        pa.array((np.arange(n_seq) % shard_sequences).astype(np.int64) * L),
        listed(pa.array(list(doc_ids), pa.string()).take(pa.array(flat))),
        listed(pa.array(list(sources), pa.string()).take(pa.array(flat))),
        listed(pa.array(begin)),
    ], schema=INDEX_SCHEMA)


def write_layout(out: Path, seq_len: int, dtype: str, vocab_size: int, eos_id: int, special_ids: dict[str, int],
                 splits: dict[str, dict[str, Any]]) -> None:
    write_json_atomic(out / LAYOUT_FILE, {
        "format": LAYOUT_FORMAT, "seq_len": seq_len, "window": seq_len + 1, "dtype": np.dtype(dtype).str,
        "vocab_size": vocab_size, "special_ids": special_ids, "splits": splits,
        "eos_id": eos_id, "pad_id": special_ids.get("<|pad|>"),
    })


class PackedDataset:
    """Sequences of one split, read through np.memmap (nothing is loaded until indexed).

    `ds[i]` is a read-only view of seq_len + 1 token ids (inputs = [:-1], targets = [1:]); convert with
    `.astype(np.int64)` before handing it to torch. `docs(i)`, `sources(i)`, `spans(i)` say what is in it.
    """

    def __init__(self, folder: str | Path, split: str = "train"):
        self.folder = Path(folder)
        layout = json.loads((self.folder / LAYOUT_FILE).read_text())
        if layout.get("format") != LAYOUT_FORMAT:
            raise ValueError(f"{self.folder / LAYOUT_FILE}: unknown format {layout.get('format')!r}")
        if split not in layout["splits"]:
            raise KeyError(f"no split {split!r}; have {', '.join(layout['splits'])}")
        self.split, self.seq_len, self.window = split, layout["seq_len"], layout["window"]
        self.dtype = np.dtype(layout["dtype"])
        self.special_ids: dict[str, int] = layout["special_ids"]
        self.files = [self.folder / s["file"] for s in layout["splits"][split]["shards"]]
        self.index = pq.read_table(self.folder / layout["splits"][split]["index"])
        self._shard = self.index.column("shard").to_numpy()    # [n_seq]
        self._offset = self.index.column("offset").to_numpy()  # [n_seq]
        self._maps: dict[int, np.memmap] = {}

    def __len__(self) -> int:
        return len(self._shard)

    def _pos(self, i: int) -> int:
        return range(len(self))[i]  # negative indexes work; out of range raises IndexError

    def __getitem__(self, i: int) -> np.ndarray:
        i = self._pos(i)
        k = int(self._shard[i])
        if k not in self._maps:
            self._maps[k] = np.memmap(self.files[k], dtype=self.dtype, mode="r")
        off = int(self._offset[i])
        return self._maps[k][off: off + self.window]  # [seq_len + 1]

    def docs(self, i: int) -> list[str]:
        return self.index.column("doc_ids")[self._pos(i)].as_py()

    def sources(self, i: int) -> list[str]:
        return self.index.column("sources")[self._pos(i)].as_py()

    def spans(self, i: int) -> list[tuple[int, int, str, str]]:
        """(start, end, doc_id, source) per document piece; positions index the window of seq_len + 1."""
        row = self._pos(i)
        begins = self.index.column("starts")[row].as_py()
        ends = begins[1:] + [self.window]
        return list(zip(begins, ends, self.docs(row), self.sources(row)))
