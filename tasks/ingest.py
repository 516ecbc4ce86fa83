"""Stage `ingest`: read every declared source into normalized records; quarantine what cannot be a record.

Outputs (in data/ingest/): `shards/<source>-NNNNN.parquet` (RECORD_SCHEMA), `quarantine.parquet`
(QUARANTINE_SCHEMA: file, line/row/offset, reason, error, raw preview) and `stats.json`. Counts are conserved
per source: read = kept + quarantined, checked before anything is reported.
"""

from __future__ import annotations

import logging
import time
from collections import Counter
from pathlib import Path
from typing import Any, Callable, Iterator

from specs.ingest import EmbeddedSource, IngestSpec
from specs.results import StageResult
from tasks.core.files import atomic_path, write_json_atomic
from tasks.core.runner import StagePaths
from tasks.data.cleanup.normalize import invisible_only, strip_control_chars
from tasks.data.formats.paths import display_path, link_roots
from tasks.data.records import (META_DROPPED, QUARANTINE_SCHEMA, RECORD_SCHEMA, Bad, Doc, RowWriter, meta_json,
                                unicode_error, write_table)

log = logging.getLogger("forgeline.ingest")
PROGRESS_EVERY_S = 5.0
# A shard is also written once its rows hold this many characters of text and meta: `shard_records` rows of
# 60 MB records would otherwise be held together (sixty such rows took 2 GB before their shard was written).
SHARD_CHARS = 128 << 20


def run(spec: IngestSpec, paths: StagePaths) -> StageResult:
    shard_dir = paths.out / "shards"
    shard_dir.mkdir(parents=True, exist_ok=True)
    stats: dict[str, dict[str, Any]] = {}
    with atomic_path(paths.out / "quarantine.parquet") as tmp:  # streamed: memory is one chunk of entries
        quarantine = RowWriter(tmp, QUARANTINE_SCHEMA)
        for src in spec.sources:
            stats[src.name] = _ingest_source(src, spec, paths, shard_dir, quarantine)
            s = stats[src.name]
            log.info("%s: read %d, kept %d, quarantined %d", src.name, s["read"], s["kept"], s["quarantined"])
        quarantine.close()
    totals = {k: sum(s[k] for s in stats.values())
              for k in ("read", "kept", "quarantined", "chars", "control_chars_removed")}
    counts = {**totals, "by_source": stats}
    write_json_atomic(paths.out / "stats.json", counts)
    return StageResult(stage="ingest", counts=counts, summary=_summary(totals, stats), table=_table(stats))


def _ingest_source(src, spec: IngestSpec, paths: StagePaths, shard_dir: Path, quarantine: RowWriter
                   ) -> dict[str, Any]:
    reasons: Counter[str] = Counter()
    kept = chars = read = shard_no = controls = trimmed = 0
    first_origin: dict[str, str] = {}  # id -> origin of the record that kept it: ids are unique per source
    pending: list[dict[str, Any]] = []
    pending_chars = 0
    last_log = time.monotonic()

    def flush() -> None:
        nonlocal shard_no, pending, pending_chars
        with atomic_path(shard_dir / f"{src.name}-{shard_no:05d}.parquet") as tmp:
            write_table(pending, RECORD_SCHEMA, tmp)
        shard_no, pending, pending_chars = shard_no + 1, [], 0

    folders = media_folders(src, paths.root)
    run = BadRun(spec.max_bad_run)
    for item in _items(src, spec, paths.root, run.abandon):
        read += 1
        outcome, removed = _to_row(item, src, spec, paths.root, folders) if isinstance(item, Doc) else (item, 0)
        if not isinstance(outcome, Bad) and outcome["id"] in first_origin:
            # Two records under one id would make every later join by id ambiguous; the first one wins.
            outcome = Bad(item.origin, item.location, "duplicate_id", f"id {outcome['id']!r} was already given to "
                          f"the record from {first_origin[outcome['id']]}", outcome["text"])
        stop = run.note(item, outcome)  # the entry for the rest of this file, which its reader leaves unread
        if isinstance(outcome, Bad):
            for bad in (outcome, stop) if stop is not None else (outcome,):
                reasons[bad.reason] += 1
                quarantine.append({"source": src.name, **bad.__dict__})
            if stop is not None:
                log.warning("%s: %s: %s", src.name, stop.origin, stop.detail)
                read += 1  # the unread rest of the file counts as one input, quarantined
        else:
            pending.append(outcome)
            first_origin[outcome["id"]] = outcome["origin"]
            kept += 1
            chars += len(outcome["text"])
            controls += removed
            trimmed += META_DROPPED in item.meta  # fields left out of meta over fields.meta_max_bytes
            pending_chars += len(outcome["text"]) + len(outcome["meta"] or "")
            if len(pending) >= spec.shard_records or pending_chars >= SHARD_CHARS:
                flush()
        if time.monotonic() - last_log > PROGRESS_EVERY_S:
            log.info("%s: %d read, %d kept so far", src.name, read, kept)
            last_log = time.monotonic()
        if src.max_docs is not None and kept >= src.max_docs:
            break
    if pending or shard_no == 0:
        flush()  # every source gets at least one (possibly empty) shard, so readers see its schema
    quarantined = sum(reasons.values())
    if read != kept + quarantined:  # the conservation law the whole data side relies on
        raise AssertionError(f"{src.name}: read {read} != kept {kept} + quarantined {quarantined}")
    return {"read": read, "kept": kept, "quarantined": quarantined, "chars": chars, "shards": shard_no,
            "control_chars_removed": controls, "meta_trimmed": trimmed, "by_reason": dict(sorted(reasons.items()))}


