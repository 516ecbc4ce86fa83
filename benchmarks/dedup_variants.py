"""Clean's dedup on near-duplicate variants of real documents: pair recall and precision per variant kind.

    python benchmarks/dedup_variants.py                        # 12 originals per embedded corpus, params.yaml's clean
    python benchmarks/dedup_variants.py --per-corpus 30 --compare
    python benchmarks/dedup_variants.py --ingest data/ingest/shards   # dedup decisions the folds change there
    python benchmarks/dedup_variants.py --stage data                  # clean's outputs with/without the folds

Variants, truth and the decision path: `tests/helpers/dedup_variants.py` (formatting-only copies, content edits
whose truth is the exact word-5-gram Jaccard, look-alikes that must stay apart; each kind is one run of clean's
phase 1 without its filters and `cleaning.deduplicate`). `--compare` adds the recall with the shingle folds of
`clean.dedup` (`fold_entities`, `fold_invisible`, `fold_unicode`, `fold_markup`, `fold_confusables`) off, i.e.
clean's near dedup before them.
`--ingest DIR` runs clean's phase 1 (filters on, no decontamination index) over the ingest shards in DIR and
lists the documents whose dedup decision the folds change. `--stage DATA` runs the whole clean stage in process
(one worker) twice, with and without the folds, on copies of DATA/{ingest,validate,instruct} in a temporary
folder, and compares every output file's SHA-256.
"""

from __future__ import annotations

import argparse
import hashlib
import shutil
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import pyarrow as pa  # noqa: E402  (after the sys.path insert above)
import pyarrow.parquet as pq  # noqa: E402

from specs.clean import CleanSpec  # noqa: E402
from specs.params import load_params  # noqa: E402
from tasks.data.cleanup import cleaning
from tasks.data.dedup import minhash  # noqa: E402
from tests.helpers import dedup_variants  # noqa: E402

NO_FOLDS = {"fold_entities": False, "fold_invisible": False, "fold_unicode": False, "fold_markup": False,
            "fold_confusables": False}


def without_folds(clean: CleanSpec) -> CleanSpec:
    return clean.model_copy(update={"dedup": clean.dedup.model_copy(update=NO_FOLDS)})


def variants(args: argparse.Namespace, clean: CleanSpec) -> None:
    start = time.perf_counter()
    kinds = dedup_variants.all_kinds(args.per_corpus, args.seed, clean.dedup.threshold)
    results = [dedup_variants.evaluate(k, clean, args.seed) for k in kinds]
    if args.compare:
        before = [dedup_variants.evaluate(k, without_folds(clean), args.seed) for k in kinds]
        for now, old in zip(results, before):
            now["kind"] = f"{now['kind']} (folds off: recall {old['recall']:.3f}, false {old['false']})"
    print(dedup_variants.table(results))
    print(f"\n{len(kinds)} kinds, {sum(len(k.texts) for k in kinds)} documents, "
          f"{time.perf_counter() - start:.1f} s", file=sys.stderr)


def decisions(rows: list[dict], clean: CleanSpec, seed: int) -> tuple[dict[str, tuple[str, str, str]], dict]:
    """(id -> (reason, kept id, detail)) of the dropped documents, and the report's dedup summary."""
    table = pa.Table.from_pylist(rows, schema=cleaning.WORK_SCHEMA)
    sigs = minhash.signatures([r["text"] for r in rows], clean.dedup, seed)
    out = cleaning.deduplicate(table, sigs, clean, seed)
    return {rows[k]["id"]: v for k, v in out["reasons"].items()}, out["summary"]


def ingest_impact(args: argparse.Namespace, clean: CleanSpec, seed: int) -> None:
    records = [r for f in sorted(Path(args.ingest).glob("*.parquet")) for r in pq.read_table(f).to_pylist()]
    rows = cleaning.clean_records(records, clean, ROOT)
    (now, summary), (old, old_summary) = decisions(rows, clean, seed), decisions(rows, without_folds(clean), seed)
    alive = sum(r["reason"] is None for r in rows)
    print(f"{len(rows)} records, {alive} past the filters; dedup drops {len(now)} with the folds, {len(old)} without")
    print(f"summary with the folds: {summary}\nsummary without:        {old_summary}")
    for doc in sorted(set(now) | set(old)):
        if now.get(doc) != old.get(doc):
            print(f"  {doc}: folds {now.get(doc)} / without {old.get(doc)}")


def stage_outputs(data: Path, params, folds: bool, root: Path) -> dict[str, str]:
    """SHA-256 of each file clean writes, run in process on a copy of its upstream outputs under `root`."""
    from specs.run import ExecutorSpec
    from tasks import clean
    from tasks.core.runner import StagePaths
    for upstream in ("ingest", "validate", "instruct"):
        shutil.copytree(data / upstream, root / "data" / upstream)
    job = params.section("clean")
    if not folds:
        job = job.model_copy(update={"clean": without_folds(job.clean)})
    clean.run(job, StagePaths(root=root, stage="clean", seed=params.run.seed, executor=ExecutorSpec(workers=1)))
    out = root / "data" / "clean"
    return {str(f.relative_to(out)): hashlib.sha256(f.read_bytes()).hexdigest()
            for f in sorted(out.rglob("*")) if f.is_file()}


def stage_impact(data: Path, params) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        now, old = (stage_outputs(data, params, folds, Path(tmp) / str(folds)) for folds in (True, False))
    for name in sorted(set(now) | set(old)):
        print(f"{'identical' if now.get(name) == old.get(name) else 'DIFFERS  '} {name} {now.get(name, '-')[:16]}")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--per-corpus", type=int, default=12, help="originals per embedded corpus (default 12)")
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--compare", action="store_true", help="also measure with the shingle folds off")
    parser.add_argument("--ingest", help="ingest shard folder: the documents whose dedup the folds change")
    parser.add_argument("--stage", help="data folder: clean's outputs with and without the folds, compared")
    args = parser.parse_args()
    params = load_params(ROOT / "params.yaml")
    if args.stage:
        stage_impact(Path(args.stage), params)
    elif args.ingest:
        ingest_impact(args, params.clean, params.run.seed)
    else:
        variants(args, params.clean)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
