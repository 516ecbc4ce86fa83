"""Reading a files source in tests: every item a reader yields, and the documents / quarantined items apart."""

from __future__ import annotations

from pathlib import Path

from specs.ingest import FilesSource
from tasks.data.formats import read_files
from tasks.data.records import Bad, Doc

CAP = 1 << 20


def read(root: Path, paths: list[str], cap: int = CAP, **source) -> list[Doc | Bad]:
    return list(read_files(FilesSource(name="t", paths=paths, **source), root, cap))


def docs(items) -> list[Doc]:
    return [i for i in items if isinstance(i, Doc)]


def bads(items) -> list[tuple[str, str]]:
    return [(i.location, i.reason) for i in items if isinstance(i, Bad)]
