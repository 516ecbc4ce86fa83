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

import contextlib
import json
import logging
import numbers
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
    """Write the shards and index of one split from documents in memory; return its layout entry."""
    with PackWriter(out, split, seq_len, eos_id, dtype, shard_sequences) as writer:
        for d, i, s in zip(docs, doc_ids, sources):
            writer.add(d, i, s)
    return writer.layout


class PackWriter:
    """Packs documents fed one at a time (`add`) into a split's shards and index, shard by shard: it holds at
    most one shard's tokens (plus the document that overflows it) and the names of that shard's documents, so
    memory is bounded by `shard_sequences`, not by the split. Use as a context manager; `layout` is the split's
    layout entry once it closes."""

    def __init__(self, out: Path, split: str, seq_len: int, eos_id: int, dtype: str, shard_sequences: int):
        # A shard holds n*L + 1 tokens and the next starts L*n further on: with L <= 0 (a checkpoint's
        # max_position_embeddings of -5 once reached here) or n < 1, `add` wrote empty shards forever. L = 1
        # leaves no context to learn from (one input token per sequence).
        for what, value, least in (("seq_len", seq_len, 2), ("shard_sequences", shard_sequences, 1)):
            if isinstance(value, bool) or not isinstance(value, numbers.Integral) or value < least:
                raise ValueError(f"pack {split}: {what} must be an integer of at least {least}, got {value!r:.40}")
        self.out, self.split, self.L, self.dtype = Path(out), split, seq_len, dtype
        self.per_shard = shard_sequences
        self.eos = np.asarray([eos_id], dtype=dtype)
        self.parts: list[np.ndarray] = []  # pending tokens, from stream position `base` on
        self.pending = 0
        self.base = 0
        self.docs: list[tuple[int, int, str, str]] = []  # (start, end, id, source) of documents past `base`
        self.shards: list[dict[str, Any]] = []
        self.documents = 0
        self.layout: dict[str, Any] = {}
        self._index = contextlib.ExitStack()
        self._writer: pq.ParquetWriter | None = None

    def __enter__(self) -> "PackWriter":
        tmp = self._index.enter_context(atomic_path(self.out / f"{self.split}.idx.parquet"))
        self._writer = pq.ParquetWriter(tmp, INDEX_SCHEMA, compression="zstd")
        return self

    def add(self, tokens: np.ndarray, doc_id: str, source: str) -> None:
        """Append one document (its end token is added here)."""
        start = self.base + self.pending
        n = len(tokens) + 1
        self.parts += [tokens.astype(self.dtype, copy=False), self.eos]
        self.pending += n
        self.docs.append((start, start + n, doc_id, source))
        self.documents += 1
        while self.pending >= self.per_shard * self.L + 1:
            self._flush(self.per_shard)

    def _flush(self, n_seq: int) -> None:
        """Write the next shard: `n_seq` sequences from the pending tokens (n_seq * L + 1 of them)."""
        L, k = self.L, len(self.shards)
        stream = np.concatenate(self.parts) if len(self.parts) > 1 else self.parts[0]
        tokens = stream[: n_seq * L + 1]
        with atomic_path(self.out / shard_name(self.split, k)) as tmp:
            tokens.tofile(tmp)
        self.shards.append({"file": shard_name(self.split, k), "sequences": n_seq, "tokens": int(tokens.size)})
        starts = np.fromiter((d[0] for d in self.docs), np.int64, len(self.docs))
        ends = np.fromiter((d[1] for d in self.docs), np.int64, len(self.docs))
        first_seq = k * self.per_shard
        self._writer.write_table(_index_table(starts, ends, [d[2] for d in self.docs], [d[3] for d in self.docs],
                                              first_seq, n_seq, L, self.per_shard))
        # The next shard starts at its first window, sharing this shard's last token.
        self.parts, self.pending = [stream[n_seq * L:]], self.pending - n_seq * L
        self.base += n_seq * L
        self.docs = [d for d in self.docs if d[1] > self.base]

    def __exit__(self, exc_type, exc, tb) -> None:
        if exc_type is None:
            total = self.base + self.pending
            n_seq = max(0, (total - 1) // self.L)
            if n_seq > len(self.shards) * self.per_shard:
                self._flush(n_seq - len(self.shards) * self.per_shard)
            if not self.shards:  # an empty split still has an index (no rows)
                self._writer.write_table(INDEX_SCHEMA.empty_table())
            self._finish(total, n_seq)
        self._writer.close()
        self._index.__exit__(exc_type, exc, tb)

    def _finish(self, total: int, n_seq: int) -> None:
        L, split = self.L, self.split
        if not n_seq and total:
            log.warning("pack %s: %d tokens do not fill one sequence of %d+1; the split is empty", split, total, L)
        if n_seq:
            log.info("pack %s: %d sequences of %d+1 tokens in %d shard(s)", split, n_seq, L, len(self.shards))
        self.layout = {"sequences": n_seq, "documents_packed": self.documents, "stream_tokens": total,
                       "dropped_tail_tokens": total - (n_seq * L + 1) if n_seq else total, "shards": self.shards,
                       "index": f"{split}.idx.parquet"}


def _index_table(starts: np.ndarray, ends: np.ndarray, doc_ids: Sequence[str], sources: Sequence[str],
                 first_seq: int, n_seq: int, L: int, shard_sequences: int) -> pa.Table:
    """One row per window [i*L, i*L + L + 1) for i in first_seq.. (stream positions): which of the given
    documents overlap it, found by binary search."""
    seq = np.arange(first_seq, first_seq + n_seq, dtype=np.int64)  # [n_seq]
    win_start = seq * L
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
        pa.array(seq),
        pa.array((seq // shard_sequences).astype(np.int32)),
        pa.array((seq % shard_sequences).astype(np.int64) * L),
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
