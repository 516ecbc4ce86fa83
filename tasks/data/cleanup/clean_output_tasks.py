"""Clean's output phase as tasks on the stage's executor (module-level functions, each writing only its own
files, atomically; `tasks.data.cleanup.clean_outputs` plans them and sums their results). No per-row Python (but
the rewriting of texts that lost repeated lines): every step is an Arrow compute kernel or a numpy operation over
a whole work table.

- `summarize_table`: one work table with its dedup decisions -> each row kept or dropped with its reason, the
  table's kept row numbers (`kept-<s>.npy`) and their text bytes per source (`bytes-<s>.npz`, the shard plan's),
  its ledger rows (`ledger-<s>.arrow`, Arrow IPC), with `clean.lines` its kept texts that lost repeated lines
  (`text-<s>.arrow`: row, text; a document left too short is dropped as `repeated_lines`) and its tallies (per
  source: in / kept / dropped by reason; and each step's own, `tasks.data.cleanup.steps.Step.tally`).
- `write_kept`: kept shards `<source>-NNNNN.parquet`, each cut from slices of the tables' kept rows (a shard
  may straddle tables), written as one table of RECORD_SCHEMA: the bytes of `records.write_table` of its rows.
- `write_ledger`: the ledger parts streamed in table order into ONE dropped.parquet, a row group per
  `ledger_rows` rows; `write_removed` likewise the lines `clean.lines` took out of kept documents.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from specs.clean import CleanSpec
from tasks.core.files import atomic_path
from tasks.data.cleanup.cleaning import STEP_KINDS
from tasks.data.cleanup.steps import WorkTable
from tasks.data.dedup import dedup_files, linededup
from tasks.data.records import LEDGER_SCHEMA, RECORD_SCHEMA

SUMMARY_COLUMNS = ["id", "text", "source", "quality", "reason", "detail", "pii_kinds", "pii_counts"]
REMOVED_SCHEMA = pa.schema([("id", pa.string()), ("source", pa.string()), ("lines", pa.list_(pa.string()))])
# A kept shard's pieces: (table index, first, end) in that table's kept rows of the shard's source
Piece = tuple[int, int, int]
KeptShard = tuple[str, int, list[Piece]]  # (source, shard number, pieces in order)
Lines = tuple[linededup.Repeats, int, int]  # the repeated lines' removals; the table's first and end corpus rows


def call(fn: Callable[..., Any], *args: Any) -> Any:
    """`fn(*args)`: lets one executor map run tasks of different kinds (fn is module-level, so it pickles)."""
    return fn(*args)


def part(scratch: Path, s: int, kind: str) -> Path:
    return scratch / {"kept": f"kept-{s:06d}.npy", "ledger": f"ledger-{s:06d}.arrow", "bytes": f"bytes-{s:06d}.npz",
                      "text": f"text-{s:06d}.arrow"}[kind]


def kept_bytes(scratch: Path, s: int, source: str) -> np.ndarray:
    """The UTF-8 bytes of the texts of table `s`'s kept rows of `source`, in table order (what `summarize_table`
    saved; nothing when it kept none)."""
    with np.load(part(scratch, s, "bytes"), allow_pickle=False) as saved:
        return saved[source] if source in saved.files else np.zeros(0, np.int64)


def summarize_table(base: Path, scratch: Path, s: int, drops: np.ndarray, near: np.ndarray, sim: np.ndarray,
                    kept_ids: np.ndarray, spec: CleanSpec, lines: Lines | None = None) -> dict[str, Any]:
    """Table `s`: its dedup decisions (`drops`: row numbers in the table, ascending) applied to the rows the
    filters kept, then the repeated lines' removals (`lines`: with the table's first and end corpus rows);
    writes its kept rows' numbers, their rewritten texts and its ledger part; returns its tallies: the outcomes
    per source (`_tallies`) and each step's (`steps`, by step class name: `Step.tally`)."""
    table = pq.read_table(dedup_files.at(base, ".parquet"), columns=SUMMARY_COLUMNS)
    col = {name: table.column(name).combine_chunks() for name in SUMMARY_COLUMNS}
    n = table.num_rows
    live = pc.is_null(col["reason"]).to_numpy(zero_copy_only=False)[drops]  # a filter's drop is final
    drops, near, sim, kept_ids = drops[live], near[live], sim[live], kept_ids[live]
    mask = np.zeros(n, dtype=bool)
    mask[drops] = True
    mask_arr = pa.array(mask)
    reason = pc.replace_with_mask(col["reason"], mask_arr, pa.array(
        np.where(near, "near_duplicate", "exact_duplicate").tolist(), pa.string()))
    # one string per dedup drop (Python's round-then-format, as the decision's detail always was)
    details = [f"Jaccard {round(x, 6):.3f}" if nr else "identical after normalization"
               for x, nr in zip(sim.tolist(), near.tolist())]
    detail = pc.replace_with_mask(col["detail"], mask_arr, pa.array(details, pa.string()))
    kept_id = pc.replace_with_mask(pa.nulls(n, pa.string()), mask_arr, pa.array(kept_ids.tolist(), pa.string()))
    kept = pc.is_null(reason).to_numpy(zero_copy_only=False)
    text, line_tally = col["text"], None
    part(scratch, s, "text").unlink(missing_ok=True)          # (a killed run's, for the same decisions)
    if lines is not None:
        done = _rewrite(col, kept, lines, part(scratch, s, "text"))
        if done.dropped:
            mask_arr = pa.array(np.isin(np.arange(n), done.dropped))
            reason = pc.replace_with_mask(reason, mask_arr, pa.array([linededup.REASON] * len(done.dropped)))
            detail = pc.replace_with_mask(detail, mask_arr, pa.array(done.details, pa.string()))
            kept = pc.is_null(reason).to_numpy(zero_copy_only=False)
        if done.rows:
            text = pc.replace_with_mask(text, pa.array(np.isin(np.arange(n), done.rows)),
                                        pa.array(done.texts, pa.string()))
        line_tally = done.tally
    ledger = pa.Table.from_arrays([col["id"], col["source"], reason, col["quality"], kept_id, detail, col["text"]],
                                  schema=LEDGER_SCHEMA).filter(pa.array(~kept))
    with atomic_path(part(scratch, s, "ledger")) as tmp, pa.OSFile(str(tmp), "wb") as sink, \
            pa.ipc.new_file(sink, LEDGER_SCHEMA) as writer:
        writer.write_table(ledger)
    dedup_files.save_npy(part(scratch, s, "kept"), np.flatnonzero(kept).astype(np.int64))
    _save_kept_bytes(part(scratch, s, "bytes"), {**col, "text": text}, kept)
    return {**_tallies(col, reason, kept, spec, line_tally), "ledger_rows": ledger.num_rows}


