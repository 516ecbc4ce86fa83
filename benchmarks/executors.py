"""The clean stage on each executor (`run.executor`), side by side on the same ingest shards.

    python benchmarks/executors.py                              # 16 shards x 200 embedded documents
    python benchmarks/executors.py --shards 32 --docs-per-shard 100 --workers 1 2 4 --dask 2

The corpus is real embedded text (encyclopedia, literature, docs, code) cut into equal ingest shards. Each row is
a whole `clean` stage (per-shard normalize, PII, quality, toxicity and MinHash on the executor, then corpus-wide
dedup in the stage's process) in a fresh project folder; the dask rows include starting the local cluster. The
last column checks that every output file is byte-identical to the first row's.
"""

from __future__ import annotations

import argparse
import hashlib
import itertools
import logging
import re
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from specs import Params  # noqa: E402  (after the sys.path insert above)
from specs.run import ExecutorSpec  # noqa: E402
from tasks.core.executors import available_cores, executor_for  # noqa: E402
from tasks.core.runner import run_stage  # noqa: E402
from tasks.data.embedded import read_embedded  # noqa: E402
from tasks.data.records import RECORD_SCHEMA, Doc, write_table  # noqa: E402

CORPORA = ("encyclopedia", "literature", "docs", "code")


def build_shards(folder: Path, shards: int, per_shard: int) -> None:
    """Equal shards of real documents, the corpora interleaved (round robin while each lasts)."""
    streams = [((c, d) for d in read_embedded(c) if isinstance(d, Doc)) for c in CORPORA]
    docs = [pair for group in itertools.zip_longest(*streams) for pair in group if pair is not None]
    # ~1,600 documents; larger runs reuse them under new ids (exact duplicates then, which dedup drops)
    rows = [{"id": f"{corpus}/{doc.key}/{n // len(docs)}", "text": doc.text, "source": corpus, "lang": "en",
             "origin": doc.key, "meta": "{}", "media": []}
            for n, (corpus, doc) in zip(range(shards * per_shard), itertools.cycle(docs))]
    folder.mkdir(parents=True)
    for n in range(shards):
        write_table(rows[n * per_shard:(n + 1) * per_shard], RECORD_SCHEMA, folder / f"bench-{n:05d}.parquet")


class ShardSeconds(logging.Handler):
    """Sums the seconds of clean's per-shard progress lines (`... in 1.2 s (pid 123)`)."""

    def __init__(self) -> None:
        super().__init__()
        self.total = 0.0

    def emit(self, record: logging.LogRecord) -> None:
        m = re.search(r"cleaned: .* in ([\d.]+) s \(pid", record.getMessage())
        if m:
            self.total += float(m.group(1))


def run_once(shards: Path, root: Path, executor: dict) -> tuple[float, float, str]:
    """(stage wall seconds, summed shard seconds, digest of every output file but the manifest)."""
    (root / "data/ingest").mkdir(parents=True)
    (root / "data/ingest/shards").symlink_to(shards)
    params = Params.model_validate({
        "run": {"executor": executor},
        "ingest": {"sources": [{"name": c, "kind": "embedded", "corpus": c} for c in CORPORA]},
        "clean": {"quality": {"profiles": {"code": "code"}}},  # code is scored by the code rules, as in params.yaml
    })
    counter = ShardSeconds()
    logging.getLogger("forgeline.clean").addHandler(counter)
    t0 = time.perf_counter()
    try:
        run_stage("clean", params, root)
    finally:
        logging.getLogger("forgeline.clean").removeHandler(counter)
    wall = time.perf_counter() - t0
    digest = hashlib.sha256()
    out = root / "data/clean"
    for f in sorted(p for p in out.rglob("*") if p.is_file() and p.name != "manifest.json"):
        digest.update(str(f.relative_to(out)).encode() + f.read_bytes())
    return wall, counter.total, digest.hexdigest()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--shards", type=int, default=16)
    ap.add_argument("--docs-per-shard", type=int, default=200)
    ap.add_argument("--workers", type=int, nargs="+", default=[1, 2], help="local pool sizes (1: in-process)")
    ap.add_argument("--dask", type=int, nargs="*", default=[2], help="local Dask cluster sizes")
    args = ap.parse_args()
    logging.basicConfig(level=logging.WARNING)
    logging.getLogger("forgeline.clean").setLevel(logging.INFO)

    configs = [{"workers": w} for w in args.workers] + [{"kind": "dask", "workers": w} for w in args.dask]
    rows = []
    with tempfile.TemporaryDirectory(prefix="forgeline-executors-") as tmp:
        shards = Path(tmp) / "shards"
        build_shards(shards, args.shards, args.docs_per_shard)
        for n, executor in enumerate(configs):
            name = f"{executor.get('kind', 'local')} x{executor['workers']}"
            where = executor_for(ExecutorSpec(**executor)).description
            wall, busy, digest = run_once(shards, Path(tmp) / f"run{n}", executor)
            rows.append((name, where, wall, busy, digest))
            print(f"{name}: {wall:.1f} s", file=sys.stderr)

    base_wall, base_digest = rows[0][2], rows[0][4]
    print(f"\nclean stage, {args.shards} shards x {args.docs_per_shard} documents, {available_cores()} cores\n")
    print("| executor | runs on | stage wall s | shard work s (sum) | speed-up vs first | outputs identical |")
    print("|---|---|---:|---:|---:|---|")
    for name, where, wall, busy, digest in rows:
        same = "yes" if digest == base_digest else "NO"
        print(f"| {name} | {where} | {wall:.1f} | {busy:.1f} | {base_wall / wall:.2f}x | {same} |")


if __name__ == "__main__":
    main()
