"""The `multimodal` section: image–text and audio–transcript records checked for alignment in time and meaning.

Training stays text-only; this stage curates a multimodal set a downstream multimodal trainer can trust: every
record is kept (written to WebDataset shards) or quarantined with the check that stopped it and why.
"""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import Field, field_validator, model_validator

from specs.base import StrictModel, line_cap_field, require_unique

SOURCE_NAME = r"^[a-z][a-z0-9_]{0,31}$"


class _MMSourceBase(StrictModel):
    name: str = Field(..., pattern=SOURCE_NAME, description="Source label carried by every record.")
    lang: str = Field("en", min_length=2, max_length=16, description="Language tag of the captions/transcripts.")
    max_records: int | None = Field(None, ge=1, description="Keep at most this many records (null = all), in a "
                                    "stable order.")


class EmbeddedMMSource(_MMSourceBase):
    """A small multimodal corpus built at run time from installed packages: images shipped with matplotlib plus
    images drawn by Pillow with captions that describe them, and speech synthesised by espeak-ng (Debian package;
    without it the source has no audio and says so), with planted misalignments the checks must catch."""

    kind: Literal["embedded"] = Field("embedded", description="Discriminator: the embedded multimodal corpus.")
    images: int = Field(48, ge=0, le=10_000, description="Drawn image–caption pairs (before planted variants).")
    audio: int = Field(12, ge=0, le=1_000, description="Synthesised speech clips with timed transcripts.")
    plant: bool = Field(True, description="Add planted misalignments (truncated files, swapped captions, shifted "
                        "timestamps, boilerplate and foreign captions, near-duplicate images, ...), each marked "
                        "in its record's meta `planted`, so the stage reports the recall of every check.")


class FilesMMSource(_MMSourceBase):
    """User files: image–text pairs in jsonl/parquet, WebDataset tar shards, or audio files with transcripts."""

    kind: Literal["files"] = Field("files", description="Discriminator: files on disk.")
    paths: list[str] = Field(..., min_length=1, description="Files, directories (read recursively) or globs, "
                             "relative to the project root.")
    format: Literal["auto", "jsonl", "parquet", "webdataset", "audio"] = Field(
        "auto", description="auto decides per file by extension: .jsonl/.json → jsonl rows, .parquet → parquet "
        "rows, .tar → WebDataset shard, .wav/.flac → an audio file whose transcript is the sidecar .srt, .vtt, "
        ".json ({text, segments}) or .txt of the same stem.")
    media_field: str = Field("image", description="jsonl/parquet: field holding the media path (relative to the "
                             "row's file) or inline bytes (parquet binary, or base64 text).")
    text_field: str = Field("caption", description="jsonl/parquet: field holding the caption or transcript.")
    id_field: str | None = Field(None, description="jsonl/parquet: field holding a stable id (default: file and "
                                 "row).")
    segments_field: str = Field("segments", description="jsonl/parquet: optional field with [{start, end, text}].")
    kind_field: str = Field("kind", description="jsonl/parquet: optional field naming the media kind; default "
                            "from the file extension, else image.")
    media_roots: list[str] = Field(default_factory=list, description="Folders (relative to the project root, or "
                                   "absolute) that media paths and transcripts may also point into; by default only "
                                   "the folders `paths` name (a directory, a glob's part before its first wildcard, "
                                   "a named file's folder) — a path that leaves them, links resolved, is "
                                   "quarantined as `media_outside` and never opened.")
    caption_keys: list[str] = Field(default_factory=lambda: ["txt", "caption", "text"], min_length=1,
                                    description="WebDataset: extensions of the member holding the caption, first "
                                    "found wins (a `json` member may also hold `caption`/`text` and `segments`).")
    max_line_bytes: int = line_cap_field()


MMSource = Annotated[EmbeddedMMSource | FilesMMSource, Field(discriminator="kind")]


class ImageBounds(StrictModel):
    """Size and shape an image must have (a thumbnail, a banner strip or a 100-megapixel scan is not a pair)."""

    min_side: int = Field(32, ge=1, description="Smallest allowed width and height, pixels.")
    max_side: int = Field(16_384, ge=1, description="Largest allowed width and height, pixels.")
    max_aspect: float = Field(4.0, ge=1.0, description="Largest allowed long side / short side.")
    max_bytes: int = Field(32 * 1024 * 1024, ge=1, description="Largest allowed encoded file size, bytes.")
    max_pixels: int = Field(50_000_000, ge=1, le=1 << 28, description="Largest allowed width × height, read from "
                            "the header: a larger image is `media_too_large` at `decode`, never decoded. 50 M passes "
                            "a 50-MP phone's 8160×6120 and a 45-MP camera's 8256×5504 and refuses a 100-MP scan. "
                            "Decoding an 8-bit RGB PNG peaked at 470 MB (RSS) at 8160×6120 and 760 MB at 88 MP, "
                            "which passed the old guard (2²⁸, still the ceiling; more with alpha or 16-bit "
                            "channels); refused, the 88-MP file cost 3 MB. Pillow refuses past twice its own limit "
                            "(~179 MP) whatever this says.")


