"""Clean's corpus-wide repeated-line removal (`clean.lines`), after document dedup, out of core.

Web pages repeat their site's navigation, cookie and share notices and footers, and a copy of an article under
another site's menus shares too few shingles with its original for near dedup to find it. CCNet and Dolma remove
such repeated paragraphs over the whole corpus; this module does it over the documents dedup kept, as tasks on
the stage's executor, in memory bounded by `clean.memory_gb`:

1. `line_entries` (one task per work table): each kept document's lines, keyed with whitespace collapsed and
   case folded, hashed to 64 bits (blake2b: stable across processes and runs), one entry (hash, row) per
   distinct line. A line its document repeats is the document's structure (a play's speaker names, a table's
   rows) and never enters; nor, with `exempt_code`, do code sources' documents. Entries are grouped into
   buckets by hash, as dedup's band keys are (`dedup_files`).
2. `bucket_repeats` (one task per bucket): a line in ≥ `min_docs` documents is repeated; with `keep_first` its
   best-ranked document (dedup's visiting order: highest quality, then id) keeps it. Writes the removals
   (row, hash) sorted by row; returns the bucket's counts and its most repeated lines.
3. The output phase reads each table's removals (`removals_of`, a slice of each bucket's file) and rewrites
   those texts (`strip_lines`: a repeated line of at most `short_words` words goes only beside another line
   that goes — chrome comes in blocks, a heading or a stage direction stands alone); a document left with fewer
   than `min_words` words, or that lost `max_removed` of its characters, is dropped. The lines taken out of the
   documents kept are written too (`lines_removed.parquet`), as the ledger holds the documents dropped.

Everything is decided on hashes; the texts change only in the output phase, from the work tables, so a stage
killed part-way and run again decides the same lines.
"""

from __future__ import annotations

import hashlib
import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow.compute as pc
import pyarrow.parquet as pq

from specs.clean import CleanSpec, LineDedupSpec
from specs.run import ExecutorSpec
from tasks.core.shardmap import map_shards
from tasks.data.cleanup.normalize import normalize_layout
from tasks.data.dedup import dedup_files
from tasks.data.dedup.dedup_global import Decisions, task_budget, text_bytes
from tasks.data.dedup.dedup_tasks import RANK, Layout, read_rows

ENTRY = np.dtype([("hash", "<u8"), ("row", "<i8")])      # one distinct line of one kept document
REMOVAL = np.dtype([("row", "<i8"), ("hash", "<u8")])    # a line to take out of a document, sorted by row
ENTRY_BYTES = 80        # an entry in a bucket task: 16 B read, its rank, the sort order and the group arrays
LINE_BYTES = 24         # the shortest mean line assumed when sizing buckets from the texts' bytes
SHOWN_CHARS = 200       # a repeated line's text in the report is cut here
REASON = "repeated_lines"


@dataclass(frozen=True)
class Repeats:
    """What the output phase needs of the repeated lines: the buckets' removal files and the spec; `summary`
    is the report's corpus-wide part (lines found repeated, the most repeated ones)."""

    files: tuple[Path, ...]
    spec: LineDedupSpec
    summary: dict[str, Any] = field(default_factory=dict)


def line_key(line: str) -> str:
    """What two lines are compared by: whitespace collapsed, case folded."""
    return " ".join(line.split()).casefold()


def key_hash(key: str) -> int:
    return int.from_bytes(hashlib.blake2b(key.encode("utf-8", "surrogatepass"), digest_size=8).digest(), "little")


def distinct_line_hashes(text: str) -> list[int]:
    """The hashes of the non-blank lines `text` holds exactly once."""
    seen: dict[str, int] = {}
    for line in text.split("\n"):
        key = line_key(line)
        if key:
            seen[key] = seen.get(key, 0) + 1
    return [key_hash(key) for key, n in seen.items() if n == 1]


def strip_lines(text: str, hashes: set[int], short_words: int = 0) -> tuple[str, list[str]]:
    """`text` without its lines whose key hashes to one of `hashes` — one of at most `short_words` words only
    when the nearest non-blank line before or after it is one of them too —, its blank lines then normalized as
    clean's normalization leaves them (`normalize_layout`); and the lines that went, in order."""
    lines = text.split("\n")
    keys = [line_key(line) for line in lines]
    content = [i for i, key in enumerate(keys) if key]                  # the non-blank lines
    hit = {i for i in content if key_hash(keys[i]) in hashes}
    gone = set()
    for pos, i in enumerate(content):
        if i in hit and (len(keys[i].split()) > short_words or
                         (pos > 0 and content[pos - 1] in hit) or
                         (pos + 1 < len(content) and content[pos + 1] in hit)):
            gone.add(i)
    if not gone:
        return text, []
    kept = "\n".join(line for i, line in enumerate(lines) if i not in gone)
    return normalize_layout(kept), [lines[i] for i in sorted(gone)]


