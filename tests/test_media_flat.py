"""Two defects of the multimodal stage, through the real decoder, fingerprint and dedup.

Flat colours: the perceptual hash is taken on the grayscale thumbnail, so every flat-colour image had the same
hash (a red square was a "copy" of a blue one) and so did two drawings with the same shapes in other colours;
now a coarse colour signature must agree too. Pixel count: an 88-megapixel image passed the decoder's guard
(2²⁸ pixels) and decoding it took 760 MB as 8-bit RGB; now `image.max_pixels` is checked on the header, before
decoding."""

from __future__ import annotations

import io
import struct
import zlib
from pathlib import Path

import pytest

from specs.multimodal import ImageBounds, MediaDedupSpec, MultimodalSpec
from tasks.data.multimodal import phash
from tasks.data.multimodal.checks import mm_filters
from tasks.data.multimodal.decode import MediaError, decode_image
from tasks.data.multimodal.records import MediaRef, MMRecord


def encode(img, fmt: str = "PNG", **kw) -> bytes:
    buf = io.BytesIO()
    img.save(buf, fmt, **kw)
    return buf.getvalue()


def flat(colour: tuple[int, int, int], size: tuple[int, int] = (200, 150)) -> bytes:
    from PIL import Image

    return encode(Image.new("RGB", size, colour))


def drawing(palette: list[tuple[int, int, int]], size: tuple[int, int] = (240, 180)) -> bytes:
    """Background, a rectangle, an ellipse and a polygon, coloured from `palette` (4 colours)."""
    from PIL import Image, ImageDraw

    img = Image.new("RGB", size, palette[0])
    d = ImageDraw.Draw(img)
    d.rectangle((20, 20, 110, 90), fill=palette[1])
    d.ellipse((120, 60, 220, 160), fill=palette[2])
    d.polygon([(30, 170), (90, 110), (110, 170)], fill=palette[3])
    return encode(img)


def copy_of(data: bytes, scale: float = 0.8, quality: int = 75) -> bytes:
    """The image resized to `scale` and re-encoded as a JPEG at `quality`: the copy a crawl finds."""
    from PIL import Image

    img = Image.open(io.BytesIO(data)).convert("RGB")
    img = img.resize((round(img.width * scale), round(img.height * scale)), Image.LANCZOS)
    return encode(img, "JPEG", quality=quality)


def removed(*images: bytes) -> dict[int, tuple[int, int]]:
    """Decode each image as the stage does, fingerprint it and run dedup at the default spec."""
    spec = MediaDedupSpec()
    recs = []
    for k, data in enumerate(images):
        rec = MMRecord(id=f"t/{k}", source="t", text="A drawing.", lang="en", media=MediaRef("image", data=data),
                       origin="test")
        rec.decoded = decode_image(data)
        recs.append(rec)
    return phash.dedup(recs, [phash.fingerprint(r, spec) for r in recs], spec)


def test_flat_colours_are_not_copies_of_each_other():
    assert removed(flat((220, 20, 20)), flat((20, 20, 220))) == {}
    assert removed(flat((0, 0, 0), (400, 300)), flat((255, 255, 255), (400, 300)), flat((0, 160, 0))) == {}


def test_a_resized_jpeg_copy_is_still_removed():
    original = drawing([(245, 245, 235), (200, 30, 30), (30, 90, 200), (40, 160, 60)])
    out = removed(original, copy_of(original))
    assert list(out) == [1] and out[1][0] == 0          # the copy (fewer pixels) goes, for the original
    assert removed(flat((220, 20, 20)), copy_of(flat((220, 20, 20)), 0.5)) == {1: (0, 0)}


def test_a_recoloured_drawing_is_kept():
    shapes = drawing([(245, 245, 235), (200, 30, 30), (30, 90, 200), (40, 160, 60)])
    recoloured = drawing([(245, 245, 235), (30, 90, 200), (200, 30, 30), (160, 40, 160)])
    assert removed(shapes, recoloured) == {}


def one_colour_png(width: int, height: int) -> bytes:
    """A 1-bit PNG of width × height pixels of one colour, written row by row: ~10 KB on disk, whatever it
    declares."""
    row = b"\x00" + b"\x00" * ((width + 7) // 8)
    z = zlib.compressobj(9)
    body = b"".join(z.compress(row) for _ in range(height)) + z.flush()

    def chunk(kind: bytes, data: bytes) -> bytes:
        return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data))
    return (b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", struct.pack(">IIBBBBB", width, height, 1, 0, 0, 0, 0))
            + chunk(b"IDAT", body) + chunk(b"IEND", b""))


def test_sixty_megapixels_are_refused_before_decoding_at_the_default(monkeypatch):
    from PIL import ImageFile

    data = one_colour_png(8000, 7500)
    decode = mm_filters(MultimodalSpec(from_ingest=False), Path("."))[0]
    rec = MMRecord(id="t/big", source="t", text="A black page.", lang="en", media=MediaRef("image", data=data),
                   origin="test")

    def no_load(self):
        raise AssertionError("the pixels were decoded")
    with monkeypatch.context() as m:
        m.setattr(ImageFile.ImageFile, "load", no_load)
        verdict = decode(rec)
        with pytest.raises(MediaError) as caught:
            decode_image(data)
    assert (verdict.keep, verdict.reason) == (False, "media_too_large")
    assert "8000×7500" in verdict.detail and "50000000" in verdict.detail
    assert caught.value.reason == "media_too_large"
    raised = mm_filters(MultimodalSpec(from_ingest=False, image=ImageBounds(max_pixels=61_000_000)), Path("."))[0]
    ok = raised(rec)
    assert ok.keep and (rec.decoded.width, rec.decoded.height) == (8000, 7500)


def test_the_spotcheck_shows_a_kept_image_up_to_the_raised_bound(tmp_path):
    # the preview re-decodes the media: at the default bound a kept 60 MP image (allowed by a raised
    # `image.max_pixels`) would have had no thumbnail in the spot-check
    from tasks.data.multimodal import shards
    from tasks.data.multimodal.curate import Outcome

    rec = MMRecord(id="t/big", source="t", text="A black page.", lang="en",
                   media=MediaRef("image", data=one_colour_png(8000, 7500)), origin="test")
    shown = {}
    for bound in (50_000_000, 61_000_000):
        out = tmp_path / str(bound)
        out.mkdir()
        items = shards.spotcheck([Outcome(rec)], out, tmp_path, per_stratum=1, seed=0, thumb_px=64,
                                 max_pixels=bound)
        shown[bound] = items[0]["media_file"]
    assert shown[50_000_000] is None and shown[61_000_000] is not None
    assert (tmp_path / shown[61_000_000]).stat().st_size > 0


def test_a_transparent_image_and_its_flattened_copy_are_one_image():
    # convert("RGB") kept the colour hidden under alpha 0: a logo and its white-flattened JPEG copy differed by
    # 255 in the colour signature, and two logos alike on the page but with different hidden colours too
    from PIL import Image, ImageDraw

    def logo(hidden: tuple[int, int, int]) -> "Image.Image":
        img = Image.new("RGBA", (200, 150), hidden + (0,))
        ImageDraw.Draw(img).ellipse((40, 30, 160, 120), fill=(200, 30, 30, 255))
        return img

    flattened = Image.alpha_composite(Image.new("RGBA", (200, 150), (255, 255, 255, 255)), logo((0, 0, 0)))
    assert len(removed(encode(logo((0, 0, 0))), encode(flattened.convert("RGB"), "JPEG", quality=85))) == 1
    assert len(removed(encode(logo((0, 0, 0))), encode(logo((0, 200, 0))))) == 1