def _rewrite(col: dict[str, pa.Array], kept: np.ndarray, lines: Lines, path: Path) -> linededup.Rewrite:
    """The table's texts with their repeated lines taken out; the kept ones' new texts saved at `path` (row,
    text, and the id, source and lines removed for `lines_removed.parquet`: Arrow IPC), which `write_kept` and
    `write_removed` read."""
    repeats, lo, hi = lines
    by_row = linededup.removals_of(repeats.files, lo, hi)
    rows = sorted(r for r in by_row if kept[r])          # (entries were made of kept rows only)
    done = linededup.rewrite(rows, col["text"].take(pa.array(rows, pa.int64())).to_pylist(), by_row, repeats.spec)
    at = pa.array(done.rows, pa.int64())
    table = pa.table({"row": at, "text": pa.array(done.texts, pa.string()), "id": col["id"].take(at),
                      "source": col["source"].take(at), "lines": pa.array(done.removed, pa.list_(pa.string()))})
    with atomic_path(path) as tmp, pa.OSFile(str(tmp), "wb") as sink, pa.ipc.new_file(sink, table.schema) as w:
        w.write_table(table)
    return done


def _save_kept_bytes(path: Path, col: dict[str, pa.Array], kept: np.ndarray) -> None:
    """Per source, the text bytes of its kept rows in table order: the planner cuts shards by them."""
    size = pc.fill_null(pc.binary_length(col["text"]), 0).to_numpy(zero_copy_only=False).astype(np.int64)[kept]
    encoded = col["source"].dictionary_encode()
    codes = encoded.indices.to_numpy(zero_copy_only=False)[kept]
    with atomic_path(path) as tmp, open(tmp, "wb") as fh:
        np.savez(fh, **{name: size[codes == i] for i, name in enumerate(encoded.dictionary.to_pylist())})


def _tallies(col: dict[str, pa.Array], reason: pa.Array, kept: np.ndarray, spec: CleanSpec,
             lines: dict[str, int] | None = None) -> dict[str, Any]:
    """Per source: counts by outcome and kept rows; and each kind of step's own tally of the table."""
    encoded = col["source"].dictionary_encode()
    sources, codes = encoded.dictionary.to_pylist(), encoded.indices.to_numpy(zero_copy_only=False)
    outcome = pa.table({"source": col["source"], "reason": reason}).group_by(["source", "reason"]).aggregate(
        [([], "count_all")])
    counts: dict[str, dict[str, int]] = {src: {} for src in sources}
    for src, why, k in zip(*(outcome.column(c).to_pylist() for c in ("source", "reason", "count_all"))):
        counts[src]["in"] = counts[src].get("in", 0) + k
        counts[src]["kept" if why is None else f"dropped:{why}"] = k
    table = WorkTable(col, sources, codes, lines)
    return {"counts": counts, "kept": dict(zip(sources, np.bincount(codes[kept], minlength=len(sources)).tolist())),
            "steps": {kind.__name__: kind.tally(spec, table) for kind in STEP_KINDS}}


