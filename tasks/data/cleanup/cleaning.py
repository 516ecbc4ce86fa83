"""The clean stage's two phases: per-shard filtering (resumable) and corpus-wide deduplication.

Phase 1 runs, per ingest shard, an ordered list of steps (`tasks.data.cleanup.steps`; `shard_steps` builds it):
normalize -> PII scrub -> drop the blank -> the filters of `clean.filters` -> exact key -> MinHash signature.
It writes the shard's work table (records + quality score + drop reason + exact-dedup key + PII counts; the
record's `meta` JSON also gets `pii: {kind: count}` when anything was scrubbed) and its dedup inputs. Phase 2
(`tasks.data.dedup.dedup_global`, out of core) decides exact and near duplicates from them; `deduplicate` here
is the same decision in memory, over a whole table (the reference the out-of-core one is tested against).
"""

from __future__ import annotations

import operator
from collections import defaultdict
from functools import lru_cache
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from specs.clean import CleanSpec
from tasks.core.files import atomic_path
from tasks.data.cleanup.filter_steps import DecontaminationStep, FilterStep, LanguageStep, QualityStep, filter_step
from tasks.data.cleanup.steps import (Batch, DropEmpty, ExactKey, MinHashSignature, Normalize, RepeatedLines,
                                      ScrubPii, Step, run_steps)
from tasks.data.cleanup.textbatch import Encoded
from tasks.data.dedup import dedup_audit, minhash
from tasks.data.filtering import filters
from tasks.data.records import RECORD_SCHEMA

WORK_SCHEMA = pa.schema(
    [*RECORD_SCHEMA, ("quality", pa.float64()), ("reason", pa.string()), ("detail", pa.string()),
     ("exact_key", pa.string()), ("pii_kinds", pa.list_(pa.string())), ("pii_counts", pa.list_(pa.int64()))]
)


# Every kind of step, in the order of the pass: the report asks each for its fields, run or not
STEP_KINDS: tuple[type[Step], ...] = (Normalize, ScrubPii, DropEmpty, FilterStep, QualityStep, LanguageStep,
                                      DecontaminationStep, ExactKey, MinHashSignature, RepeatedLines)


def shard_steps(spec: CleanSpec, built: list[filters.Filter]) -> list[Step]:
    """Phase 1's steps in order, up to the exact key (`MinHashSignature`, which writes files, is added by
    `process_shard`): normalize, PII (before any filter sees the text), drop the blank, the filters `built`
    (`filters_for`: those of `clean.filters`, in its order), the exact key."""
    return [Normalize(spec.normalization), ScrubPii(spec.pii), DropEmpty(), *map(filter_step, built), ExactKey()]


def clean_record(r: dict[str, Any], spec: CleanSpec, root: Path,
                 built: list[filters.Filter] | None = None) -> dict[str, Any]:
    """One record through the steps (first drop wins); returns the work row. A drop's `reason` is its verdict's
    reason; `detail` is JSON naming the filter and its signals. `built`: the filters (`filters_for`), else built
    with nothing indexed for decontamination."""
    return clean_records([r], spec, root, built)[0]


def clean_records(records: list[dict[str, Any]], spec: CleanSpec, root: Path,
                  built: list[filters.Filter] | None = None) -> list[dict[str, Any]]:
    """`[clean_record(r, ...) for r in records]`, each step over the whole list (the same verdicts; language id
    done for many documents at once)."""
    built = built if built is not None else filters_for(spec, root)
    batch = Batch.of([r["text"] for r in records], [r["meta"] for r in records],
                     lambda rows: [records[i] for i in rows], spec)
    columns = run_steps(shard_steps(spec, built), batch).columns()
    columns.update(zip(("pii_kinds", "pii_counts"), (array.to_pylist() for array in batch.pii_arrays())))
    return [{**r, **{name: values[i] for name, values in columns.items()}} for i, r in enumerate(records)]


@lru_cache(maxsize=4)
def _filters_cached(spec_json: str, root: str, index_texts: tuple[tuple[str, str], ...]) -> list[filters.Filter]:
    return filters.clean_filters(CleanSpec.model_validate_json(spec_json), Path(root), index_texts)


