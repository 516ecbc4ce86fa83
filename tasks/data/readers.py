"""Readers for user files (jsonl, parquet, txt, md; files, directories, globs) that never lose a record.

Each reader yields `Doc` for every record it can parse and `Bad` (with file, line/row/offset and the error)
for everything it cannot, so ingest can account for every input.
"""

from __future__ import annotations

import glob
import json
from pathlib import Path
from typing import Any, Iterator

from specs.ingest import FilesSource
from tasks.data.records import Bad, Doc

FORMAT_BY_SUFFIX = {".jsonl": "jsonl", ".ndjson": "jsonl", ".parquet": "parquet", ".txt": "txt", ".md": "md",
                    ".markdown": "md"}
MEDIA_KIND_BY_SUFFIX = {
    **dict.fromkeys((".png", ".jpg", ".jpeg", ".gif", ".webp", ".bmp", ".tif", ".tiff"), "image"),
    **dict.fromkeys((".wav", ".mp3", ".flac", ".ogg", ".m4a", ".opus"), "audio"),
}


def expand_paths(patterns: list[str], root: Path, source: str) -> list[Path]:
    """Files named by `patterns` (files, directories read recursively, globs), sorted and de-duplicated."""
    found: set[Path] = set()
    for pattern in patterns:
        base = Path(pattern) if Path(pattern).is_absolute() else root / pattern
        if glob.has_magic(pattern):
            matches = [Path(m) for m in glob.glob(str(base), recursive=True)]
        elif base.is_dir():
            matches = [p for p in base.rglob("*")]
        else:
            matches = [base] if base.exists() else []
        files = [m for m in matches if m.is_file()]
        if not files:
            raise FileNotFoundError(f"ingest source '{source}': path {pattern!r} matched no files under {root}")
        found.update(m.resolve() for m in files)
    return sorted(found)


def display_path(path: Path, root: Path) -> str:
    try:
        return path.resolve().relative_to(root.resolve()).as_posix()
    except ValueError:
        return path.as_posix()


def read_files(src: FilesSource, root: Path) -> Iterator[Doc | Bad]:
    for path in expand_paths(src.paths, root, src.name):
        shown = display_path(path, root)
        fmt = src.format if src.format != "auto" else FORMAT_BY_SUFFIX.get(path.suffix.lower())
        if fmt is None:
            yield Bad(shown, "", "unsupported_format", f"no reader for {path.suffix or 'files without a suffix'}; "
                      f"supported: {', '.join(sorted(FORMAT_BY_SUFFIX))}")
            continue
        try:
            data = path.read_bytes() if fmt != "parquet" else None
        except OSError as exc:
            yield Bad(shown, "", "unreadable_file", f"{exc.__class__.__name__}: {exc.strerror or exc}")
            continue
        if fmt == "jsonl":
            yield from _read_jsonl(data, path, shown, src, root)
        elif fmt == "parquet":
            yield from _read_parquet(path, shown, src, root)
        else:
            yield from _read_text_file(data, path, shown, fmt)


def _read_text_file(data: bytes, path: Path, shown: str, fmt: str) -> Iterator[Doc | Bad]:
    """A .txt/.md file is one document."""
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as exc:
        yield Bad(shown, f"byte {exc.start}", "invalid_utf8", str(exc), data[max(0, exc.start - 40): exc.start + 40]
                  .decode("utf-8", "backslashreplace"))
        return
    yield Doc(key=shown, text=text, origin=shown, meta={"file": shown, "format": fmt})


def _read_jsonl(data: bytes, path: Path, shown: str, src: FilesSource, root: Path) -> Iterator[Doc | Bad]:
    for lineno, raw in enumerate(data.split(b"\n"), start=1):
        if not raw.strip():
            continue  # blank lines (including the usual trailing newline) are not records
        where = f"line {lineno}"
        try:
            line = raw.decode("utf-8")
        except UnicodeDecodeError as exc:
            yield Bad(shown, where, "invalid_utf8", f"{exc.reason} at byte {exc.start} of the line",
                      raw.decode("utf-8", "backslashreplace"))
            continue
        try:
            obj = json.loads(line)
        except (json.JSONDecodeError, RecursionError) as exc:
            detail = str(exc) if isinstance(exc, json.JSONDecodeError) else "nesting too deep to parse"
            yield Bad(shown, where, "invalid_json", detail, line)
            continue
        yield _from_object(obj, path, shown, where, src, root, line)


def _read_parquet(path: Path, shown: str, src: FilesSource, root: Path) -> Iterator[Doc | Bad]:
    import pyarrow.parquet as pq

    try:
        pf = pq.ParquetFile(path)
    except Exception as exc:  # pyarrow raises several types for a damaged file
        yield Bad(shown, "", "unreadable_file", f"not a readable Parquet file: {exc}")
        return
    row = 0
    for batch in pf.iter_batches(batch_size=1024):
        for obj in batch.to_pylist():
            row += 1
            yield _from_object(obj, path, shown, f"row {row}", src, root, "")


def _from_object(obj: Any, path: Path, shown: str, where: str, src: FilesSource, root: Path, raw: str) -> Doc | Bad:
    fields = src.fields
    if not isinstance(obj, dict):
        return Bad(shown, where, "not_an_object", f"expected a JSON object, got {type(obj).__name__}", raw)
    if fields.text not in obj:
        return Bad(shown, where, "missing_text", f"field {fields.text!r} is missing", raw or _preview(obj))
    key = f"{shown}:{where.split()[-1]}"
    if fields.id is not None:
        value = obj.get(fields.id)
        if value is None or isinstance(value, (dict, list)) or str(value).strip() == "":
            return Bad(shown, where, "wrong_type", f"id field {fields.id!r} must be a string or number, got "
                       f"{type(value).__name__}", raw or _preview(obj))
        key = str(value)
    media: list[dict[str, str]] = []
    if fields.media is not None and obj.get(fields.media) is not None:
        try:
            media = _media_refs(obj[fields.media], path.parent, root)
        except ValueError as exc:
            return Bad(shown, where, "bad_media", str(exc), raw or _preview(obj))
    mapped = {fields.text, fields.id, fields.media}
    keep = fields.meta if fields.meta is not None else [k for k in obj if k not in mapped]
    meta = {k: obj[k] for k in keep if k in obj}
    return Doc(key=key, text=obj[fields.text], origin=shown, location=where, meta=meta, media=media)


def _media_refs(value: Any, base: Path, root: Path) -> list[dict[str, str]]:
    """Normalize a path, a list of paths or a list of {kind, path} objects; paths become root-relative."""
    items = value if isinstance(value, list) else [value]
    refs = []
    for item in items:
        if isinstance(item, str):
            kind, ref = None, item
        elif isinstance(item, dict) and isinstance(item.get("path"), str):
            kind, ref = item.get("kind"), item["path"]
            if kind is not None and not isinstance(kind, str):
                raise ValueError(f"media kind must be a string, got {type(kind).__name__}")
        else:
            raise ValueError(f"media reference must be a path or {{kind, path}}, got {type(item).__name__}")
        if not ref.strip():
            raise ValueError("media reference has an empty path")
        target = Path(ref) if Path(ref).is_absolute() else base / ref
        refs.append({"kind": kind or MEDIA_KIND_BY_SUFFIX.get(target.suffix.lower(), "file"),
                     "path": display_path(target, root)})
    return refs


def _preview(obj: dict) -> str:
    return json.dumps(obj, ensure_ascii=False, default=str)[:500]