def _items(src, spec: IngestSpec, root: Path, abandon: Callable[[str], bool]) -> Iterator[Doc | Bad]:
    if isinstance(src, EmbeddedSource):
        from tasks.data.embedded import read_embedded

        return read_embedded(src.corpus)
    from tasks.data.formats import read_files

    return read_files(src, root, spec.max_record_bytes, abandon)


class BadRun:
    """Quarantined records in a row from one file, none kept between them (`IngestSpec.max_bad_run`): past the
    limit the file is abandoned, as the stage is told by `note` and its reader asks through `abandon`."""

    def __init__(self, limit: int | None) -> None:
        self.limit, self.origin, self.abandoned = limit, None, None
        self.run: Counter[str] = Counter()  # the run's reasons

    def note(self, item: Doc | Bad, outcome: dict[str, Any] | Bad) -> Bad | None:
        """Count `item` (whose outcome is a row or a Bad); the `abandoned_file` entry when its run reaches the
        limit."""
        if self.abandoned is not None or item.origin != self.origin:  # the reader has moved to the next file
            self.origin, self.abandoned = item.origin, None
            self.run.clear()
        if not isinstance(outcome, Bad):
            self.run.clear()
            return None
        self.run[outcome.reason] += 1
        if self.limit is None or self.run.total() < self.limit:
            return None
        self.abandoned = item.origin
        reasons = ", ".join(f"{reason} {n:,}" for reason, n in self.run.most_common(3))
        return Bad(item.origin, item.location, "abandoned_file", f"{self.limit:,} records in a row were quarantined "
                   f"({reasons}), none kept: the rest of the file was not read (ingest.max_bad_run; null reads "
                   "every file to its end)", outcome.raw)

    def abandon(self, origin: str) -> bool:
        return origin == self.abandoned


def media_folders(src, root: Path) -> list[Path] | None:
    """The folders a files source's media references must resolve into (None: anywhere). With `symlinks:
    inside` a downloaded corpus is untrusted, and a record's `"image": "../../home/me/id.png"` or `"/etc/passwd"`
    would carry a file from outside it into the multimodal data, as a link would: the folders are those its
    links may point into (`link_roots`), or a named file's own folder."""
    if isinstance(src, EmbeddedSource) or src.symlinks == "follow" or src.fields.media is None:
        return None

    folders: list[Path] = []
    for pattern in src.paths:
        base = Path(pattern) if Path(pattern).is_absolute() else root / pattern
        folders += [base.parent.resolve()] if base.is_file() else link_roots(base)
    return folders


