"""Peak memory (RSS of the whole process tree) of the mix stage on a synthetic corpus, this checkout vs another.

    python benchmarks/mix_memory.py                                        # 50k and 200k documents, this code
    python benchmarks/mix_memory.py --docs 50000 200000 --before-rev main  # also the code of `main`

The corpus is written as clean shards (RECORD_SCHEMA, 5,000 records each, the 4 sources of params.yaml in turn) of
seeded random words, ~1 KB per text. Each run is `python -m tasks --root <corpus> mix` in a fresh process with
that code's own params.yaml (`run.executor` as there, a pool over this machine's cores, or `--workers`); psutil samples the
resident memory of the process and all its children every 50 ms, and the peak of their sum is reported. The
last column says whether the packed outputs (shards, index, packing.json, report.json) are byte-identical to
the first code's for the same corpus.
"""

from __future__ import annotations

import argparse
import hashlib
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import psutil
import yaml

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import numpy as np  # noqa: E402  (after the sys.path insert above)

from benchmarks.validate_memory import checkout  # noqa: E402
from tasks.data.records import RECORD_SCHEMA, write_table  # noqa: E402

SOURCES = ("literature", "encyclopedia", "code", "docs")
PER_SHARD = 5000
WORDS = np.array([f"w{i:04d}" for i in range(5000)])


def build_corpus(folder: Path, docs: int, seed: int = 0) -> int:
    """Write `docs` records as clean shards under folder/data/clean/shards; return the text bytes."""
    rng = np.random.default_rng(seed)
    shards = folder / "data" / "clean" / "shards"
    shards.mkdir(parents=True)
    total = 0
    for n, start in enumerate(range(0, docs, PER_SHARD)):
        rows = []
        for i in range(start, min(start + PER_SHARD, docs)):
            source = SOURCES[i % len(SOURCES)]
            text = " ".join(WORDS[rng.integers(0, len(WORDS), int(rng.integers(100, 240)))].tolist())
            rows.append({"id": f"{source}/{i}", "text": text, "source": source, "lang": "en",
                         "origin": f"{source}.jsonl:{i}", "meta": "{}", "media": []})
            total += len(text)
        write_table(rows, RECORD_SCHEMA, shards / f"part-{n:05d}.parquet")
    return total


def tree_rss(proc: psutil.Process) -> int:
    total = 0
    for p in [proc, *proc.children(recursive=True)]:
        try:
            total += p.memory_info().rss
        except psutil.Error:  # a worker that just ended (or is not ours to read)
            continue
    return total


def run_mix(code: Path, corpus: Path, workers: int | None) -> tuple[float, float]:
    """(peak process-tree RSS MiB, wall s) of the mix stage of checkout `code` on `corpus`."""
    params = yaml.safe_load((code / "params.yaml").read_text())
    if workers is not None:
        params["run"].setdefault("executor", {})["workers"] = workers
    (corpus / "params.yaml").write_text(yaml.safe_dump(params, sort_keys=False))
    start = time.perf_counter()
    proc = subprocess.Popen([sys.executable, "-m", "tasks", "--root", str(corpus), "mix"], cwd=code,
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    watched, peak = psutil.Process(proc.pid), 0
    while proc.poll() is None:
        try:
            peak = max(peak, tree_rss(watched))
        except psutil.NoSuchProcess:
            break
        time.sleep(0.05)
    wall = time.perf_counter() - start
    err = proc.stderr.read().decode() if proc.stderr else ""
    if proc.returncode:
        raise SystemExit(f"mix of {code} failed (exit {proc.returncode}):\n{err[-2000:]}")
    return peak / 2**20, wall


def outputs_digest(corpus: Path) -> str:
    out = corpus / "data" / "mix"
    digest = hashlib.sha256()
    for f in sorted(out.iterdir()):
        if f.suffix in (".bin", ".parquet") or f.name in ("packing.json", "report.json"):
            digest.update(f.name.encode() + f.read_bytes())
    return digest.hexdigest()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--docs", type=int, nargs="+", default=[50_000, 200_000], help="corpus sizes to measure")
    ap.add_argument("--before-rev", default=None, help="git revision of the code to compare with (e.g. main)")
    ap.add_argument("--workers", type=int, default=None, help="run.executor.workers (default: params.yaml's)")
    args = ap.parse_args()
    with tempfile.TemporaryDirectory(prefix="mix-memory-") as tmp:
        codes = [("this checkout", ROOT)]
        if args.before_rev:
            codes.insert(0, (args.before_rev, checkout(args.before_rev, Path(tmp) / "before")))
        print("| code | documents | text MiB | peak RSS MiB | RSS KiB per document | wall s | outputs same as first |")
        print("|---|---:|---:|---:|---:|---:|---|")
        for docs in args.docs:
            corpus = Path(tmp) / f"corpus-{docs}"
            text = build_corpus(corpus, docs)
            first = None
            for name, code in codes:
                rss, wall = run_mix(code, corpus, args.workers)
                digest = outputs_digest(corpus)
                first = digest if first is None else first
                print(f"| {name} | {docs:,} | {text / 2**20:,.0f} | {rss:,.0f} | {rss * 1024 / docs:.2f} | {wall:.1f} "
                      f"| {'yes' if digest == first else 'NO'} |", flush=True)


if __name__ == "__main__":
    main()
