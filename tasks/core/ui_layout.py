"""How artifacts sit in the Prefect UI: keys that sort in pipeline order, and tables that fit a 1440 px screen.

The UI lists a run's artifacts by key, so every key starts with its stage's position in the pipeline
(`01-ingest-report`, `07-pretrain-loss`, `09-review-pretrain-sample` with today's stages): the list reads in the order the stages
ran. A table is rendered one column per key with unwrapped cells; long cells are cut, and a table with more
columns than fit is split into parts that each repeat the first column, so no page scrolls sideways.
"""

from __future__ import annotations

from typing import Any

from tasks.core import graph

MAX_CELL_CHARS = 60   # one line of a cell at the UI's table font: ~420 px, a row stays one line high
MAX_COLUMNS = 6       # columns that fit beside each other in the ~880 px a 1440 px screen leaves the table


def artifact_key(stage: str, key: str) -> str:
    """`NN-<key>`, NN the stage's 1-based position in the pipeline (after the last stage for `None`-like names
    outside it, e.g. the experiment note). Keys allow lower-case letters, digits and dashes only."""
    pos = graph.STAGE_NAMES.index(stage) + 1 if stage in graph.STAGE_NAMES else len(graph.STAGE_NAMES) + 1
    return f"{pos:02d}-{key}".replace("_", "-").lower()


def _cell(value: Any) -> Any:
    if not isinstance(value, str):
        return value
    flat = " ".join(value.split())
    return flat if len(flat) <= MAX_CELL_CHARS else flat[: MAX_CELL_CHARS - 1] + "…"


def fit_table(rows: list[dict[str, Any]]) -> list[list[dict[str, Any]]]:
    """The table as parts that fit the screen: cells cut to MAX_CELL_CHARS (whitespace folded), columns split
    into groups of MAX_COLUMNS, each part starting with the first column so its rows stay identifiable."""
    if not rows:
        return []
    cols: list[str] = []
    for r in rows:
        cols += [c for c in r if c not in cols]
    first, rest = cols[0], cols[1:]
    width = MAX_COLUMNS - 1
    groups = [rest[i:i + width] for i in range(0, len(rest), width)] or [[]]
    return [[{c: _cell(r.get(c)) for c in [first, *g]} for r in rows] for g in groups]
