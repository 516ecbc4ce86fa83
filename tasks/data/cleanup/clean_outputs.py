"""Clean's outputs from the work tables, as tasks on the stage's executor (`tasks.data.cleanup.clean_output_tasks`):
memory is bounded by about one work table per task, and the stage's process only plans and sums.

1. One task per work table decides each row kept or dropped (its filters' reason, else the dedup decision, else
   what the repeated-line removal left of it: `tasks.data.dedup.linededup`, when `clean.lines` is on) and tallies
   it; it writes the table's kept row numbers, their rewritten texts and its ledger rows.
2. From the kept counts per (table, source), prefix sums place every kept record at its position in its source;
   the shards `<source>-NNNNN.parquet` (cut every `shard_records` kept rows of a source, in table order, or at
   the row whose text brings the shard to `shard_bytes`: `shard_cuts`) are
   written by tasks from slices of the tables, while one task streams the ledger parts into dropped.parquet.
3. The report: the outcome counts are the tables' tallies summed; every other field is a step's own
   (`tasks.data.cleanup.steps`: PII replaced, the quality curve, decontamination, dedup), from its tallies.

Bytes equal those of the former row-by-row writer (one table per kept shard; the ledger one Parquet row group
per LEDGER_ROWS rows) whatever the executor: tests/test_clean_outputs.py checks them against it.
"""

from __future__ import annotations

import logging
import shutil
import time
from collections import Counter, defaultdict
from pathlib import Path
from typing import Any, Callable

import numpy as np

from specs.clean import CleanSpec
from specs.run import ExecutorSpec
from tasks.core.files import write_json_atomic
from tasks.core.shardmap import map_shards
from tasks.data.cleanup.cleaning import STEP_KINDS
from tasks.data.cleanup.steps import ReportFacts
from tasks.data.cleanup.clean_output_tasks import (KeptShard, Piece, call, kept_bytes, part, summarize_table,
                                                   write_kept, write_ledger, write_removed)
from tasks.data.dedup.dedup_global import Decisions
from tasks.data.dedup.dedup_tasks import Layout, read_rows
from tasks.data.dedup.linededup import Repeats
from tasks.data.dedup.lsh import sorted_unique

log = logging.getLogger("forgeline.clean")
LEDGER_ROWS = 16_384
SCRATCH = "outputs"
REMOVED = "lines_removed.parquet"
# report.json's key order, as it always was (reports compare byte for byte across versions): the outcomes, then
# the steps' fields. What each field holds is its step's (`tasks.data.cleanup.steps.Step.report`).
LAYOUT = ("in", "kept", "dropped", "dropped_by_reason", "by_source", "pii_replaced", "dedup", "dedup_detail",
          "quality_curve", "decontamination", "lines")


def keeper_ids(layout: Layout, decisions: Decisions) -> np.ndarray:
    """The id of the document kept for each dropped one, aligned with `decisions` (read back from the shards:
    only those rows, only the id column)."""
    keepers = sorted_unique(decisions.keeper)
    ids = np.asarray(read_rows(layout, keepers, "id"), dtype=object)
    return ids[np.searchsorted(keepers, decisions.keeper)]


def write_outputs(layout: Layout, spec: CleanSpec, out: Path, dedup: dict[str, Any], decon: dict[str, Any],
                  executor: ExecutorSpec | None = None, ledger_rows: int = LEDGER_ROWS,
                  lines: Repeats | None = None) -> dict[str, Any]:
    """Kept shards, the ledger and report.json, written on `executor` (default: this process), the repeated
    `lines` taken out of the kept texts when given (`linededup.find_repeats`); returns the counts."""
    executor = executor or ExecutorSpec(workers=1)
    t0 = time.perf_counter()
    d: Decisions = dedup["decisions"]
    names = keeper_ids(layout, d)
    scratch = layout.work / SCRATCH
    scratch.mkdir(parents=True, exist_ok=True)
    args = []
    for s in range(len(layout.stems)):
        lo, hi = np.searchsorted(d.rows, [layout.offsets[s], layout.offsets[s + 1]])
        args.append((summarize_table, layout.base(s), scratch, s, d.rows[lo:hi] - layout.offsets[s],
                     d.near[lo:hi], d.sim[lo:hi], names[lo:hi], spec,
                     None if lines is None else (lines, layout.offsets[s], layout.offsets[s + 1])))
    tallies = [r["result"] for r in map_shards(call, args, list(layout.stems), executor, "clean outputs")]
    plan = kept_plan([t["kept"] for t in tallies], spec.shard_records, spec.shard_bytes,
                     lambda s, source: kept_bytes(scratch, s, source))
    bases = [layout.base(s) for s in range(len(layout.stems))]
    # the ledger first: on a pool it is the longest task, written while the kept shards are
    # Into the work folder, published below only once every kept shard is written: a failed shard write must not
    # leave a ledger in the output folder (nothing of a failed run is published but the kept shards before it).
    ledger = scratch / "dropped.parquet"
    writes = [(write_ledger, [part(scratch, s, "ledger") for s in range(len(bases))], ledger, ledger_rows)]
    labels = ["ledger"]
    if lines is not None:          # the lines taken out of kept documents, beside the documents dropped
        writes.append((write_removed, [part(scratch, s, "text") for s in range(len(bases))],
                       scratch / REMOVED))
        labels.append("lines_removed")
    writes += [(write_kept, bases, scratch, out / "shards", group) for group in plan]
    (out / "shards").mkdir(parents=True, exist_ok=True)
    map_shards(call, writes, labels + [f"kept-{g[0][0]}-{g[0][1]:05d}" for g in plan], executor, "clean outputs")
    shutil.move(ledger, out / "dropped.parquet")  # a rename: the work folder is on the project's filesystem
    if lines is not None:
        shutil.move(scratch / REMOVED, out / REMOVED)
    log.info("outputs written in %.1f s (%d tables, %d kept shards)", time.perf_counter() - t0, len(bases),
             sum(len(g) for g in plan))
    return write_report(tallies, ReportFacts(spec, out, [t["steps"] for t in tallies], dedup, decon,
                                             None if lines is None else lines.summary))


