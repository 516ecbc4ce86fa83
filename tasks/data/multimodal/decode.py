"""Decode a record's media (Pillow for images, soundfile/libsndfile for audio) into `Decoded`, or raise
`MediaError(reason, detail)`: a truncated or corrupt file is a reason, never a crash.

libsndfile reads a WAV whose data chunk breaks off as a shorter clip without complaint (a file cut in half
decodes as half the audio), so the RIFF chunk sizes are checked against the bytes present; a FLAC/OGG stream
that ends early either fails to decode or yields fewer frames than its header declares, and both are caught.

Resources are bounded before they are spent (`Limits`, from the bounds): a file over `max_bytes` is not read
(`file_too_large`), only a regular file is opened (a FIFO or a device would block or never end), an image whose
header declares more than the bounds' `max_pixels` is not decoded (`media_too_large`: a few-KB PNG can declare
30000×30000 pixels of one colour, and an 88-megapixel one passed the old 2²⁸ guard: 760 MB to decode), and
audio is decoded in blocks and stopped once it passes `max_duration_s` (`audio_too_long`: a FLAC of hours of
silence is a few KB on disk and gigabytes of samples).
"""

from __future__ import annotations

import hashlib
import io
import os
import re
import stat
import struct
import warnings
from dataclasses import dataclass
from pathlib import Path

from tasks.data.multimodal.records import Decoded, MMRecord

THUMB_PX = 256                 # thumbnails for the hash, the similarity model and the spot-check
MAX_DECODE_PIXELS = 1 << 28    # hard ceiling on `max_pixels`, whatever the bounds say (decompression bombs)
DEFAULT_MAX_PIXELS = 50_000_000  # ImageBounds.max_pixels' default (specs/multimodal.py says why)
MAX_DECODE_SAMPLES = 1 << 27   # decoded audio samples (all channels) held at most: 512 MiB of float32
AUDIO_BLOCK_SAMPLES = 1 << 20  # samples (all channels) decoded per block
# EXIF Orientation -> the Image.Transpose that shows the image upright: PIL.ImageOps.exif_transpose's table, applied
# here to the thumbnail (exif_transpose loads and transposes the full image, before any bound could be checked)
EXIF_TRANSPOSE = {2: "FLIP_LEFT_RIGHT", 3: "ROTATE_180", 4: "FLIP_TOP_BOTTOM", 5: "TRANSPOSE", 6: "ROTATE_270",
                  7: "TRANSVERSE", 8: "ROTATE_90"}
IMAGE_EXT = {"JPEG": "jpg", "PNG": "png", "GIF": "gif", "WEBP": "webp", "BMP": "bmp", "TIFF": "tiff"}
AUDIO_EXT = {"WAV": "wav", "WAVEX": "wav", "FLAC": "flac", "OGG": "ogg", "MP3": "mp3"}


class MediaError(Exception):
    """The media cannot be used; `reason` is the quarantine reason, `detail` what the decoder said."""

    def __init__(self, reason: str, detail: str):
        super().__init__(f"{reason}: {detail}")
        self.reason, self.detail = reason, detail


@dataclass(frozen=True)
class Limits:
    """What decoding may spend on one record: encoded bytes per kind (the bounds' `max_bytes`), seconds of
    audio (the bounds' `max_duration_s`) and pixels of an image (the bounds' `max_pixels`, read from the header);
    past them the record is refused before the work is done."""

    image_bytes: int = 32 * 1024 * 1024
    audio_bytes: int = 256 * 1024 * 1024
    audio_seconds: float = 600.0
    image_pixels: int = DEFAULT_MAX_PIXELS


def read_media(rec: MMRecord, root: Path, max_bytes: int) -> bytes:
    """The record's encoded bytes, reading at most `max_bytes`; only a regular file is opened (non-blocking, so
    a FIFO named as media cannot hang the stage)."""
    if rec.media.data is not None:
        data = rec.media.data
    elif rec.media.spooled is not None:   # inline bytes the stage parked on disk (records.MediaSpool)
        data = rec.media.spooled.read(max_bytes + 1)
    else:
        p = Path(rec.media.path)
        try:
            fd = os.open(p if p.is_absolute() else root / p, os.O_RDONLY | getattr(os, "O_NONBLOCK", 0))
        except (OSError, ValueError) as exc:  # ValueError: a NUL in the path
            raise MediaError("media_unreadable", f"{type(exc).__name__}: {getattr(exc, 'strerror', None) or exc}") \
                from None
        data = _read_regular(fd, max_bytes + 1)
    if len(data) > max_bytes:
        raise MediaError("file_too_large", f"over {max_bytes} bytes: not read further")
    return data


