"""Clean's outputs, streamed shard by shard from the work tables: memory is bounded by one work table, one output
shard per source and a ledger row group, not by the corpus.

Bytes equal those of writing everything at once (the kept shards are cut every `shard_records` rows of a source
as before; the ledger is one Parquet row group per LEDGER_ROWS rows, so a ledger up to that size is the same
file) and the counts, the quality curve and the report are summed over shards to the same values.
"""

from __future__ import annotations

from collections import Counter, defaultdict
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from specs.clean import CleanSpec
from tasks.core.files import atomic_path, write_json_atomic, write_text_atomic
from tasks.data import dedup_files, quality
from tasks.data.cleaning import LEDGER_SCHEMA
from tasks.data.dedup_global import Decisions
from tasks.data.dedup_tasks import Layout, read_rows
from tasks.data.lsh import sorted_unique
from tasks.data.records import RECORD_SCHEMA, write_table

LEDGER_ROWS = 16_384


class KeptShards:
    """`<source>-NNNNN.parquet` files of `size` records each, written as each fills."""

    def __init__(self, folder: Path, size: int):
        self.folder, self.size = folder, size
        self.buffers: dict[str, list[dict]] = defaultdict(list)
        self.written: Counter[str] = Counter()
        folder.mkdir(parents=True, exist_ok=True)

    def add(self, source: str, record: dict) -> None:
        self.buffers[source].append(record)
        if len(self.buffers[source]) == self.size:
            self._flush(source)

    def _flush(self, source: str) -> None:
        with atomic_path(self.folder / f"{source}-{self.written[source]:05d}.parquet") as tmp:
            write_table(self.buffers[source], RECORD_SCHEMA, tmp)
        self.written[source] += 1
        self.buffers[source] = []

    def close(self) -> None:
        for source in sorted(self.buffers):
            if self.buffers[source]:
                self._flush(source)


class Ledger:
    """dropped.parquet, a row group per LEDGER_ROWS rows (no drops: a file of no rows, as before). A context
    manager: the file is renamed into place on a clean exit only."""

    def __init__(self, path: Path):
        self.context, self.rows, self.flushed = atomic_path(path), [], False

    def __enter__(self) -> "Ledger":
        self.writer = pq.ParquetWriter(self.context.__enter__(), LEDGER_SCHEMA, compression="zstd",
                                       write_statistics=True)
        return self

    def add(self, row: dict) -> None:
        self.rows.append(row)
        if len(self.rows) == LEDGER_ROWS:
            self._flush()

    def _flush(self) -> None:
        self.writer.write_table(pa.Table.from_pylist(self.rows, schema=LEDGER_SCHEMA))
        self.rows, self.flushed = [], True

    def __exit__(self, *exc: Any) -> None:
        if exc[0] is None and (self.rows or not self.flushed):
            self._flush()
        self.writer.close()
        self.context.__exit__(*exc)


class CurveTally:
    """`quality.threshold_curve` summed shard by shard: per source, the measured documents and words and, per
    threshold, those scoring at or above it."""

    def __init__(self, thresholds: list[float]):
        self.thresholds = thresholds
        self.measured: dict[str, list[int]] = defaultdict(lambda: [0, 0])
        self.kept: dict[tuple[float, str], list[int]] = defaultdict(lambda: [0, 0])

    def add(self, source: str, score: float | None, words: int) -> None:
        if score is None:
            return
        for src in (source, "all"):
            self.measured[src][0] += 1
            self.measured[src][1] += words
            for t in self.thresholds:
                if score >= t:
                    self.kept[(t, src)][0] += 1
                    self.kept[(t, src)][1] += words

    def rows(self) -> list[dict[str, object]]:
        if not self.measured:
            return []
        rows: list[dict[str, object]] = []
        for t in self.thresholds:
            for src in [*sorted(set(self.measured) - {"all"}), "all"]:
                (n, total_words), (docs, words) = self.measured[src], self.kept.get((t, src), [0, 0])
                rows.append({"threshold": round(t, 6), "source": src, "docs": docs, "words": words,
                             "docs_share": round(docs / n, 6),
                             "words_share": round(words / total_words, 6) if total_words else 0.0})
        return rows


