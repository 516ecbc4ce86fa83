"""Streamed mix: the shard-by-shard packer against a brute-force stream, the document walk against the
in-memory rule it replaced, and outputs that do not depend on the executor, its workers or the shard layout."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pyarrow.parquet as pq
import pytest

from specs.run import ExecutorSpec
from tasks.core.files import atomic_path
from tasks.data.mixing.mixplan import hash_keys, hash_unit, take_documents
from tasks.data.mixing.packing import PackedDataset, pack_split, write_layout
from tasks.data.records import RECORD_SCHEMA, write_table
from tests.helpers.mix import run_mix, write_corpus

WEIGHTS = {"prose": 0.5, "code": 0.3, "tiny": 0.2}


def brute_windows(docs: list[np.ndarray], L: int, eos: int) -> tuple[np.ndarray, list[list[tuple[int, int]]]]:
    """The whole stream, and per window of L + 1 tokens the (document, start in window) pairs overlapping it."""
    stream = np.concatenate([np.append(d, eos) for d in docs]).astype("<u2")
    owner = np.concatenate([np.full(len(d) + 1, k) for k, d in enumerate(docs)])
    windows = []
    for i in range((len(stream) - 1) // L):
        seen: dict[int, int] = {}
        for pos in range(i * L, i * L + L + 1):
            seen.setdefault(int(owner[pos]), pos - i * L)
        windows.append(list(seen.items()))
    return stream, windows


@pytest.mark.parametrize("lengths", [
    [5, 1, 40, 3, 3, 0, 17, 2] * 6,  # short documents, one empty
    [3, 200, 4, 1, 90],              # a document spanning several shards
    [7, 8],                          # 17 tokens: exactly 2 windows of 8 + 1 (one shard, nothing dropped)
])
def test_streamed_packer_matches_the_whole_stream(tmp_path, lengths):
    rng = np.random.default_rng(len(lengths))
    docs = [rng.integers(2, 500, size=n).astype("<u2") for n in lengths]
    ids, sources = [f"d{k}" for k in range(len(docs))], [f"s{k % 3}" for k in range(len(docs))]
    L, per_shard = 8, 3
    entry = pack_split(docs, ids, sources, tmp_path, "train", L, 0, "<u2", per_shard)
    write_layout(tmp_path, L, "<u2", 512, 0, {"<|endoftext|>": 0}, {"train": entry})
    stream, windows = brute_windows(docs, L, 0)
    n_seq = len(windows)
    assert entry["sequences"] == n_seq and entry["stream_tokens"] == len(stream)
    assert entry["dropped_tail_tokens"] == len(stream) - (n_seq * L + 1)
    assert [s["sequences"] for s in entry["shards"]] == [min(per_shard, n_seq - k) for k in range(0, n_seq, per_shard)]
    for k, shard in enumerate(entry["shards"]):  # shard k holds its windows' tokens and the shared last one
        first = k * per_shard
        want = stream[first * L: (first + shard["sequences"]) * L + 1]
        assert np.array_equal(np.fromfile(tmp_path / shard["file"], dtype="<u2"), want)
    ds = PackedDataset(tmp_path, "train")
    assert len(ds) == n_seq
    for i, pairs in enumerate(windows):
        assert np.array_equal(ds[i], stream[i * L: i * L + L + 1])
        assert [(b, d, s) for b, _, d, s in ds.spans(i)] == [(pos, ids[k], sources[k]) for k, pos in pairs]


def test_empty_and_tail_only_splits(tmp_path):
    for split, docs in (("none", []), ("short", [np.arange(2, 5, dtype="<u2")])):
        entry = pack_split(docs, [f"d{k}" for k in range(len(docs))], ["s"] * len(docs), tmp_path, split, 8, 0,
                           "<u2", 4)
        assert entry["sequences"] == 0 and entry["shards"] == []
        assert entry["dropped_tail_tokens"] == entry["stream_tokens"] == sum(len(d) + 1 for d in docs)
        assert pq.read_table(tmp_path / f"{split}.idx.parquet").num_rows == 0


def walk_in_memory(ids, lengths, target, cap, seed, source):
    """The pre-streaming rule, verbatim: per epoch a hash order, stop at the boundary nearest the target."""
    taken, total, epoch = [], 0, 0
    while total < target and ids:
        order = sorted(range(len(ids)), key=lambda j: (hash_unit("epoch", seed, source, epoch, ids[j]), j))
        for j in order:
            if total + lengths[j] > cap or total + lengths[j] / 2 >= target:
                return taken
            taken.append((j, epoch))
            total += lengths[j]
        epoch += 1
    return taken


@pytest.mark.parametrize("case", range(12))
def test_document_walk_matches_the_in_memory_rule(case):
    rng = np.random.default_rng(case)
    n = int(rng.integers(1, 60))
    ids = [f"x/{rng.integers(1e9)}" for _ in range(n)]
    lengths = rng.integers(1, 300, size=n)
    avail = int(lengths.sum())
    target = float(avail * rng.uniform(0.05, 5.0))
    cap = float(avail * rng.choice([1.0, 2.5, 4.0]))
    for need_order in (True, False):
        got = take_documents(lengths, lambda e: hash_keys(ids, "epoch", 3, "x", e), target, cap, need_order)
        want = walk_in_memory(ids, lengths.tolist(), target, cap, 3, "x")
        flat = [(int(j), e) for pos, e in got for j in pos]
        if need_order:
            assert flat == want
        else:  # whole epochs may come in index order: the same copies, perhaps in another order
            assert sorted(flat) == sorted(want)


def reshard(root: Path, parts: int) -> None:
    """Rewrite the clean shards as `parts` mixed-source files (the same records, another layout)."""
    folder = root / "data" / "clean" / "shards"
    rows = [r for f in sorted(folder.glob("*.parquet")) for r in pq.read_table(f).to_pylist()]
    for f in folder.glob("*.parquet"):
        f.unlink()
    rng = np.random.default_rng(parts)
    rows = [rows[i] for i in rng.permutation(len(rows))]
    for k in range(parts):
        with atomic_path(folder / f"part-{k:05d}.parquet") as tmp:
            write_table(rows[k::parts], RECORD_SCHEMA, tmp)


def mix_outputs(root: Path) -> dict[str, bytes]:
    out = root / "data" / "mix"
    return {p.name: p.read_bytes() for p in sorted(out.iterdir())}


def test_outputs_do_not_depend_on_executor_workers_or_shard_layout(tmp_path):
    corpus = {"prose": (150, 300), "code": (120, 200), "tiny": (12, 100)}
    spec = dict(token_budget=30_000, weights=WEIGHTS, shard_sequences=60)
    runs = {}
    for name, parts, executor in (("one", 5, ExecutorSpec(workers=1)), ("pool", 5, ExecutorSpec(workers=2)),
                                  ("layout", 2, ExecutorSpec(workers=1))):
        root = tmp_path / name
        write_corpus(root, corpus)
        reshard(root, parts)
        run_mix(root, executor=executor, **spec)
        runs[name] = mix_outputs(root)
        assert not [p for p in (root / "data" / "mix").iterdir() if p.name.startswith(".")]  # scratch removed
    assert len([f for f in runs["one"] if f.startswith("train-")]) > 1  # several packed shards
    assert runs["one"] == runs["pool"] == runs["layout"]


def test_dask_local_cluster_gives_the_same_bytes(tmp_path):
    pytest.importorskip("dask.distributed")
    runs = []
    for name, executor in (("local", ExecutorSpec(workers=1)), ("dask", ExecutorSpec(kind="dask", workers=2))):
        root = tmp_path / name
        write_corpus(root, {"prose": (60, 200), "code": (50, 150)})
        reshard(root, 3)
        run_mix(root, executor=executor, token_budget=10_000)
        runs.append(mix_outputs(root))
    assert runs[0] == runs[1]


def test_duplicate_ids_across_shards_are_refused(tmp_path):
    root = tmp_path / "dup"
    write_corpus(root, {"prose": (30, 50), "code": (30, 50)})
    folder = root / "data" / "clean" / "shards"
    row = pq.read_table(folder / "prose-00000.parquet").to_pylist()[4]
    with atomic_path(folder / "zzz-00000.parquet") as tmp:  # the same id again, under another source and text
        write_table([{**row, "source": "code", "text": "other text"}], RECORD_SCHEMA, tmp)
    with pytest.raises(ValueError, match=f"duplicate document ids.*{row['id']}"):
        run_mix(root)
    assert not [p for p in (root / "data" / "mix").iterdir() if p.name.startswith(".")]  # scratch removed


def test_report_counts_match_the_packed_index(tmp_path):
    root = tmp_path / "count"
    write_corpus(root, {"prose": (80, 200), "code": (60, 150), "tiny": (12, 100)})
    reshard(root, 4)
    _, report = run_mix(root, token_budget=20_000, weights=WEIGHTS, shard_sequences=40)
    layout = json.loads((root / "data" / "mix" / "packing.json").read_text())
    index = pq.read_table(root / "data" / "mix" / "train.idx.parquet")
    assert index.column("seq").to_pylist() == list(range(layout["splits"]["train"]["sequences"]))
    total = sum(s["tokens"] for s in layout["splits"]["train"]["shards"])
    n_shards = len(layout["splits"]["train"]["shards"])
    assert total == report["splits"]["train"]["sequences"] * 64 + n_shards  # each shard: n*L + 1 tokens
    assert report["realized_tokens"] == report["splits"]["train"]["stream_tokens"]
