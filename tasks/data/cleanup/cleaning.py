"""The clean stage's two phases: per-shard filtering (resumable) and corpus-wide deduplication.

Phase 1 writes, per ingest shard, a work table (records + quality score + drop reason + exact-dedup key + PII
counts; the record's `meta` JSON also gets `pii: {kind: count}` when anything was scrubbed) and the shard's
MinHash signatures. Phase 2 (`tasks.data.dedup.dedup_global`, out of core) decides exact and near duplicates from them; `deduplicate` here
is the same decision in memory, over a whole table (the reference the out-of-core one is tested against).
"""

from __future__ import annotations

import json
from collections import defaultdict
from functools import lru_cache
from pathlib import Path
from typing import Any, Callable

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from specs.clean import CleanSpec, DedupSpec
from tasks.core.files import atomic_path
from tasks.data.dedup import dedup_audit, dedup_files, minhash
from tasks.data.filtering import filters
from tasks.data.dedup.lsh import spec_banding
from tasks.data.cleanup.textbatch import Encoded, exact_keys, normalize_encoded
from tasks.data.privacy.pii import scrub_pii
from tasks.data.records import RECORD_SCHEMA, meta_json

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
    columns, _ = clean_columns([r["text"] for r in records], [r["meta"] for r in records],
                               lambda rows: [records[i] for i in rows], spec, built)
    return [{**r, **{name: values[i] for name, values in columns.items()}} for i, r in enumerate(records)]


def clean_columns(texts: list[str], metas: list[str | None], records_of: Callable[[list[int]], list[dict[str, Any]]],
                  spec: CleanSpec, built: list[filters.Filter]) -> tuple[dict[str, list], Encoded]:
    """Phase 1's new and changed work-table columns (`text`, `meta`, `quality`, `reason`, `detail`,
    `exact_key`, `pii_kinds`, `pii_counts`) of a batch of records given as their `texts` and `metas`, and the
    final texts encoded (`textbatch.Encoded`, for the signatures);
    `records_of(rows)` gives the whole records of those rows, for the filters (asked only when some are on).
    Normalization and exact keys run over the batch (`tasks.data.cleanup.textbatch`: equal to the per-document
    functions); PII is scrubbed before any filter sees the text."""
    encoded = normalize_encoded(texts, spec.normalization)
    texts = list(encoded.texts)
    pii: list[dict[str, int]] = [{}] * len(texts)
    if spec.pii.enabled:
        scrubbed = [scrub_pii(t, spec.pii.kinds, spec.pii.keep_addresses) for t in texts]
        texts, pii = [t for t, _ in scrubbed], [counts for _, counts in scrubbed]
        encoded = Encoded.of(texts)
    metas = [_with_pii(meta, counts) for meta, counts in zip(metas, pii)]
    live = [i for i, text in enumerate(texts) if text and not text.isspace()]   # (no stripped copy)
    results: dict[int, list[tuple[str, filters.Verdict]]] = dict.fromkeys(live, [])
    if built and live:
        docs = [{**r, "text": texts[i], "features": filters.TextFeatures(texts[i])}
                for i, r in zip(live, records_of(live))]
        results = dict(zip(live, filters.run_filters_batch(built, docs)))
    columns: dict[str, list] = {"text": texts, "meta": [], "quality": [], "reason": [], "detail": []}
    if not built:           # no verdicts: the fields of `_verdict_fields([])` for every live text, set at once
        empty = _verdict_fields(None, None, spec)
        columns.update(meta=metas, quality=[_verdict_fields([], None, spec)[1]] * len(texts),
                       reason=[None] * len(texts), detail=[None] * len(texts))
        for i in set(range(len(texts))).difference(live):
            columns["quality"][i], columns["reason"][i], columns["detail"][i] = empty[1:]
    for i, meta in enumerate(metas if built else ()):
        meta, score, reason, detail = _verdict_fields(results.get(i), meta, spec)
        for name, value in (("meta", meta), ("quality", score), ("reason", reason), ("detail", detail)):
            columns[name].append(value)
    columns["exact_key"] = exact_keys(encoded)
    columns["pii_kinds"] = [list(counts) for counts in pii]
    columns["pii_counts"] = [list(counts.values()) for counts in pii]
    return columns, encoded


def _with_pii(meta: str | None, pii: dict[str, int]) -> str | None:
    """The record's meta saying what was scrubbed from it (a reviewer sees scrubbing happened)."""
    if not any(pii.values()):
        return meta
    return meta_json({**json.loads(meta or "{}"), "pii": {k: v for k, v in sorted(pii.items()) if v}})


