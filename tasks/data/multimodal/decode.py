"""Decode a record's media (Pillow for images, soundfile/libsndfile for audio) into `Decoded`, or raise
`MediaError(reason, detail)`: a truncated or corrupt file is a reason, never a crash.

libsndfile reads a WAV whose data chunk breaks off as a shorter clip without complaint (a file cut in half
decodes as half the audio), so the RIFF chunk sizes are checked against the bytes present; a FLAC/OGG stream
that ends early either fails to decode or yields fewer frames than its header declares, and both are caught.
"""

from __future__ import annotations

import hashlib
import io
import struct
import warnings
from pathlib import Path

from tasks.data.multimodal.records import Decoded, MMRecord

THUMB_PX = 256                 # thumbnails for the hash, the similarity model and the spot-check
MAX_DECODE_PIXELS = 1 << 28    # larger images are not decoded at all (decompression bombs)
IMAGE_EXT = {"JPEG": "jpg", "PNG": "png", "GIF": "gif", "WEBP": "webp", "BMP": "bmp", "TIFF": "tiff"}
AUDIO_EXT = {"WAV": "wav", "WAVEX": "wav", "FLAC": "flac", "OGG": "ogg", "MP3": "mp3"}


class MediaError(Exception):
    """The media cannot be used; `reason` is the quarantine reason, `detail` what the decoder said."""

    def __init__(self, reason: str, detail: str):
        super().__init__(f"{reason}: {detail}")
        self.reason, self.detail = reason, detail


def decode(rec: MMRecord, root: Path) -> Decoded:
    try:
        data = rec.media.read(root)
    except OSError as exc:
        raise MediaError("media_unreadable", f"{type(exc).__name__}: {exc.strerror or exc}") from None
    if not data:
        raise MediaError("media_empty", "0 bytes")
    if rec.media.kind == "image":
        return decode_image(data)
    if rec.media.kind == "audio":
        return decode_audio(data)
    raise MediaError("media_unsupported", f"no decoder for {rec.media.kind} (images and audio are checked)")


def decode_image(data: bytes) -> Decoded:
    from PIL import Image, UnidentifiedImageError

    try:
        with warnings.catch_warnings():
            warnings.simplefilter("error", Image.DecompressionBombWarning)
            img = Image.open(io.BytesIO(data))
            width, height = img.size
            if width * height > MAX_DECODE_PIXELS:
                raise MediaError("media_too_large", f"{width}×{height} pixels: not decoded (bomb guard)")
            fmt = img.format or ""
            img.draft("RGB", (THUMB_PX, THUMB_PX))  # JPEG: decode at a reduced scale (all data is still read)
            img.load()
            thumb = img.convert("RGB")
    except MediaError:
        raise
    except UnidentifiedImageError:
        raise MediaError("media_undecodable", "not an image format Pillow knows") from None
    except (OSError, SyntaxError, ValueError, struct.error, Image.DecompressionBombWarning,
            Image.DecompressionBombError) as exc:
        reason = "media_truncated" if "truncated" in str(exc).lower() else "media_undecodable"
        raise MediaError(reason, f"{type(exc).__name__}: {exc}") from None
    thumb.thumbnail((THUMB_PX, THUMB_PX))
    return Decoded(format=IMAGE_EXT.get(fmt, fmt.lower() or "bin"), size_bytes=len(data),
                   sha256=hashlib.sha256(data).hexdigest(), width=width, height=height, thumb=thumb)


def wav_truncation(data: bytes) -> str | None:
    """Why a RIFF/WAVE file is cut short (a chunk declares more bytes than follow), or None."""
    if data[:4] != b"RIFF" or data[8:12] != b"WAVE":
        return None
    pos = 12
    while pos + 8 <= len(data):
        cid, size = data[pos:pos + 4], struct.unpack("<I", data[pos + 4:pos + 8])[0]
        if size == 0xFFFFFFFF:  # RF64 / streaming writers: sizes live elsewhere
            return None
        if pos + 8 + size > len(data):
            return f"chunk {cid.decode('latin-1')!r} declares {size} bytes, {len(data) - pos - 8} present"
        pos += 8 + size + (size & 1)
    return None


def decode_audio(data: bytes) -> Decoded:
    import numpy as np
    import soundfile as sf

    cut = wav_truncation(data)
    if cut is not None:
        raise MediaError("media_truncated", cut)
    try:
        info = sf.info(io.BytesIO(data))
        samples, rate = sf.read(io.BytesIO(data), dtype="float32", always_2d=True)
    except (sf.LibsndfileError, RuntimeError, TypeError, ValueError) as exc:
        message = str(exc)
        reason = "media_truncated" if any(w in message.lower() for w in ("lost sync", "truncat", "end of file",
                                                                          "unexpected end")) else "media_undecodable"
        raise MediaError(reason, f"{type(exc).__name__}: {message}") from None
    if 0 < len(samples) < info.frames:
        raise MediaError("media_truncated", f"{len(samples)} of the {info.frames} frames its header declares")
    mono = samples.mean(axis=1, dtype=np.float32) if samples.shape[1] > 1 else samples[:, 0]
    return Decoded(format=AUDIO_EXT.get(info.format, info.format.lower()), size_bytes=len(data),
                   sha256=hashlib.sha256(data).hexdigest(), duration_s=len(samples) / rate if rate else 0.0,
                   sample_rate=int(rate), channels=int(info.channels), samples=mono)
