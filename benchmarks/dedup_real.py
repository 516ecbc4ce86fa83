"""Near dedup on realistic text: clean's real path, the in-memory reference and batched datasketch, one core each.

    python benchmarks/dedup_real.py                        # 50,000 documents, seed 0
    python benchmarks/dedup_real.py --docs 20000 --methods real
    python benchmarks/dedup_real.py --profile real         # cProfile of the real path, top costs by phase
    python benchmarks/dedup_real.py --methods real --phases  # CPU s of each step of the real path (no profiler)
    python benchmarks/dedup_real.py --median-chars 600     # shorter documents (median 600 characters)

The corpus (`tests.helpers.dedup_corpus`: windows of the embedded plays, articles, code and help texts with a
log-normal length, site templates, HTML pages, license headers, overlapping excerpts and edited copies; exact
word-5-gram truth) is built once and cached under `--cache`. Each method runs in its own process with one thread
(pyarrow's pools at 1 too) and reports documents per CPU-second, the process's peak RSS (VmHWM) and pair
precision / recall / F1 — a pair is predicted when both documents end in one keeper's group (a cluster for
datasketch), true when its exact Jaccard is ≥ 0.8; a predicted pair outside the computed truth is checked
exactly. The ceiling is the best pair F1 of two clusterings of the true pairs themselves (union-find; the
no-chain best-first decision clean makes, ranked by id as clean ranks them when no
quality score is set: ids are the zero-padded document index): what a perfect detector would score.

- `real`: clean's path as the stage runs it with its filters and PII off: `cleaning.process_shard` on each
  ingest shard of 2,000 records (read, normalize, exact key, signatures, dedup inputs, the work table
  written), then `dedup_global.deduplicate` (ranks, exact dedup, buckets, verification read back from the work
  tables, the streamed decision, the audit) with `run.executor.workers: 1` (every task in this process). The
  ingest shards are written before the clock.
- `memory`: the in-memory reference on the same texts: `normalize_text`, `exact_key`, `minhash.signatures`,
  then `cleaning.deduplicate` over one table (exact dedup, verified near dedup, the same audit).
- `datasketch`: `MinHash.bulk` over each document's word 5-grams (lowercase `\\w+`), then `MinHashLSH(0.8)`
  inserted in one session and queried; clusters are the connected candidate pairs (no verification).
"""

from __future__ import annotations

import argparse
import cProfile
import hashlib
import io
import json
import os
import pstats
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import numpy as np  # noqa: E402  (after the sys.path insert above)

from tests.helpers.synthetic_corpus import cluster_pairs, pair_scores  # noqa: E402

METHODS = ("real", "memory", "datasketch")
PER_SHARD = 2000
PHASES: dict[str, float] = {}   # CPU s by part of the real path (`time_phases`; the two phases always)
SINGLE_THREAD = {**{k: "1" for k in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS",
                                     "NUMEXPR_NUM_THREADS", "RAYON_NUM_THREADS", "NUMBA_NUM_THREADS")},
                 "TOKENIZERS_PARALLELISM": "false"}


def corpus_folder(cache: Path, docs: int, seed: int, median: int) -> Path:
    """The corpus as ingest shards + truth.json, built once per (size, seed, median length, generator source)."""
    source = (ROOT / "tests" / "helpers" / "dedup_corpus.py").read_bytes()
    folder = cache / f"corpus-{docs}-{seed}-{median}-{hashlib.sha256(source).hexdigest()[:10]}"
    if (folder / "truth.json").exists():
        return folder
    from tests.helpers import dedup_corpus
    from tasks.data.records import RECORD_SCHEMA, write_table

    t0 = time.perf_counter()
    corpus = dedup_corpus.build(docs, seed, median)
    (folder / "shards").mkdir(parents=True, exist_ok=True)
    for n, lo in enumerate(range(0, docs, PER_SHARD)):
        rows = [{"id": corpus.ids[k], "text": corpus.texts[k], "source": corpus.ids[k].split("-")[1], "lang": "en",
                 "origin": f"bench:{k}", "meta": "{}", "media": []} for k in range(lo, min(lo + PER_SHARD, docs))]
        write_table(rows, RECORD_SCHEMA, folder / "shards" / f"bench-{n:05d}.parquet")
    truth = {"pairs": [[i, j, s] for (i, j), s in sorted(corpus.pair_jaccard.items())],
             "build_s": round(time.perf_counter() - t0, 1)}
    (folder / "truth.json").write_text(json.dumps(truth))
    return folder


def read_corpus(folder: Path) -> tuple[list[str], list[str]]:
    import pyarrow.parquet as pq

    ids, texts = [], []
    for shard in sorted((folder / "shards").glob("*.parquet")):
        table = pq.read_table(shard, columns=["id", "text"])
        ids += table.column("id").to_pylist()
        texts += table.column("text").to_pylist()
    return ids, texts


