"""Three gaps of image near-duplicate detection, through the real decoder, fingerprint and dedup.

EXIF orientation: a camera stores a portrait photo sideways with an Orientation tag and a page shows it turned;
the stored pixels alone made it and its upright copy two images (and width/height read as stored). 16-bit
grayscale (PNG/TIFF modes I;16, I;16B, I): `convert("RGB")` clipped every value over 255, so a 16-bit scan read
almost white and its 8-bit copy was another image. Brightness: a copy brightened by 15 differed by 15 in every
cell of the colour signature, over `colour_tolerance`, and was kept; `brightness_tolerance` forgives a uniform
shift, while a hue turn and a red vs blue square stay apart."""

from __future__ import annotations

import io
import struct

import numpy as np
import pytest

from specs.multimodal import MediaDedupSpec
from tasks.data.multimodal import phash
from tasks.data.multimodal.decode import MediaError, decode_image
from tasks.data.multimodal.records import MediaRef, MMRecord

# the Image.Transpose that stores an upright image so that the tag's turn shows it upright again
STORE = {3: "ROTATE_180", 6: "ROTATE_90", 8: "ROTATE_270"}


def encode(img, fmt: str = "PNG", **kw) -> bytes:
    buf = io.BytesIO()
    img.save(buf, fmt, **kw)
    return buf.getvalue()


