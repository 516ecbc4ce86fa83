"""The typed media reference and the multimodal record every reader yields and every check reads."""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

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


@dataclass(frozen=True)
class MediaRef:
    """One media item: its kind, where its bytes are (a path, root-relative or absolute, or the bytes inline)
    and, optionally, timed segments over it."""

    kind: str
    path: str | None = None
    data: bytes | None = None
    segments: tuple[Segment, ...] = ()

    def __post_init__(self) -> None:
        if self.kind not in MEDIA_KINDS:
            raise ValueError(f"media kind must be one of {', '.join(MEDIA_KINDS)}, got {self.kind!r}")
        if (self.path is None) == (self.data is None):
            raise ValueError("a media reference holds exactly one of a path and inline bytes")

    def read(self, root: Path) -> bytes:
        """The encoded bytes (OSError when the file cannot be read)."""
        if self.data is not None:
            return self.data
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
    """Input that could not become a record (unreadable file, malformed row), with where and why."""

    source: str
    origin: str
    reason: str
    detail: str
