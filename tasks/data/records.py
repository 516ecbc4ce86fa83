"""The normalized record every data stage exchanges, its Parquet schema, and quarantine entries.

A reader yields `Doc` (a candidate record) or `Bad` (something that could not become a record). Ingest turns
docs into rows of RECORD_SCHEMA, or quarantines them with a reason; nothing read is ever dropped silently.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterator

import pyarrow as pa
import pyarrow.parquet as pq

from tasks.core.files import finite

MEDIA_TYPE = pa.struct([("kind", pa.string()), ("path", pa.string())])

RECORD_SCHEMA = pa.schema(
    [
        ("id", pa.string()),          # stable, unique per source: "<source>/<origin-derived key>"
        ("text", pa.string()),        # normalized document text (UTF-8)
        ("source", pa.string()),      # source label from params
        ("lang", pa.string()),        # language tag from params
        ("origin", pa.string()),      # where it came from: "path:line" or "package:member"
        ("meta", pa.string()),        # JSON object with the remaining fields (sorted keys)
        ("media", pa.list_(MEDIA_TYPE)),  # references to image/audio files (absolute or root-relative)
    ]
)

QUARANTINE_SCHEMA = pa.schema(
    [
        ("source", pa.string()),
        ("origin", pa.string()),      # file path (root-relative where possible)
        ("location", pa.string()),    # "line 12", "row 3", "byte 1024", or "" for whole-file problems
        ("reason", pa.string()),      # short code, one of QUARANTINE_REASONS
        ("detail", pa.string()),      # the error message
        ("raw", pa.string()),         # up to RAW_PREVIEW characters of the offending input, for a human
    ]
)

# clean's dropped.parquet: every record clean removed, why, and (duplicates) the id of the one kept for it
LEDGER_SCHEMA = pa.schema(
    [("id", pa.string()), ("source", pa.string()), ("reason", pa.string()), ("score", pa.float64()),
     ("kept_id", pa.string()), ("detail", pa.string()), ("text", pa.string())]
)

QUARANTINE_REASONS = (
    "invalid_utf8", "invalid_json",
    "not_an_object",      # (multimodal's manifest reader; ingest's readers say wrong_type, the record schema's word)
    "missing_text", "empty_text",
    "missing_id",         # a source with an id field, and a record without one (absent, null or blank)
    "wrong_type", "oversized",
    "missing_media", "bad_media", "unreadable_file", "unsupported_format", "duplicate_id",
    "truncated",          # a compressed stream or a file that breaks off: the records before it are kept
    "record_too_large",   # a line/record over ingest.max_record_bytes, or one that would parse to over 1M JSON
                          # values / CSV fields (streams.MAX_JSON_VALUES, delimited.MAX_ROW_FIELDS): never held
    "bad_row",            # a CSV/TSV row that does not parse or has the wrong number of fields
    "not_html",           # a WARC response whose payload is not HTML (PDF, image, ...)
    "empty_extraction",   # an HTML page with no main text
    "bad_encoding",       # a WARC payload whose HTTP transfer/content coding does not decode
    "bad_length",         # a WARC record whose Content-Length is not a number or does not end where the next begins
    "link_outside",       # a symbolic link out of the source's folder, not opened (ingest `symlinks: inside`)
    "not_a_file",         # a FIFO, socket or device among a source's files (or a link to one), not opened
    "abandoned_file",     # the rest of a file after ingest.max_bad_run records in a row were quarantined, unread
)
RAW_PREVIEW = 500
META_DROPPED = "_dropped"  # the meta key naming the fields left out of a record's meta (fields.meta_max_bytes)


@dataclass
class Doc:
    """A candidate record produced by a reader (text not yet checked)."""

    key: str                     # unique within the source; becomes id "<source>/<key>"
    text: Any                    # should be str; ingest quarantines anything else as wrong_type
    origin: str                  # file or package member the record came from
    meta: dict[str, Any] = field(default_factory=dict)
    media: list[dict[str, str]] = field(default_factory=list)
    location: str = ""           # "line 12" / "row 3" inside `origin`, when it holds many records

    @property
    def full_origin(self) -> str:
        return f"{self.origin}:{self.location.split()[-1]}" if self.location else self.origin


@dataclass
class Bad:
    """Input that could not become a record, with where and why."""

    origin: str
    location: str
    reason: str
    detail: str
    raw: str = ""

    def __post_init__(self) -> None:
        if self.reason not in QUARANTINE_REASONS:
            raise ValueError(f"unknown quarantine reason {self.reason!r}")
        # Quarantine text often quotes the hostile input itself (a lone surrogate, an undecodable file name):
        # escape it, or writing quarantine.parquet would fail on exactly the records it exists to keep.
        self.origin, self.location = valid_unicode(self.origin), valid_unicode(self.location)
        self.detail = valid_unicode(self.detail)
        self.raw = valid_unicode(self.raw[:RAW_PREVIEW])[:RAW_PREVIEW]


def valid_unicode(text: str) -> str:
    """`text` unchanged when UTF-8 can hold it; else with lone surrogates written as backslash escapes.

    Surrogates come from two places: file names that are not UTF-8 (Python decodes their bytes as U+DC80..
    U+DCFF, "surrogateescape"; shown here as `\\xNN`) and JSON escapes such as "\\ud800" (shown as `\\ud800`).
    """
    try:
        text.encode("utf-8")
        return text
    except UnicodeEncodeError:
        pass
    try:
        return text.encode("utf-8", "surrogateescape").decode("utf-8", "backslashreplace")
    except UnicodeEncodeError:  # surrogates outside the surrogateescape range
        return text.encode("utf-8", "backslashreplace").decode("utf-8")


def unicode_error(text: str) -> str | None:
    """Why `text` cannot be stored as UTF-8 (a lone surrogate and where), or None when it can."""
    try:
        text.encode("utf-8")
        return None
    except UnicodeEncodeError as exc:
        return f"not valid Unicode at character {exc.start}: {exc.reason}"


def meta_json(meta: dict[str, Any]) -> str:
    """A record's meta as the JSON text of its `meta` column (sorted keys); a NaN or ±Infinity in it is null."""
    try:
        return json.dumps(meta, sort_keys=True, ensure_ascii=False, default=str, allow_nan=False)
    except ValueError:  # a non-finite number: Python would write a bare `NaN`, which no other JSON reader takes
        return json.dumps(finite(meta), sort_keys=True, ensure_ascii=False, default=str)



