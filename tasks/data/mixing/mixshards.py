"""The mix stage's per-shard work (run on `run.executor`) and the scratch token files it leaves for packing.

A clean shard's documents are its rows with non-empty text, numbered 0.. in row order; every function here
reads them the same way, so (shard, document number) names a document across passes.

- `scan_shard`: per document its source, character count and the two id hashes the plan needs first.
- `sample_texts`: the tokenizer's training text taken from one shard (the plan says which documents, how much).
- `tokenize_shard`: every document's token ids, written to `<scratch>/<k>.tokens.bin` (raw ids, no end
  token) with `<k>.ids.bin` (the ids, UTF-8, concatenated); returns the token and id-byte counts, from which the
  stage derives the offsets. `TokenStore` reads a document's tokens or id back with one positioned read.

Each function is module-level (it travels to a worker by reference) and writes only its own shard's files,
atomically, so nothing depends on the executor or on the order shards finish in.
"""

from __future__ import annotations

import hashlib
import os
from collections import OrderedDict
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow.compute as pc
import pyarrow.parquet as pq
from tokenizers import Tokenizer

from tasks.core.files import atomic_path
from tasks.data.mixing.mixplan import hash_keys
from tasks.data.mixing.tokenizer import document_encoder, encode_documents, one_thread

OPEN_FILES = 64  # scratch files kept open while packing (documents come in a shuffled order across shards)


def shard_documents(path: str, columns: list[str]) -> dict[str, list[Any]]:
    """`columns` of the rows of one clean shard whose text is non-empty, as Python lists."""
    table = pq.read_table(path, columns=sorted({"text", *columns}))
    text = table.column("text")
    keep = pc.fill_null(pc.greater(pc.utf8_length(text), 0), False)
    table = table.filter(keep)
    return {c: table.column(c).to_pylist() for c in columns}


def scan_shard(path: str) -> dict[str, Any]:
    """Per document: source, characters, and the id hashes of the val split and the tokenizer sample."""
    table = pq.read_table(path, columns=["id", "text", "source"])
    chars = pc.fill_null(pc.utf8_length(table.column("text")), 0)
    table, chars = table.filter(pc.greater(chars, 0)), chars.filter(pc.greater(chars, 0))
    ids = table.column("id").to_pylist()
    sources = table.column("source").to_pylist()
    names = sorted(set(sources))
    code = {s: k for k, s in enumerate(names)}
    return {"sources": names, "source": np.fromiter((code[s] for s in sources), np.int32, len(sources)),
            "chars": chars.to_numpy().astype(np.int64), "val_key": hash_keys(ids, "val"),
            "tok_key": hash_keys(ids, "tokenizer")}


def sample_texts(path: str, docs: np.ndarray, limits: np.ndarray) -> list[str]:
    """The first `limits[i]` characters of document `docs[i]` of the shard, in the given order."""
    texts = shard_documents(path, ["text"])["text"]
    return [texts[int(d)][: int(n)] for d, n in zip(docs, limits)]


_ENCODER: list[Any] = [None, None]  # (sha256 of tokenizer.json, its document encoder): the last one used here


def cached_encoder(path: Path) -> Any:
    """The document encoder of the tokenizer file at `path`, built once per worker process and content: a worker
    tokenizes many shards, and each new tokenizers object leaks ~1 MB (tokenizers 0.23)."""
    text = path.read_bytes()
    digest = hashlib.sha256(text).hexdigest()
    if _ENCODER[0] != digest:
        _ENCODER[:] = [digest, document_encoder(Tokenizer.from_str(text.decode("utf-8")))]
    return _ENCODER[1]


def tokenize_shard(path: str, tokenizer: str, dtype: str, scratch: str, k: int) -> dict[str, np.ndarray]:
    """Tokenize every document of shard `k` into the scratch folder; return per-document token and id-byte
    counts ([n] int64 each). On one core: parallelism comes from the executor's workers (`one_thread`)."""
    docs = shard_documents(path, ["id", "text"])
    enc = cached_encoder(Path(tokenizer))
    with one_thread():
        arrays = encode_documents(enc, docs["text"], dtype, Path(path).name, encoder=enc)
    ids = [i.encode("utf-8") for i in docs["id"]]
    with atomic_path(Path(scratch) / f"{k}.tokens.bin") as tmp:
        with open(tmp, "wb") as fh:
            for a in arrays:
                fh.write(a.astype(dtype, copy=False).tobytes())
    with atomic_path(Path(scratch) / f"{k}.ids.bin") as tmp:
        tmp.write_bytes(b"".join(ids))
    return {"tokens": np.fromiter(map(len, arrays), np.int64, len(arrays)),
            "id_bytes": np.fromiter(map(len, ids), np.int64, len(ids))}


class TokenStore:
    """Reads documents back from the scratch files by (shard, byte offset, length): one `pread` each, through a
    small set of open files, so memory stays one document however the reads jump between shards."""

    def __init__(self, scratch: Path, dtype: str):
        self.scratch, self.dtype = Path(scratch), np.dtype(dtype)
        self._open: OrderedDict[tuple[int, str], int] = OrderedDict()

    def _fd(self, k: int, kind: str) -> int:
        key = (k, kind)
        if key in self._open:
            self._open.move_to_end(key)
            return self._open[key]
        if len(self._open) >= OPEN_FILES:
            os.close(self._open.popitem(last=False)[1])
        self._open[key] = os.open(self.scratch / f"{k}.{kind}.bin", os.O_RDONLY)
        return self._open[key]

    def tokens(self, k: int, start: int, count: int) -> np.ndarray:
        """Tokens [start, start + count) of shard k's token file ([count] of the store's dtype)."""
        size = self.dtype.itemsize
        raw = os.pread(self._fd(k, "tokens"), count * size, start * size)
        if len(raw) != count * size:
            raise OSError(f"{self.scratch / f'{k}.tokens.bin'}: short read at token {start}")
        return np.frombuffer(raw, dtype=self.dtype)

    def doc_id(self, k: int, start: int, count: int) -> str:
        return os.pread(self._fd(k, "ids"), count, start).decode("utf-8")

    def close(self) -> None:
        while self._open:
            os.close(self._open.popitem()[1])