def bench_spec():
    """clean's spec for the benchmark: filters and PII off, everything else (dedup, audit) at its defaults."""
    from specs.clean import CleanSpec

    return CleanSpec(filters=[], pii={"enabled": False}, quality={"enabled": False})


def run_real(folder: Path, work: Path) -> list[list[int]]:
    """Clean's phase 1 shard by shard, then its out-of-core global dedup; clusters as row-index lists."""
    from specs.run import ExecutorSpec
    from tasks.data.cleanup import cleaning
    from tasks.data.dedup import dedup_global

    spec, executor = bench_spec(), ExecutorSpec(workers=1)
    shards = sorted((folder / "shards").glob("*.parquet"))
    docs = len(shards) * PER_SHARD
    buckets = dedup_global.plan_buckets(docs, spec, executor)
    start = time.process_time()
    for s in shards:
        cleaning.process_shard(s, work / f"{s.stem}.parquet", spec, 1, ROOT, buckets)
    middle = time.process_time()
    layout = dedup_global.layout_of(work, [s.stem for s in shards])
    d = dedup_global.deduplicate(layout, spec, 1, executor)["decisions"]
    PHASES["shard phase (process_shard)"] = middle - start
    PHASES["global phase (dedup_global.deduplicate)"] = time.process_time() - middle
    return groups_of(dict(zip(d.rows.tolist(), d.keeper.tolist())))


def time_phases() -> None:
    """Count CPU seconds into PHASES around the shard phase's parts: the ingest shard's read, each step of
    `cleaning.STEP_KINDS`, the MinHash signatures inside their step, and the work table's write (the rest of
    `process_shard` is the shard phase less these)."""
    import pyarrow.parquet as pq

    from tasks.data.cleanup import cleaning, steps
    from tasks.data.dedup import minhash

    def timed(owner: object, name: str, label: str) -> None:
        inner = getattr(owner, name)

        def wrapper(*args, **kwargs):
            start = time.process_time()
            try:
                return inner(*args, **kwargs)
            finally:
                PHASES[label] = PHASES.get(label, 0.0) + time.process_time() - start
        setattr(owner, name, wrapper)

    timed(pq.ParquetFile, "read", "- read the ingest shard (Parquet)")
    for kind in cleaning.STEP_KINDS:
        timed(kind, "__call__", f"- step {kind.__name__}")
    timed(minhash, "signatures_and_shingles", "  - of which signatures and shingles")
    timed(cleaning, "write_work_table", "- write the work table (Parquet)")
    assert steps.minhash is minhash     # the step calls it through this module: the timer above is seen


def run_memory(folder: Path) -> list[list[int]]:
    """The in-memory reference: normalization, exact keys, signatures and `cleaning.deduplicate` on one table."""
    import pyarrow as pa

    from tasks.data.cleanup import cleaning

    from tasks.data.dedup import minhash
    from tasks.data.cleanup.normalize import exact_key, normalize_text

    spec = bench_spec()
    ids, raw = read_corpus(folder)
    texts = [normalize_text(t, spec.normalization) for t in raw]
    rows = pa.table({"id": ids, "text": texts, "quality": [1.0] * len(ids), "reason": pa.nulls(len(ids), pa.string()),
                     "exact_key": [exact_key(t) for t in texts]})
    sigs = minhash.signatures(texts, spec.dedup, 1)
    found = cleaning.deduplicate(rows, sigs, spec, 1)
    index = {d: k for k, d in enumerate(ids)}
    return groups_of({row: index[kept] for row, (_, kept, _) in found["reasons"].items()})


def run_datasketch(folder: Path) -> list[list[int]]:
    """Batched datasketch: `MinHash.bulk` + one `MinHashLSH(0.8)` insertion session + queries."""
    import re

    from datasketch import MinHash, MinHashLSH

    from tasks.data.dedup.lsh import clusters_of

    _, texts = read_corpus(folder)
    word = re.compile(r"\w+")

    def grams(text: str) -> list[bytes]:
        words = word.findall(text.lower())
        return [" ".join(words[k:k + 5]).encode() for k in range(max(len(words) - 4, 1))]

    sketches = MinHash.bulk((grams(t) for t in texts), num_perm=128)
    lsh = MinHashLSH(threshold=0.8, num_perm=128)
    with lsh.insertion_session() as session:
        for k, m in enumerate(sketches):
            session.insert(k, m)
    pairs = sorted({(min(k, j), max(k, j)) for k, m in enumerate(sketches) for j in lsh.query(m) if j != k})
    return clusters_of(np.array(pairs, dtype=np.int64).reshape(-1, 2), len(texts))