def _verdict_fields(results: list[tuple[str, filters.Verdict]] | None, meta: str | None,
                    spec: CleanSpec) -> tuple[str | None, float | None, str | None, str | None]:
    """(meta, quality, reason, detail) of a record from its filters' verdicts (None: its text was empty)."""
    reason = detail = None
    score: float | None = None if spec.quality.enabled else 1.0   # None: dropped before quality measured it
    if results is None:
        return meta, score, "empty", "nothing left after normalization"
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
    return meta, None if score is None else round(score, 6), reason, detail


@lru_cache(maxsize=4)
def _filters_cached(spec_json: str, root: str, index_texts: tuple[tuple[str, str], ...]) -> list[filters.Filter]:
    return filters.clean_filters(CleanSpec.model_validate_json(spec_json), Path(root), index_texts)


def filters_for(spec: CleanSpec, root: Path, index_texts: tuple[tuple[str, str], ...] = ()) -> list[filters.Filter]:
    """The filters for `spec`, built once per process (the lexicon, language model and n-gram index)."""
    return _filters_cached(spec.model_dump_json(), str(root), tuple(index_texts))


def process_shard(shard: Path, target: Path, spec: CleanSpec, seed: int, root: Path, buckets: int,
                  index_texts: tuple[tuple[str, str], ...] = ()) -> int:
    """Phase 1 for one ingest shard; returns its record count. Its signatures and dedup inputs
    (`tasks.data.dedup.dedup_files`, band keys in `buckets` buckets) are written first and the table last, so the
    table's presence (atomically renamed into place) means the shard is finished. `index_texts`: the
    (name, text) pairs decontamination drops overlaps with. Column by column: the record columns clean does
    not change go from the ingest table to the work table as Arrow arrays, never as Python objects."""
    built = filters_for(spec, root, index_texts)
    table = pq.read_table(shard)
    texts, metas = table.column("text").to_pylist(), table.column("meta").to_pylist()
    columns, encoded = clean_columns(texts, metas, lambda rows: table.take(rows).to_pylist(), spec, built)
    write_dedup_inputs(target.with_suffix(""), table.column("id").to_pylist(), columns, spec.dedup, seed, buckets,
                       encoded)
    unchanged = {"text": texts, "meta": metas}      # columns clean left as they were: the input's Arrow arrays
    work = pa.table([table.column(name) if name not in columns or _same(columns[name], unchanged.get(name))
                     else _arrow(columns[name], field.type) for name, field in zip(WORK_SCHEMA.names, WORK_SCHEMA)],
                    schema=WORK_SCHEMA)
    with atomic_path(target) as tmp:
        write_work_table(work, tmp)
    return table.num_rows


def _same(values: list, before: list | None) -> bool:
    return before is not None and all(a is b for a, b in zip(values, before))


def _arrow(values: list, kind: pa.DataType) -> pa.Array:
    """`pa.array(values, kind)`; a column of empty lists (no PII anywhere) built from its offsets alone."""
    if pa.types.is_list(kind) and not any(values):
        return pa.ListArray.from_arrays(pa.array(np.zeros(len(values) + 1, np.int32)), pa.array([], kind.value_type))
    return pa.array(values, kind)


def write_dedup_inputs(base: Path, ids: list[str], columns: dict[str, list], spec: DedupSpec, seed: int,
                       buckets: int, encoded: Encoded | None = None) -> None:
    """One shard's dedup inputs: signatures, the shingles they were made of, band keys in `buckets` buckets,
    exact digests and the best-first run (`tasks.data.dedup.dedup_files`), from its rows' ids and work columns
    (`text`, `reason`, `quality`, `exact_key`); `encoded`: the texts as `textbatch.Encoded`, when at hand."""
    sigs, hashes, offsets = minhash.signatures_and_shingles(columns["text"], spec, seed, encoded)  # [rows, P]
    dedup_files.save_npy(dedup_files.at(base, ".sig.npy"), sigs)
    dedup_files.save_shingles(base, hashes, offsets)
    bands, band_rows = spec_banding(spec)
    dedup_files.write_shard_inputs(base, sigs, ids, columns, bands, band_rows, buckets)


def write_work_table(table: pa.Table, path: Path) -> None:
    """A work table as Parquet: zstd, but no dictionary pages and no statistics for the columns that are long
    and unique (text, detail, meta, id: Parquet would build a dictionary of every text to give it up, and keep
    min/max copies of texts no reader asks for). The text column is stored uncompressed: zstd on it was ~10 % of
    the shard phase's CPU (and its read back in the outputs phase), for a scratch file the stage deletes at the
    end (the work folder then holds about the corpus's text size on disk). Only clean reads it back
    (`tasks.data.cleanup.clean_outputs`)."""
    unique = ["id", "text", "meta", "detail", "exact_key"]
    pq.write_table(table, path, compression={n: "none" if n == "text" else "zstd" for n in table.schema.names},
                   use_dictionary=[n for n in table.schema.names if n not in unique],
                   write_statistics=[n for n in table.schema.names if n not in unique])


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
