"""The filters of `clean.filters` as steps of clean's per-shard pass (`tasks.data.cleanup.steps`): each wraps one
filter of `tasks.data.filtering.filters` (the protocol clean shares with instruct) and runs it over the batch's
live rows at once. A drop's `reason` is its verdict's reason, its `detail` JSON naming the filter and its
signals. The quality step also keeps each measured score (and reports `quality_curve`), the language step the
detected language in the record's meta; the decontamination step reports what was indexed.
"""

from __future__ import annotations

import json
from collections import Counter
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from specs.clean import CleanSpec
from tasks.core.files import write_text_atomic
from tasks.data.cleanup.steps import Batch, ReportFacts, Step, WorkTable
from tasks.data.filtering import filters, quality
from tasks.data.records import meta_json


class FilterStep(Step):
    """One filter over the batch's live rows (`filters.run_filters_batch`: through its `batch` when it has
    one); the rows it drops leave `live`."""

    def __init__(self, filter: filters.Filter):
        self.filter = filter

    @property
    def name(self) -> str:  # type: ignore[override]  (a filter step is named by its filter)
        return self.filter.name

    def __call__(self, batch: Batch) -> None:
        if not batch.live:
            return
        docs = batch.documents()
        verdicts = [r[0][1] for r in filters.run_filters_batch([self.filter], [docs[i] for i in batch.live])]
        for i, verdict in zip(batch.live, verdicts):
            self.record(batch, i, verdict)
            if not verdict.keep:
                batch.drop(i, verdict.reason or self.name, json.dumps(
                    {"filter": self.name, "signals": json.loads(filters.signals_json(verdict.signals))},
                    sort_keys=True))
        batch.live = [i for i, verdict in zip(batch.live, verdicts) if verdict.keep]

    def record(self, batch: Batch, row: int, verdict: filters.Verdict) -> None:
        """What this filter keeps of a verdict besides a drop (nothing, unless a subclass says so)."""


class QualityStep(FilterStep):
    """The quality filter; each measured row's score (rounded to 6 places) is its `quality`, dropped or not.
    Reports `quality_curve` (and writes quality_curve.csv): per threshold of `clean.quality.curve` and source,
    the measured documents and words scoring at or above it, over every record the filter measured."""

    def record(self, batch: Batch, row: int, verdict: filters.Verdict) -> None:
        batch.quality[row] = round(verdict.signals["score"], 6)

    @classmethod
    def tally(cls, spec: CleanSpec, table: WorkTable) -> dict[str, Any] | None:
        if not spec.quality.enabled:
            return None
        col, codes, n = table.columns, table.codes, len(table.sources)
        measured = pc.is_valid(col["quality"]).to_numpy(zero_copy_only=False)
        score = col["quality"].to_numpy(zero_copy_only=False)
        words = word_counts(col["text"])
        tally = lambda m: np.stack([np.bincount(codes[m], minlength=n),  # noqa: E731
                                    np.bincount(codes[m], weights=words[m], minlength=n)]).astype(
                                        np.int64)  # float sums of integers: exact below 2**53 words
        at, every = [tally(measured & (score >= t)) for t in spec.quality.curve], tally(measured)
        return {src: {"measured": every[:, i].tolist(), "above": [a[:, i].tolist() for a in at]}
                for i, src in enumerate(table.sources)}

    @classmethod
    def report(cls, facts: ReportFacts) -> dict[str, Any]:
        curve: dict[str, Any] = {}
        for tally in facts.of(cls) if facts.spec.quality.enabled else ():
            for src, c in tally.items():
                for name in (src, "all"):
                    total = curve.setdefault(name, {"measured": [0, 0], "above": [[0, 0] for _ in c["above"]]})
                    total["measured"] = [a + b for a, b in zip(total["measured"], c["measured"])]
                    total["above"] = [[a + b for a, b in zip(x, y)] for x, y in zip(total["above"], c["above"])]
        rows = curve_rows(curve, facts.spec.quality.curve if facts.spec.quality.enabled else [])
        if rows:  # what each quality threshold would keep, per source (the quality filter alone; a DVC plot)
            write_text_atomic(facts.out / "quality_curve.csv", quality.curve_csv(rows))
        return {"quality_curve": rows}


def word_counts(text: pa.Array) -> np.ndarray:
    """`len(t.split())` of every text. Arrow's whitespace set is Python's `str.isspace` (checked over every code
    point in tests/test_clean_outputs.py) but it does not merge runs: empty pieces are not words."""
    pieces = pc.utf8_split_whitespace(text)
    parents = pc.list_parent_indices(pieces).to_numpy()
    nonempty = pc.greater(pc.binary_length(pc.list_flatten(pieces)), 0).to_numpy(zero_copy_only=False)
    return np.bincount(parents[nonempty], minlength=len(text)).astype(np.int64)


def curve_rows(curve: dict[str, Any], thresholds: list[float]) -> list[dict[str, object]]:
    """`quality.threshold_curve`'s rows from the summed tallies: per threshold and source (sources with a
    measured document, then "all"), the documents and words scoring at or above it and their shares."""
    measured = {src: c for src, c in curve.items() if c["measured"][0]}
    if not measured:
        return []
    rows: list[dict[str, object]] = []
    for i, t in enumerate(thresholds):
        for src in [*sorted(set(measured) - {"all"}), "all"]:
            (n, total_words), (docs, words) = measured[src]["measured"], measured[src]["above"][i]
            rows.append({"threshold": round(t, 6), "source": src, "docs": docs, "words": words,
                         "docs_share": round(docs / n, 6),
                         "words_share": round(words / total_words, 6) if total_words else 0.0})
    return rows


class LanguageStep(FilterStep):
    """The language filter; a row whose language was identified (dropped or not) gets `lang_detected` and
    `lang_confidence` in its meta."""

    def record(self, batch: Batch, row: int, verdict: filters.Verdict) -> None:
        if "confidence" in verdict.signals:
            lang = next(k[5:] for k in verdict.signals if k.startswith("lang:"))
            batch.metas[row] = meta_json({**json.loads(batch.metas[row] or "{}"), "lang_detected": lang,
                                          "lang_confidence": verdict.signals["confidence"]})


class DecontaminationStep(FilterStep):
    """The decontamination filter. Reports `decontamination`: what its index holds (`describe`), or
    `enabled: false` when it is off or not in `clean.filters`."""

    @classmethod
    def describe(cls, spec: CleanSpec, indexed: list[tuple[str, str]], short: int) -> dict[str, Any]:
        """The index of (name, text) pairs `indexed` (`short`: texts left out as too short to index), as the
        report says it; the origin of a name is its part before the last `:`."""
        d = spec.decontamination
        origins = Counter(name.rsplit(":", 1)[0] for name, _ in indexed)
        return {"enabled": True, "ngram": d.ngram, "mode": d.mode, "indexed": len(indexed), "short": short,
                "by_origin": dict(sorted(origins.items()))}

    @classmethod
    def report(cls, facts: ReportFacts) -> dict[str, Any]:
        return {"decontamination": facts.decontamination}


STEP_OF = {"quality": QualityStep, "language": LanguageStep, "decontamination": DecontaminationStep}


def filter_step(f: filters.Filter) -> FilterStep:
    """The step running filter `f` (a plain `FilterStep` for a filter that keeps nothing of its verdicts)."""
    return STEP_OF.get(f.name, FilterStep)(f)
