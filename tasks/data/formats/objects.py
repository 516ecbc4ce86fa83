"""A structured row (a JSON object, a Parquet/Arrow row, a CSV row) → `Doc`, through the source's field map."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from specs.ingest import FilesSource
from tasks.data.formats.paths import display_path
from tasks.data.records import META_DROPPED, Bad, Doc, unicode_error

MEDIA_KIND_BY_SUFFIX = {
    **dict.fromkeys((".png", ".jpg", ".jpeg", ".gif", ".webp", ".bmp", ".tif", ".tiff"), "image"),
    **dict.fromkeys((".wav", ".mp3", ".flac", ".ogg", ".m4a", ".opus"), "audio"),
}


def from_object(obj: Any, path: Path, shown: str, where: str, src: FilesSource, root: Path, raw: str) -> Doc | Bad:
    fields = src.fields
    if not isinstance(obj, dict):       # a value of the wrong type, as the record schema names one
        return Bad(shown, where, "wrong_type", f"a record must be a JSON object, got {_json_type(obj)}", raw)
    if obj.get(fields.text) is None:    # absent or null: missing, whatever the type checks later would say
        return Bad(shown, where, "missing_text", f"text field {fields.text!r} is "
                   f"{'missing' if fields.text not in obj else 'null'}", raw or preview(obj))
    key = f"{shown}:{where.split()[-1]}"
    if fields.id is not None:
        value = obj.get(fields.id)
        if isinstance(value, float) and value != value:     # pandas' missing value in a Parquet column: NaN
            value = None
        if value is None or isinstance(value, str) and not value.strip():
            state = "missing" if fields.id not in obj else "null" if value is None else "empty"
            return Bad(shown, where, "missing_id", f"id field {fields.id!r} is {state}", raw or preview(obj))
        if isinstance(value, (dict, list)):
            return Bad(shown, where, "wrong_type", f"id field {fields.id!r} must be a string or number, got "
                       f"{_json_type(value)}", raw or preview(obj))
        key = str(value)
    media: list[dict[str, str]] = []
    if fields.media is not None and obj.get(fields.media) is not None:
        try:
            media = media_refs(obj[fields.media], path.parent, root)
        except ValueError as exc:
            return Bad(shown, where, "bad_media", str(exc), raw or preview(obj))
    mapped = {fields.text, fields.id, fields.media}
    keep = fields.meta if fields.meta is not None else [k for k in obj if k not in mapped]
    meta = bounded_meta({k: obj[k] for k in keep if k in obj}, fields.meta_max_bytes)
    return Doc(key=key, text=obj[fields.text], origin=shown, location=where, meta=meta, media=media)


def bounded_meta(meta: dict[str, Any], budget: int) -> dict[str, Any]:
    """`meta` when its JSON fits in `budget` bytes; else without its largest fields (ties: by name), until the
    rest fits, and `_dropped` mapping each field left out to its size in bytes (null: too deeply nested to write).

    Largest first, because the fields that break a budget are the bulky ones (raw HTML, an embedding, an image's
    bytes) while the small ones (url, date, scores) are what meta is for."""
    if _fits(meta, budget):  # the usual case, decided without writing any JSON
        return meta
    whole = _json_size("", meta)  # nested values: one C-speed dump of the whole, not one per field
    if whole is not None and whole <= budget:
        return meta
    sizes = {k: _json_size(k, v) for k, v in meta.items()}
    weight = {k: budget + 1 if n is None else n for k, n in sizes.items()}  # one that cannot be written must go
    total = sum(weight.values())
    if total <= budget:
        return meta
    dropped: dict[str, int | None] = {}
    for k in sorted(weight, key=lambda k: (-weight[k], k)):
        if total <= budget:
            break
        dropped[k], total = sizes[k], total - weight[k]
    return {**{k: v for k, v in meta.items() if k not in dropped}, META_DROPPED: dropped}


def _fits(meta: dict[str, Any], budget: int) -> bool:
    """Whether meta surely fits, from an upper bound of its JSON for strings and small scalars (a character is at
    most 6 bytes of JSON: `\\u001f`); anything else is left to `_json_size` to measure."""
    total = 0
    for key, value in meta.items():
        kind = type(value)
        if kind is str:
            total += 6 * (len(key) + len(value)) + 6
        elif value is None or kind is bool or kind is float or kind is int and -10 ** 18 < value < 10 ** 18:
            total += 6 * len(key) + 32
        else:
            return False
        if total > budget:
            return False
    return True


def _json_size(key: str, value: Any) -> int | None:
    """Bytes `key: value` takes in meta's JSON (as records.meta_json writes it); None when it cannot be written
    (nesting the reader parsed may still be too deep for the writer, which runs deeper in the stack)."""
    try:
        return len(json.dumps({key: value}, ensure_ascii=False, default=str).encode("utf-8", "surrogatepass")) - 2
    except (RecursionError, ValueError):
        return None


def media_refs(value: Any, base: Path, root: Path) -> list[dict[str, str]]:
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
        try:
            shown = display_path(target, root)
        except (OSError, RuntimeError) as exc:
            # The OS refused to look the path up (a name over 255 bytes, a folder linking to itself: Python 3.11's
            # pathlib raises RuntimeError for ELOOP). Raised from here it was the reader's, which wrote one
            # `unreadable_file` row for the file and lost every later record; it is this record's `bad_media`.
            raise ValueError(f"media path {ref[:200]!r} cannot be looked up: {type(exc).__name__}: "
                             f"{getattr(exc, 'strerror', None) or exc}") from None
        refs.append({"kind": kind or MEDIA_KIND_BY_SUFFIX.get(target.suffix.lower(), "file"), "path": shown})
    return refs


def _json_type(value: Any) -> str:
    """The JSON name of a parsed value's type (`array`, not Python's `list`)."""
    names = {dict: "object", list: "array", str: "string", bool: "boolean", int: "number", float: "number"}
    return "null" if value is None else names.get(type(value), type(value).__name__)


def preview(obj: dict) -> str:
    return json.dumps(obj, ensure_ascii=False, default=str)[:500]
