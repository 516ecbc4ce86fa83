"""The clean stage's two phases: per-shard filtering (resumable) and corpus-wide deduplication.

Phase 1 writes, per ingest shard, a work table (records + quality score + drop reason + exact-dedup key + PII
counts) and the shard's MinHash signatures. Phase 2 reads them all back and decides exact and near duplicates.
"""

from __future__ import annotations

from collections import defaultdict
from functools import lru_cache
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from specs.clean import CleanSpec
from tasks.core.files import atomic_path
from tasks.data import dedup_audit, minhash
from tasks.data.normalize import exact_key, normalize_text
from tasks.data.pii import scrub_pii
from tasks.data.quality import quality_score
from tasks.data.records import RECORD_SCHEMA, write_table
from tasks.data.toxicity import load_lexicon, toxicity

WORK_SCHEMA = pa.schema(
    [*RECORD_SCHEMA, ("quality", pa.float64()), ("reason", pa.string()), ("detail", pa.string()),
     ("exact_key", pa.string()), ("pii_kinds", pa.list_(pa.string())), ("pii_counts", pa.list_(pa.int64()))]
)
LEDGER_SCHEMA = pa.schema(
    [("id", pa.string()), ("source", pa.string()), ("reason", pa.string()), ("score", pa.float64()),
     ("kept_id", pa.string()), ("detail", pa.string()), ("text", pa.string())]
)


@lru_cache(maxsize=4)
def _lexicon(path: str | None):
    return load_lexicon(Path(path) if path else None)


def clean_record(r: dict[str, Any], spec: CleanSpec, root: Path) -> dict[str, Any]:
    """One record through normalize -> PII -> quality -> toxicity; returns the work row."""
    text = normalize_text(r["text"], spec.normalization)
    pii: dict[str, int] = {}
    if spec.pii.enabled:
        text, pii = scrub_pii(text, spec.pii.kinds)
    reason = detail = None
    score = 1.0
    if not text.strip():
        reason, detail = "empty", "nothing left after normalization"
    if reason is None and spec.quality.enabled:
        profile = spec.quality.profiles.get(r["source"], "prose")
        verdict = quality_score(text, getattr(spec.quality, profile))
        score = verdict.score
        if not verdict.keep:
            failed = ", ".join(verdict.failed_rules) or f"mean below {getattr(spec.quality, profile).threshold}"
            reason, detail = "low_quality", f"{profile} score {verdict.score:.3f}; failed: {failed}"
    if reason is None and spec.toxicity.enabled:
        wordlist = str(root / spec.toxicity.wordlist) if spec.toxicity.wordlist else None
        tox = toxicity(text, _lexicon(wordlist), spec.toxicity)
        if not tox.keep:
            reason, detail = "toxic", f"{tox.hits} hits ({tox.ratio:.2%} of words): {', '.join(tox.matched)}"
    return {**r, "text": text, "quality": round(score, 6), "reason": reason, "detail": detail,
            "exact_key": exact_key(text), "pii_kinds": list(pii), "pii_counts": list(pii.values())}


def process_shard(shard: Path, target: Path, sig_target: Path, spec: CleanSpec, seed: int, root: Path) -> int:
    """Phase 1 for one ingest shard; returns its record count. Signatures are written first and the table last,
    so the table's presence (atomically renamed into place) means the shard is finished."""
    rows = [clean_record(r, spec, root) for r in pq.read_table(shard).to_pylist()]
    sigs = minhash.signatures([r["text"] for r in rows], spec.dedup, seed)  # [rows, num_perm]
    with atomic_path(sig_target) as tmp:
        with open(tmp, "wb") as fh:
            np.save(fh, sigs)
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
