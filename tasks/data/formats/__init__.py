"""Readers for user files that never lose a record, streamed with bounded memory.

`read_files` yields `Doc` for every record it can parse and `Bad` (file, line/row/record, reason, error) for
everything it cannot, so ingest can account for every input. Each file's format is decided, in order, by:
the source's explicit `format`; magic bytes of the (decompressed) content (`PAR1` Parquet, `ARROW1` Arrow,
`WARC/`); the file's suffix once compression suffixes are removed (`data.jsonl.zst` → jsonl); an Arrow stream's
continuation marker. Compression (gzip, zstd, bz2, xz) is always detected from the file's first bytes.
"""

from __future__ import annotations

from pathlib import Path
from typing import Callable, Iterator

from specs.ingest import FilesSource
from tasks.data.formats.columnar import ARROW_FILE_MAGIC, ARROW_STREAM_MAGIC, read_arrow, read_parquet
from tasks.data.formats.delimited import read_delimited
from tasks.data.formats.paths import display_path, expand_paths
from tasks.data.formats.streams import Stream, inner_suffix, open_stream
from tasks.data.formats.text import read_jsonl, read_text_file
from tasks.data.formats.warc import WARC_MAGIC, read_warc
from tasks.data.records import Bad, Doc

FORMAT_BY_SUFFIX = {".jsonl": "jsonl", ".ndjson": "jsonl", ".parquet": "parquet", ".txt": "txt", ".md": "md",
                    ".markdown": "md", ".csv": "csv", ".tsv": "tsv", ".arrow": "arrow", ".warc": "warc",
                    ".wet": "warc"}


def read_files(src: FilesSource, root: Path, max_record_bytes: int,
               abandon: Callable[[str], bool] | None = None) -> Iterator[Doc | Bad]:
    """Every record or reject of the source's files, in order. `abandon`, when given, is asked after each one
    whether the rest of its file (named as the item's `origin`) is to be left unread."""
    for listed in expand_paths(src.paths, root, src.name, src.symlinks):
        path = listed.path
        shown = display_path(path, root, follow=False)  # already resolved as far as it should be
        if listed.refused is not None:
            yield Bad(shown, "", listed.reason, listed.refused)
            continue
        try:
            with open_stream(path) as stream:
                for item in _read_one(stream, path, shown, src, root, max_record_bytes):
                    yield item
                    if abandon is not None and abandon(shown):
                        break
        except OSError as exc:  # opening (or the first read of) the file failed: a dangling link, no permission
            yield Bad(shown, "", "unreadable_file", f"{exc.__class__.__name__}: {exc.strerror or exc}")
        except Exception as exc:  # noqa: BLE001 — a reader failing on a hostile file: that file, not the stage
            yield Bad(shown, "", "unreadable_file", f"reading stopped: {exc.__class__.__name__}: {str(exc)[:300]} "
                      "(the records before it were kept)")


def detect_format(stream: Stream, path: Path, declared: str = "auto") -> str | None:
    """The reader for `path` (see the module docstring for the order), or None when there is none."""
    if declared != "auto":
        return declared
    head = stream.head(8)
    if head.startswith(b"PAR1"):
        return "parquet"
    if head.startswith(ARROW_FILE_MAGIC):
        return "arrow"
    if head.startswith(WARC_MAGIC):
        return "warc"
    by_suffix = FORMAT_BY_SUFFIX.get(inner_suffix(path))
    if by_suffix is None and head.startswith(ARROW_STREAM_MAGIC):
        return "arrow"
    return by_suffix


def _read_one(stream: Stream, path: Path, shown: str, src: FilesSource, root: Path, cap: int) -> Iterator[Doc | Bad]:
    fmt = detect_format(stream, path, src.format)
    if fmt is None:
        what = f"{stream.compression}-compressed " if stream.compression else ""
        name = inner_suffix(path) or "files without a suffix"
        yield Bad(shown, "", "unsupported_format", f"no reader for {what}{name} (content starts "
                  f"{stream.head(8)!r}); supported: {', '.join(sorted(FORMAT_BY_SUFFIX))}")
    elif fmt == "jsonl":
        yield from read_jsonl(stream, path, shown, src, root, cap)
    elif fmt in ("csv", "tsv"):
        yield from read_delimited(stream, path, shown, src, root, cap, fmt)
    elif fmt == "parquet":
        if stream.compression is not None:
            yield Bad(shown, "", "unsupported_format", f"Parquet inside {stream.compression} needs random access; "
                      "decompress it first (Parquet compresses its own pages)")
        else:
            yield from read_parquet(path, shown, src, root, cap)
    elif fmt == "arrow":
        yield from read_arrow(stream, path, shown, src, root, cap)
    elif fmt == "warc":
        yield from read_warc(stream, shown, cap)
    else:
        yield from read_text_file(stream, shown, fmt, cap)
