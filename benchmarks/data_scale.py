"""The data stages at growing corpus sizes: time per document, peak memory and disk, per stage.

    python benchmarks/data_scale.py                              # 20k and 40k documents (a few minutes)
    python benchmarks/data_scale.py --docs 250000 500000 1000000 # the issue's sizes (about an hour on 2 cores)
    python benchmarks/data_scale.py --docs 100000 --workers 1 2 --dask 2   # scaling with cores, dask vs local

For each size a seeded synthetic corpus is written as two sources, half `.jsonl.zst` and half parquet: English
prose documents of mixed size (sentences of the embedded encyclopedia / literature / docs corpora, drawn at
random, a log-normal number of them per document: ~0.3–10 KB, ~2 KB on average), and about 5 % planted
near-duplicates (a copy of an earlier document with ~2 % of its words replaced, word-5-gram Jaccard ≈ 0.8–0.9).
Then `python -m tasks ingest`, `validate`, `clean`, `mix` run one after another in a fresh project folder, each
as its own process tree, exactly as `dvc repro` would start them. Per stage the table reports wall seconds,
input documents per second, the peak resident memory of the whole process tree (sampled every 0.1 s with psutil:
the stage process plus its executor workers) and the bytes the stage wrote. The last column of a `--workers` /
`--dask` comparison checks that clean's and mix's outputs are byte-identical to the first configuration's.

A final table projects a 1 TB corpus from the largest size's per-stage rates (documents per core-second).
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import re
import resource
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import numpy as np
import psutil

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from benchmarks.mix_memory import tree_rss  # noqa: E402  (after the sys.path insert above)
from tasks.data.embedded import read_embedded  # noqa: E402
from tasks.data.records import Doc  # noqa: E402

STAGES = ("ingest", "validate", "clean", "mix")
PROSE = ("encyclopedia", "literature", "docs")
SENTENCE = re.compile(r"(?<=[.!?])\s+(?=[A-Z])")
NEAR_DUP_RATE, EDIT_RATE = 0.05, 0.02


# ------------------------------------------------------------------------------------------------ corpus
def sentence_pool() -> list[str]:
    """Every sentence of the embedded prose corpora that looks like one (20–400 characters)."""
    pool: list[str] = []
    for corpus in PROSE:
        for doc in read_embedded(corpus):
            if isinstance(doc, Doc):
                pool += [s.strip() for s in SENTENCE.split(doc.text) if 20 <= len(s.strip()) <= 400]
    return pool


def documents(n_docs: int, seed: int, pool: list[str]):
    """(id, text) of `n_docs` documents; the near-duplicates copy one of the last 10,000 originals (so memory
    stays bounded while the copies still land in other shards)."""
    rng = np.random.default_rng(seed)
    recent: list[str] = []
    for i in range(n_docs):
        if recent and rng.random() < NEAR_DUP_RATE:
            words = recent[int(rng.integers(len(recent)))].split(" ")
            for j in rng.choice(len(words), size=max(1, int(len(words) * EDIT_RATE)), replace=False):
                words[j] = pool[int(rng.integers(len(pool)))].split(" ")[0]
            text = " ".join(words)
        else:
            k = max(1, int(rng.lognormal(mean=2.6, sigma=0.8)))  # median ~13 sentences
            text = " ".join(pool[j] for j in rng.integers(len(pool), size=k))
            recent.append(text)
            if len(recent) > 10_000:
                recent.pop(0)
        yield f"doc-{i:08d}", text


def write_corpus(raw: Path, n_docs: int, seed: int) -> int:
    """16 files (at least 500 documents each), alternating jsonl.zst (source a) and parquet (source b); returns bytes of
    text written."""
    import pyarrow as pa
    import pyarrow.parquet as pq
    import zstandard

    (raw / "a").mkdir(parents=True)
    (raw / "b").mkdir(parents=True)
    pool, total, batch, n_file = sentence_pool(), 0, [], 0
    per_file = max(500, -(-n_docs // 16))

    def flush() -> None:
        nonlocal batch, n_file
        if n_file % 2 == 0:
            with zstandard.open(raw / "a" / f"part-{n_file:04d}.jsonl.zst", "wt", encoding="utf-8") as f:
                for doc_id, text in batch:
                    f.write(json.dumps({"id": doc_id, "text": text}) + "\n")
        else:
            pq.write_table(pa.table({"id": [d for d, _ in batch], "text": [t for _, t in batch]}),
                           raw / "b" / f"part-{n_file:04d}.parquet")
        batch, n_file = [], n_file + 1

    for doc_id, text in documents(n_docs, seed, pool):
        batch.append((doc_id, text))
        total += len(text.encode())
        if len(batch) == per_file:
            flush()
    if batch:
        flush()
    return total


# ------------------------------------------------------------------------------------------------ stages
def params_yaml(executor: dict, n_docs: int) -> str:
    """A project's params: two file sources, the default filters, a mix budget of about half the tokens."""
    params = {
        "run": {"executor": executor},
        "ingest": {"sources": [{"name": "web_a", "kind": "files", "paths": ["raw/a"]},
                               {"name": "web_b", "kind": "files", "paths": ["raw/b"]}]},
        "mix": {"weights": {"web_a": 0.5, "web_b": 0.5}, "token_budget": max(200_000, n_docs * 200),
                "seq_len": 256},
    }
    return json.dumps(params, indent=1)  # JSON is YAML