def write_table(rows: list[dict[str, Any]], schema: pa.Schema, path: Path) -> None:
    """Write rows as one Parquet file with a fixed schema (deterministic bytes for equal rows)."""
    table = pa.Table.from_pylist(rows, schema=schema)
    pq.write_table(table, path, compression="zstd", write_statistics=True)


class RowWriter:
    """Rows appended one at a time into one Parquet file, a row group per `chunk` rows: memory stays one chunk
    whatever the count (a 40 KB gzip of a million bad lines held ~570 MB of quarantine rows before). Up to
    `chunk` rows the file is byte-identical to `write_table`'s."""

    def __init__(self, path: Path, schema: pa.Schema, chunk: int = 50_000):
        self.path, self.schema, self.chunk = path, schema, chunk
        self.rows: list[dict[str, Any]] = []
        self.writer: pq.ParquetWriter | None = None

    def append(self, row: dict[str, Any]) -> None:
        self.rows.append(row)
        if len(self.rows) >= self.chunk:
            if self.writer is None:
                self.writer = pq.ParquetWriter(self.path, self.schema, compression="zstd", write_statistics=True)
            self.writer.write_table(pa.Table.from_pylist(self.rows, schema=self.schema))
            self.rows = []

    def close(self) -> None:
        if self.writer is None:
            write_table(self.rows, self.schema, self.path)
            return
        if self.rows:
            self.writer.write_table(pa.Table.from_pylist(self.rows, schema=self.schema))
        self.writer.close()


def read_records(folder: Path) -> Iterator[pa.Table]:
    """Yield each record shard of an ingest-style output folder (`shards/*.parquet`) in order."""
    for shard in sorted((folder / "shards").glob("*.parquet")):
        yield pq.read_table(shard)


def read_all_records(folder: Path) -> pa.Table:
    tables = list(read_records(folder))
    return pa.concat_tables(tables) if tables else RECORD_SCHEMA.empty_table()


# A batch is also cut once it holds this many bytes: `batch_rows` rows of multi-megabyte documents (books, whole
# web dumps under a raised ingest.max_doc_chars) would otherwise be held at once (20,000 x 5 MB = 100 GB).
BATCH_BYTES = 128 << 20


def iter_record_batches(folder: Path, columns: list[str], batch_rows: int,
                        max_bytes: int = BATCH_BYTES) -> Iterator[pa.Table]:
    """The records of `folder/shards/*.parquet` (in shard order) as tables of `batch_rows` rows, or fewer where
    `max_bytes` of them are held (and the last), holding only `columns`: memory is bounded by a batch and one
    shard's row group, whatever the size of the corpus or its documents. Batches span shard boundaries, so small
    shards still make full batches."""
    pending: list[pa.RecordBatch] = []
    held = held_bytes = 0
    for shard in sorted((folder / "shards").glob("*.parquet")):
        for batch in pq.ParquetFile(shard).iter_batches(batch_size=batch_rows, columns=columns):
            while batch.num_rows:
                take = batch.slice(0, batch_rows - held)
                batch = batch.slice(take.num_rows)
                pending.append(take)
                held, held_bytes = held + take.num_rows, held_bytes + take.nbytes
                if held == batch_rows or held_bytes >= max_bytes:
                    yield pa.Table.from_batches(pending)
                    pending, held, held_bytes = [], 0, 0
    if pending:
        yield pa.Table.from_batches(pending)