def _read_regular(fd: int, limit: int) -> bytes:
    """At most `limit` bytes of the open descriptor `fd`, which is closed; only a regular file is read.

    The type is checked on the descriptor before `os.fdopen`: a folder's descriptor made fdopen raise
    IsADirectoryError, no MediaError, and one row naming `img/` stopped the stage (and leaked the descriptor)."""
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            raise MediaError("media_unreadable", "not a regular file (a device, FIFO or folder is not read)")
        fh = os.fdopen(fd, "rb")
    except BaseException:
        os.close(fd)
        raise
    with fh:
        try:
            return fh.read(limit)
        except OSError as exc:  # an I/O error on this one file is this record's, not the stage's
            raise MediaError("media_unreadable", f"{type(exc).__name__}: {exc.strerror or exc}") from None


def decode(rec: MMRecord, root: Path, limits: Limits = Limits()) -> Decoded:
    max_bytes = limits.audio_bytes if rec.media.kind == "audio" else limits.image_bytes
    data = read_media(rec, root, max_bytes)
    if not data:
        raise MediaError("media_empty", "0 bytes")
    if rec.media.kind == "image":
        return decode_image(data, limits.image_pixels)
    if rec.media.kind == "audio":
        return decode_audio(data, limits.audio_seconds)
    raise MediaError("media_unsupported", f"no decoder for {rec.media.kind} (images and audio are checked)")


def decode_image(data: bytes, max_pixels: int = DEFAULT_MAX_PIXELS) -> Decoded:
    """Decode an image in one of the formats the stage writes (IMAGE_EXT: JPEG, PNG, GIF, WebP, BMP, TIFF),
    unless its header declares more than `max_pixels` (at most MAX_DECODE_PIXELS): then `media_too_large`, with
    nothing decoded. The thumbnail is 8-bit RGB (`on_white`) turned upright by the EXIF Orientation tag
    (`orientation`), and width and height are as the image is shown.

    Pillow is asked for those formats only: left to guess, it also opens DDS, BLP, AVIF, SPIDER, ... whose
    plugins raise NotImplementedError, BLPFormatError, RuntimeError or AttributeError on a 128-byte file named
    `.png`, and one such file stopped the stage. Any other failure of the decoder is `media_undecodable` too."""
    from PIL import Image, UnidentifiedImageError

    try:
        with warnings.catch_warnings():
            # Pillow's warning (past its MAX_IMAGE_PIXELS, ~89 MP) is not the limit: `max_pixels` is, checked
            # next on the same header, so a raised max_pixels is honoured and every refusal reads alike.
            # Pillow's own error (past twice its limit) still refuses, as media_too_large below.
            warnings.simplefilter("ignore", Image.DecompressionBombWarning)
            img = Image.open(io.BytesIO(data), formats=list(IMAGE_EXT))
            width, height = img.size
            limit = min(max_pixels, MAX_DECODE_PIXELS)
            if width * height > limit:
                raise MediaError("media_too_large", f"{width}×{height} = {width * height} pixels > {limit}: "
                                 "not decoded (image.max_pixels)")
            fmt = img.format or ""
            img.draft("RGB", (THUMB_PX, THUMB_PX))  # JPEG: decode at a reduced scale (all data is still read)
            img.load()
            # after load: a PNG's eXIf chunk may follow its pixels, and Pillow's TIFF plugin turns a TIFF itself
            # on load (its header size already as shown) and drops the tag, so it is not turned twice
            turn = orientation(img)
            thumb = on_white(img)
    except MediaError:
        raise
    except UnidentifiedImageError:
        raise MediaError("media_undecodable", f"not a {', '.join(IMAGE_EXT)} image") from None
    except (Image.DecompressionBombWarning, Image.DecompressionBombError) as exc:
        raise MediaError("media_too_large", f"not decoded (bomb guard): {exc}") from None
    except (OSError, SyntaxError, ValueError, struct.error, EOFError, ZeroDivisionError) as exc:
        reason = "media_truncated" if "truncated" in str(exc).lower() else "media_undecodable"
        raise MediaError(reason, f"{type(exc).__name__}: {exc}") from None
    except Exception as exc:  # noqa: BLE001 — a plugin's own error (NotImplementedError, AttributeError, ...)
        raise MediaError("media_undecodable", f"{type(exc).__name__}: {str(exc)[:300]}") from None
    thumb.thumbnail((THUMB_PX, THUMB_PX))
    if turn is not None:
        thumb = thumb.transpose(getattr(Image.Transpose, turn))
        if turn in ("TRANSPOSE", "ROTATE_270", "TRANSVERSE", "ROTATE_90"):   # sizes as the image is shown
            width, height = height, width
    return Decoded(format=IMAGE_EXT.get(fmt, fmt.lower() or "bin"), size_bytes=len(data),
                   sha256=hashlib.sha256(data).hexdigest(), width=width, height=height, thumb=thumb)


