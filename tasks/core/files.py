"""File primitives every stage uses: atomic writes and content hashes."""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import tempfile
from pathlib import Path
from typing import Any, Iterator

from specs.results import FileRecord

TEMP_MARK = ".tmp-"
_UMASK = os.umask(0o022)
os.umask(_UMASK)  # read once: mkstemp creates 0600 files, outputs should get the usual 0644 (per umask)


@contextlib.contextmanager
def atomic_path(path: str | Path) -> Iterator[Path]:
    """Yield a temp path beside `path`; on success fsync and rename it into place, on error delete it.

    A killed or failing writer therefore never leaves a half-written file under the final name. Temp names
    start with `.` and contain `.tmp-`, so readers and manifests skip them.
    """
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}{TEMP_MARK}", dir=path.parent)
    os.close(fd)
    tmp_path = Path(tmp)
    try:
        yield tmp_path
        os.chmod(tmp_path, 0o666 & ~_UMASK)
        with open(tmp_path, "rb") as fh:
            os.fsync(fh.fileno())
        os.replace(tmp_path, path)
    except BaseException:
        tmp_path.unlink(missing_ok=True)
        raise


def write_text_atomic(path: str | Path, text: str) -> None:
    with atomic_path(path) as tmp:
        tmp.write_text(text, encoding="utf-8")


def write_json_atomic(path: str | Path, data: Any) -> None:
    """Pretty, key-sorted JSON (stable bytes for equal data), written atomically."""
    write_text_atomic(path, json.dumps(data, indent=2, sort_keys=True, ensure_ascii=False, default=str) + "\n")


def sha256_file(path: str | Path, chunk: int = 1 << 20) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as fh:
        while block := fh.read(chunk):
            digest.update(block)
    return digest.hexdigest()


def is_temp(path: Path) -> bool:
    return path.name.startswith(".") and TEMP_MARK in path.name


def list_files(path: str | Path) -> list[Path]:
    """Every regular file under `path` (or `path` itself), sorted, skipping temp files and caches."""
    path = Path(path)
    if path.is_file():
        return [path]
    if not path.is_dir():
        return []
    return sorted(
        p for p in path.rglob("*")
        if p.is_file() and not is_temp(p) and "__pycache__" not in p.parts and p.suffix != ".pyc"
    )


def file_records(paths: list[str | Path], root: Path, exclude: tuple[Path, ...] = ()) -> list[FileRecord]:
    """Content-hashed records of every file under `paths`, relative to `root`."""
    records = []
    excluded = {p.resolve() for p in exclude}
    for top in paths:
        for f in list_files(top):
            if f.resolve() in excluded:
                continue
            records.append(
                FileRecord(path=f.resolve().relative_to(root.resolve()).as_posix(), sha256=sha256_file(f),
                           bytes=f.stat().st_size)
            )
    return records
