"""Stage `clean`: normalize, scrub PII, filter by quality and toxicity, then exact + near deduplicate.

Per ingest shard (resumable; in this process, a process pool or on Dask, see `run.executor`): normalize ->
scrub PII (before anything downstream sees the text) -> the filters of `clean.filters` in order (quality with
prose or code rules per source, language, toxicity, decontamination) -> MinHash signature. Decontamination drops a
document sharing a word 13-gram with an evaluate prompt, an SFT held-out conversation (instruct's
`heldout.jsonl`: instruct is upstream of clean, it has no upstream of its own, so no cycle) or a configured
benchmark file's item. Finished shards are kept in a work
folder outside the DVC out (DVC deletes outs before a rerun), keyed by the spec and the input's manifest, so a
killed and re-run stage skips them. Then, over all shards: exact dedup on normalized text and MinHash-LSH near
dedup, each removed document within the threshold of the best document kept for it (no chains), and an audit
of that decision's precision and recall against brute-force Jaccard on a sample.

Outputs (data/clean/): `shards/<source>-NNNNN.parquet` (RECORD_SCHEMA), `dropped.parquet` (the ledger: id,
source, reason, score, kept_id, detail, text), `report.json`. Counts are conserved: in = kept + dropped.
"""

from __future__ import annotations

import hashlib
import logging
import shutil
from collections import Counter, defaultdict
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from specs.base import spec_hash
from specs.clean import CleanJob, CleanSpec
from specs.results import StageResult
from tasks.core import faults
from tasks.core.files import atomic_path, sha256_file, write_json_atomic, write_text_atomic
from tasks.core.runner import MANIFEST, StagePaths
from tasks.core.shardmap import map_shards
from tasks.data import cleaning, quality
from tasks.data.decontaminate import benchmark_file_texts, heldout_texts, keep_indexable
from tasks.data.records import RECORD_SCHEMA, write_table

log = logging.getLogger("forgeline.clean")
WORK_DIR = "work"


def run(job: CleanJob, paths: StagePaths) -> StageResult:
    spec = job.clean
    ingest = paths.input("ingest")
    index_texts, decon = _index_texts(job, paths)
    work = _work_dir(spec, paths, index_texts)
    shards = sorted((ingest / "shards").glob("*.parquet"))
    # Finished shards (their work table is renamed into place last) were done by an earlier, interrupted run.
    todo = [s for s in shards if not ((work / f"{s.stem}.parquet").exists() and (work / f"{s.stem}.sig.npy").exists())]
    if len(todo) < len(shards):
        log.info("resumed: %d of %d shards were already finished", len(shards) - len(todo), len(shards))

    finished = [len(shards) - len(todo)]

    def done(i: int, run: dict) -> None:  # here, in the stage's process, as each shard finishes (any order)
        finished[0] += 1
        log.info("shard %d/%d %s cleaned: %d records in %.1f s (pid %d)", finished[0], len(shards), todo[i].name,
                 run["result"], run["seconds"], run["pid"])
        faults.checkpoint("clean.shard_done")

    args = [(s, work / f"{s.stem}.parquet", work / f"{s.stem}.sig.npy", spec, paths.seed, paths.root, index_texts)
            for s in todo]
    map_shards(cleaning.process_shard, args, [s.stem for s in todo], paths.executor, "clean", done)

    rows, sigs = _load_work(work, shards)
    dedup_report = cleaning.deduplicate(rows, sigs, spec, paths.seed)
    counts = _write_outputs(rows, spec, paths, dedup_report, decon)
    shutil.rmtree(work, ignore_errors=True)  # finished: the work folder has served its purpose
    return StageResult(stage="clean", counts=counts, summary=_summary(counts), table=_table(counts))


def _index_texts(job: CleanJob, paths: StagePaths) -> tuple[tuple[tuple[str, str], ...], dict[str, Any]]:
    """The (name, text) pairs decontamination indexes, and what the report says of them."""
    d = job.clean.decontamination
    if not (d.enabled and "decontamination" in job.clean.filters):
        return (), {"enabled": False}
    texts = [(f"evaluate.prompts:{pid}", text) for pid, text in job.eval_prompts.items()]
    heldout = paths.input("instruct") / "heldout.jsonl"
    if d.heldout and heldout.exists():
        texts += heldout_texts(heldout)
    elif d.heldout:  # only outside a pipeline: in one, instruct is upstream and the runner verified its folder
        log.warning("decontamination: %s is missing: the SFT held-out set is not indexed", heldout)
    for rel in d.benchmark_files:  # a missing file raises: a typo must not silently index nothing
        texts += benchmark_file_texts(paths.root / rel, rel)
    kept, short = keep_indexable(texts, d.min_words)
    origins = Counter(name.rsplit(":", 1)[0] for name, _ in kept)
    return tuple(kept), {"enabled": True, "ngram": d.ngram, "mode": d.mode, "indexed": len(kept), "short": short,
                         "by_origin": dict(sorted(origins.items()))}