def plan_buckets(layout: Layout, spec: CleanSpec, executor: ExecutorSpec) -> int:
    """Buckets enough that one bucket task's entries fit its share of the budget, the entries estimated from the
    work tables' text bytes (`dedup_global.text_bytes`: Parquet metadata, nothing is read) at one per LINE_BYTES."""
    entries = text_bytes(layout) / LINE_BYTES
    return max(1, min(65_536, math.ceil(entries * ENTRY_BYTES / task_budget(spec, executor))))


def kept_rows(base: Path, drops: np.ndarray, spec: LineDedupSpec, code_sources: Sequence[str]) -> np.ndarray:
    """The rows of one work table whose lines count: kept by the filters (no reason) and by dedup (not in
    `drops`, table row numbers), and not from a code source when `exempt_code`."""
    table = pq.read_table(dedup_files.at(base, ".parquet"), columns=["reason", "source"])
    live = pc.is_null(table.column("reason")).to_numpy(zero_copy_only=False).copy()
    live[drops] = False
    if spec.exempt_code and code_sources:
        live &= ~pc.is_in(table.column("source"), value_set=pc.cast(list(code_sources), "string")).to_numpy(
            zero_copy_only=False)
    return np.flatnonzero(live)


def line_entries(layout: Layout, s: int, drops: np.ndarray, spec: LineDedupSpec, buckets: int,
                 code_sources: Sequence[str]) -> int:
    """Table `s`'s entries (the distinct lines of its `kept_rows`, `drops` being dedup's in the table) grouped
    by bucket, written beside its work table (`<stem>.lines.npy` + offsets); returns their count."""
    base = layout.base(s)
    rows = kept_rows(base, drops, spec, code_sources)
    texts = pq.read_table(dedup_files.at(base, ".parquet"), columns=["text"]).column(0).take(rows).to_pylist()
    hashes = [distinct_line_hashes(t) for t in texts]
    entries = np.empty(sum(map(len, hashes)), dtype=ENTRY)
    entries["hash"] = np.fromiter((h for hs in hashes for h in hs), np.uint64, len(entries))
    entries["row"] = np.repeat(rows.astype(np.int64) + layout.offsets[s], [len(h) for h in hashes])
    dedup_files.save_buckets(base, "lines", entries, entries["hash"] % np.uint64(buckets), buckets)
    return len(entries)


def bucket_repeats(layout: Layout, bucket: int, spec: LineDedupSpec, out: Path) -> dict[str, Any]:
    """Bucket `bucket`'s repeated lines: the removals (REMOVAL rows, by row) written to `out`; returns the
    counts and the `report_top` most repeated lines of the bucket as (documents, hash, best-ranked row)."""
    parts = [dedup_files.bucket_slice(layout.base(s), bucket, "lines") for s in range(len(layout.stems))]
    entries = np.concatenate(parts) if parts else np.zeros(0, ENTRY)
    rank = np.load(layout.work / RANK, mmap_mode="r")
    entries = entries[np.lexsort((np.asarray(rank[entries["row"]]), entries["hash"]))]   # groups, best first
    first = np.ones(len(entries), dtype=bool)
    first[1:] = entries["hash"][1:] != entries["hash"][:-1]
    group = np.cumsum(first) - 1
    docs = np.bincount(group)                                                           # [groups]
    repeated = docs[group] >= spec.min_docs
    removed = repeated & ~first if spec.keep_first else repeated
    removals = np.empty(int(removed.sum()), dtype=REMOVAL)
    removals["row"], removals["hash"] = entries["row"][removed], entries["hash"][removed]
    dedup_files.save_npy(out, removals[np.argsort(removals["row"], kind="stable")])
    heads = np.flatnonzero(first & repeated)
    top = heads[np.lexsort((entries["hash"][heads], -docs[group[heads]]))][: spec.report_top]
    return {"repeated": len(heads), "removals": len(removals),
            "top": [(int(docs[group[k]]), int(entries["hash"][k]), int(entries["row"][k])) for k in top]}


