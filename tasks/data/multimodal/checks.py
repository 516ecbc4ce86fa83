"""The per-record alignment checks, each a filter of clean's protocol (tasks/data/filtering/filters.py): a `name`, called
on a record, returning a verdict (keep, reason, signals) — here `MediaVerdict`, which adds a human `detail`.
`mm_filters` builds them in funnel order: decode → bounds → segments → speech_rate → caption. Dedup
(tasks/data/multimodal/phash.py) and semantic alignment (semantic.py) are corpus- and batch-level and run after."""

from __future__ import annotations

import re
import string
from collections.abc import Sequence
from dataclasses import dataclass
from functools import cached_property
from pathlib import Path

from specs.multimodal import AudioBounds, CaptionSpec, ImageBounds, MultimodalSpec, SegmentSpec, SpeechRateSpec
from tasks.data.filtering import langid
from tasks.data.filtering.filters import Filter, Verdict
from tasks.data.multimodal.decode import Limits, MediaError, decode
from tasks.data.multimodal.records import IMAGE_SUFFIXES, AUDIO_SUFFIXES, MMRecord, VIDEO_SUFFIXES


@dataclass(frozen=True)
class MediaVerdict(Verdict):
    detail: str = ""     # what a reviewer reads in the quarantine beside the reason


def keep(**signals: float) -> MediaVerdict:
    return MediaVerdict(True, None, signals)


def drop(reason: str, detail: str, **signals: float) -> MediaVerdict:
    return MediaVerdict(False, reason, signals, detail)


@dataclass(frozen=True)
class DecodeCheck:
    """The media decodes completely, within `limits`; sets `record.decoded` for the checks after it."""

    root: Path
    limits: Limits = Limits()
    name: str = "decode"

    def __call__(self, rec: MMRecord) -> MediaVerdict:
        try:
            rec.decoded = decode(rec, self.root, self.limits)
        except MediaError as exc:
            return drop(exc.reason, exc.detail)
        return keep(bytes=float(rec.decoded.size_bytes))


@dataclass(frozen=True)
class BoundsCheck:
    image: ImageBounds
    audio: AudioBounds
    name: str = "bounds"

    def __call__(self, rec: MMRecord) -> MediaVerdict:
        d = rec.decoded
        if rec.media.kind == "image":
            b, (w, h) = self.image, (d.width, d.height)
            signals = {"width": float(w), "height": float(h)}
            if d.size_bytes > b.max_bytes:
                return drop("file_too_large", f"{d.size_bytes} bytes > {b.max_bytes}", **signals)
            if min(w, h) < b.min_side:
                return drop("image_too_small", f"{w}×{h}: a side under {b.min_side} px", **signals)
            if max(w, h) > b.max_side:
                return drop("image_too_large", f"{w}×{h}: a side over {b.max_side} px", **signals)
            if max(w, h) / max(min(w, h), 1) > b.max_aspect:
                return drop("aspect_ratio", f"{w}×{h}: aspect over {b.max_aspect}", **signals)
            return keep(**signals)
        b = self.audio
        signals = {"duration_s": round(d.duration_s, 6), "sample_rate": float(d.sample_rate)}
        if d.size_bytes > b.max_bytes:
            return drop("file_too_large", f"{d.size_bytes} bytes > {b.max_bytes}", **signals)
        if d.sample_rate < b.min_sample_rate:
            return drop("sample_rate_low", f"{d.sample_rate} Hz < {b.min_sample_rate}", **signals)
        if d.duration_s < b.min_duration_s:
            return drop("audio_too_short", f"{d.duration_s:.3f} s < {b.min_duration_s}", **signals)
        if d.duration_s > b.max_duration_s:
            return drop("audio_too_long", f"{d.duration_s:.3f} s > {b.max_duration_s}", **signals)
        return keep(**signals)


@dataclass(frozen=True)
class SegmentsCheck:
    """Segments ordered by start, disjoint, each inside [0, duration] (images have no time: a segment there
    is meaningless and reported), and covering at least `min_coverage` of the clip."""

    spec: SegmentSpec
    name: str = "segments"

    def __call__(self, rec: MMRecord) -> MediaVerdict:
        segs, tol = rec.media.segments, self.spec.tolerance_s
        if not segs:
            return keep(segments=0.0)
        if rec.media.kind != "audio":
            return drop("segments_without_time", f"{len(segs)} timed segment(s) on a {rec.media.kind}")
        duration = rec.decoded.duration_s
        signals = {"segments": float(len(segs)), "duration_s": round(duration, 6)}
        for i, s in enumerate(segs):
            where = f"segment {i} [{s.start:.3f}, {s.end:.3f}]"
            if s.end <= s.start:
                return drop("segment_inverted", f"{where}: ends before it starts", **signals, at=float(i))
            if i and s.start < segs[i - 1].start:
                return drop("segments_not_monotonic", f"{where} starts before segment {i - 1} "
                            f"({segs[i - 1].start:.3f})", **signals, at=float(i))
            if i and s.start < segs[i - 1].end - tol:
                return drop("segments_overlap", f"{where} overlaps segment {i - 1} (ends "
                            f"{segs[i - 1].end:.3f})", **signals, at=float(i))
            if s.start < -tol or s.end > duration + tol:
                return drop("segment_outside_media", f"{where} outside the clip's {duration:.3f} s", **signals,
                            at=float(i))
        covered = sum(min(s.end, duration) - max(s.start, 0.0) for s in segs)
        signals["coverage"] = round(covered / duration, 6) if duration else 0.0
        if signals["coverage"] < self.spec.min_coverage:
            return drop("segments_coverage", f"segments cover {signals['coverage']:.0%} of the clip", **signals)
        return keep(**signals)