def _to_row(doc: Doc, src, spec: IngestSpec, root: Path, folders: list[Path] | None = None
            ) -> tuple[dict[str, Any] | Bad, int]:
    """Normalize one candidate record, or say why it must be quarantined; also how many controls it lost."""
    preview = doc.text if isinstance(doc.text, str) else repr(doc.text)
    where = doc.location
    if not isinstance(doc.text, str):
        return Bad(doc.origin, where, "wrong_type", f"text must be a string, got {type(doc.text).__name__}",
                   preview), 0
    try:
        doc.text.encode("utf-8")
    except UnicodeEncodeError as exc:  # lone surrogates from JSON escapes such as "\ud800"
        return Bad(doc.origin, where, "invalid_utf8", f"text is not valid Unicode at character {exc.start}: "
                   f"{exc.reason}", doc.text.encode("utf-8", "backslashreplace").decode()), 0
    # Newlines are normalized so the same document from Windows and Unix files is the same record.
    text = doc.text.replace("\r\n", "\n").replace("\r", "\n")
    # Kept text is clean text: a NUL or another control character (a JSON "\u0000" escape, a raw byte in a
    # txt/csv file) breaks tokenizers and downstream tools, so it goes here, once, for every reader. The
    # line-breaking controls (\v, \f, NEL, ...) become newlines; tab and newline stay.
    text, removed = strip_control_chars(text)
    key, removed_from_key = strip_control_chars(doc.key)
    text = text.strip()
    if not text or invisible_only(text):  # zero-width and bidi characters alone draw nothing: no document
        what = ("control characters and whitespace only" if removed and not text else "empty or whitespace only"
                if not text else "invisible characters only (format characters such as zero-width spaces, "
                "joiners and bidi controls, variation selectors, fillers)")
        return Bad(doc.origin, where, "empty_text", f"text is {what}", preview), 0
    if len(text) > spec.max_doc_chars:
        return Bad(doc.origin, where, "oversized", f"{len(text)} characters > ingest.max_doc_chars "
                   f"({spec.max_doc_chars})", text), 0
    if (bad := _media_problem(doc, root, folders)) is not None:
        return bad, 0
    meta = meta_json(doc.meta)  # JSON escapes control characters in meta values, so meta needs no stripping
    # The text passed the check above, but a lone surrogate in the id or in another field ("\ud800" in JSON)
    # would still make the shard unwritable: quarantine the record rather than lose the whole source.
    for what, value in (("id", key), ("meta", meta)):
        if (why := unicode_error(value)) is not None:
            return Bad(doc.origin, where, "invalid_utf8", f"{what} is {why}", preview), 0
    return {"id": f"{src.name}/{key}", "text": text, "source": src.name, "lang": src.lang,
            "origin": doc.full_origin, "meta": meta, "media": doc.media}, removed + removed_from_key


def _media_problem(doc: Doc, root: Path, folders: list[Path] | None) -> Bad | None:
    """Why `doc`'s media references cannot be kept (`missing_media`, `bad_media`), or None."""
    preview = doc.text if isinstance(doc.text, str) else repr(doc.text)
    try:
        missing = [m["path"] for m in doc.media if not _resolve(m["path"], root).is_file()]
        outside = [] if missing else [m["path"] for m in doc.media if folders is not None and not any(
            _resolve(m["path"], root).resolve().is_relative_to(f) for f in folders)]
    except (OSError, RuntimeError) as exc:
        # The OS refused to look a path up (too long, a link loop, a folder without permission; 3.11's pathlib
        # raises RuntimeError for ELOOP): that record's media, not a reason to stop the stage.
        return Bad(doc.origin, doc.location, "bad_media", f"media path cannot be looked up: {type(exc).__name__}: "
                   f"{getattr(exc, 'strerror', None) or exc}", preview)
    if missing:
        return Bad(doc.origin, doc.location, "missing_media", f"referenced file(s) not found: {', '.join(missing)}",
                   preview)
    if outside:
        shown = ", ".join(display_path(f, root) for f in folders or [])
        return Bad(doc.origin, doc.location, "bad_media", f"media path(s) outside the source's folder ({shown}): "
                   f"{', '.join(outside)}; not read (a source's `symlinks: follow` allows them)", preview)
    return None


def _resolve(path: str, root: Path) -> Path:
    p = Path(path)
    return p if p.is_absolute() else root / p


def _table(stats: dict[str, dict[str, Any]]) -> list[dict[str, Any]]:
    return [{"source": name, "read": s["read"], "kept": s["kept"], "quarantined": s["quarantined"],
             "chars": s["chars"], **{f"q:{r}": n for r, n in s["by_reason"].items()}} for name, s in stats.items()]


def _summary(totals: dict[str, int], stats: dict[str, dict[str, Any]]) -> str:
    lines = [f"**ingest**: read {totals['read']:,} records, kept {totals['kept']:,} "
             f"({totals['chars']:,} characters), quarantined {totals['quarantined']:,}; "
             f"{totals['control_chars_removed']:,} control characters removed from kept records.", "",
             "| source | read | kept | quarantined | chars | reasons |", "|---|---:|---:|---:|---:|---|"]
    for name, s in stats.items():
        reasons = ", ".join(f"{r}: {n}" for r, n in s["by_reason"].items()) or "-"
        lines.append(f"| {name} | {s['read']:,} | {s['kept']:,} | {s['quarantined']:,} | {s['chars']:,} | {reasons} |")
    return "\n".join(lines)

