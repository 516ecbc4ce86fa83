"""Clean's per-shard pass as an ordered list of steps (datatrove's pipeline shape): each step is a small object
with a `name`, its work on a `Batch` (`__call__`) and its own fields of report.json.

The list (`tasks.data.cleanup.cleaning.shard_steps`, plus `MinHashSignature` in the stage): `Normalize` ->
`ScrubPii` (before anything downstream sees the text) -> `DropEmpty` -> the filters of `clean.filters` in their
order (`tasks.data.cleanup.filter_steps`: quality, language, toxicity, decontamination; first drop wins) ->
`ExactKey` -> `MinHashSignature` (the shard's dedup inputs, through `tasks.data.dedup.minhash`).

Report fields. A step's figures are tallied per work table in the output phase (`Step.tally`, on the stage's
executor) and turned into its fields of report.json from all the tables' tallies (`Step.report`). Both are class
methods: a step that is off or not configured reports too (no PII replaced, decontamination `enabled: false`).
"""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ClassVar

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from specs.clean import CleanSpec, DedupSpec, PIISpec
from tasks.data.cleanup.normalize import NormalForm
from tasks.data.cleanup.textbatch import Encoded, exact_keys, normalize_encoded
from tasks.data.dedup import dedup_files, minhash
from tasks.data.dedup.lsh import spec_banding
from tasks.data.filtering.filters import TextFeatures
from tasks.data.privacy.pii import scrub_pii
from tasks.data.records import meta_json


@dataclass
class Batch:
    """A shard's records on their way through the steps: the columns each step reads and leaves for the next.
    `live`: the rows no step has dropped yet (a dropped row keeps its first reason; later steps skip it)."""

    texts: list[str]                                   # normalized, then scrubbed
    metas: list[str | None]                            # each record's meta JSON (what was scrubbed, its language)
    records_of: Callable[[list[int]], list[dict[str, Any]]]   # the whole records of some rows (for the filters)
    quality: list[float | None]                        # the quality score; None: not measured
    ids: Sequence[str] = ()
    encoded: Encoded | None = None                     # `texts` as the compiled loops read them
    live: list[int] = field(default_factory=list)
    reason: list[str | None] = field(default_factory=list)
    detail: list[str | None] = field(default_factory=list)
    pii: list[dict[str, int]] = field(default_factory=list)    # replaced PII by kind
    exact_key: list[str] = field(default_factory=list)
    docs: dict[int, dict[str, Any]] | None = None      # the filters' documents, by row

    @classmethod
    def of(cls, texts: list[str], metas: list[str | None], records_of: Callable[[list[int]], list[dict[str, Any]]],
           spec: CleanSpec, ids: Sequence[str] = ()) -> "Batch":
        """A batch of records given as their texts and metas. Every row starts unscored: None while the quality
        filter is on (it may not reach the row), 1.0 when it is off (every document ranks equal in dedup)."""
        n = len(texts)
        return cls(list(texts), list(metas), records_of, [None if spec.quality.enabled else 1.0] * n, ids,
                   live=list(range(n)), reason=[None] * n, detail=[None] * n, pii=[{}] * n)

    def drop(self, row: int, reason: str, detail: str) -> None:
        self.reason[row], self.detail[row] = reason, detail

    def documents(self) -> dict[int, dict[str, Any]]:
        """The filters' documents (the record, its current text, the text's shared `TextFeatures`) of the rows
        live when a filter first asks; built once, so each text's features are computed once for all filters."""
        if self.docs is None:
            self.docs = {i: {**r, "text": self.texts[i], "features": TextFeatures(self.texts[i])}
                         for i, r in zip(self.live, self.records_of(self.live))}
        return self.docs

    def columns(self) -> dict[str, list]:
        """The work-table columns the steps made or changed (`cleaning.WORK_SCHEMA`), the PII counts excepted
        (`pii_arrays`): the batch's own lists, nothing copied."""
        return {"text": self.texts, "meta": self.metas, "quality": self.quality, "reason": self.reason,
                "detail": self.detail, "exact_key": self.exact_key}

    def pii_arrays(self) -> tuple[pa.Array, pa.Array]:
        """The work table's `pii_kinds` and `pii_counts`: each row's replaced PII kinds and their counts, as
        Arrow lists made from the counts flattened. No Python list per row: a shard's thousands of them, kept
        alive to the table's build, were enough to set off a full garbage collection (~0.1 s) every few shards."""
        if not any(self.pii):                         # no PII anywhere (or scrubbing off): every list empty
            offsets = pa.array(np.zeros(len(self.pii) + 1, np.int32))
            return (pa.ListArray.from_arrays(offsets, pa.array([], pa.string())),
                    pa.ListArray.from_arrays(offsets, pa.array([], pa.int64())))
        sizes = np.fromiter(map(len, self.pii), np.int32, len(self.pii))
        offsets = pa.array(np.concatenate([np.zeros(1, np.int32), np.cumsum(sizes, dtype=np.int32)]))
        kinds = pa.array([kind for counts in self.pii for kind in counts], pa.string())
        counts = pa.array([n for counts in self.pii for n in counts.values()], pa.int64())
        return pa.ListArray.from_arrays(offsets, kinds), pa.ListArray.from_arrays(offsets, counts)