def picture(seed: int, size: tuple[int, int] = (320, 240)):
    """A seeded asymmetric RGB drawing: a gradient, random rectangles and ellipses, a corner mark."""
    from PIL import Image, ImageDraw

    rng = np.random.default_rng(seed)
    w, h = size
    ramp = np.linspace(40, 200, w)[None, :, None] * np.ones((h, 1, 3))
    ramp[..., 2] = np.linspace(60, 180, h)[:, None]
    img = Image.fromarray(ramp.astype(np.uint8))
    d = ImageDraw.Draw(img)
    for _ in range(6):
        x0, y0 = int(rng.integers(0, w - 60)), int(rng.integers(0, h - 60))
        box = (x0, y0, x0 + int(rng.integers(30, 120)), y0 + int(rng.integers(30, 100)))
        colour = tuple(int(c) for c in rng.integers(0, 256, 3))
        (d.rectangle if rng.random() < 0.5 else d.ellipse)(box, fill=colour)
    d.rectangle((0, 0, w // 5, h // 6), fill=(250, 250, 40))     # top-left: no turn maps it onto itself
    return img


def record(k: int, data: bytes) -> MMRecord:
    rec = MMRecord(id=f"t/{k}", source="t", text="A picture.", lang="en", media=MediaRef("image", data=data),
                   origin="test")
    rec.decoded = decode_image(data)
    return rec


def removed(*images: bytes, spec: MediaDedupSpec | None = None) -> dict[int, tuple[int, int]]:
    """Decode each image as the stage does, fingerprint it and run dedup (the default spec unless given)."""
    spec = spec or MediaDedupSpec()
    recs = [record(k, data) for k, data in enumerate(images)]
    return phash.dedup(recs, [phash.fingerprint(r, spec) for r in recs], spec)


def exif_block(orientation: int) -> bytes:
    from PIL import Image

    exif = Image.Exif()
    exif[0x0112] = orientation
    return exif.tobytes()


def stored_sideways(upright, orientation: int, fmt: str = "JPEG", **kw) -> bytes:
    """`upright` stored as a camera does: pixels turned, with the Orientation tag that turns them back."""
    from PIL import Image

    turned = upright.transpose(getattr(Image.Transpose, STORE[orientation]))
    return encode(turned, fmt, exif=exif_block(orientation), **kw)


@pytest.mark.parametrize("orientation", [6, 8, 3])
def test_a_jpeg_stored_turned_with_its_exif_tag_is_a_copy_of_the_upright_one(orientation):
    from PIL import Image, ImageOps

    upright = picture(orientation)
    sideways = stored_sideways(upright, orientation, quality=90)
    shown = ImageOps.exif_transpose(Image.open(io.BytesIO(sideways))).convert("RGB")
    assert shown.size == upright.size                                   # the test's own turn is right
    assert np.abs(np.asarray(shown, np.int16) - np.asarray(upright, np.int16)).mean() < 4
    assert len(removed(encode(upright), sideways)) == 1
    assert len(removed(encode(upright, "JPEG", quality=85), sideways)) == 1


@pytest.mark.parametrize("orientation", [6, 8, 3])
def test_width_height_and_thumbnail_are_as_shown(orientation):
    upright = picture(10 + orientation, (240, 160))
    d = decode_image(stored_sideways(upright, orientation, quality=92))
    assert (d.width, d.height) == (240, 160)
    assert d.thumb.size == (240, 160) and d.thumb.mode == "RGB"
    ref = np.asarray(upright, np.int16)
    assert np.abs(np.asarray(d.thumb, np.int16) - ref).mean() < 4     # upright, not merely the right shape


@pytest.mark.parametrize("fmt", ["PNG", "WEBP", "TIFF"])
def test_the_orientation_tag_is_honoured_in_png_webp_and_tiff(fmt):
    upright = picture(21, (240, 160))
    kw = {"lossless": True} if fmt == "WEBP" else {}
    d = decode_image(stored_sideways(upright, 6, fmt, **kw))
    assert (d.width, d.height) == (240, 160) and d.thumb.size == (240, 160)
    assert np.abs(np.asarray(d.thumb, np.int16) - np.asarray(upright, np.int16)).mean() < 2


def test_a_large_jpeg_is_thumbnailed_then_turned():
    upright = picture(30, (1200, 900))
    d = decode_image(stored_sideways(upright, 8, quality=90))
    assert (d.width, d.height) == (1200, 900)
    assert max(d.thumb.size) <= 256 and d.thumb.width > d.thumb.height


def tiff_exif(entries: list[tuple[int, int, int, bytes]]) -> bytes:
    """A little-endian EXIF block with one IFD of (tag, type, count, 4-byte value or offset) entries."""
    body = b"II*\x00" + struct.pack("<IH", 8, len(entries))
    body += b"".join(struct.pack("<HHI", tag, typ, count) + value for tag, typ, count, value in entries)
    return b"Exif\x00\x00" + body + struct.pack("<I", 0)


MALFORMED = {
    "garbage": b"Exif\x00\x00garbage, no TIFF header",
    "truncated IFD": tiff_exif([(0x0112, 3, 1, struct.pack("<HH", 6, 0))])[:14],
    "IFD offset past the end": b"Exif\x00\x00II*\x00" + struct.pack("<I", 99_999),
    "orientation as text": tiff_exif([(0x0112, 2, 4, b"6\x00\x00\x00")]),
    "orientation out of range": tiff_exif([(0x0112, 3, 1, struct.pack("<HH", 9, 0))]),
    "orientation count past the end": tiff_exif([(0x0112, 3, 0x7FFFFFFF, struct.pack("<I", 16))]),
    "unknown type": tiff_exif([(0x0112, 99, 1, struct.pack("<I", 6))]),
    "EXIF IFD pointing at itself": tiff_exif([(0x8769, 4, 1, struct.pack("<I", 8))]),
    "empty": b"Exif\x00\x00",
}


@pytest.mark.parametrize("name", list(MALFORMED))
def test_a_malformed_exif_block_does_not_fail_decoding(name):
    upright = picture(40, (200, 150))
    data = encode(upright, "JPEG", quality=90, exif=MALFORMED[name])
    d = decode_image(data)                                      # no MediaError, no other exception
    assert (d.width, d.height) == (200, 150) and d.thumb.size == (200, 150)
    assert len(removed(encode(upright), data)) == 1


def test_the_pixel_bound_is_still_checked_before_any_decode(monkeypatch):
    from PIL import ImageFile

    data = stored_sideways(picture(50, (400, 300)), 6, quality=90)

    def no_load(self):
        raise AssertionError("the pixels were decoded")
    with monkeypatch.context() as m:
        m.setattr(ImageFile.ImageFile, "load", no_load)
        with pytest.raises(MediaError) as caught:
            decode_image(data, max_pixels=100_000)
    assert caught.value.reason == "media_too_large" and "300×400" in caught.value.detail
    assert (decode_image(data, max_pixels=120_000).width, decode_image(data, max_pixels=120_000).height) == (400, 300)


def scan16(seed: int, size: tuple[int, int] = (256, 192)) -> np.ndarray:
    """A seeded 16-bit grayscale drawing (uint16, 0–65535): a gradient with bright and dark shapes."""
    rng = np.random.default_rng(seed)
    w, h = size
    yy, xx = np.mgrid[0:h, 0:w]
    img = (xx / w * 40_000 + yy / h * 20_000).astype(np.float64)
    for _ in range(5):
        cx, cy, r = rng.integers(30, w - 30), rng.integers(30, h - 30), rng.integers(15, 60)
        img[(xx - cx) ** 2 + (yy - cy) ** 2 < r * r] = rng.integers(0, 65_536)
    img[: h // 6, : w // 5] = 62_000
    return img.astype(np.uint16)


def test_a_16_bit_grayscale_png_is_scaled_not_clipped():
    from PIL import Image

    values = scan16(1)
    png16 = encode(Image.fromarray(values))
    assert Image.open(io.BytesIO(png16)).mode in ("I;16", "I")
    thumb = np.asarray(decode_image(png16).thumb, np.float64)
    assert thumb.shape[2] == 3 and abs(thumb.mean() - (values >> 8).mean()) < 1     # not white
    assert np.abs(thumb[..., 0] - (values >> 8)).max() <= 1


def test_a_16_bit_png_and_its_8_bit_copy_are_one_image():
    from PIL import Image

    values = scan16(2)
    png16 = encode(Image.fromarray(values))
    eight = Image.fromarray((values >> 8).astype(np.uint8))
    assert len(removed(png16, encode(eight))) == 1
    assert len(removed(png16, encode(eight.convert("RGB"), "JPEG", quality=85))) == 1


@pytest.mark.parametrize("dtype", [">u2", "<u2"])
def test_a_16_bit_tiff_in_either_byte_order_is_a_copy_of_its_8_bit_png(dtype):
    from PIL import Image

    values = scan16(3)
    tiff16 = encode(Image.fromarray(values.astype(dtype)), "TIFF")
    assert len(removed(tiff16, encode(Image.fromarray((values >> 8).astype(np.uint8))))) == 1


def test_a_different_16_bit_drawing_is_kept():
    from PIL import Image

    first, other = scan16(4), scan16(5)
    assert removed(encode(Image.fromarray(first)), encode(Image.fromarray(other))) == {}
    assert removed(encode(Image.fromarray(first)), encode(Image.fromarray(65_535 - first))) == {}


def test_32_bit_integer_values_are_clamped_to_the_16_bit_range():
    from PIL import Image

    values = np.tile(np.array([-5, 0, 255, 70_000, 1 << 30, 40_000], dtype=np.int32), (48, 8))
    d = decode_image(encode(Image.fromarray(values), "TIFF"))
    assert list(np.asarray(d.thumb)[0, :6, 0]) == [0, 0, 0, 255, 255, 156]


def shifted(img, delta: int) -> bytes:
    from PIL import Image

    return encode(Image.fromarray(np.clip(np.asarray(img, np.int16) + delta, 0, 255).astype(np.uint8)))


def hue_turned(img, degrees: float) -> bytes:
    from PIL import Image

    hsv = np.asarray(img.convert("HSV"), np.int16).copy()
    hsv[..., 0] = (hsv[..., 0] + round(degrees / 360 * 256)) % 256
    return encode(Image.fromarray(hsv.astype(np.uint8), "HSV").convert("RGB"))


@pytest.mark.parametrize("seed", [60, 61, 62])
@pytest.mark.parametrize("delta", [15, -15])
def test_a_brightened_or_darkened_copy_is_removed(seed, delta):
    img = picture(seed)
    out = removed(encode(img), shifted(img, delta))
    assert list(out) == [1] and out[1][0] == 0


def test_a_brightened_jpeg_copy_is_removed():
    from PIL import Image

    img = picture(63)
    brighter = Image.open(io.BytesIO(shifted(img, 15)))
    assert len(removed(encode(img), encode(brighter, "JPEG", quality=80))) == 1


def hash_distance(a: bytes, b: bytes) -> int:
    spec = MediaDedupSpec()
    return int((phash.fingerprint(record(0, a), spec).bits != phash.fingerprint(record(1, b), spec).bits).sum())


@pytest.mark.parametrize(("seed", "degrees"), [(66, 30), (74, 30), (87, 30), (60, 30), (60, -30), (61, -30)])
def test_a_hue_turned_copy_is_still_kept(seed, degrees):
    img = picture(seed)
    assert removed(encode(img), hue_turned(img, degrees)) == {}


@pytest.mark.parametrize(("seed", "degrees"), [(66, 30), (74, 30), (87, 30)])
def test_the_colour_check_is_what_keeps_those_hue_turned_copies(seed, degrees):
    img = picture(seed)       # within the hash's bits: the hash alone would remove them
    assert hash_distance(encode(img), hue_turned(img, degrees)) <= MediaDedupSpec().max_distance


def test_red_and_blue_squares_are_still_kept():
    from PIL import Image

    red, blue = Image.new("RGB", (200, 150), (220, 20, 20)), Image.new("RGB", (200, 150), (20, 20, 220))
    assert removed(encode(red), encode(blue)) == {}
    grey, lighter = Image.new("RGB", (200, 150), (100, 100, 100)), Image.new("RGB", (200, 150), (140, 140, 140))
    assert removed(encode(grey), encode(lighter)) == {}     # a shift over 8 + 12 is not forgiven


def test_brightness_tolerance_zero_compares_the_signatures_as_they_are():
    img = picture(64)
    strict = MediaDedupSpec(brightness_tolerance=0)
    assert removed(encode(img), shifted(img, 15), spec=strict) == {}
    assert removed(encode(img), shifted(img, -15), spec=strict) == {}
    assert len(removed(encode(img), shifted(img, 15))) == 1
    assert MediaDedupSpec().brightness_tolerance == 8
