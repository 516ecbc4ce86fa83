"""Multimodal readers: image/audio–text rows in jsonl or parquet, WebDataset tar shards (streamed with tarfile:
members grouped by key, as the `webdataset` package groups them), and audio files with transcripts beside them
(.srt, .vtt, .json {text, segments} or .txt). Each yields `MMRecord`s, or `MMBad` for what cannot become one;
a caption that is missing is not a read error (the `caption` check reports it) and neither is odd timing.

A downloaded set is untrusted: a media path (or a transcript beside a clip) must lie, links resolved, inside the
folders the source names (`Scope.folders`, plus its `media_roots`) — `../../etc/passwd`, `/etc/hostname` or a
link out is `media_outside` and never opened; a path the OS will not look up (a name over 255 bytes, a link to
itself) is `media_unreadable`, that row alone; a URL is `media_url` (nothing is fetched); a tar member over the
bounds' `max_bytes` (a caption or json member over SIDECAR_MAX_BYTES) is not read (`file_too_large`), a member
no check reads is skipped, and two members of one sample with the same extension are `duplicate_member`, as the
`webdataset` package refuses them. A string no UTF-8 can hold (a JSON "\\ud800" escape, a tar member name that
is not UTF-8) in an id, caption, segment or meta value is `invalid_utf8`."""

from __future__ import annotations

import base64
import binascii
import glob
import json
import logging
import re
import tarfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterator, Mapping

import pyarrow.parquet as pq

from specs.multimodal import FilesMMSource
from tasks.data.formats.parquet_rows import parquet_rows
from tasks.data.formats.paths import display_path, expand_paths, link_roots
from tasks.data.formats.json_lines import PARSE_ISSUES, json_lines
from tasks.data.formats.streams import inner_suffix, open_stream
from tasks.core.files import finite
from tasks.data.records import unicode_error
from tasks.data.multimodal.records import AUDIO_SUFFIXES, MMBad, MMRecord, MediaRef, Segment, kind_cap, \
    kind_of_suffix
from tasks.data.multimodal.subtitles import parse_cues

SIDECARS = (".srt", ".vtt", ".json", ".txt")
log = logging.getLogger("forgeline.multimodal")
META_SCALARS = (str, int, float, bool, type(None))
SIDECAR_MAX_BYTES = 16 * 1024 * 1024
DRAIN_BYTES = 1 << 20   # a tar member that is not kept is read through in pieces of this size (`drain`)
_URL = re.compile(r"^(https?|ftps?|s3|gs|gcs|az|abfs|hf|file|data|blob):", re.I)   # fetched by nobody here


@dataclass(frozen=True)
class Scope:
    """Where a source's media may come from and how much of a tar member is read."""

    root: Path
    folders: tuple[Path, ...]
    max_bytes: int                         # the largest cap of any kind
    caps: tuple[tuple[str, int], ...] = ()   # per kind (`kind_cap`); empty: `max_bytes` for every kind

    def media_cap(self, kind: str | None) -> int:
        """The most bytes a media member of `kind` may have (`kind_cap`)."""
        return kind_cap(dict(self.caps), kind) if self.caps else self.max_bytes

    def inside(self, target: Path) -> bool:
        """True when `target`, links resolved, lies in one of the folders."""
        real = target.resolve()
        return any(real.is_relative_to(f) for f in self.folders)


def source_scope(src: FilesMMSource, root: Path, max_bytes: int | Mapping[str, int]) -> Scope:
    """The folders `src.paths` name (a directory, a glob's part before its first wildcard, a named file's
    folder) and its `media_roots`, resolved; `max_bytes` one cap for every kind, or the `image` and `audio`
    caps (`kind_cap`)."""
    folders: list[Path] = []
    for pattern in src.paths:
        base = Path(pattern) if Path(pattern).is_absolute() else root / pattern
        folders += link_roots(base) if glob.has_magic(pattern) or base.is_dir() else [base.resolve().parent]
    folders += [(root / m).resolve() for m in src.media_roots]
    if isinstance(max_bytes, int):
        return Scope(root, tuple(dict.fromkeys(folders)), max_bytes)
    return Scope(root, tuple(dict.fromkeys(folders)), max(max_bytes.values()), tuple(sorted(max_bytes.items())))