@dataclass(frozen=True)
class WorkTable:
    """One work table as the output phase's tallies read it: its columns, and its sources dictionary-encoded
    (`codes[i]` is row i's index in `sources`) for per-source tallies."""

    columns: dict[str, pa.Array]
    sources: list[str]
    codes: np.ndarray
    lines: dict[str, int] | None = None    # the repeated lines taken out of its texts (`linededup.Rewrite`)


@dataclass(frozen=True)
class ReportFacts:
    """What the steps' report fields are made of: each work table's tallies (by step class name), the
    corpus-wide dedup's report, the decontamination index's description and the output folder."""

    spec: CleanSpec
    out: Path
    tallies: list[dict[str, Any]]
    dedup: dict[str, Any]
    decontamination: dict[str, Any]
    lines: dict[str, Any] | None = None     # the repeated lines found corpus-wide (`linededup.Repeats.summary`)

    def of(self, kind: type) -> list[Any]:
        """Step `kind`'s tally of every work table."""
        return [t[kind.__name__] for t in self.tallies]


class Step:
    """One step of the per-shard pass: `name`, its work on a batch, and its report fields. `counted`: those of
    its fields that are also the stage's result counts (`StageResult.counts`)."""

    name: ClassVar[str] = ""
    counted: ClassVar[tuple[str, ...]] = ()

    def __call__(self, batch: Batch) -> None:
        raise NotImplementedError

    @classmethod
    def tally(cls, spec: CleanSpec, table: WorkTable) -> Any:
        """Its figures in one work table (None: it has none); summed by `report`."""
        return None

    @classmethod
    def report(cls, facts: ReportFacts) -> dict[str, Any]:
        """Its fields of report.json."""
        return {}


@dataclass(frozen=True)
class Normalize(Step):
    """Unicode form, control characters, line endings, blank lines (`tasks.data.cleanup.normalize`), over the
    batch at once (`textbatch.normalize_encoded`); the texts are encoded for the compiled loops here."""

    form: NormalForm
    name: ClassVar[str] = "normalize"

    def __call__(self, batch: Batch) -> None:
        batch.encoded = normalize_encoded(batch.texts, self.form)
        batch.texts = list(batch.encoded.texts)


@dataclass(frozen=True)
class ScrubPii(Step):
    """PII replaced by placeholders (`tasks.data.privacy.pii`); a record's meta gets `pii: {kind: count}` when
    anything was scrubbed (a reviewer sees it happened). Reports `pii_replaced`: the counts by kind, every
    record's (kept or dropped)."""

    spec: PIISpec
    name: ClassVar[str] = "pii"
    counted: ClassVar[tuple[str, ...]] = ("pii_replaced",)

    def __call__(self, batch: Batch) -> None:
        if self.spec.enabled:
            scrubbed = [scrub_pii(t, self.spec.kinds, self.spec.keep_addresses) for t in batch.texts]
            batch.texts, batch.pii = [t for t, _ in scrubbed], [counts for _, counts in scrubbed]
            batch.encoded = Encoded.of(batch.texts)
        if any(batch.pii):          # (else no meta changes: scrubbing off, or nothing found in the shard)
            batch.metas = [_with_pii(meta, counts) for meta, counts in zip(batch.metas, batch.pii)]

    @classmethod
    def tally(cls, spec: CleanSpec, table: WorkTable) -> dict[str, int]:
        col = table.columns
        kinds = pa.table({"kind": pc.list_flatten(col["pii_kinds"]), "n": pc.list_flatten(col["pii_counts"])})
        pii = kinds.group_by("kind").aggregate([("n", "sum")])
        return dict(zip(pii.column("kind").to_pylist(), pii.column("n_sum").to_pylist()))

    @classmethod
    def report(cls, facts: ReportFacts) -> dict[str, Any]:
        total: Counter[str] = Counter()
        for counts in facts.of(cls):
            total.update(counts)
        return {"pii_replaced": dict(sorted(total.items()))}


def _with_pii(meta: str | None, pii: dict[str, int]) -> str | None:
    if not any(pii.values()):
        return meta
    return meta_json({**json.loads(meta or "{}"), "pii": {k: v for k, v in sorted(pii.items()) if v}})


@dataclass(frozen=True)
class DropEmpty(Step):
    """A text left empty or blank is dropped (reason `empty`) before any filter sees it."""

    name: ClassVar[str] = "empty"

    def __call__(self, batch: Batch) -> None:
        live = [i for i in batch.live if batch.texts[i] and not batch.texts[i].isspace()]   # (no stripped copy)
        for i in set(batch.live).difference(live):
            batch.drop(i, "empty", "nothing left after normalization")
        batch.live = live