@dataclass(frozen=True)
class SpeechRateCheck:
    """Characters per second of each timed segment (or of the whole transcript over the clip, without segments)
    within the bounds of the record's language."""

    spec: SpeechRateSpec
    name: str = "speech_rate"

    def __call__(self, rec: MMRecord) -> MediaVerdict:
        if rec.media.kind != "audio" or not rec.text.strip():
            return keep()
        lo, hi = self.spec.per_lang.get(rec.lang, (self.spec.min_chars_per_s, self.spec.max_chars_per_s))
        spans = [(s.end - s.start, s.text) for s in rec.media.segments] or [(rec.decoded.duration_s, rec.text)]
        rates = [(len(text.strip()) / dur, i) for i, (dur, text) in enumerate(spans)
                 if dur >= self.spec.min_segment_s and text.strip()]
        if not rates:
            return keep(rated=0.0)
        (slow, i_slow), (fast, i_fast) = min(rates), max(rates)
        signals = {"min_chars_per_s": round(slow, 3), "max_chars_per_s": round(fast, 3), "rated": float(len(rates))}
        if fast > hi:
            return drop("speech_too_fast", f"segment {i_fast}: {fast:.1f} chars/s > {hi}", **signals)
        if slow < lo:
            return drop("speech_too_slow", f"segment {i_slow}: {slow:.1f} chars/s < {lo}", **signals)
        return keep(**signals)


_FILE_NAME = re.compile(r"^[\w\-. ]{1,200}\.(%s)$" % "|".join(s[1:] for s in (*IMAGE_SUFFIXES, *AUDIO_SUFFIXES,
                                                                               *VIDEO_SUFFIXES)), re.I)
_STRIP = str.maketrans("", "", string.punctuation + string.digits + "_")
_ARTICLE = re.compile(r"^(a|an|the)\s+")


@dataclass(frozen=True)
class CaptionCheck:
    """Present, not boilerplate (a stock word, a file name, the media's own file stem), not overlong, and in an
    allowed language (py3langid, batched)."""

    spec: CaptionSpec
    name: str = "caption"

    def shape(self, rec: MMRecord) -> MediaVerdict | None:
        """The verdict decided without language id, or None when the language decides."""
        text = " ".join(rec.text.split())
        if len(text) < self.spec.min_chars:
            return drop("caption_missing", f"{len(text)} characters: {text!r}", chars=float(len(text)))
        if len(text) > self.spec.max_chars:
            return drop("caption_too_long", f"{len(text)} characters > {self.spec.max_chars}", chars=float(len(text)))
        plain = _ARTICLE.sub("", text.lower().translate(_STRIP).strip()).strip()
        stem = Path(rec.media.name).stem.lower().translate(_STRIP).strip()
        if plain in self.boilerplate or _FILE_NAME.match(text) or (len(stem) >= 3 and plain == stem):
            return drop("caption_boilerplate", f"{text[:80]!r} says nothing about the media", chars=float(len(text)))
        if not self.spec.languages or len(text) < self.spec.min_language_chars:
            return keep(chars=float(len(text)))
        return None

    @cached_property
    def boilerplate(self) -> frozenset[str]:
        return frozenset(_ARTICLE.sub("", b.lower().translate(_STRIP).strip()).strip() for b in self.spec.boilerplate)

    def __call__(self, rec: MMRecord) -> MediaVerdict:
        return self.batch([rec])[0]

    def batch(self, recs: Sequence[MMRecord]) -> list[MediaVerdict]:
        verdicts = [self.shape(r) for r in recs]
        todo = [i for i, v in enumerate(verdicts) if v is None]
        found = langid.classify_many([" ".join(recs[i].text.split()) for i in todo])
        for i, (lang, prob) in zip(todo, found):
            signals = {"chars": float(len(recs[i].text)), "confidence": round(prob, 6), f"lang:{lang}": round(prob, 6)}
            bad = lang not in self.spec.languages and prob >= self.spec.min_confidence
            verdicts[i] = (drop("caption_language", f"detected {lang} ({prob:.2f}); allowed "
                                f"{', '.join(self.spec.languages)}", **signals) if bad else keep(**signals))
        return verdicts


def mm_filters(spec: MultimodalSpec, root: Path) -> list[Filter]:
    """The per-record checks in funnel order (decode is always on: the others read what it decoded)."""
    limits = Limits(spec.image.max_bytes, spec.audio.max_bytes, spec.audio.max_duration_s, spec.image.max_pixels)
    checks: list[Filter] = [DecodeCheck(root, limits), BoundsCheck(spec.image, spec.audio)]
    if spec.segments.enabled:
        checks.append(SegmentsCheck(spec.segments))
    if spec.speech_rate.enabled:
        checks.append(SpeechRateCheck(spec.speech_rate))
    if spec.caption.enabled:
        checks.append(CaptionCheck(spec.caption))
    return checks