def keeper_ids(layout: Layout, decisions: Decisions) -> dict[int, str]:
    """The ids of the documents kept for the dropped ones (read back from the shards: only those rows)."""
    keepers = sorted_unique(decisions.keeper)
    return dict(zip(keepers.tolist(), read_rows(layout, keepers, "id")))


def write_outputs(layout: Layout, spec: CleanSpec, out: Path, dedup: dict[str, Any],
                  decon: dict[str, Any]) -> dict[str, Any]:
    """Kept shards, the ledger and report.json; returns the counts."""
    d: Decisions = dedup["decisions"]
    names = keeper_ids(layout, d)
    kept = KeptShards(out / "shards", spec.shard_records)
    by_source: dict[str, Counter] = defaultdict(Counter)
    pii: Counter[str] = Counter()
    curve = CurveTally(spec.quality.curve)
    with Ledger(out / "dropped.parquet") as ledger:
        for s in range(len(layout.stems)):
            _shard_outputs(layout, s, spec, d, names, kept, ledger, by_source, pii, curve)
        kept.close()  # inside: a failed shard write must not leave the ledger published (nothing is, on failure)
    return _report(by_source, pii, curve.rows(), out, dedup, decon)


def _shard_outputs(layout: Layout, s: int, spec: CleanSpec, d: Decisions, names: dict[int, str], kept: KeptShards,
                   ledger: Ledger, by_source: dict[str, Counter], pii: Counter, curve: CurveTally) -> None:
    """One work table's rows to the kept shards or the ledger, counted."""
    lo, hi = np.searchsorted(d.rows, [layout.offsets[s], layout.offsets[s + 1]])
    decided = {int(g) - layout.offsets[s]: k for k, g in enumerate(d.rows[lo:hi].tolist(), start=int(lo))}
    table = pq.read_table(dedup_files.at(layout.base(s), ".parquet"))
    for i, r in enumerate(table.to_pylist()):
        src = r["source"]
        by_source[src]["in"] += 1
        pii.update({k: v for k, v in zip(r["pii_kinds"], r["pii_counts"])})
        if spec.quality.enabled:
            curve.add(src, r["quality"], len(r["text"].split()))
        reason, kept_id, detail = r["reason"], None, r["detail"]
        if reason is None and i in decided:
            k = decided[i]
            kept_id = names[int(d.keeper[k])]
            reason, detail = (("near_duplicate", f"Jaccard {round(float(d.sim[k]), 6):.3f}") if d.near[k]
                              else ("exact_duplicate", "identical after normalization"))
        if reason is None:
            by_source[src]["kept"] += 1
            kept.add(src, {k: r[k] for k in RECORD_SCHEMA.names})
        else:
            by_source[src][f"dropped:{reason}"] += 1
            ledger.add({"id": r["id"], "source": src, "reason": reason, "score": r["quality"],
                        "kept_id": kept_id, "detail": detail, "text": r["text"]})


def _report(by_source: dict[str, Counter], pii: Counter, curve: list[dict], out: Path, dedup: dict[str, Any],
            decon: dict[str, Any]) -> dict[str, Any]:
    sources = {s: dict(sorted(c.items())) for s, c in sorted(by_source.items())}
    for s, c in sources.items():  # the conservation law: every record is kept or dropped with a reason
        dropped = sum(v for k, v in c.items() if k.startswith("dropped:"))
        if c["in"] != c.get("kept", 0) + dropped:
            raise AssertionError(f"clean: source {s} lost records: in {c['in']} != kept + dropped")
    totals: Counter = Counter()
    for c in sources.values():
        totals.update(c)
    counts = {"in": totals["in"], "kept": totals.get("kept", 0), "dropped": totals["in"] - totals.get("kept", 0),
              "dropped_by_reason": {k.split(":", 1)[1]: v for k, v in sorted(totals.items()) if ":" in k},
              "by_source": sources, "pii_replaced": dict(sorted(pii.items())), "dedup": dedup["summary"]}
    if curve:  # what each quality threshold would keep, per source (the quality filter alone; a DVC plot)
        write_text_atomic(out / "quality_curve.csv", quality.curve_csv(curve))
    write_json_atomic(out / "report.json", {**counts, "dedup_detail": dedup["detail"], "quality_curve": curve,
                                            "decontamination": decon})
    return counts
