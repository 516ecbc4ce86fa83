"""The clean stage's two phases: per-shard filtering (resumable) and corpus-wide deduplication.

Phase 1 writes, per ingest shard, a work table (records + quality score + drop reason + exact-dedup key + PII
counts; the record's `meta` JSON also gets `pii: {kind: count}` when anything was scrubbed) and the shard's
MinHash signatures. Phase 2 (`tasks.data.dedup_global`, out of core) decides exact and near duplicates from them; `deduplicate` here
is the same decision in memory, over a whole table (the reference the out-of-core one is tested against).
"""

from __future__ import annotations

import json
from collections import defaultdict
from functools import lru_cache
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from specs.clean import CleanSpec
from tasks.core.files import atomic_path
from tasks.data import dedup_audit, dedup_files, dedup_global, filters, minhash
from tasks.data.normalize import exact_key, normalize_text
from tasks.data.pii import scrub_pii
from tasks.data.records import RECORD_SCHEMA, meta_json, write_table

WORK_SCHEMA = pa.schema(
    [*RECORD_SCHEMA, ("quality", pa.float64()), ("reason", pa.string()), ("detail", pa.string()),
     ("exact_key", pa.string()), ("pii_kinds", pa.list_(pa.string())), ("pii_counts", pa.list_(pa.int64()))]
)


def clean_record(r: dict[str, Any], spec: CleanSpec, root: Path,
                 built: list[filters.Filter] | None = None) -> dict[str, Any]:
    """One record through normalize -> PII -> the filters of `clean.filters` (first drop wins); returns the
    work row. A drop's `reason` is its verdict's reason; `detail` is JSON naming the filter and its signals.
    `built`: the filters (`filters_for`), else built with nothing indexed for decontamination."""
    return clean_records([r], spec, root, built)[0]


def clean_records(records: list[dict[str, Any]], spec: CleanSpec, root: Path,
                  built: list[filters.Filter] | None = None) -> list[dict[str, Any]]:
    """`[clean_record(r, ...) for r in records]`, the filters run filter by filter over the whole list
    (`filters.run_filters_batch`: the same verdicts, language id done for many documents at once)."""
    built = built if built is not None else filters_for(spec, root)
    prepared = [_scrub(r, spec) for r in records]
    live = [i for i, (text, _, _) in enumerate(prepared) if text.strip()]
    docs = [{**records[i], "text": prepared[i][0], "features": filters.TextFeatures(prepared[i][0])} for i in live]
    results = filters.run_filters_batch(built, docs)
    verdicts: dict[int, list[tuple[str, filters.Verdict]]] = dict(zip(live, results))
    return [_work_row(r, *prep, verdicts.get(i), spec) for i, (r, prep) in enumerate(zip(records, prepared))]


def _scrub(r: dict[str, Any], spec: CleanSpec) -> tuple[str, dict[str, int], str]:
    """(normalized text with PII replaced, PII counts by kind, the record's meta saying what was scrubbed)."""
    text = normalize_text(r["text"], spec.normalization)
    pii: dict[str, int] = {}
    if spec.pii.enabled:
        text, pii = scrub_pii(text, spec.pii.kinds, spec.pii.keep_addresses)
    meta = r["meta"]
    if any(pii.values()):  # the kept record says what was scrubbed from it (a reviewer sees scrubbing happened)
        meta = meta_json({**json.loads(meta or "{}"), "pii": {k: v for k, v in sorted(pii.items()) if v}})
    return text, pii, meta


def _work_row(r: dict[str, Any], text: str, pii: dict[str, int], meta: str,
              results: list[tuple[str, filters.Verdict]] | None, spec: CleanSpec) -> dict[str, Any]:
    """The work row of a record from its scrubbed text and its filters' verdicts (None: its text was empty)."""
    reason = detail = None
    score: float | None = None if spec.quality.enabled else 1.0   # None: dropped before quality measured it
    if results is None:
        reason, detail = "empty", "nothing left after normalization"
    else:
        for name, verdict in results:
            if name == "quality":
                score = verdict.signals["score"]
            elif name == "language" and "confidence" in verdict.signals:
                lang = next(k[5:] for k in verdict.signals if k.startswith("lang:"))
                meta = meta_json({**json.loads(meta or "{}"), "lang_detected": lang,
                                  "lang_confidence": verdict.signals["confidence"]})
        if (drop := filters.first_drop(results)) is not None:
            name, verdict = drop
            reason = verdict.reason or name
            detail = json.dumps({"filter": name, "signals": json.loads(filters.signals_json(verdict.signals))},
                                sort_keys=True)
    return {**r, "text": text, "meta": meta, "quality": None if score is None else round(score, 6),
            "reason": reason, "detail": detail, "exact_key": exact_key(text), "pii_kinds": list(pii),
            "pii_counts": list(pii.values())}