def groups_of(keeper: dict[int, int]) -> list[list[int]]:
    """Clusters from drop → keeper links; an exact copy whose keeper was later removed as a near duplicate
    joins that one's keeper (its group is the document finally kept)."""
    def final(k: int) -> int:
        while k in keeper:
            k = keeper[k]
        return k

    groups: dict[int, list[int]] = {}
    for dropped in sorted(keeper):
        root = final(dropped)
        groups.setdefault(root, [root]).append(dropped)
    return list(groups.values())


def worker(method: str, folder: str, result: str, mode: str) -> None:
    """One method's run in this process; `mode`: "cprofile" (profiled), "phases" (`time_phases`) or "plain"."""
    import pyarrow as pa

    pa.set_cpu_count(1)
    pa.set_io_thread_count(1)
    with tempfile.TemporaryDirectory(prefix="forgeline-dedup-real-") as tmp:
        if method != "datasketch":
            _warm_up(Path(tmp))
        if mode == "phases":
            time_phases()
        PHASES.clear()
        profiler = cProfile.Profile() if mode == "cprofile" else None
        cpu, wall = time.process_time(), time.perf_counter()
        if profiler:
            profiler.enable()
        if method == "real":
            clusters = run_real(Path(folder), Path(tmp))
        elif method == "memory":
            clusters = run_memory(Path(folder))
        else:
            clusters = run_datasketch(Path(folder))
        if profiler:
            profiler.disable()
        cpu, wall = time.process_time() - cpu, time.perf_counter() - wall
    out = {"cpu_s": cpu, "wall_s": wall, "clusters": clusters, "peak_mb": peak_rss_mb(), "phases": PHASES}
    if profiler:
        text = io.StringIO()
        pstats.Stats(profiler, stream=text).sort_stats("tottime").print_stats(30)
        pstats.Stats(profiler, stream=text).sort_stats("cumulative").print_stats(45)
        out["profile"] = text.getvalue()
    Path(result).write_text(json.dumps(out))


def _warm_up(tmp: Path) -> None:
    """Import the modules and load the compiled loops (compiled once per machine and code, then cached) on a
    shard of five documents that takes every path: ASCII, quotes, Greek, markup, a near duplicate to verify."""
    from specs.run import ExecutorSpec
    from tasks.data.cleanup import cleaning
    from tasks.data.dedup import dedup_global
    from tasks.data.records import RECORD_SCHEMA, write_table

    words = " ".join(f"w{k}" for k in range(60))
    texts = [words, words + " extra", f"“{words}” — café", f"{words} λόγος", f"<p>{words}</p><p>a</p><div>b</div>"]
    rows = [{"id": f"w/{k}", "text": t, "source": "w", "lang": "en", "origin": "", "meta": "{}", "media": []}
            for k, t in enumerate(texts)]
    (tmp / "warm").mkdir()
    write_table(rows, RECORD_SCHEMA, tmp / "warm" / "in.parquet")
    spec = bench_spec()
    cleaning.process_shard(tmp / "warm" / "in.parquet", tmp / "warm" / "w.parquet", spec, 1, ROOT, 1)
    dedup_global.deduplicate(dedup_global.layout_of(tmp / "warm", ["w"]), spec, 1, ExecutorSpec(workers=1))


def peak_rss_mb() -> float:
    with open("/proc/self/status") as f:
        return next(int(line.split()[1]) / 1024 for line in f if line.startswith("VmHWM:"))


def ceiling(true: set[tuple[int, int]], n: int) -> float:
    """Best pair F1 of clustering the true pairs: union-find, or best-first no-chain groups (ranked by id)."""
    from tasks.data.dedup.lsh import clusters_of, greedy_keepers

    links = np.array(sorted(true), dtype=np.int64).reshape(-1, 2)
    union = pair_scores(cluster_pairs(clusters_of(links, n)), true)[2]
    removed, edge = greedy_keepers(links, np.arange(n, dtype=np.int64))
    keeper = np.where(links[edge, 0] == removed, links[edge, 1], links[edge, 0])
    star = pair_scores(cluster_pairs(groups_of(dict(zip(removed.tolist(), keeper.tolist())))), true)[2]
    return max(union, star)


def evaluate(clusters: list[list[int]], truth: dict[tuple[int, int], float], texts: list[str],
             checked: dict[tuple[int, int], float]) -> tuple[float, float, float]:
    from tests.helpers.dedup_corpus import shingles_of
    from tests.helpers.synthetic_corpus import jaccard

    predicted = cluster_pairs(clusters)
    for pair in predicted - truth.keys() - checked.keys():
        checked[pair] = jaccard(shingles_of(texts[pair[0]]), shingles_of(texts[pair[1]]))
    true = {p for p, j in truth.items() if j >= 0.8} | {p for p, j in checked.items() if j >= 0.8}
    return pair_scores(predicted, true)