def read_source(src: FilesMMSource, root: Path,
                max_bytes: int | Mapping[str, int] = 256 * 1024 * 1024) -> Iterator[MMRecord | MMBad]:
    """Every record of a files source, file by file in sorted order; a tar media member over its kind's cap
    (`max_bytes`: one for every kind, or {"image": ..., "audio": ...}) is not read."""
    scope = source_scope(src, root, max_bytes)
    listed = expand_paths(src.paths, root, src.name)
    audio_stems = {item.path.with_suffix("") for item in listed if item.path.suffix.lower() in AUDIO_SUFFIXES}
    skipped = 0
    for item in listed:
        path, shown = item.path, display_path(item.path, root)
        if item.refused:
            yield MMBad(src.name, shown, item.reason, item.refused)
            continue
        fmt = src.format if src.format != "auto" else _format_of(path, audio_stems)
        if fmt is None:
            skipped += 1  # a media file or a transcript sidecar: read through the rows or audio that name it
            continue
        try:
            yield from READERS[fmt](path, shown, src, scope)
        except (OSError, ValueError, tarfile.TarError, RecursionError) as exc:
            yield MMBad(src.name, shown, "unreadable_file", f"{type(exc).__name__}: {str(exc)[:300]}")
    if skipped:
        log.info("multimodal source '%s': %d media/transcript file(s) read only through the records naming them",
                 src.name, skipped)


def _format_of(path: Path, audio_stems: set[Path]) -> str | None:
    """auto: rows, shards, and audio files that have a transcript beside them; a bare image or clip is media
    that rows name, not a record of its own (`format: audio` reads every clip, transcript or not)."""
    suffix = path.suffix.lower()
    if suffix in AUDIO_SUFFIXES:
        return "audio" if any(_is_file(path.with_suffix(s)) for s in SIDECARS) else None
    if suffix in SIDECARS and path.with_suffix("") in audio_stems:
        return None
    # by the suffix under a compression's (`shard-0001.tar.gz`, `rows.jsonl.zst`): both readers decompress by the
    # file's first bytes, and such shards were counted as media and skipped without a word
    return {".jsonl": "jsonl", ".json": "jsonl", ".parquet": "parquet", ".tar": "webdataset",
            ".tgz": "webdataset"}.get(inner_suffix(path))


def _is_file(path: Path) -> bool:
    """`path.is_file()`, False where the OS refuses the name: a 255-byte clip name's `.json` sidecar is 256 bytes
    (ENAMETOOLONG), and that OSError, raised while choosing a file's reader, stopped the stage."""
    try:
        return path.is_file()
    except OSError:
        return False


def _record(src: FilesMMSource, key: str, text: Any, media: MediaRef, origin: str,
            meta: dict[str, Any]) -> MMRecord | MMBad:
    """The record, or `invalid_utf8` when a string it would write holds a lone surrogate — a JSON "\\ud800"
    escape in an id, caption, segment or meta value, or a tar member name that is not UTF-8 (`s\\xff.png`):
    ids are hashed into sample keys and everything is written as UTF-8, so one such row crashed the stage."""
    text = text if isinstance(text, str) else ""
    # meta is written as JSON in the shards: a NaN/Infinity from a row or a json member is null, as ingest writes it
    meta = finite(meta)
    fields = {"id": key, "origin": origin, "caption": text, "meta": json.dumps(meta, ensure_ascii=False, default=str),
              "segments": "".join(seg.text for seg in media.segments)}
    for what, value in fields.items():
        if (why := unicode_error(value)) is not None:
            return MMBad(src.name, origin, "invalid_utf8", f"{what} is {why}")
    return MMRecord(id=f"{src.name}/{key}", source=src.name, text=text, lang=src.lang, media=media, origin=origin,
                    meta=meta)


def _segments(value: Any) -> tuple[Segment, ...]:
    if value is None:
        return ()
    if not isinstance(value, list):
        raise ValueError(f"segments must be a list of {{start, end, text}}, got {type(value).__name__}")
    return tuple(Segment.parse(s) for s in value)


class Refused(ValueError):
    """A media reference that is not followed: `reason` is the quarantine reason."""

    def __init__(self, reason: str, detail: str):
        super().__init__(detail)
        self.reason = reason


