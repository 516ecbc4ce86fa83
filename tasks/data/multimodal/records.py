"""The typed media reference and the multimodal record every reader yields and every check reads."""

from __future__ import annotations

import math
import os
import tempfile
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Mapping

from tasks.data.records import valid_unicode

MEDIA_KINDS = ("image", "audio", "video")
IMAGE_SUFFIXES = (".png", ".jpg", ".jpeg", ".gif", ".webp", ".bmp", ".tif", ".tiff")
AUDIO_SUFFIXES = (".wav", ".flac", ".ogg", ".mp3", ".opus", ".m4a")
VIDEO_SUFFIXES = (".mp4", ".webm", ".mkv", ".mov", ".avi")


def kind_of_suffix(suffix: str) -> str | None:
    """The media kind a file extension names (with or without the dot), or None."""
    s = "." + suffix.lower().lstrip(".")
    for kind, suffixes in (("image", IMAGE_SUFFIXES), ("audio", AUDIO_SUFFIXES), ("video", VIDEO_SUFFIXES)):
        if s in suffixes:
            return kind
    return None


def kind_cap(caps: int | Mapping[str, int], kind: str | None) -> int:
    """The most encoded bytes media of `kind` may have: audio by the `audio` cap, any other kind (image, video)
    by the `image` cap, as decode's `Limits` judge them; a plain int is every kind's cap. The stage passed the
    larger of the two for every member, so an image in a tar shard was read up to the audio cap (256 MiB)."""
    if isinstance(caps, int):
        return caps
    return caps["audio"] if kind == "audio" else caps["image"]


@dataclass(frozen=True)
class Segment:
    """A timed piece of text over the media: a transcript line or a caption over time, in seconds."""

    start: float
    end: float
    text: str

    @classmethod
    def parse(cls, obj: Any) -> "Segment":
        """A segment from `{start, end, text}`; ValueError naming what is wrong (not its timing: a check judges
        that)."""
        if not isinstance(obj, dict):
            raise ValueError(f"a segment must be an object {{start, end, text}}, got {type(obj).__name__}")
        try:
            start, end = float(obj["start"]), float(obj["end"])
        except (KeyError, TypeError, ValueError):
            raise ValueError(f"a segment needs numeric start and end, got {obj!r:.120}") from None
        if not (math.isfinite(start) and math.isfinite(end)):
            raise ValueError("segment times must be finite")
        text = obj.get("text", "")
        if not isinstance(text, str):
            raise ValueError(f"segment text must be a string, got {type(text).__name__}")
        return cls(start, end, text)


class MediaSpool:
    """Inline media bytes parked in an anonymous file while the stage runs, so memory does not hold them.

    A WebDataset shard, a Parquet binary column or base64 in jsonl gives a record its bytes inline, and the
    stage needs them until the end (kept records are written to the shards and the spot-check after every record
    is judged and deduplicated): held in memory, a corpus of inline media was held whole — 600 samples of 2 MB
    in a 4 MB gzip shard reached 1.2 GB. `park` writes the bytes to the file under `folder` (unlinked at once:
    nothing is left behind, and the space is freed when the stage ends) and returns the reference to read them
    back. Reads are positional (`os.pread`), so they need no shared file position."""

    def __init__(self, folder: Path):
        self.folder, self.file, self.end = folder, None, 0

    def park(self, media: "MediaRef") -> "MediaRef":
        """`media` with its inline bytes moved here (`data` None); a path reference unchanged."""
        if media.data is None:
            return media
        if self.file is None:   # opened at the first inline bytes: a corpus of paths makes no file
            self.folder.mkdir(parents=True, exist_ok=True)
            self.file = tempfile.TemporaryFile(prefix="forgeline-media-", dir=self.folder)
        self.file.seek(self.end)
        self.file.write(media.data)
        self.file.flush()
        ref = replace(media, data=None, spooled=Spooled(self, self.end, len(media.data)))
        self.end += len(media.data)
        return ref

    def read(self, offset: int, size: int) -> bytes:
        parts, fd = [], self.file.fileno()
        while size > 0:
            part = os.pread(fd, min(size, 1 << 30), offset)
            if not part:
                raise OSError(f"the media spool ends at byte {offset}")
            parts.append(part)
            offset, size = offset + len(part), size - len(part)
        return b"".join(parts)


@dataclass(frozen=True)
class Spooled:
    """Where a record's inline bytes went in a `MediaSpool`."""

    spool: MediaSpool
    offset: int
    size: int

    def read(self, limit: int | None = None) -> bytes:
        """The bytes, or only the first `limit` of them."""
        return self.spool.read(self.offset, self.size if limit is None else min(self.size, limit))


@dataclass(frozen=True)
class MediaRef:
    """One media item: its kind, where its bytes are (a path, root-relative or absolute; the bytes inline; or,
    once the stage has parked them, `spooled` on disk) and, optionally, timed segments over it."""

    kind: str
    path: str | None = None
    data: bytes | None = None
    segments: tuple[Segment, ...] = ()
    spooled: Spooled | None = None

    def __post_init__(self) -> None:
        if self.kind not in MEDIA_KINDS:
            raise ValueError(f"media kind must be one of {', '.join(MEDIA_KINDS)}, got {self.kind!r}")
        if sum(x is not None for x in (self.path, self.data, self.spooled)) != 1:
            raise ValueError("a media reference holds exactly one of a path, inline bytes and spooled bytes")

    def read(self, root: Path) -> bytes:
        """The encoded bytes (OSError when the file cannot be read)."""
        if self.data is not None:
            return self.data
        if self.spooled is not None:
            return self.spooled.read()
        p = Path(self.path)
        return (p if p.is_absolute() else root / p).read_bytes()

    @property
    def name(self) -> str:
        """The file name (or `inline`), for boilerplate checks and reports."""
        return Path(self.path).name if self.path is not None else "inline"


@dataclass
class Decoded:
    """What decoding found: sizes for the bounds, a small RGB thumbnail (images) or mono samples (audio) for the
    hash and the similarity model, and the format the bytes really are."""

    format: str                       # file extension of the real format: jpg, png, wav, flac, ...
    size_bytes: int
    sha256: str
    width: int = 0
    height: int = 0
    duration_s: float = 0.0
    sample_rate: int = 0
    channels: int = 0
    thumb: Any = None                 # PIL.Image (RGB, long side ≤ THUMB_PX) for images
    samples: Any = None               # numpy float32 mono samples for audio


@dataclass
class MMRecord:
    """A candidate multimodal record: the caption/transcript `text` for `media`; `decoded` is set by the
    decode check for the later ones."""

    id: str
    source: str
    text: str
    lang: str
    media: MediaRef
    origin: str
    meta: dict[str, Any] = field(default_factory=dict)
    decoded: Decoded | None = None

    @property
    def planted(self) -> str | None:
        """The misalignment planted in this record (embedded source only), or None."""
        return self.meta.get("planted")


@dataclass(frozen=True)
class MMBad:
    """Input that could not become a record (unreadable file, malformed row), with where and why.

    `origin` and `detail` may quote what was read — a tar member name that is not UTF-8 (its bytes arrive as
    lone surrogates), a JSON "\\ud800" escape — and are written to Parquet, which cannot hold a surrogate: such
    characters are shown escaped (`\\xff`, `\\ud800`) so the quarantine row is written."""

    source: str
    origin: str
    reason: str
    detail: str

    def __post_init__(self) -> None:
        for name in ("source", "origin", "detail"):
            object.__setattr__(self, name, valid_unicode(getattr(self, name)))
