"""Peak memory of clean's corpus-wide phase (exact + near dedup, audit, outputs) as the corpus grows: out of core
(this checkout, `clean.memory_gb`) against the in-memory code it replaced, and Dask against local.

    python benchmarks/dedup_scale.py                                  # 50k and 200k documents, budget 0.25 GiB
    python benchmarks/dedup_scale.py --docs 50000 200000 --memory-gb 0.25 2 --dask

Each corpus (`tests.helpers.synthetic_corpus`, ~1.3 KB English-like documents with planted near-duplicates, plus exact
copies) is written as clean's phase-1 work folder (work tables of 2,000 rows, signatures, dedup inputs: what
`cleaning.process_shard` writes, without the filters). Each method then runs in a fresh process, on one core
(`run.executor.workers: 1`, so the tasks run in that process and its peak RSS, VmHWM, covers all of them):

- `in memory`: the code before this change — every work table and signature loaded (`pa.concat_tables`),
  `cleaning.deduplicate`, then `_write_outputs` of tasks/clean.py at `--baseline` (rows as Python dicts);
- `out of core`: `dedup_global.deduplicate` + `clean_outputs.write_outputs` with the given budget;
- `dask` (with `--dask`): the same on a LocalCluster of 2 workers on 127.0.0.1 (the stage process's RSS; the
  workers are processes of their own).

The last column says whether every output file is byte-identical to the first method's for that corpus ("same
rows": only the ledger's bytes differ, its rows are equal: over 16,384 drops it is written in row groups).
"""

from __future__ import annotations

import argparse
import importlib
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
import types
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import numpy as np  # noqa: E402  (after the sys.path insert above)

PER_SHARD = 2000


def build_work(folder: Path, docs: int, seed: int, buckets: int) -> list[str]:
    """Phase 1's files for a synthetic corpus of `docs` documents (plus 1 % exact copies); the shard stems."""
    from specs.clean import CleanSpec
    from tasks.data.cleanup import cleaning
    from tasks.data.cleanup.steps import write_dedup_inputs
    from tasks.data.dedup import dedup_files
    from tasks.data.cleanup.normalize import exact_key
    from tasks.data.records import write_table
    from tests.helpers.synthetic_corpus import make_corpus

    corpus = make_corpus(docs, seed=seed)
    texts = corpus.texts + [t.upper() for t in corpus.texts[::100]]
    scores = corpus.scores + [0.5] * len(corpus.texts[::100])
    spec, stems = CleanSpec(), []
    for n, lo in enumerate(range(0, len(texts), PER_SHARD)):
        rows = [{"id": f"syn/{k:07d}", "text": texts[k], "source": "syn", "lang": "en", "origin": str(k),
                 "meta": "{}", "media": [], "quality": round(scores[k], 6),
                 "reason": "low_quality" if k % 53 == 0 else None, "detail": None,
                 "exact_key": exact_key(texts[k]), "pii_kinds": [], "pii_counts": []}
                for k in range(lo, min(lo + PER_SHARD, len(texts)))]
        base = folder / f"syn-{n:05d}"
        ids, columns = dedup_files.row_columns(rows)
        write_dedup_inputs(base, ids, {**columns, "text": texts[lo:lo + len(rows)]}, spec.dedup, 1, buckets,
                           signatures=True)      # `in memory` and `repartition` read them
        write_table(rows, cleaning.WORK_SCHEMA, dedup_files.at(base, ".parquet"))
        stems.append(base.name)
    return stems


def repartition(src: Path, dst: Path, buckets: int) -> None:
    """A copy of work folder `src` with its band keys re-partitioned into `buckets` buckets."""
    import pyarrow.parquet as pq

    from specs.clean import CleanSpec
    from tasks.data.dedup import dedup_files
    from tasks.data.dedup.lsh import spec_banding

    shutil.copytree(src, dst)
    bands, band_rows = spec_banding(CleanSpec().dedup)
    for table in sorted(dst.glob("*.parquet")):
        base = table.parent / table.name[: -len(".parquet")]
        rows = pq.read_table(table, columns=["id", "quality", "reason", "exact_key"]).to_pylist()
        sigs = np.load(dedup_files.at(base, ".sig.npy"))
        dedup_files.write_shard_inputs(base, sigs, *dedup_files.row_columns(rows), bands, band_rows, buckets)


def peak_mb() -> float:
    with open("/proc/self/status") as f:
        return next(int(line.split()[1]) / 1024 for line in f if line.startswith("VmHWM:"))