def _media_of(value: Any, kind: Any, base: Path, scope: Scope, segments: tuple[Segment, ...]) -> MediaRef:
    """A path (relative to the row's file, inside the scope), raw bytes, base64 text in {bytes: ...}, or
    {path: ...}."""
    encoded = False   # a string under `bytes` (as Hugging Face datasets write images to JSON) is base64
    if isinstance(value, dict):
        encoded = value.get("bytes") is not None
        value = value["bytes"] if encoded else value.get("path")
    if isinstance(value, (bytes, bytearray)):
        return MediaRef(kind if isinstance(kind, str) else "image", data=bytes(value), segments=segments)
    if not isinstance(value, str) or not value.strip():
        raise ValueError(f"media must be a path or bytes, got {type(value).__name__}")
    if encoded or (kind_of_suffix(Path(value).suffix) is None and len(value) > 256):  # long, no extension: base64
        try:
            return MediaRef(kind if isinstance(kind, str) else "image", data=base64.b64decode(value, validate=True),
                            segments=segments)
        except (binascii.Error, ValueError):
            raise ValueError("media is neither a file path nor base64 bytes") from None
    if _URL.match(value):
        raise Refused("media_url", f"{value[:200]!r} is a URL: nothing is fetched (download it and name the file)")
    if "\x00" in value or any(0xD800 <= ord(c) <= 0xDFFF for c in value):
        raise ValueError("media path holds a NUL or a lone surrogate")
    target = Path(value) if Path(value).is_absolute() else base / value
    try:
        if not scope.inside(target):
            raise Refused("media_outside", f"{value[:200]!r} resolves to {target.resolve()}, outside the source's "
                          f"folders ({', '.join(map(str, scope.folders))}; add one to `media_roots`): not read")
        shown = display_path(target, scope.root)
    except (OSError, RuntimeError) as exc:
        # The OS will not look the path up (a name over 255 bytes, a link to itself: 3.11's pathlib raises RuntimeError
        # for ELOOP): this row's media, not its file's; escaping, it lost the file's later rows or stopped the stage.
        raise Refused("media_unreadable", f"{value[:200]!r}: {type(exc).__name__}: "
                      f"{getattr(exc, 'strerror', None) or exc}") from None
    kind = kind if isinstance(kind, str) else (kind_of_suffix(target.suffix) or "image")
    return MediaRef(kind, path=shown, segments=segments)


def _from_row(obj: Any, path: Path, shown: str, where: str, src: FilesMMSource, scope: Scope) -> MMRecord | MMBad:
    if not isinstance(obj, dict):
        return MMBad(src.name, f"{shown}:{where}", "not_an_object", f"expected an object, got {type(obj).__name__}")
    try:
        segments = _segments(obj.get(src.segments_field))
        media = _media_of(obj.get(src.media_field), obj.get(src.kind_field), path.parent, scope, segments)
    except ValueError as exc:
        return MMBad(src.name, f"{shown}:{where}", getattr(exc, "reason", "bad_media"), str(exc))
    key = str(obj[src.id_field]) if src.id_field and obj.get(src.id_field) is not None else f"{shown}:{where}"
    mapped = {src.media_field, src.text_field, src.segments_field, src.kind_field, src.id_field}
    meta = {k: v for k, v in obj.items() if k not in mapped and isinstance(v, META_SCALARS)}
    return _record(src, key, obj.get(src.text_field), media, f"{shown}:{where}", meta)


def read_jsonl(path: Path, shown: str, src: FilesMMSource, scope: Scope) -> Iterator[MMRecord | MMBad]:
    """The rows of a jsonl file, streamed and parsed by `json_lines`: a line over the source's `max_line_bytes` is
    `record_too_large`, skipped unread; a damaged compressed file ends `truncated`; a line that is not UTF-8 JSON
    is `invalid_json`."""
    for line in json_lines(path, src.max_line_bytes, f"max_line_bytes of multimodal source {src.name!r}"):
        where = f"{shown}:{line.number}"
        if line.issue in PARSE_ISSUES:
            yield MMBad(src.name, where, "invalid_json", str(line.error)[:300])
        elif line.issue is not None:
            yield MMBad(src.name, where, line.issue, line.detail)
        else:
            yield _from_row(line.value, path, shown, str(line.number), src, scope)


def read_parquet(path: Path, shown: str, src: FilesMMSource, scope: Scope) -> Iterator[MMRecord | MMBad]:
    """The rows of a Parquet file, streamed as ingest and prefer_data read them (`parquet_rows`): a row whose
    values (media bytes included) decode to more than the source's `max_line_bytes` is `record_too_large`, skipped
    unread; a damaged row group is one `unreadable_file` row and the other groups are read."""
    cap = src.max_line_bytes
    for r in parquet_rows(path, cap):
        where = f"{shown}:{r.number}"
        if r.issue == "unreadable_file" and r.number == 0:
            yield MMBad(src.name, shown, "unreadable_file", f"not a readable Parquet file: "
                        f"{type(r.error).__name__}: {str(r.error)[:300]}")
        elif r.issue == "unreadable_file":
            yield MMBad(src.name, where, "unreadable_file", f"rows {r.number}-{r.last} (row group {r.group}) could "
                        f"not be read: {type(r.error).__name__}: {str(r.error)[:300]}")
        elif r.issue == "record_too_large":
            yield MMBad(src.name, where, "record_too_large", f"row of {r.size:,} bytes > the {cap:,}-byte cap "
                        f"(max_line_bytes of multimodal source {src.name!r}); skipped unread{r.group_note}")
        else:
            yield _from_row(r.data, path, shown, str(r.number), src, scope)