def print_phases(phases: dict[str, float], docs: int, total: float) -> None:
    """The real path's CPU s by part, as a table (µs per document beside each)."""
    shard = phases.get("shard phase (process_shard)", 0.0)
    parts = [k for k in phases if k.startswith("- ")]
    rest = shard - sum(phases[k] for k in parts)
    print("| part of the real path | CPU s | µs per document |\n|---|---:|---:|")
    inner = [(k, phases[k]) for k in parts]
    for at, (label, seconds) in enumerate(list(inner)):      # each "of which" row under the step it is part of
        if label == "- step MinHashSignature" and "  - of which signatures and shingles" in phases:
            inner.insert(at + 1, ("  - of which signatures and shingles", phases["  - of which signatures and shingles"]))
    rows = [("whole run", total), *[(k, v) for k, v in phases.items() if not k.startswith(("-", " "))]]
    rows[2:2] = [*inner, ("- rest of process_shard", rest)]
    for label, seconds in rows:
        print(f"| {label} | {seconds:.3f} | {seconds / docs * 1e6:.1f} |")
    print()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--docs", type=int, default=50_000)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--median-chars", type=int, default=1500, help="the documents' median length (default "
                        "1500: web pages' and source files'; shorter corpora weigh the per-document costs more)")
    parser.add_argument("--methods", default=",".join(METHODS))
    parser.add_argument("--repeat", type=int, default=1, help="runs per method (each row printed)")
    parser.add_argument("--profile", default="", help="cProfile this method's run and print its top costs")
    parser.add_argument("--phases", action="store_true", help="print the real path's CPU s by part (each step "
                        "of the shard phase, the read and write, the global phase); timers only, no profiler")
    parser.add_argument("--cache", type=Path, default=Path(tempfile.gettempdir()) / "forgeline-dedup-real")
    parser.add_argument("--worker", nargs=4, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.worker:
        return worker(*args.worker)
    folder = corpus_folder(args.cache, args.docs, args.seed, args.median_chars)
    truth_json = json.loads((folder / "truth.json").read_text())
    truth = {(i, j): s for i, j, s in truth_json["pairs"]}
    _, texts = read_corpus(folder)
    true = {p for p, s in truth.items() if s >= 0.8}
    best = ceiling(true, len(texts))
    lengths = np.array([len(t) for t in texts])
    env = {**os.environ, **SINGLE_THREAD, "PYTHONPATH": str(ROOT)}
    rows, checked = [], {}
    methods = [m for m in args.methods.split(",") if m] or list(METHODS)
    if args.profile and args.profile not in methods:
        methods.append(args.profile)
    for _ in range(args.repeat):
        for method in methods:
            with tempfile.NamedTemporaryFile(suffix=".json") as result:
                mode = "cprofile" if method == args.profile else "phases" if args.phases else "plain"
                cmd = [sys.executable, __file__, "--worker", method, str(folder), result.name, mode]
                done = subprocess.run(cmd, env=env, capture_output=True, text=True)
                if done.returncode:
                    print(f"{method} failed:\n{done.stdout[-3000:]}{done.stderr[-3000:]}")
                    continue
                res = json.loads(Path(result.name).read_text())
            p, r, f1 = evaluate(res["clusters"], truth, texts, checked)
            rows.append((method, len(texts) / res["cpu_s"], res["cpu_s"], res["wall_s"], res["peak_mb"], p, r, f1))
            if res.get("profile"):
                print(res["profile"])
            if args.phases and method == "real":
                print_phases(res["phases"], len(texts), res["cpu_s"])
    print(f"{len(texts):,} documents (seed {args.seed}): {lengths.mean():,.0f} characters on average, median "
          f"{np.median(lengths):,.0f}, 5-95 % {np.percentile(lengths, 5):,.0f}-{np.percentile(lengths, 95):,.0f}, "
          f"max {lengths.max():,}; {len(true):,} true pairs (J ≥ 0.8) of {len(truth):,} computed; "
          f"{sum(j >= 0.8 for j in checked.values())} true pairs found outside them; F1 ceiling {best:.4f}\n")
    header = ("method", "docs/s per core", "CPU s", "wall s", "peak RSS (MB)", "pair precision", "recall", "F1",
              "F1 / ceiling")
    print("| " + " | ".join(header) + " |")
    print("|" + "|".join(["---"] + ["---:"] * (len(header) - 1)) + "|")
    for method, rate, cpu, wall, rss, p, r, f1 in rows:
        print(f"| {method} | {rate:,.0f} | {cpu:.1f} | {wall:.1f} | {rss:,.0f} | {p:.4f} | {r:.4f} | {f1:.4f} | "
              f"{f1 / best:.3f} |")


if __name__ == "__main__":
    main()
