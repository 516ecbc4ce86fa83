"""Corpus-wide expectation results from per-batch parts, in memory that does not grow with the texts.

Row-wise checks (not_null, in_set, length_between, media_exist) decompose: GX runs them on each batch and
`RowTally` sums its counts, then decides success with GX's own rule on the totals. `unique` does not
decompose (a value repeated in two batches passes both), so `UniqueTally` keeps one 8-byte hash per
non-null value, in row order, and finds the repeats once at the end by sorting.

Bound of `UniqueTally`: 8 bytes per row while streaming and ~18 bytes per row while finishing (the hashes, a
sorted copy, two boolean masks): 100M rows ≈ 1.8 GB. Hashes are 64-bit (pandas' SipHash with its fixed key,
deterministic across runs and machines); two distinct values collide with probability ~n²/2⁶⁵, ~3·10⁻⁴ at
100M rows, which would count two rows as repeated that are not.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pandas as pd

from specs.validate import ExpectationSpec
from tasks.data.validation import expectations as ex

CHUNK = 1 << 20  # rows per step when scanning the hashes for failing rows (bounds the searchsorted scratch)


def entry(spec: ExpectationSpec, element: int, missing: int | None, unexpected: int, failing_ids: list,
          examples: int, error: str | None) -> dict[str, Any]:
    """One results.json expectation entry from corpus totals, by GX's rules (expectation.py in GX 1.x):
    rows considered = non-null rows (all rows for not_null, whose failures *are* the nulls); success is
    vacuous with none considered, else (considered - unexpected) / considered ≥ mostly; the percent is of the
    rows considered."""
    considered = element if missing is None else element - missing
    success = True if element == 0 or considered == 0 else (considered - unexpected) / considered >= spec.mostly
    percent = unexpected / considered * 100 if considered > 0 else 0.0
    ids: list[str | None] = []
    for rid in failing_ids:
        if rid not in ids:
            ids.append(rid)
    out = {
        "spec": ex.spec_dict(spec),
        "gx": ex.gx_type(spec),
        "success": bool(success) and error is None,
        "element_count": element,
        "unexpected_count": unexpected,
        "unexpected_percent": round(float(percent), 4),
        "examples": ids[:examples],
    }
    if error is not None:
        out["error"] = error
    return out


class RowTally:
    """Sums of GX's per-batch counts for one row-wise expectation, and its first failing rows' ids."""

    def __init__(self, spec: ExpectationSpec, failing_rows: int) -> None:
        self.spec, self.failing_rows = spec, failing_rows
        self.element = self.unexpected = 0
        self.missing: int | None = None
        self.failing_ids: list[str | None] = []
        self.error: str | None = None

    def add(self, part: dict[str, Any]) -> None:
        self.element += part["element_count"]
        self.unexpected += part["unexpected_count"]
        if part["missing_count"] is not None:
            self.missing = (self.missing or 0) + part["missing_count"]
        # Batches come in row order, so the first `failing_rows` ids over all batches are GX's whole-table ones.
        self.failing_ids += part["failing_ids"][: self.failing_rows - len(self.failing_ids)]
        if part["error"] is not None and self.error is None:
            self.error = part["error"]

    def finish(self, examples: int) -> dict[str, Any]:
        return entry(self.spec, self.element, self.missing, self.unexpected, self.failing_ids, examples,
                     self.error)


class UniqueTally:
    """`unique` over every row a suite sees: GX's semantics (nulls are missing, not failures; every row of a
    repeated value fails, the first occurrence included), counted from 64-bit hashes of the values."""

    def __init__(self, spec: ExpectationSpec, failing_rows: int) -> None:
        self.spec, self.failing_rows = spec, failing_rows
        self.element = self.missing = 0
        self._hashes: list[np.ndarray] = []
        self._nulls: list[np.ndarray] = []  # row numbers (within the suite) of null values: usually none
        self.failing_positions: np.ndarray = np.empty(0, np.int64)
        self.unexpected = 0

    def add(self, values: pd.Series) -> None:
        present = values.notna().to_numpy()
        kept = values[present]
        self._hashes.append(pd.util.hash_pandas_object(kept.astype(str), index=False).to_numpy(np.uint64))
        self._nulls.append(np.flatnonzero(~present).astype(np.int64) + self.element)
        self.element += len(values)
        self.missing += int((~present).sum())

    def close(self) -> None:
        """Count the repeated rows and find the first `failing_rows` of them (row numbers within the suite)."""
        hashes = np.concatenate(self._hashes) if self._hashes else np.empty(0, np.uint64)
        nulls = np.concatenate(self._nulls) if self._nulls else np.empty(0, np.int64)
        self._hashes, self._nulls = [], []
        ordered = np.sort(hashes)
        same = ordered[1:] == ordered[:-1]
        in_run = np.zeros(len(ordered), bool)  # a sorted row is repeated iff it equals a neighbour
        in_run[1:] |= same
        in_run[:-1] |= same
        self.unexpected = int(in_run.sum())
        repeated = np.unique(ordered[1:][same])
        del ordered, same, in_run
        found: list[np.ndarray] = []
        for start in range(0, len(hashes) if len(repeated) else 0, CHUNK):
            chunk = hashes[start:start + CHUNK]
            at = np.searchsorted(repeated, chunk).clip(max=len(repeated) - 1)
            found.append(np.flatnonzero(repeated[at] == chunk) + start)
            if sum(len(f) for f in found) >= self.failing_rows:
                break
        if found:
            self.failing_positions = _row_numbers(np.concatenate(found)[: self.failing_rows], nulls)

    def finish(self, failing_ids: list[str | None], examples: int) -> dict[str, Any]:
        return entry(self.spec, self.element, self.missing, self.unexpected, failing_ids, examples, None)


def _row_numbers(nonnull_index: np.ndarray, nulls: np.ndarray) -> np.ndarray:
    """Row numbers of the k-th non-null rows (ascending `nonnull_index`), given the null rows' numbers."""
    out = []
    for k in nonnull_index.tolist():
        row = k
        for null in nulls.tolist():  # sorted; each null at or before the row shifts it by one
            if null > row:
                break
            row += 1
        out.append(row)
    return np.asarray(out, np.int64)
