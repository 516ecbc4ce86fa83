"""File primitives every stage uses: atomic writes and content hashes."""

from __future__ import annotations

import contextlib
import errno
import hashlib
import json
import math
import os
import tempfile
from pathlib import Path
from typing import Any, Iterator

from specs.results import FileRecord
from tasks.core import faults

TEMP_MARK = ".tmp-"
# Errors that say "this storage cannot take the file" rather than "this code is wrong"; the ambiguous ones
# (a read of some input can fail with them too) count only when they name the file being written, or no file.
STORAGE_ERRNOS = frozenset({errno.ENOSPC, errno.EDQUOT, errno.EROFS, errno.EFBIG})
AMBIGUOUS_ERRNOS = frozenset({errno.EACCES, errno.EPERM, errno.EIO})
# Below this many free bytes a failed write is blamed on a full disk: writers report it in their own words
# (numpy "N requested and M written", torch "unexpected pos"), often without an errno.
LOW_SPACE_BYTES = 1 << 20
_UMASK = os.umask(0o022)
os.umask(_UMASK)  # read once: mkstemp creates 0600 files, outputs should get the usual 0644 (per umask)


class StorageError(OSError):
    """An output could not be written for a reason of the storage (disk full, read-only, no permission).

    The message names the final file and says that nothing was published under its name.
    """


def _storage_problem(exc: BaseException, folder: Path, ours: tuple[Path, ...] = ()) -> tuple[int, str] | None:
    """(errno, reason) when `exc` comes from the storage rather than the code, else None. `ours`: the paths
    being written (an ambiguous errno about another file is not a storage problem of this write)."""
    if not isinstance(exc, Exception) or isinstance(exc, StorageError):
        return None
    if isinstance(exc, OSError) and (exc.errno in STORAGE_ERRNOS or exc.errno in AMBIGUOUS_ERRNOS and (
            exc.filename is None or Path(exc.filename) in ours or Path(exc.filename) == folder)):
        return exc.errno, os.strerror(exc.errno)
    try:
        st = os.statvfs(folder)
    except OSError:
        return None
    free = st.f_bavail * st.f_frsize
    if free < LOW_SPACE_BYTES:
        return errno.ENOSPC, f"{os.strerror(errno.ENOSPC)} ({free:,} bytes free; the writer said: {exc})"
    return None


def _storage_error(path: Path, code: int, reason: str) -> StorageError:
    return StorageError(code, f"cannot write {path}: {reason}. Nothing was published under that name; "
                              "free space or make the folder writable, then re-run")


@contextlib.contextmanager
def atomic_path(path: str | Path) -> Iterator[Path]:
    """Yield a temp path beside `path`; on success fsync and rename it into place, on error delete it.

    A killed or failing writer therefore never leaves a half-written file under the final name. Temp names
    start with `.` and contain `.tmp-`, so readers and manifests skip them. A failure of the storage (full,
    read-only) is re-raised as StorageError naming `path`, whatever words the writing library used.
    """
    path = Path(path)
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(prefix=f".{path.name}{TEMP_MARK}", dir=path.parent)
    except OSError as exc:
        problem = _storage_problem(exc, path.parent if path.parent.exists() else Path("/"), (path, path.parent))
        if problem:
            raise _storage_error(path, *problem) from exc
        raise
    os.close(fd)
    tmp_path = Path(tmp)
    try:
        yield tmp_path
        faults.checkpoint("files.atomic_write", path)  # tests: kill or fail here, the temp file complete
        os.chmod(tmp_path, 0o666 & ~_UMASK)
        with open(tmp_path, "rb") as fh:
            os.fsync(fh.fileno())
        os.replace(tmp_path, path)
    except BaseException as exc:
        problem = _storage_problem(exc, path.parent, (path, tmp_path))  # before the unlink frees the space
        tmp_path.unlink(missing_ok=True)
        if problem:
            raise _storage_error(path, *problem) from exc
        raise


def check_writable(folder: str | Path) -> None:
    """Raise StorageError when `folder` (or, if absent, its nearest existing parent) cannot take a new file.

    Called before a stage starts, so a read-only or full output folder fails before any work, not at the end.
    """
    folder = Path(folder)
    probe_dir = folder
    while not probe_dir.exists() and probe_dir != probe_dir.parent:
        probe_dir = probe_dir.parent
    try:
        fd, probe = tempfile.mkstemp(prefix=f".write-probe{TEMP_MARK}", dir=probe_dir)
        os.close(fd)
        os.unlink(probe)
    except OSError as exc:
        code = exc.errno if exc.errno is not None else errno.EACCES
        raise StorageError(code, f"output folder {folder} is not writable: {os.strerror(code)}") from exc


def write_text_atomic(path: str | Path, text: str) -> None:
    with atomic_path(path) as tmp:
        tmp.write_text(text, encoding="utf-8")


def finite(value: Any) -> Any:
    """`value` with every NaN and ±Infinity float in it, at any depth, made None (JSON null): JSON has no such
    numbers. In ingest's meta they stand for a missing value (a NaN in a Parquet float column, pandas' missing
    value; a jsonl `NaN` token, which Python's parser accepts), and the record is kept; in a plan, for an
    estimate that has none (a layout with no time)."""
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if isinstance(value, dict):
        return {k: finite(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [finite(v) for v in value]
    return value


def json_text(data: Any) -> str:
    """Pretty, key-sorted JSON (stable bytes for equal data): what `write_json_atomic` writes."""
    return json.dumps(data, indent=2, sort_keys=True, ensure_ascii=False, default=str) + "\n"


def write_json_atomic(path: str | Path, data: Any) -> None:
    """Pretty, key-sorted JSON (stable bytes for equal data), written atomically."""
    write_text_atomic(path, json_text(data))


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