def kept_plan(kept: list[dict[str, int]], size: int, max_bytes: int,
              text_bytes: Callable[[int, str], np.ndarray]) -> list[list[KeptShard]]:
    """Every kept shard's pieces from the kept counts per table and source (prefix sums: a kept record's
    position in its source is the kept records of that source in the tables before it, plus its rank in its
    own), grouped by the table the shard starts in: a group is one task, reading each table about once. A shard
    ends after `size` records or at the record whose text brings it to `max_bytes` (`shard_cuts`)."""
    groups: dict[int, list[KeptShard]] = defaultdict(list)
    for source in sorted({src for k in kept for src in k}):
        counts = np.array([k.get(source, 0) for k in kept], dtype=np.int64)
        ends = np.cumsum(counts)
        starts = ends - counts
        cuts = shard_cuts(counts, size, max_bytes, lambda t: text_bytes(t, source))
        for number, (first, last) in enumerate(zip([0] + cuts[:-1], cuts)):
            span = np.arange(np.searchsorted(ends, first, "right"), np.searchsorted(starts, last, "left"))
            tables = span[counts[span] > 0]                          # the tables holding rows [first, last)
            pieces: list[Piece] = [(int(t), int(max(first, starts[t]) - starts[t]),
                                    int(min(last, ends[t]) - starts[t])) for t in tables]
            groups[pieces[0][0]].append((source, number, pieces))
    return [groups[t] for t in sorted(groups)]


def shard_cuts(counts: np.ndarray, size: int, max_bytes: int, text_bytes: Callable[[int], np.ndarray]) -> list[int]:
    """Where a source's shards end, as positions in its kept records (the last is their count): after `size`
    records, or after the record whose text brings the shard's to `max_bytes`, whichever comes first — the rule
    of ingest's shards. Reads one table's sizes at a time (`text_bytes(t)`), so planning holds one table's."""
    cuts: list[int] = []
    rows = held = at = 0                       # the open shard's records and bytes; the table's first position
    for t, n in enumerate(counts.tolist()):
        if n == 0:
            continue
        total = np.cumsum(text_bytes(t))         # bytes of the table's first k+1 records of the source
        i = 0
        while i < n:
            before = int(total[i - 1]) if i else 0
            by_rows = i + size - rows
            by_bytes = int(np.searchsorted(total, before + max_bytes - held, "left")) + 1
            end = min(by_rows, by_bytes)
            if end > n:                          # the shard goes on into the next table
                rows, held, i = rows + n - i, held + int(total[-1]) - before, n
            else:
                cuts.append(at + end)
                rows, held, i = 0, 0, end
        at += n
    if rows:
        cuts.append(at)
    return cuts


def write_report(tallies: list[dict[str, Any]], facts: ReportFacts) -> dict[str, Any]:
    """report.json: the outcomes summed over the tables (checked: every record kept or dropped with a reason)
    and every kind of step's fields (`Step.report`), in `LAYOUT`'s order; returns the stage's counts (the
    outcomes and the steps' `counted` fields)."""
    by_source: dict[str, Counter] = defaultdict(Counter)
    for t in tallies:
        for src, c in t["counts"].items():
            by_source[src].update(c)
    sources = {s: dict(sorted(c.items())) for s, c in sorted(by_source.items())}
    for s, c in sources.items():  # the conservation law: every record is kept or dropped with a reason
        dropped = sum(v for k, v in c.items() if k.startswith("dropped:"))
        if c["in"] != c.get("kept", 0) + dropped:
            raise AssertionError(f"clean: source {s} lost records: in {c['in']} != kept + dropped")
    totals: Counter = Counter()
    for c in sources.values():
        totals.update(c)
    fields = {"in": totals["in"], "kept": totals.get("kept", 0), "dropped": totals["in"] - totals.get("kept", 0),
              "dropped_by_reason": {k.split(":", 1)[1]: v for k, v in sorted(totals.items()) if ":" in k},
              "by_source": sources}
    counted = list(fields)
    for kind in STEP_KINDS:
        fields.update(kind.report(facts))
        counted += kind.counted
    if sorted(fields) != sorted(LAYOUT):
        raise AssertionError(f"clean: report fields {sorted(fields)} are not report.json's {sorted(LAYOUT)}")
    write_json_atomic(facts.out / "report.json", {k: fields[k] for k in LAYOUT})
    return {k: fields[k] for k in LAYOUT if k in counted}
