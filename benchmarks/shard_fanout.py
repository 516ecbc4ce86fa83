"""Clean's per-shard work (normalize, PII, quality, toxicity, MinHash signatures) in one process vs fanned out as
Prefect tasks on a local Dask cluster (`run.executor.kind: dask`), side by side on the same shards.

    python benchmarks/shard_fanout.py                       # 8 shards x 200 embedded documents; 1 and 2 workers
    python benchmarks/shard_fanout.py --shards 16 --docs-per-shard 400 --workers 1 2 4

The corpus is real embedded text (encyclopedia, literature, docs, code) cut into equal shards, written as ingest
shards. Each configuration starts from an empty work folder; the wall time of the dask rows includes starting
the cluster and the Prefect flow run (a local Prefect server is started once, before timing, unless
PREFECT_API_URL points at one). The last column checks that every work file (tables and signatures) is
byte-identical to the one-process run's.
"""

from __future__ import annotations

import argparse
import contextlib
import hashlib
import itertools
import os
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from specs.clean import CleanSpec  # noqa: E402  (after the sys.path insert above)
from specs.run import ExecutorSpec  # noqa: E402
from tasks.core.shardmap import map_shards  # noqa: E402
from tasks.data import cleaning  # noqa: E402
from tasks.data.embedded import read_embedded  # noqa: E402
from tasks.data.records import RECORD_SCHEMA, Doc, write_table  # noqa: E402

CORPORA = ("encyclopedia", "literature", "docs", "code")


def build_shards(folder: Path, shards: int, per_shard: int) -> list[Path]:
    """Equal shards of real documents, the corpora interleaved (round robin while each lasts)."""
    need = shards * per_shard
    streams = [((c, d) for d in read_embedded(c) if isinstance(d, Doc)) for c in CORPORA]
    mixed = (pair for group in itertools.zip_longest(*streams) for pair in group if pair is not None)
    docs = list(mixed)  # ~1,600 documents; larger runs reuse them (new ids), which costs the same work
    rows = [{"id": f"{corpus}/{doc.key}/{n // len(docs)}", "text": doc.text, "source": corpus, "lang": "en",
             "origin": doc.key, "meta": "{}", "media": []}
            for n, (corpus, doc) in zip(range(need), itertools.cycle(docs))]
    folder.mkdir(parents=True)
    paths = []
    for n in range(shards):
        paths.append(folder / f"bench-{n:05d}.parquet")
        write_table(rows[n * per_shard:(n + 1) * per_shard], RECORD_SCHEMA, paths[-1])
    return paths


def run_once(shards: list[Path], work: Path, executor: ExecutorSpec) -> tuple[float, float, str]:
    """(wall seconds, summed shard seconds, digest of every work file)."""
    work.mkdir(parents=True)
    spec = CleanSpec()
    args = [(s, work / f"{s.stem}.parquet", work / f"{s.stem}.sig.npy", spec, 1234, ROOT) for s in shards]
    t0 = time.perf_counter()
    runs = map_shards(cleaning.process_shard, args, [s.stem for s in shards], executor, "bench")
    wall = time.perf_counter() - t0
    digest = hashlib.sha256()
    for f in sorted(work.iterdir()):
        digest.update(f.name.encode() + f.read_bytes())
    return wall, sum(r["seconds"] for r in runs), digest.hexdigest()


@contextlib.contextmanager
def prefect_api(home: Path):
    """The server PREFECT_API_URL names, else a local one for the whole benchmark (started before any timing;
    without it every flow run would start and stop a temporary server of its own)."""
    if os.environ.get("PREFECT_API_URL"):
        yield
        return
    from prefect.settings import PREFECT_API_URL, temporary_settings

    from flows.server import drain_prefect_workers, local_server

    with local_server(home) as url, temporary_settings(updates={PREFECT_API_URL: url}):
        try:
            yield
        finally:
            drain_prefect_workers()  # while the server is up


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--shards", type=int, default=8)
    ap.add_argument("--docs-per-shard", type=int, default=200)
    ap.add_argument("--workers", type=int, nargs="+", default=[1, 2])
    args = ap.parse_args()
    os.environ.setdefault("PREFECT_SERVER_ANALYTICS_ENABLED", "false")

    with tempfile.TemporaryDirectory(prefix="forgeline-fanout-") as tmp, prefect_api(Path(tmp) / "prefect"):
        shards = build_shards(Path(tmp) / "shards", args.shards, args.docs_per_shard)
        configs = [("local", ExecutorSpec())] + [(f"dask x{w}", ExecutorSpec(kind="dask", workers=w))
                                                  for w in args.workers]
        rows = []
        for n, (name, executor) in enumerate(configs):
            wall, busy, digest = run_once(shards, Path(tmp) / f"work{n}", executor)
            rows.append((name, wall, busy, digest))

    base_wall, base_digest = rows[0][1], rows[0][3]
    print(f"\n{args.shards} shards x {args.docs_per_shard} documents, {os.cpu_count()} CPUs\n")
    print(f"| executor | wall s | shard work s (sum) | speed-up vs local | outputs identical |")
    print(f"|---|---:|---:|---:|---|")
    for name, wall, busy, digest in rows:
        print(f"| {name} | {wall:.1f} | {busy:.1f} | {base_wall / wall:.2f}x | {'yes' if digest == base_digest else 'NO'} |")


if __name__ == "__main__":
    main()
