"""Readers for user files (jsonl, parquet, txt, md; files, directories, globs) that never lose a record.

Each reader yields `Doc` for every record it can parse and `Bad` (with file, line/row/offset and the error)
for everything it cannot, so ingest can account for every input.
"""

from __future__ import annotations

import codecs
import glob
import json
from pathlib import Path
from typing import Any, Iterator

from specs.ingest import FilesSource
from tasks.data.records import Bad, Doc, unicode_error, valid_unicode

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
        # A dangling (or looping) symlink is kept so it is quarantined as unreadable, not skipped silently.
        files = [m for m in matches if m.is_file() or (m.is_symlink() and not m.exists())]
        if not files:
            raise FileNotFoundError(f"ingest source '{source}': path {pattern!r} matched no files under {root}")
        found.update(m.resolve() if m.exists() else m.absolute() for m in files)
    return sorted(found)


def display_path(path: Path, root: Path) -> str:
    """`path` relative to `root` where possible, as valid Unicode (it becomes part of ids and origins)."""
    dangling = path.is_symlink() and not path.exists()  # name the link, not the target it fails to reach
    try:
        shown = (path.absolute() if dangling else path.resolve()).relative_to(root.resolve()).as_posix()
    except ValueError:
        shown = path.as_posix()
    # A file name that is not UTF-8 arrives with its bytes as lone surrogates, which Parquet cannot store:
    # show those bytes as `\xNN` so the file's records keep a stable, writable id instead of crashing ingest.
    return valid_unicode(shown)


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
            # A UTF-8 byte-order mark (written by some Windows tools) is not part of the first record.
            yield from _read_jsonl(data.removeprefix(codecs.BOM_UTF8), path, shown, src, root)
        elif fmt == "parquet":
            yield from _read_parquet(path, shown, src, root)
        else:
            yield from _read_text_file(data, path, shown, fmt)


def _read_text_file(data: bytes, path: Path, shown: str, fmt: str) -> Iterator[Doc | Bad]:
    """A .txt/.md file is one document."""
    bom = len(codecs.BOM_UTF8) if data.startswith(codecs.BOM_UTF8) else 0  # a byte-order mark is not text
    try:
        text = data[bom:].decode("utf-8")
    except UnicodeDecodeError as exc:
        at = exc.start + bom  # offsets stay those of the file on disk
        yield Bad(shown, f"byte {at}", "invalid_utf8", str(exc), data[max(0, at - 40): at + 40]
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
        except (ValueError, RecursionError) as exc:
            # ValueError, not only JSONDecodeError: an integer longer than Python's int_max_str_digits (4300)
            # is valid JSON syntax that json.loads still refuses with a plain ValueError.
            detail = "nesting too deep to parse" if isinstance(exc, RecursionError) else str(exc)
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
    for group in range(pf.metadata.num_row_groups):
        start, size = row, pf.metadata.row_group(group).num_rows
        batches = pf.iter_batches(batch_size=1024, row_groups=[group])
        while True:
            try:
                objs = next(batches, None)
                objs = None if objs is None else objs.to_pylist()
            except Exception as exc:  # a damaged page (bad compression, bad encoding) inside an intact footer
                # The rest of this row group is lost; one entry stands for it, the other row groups are read.
                yield Bad(shown, f"row {row + 1}", "unreadable_file", f"rows {row + 1}-{start + size} (row group "
                          f"{group}) could not be read: {exc.__class__.__name__}: {exc}")
                break
            if objs is None:
                break
            for obj in objs:
                row += 1
                yield _from_object(obj, path, shown, f"row {row}", src, root, "")
        row = start + size


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
        if (why := unicode_error(ref)) is not None:
            raise ValueError(f"media path is {why}")
        target = Path(ref) if Path(ref).is_absolute() else base / ref
        refs.append({"kind": kind or MEDIA_KIND_BY_SUFFIX.get(target.suffix.lower(), "file"),
                     "path": display_path(target, root)})
    return refs


def _preview(obj: dict) -> str:
    return json.dumps(obj, ensure_ascii=False, default=str)[:500]