def read_audio(path: Path, shown: str, src: FilesMMSource, scope: Scope) -> Iterator[MMRecord | MMBad]:
    """One audio file; its transcript is the first sidecar found (.srt, .vtt, .json, .txt) of the same stem
    (inside the scope, at most SIDECAR_MAX_BYTES)."""
    text, segments, meta = "", (), {}
    for suffix in SIDECARS:
        side = path.with_suffix(suffix)
        if not _is_file(side):
            continue
        if not scope.inside(side):
            yield MMBad(src.name, shown, "media_outside", f"transcript {side.name} links to {side.resolve()}, "
                        "outside the source's folders: not read")
            return
        if side.stat().st_size > SIDECAR_MAX_BYTES:
            yield MMBad(src.name, shown, "file_too_large", f"transcript {side.name} is over {SIDECAR_MAX_BYTES} "
                        "bytes")
            return
        body = side.read_text(encoding="utf-8")
        if suffix in (".srt", ".vtt"):
            segments = tuple(parse_cues(body, side.name))
        elif suffix == ".json":
            obj = json.loads(body)
            if not isinstance(obj, dict):
                raise ValueError(f"{side.name}: expected an object {{text, segments}}")
            segments, text = _segments(obj.get("segments")), obj.get("text") or ""
            meta = {k: v for k, v in obj.items() if k not in ("text", "segments") and isinstance(v, META_SCALARS)}
        else:
            text = body.strip()
        meta["transcript"] = side.name
        break
    text = text or " ".join(s.text for s in segments)
    yield _record(src, shown, text, MediaRef("audio", path=shown, segments=segments), shown, meta)


def read_webdataset(path: Path, shown: str, src: FilesMMSource, scope: Scope) -> Iterator[MMRecord | MMBad]:
    """Samples of a tar shard: consecutive members sharing a key (the path up to the first dot of the file
    name) form one sample; the media is its first image/audio/video member, the caption the first of
    `caption_keys` (or `caption`/`text` of its json member, which may also hold `segments`). Members are only
    read into memory, never extracted, so a `../` name reaches no file; a member over its `member_cap` (the
    size its tar header declares, which is what reading it would decompress) is skipped unread and its sample
    refused (`file_too_large`), and a member no check reads is never held (`_unused`). One member is in memory
    at a time: the stage parks each sample's media on disk (`records.MediaSpool`) as it arrives."""
    # decompressed by its first bytes as ingest's streams are (gzip, zstd, bz2, xz; zstd fed in bounded pieces)
    with open_stream(path) as stream, tarfile.open(fileobj=stream.buf, mode="r|") as tar:
        key, members, faults = None, {}, []
        try:
            for info in tar:
                if not info.isfile():
                    continue
                folder, _, name = info.name.rpartition("/")
                stem, _, ext = name.partition(".")
                k = f"{folder}/{stem}" if folder else stem
                if k != key and key is not None:
                    yield _sample(key, members, shown, src, faults)
                    members, faults = {}, []
                key, ext = k, ext.lower()
                cap = member_cap(ext, src, scope)
                if ext in members:
                    faults.append(("duplicate_member", f"{info.name}: a second {ext!r} member in sample {k!r}"))
                    drain(tar, info)
                elif info.size > cap:
                    faults.append(("file_too_large", f"{info.name}: {info.size} bytes > {cap}: not read"))
                    members[ext] = b""
                    drain(tar, info)
                elif _unused(ext, members, src):
                    members[ext] = b""   # its extension is listed (a missing media says what was there), unread
                    drain(tar, info)
                else:
                    members[ext] = tar.extractfile(info).read()
            if stream.damage:       # the stream broke between members: tarfile saw a clean end
                raise EOFError(stream.damage)
        except (tarfile.TarError, EOFError, OSError) as exc:  # a cut shard: what came before it stays
            yield MMBad(src.name, f"{shown}:{key}", "truncated", stream.damage or f"{type(exc).__name__}: {exc}")
            return
        if key is not None:
            yield _sample(key, members, shown, src, faults)