def write_kept(bases: list[Path], scratch: Path, folder: Path, shards: list[KeptShard]) -> int:
    """The kept shards `shards` (consecutive ones, their pieces in ascending tables); returns the rows written.
    Holds one work table's kept rows at a time."""
    loaded: dict[int, pa.Table] = {}
    of_source: dict[tuple[int, str], pa.Table] = {}
    written = 0
    for source, number, pieces in shards:
        slices = []
        for t, lo, hi in pieces:
            if t not in loaded:
                loaded.clear()
                of_source.clear()
                loaded[t] = _kept_rows(bases[t], scratch, t)
            if (t, source) not in of_source:
                rows = loaded[t]
                of_source[(t, source)] = rows.filter(pc.equal(rows.column("source"), source))
            slices.append(of_source[(t, source)].slice(lo, hi - lo))
        table = pa.concat_tables(slices).combine_chunks()
        table = pa.Table.from_arrays([table.column(c) for c in RECORD_SCHEMA.names], schema=RECORD_SCHEMA)
        with atomic_path(folder / f"{source}-{number:05d}.parquet") as tmp:
            pq.write_table(table, tmp, compression="zstd", write_statistics=True)  # records.write_table's options
        written += table.num_rows
    return written


def _kept_rows(base: Path, scratch: Path, s: int) -> pa.Table:
    """Table `s`'s kept rows, with the texts `summarize_table` rewrote."""
    rows = np.load(part(scratch, s, "kept"), allow_pickle=False)
    table = pq.read_table(dedup_files.at(base, ".parquet"), columns=RECORD_SCHEMA.names).take(pa.array(rows))
    if not part(scratch, s, "text").exists():
        return table
    with pa.OSFile(str(part(scratch, s, "text"))) as source:
        new = pa.ipc.open_file(source).read_all()
    if not new.num_rows:
        return table
    mask = np.isin(rows, new.column("row").to_numpy())          # both ascending: the values land in order
    text = pc.replace_with_mask(table.column("text").combine_chunks(), pa.array(mask),
                                new.column("text").combine_chunks())
    return table.set_column(table.schema.get_field_index("text"), "text", text)


def write_ledger(parts: list[Path], path: Path, ledger_rows: int) -> int:
    """dropped.parquet from the ledger parts in order: a row group per `ledger_rows` rows, the last shorter (no
    drops at all: a file of no rows). Holds at most one part and one row group. Returns the rows written."""
    held: list[pa.Table] = []
    count = written = 0
    with atomic_path(path) as tmp, pq.ParquetWriter(tmp, LEDGER_SCHEMA, compression="zstd",
                                                    write_statistics=True) as writer:
        def flush(rows: int) -> None:
            nonlocal held, count, written
            table = pa.concat_tables(held) if held else LEDGER_SCHEMA.empty_table()
            # one contiguous chunk per row group: the bytes of writing the rows as one table
            writer.write_table(table.slice(0, rows).combine_chunks())
            held, count, written = [table.slice(rows)] if rows < table.num_rows else [], count - rows, written + rows

        for p in parts:
            with pa.OSFile(str(p)) as source:  # read into memory (one part): nothing refers to the file after
                table = pa.ipc.open_file(source).read_all()
            held.append(table)
            count += table.num_rows
            while count >= ledger_rows:
                flush(ledger_rows)
        if count or not written:
            flush(count)
    return written


def write_removed(parts: list[Path], path: Path) -> int:
    """lines_removed.parquet: per kept document that lost lines, its id, source and the lines taken out (in
    table order, as the tables' `text` parts hold them; one part in memory at a time). Returns the rows."""
    written = 0
    with atomic_path(path) as tmp, pq.ParquetWriter(tmp, REMOVED_SCHEMA, compression="zstd",
                                                    write_statistics=True) as writer:
        for p in parts:
            with pa.OSFile(str(p)) as source:
                table = pa.ipc.open_file(source).read_all()
            writer.write_table(table.select(REMOVED_SCHEMA.names).cast(REMOVED_SCHEMA).combine_chunks())
            written += table.num_rows
    return written