@lru_cache(maxsize=4)
def _filters_cached(spec_json: str, root: str, index_texts: tuple[tuple[str, str], ...]) -> list[filters.Filter]:
    return filters.clean_filters(CleanSpec.model_validate_json(spec_json), Path(root), index_texts)


def filters_for(spec: CleanSpec, root: Path, index_texts: tuple[tuple[str, str], ...] = ()) -> list[filters.Filter]:
    """The filters for `spec`, built once per process (the lexicon, language model and n-gram index)."""
    return _filters_cached(spec.model_dump_json(), str(root), tuple(index_texts))


def process_shard(shard: Path, target: Path, spec: CleanSpec, seed: int, root: Path, buckets: int,
                  index_texts: tuple[tuple[str, str], ...] = ()) -> int:
    """Phase 1 for one ingest shard; returns its record count. Its signatures and dedup inputs
    (`tasks.data.dedup_files`, band keys in `buckets` buckets) are written first and the table last, so the
    table's presence (atomically renamed into place) means the shard is finished. `index_texts`: the
    (name, text) pairs decontamination drops overlaps with."""
    built = filters_for(spec, root, index_texts)
    rows = clean_records(pq.read_table(shard).to_pylist(), spec, root, built)
    sigs = minhash.signatures([r["text"] for r in rows], spec.dedup, seed)  # [rows, num_perm]
    base = target.with_suffix("")
    dedup_files.save_npy(dedup_files.at(base, ".sig.npy"), sigs)
    bands, band_rows = dedup_global.banding(spec.dedup)
    dedup_files.write_shard_inputs(base, sigs, rows, bands, band_rows, buckets)
    with atomic_path(target) as tmp:
        write_table(rows, WORK_SCHEMA, tmp)
    return len(rows)


def deduplicate(rows: pa.Table, sigs: np.ndarray, spec: CleanSpec, seed: int) -> dict[str, Any]:
    """Phase 2: exact then near duplicates among the records still kept. Returns drop decisions by row index
    plus a deterministic summary for the report."""
    ids = rows.column("id").to_pylist()
    quality = rows.column("quality").to_pylist()
    alive = [i for i, reason in enumerate(rows.column("reason").to_pylist()) if reason is None]
    decisions: dict[int, tuple[str, str, str]] = {}
    best = lambda i: (-quality[i], ids[i])  # noqa: E731  highest quality wins, ties by id (deterministic)

    exact_dropped = 0
    if spec.dedup.exact:
        groups: dict[str, list[int]] = defaultdict(list)
        keys = rows.column("exact_key").to_pylist()
        for i in alive:
            groups[keys[i]].append(i)
        for members in groups.values():
            keeper, *rest = sorted(members, key=best)
            for i in rest:
                decisions[i] = ("exact_duplicate", ids[keeper], "identical after normalization")
        exact_dropped = len(decisions)
        alive = [i for i in alive if i not in decisions]

    summary: dict[str, Any] = {"exact_dropped": exact_dropped}
    detail: dict[str, Any] = {}
    if spec.dedup.near and alive:
        texts = rows.column("text").to_pylist()
        text_of = {ids[i]: texts[i] for i in alive}
        # Candidates are confirmed on exact shingle-set Jaccard (only documents in candidate pairs are shingled
        # again): it removes the signature estimate's noise right at the threshold.
        exact_sets = (lambda batch: minhash.shingle_sets([text_of[i] for i in batch], spec.dedup))
        result = minhash.near_duplicates([ids[i] for i in alive], sigs[alive], [quality[i] for i in alive],
                                         spec.dedup, shingle_sets_fn=exact_sets if spec.dedup.verify else None)
        index = {ids[i]: i for i in alive}
        for dropped_id, kept_id, similarity in result.dropped:
            # the similarity to the document kept for it (never a chain's: see minhash.near_duplicates)
            decisions[index[dropped_id]] = ("near_duplicate", kept_id, f"Jaccard {similarity:.3f}")
        report = dedup_audit.audit([ids[i] for i in alive], text_of.__getitem__, result, spec.dedup, seed)
        summary.update({"near_dropped": len(result.dropped), "bands": result.bands, "rows": result.rows,
                        "candidate_pairs": result.candidate_pairs, "verified_pairs": result.verified_pairs,
                        "clusters": result.clusters, "precision": report["precision"], "recall": report["recall"],
                        "f1": report["f1"], "audit_pairs": report["audit_pairs"], "residual": report["residual"]})
        detail = {"s_curve": minhash.s_curve(result.bands, result.rows), "audit": report}
    return {"reasons": decisions, "summary": summary, "detail": detail}