class AudioBounds(StrictModel):
    """Duration and sampling an audio clip must have."""

    min_duration_s: float = Field(0.5, ge=0, description="Shortest allowed clip, seconds.")
    max_duration_s: float = Field(600.0, gt=0, description="Longest allowed clip, seconds.")
    min_sample_rate: int = Field(8_000, ge=1, description="Lowest allowed sampling rate, Hz.")
    max_bytes: int = Field(256 * 1024 * 1024, ge=1, description="Largest allowed encoded file size, bytes.")


class SegmentSpec(StrictModel):
    """Timed segments (transcript lines, captions over time) must be ordered, disjoint and inside the media."""

    enabled: bool = Field(True, description="Run the `segments` check.")
    tolerance_s: float = Field(0.05, ge=0, description="Slack for rounding in subtitle files: an overlap or an "
                               "overrun of the duration up to this many seconds passes.")
    min_coverage: float = Field(0.0, ge=0, le=1, description="Least share of the duration the segments must cover "
                                "(0 disables; a transcript of a different clip often covers little of this one).")


class SpeechRateSpec(StrictModel):
    """Characters per second of each timed transcript segment: a transcript shifted or swapped onto other speech
    makes some segments implausibly fast or slow."""

    enabled: bool = Field(True, description="Run the `speech_rate` check.")
    min_chars_per_s: float = Field(5.0, ge=0, description="Slowest plausible rate (characters incl. spaces per "
                                   "second of the segment).")
    max_chars_per_s: float = Field(30.0, gt=0, description="Fastest plausible rate.")
    per_lang: dict[str, tuple[float, float]] = Field(
        default_factory=dict, description="(min, max) characters per second for a language tag, overriding the "
        "defaults (e.g. ja: [3, 12]: one character carries more speech).")
    min_segment_s: float = Field(0.3, ge=0, description="Segments shorter than this are not rated (a rate over "
                                 "a few frames is noise).")

    @model_validator(mode="after")
    def _ordered(self) -> "SpeechRateSpec":
        bad = [k for k, (lo, hi) in self.per_lang.items() if not 0 <= lo < hi]
        if self.min_chars_per_s >= self.max_chars_per_s or bad:
            raise ValueError(f"speech rate bounds need min < max (per_lang: {bad or 'ok'})")
        return self


class CaptionSpec(StrictModel):
    """The caption (or transcript) must be there, say something, and be in an allowed language."""

    enabled: bool = Field(True, description="Run the `caption` check.")
    min_chars: int = Field(5, ge=0, description="Shorter captions are `caption_missing`.")
    max_chars: int = Field(2_000, ge=1, description="Longer captions are `caption_too_long`.")
    boilerplate: list[str] = Field(
        default_factory=lambda: ["image", "photo", "picture", "untitled", "no caption", "caption", "img",
                                 "screenshot", "thumbnail", "placeholder", "null", "none", "n/a", "audio",
                                 "recording", "transcript", "unknown"],
        description="Captions that say nothing (compared lower-cased, stripped of punctuation, digits and a "
        "leading article) are `caption_boilerplate`; so is a file name or the media's own file stem.")
    languages: list[str] = Field(default_factory=lambda: ["en"], description="Allowed ISO 639-1 codes (py3langid); "
                                 "empty allows any.")
    min_language_chars: int = Field(20, ge=1, description="Captions shorter than this are not language-checked "
                                    "(too little text for a confident guess).")
    min_confidence: float = Field(0.5, ge=0, le=1, description="A detected disallowed language drops the caption "
                                  "only at this confidence or more.")


