"""Shared by instruct and prefer_data: a source's `max_pairs` as a stream (`LowestN`) and the duplicate-key check of
their JSON lines (`key_twice`).

A source's `max_pairs` takes the n items of lowest seeded key. Instruct and prefer_data used to hold every item of
the source to sort it (a file of 50 MB lines: every line in memory at once); the same n are the n smallest keys,
which a bounded heap finds holding n items at a time.
"""

from __future__ import annotations

import codecs
import heapq
import json
from dataclasses import dataclass, field
from collections.abc import Iterable
from typing import Any, Generic, TypeVar

T = TypeVar("T")


@dataclass(frozen=True)
class _Entry:
    """A heap entry ordered by descending key, so the heap's top is the largest key (the first to give way)."""

    key: Any
    order: int
    item: Any = field(compare=False)

    def __lt__(self, other: _Entry) -> bool:
        return (self.key, self.order) > (other.key, other.order)


class LowestN(Generic[T]):
    """Offer items with their keys; `taken()` gives the `n` of lowest key (then earliest offered) in the order they
    were offered, `dropped` how many gave way."""

    def __init__(self, n: int) -> None:
        self.n = n
        self.dropped = 0
        self.offered = 0
        self._heap: list[_Entry] = []

    def offer(self, key: Any, item: T) -> None:
        heapq.heappush(self._heap, _Entry(key, self.offered, item))
        self.offered += 1
        if len(self._heap) > self.n:
            heapq.heappop(self._heap)
            self.dropped += 1

    def taken(self) -> list[T]:
        return [e.item for e in sorted(self._heap, key=lambda e: e.order)]


def key_twice(raw: bytes, names: Iterable[str | None]) -> str | None:
    """One of `names` that the JSON object line `raw` holds twice at its top level, else None. json keeps the last
    value of a repeated key silently (a second "prompt" swapped the question); ingest refuses such a line as
    invalid JSON, and so do the curation readers. Only a line naming one of them twice in quotes is parsed again
    (None in `names`: a field the source does not map)."""
    names = [n for n in names if n is not None and raw.count(json.dumps(n, ensure_ascii=False).encode()) > 1]
    if not names:
        return None
    pairs: list[list[tuple[str, Any]]] = []
    json.loads(raw.removeprefix(codecs.BOM_UTF8).decode("utf-8"),
               object_pairs_hook=lambda p: pairs.append(p) or dict(p))
    keys = [k for k, _ in pairs[-1]]  # the outermost object is built last
    return next((n for n in names if keys.count(n) > 1), None)