def child(method: str, work: Path, out: Path, memory_gb: float, baseline: str, result: Path) -> None:
    """One method over one work folder, in this fresh process."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    stems = sorted(p.name[: -len(".parquet")] for p in work.glob("*.parquet"))
    start_mb, t0, c0 = peak_mb(), time.perf_counter(), time.process_time()
    if method == "in memory":
        # the baseline's whole tree (`baseline_tree`) first on the path: its specs, its tasks.clean and the
        # cleaning module that imported, as they were (no module of this checkout is imported in this process)
        sys.path.insert(0, os.environ["DEDUP_SCALE_BASELINE"])
        from specs.clean import CleanSpec

        old = importlib.import_module("tasks.clean")
        rows = pa.concat_tables([pq.read_table(work / f"{s}.parquet") for s in stems])
        sigs = np.concatenate([np.load(work / f"{s}.sig.npy") for s in stems])
        report = old.cleaning.deduplicate(rows, sigs, CleanSpec(), 1)
        old._write_outputs(rows, CleanSpec(), types.SimpleNamespace(out=out), report, {"enabled": False})
    else:
        from specs.clean import CleanSpec
        from specs.run import ExecutorSpec
        from tasks.data.cleanup import clean_outputs
        from tasks.data.dedup import dedup_global

        spec = CleanSpec(memory_gb=memory_gb)
        executor = ExecutorSpec(kind="dask", workers=2) if method == "dask" else ExecutorSpec(workers=1)
        layout = dedup_global.layout_of(work, stems)
        report = dedup_global.deduplicate(layout, spec, 1, executor)
        clean_outputs.write_outputs(layout, spec, out, report, {"enabled": False})
    result.write_text(json.dumps({"start_mb": start_mb, "peak_mb": peak_mb(), "wall_s": time.perf_counter() - t0,
                                  "cpu_s": time.process_time() - c0}))


def baseline_tree(tmp: Path, revision: str) -> Path:
    """The checkout at `revision` (`git archive`), extracted once under `tmp`: the in-memory method runs that
    code whole (its modules have since moved; mixing its clean.py with this checkout's modules broke)."""
    tree = tmp / f"baseline-{revision}"
    if not tree.exists():
        tree.mkdir()
        archive = subprocess.run(["git", "-C", str(ROOT), "archive", revision, "tasks", "specs"], check=True,
                                 capture_output=True).stdout
        subprocess.run(["tar", "-x", "-C", str(tree)], input=archive, check=True)
    return tree


def outputs(folder: Path) -> dict[str, bytes]:
    return {str(p.relative_to(folder)): p.read_bytes() for p in sorted(folder.rglob("*")) if p.is_file()}


def same_outputs(a: dict[str, bytes], b: dict[str, bytes]) -> str:
    """"yes" when every file is byte-identical; "same rows" when only Parquet files differ in bytes but hold equal
    tables (a ledger over clean_outputs.LEDGER_ROWS rows is written in several row groups); else what differs."""
    import io

    import pyarrow.parquet as pq

    if a.keys() != b.keys():
        return f"NO: files {sorted(a.keys() ^ b.keys())}"
    differ = [k for k in a if a[k] != b[k]]
    tables = [k for k in differ if k.endswith(".parquet")
              and pq.read_table(io.BytesIO(a[k])).equals(pq.read_table(io.BytesIO(b[k])))]
    if set(differ) - set(tables):
        return f"NO: {sorted(set(differ) - set(tables))}"
    return "same rows" if differ else "yes"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--docs", type=int, nargs="+", default=[50_000, 200_000])
    parser.add_argument("--memory-gb", type=float, nargs="+", default=[0.25])
    parser.add_argument("--dask", action="store_true", help="also on a local Dask cluster of 2 workers")
    parser.add_argument("--baseline", default="716f121", help="git revision of the in-memory code")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--child", nargs=6, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        method, work, out, gb, baseline, result = args.child
        return child(method, Path(work), Path(out), float(gb), baseline, Path(result))
    from specs.clean import CleanSpec
    from specs.run import ExecutorSpec
    from tasks.data.dedup import dedup_global

    rows = []
    with tempfile.TemporaryDirectory(prefix="forgeline-dedup-scale-") as tmp:
        for docs in args.docs:
            plans = [("in memory", 2.0)] + [("out of core", gb) for gb in args.memory_gb]
            plans += [("dask", gb) for gb in args.memory_gb[:1]] if args.dask else []
            first, built = None, {}
            for method, gb in plans:
                total = docs + len(range(0, docs, 100))
                buckets = dedup_global.plan_buckets(total, CleanSpec(memory_gb=gb),
                                                    ExecutorSpec(kind="dask", workers=2) if method == "dask"
                                                    else ExecutorSpec(workers=1))
                work = Path(tmp) / f"work-{docs}-{buckets}"
                t = time.perf_counter()
                if not work.exists() and docs not in built:
                    work.mkdir()
                    build_work(work, docs, args.seed, buckets)
                    built[docs] = work
                elif not work.exists():
                    repartition(built[docs], work, buckets)
                print(f"  {docs:,} docs, {buckets} buckets: work folder in {time.perf_counter() - t:.0f} s",
                      file=sys.stderr, flush=True)
                out, result = Path(tmp) / "out", Path(tmp) / "result.json"
                shutil.rmtree(out, ignore_errors=True)
                code = {"DEDUP_SCALE_BASELINE": str(baseline_tree(Path(tmp), args.baseline))} \
                    if method == "in memory" else {}
                subprocess.run([sys.executable, __file__, "--child", method, str(work), str(out), str(gb),
                                args.baseline, str(result)], check=True,
                               env={**os.environ, "PYTHONPATH": str(ROOT), **code})
                res = json.loads(result.read_text())
                files = outputs(out)
                first = first or files
                rows.append((method, docs, gb if method != "in memory" else None, buckets, res,
                             same_outputs(first, files)))
                for stale in Path(tmp).glob("work-*/*"):     # the run's own files (candidates, links, ranks)
                    if stale.name.startswith(("cand-", "links-", "candidates", "alive", "rank")):
                        stale.unlink()
            for folder in Path(tmp).glob(f"work-{docs}-*"):
                shutil.rmtree(folder)
    print("| method | docs | memory_gb | buckets | peak RSS (MB) | over start (MB) | wall s | CPU s | "
          "outputs identical |")
    print("|---|---:|---:|---:|---:|---:|---:|---:|---|")
    for method, docs, gb, buckets, r, same in rows:
        print(f"| {method} | {docs:,} | {gb if gb is not None else '-'} | {buckets if gb is not None else '-'} | "
              f"{r['peak_mb']:,.0f} | {r['peak_mb'] - r['start_mb']:,.0f} | {r['wall_s']:.1f} | {r['cpu_s']:.1f} | "
              f"{same} |")


if __name__ == "__main__":
    main()