class MediaDedupSpec(StrictModel):
    """Perceptual-hash dedup of images (imagehash) with text dedup's clustering rule: records are visited
    best-first (most pixels, ties by id); one not yet removed is kept and removes the undecided records within
    `max_distance` of *it* (no chains) and whose coarse colours agree within `colour_tolerance` (a uniform
    brightness shift up to `brightness_tolerance` forgiven). Audio is deduplicated by a digest of its decoded
    samples."""

    enabled: bool = Field(True, description="Run the `dedup` check.")
    hash: Literal["phash", "dhash", "average_hash", "whash"] = Field("phash", description="imagehash function.")
    hash_size: int = Field(16, ge=4, le=32, description="Hash side: hash_size² bits (16: 256 bits; the 64 bits of "
                           "size 8 put ~40 % of 3,000 drawn single-shape images within 4 bits of another).")
    max_distance: int = Field(16, ge=0, le=1024, description="Hamming distance (bits) at or under which two images "
                              "are duplicates. At 256 bits, copies resized to 0.8 and re-encoded as JPEG were "
                              "within 2–16 bits (median 2) and 4 in 2,000 distinct drawings came that close.")
    colour_tolerance: float = Field(12, ge=0, le=255, description="Images within `max_distance` are duplicates "
                                    "only if their colour signatures (mean RGB of 4×4 cells of the thumbnail, "
                                    "0–255) differ by at most this in every cell and channel; 255 lets the hash "
                                    "alone decide. The hash is blind to colour: every flat-colour image hashed "
                                    "alike. Of 200 seeded drawings (shapes, gradients, noise), copies resized to "
                                    "0.5–0.8 and re-encoded as JPEG q75 differed by at most 4 (q30: 6; GIF, WebP: "
                                    "2) and were removed as before (197 of 200 within the hash's bits); the same "
                                    "drawings with hues turned 30° differed by 23 or more (119 of 400 hue-turned "
                                    "ones were removed by the hash alone, none now); of 200 random flat colours 199 "
                                    "were removed, now 11, each within 12 of a kept shade.")
    brightness_tolerance: float = Field(8, ge=0, le=255, description="A uniform brightness shift forgiven before "
                                        "`colour_tolerance` applies: the signatures' mean difference over all cells "
                                        "and channels, clipped to ±this, is taken out first; 0 compares them as "
                                        "they are. A copy brightened by 15 differs by 15 in every cell and was "
                                        "kept. Of 400 seeded drawings (shapes, gradients, noise), the copies "
                                        "within the hash's bits brightened or darkened by 15 (566) were all "
                                        "removed at 8 (none at 0), so were those brightened by 15 and re-encoded "
                                        "as JPEG (275; at 6 two were missed) and 277 of 278 brightened by 20; "
                                        "hue-turned ones (±30°) were kept as at 0 (1 of 372 removed), a hue turn "
                                        "moving the mean little. The price is flat colours, where a brighter "
                                        "shade is a brightened copy: of 2 × 200 random ones 57 were removed "
                                        "(28 at 0), each within 20 of a kept one in every channel.")


class SemanticSpec(StrictModel):
    """Caption ↔ image agreement by a similarity model the user points at: a local folder holding a CLIP
    checkpoint in Hugging Face format. The cosine similarity of the pair's embeddings is reported per record;
    below `threshold` the record is quarantined (`semantic_misaligned`). Without a model the check is skipped and
    says so: nothing is guessed. Transcript ↔ audio meaning is not scored by a model (no audio–text model is
    supported yet); transcripts are aligned in time by the `segments` and `speech_rate` checks."""

    enabled: bool = Field(True, description="Run the `semantic` check where a model is given.")
    image_model: str | None = Field(None, description="Folder (relative to the project root, or absolute) of a "
                                    "CLIP checkpoint (config.json with model_type clip, model.safetensors, tokenizer "
                                    "and image-processor files); null skips the check.")
    threshold: float = Field(0.28, ge=-1, le=1, description="Least cosine similarity kept (LAION-400M used 0.3 "
                             "with CLIP ViT-B/32; tune per model).")
    batch_size: int = Field(32, ge=1, le=4096, description="Records per forward pass.")
    threads: int = Field(1, ge=1, le=256, description="CPU threads for the model (fixed: same bytes on rerun).")


class MultimodalSpec(StrictModel):
    """Read multimodal sources, run the alignment checks, write the curated set as WebDataset shards with a
    quarantine, a per-check funnel and a spot-check sample."""

    sources: list[MMSource] = Field(default_factory=lambda: [EmbeddedMMSource(name="mm_embedded")],
                                    description="The multimodal sources, in order.")
    from_ingest: bool = Field(True, description="Also check ingest's records that reference media (their text is "
                              "the caption, their first media reference the media).")
    image: ImageBounds = Field(default_factory=ImageBounds, description="Image bounds (`bounds` check).")
    audio: AudioBounds = Field(default_factory=AudioBounds, description="Audio bounds (`bounds` check).")
    segments: SegmentSpec = Field(default_factory=SegmentSpec, description="The `segments` check.")
    speech_rate: SpeechRateSpec = Field(default_factory=SpeechRateSpec, description="The `speech_rate` check.")
    caption: CaptionSpec = Field(default_factory=CaptionSpec, description="The `caption` check.")
    dedup: MediaDedupSpec = Field(default_factory=MediaDedupSpec, description="The `dedup` check.")
    semantic: SemanticSpec = Field(default_factory=SemanticSpec, description="The `semantic` check.")
    shard_records: int = Field(1_000, ge=1, le=1_000_000, description="Samples per WebDataset tar shard.")
    spotcheck_per_stratum: int = Field(2, ge=0, le=1000, description="Spot-check items drawn per stratum (kept per "
                                       "media kind, quarantined per check).")
    thumbnail_px: int = Field(160, ge=16, le=1024, description="Long side of the spot-check thumbnails.")

    @field_validator("sources")
    @classmethod
    def _unique_names(cls, sources: list) -> list:
        require_unique([s.name for s in sources], "multimodal source names")
        return sources