@dataclass(frozen=True)
class ExactKey(Step):
    """Each final text's exact-dedup key (NFKC + casefold, whitespace collapsed: `textbatch.exact_keys`), for
    every row: the corpus-wide dedup reads it only for rows the filters kept."""

    name: ClassVar[str] = "exact_key"

    def __call__(self, batch: Batch) -> None:
        batch.exact_key = exact_keys(batch.encoded if batch.encoded is not None else Encoded.of(batch.texts))


@dataclass(frozen=True)
class MinHashSignature(Step):
    """The shard's dedup inputs (`write_dedup_inputs`) at `base`: from the MinHash signatures of the final texts,
    their band keys in `buckets` buckets; the shingles; the exact keys. Reports the corpus-wide dedup decided on them
    (`tasks.data.dedup.dedup_global`): `dedup` (its summary, counted) and `dedup_detail` (S-curve, audit)."""

    spec: DedupSpec
    seed: int
    buckets: int
    base: Path
    name: ClassVar[str] = "signature"
    counted: ClassVar[tuple[str, ...]] = ("dedup",)

    def __call__(self, batch: Batch) -> None:
        write_dedup_inputs(self.base, list(batch.ids), batch.columns(), self.spec, self.seed, self.buckets,
                           batch.encoded)

    @classmethod
    def report(cls, facts: ReportFacts) -> dict[str, Any]:
        return {"dedup": facts.dedup["summary"], "dedup_detail": facts.dedup["detail"]}


@dataclass(frozen=True)
class RepeatedLines(Step):
    """The output phase's repeated-line removal (`clean.lines`, `tasks.data.dedup.linededup`), after dedup: it
    runs over the corpus, not in the per-shard pass. Reports `lines`: its settings, the repeated lines found,
    the lines and characters taken out, the documents changed and dropped, and the most repeated lines."""

    name: ClassVar[str] = "lines"

    @classmethod
    def tally(cls, spec: CleanSpec, table: WorkTable) -> dict[str, int] | None:
        return table.lines

    @classmethod
    def report(cls, facts: ReportFacts) -> dict[str, Any]:
        spec = facts.spec.lines
        if not spec.enabled:
            return {"lines": {"enabled": False}}
        total: Counter[str] = Counter()
        for tally in facts.of(cls):
            total.update(tally or {})
        summary = facts.lines or {}
        return {"lines": {"enabled": True, "min_docs": spec.min_docs, "keep_first": spec.keep_first,
                          "repeated_lines": summary.get("repeated_lines", 0), **dict(sorted(total.items())),
                          "top": summary.get("top", [])}}


def write_dedup_inputs(base: Path, ids: list[str], columns: dict[str, list], spec: DedupSpec, seed: int,
                       buckets: int, encoded: Encoded | None = None, signatures: bool | None = None) -> None:
    """One shard's dedup inputs: the shingles its signatures were made of, band keys in `buckets` buckets,
    exact digests and the best-first run (`tasks.data.dedup.dedup_files`), from its rows' ids and work columns
    (`text`, `reason`, `quality`, `exact_key`); `encoded`: the texts as `textbatch.Encoded`, when at hand.
    `signatures`: also the signatures themselves (`<stem>.sig.npy`); by default only when `spec.verify` is off,
    the one case the global phase reads them (it judges candidates by their estimate; verification and the
    audit read the shingles)."""
    sigs, hashes, offsets = _live_signatures(columns, spec, seed, encoded)                          # [rows, P]
    if (not spec.verify) if signatures is None else signatures:
        dedup_files.save_npy(dedup_files.at(base, ".sig.npy"), sigs)
    dedup_files.save_shingles(base, hashes, offsets)
    bands, band_rows = spec_banding(spec)
    dedup_files.write_shard_inputs(base, sigs, ids, columns, bands, band_rows, buckets)


def _live_signatures(columns: dict[str, list], spec: DedupSpec, seed: int,
                     encoded: Encoded | None) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """`minhash.signatures_and_shingles` of the rows no filter dropped; a dropped row gets a zero signature and
    no shingle. Every reader (band keys, verification, the audit, `.sig.npy`) reads only rows the filters kept,
    and a crawl's filters drop a third to a half of its rows: their shingling was work for nothing."""
    texts, n = columns["text"], len(columns["text"])
    live = [i for i, reason in enumerate(columns["reason"]) if reason is None]
    if len(live) == n:
        return minhash.signatures_and_shingles(texts, spec, seed, encoded)
    part = None if encoded is None else encoded.select(live)
    found, hashes, found_offsets = minhash.signatures_and_shingles([texts[i] for i in live], spec, seed, part)
    sigs = np.zeros((n, spec.num_perm), dtype=np.uint32)                     # [rows, P]
    sigs[live] = found
    lengths = np.zeros(n, np.int64)
    lengths[live] = np.diff(found_offsets)
    return sigs, hashes, np.concatenate([[0], np.cumsum(lengths)]).astype(np.int64)


def run_steps(steps: Sequence[Step], batch: Batch) -> Batch:
    """The steps in order over `batch`; returns it."""
    for step in steps:
        step(batch)
    return batch