def drain(tar: tarfile.TarFile, info: tarfile.TarInfo) -> None:
    """Step over a member that is not kept, DRAIN_BYTES at a time, by reading the shard's stream up to the
    member's end. Left to tarfile, a compressed stream skips it 10 KB a read while slicing all it has
    decompressed: a 200 MB run of zeros (200 KB of gzip) took 14 s to skip and a 1 GB one over a minute; read
    in 1 MiB pieces it takes well under a second and holds a piece."""
    stream, end = tar.fileobj, info.offset_data + info.size
    while (left := end - stream.tell()) > 0:
        if not stream.read(min(left, DRAIN_BYTES)):
            break


def member_cap(ext: str, src: FilesMMSource, scope: Scope) -> int:
    """The most bytes a tar member may decompress to and still be read: a media member its own kind's bounds'
    `max_bytes` (an image the image cap, not the audio one); a caption or json member SIDECAR_MAX_BYTES, as a
    transcript beside a clip (a caption over the caption check's `max_chars` is refused anyway, and a gzip
    shard turns a few KB into any size)."""
    kind = kind_of_suffix(ext.rsplit(".", 1)[-1])
    if kind is not None:
        return scope.media_cap(kind)
    return scope.max_bytes if ext not in (*src.caption_keys, "json") else min(scope.max_bytes, SIDECAR_MAX_BYTES)


def _unused(ext: str, members: dict[str, bytes], src: FilesMMSource) -> bool:
    """True for a member no check reads: the sample's media is its first image/audio/video member and its
    text the caption keys and json, so a second media file, a `.cls` or a `.npy` is never held."""
    if ext in src.caption_keys or ext == "json":
        return False
    if kind_of_suffix(ext.rsplit(".", 1)[-1]) is None:
        return True
    return any(kind_of_suffix(e.rsplit(".", 1)[-1]) is not None for e in members)


def _sample(key: str, members: dict[str, bytes], shown: str, src: FilesMMSource,
            faults: list[tuple[str, str]]) -> MMRecord | MMBad:
    where = f"{shown}:{key}"
    if faults:
        return MMBad(src.name, where, faults[0][0], "; ".join(d for _, d in faults)[:500])
    media_ext = next((e for e in members if kind_of_suffix(e.rsplit(".", 1)[-1]) is not None), None)
    if media_ext is None:
        return MMBad(src.name, where, "missing_media", f"no image/audio/video member among {sorted(members)}")
    info: dict[str, Any] = {}
    if "json" in members:
        try:
            info = json.loads(members["json"])
        except (json.JSONDecodeError, UnicodeDecodeError, RecursionError) as exc:
            return MMBad(src.name, where, "invalid_json", f"{key}.json: {str(exc)[:300]}")
        info = info if isinstance(info, dict) else {}
    text = next((members[e].decode("utf-8", "replace") for e in src.caption_keys if e in members),
                info.get("caption") or info.get("text") or "")
    text = text if isinstance(text, str) else ""   # a caption of another JSON type is missing, not a crash
    try:
        segments = _segments(info.get("segments"))
    except ValueError as exc:
        return MMBad(src.name, where, "bad_media", str(exc))
    kind = kind_of_suffix(media_ext.rsplit(".", 1)[-1])
    meta = {k: v for k, v in info.items() if k not in ("caption", "text", "segments") and isinstance(v, META_SCALARS)}
    media = MediaRef(kind, data=members[media_ext], segments=segments)
    return _record(src, f"{Path(shown).stem}/{key}", text.strip(), media, where, {**meta, "name": f"{key}.{media_ext}"})


READERS = {"jsonl": read_jsonl, "parquet": read_parquet, "audio": read_audio, "webdataset": read_webdataset}


def read_ingest_media(folder: Path) -> Iterator[MMRecord]:
    """Ingest's records that reference media: the text is the caption, the first reference the media."""
    for shard in sorted((folder / "shards").glob("*.parquet")):
        table = pq.read_table(shard, columns=["id", "text", "source", "lang", "origin", "media"])
        for row in table.to_pylist():
            refs = [m for m in row["media"] or [] if m and m.get("path")]
            if not refs:
                continue
            kind = refs[0]["kind"] if refs[0].get("kind") in ("image", "audio", "video") else "image"
            yield MMRecord(id=row["id"], source=row["source"], text=row["text"] or "", lang=row["lang"] or "",
                           media=MediaRef(kind, path=refs[0]["path"]), origin=row["origin"] or "",
                           meta={"from": "ingest"})