def children_cpu_s() -> float:
    """User + system CPU seconds of every ended, waited-for descendant (a stage and the workers it joined)."""
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def run_stage(root: Path, stage: str) -> tuple[float, int, float]:
    """(wall seconds, peak RSS of the stage's process tree, CPU seconds of that tree) of `python -m tasks <stage>`.

    CPU seconds are what a per-core rate should be computed from on a shared machine: wall time grows with
    whatever else runs, CPU time much less."""
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    t0, cpu0 = time.perf_counter(), children_cpu_s()
    proc = subprocess.Popen([sys.executable, "-m", "tasks", "--root", str(root), stage], env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    ps, peak, log = psutil.Process(proc.pid), 0, []
    reader = threading.Thread(target=lambda: log.extend(proc.stdout), daemon=True)
    reader.start()
    while proc.poll() is None:
        peak = max(peak, tree_rss(ps))
        time.sleep(0.1)
    reader.join()
    if proc.returncode:
        raise RuntimeError(f"{stage} failed ({proc.returncode}):\n{''.join(log[-40:])}")
    return time.perf_counter() - t0, peak, children_cpu_s() - cpu0


def folder_bytes(folder: Path) -> int:
    return sum(p.stat().st_size for p in folder.rglob("*") if p.is_file())


def digest(folder: Path) -> str:
    """Hash of every output file but the run manifest/result (they hold timings)."""
    h = hashlib.sha256()
    for p in sorted(folder.rglob("*")):
        if p.is_file() and p.name not in ("manifest.json", "result.json") and "report" not in p.name:
            h.update(str(p.relative_to(folder)).encode() + b"\0" + p.read_bytes())
    return h.hexdigest()[:12]


def run_size(work: Path, n_docs: int, executor: dict, raw: Path) -> list[dict]:
    root = Path(tempfile.mkdtemp(dir=work, prefix=f"n{n_docs}-"))
    (root / "raw").symlink_to(raw)
    (root / "params.yaml").write_text(params_yaml(executor, n_docs))
    rows = []
    for stage in STAGES:
        wall, peak, cpu = run_stage(root, stage)
        out = root / "data" / stage
        rows.append({"docs": n_docs, "executor": label(executor), "stage": stage, "wall_s": wall,
                     "docs_per_s": n_docs / wall, "cpu_s": cpu, "peak_rss_gb": peak / 2**30, "disk_gb": folder_bytes(out) / 2**30,
                     "digest": digest(out) if stage in ("clean", "mix") else ""})
    return rows


def label(executor: dict) -> str:
    return f"{executor['kind']}×{executor.get('workers', 1)}"


# ------------------------------------------------------------------------------------------------ tables
def print_rows(rows: list[dict], text_bytes: dict[int, int]) -> None:
    print("\n| docs | text GB | executor | stage | wall s | docs/s | CPU s | CPU µs/doc | peak RSS GB | disk GB | outputs |")
    print("|---:|---:|---|---|---:|---:|---:|---:|---:|---:|---|")
    first: dict[tuple[int, str], str] = {}
    for r in rows:
        same = ""
        if r["digest"]:
            ref = first.setdefault((r["docs"], r["stage"]), r["digest"])
            same = "identical" if r["digest"] == ref else f"DIFFER ({r['digest']})"
        print(f"| {r['docs']:,} | {text_bytes[r['docs']] / 1e9:.2f} | {r['executor']} | {r['stage']} | "
              f"{r['wall_s']:.1f} | {r['docs_per_s']:,.0f} | {r['cpu_s']:.0f} | {1e6 * r['cpu_s'] / r['docs']:.0f} | "
              f"{r['peak_rss_gb']:.2f} | "
              f"{r['disk_gb']:.2f} | {same} |")


def print_projection(rows: list[dict], text_bytes: dict[int, int], cores: int = 64, hours_goal: float = 24) -> None:
    """1 TB of text at the largest size's document size and per-stage rates, on nodes of `cores` cores."""
    n = max(text_bytes)
    base = [r for r in rows if r["docs"] == n and r["executor"] == rows[0]["executor"]]
    docs_1tb = 1e12 / (text_bytes[n] / n)
    print(f"\n1 TB projection: {docs_1tb:,.0f} documents ({text_bytes[n] / n:,.0f} B each), {cores}-core nodes, "
          f"from the {n:,}-document CPU seconds per document ({rows[0]['executor']})")
    print("| stage | docs / core-s | core-hours | nodes for ≤ 24 h | runs on |")
    print("|---|---:|---:|---:|---|")
    where = {"ingest": "executor (per file)", "validate": "executor (per shard)",
             "clean": "executor (per shard) + dedup buckets", "mix": "executor (per shard) + streamed packing"}
    for r in base:
        per_core = r["docs"] / r["cpu_s"]
        core_h = docs_1tb / per_core / 3600
        print(f"| {r['stage']} | {per_core:,.0f} | {core_h:,.0f} | {max(1, int(np.ceil(core_h / cores / hours_goal)))} "
              f"| {where[r['stage']]} |")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--docs", type=int, nargs="+", default=[20_000, 40_000])
    ap.add_argument("--workers", type=int, nargs="+", default=[2], help="local executor worker counts to run")
    ap.add_argument("--dask", type=int, default=0, help="also run dask with this many local workers")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--work", type=Path, default=None, help="scratch folder (default: a temp dir, removed)")
    args = ap.parse_args()
    work = args.work or Path(tempfile.mkdtemp(prefix="forgeline-data-scale-"))
    executors = [{"kind": "local", "workers": w} for w in args.workers]
    if args.dask:
        executors.append({"kind": "dask", "workers": args.dask})
    rows, text_bytes = [], {}
    for n in args.docs:
        raw = work / f"raw-{n}"
        t0 = time.perf_counter()
        text_bytes[n] = write_corpus(raw, n, args.seed)
        print(f"corpus {n:,} docs, {text_bytes[n] / 1e9:.2f} GB of text written in {time.perf_counter() - t0:.0f} s "
              f"({folder_bytes(raw) / 1e9:.2f} GB on disk)", flush=True)
        for ex in executors:
            rows += run_size(work, n, ex, raw)
            print_rows([r for r in rows if r["docs"] == n], text_bytes)
    print_rows(rows, text_bytes)
    print_projection(rows, text_bytes)
    if args.work is None:
        subprocess.run(["rm", "-rf", str(work)], check=False)


if __name__ == "__main__":
    main()
