"""Stage `clean`: normalize, scrub PII, filter by quality and toxicity, then exact + near deduplicate.

Per ingest shard (resumable; in this process, a process pool or on Dask, see `run.executor`), an ordered list of
steps (`tasks.data.cleanup.steps`, each with its own report fields): normalize -> scrub PII (before anything
downstream sees the text) -> drop the blank -> the filters of `clean.filters` in order (quality with prose or
code rules per source, language, toxicity, decontamination) -> exact key -> MinHash signature. Decontamination
drops a document sharing a word 13-gram with an evaluate prompt, an SFT held-out conversation (instruct's
`heldout.jsonl`: instruct is upstream of clean, it has no upstream of its own, so no cycle) or a configured
benchmark file's item. Finished shards are kept in a work folder outside the DVC out (DVC deletes outs before a rerun), keyed by the spec and the input's manifest, so a
killed and re-run stage skips them. Then, over all shards, out of core (`tasks.data.dedup.dedup_global`: band keys
in buckets on disk, the buckets' and verification ranges' tasks on the same executor, memory bounded by
`clean.memory_gb`): exact dedup on normalized text and MinHash-LSH near dedup, each removed document within the
threshold of the best document kept for it (no chains), and an audit of that decision's precision and recall
against brute-force Jaccard on a sample; with `clean.lines`, the lines repeated across the kept documents
(`tasks.data.dedup.linededup`: menus, notices, footers, a copy's body under other chrome) stay only in the
best-ranked one. The outputs are written by tasks on the same executor, from the work
tables (`tasks.data.cleanup.clean_outputs`).

Outputs (data/clean/): `shards/<source>-NNNNN.parquet` (RECORD_SCHEMA), `dropped.parquet` (the ledger: id,
source, reason, score, kept_id, detail, text), `report.json`, with `clean.lines` `lines_removed.parquet` (id,
source, the lines taken out of a kept document). Counts are conserved: in = kept + dropped.
"""

from __future__ import annotations

import hashlib
import logging
import shutil
from pathlib import Path
from typing import Any

import pyarrow.parquet as pq

from specs.base import spec_hash
from specs.clean import CleanJob, CleanSpec
from specs.results import StageResult
from tasks.core import faults
from tasks.core.executors import release
from tasks.core.files import sha256_file
from tasks.core.runner import MANIFEST, StagePaths
from tasks.core.shardmap import map_shards
from tasks.data.cleanup import clean_outputs, cleaning
from tasks.data.cleanup.filter_steps import DecontaminationStep
from tasks.data.dedup import dedup_global, linededup
from tasks.data.filtering.decontaminate import benchmark_file_texts, heldout_texts, keep_indexable
from tasks.data.validation.verdict import require_validated

log = logging.getLogger("forgeline.clean")
WORK_DIR = "work"


def run(job: CleanJob, paths: StagePaths) -> StageResult:
    spec = job.clean
    require_validated(paths.input("validate"), "clean")
    ingest = paths.input("ingest")
    index_texts, decon = _index_texts(job, paths)
    shards = sorted((ingest / "shards").glob("*.parquet"))
    # Band buckets on disk: enough that one bucket task's entries fit its share of `clean.memory_gb`
    buckets = dedup_global.plan_buckets(sum(pq.ParquetFile(s).metadata.num_rows for s in shards), spec,
                                        paths.executor)
    work = _work_dir(spec, paths, index_texts, buckets)
    # Finished shards (their work table is renamed into place last) were done by an earlier, interrupted run.
    todo = [s for s in shards if not (work / f"{s.stem}.parquet").exists()]
    if len(todo) < len(shards):
        log.info("resumed: %d of %d shards were already finished", len(shards) - len(todo), len(shards))

    finished = [len(shards) - len(todo)]

    def done(i: int, run: dict) -> None:  # here, in the stage's process, as each shard finishes (any order)
        finished[0] += 1
        log.info("shard %d/%d %s cleaned: %d records in %.1f s (pid %d)", finished[0], len(shards), todo[i].name,
                 run["result"], run["seconds"], run["pid"])
        faults.checkpoint("clean.shard_done")

    args = [(s, work / f"{s.stem}.parquet", spec, paths.seed, paths.root, buckets, index_texts) for s in todo]
    map_shards(cleaning.process_shard, args, [s.stem for s in todo], paths.executor, "clean", done)
    release(paths.executor)  # the global phase gets fresh workers, not ones holding the filters' state

    layout = dedup_global.layout_of(work, [s.stem for s in shards])
    dedup_report = dedup_global.deduplicate(layout, spec, paths.seed, paths.executor)
    lines = (linededup.find_repeats(layout, spec, dedup_report["decisions"], paths.executor)
             if spec.lines.enabled else None)
    counts = clean_outputs.write_outputs(layout, spec, paths.out, dedup_report, decon, paths.executor, lines=lines)
    shutil.rmtree(work, ignore_errors=True)  # finished: the work folder has served its purpose
    return StageResult(stage="clean", counts=counts, summary=_summary(counts), table=_table(counts))


def _index_texts(job: CleanJob, paths: StagePaths) -> tuple[tuple[tuple[str, str], ...], dict[str, Any]]:
    """The (name, text) pairs decontamination indexes, and what the report says of them (its step's field)."""
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
    return tuple(kept), DecontaminationStep.describe(job.clean, kept, short)


def _work_dir(spec: CleanSpec, paths: StagePaths, index_texts: tuple[tuple[str, str], ...], buckets: int) -> Path:
    """A folder unique to (spec, seed, input, indexed texts, bucket count): work from another configuration is
    never reused."""
    ingest_manifest = paths.input("ingest") / MANIFEST
    texts = hashlib.sha256("\x1f".join(f"{n}\x1e{t}" for n, t in index_texts).encode()).hexdigest()
    key = hashlib.sha256(
        f"{spec_hash(spec)}:{paths.seed}:{sha256_file(ingest_manifest) if ingest_manifest.exists() else ''}:"
        f"{texts}:{buckets}".encode()
    ).hexdigest()[:16]
    work = paths.root / WORK_DIR / "clean" / key
    work.mkdir(parents=True, exist_ok=True)
    return work


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