def _work_dir(spec: CleanSpec, paths: StagePaths, index_texts: tuple[tuple[str, str], ...]) -> Path:
    """A folder unique to (spec, seed, input, indexed texts): work from another configuration is never reused."""
    ingest_manifest = paths.input("ingest") / MANIFEST
    texts = hashlib.sha256("\x1f".join(f"{n}\x1e{t}" for n, t in index_texts).encode()).hexdigest()
    key = hashlib.sha256(
        f"{spec_hash(spec)}:{paths.seed}:{sha256_file(ingest_manifest) if ingest_manifest.exists() else ''}:"
        f"{texts}".encode()
    ).hexdigest()[:16]
    work = paths.root / WORK_DIR / "clean" / key
    work.mkdir(parents=True, exist_ok=True)
    return work


def _load_work(work: Path, shards: list[Path]) -> tuple[pa.Table, np.ndarray]:
    tables = [pq.read_table(work / f"{s.stem}.parquet") for s in shards]
    sigs = [np.load(work / f"{s.stem}.sig.npy") for s in shards]  # each [rows_in_shard, num_perm]
    table = pa.concat_tables(tables) if tables else cleaning.WORK_SCHEMA.empty_table()
    return table, (np.concatenate(sigs) if sigs else np.zeros((0, 1), dtype=np.uint64))


def _write_outputs(rows: pa.Table, spec: CleanSpec, paths: StagePaths, dedup: dict[str, Any],
                   decon: dict[str, Any]) -> dict[str, Any]:
    records = rows.to_pylist()
    final_reason = dedup["reasons"]  # row index -> (reason, kept_id, score/similarity) for dedup drops
    kept_by_source: dict[str, list[dict]] = defaultdict(list)
    ledger: list[dict[str, Any]] = []
    by_source: dict[str, Counter] = defaultdict(Counter)
    pii: Counter[str] = Counter()
    for i, r in enumerate(records):
        src = r["source"]
        by_source[src]["in"] += 1
        pii.update({k: v for k, v in zip(r["pii_kinds"], r["pii_counts"])})
        reason, kept_id, detail = r["reason"], None, r["detail"]
        if reason is None and i in final_reason:
            reason, kept_id, detail = final_reason[i]
        if reason is None:
            by_source[src]["kept"] += 1
            kept_by_source[src].append({k: r[k] for k in RECORD_SCHEMA.names})
        else:
            by_source[src][f"dropped:{reason}"] += 1
            ledger.append({"id": r["id"], "source": src, "reason": reason, "score": r["quality"],
                           "kept_id": kept_id, "detail": detail, "text": r["text"]})

    shard_dir = paths.out / "shards"
    shard_dir.mkdir(parents=True, exist_ok=True)
    for src, kept in sorted(kept_by_source.items()):
        for n, start in enumerate(range(0, len(kept), spec.shard_records)):
            with atomic_path(shard_dir / f"{src}-{n:05d}.parquet") as tmp:
                write_table(kept[start:start + spec.shard_records], RECORD_SCHEMA, tmp)
    with atomic_path(paths.out / "dropped.parquet") as tmp:
        write_table(ledger, cleaning.LEDGER_SCHEMA, tmp)

    sources = {s: dict(sorted(c.items())) for s, c in sorted(by_source.items())}
    for s, c in sources.items():  # the conservation law: every record is kept or dropped with a reason
        dropped = sum(v for k, v in c.items() if k.startswith("dropped:"))
        if c["in"] != c.get("kept", 0) + dropped:
            raise AssertionError(f"clean: source {s} lost records: in {c['in']} != kept + dropped")
    totals = Counter()
    for c in sources.values():
        totals.update(c)
    counts = {"in": totals["in"], "kept": totals.get("kept", 0), "dropped": totals["in"] - totals.get("kept", 0),
              "dropped_by_reason": {k.split(":", 1)[1]: v for k, v in sorted(totals.items()) if ":" in k},
              "by_source": sources, "pii_replaced": dict(sorted(pii.items())), "dedup": dedup["summary"]}
    # What each quality threshold would keep, per source (the quality filter alone; a DVC plot)
    curve = quality.threshold_curve([(r["source"], r["quality"], len(r["text"].split())) for r in records],
                                    spec.quality.curve) if spec.quality.enabled else []
    if curve:
        write_text_atomic(paths.out / "quality_curve.csv", quality.curve_csv(curve))
    write_json_atomic(paths.out / "report.json", {**counts, "dedup_detail": dedup["detail"], "quality_curve": curve,
                                                  "decontamination": decon})
    return counts


def _table(counts: dict[str, Any]) -> list[dict[str, Any]]:
    return [{"source": s, **c} for s, c in counts["by_source"].items()]


def _summary(counts: dict[str, Any]) -> str:
    reasons = ", ".join(f"{k}: {v:,}" for k, v in counts["dropped_by_reason"].items()) or "none"
    pii = ", ".join(f"{k}: {v:,}" for k, v in counts["pii_replaced"].items()) or "none"
    d = counts["dedup"]
    return (f"**clean**: {counts['in']:,} records in, {counts['kept']:,} kept, {counts['dropped']:,} dropped "
            f"({reasons}).\n\nPII replaced: {pii}.\n\nNear dedup: {d.get('bands')}×{d.get('rows')} banding, "
            f"{d.get('candidate_pairs', 0):,} candidate pairs, {d.get('verified_pairs', 0):,} verified; audit on "
            f"{d.get('audit_pairs', 0):,} pairs (exact Jaccard): precision {d.get('precision')}, recall "
            f"{d.get('recall')}, F1 {d.get('f1')}; true pairs left with both kept: {d.get('residual')}.")