def find_repeats(layout: Layout, spec: CleanSpec, decisions: Decisions, executor: ExecutorSpec) -> Repeats:
    """Steps 1 and 2 over the tables of `layout`, given dedup's `decisions` (its rank file in the work folder)."""
    lines, buckets = spec.lines, plan_buckets(layout, spec, executor)
    code = sorted(s for s, profile in spec.quality.profiles.items() if profile == "code")
    args = []
    for s in range(len(layout.stems)):
        lo, hi = np.searchsorted(decisions.rows, [layout.offsets[s], layout.offsets[s + 1]])
        args.append((layout, s, decisions.rows[lo:hi] - layout.offsets[s], lines, buckets, code))
    map_shards(line_entries, args, list(layout.stems), executor, "clean lines: entries")
    files = tuple(layout.work / f"lines-{k:05d}.npy" for k in range(buckets))
    found = map_shards(bucket_repeats, [(layout, k, lines, p) for k, p in enumerate(files)],
                       [p.stem for p in files], executor, "clean lines: repeats")
    results = [r["result"] for r in found]
    top = sorted((t for r in results for t in r["top"]), key=lambda t: (-t[0], t[1]))[: lines.report_top]
    return Repeats(files, lines, {"repeated_lines": sum(r["repeated"] for r in results),
                                  "removals": sum(r["removals"] for r in results),
                                  "top": _shown(layout, top)})


def _shown(layout: Layout, top: list[tuple[int, int, int]]) -> list[dict[str, Any]]:
    """The report's most repeated lines: each one's text as its best-ranked document writes it."""
    if not top:
        return []
    rows = np.array(sorted({row for _, _, row in top}), dtype=np.int64)
    texts = dict(zip(rows.tolist(), read_rows(layout, rows, "text")))
    shown = []
    for docs, h, row in top:
        line = next(ln for ln in texts[row].split("\n") if line_key(ln) and key_hash(line_key(ln)) == h)
        shown.append({"line": line.strip()[:SHOWN_CHARS], "documents": docs})
    return shown


def removals_of(files: Sequence[Path], lo: int, hi: int) -> dict[int, set[int]]:
    """Rows [lo, hi) of the corpus (one table's) → the hashes of the lines to take out of each (a slice of each
    bucket's file, through a memory map)."""
    by_row: dict[int, set[int]] = {}
    for path in files:
        removals = np.load(path, mmap_mode="r")
        a, b = np.searchsorted(removals["row"], [lo, hi])
        for row, h in zip(np.asarray(removals["row"][a:b]).tolist(), np.asarray(removals["hash"][a:b]).tolist()):
            by_row.setdefault(row - lo, set()).add(h)
    return by_row


@dataclass
class Rewrite:
    """One table's texts after its removals: the kept documents' new texts and the dropped ones, by row."""

    rows: list[int] = field(default_factory=list)           # kept, their lines removed; ascending
    texts: list[str] = field(default_factory=list)
    removed: list[list[str]] = field(default_factory=list)  # the lines taken out of each
    dropped: list[int] = field(default_factory=list)        # too little of their own left; ascending
    details: list[str] = field(default_factory=list)
    tally: dict[str, int] = field(default_factory=lambda: dict.fromkeys(
        ("documents_changed", "documents_dropped", "lines_removed", "chars_removed"), 0))


def rewrite(rows: list[int], texts: list[str], by_row: dict[int, set[int]], spec: LineDedupSpec) -> Rewrite:
    """The `texts` of `rows` (ascending) with the lines `by_row` names taken out (`strip_lines`)."""
    out = Rewrite()
    for row, text in zip(rows, texts):
        new, gone = strip_lines(text, by_row[row], spec.short_words)
        if not gone:
            continue
        words, share, removed = len(new.split()), 1 - len(new) / len(text), len(gone)
        out.tally["lines_removed"] += removed
        out.tally["chars_removed"] += len(text) - len(new)
        if words < spec.min_words or share >= spec.max_removed:
            out.dropped.append(row)
            out.details.append(f"{removed} lines repeated in other documents removed ({share:.0%} of its "
                               f"characters); {words} words left")
        else:
            out.rows.append(row)
            out.texts.append(new)
            out.removed.append(gone)
    out.tally["documents_changed"], out.tally["documents_dropped"] = len(out.rows), len(out.dropped)
    return out