def orientation(img) -> str | None:
    """The Image.Transpose name that shows the loaded `img` upright per its EXIF (or XMP) Orientation tag, None
    when it needs none. A camera stores a portrait photo sideways with the tag, and a page shows it turned: the
    stored pixels alone made it and its upright copy two images, and the spot-check showed it on its side. An
    unreadable EXIF block counts as no tag, as browsers treat it: the pixels decoded, so the record is usable
    (Pillow's "Corrupt EXIF data" warnings are silenced with it: one per hostile file is noise in the stage's log)."""
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            value = img.getexif().get(0x0112)   # 0x0112: ExifTags.Base.Orientation
    except Exception:  # noqa: BLE001 — Pillow's EXIF parser raises many types on a malformed block
        return None
    return EXIF_TRANSPOSE.get(value) if isinstance(value, int) else None


def eight_bit(img):
    """A 16-bit grayscale image (modes I;16*, and I as Pillow reads such PNGs and TIFFs) as 8-bit L, each value's
    high byte as Pillow keeps for 16-bit RGB PNGs: `convert("RGB")` clipped every value over 255, so a 16-bit
    scan read almost white and its 8-bit copy was a different image. Mode I is taken as 0–65535 (clipped to it)."""
    import numpy as np
    from PIL import Image

    values = np.array(img)   # a writable copy: uint16 for I;16 (either byte order), int32 for I
    if values.dtype.kind == "i":
        np.clip(values, 0, 65535, out=values)
    values >>= 8
    return Image.fromarray(values.astype(np.uint8))


def on_white(img):
    """The image as RGB, transparent parts on white as a page shows them: `convert("RGB")` keeps the colour
    stored under alpha 0, so a transparent logo and its white-flattened JPEG copy (the usual copy) hashed and
    coloured apart, and two images that look alike with different hidden colours did too. 16-bit grayscale is
    scaled to 8 bits first (`eight_bit`)."""
    from PIL import Image

    if img.mode == "I" or img.mode.startswith("I;16"):
        img = eight_bit(img)
    if img.mode in ("RGBA", "LA", "PA") or (img.mode == "P" and "transparency" in img.info):
        rgba = img.convert("RGBA")
        return Image.alpha_composite(Image.new("RGBA", rgba.size, (255, 255, 255, 255)), rgba).convert("RGB")
    return img.convert("RGB")


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


def _audio_error(exc: Exception) -> MediaError:
    # libsndfile names the stream by its repr, whose memory address differs per run: the detail must not
    message = re.sub(r"<_io\.BytesIO object at 0x[0-9a-fA-F]+>", "the audio bytes", str(exc))
    reason = "media_truncated" if any(w in message.lower() for w in ("lost sync", "truncat", "end of file",
                                                                      "unexpected end")) else "media_undecodable"
    return MediaError(reason, f"{type(exc).__name__}: {message}")


def decode_audio(data: bytes, max_seconds: float = 600.0) -> Decoded:
    """Mono float32 samples, decoded block by block: a clip longer than `max_seconds` (or past
    MAX_DECODE_SAMPLES) stops at the first block over it, whatever its header says."""
    import numpy as np
    import soundfile as sf

    cut = wav_truncation(data)
    if cut is not None:
        raise MediaError("media_truncated", cut)
    blocks: list = []
    try:
        with sf.SoundFile(io.BytesIO(data)) as f:
            fmt, declared, rate, channels = f.format, f.frames, f.samplerate, f.channels
            if rate <= 0 or channels <= 0:
                raise MediaError("media_undecodable", f"{rate} Hz, {channels} channel(s) in the header")
            by_time, by_memory = int(max_seconds * rate) + 1, MAX_DECODE_SAMPLES // channels
            limit = min(by_time, by_memory)
            frames = 0
            for block in f.blocks(blocksize=max(1, AUDIO_BLOCK_SAMPLES // channels), dtype="float32",
                                  always_2d=True):
                frames += len(block)
                if frames > limit:
                    reason = "audio_too_long" if by_time <= by_memory else "media_too_large"
                    raise MediaError(reason, f"over {limit - 1} frames ({max_seconds} s at {rate} Hz, "
                                     f"{channels} channel(s)): not decoded further")
                blocks.append(block.mean(axis=1, dtype=np.float32) if channels > 1 else block[:, 0].copy())
    except MediaError:
        raise
    except (sf.LibsndfileError, RuntimeError, TypeError, ValueError, EOFError, OverflowError) as exc:
        raise _audio_error(exc) from None
    if 0 < frames < declared:
        raise MediaError("media_truncated", f"{frames} of the {declared} frames its header declares")
    mono = np.concatenate(blocks) if blocks else np.zeros(0, dtype=np.float32)
    return Decoded(format=AUDIO_EXT.get(fmt, fmt.lower()), size_bytes=len(data),
                   sha256=hashlib.sha256(data).hexdigest(), duration_s=frames / rate,
                   sample_rate=int(rate), channels=int(channels), samples=mono)
