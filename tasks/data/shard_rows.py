"""Chosen rows of Parquet files read a batch at a time: the readers of clean's shards and drop ledger that want a
few documents' texts (evaluate's spot-check, benchmark's held-out texts) hold one row group, never a whole ledger.
Its own module (not records.py) so that the stages importing the spot-check do not depend on the record schemas."""

from __future__ import annotations

from pathlib import Path
from typing import Any, Iterator

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq


def select_rows(files: list[Path], columns: list[str], ids: set[str] | None = None,
                batch_rows: int = 256) -> Iterator[dict[str, Any]]:
    """Rows of parquet `files` in file order (only `columns`; only rows whose `id` is in `ids` when given), read
    `batch_rows` at a time and converted only where kept: memory holds what pyarrow decodes of one row group (it
    reads a group's column chunk whole) and the rows kept, never a whole file. With `ids`, a row group none of them
    is in is skipped after reading its `id` column alone."""
    wanted = None if ids is None else pa.array(sorted(ids), pa.string())
    for f in files:
        pf = pq.ParquetFile(f)
        for group in range(pf.metadata.num_row_groups):
            if wanted is not None and not pc.any(pc.is_in(pf.read_row_group(group, columns=["id"]).column("id"),
                                                          value_set=wanted)).as_py():
                continue
            for batch in pf.iter_batches(batch_size=batch_rows, row_groups=[group], columns=columns):
                if wanted is not None:
                    batch = batch.filter(pc.is_in(batch.column("id"), value_set=wanted))
                yield from batch.to_pylist()