def filters_for(spec: CleanSpec, root: Path, index_texts: tuple[tuple[str, str], ...] = ()) -> list[filters.Filter]:
    """The filters for `spec`, built once per process (the lexicon, language model and n-gram index)."""
    return _filters_cached(spec.model_dump_json(), str(root), tuple(index_texts))


def process_shard(shard: Path, target: Path, spec: CleanSpec, seed: int, root: Path, buckets: int,
                  index_texts: tuple[tuple[str, str], ...] = ()) -> int:
    """Phase 1 for one ingest shard: `shard_steps` then `MinHashSignature`; returns its record count. Its
    signatures and dedup inputs (`tasks.data.dedup.dedup_files`, band keys in `buckets` buckets) are written
    first and the table last, so the table's presence (atomically renamed into place) means the shard is
    finished. `index_texts`: the (name, text) pairs decontamination drops overlaps with. Column by column: the
    record columns clean does not change go from the ingest table to the work table as Arrow arrays, never as
    Python objects."""
    with pq.ParquetFile(shard) as file:     # (`pq.read_table` would add a dataset's set-up, ~0.5 ms a shard)
        table = file.read()
    texts, metas = table.column("text").to_pylist(), table.column("meta").to_pylist()
    steps = [*shard_steps(spec, filters_for(spec, root, index_texts)),
             MinHashSignature(spec.dedup, seed, buckets, target.with_suffix(""))]
    batch = Batch.of(texts, metas, lambda rows: table.take(rows).to_pylist(), spec, table.column("id").to_pylist())
    columns = run_steps(steps, batch).columns()
    made = dict(zip(("pii_kinds", "pii_counts"), batch.pii_arrays()))
    unchanged = {"text": texts, "meta": metas}      # columns clean left as they were: the input's Arrow arrays
    made.update((name, table.column(name) if _same(values, unchanged.get(name)) else
                 text_array(values, batch.encoded) if name == "text" else pa.array(values, WORK_SCHEMA.field(name).type))
                for name, values in columns.items())
    work = pa.table([made[name] if name in made else table.column(name) for name in WORK_SCHEMA.names],
                    schema=WORK_SCHEMA)
    with atomic_path(target) as tmp:
        write_work_table(work, tmp)
    return table.num_rows


def _same(values: list, before: list | None) -> bool:
    return before is not None and all(a is b for a, b in zip(values, before))


def text_array(texts: list[str], encoded: Encoded | None) -> pa.Array:
    """`pa.array(texts, pa.string())`, cut from `encoded`'s bytes when they are these texts' (`textbatch.Encoded`:
    each text's UTF-8 followed by a `\n`): one exact-size copy of the shard's text, no string visited. Made from
    the strings, the array cost ~2-4 ms a shard, mostly page faults of a buffer grown by doubling."""
    if (encoded is None or len(encoded.texts) != len(texts) or encoded.data.size >= 1 << 31
            or any(map(operator.is_not, encoded.texts, texts))):
        return pa.array(texts, pa.string())
    offsets = np.zeros(len(texts) + 1, np.int32)
    offsets[1:] = encoded.ends + 1                                       # each text with its separator
    joined = pa.Array.from_buffers(pa.string(), len(texts), [None, pa.py_buffer(offsets), pa.py_buffer(encoded.data)])
    return pc.utf8_slice_codeunits(joined, 0, -1)                       # ... less the separator


def write_work_table(table: pa.Table, path: Path) -> None:
    """A work table as Parquet, written for the one reader it has (`tasks.data.cleanup.clean_outputs`, and the
    global phase's few rows), before the stage deletes it: no dictionary pages (Parquet would build a dictionary of
    every text, id and key to give it up), no statistics (no reader filters on them) and no compression but on
    `detail`, the filters' JSON signals (a fifth of a table where the filters drop a third of the rows; zstd
    makes it 6 % of that). zstd on the text was ~10 % of the shard phase's CPU (and its read back in the outputs
    phase); on the other, short columns it cost ~25 % of the write (a compressor set up per column) to save ~4 %
    of the file. The work folder holds about the corpus's text size on disk."""
    pq.write_table(table, path, compression={n: "zstd" if n == "detail" else "none" for n in table.schema.names},
                   use_dictionary=False, write_statistics=False)


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
