"""Readers (jsonl with inline bytes, parquet with a binary column, WebDataset shards whole and cut, audio with
SRT/VTT sidecars) and the per-record checks on planted faults: a truncated file of each format is a reason, not
a crash; segment order, overlap and range; speech rate; boilerplate captions; dedup's no-chain rule."""

from __future__ import annotations

import base64
import io
import json
import tarfile
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from specs.multimodal import CaptionSpec, FilesMMSource, MediaDedupSpec, SegmentSpec, SpeechRateSpec
from tasks.data.multimodal.checks import CaptionCheck, DecodeCheck, SegmentsCheck, SpeechRateCheck
from tasks.data.multimodal.phash import dedup
from tasks.data.multimodal.readers import read_source
from tasks.data.multimodal.records import Decoded, MMBad, MMRecord, MediaRef, Segment
from tasks.data.multimodal.subtitles import format_srt, format_vtt, parse_cues


def png(size=(64, 48), colour=(200, 30, 30)) -> bytes:
    from PIL import Image

    buf = io.BytesIO()
    Image.new("RGB", size, colour).save(buf, "PNG")
    return buf.getvalue()


def audio_bytes(fmt: str, seconds: float = 1.0, rate: int = 16000) -> bytes:
    import soundfile as sf

    buf = io.BytesIO()
    t = np.arange(int(seconds * rate)) / rate
    sf.write(buf, (0.3 * np.sin(2 * np.pi * 440 * t)).astype("float32"), rate, format=fmt, subtype="PCM_16")
    return buf.getvalue()


def record(kind: str, data: bytes, text: str = "A red square drawn on a plain white background.",
           segments: tuple = ()) -> MMRecord:
    return MMRecord(id="t/1", source="t", text=text, lang="en", media=MediaRef(kind, data=data, segments=segments),
                    origin="test")


@pytest.mark.parametrize("kind,data", [("image", png()), ("audio", audio_bytes("WAV")), ("audio", audio_bytes("FLAC"))])
def test_a_truncated_file_is_a_reason_not_a_crash(kind, data):
    assert DecodeCheck(Path("."))(record(kind, data)).keep
    verdict = DecodeCheck(Path("."))(record(kind, data[: len(data) // 2]))
    assert not verdict.keep and verdict.reason == "media_truncated" and verdict.detail


def test_a_jpeg_cut_short_and_garbage_bytes():
    from PIL import Image

    buf = io.BytesIO()
    Image.new("RGB", (120, 90), (10, 200, 10)).save(buf, "JPEG")
    cut = DecodeCheck(Path("."))(record("image", buf.getvalue()[:400]))
    assert (cut.keep, cut.reason) == (False, "media_truncated")
    junk = DecodeCheck(Path("."))(record("image", b"not an image at all"))
    assert (junk.keep, junk.reason) == (False, "media_undecodable")


def test_segments_order_overlap_and_range():
    check = SegmentsCheck(SegmentSpec())
    rec = record("audio", audio_bytes("WAV", 3.0))
    assert DecodeCheck(Path("."))(rec).keep

    def with_segments(*spans):
        rec.media = MediaRef("audio", data=rec.media.data, segments=tuple(Segment(a, b, "x") for a, b in spans))
        return check(rec)

    assert with_segments((0.0, 1.0), (1.0, 2.9)).keep
    assert with_segments((0.0, 1.0), (1.02, 2.0)).keep                      # inside the tolerance
    assert with_segments((1.0, 2.0), (0.2, 0.8)).reason == "segments_not_monotonic"
    assert with_segments((0.0, 1.5), (1.0, 2.0)).reason == "segments_overlap"
    assert with_segments((1.5, 2.5), (2.6, 3.4)).reason == "segment_outside_media"   # shifted past the end
    assert with_segments((0.5, 0.4),).reason == "segment_inverted"


def test_speech_rate_bounds_per_segment_and_per_language():
    rec = record("audio", audio_bytes("WAV", 4.0))
    DecodeCheck(Path("."))(rec)
    spec = SpeechRateSpec(per_lang={"ja": (1.0, 8.0)})
    rec.media = MediaRef("audio", data=rec.media.data, segments=(Segment(0, 2, "x" * 30), Segment(2, 4, "y" * 28)))
    assert SpeechRateCheck(spec)(rec).keep                                  # 15 and 14 chars/s
    rec.media = MediaRef("audio", data=rec.media.data, segments=(Segment(0, 1, "x" * 80),))
    assert SpeechRateCheck(spec)(rec).reason == "speech_too_fast"
    rec.media, rec.text = MediaRef("audio", data=rec.media.data), "Too short."   # whole clip: 2.5 chars/s
    assert SpeechRateCheck(spec)(rec).reason == "speech_too_slow"
    rec.lang, rec.text = "ja", "x" * 30                                      # 7.5 chars/s: fine in Japanese
    assert SpeechRateCheck(spec)(rec).keep


@pytest.mark.parametrize("caption,reason", [
    ("", "caption_missing"), ("image", "caption_boilerplate"), ("The Image.", "caption_boilerplate"),
    ("DSC_0042.jpg", "caption_boilerplate"), ("untitled 3", "caption_boilerplate"),
    ("Ein rotes Quadrat ist auf einem weißen Hintergrund gezeichnet.", "caption_language"),
    ("A red square drawn on a plain white background.", None)])
def test_captions(caption, reason):
    verdict = CaptionCheck(CaptionSpec()).batch([record("image", png(), caption)])[0]
    assert verdict.reason == reason


def test_dedup_keeps_the_best_and_never_chains():
    """A~B (2 bits), B~C (2 bits), A–C 4 bits > max 3: A (most pixels) is kept, B removed for A, C kept."""
    def rec(name, pixels):
        r = record("image", b"x")
        r.id, r.decoded = name, Decoded(format="png", size_bytes=1, sha256="", width=pixels, height=1)
        return r

    a = np.zeros(64, dtype=bool)
    b, c = a.copy(), a.copy()
    b[:2] = True
    c[:4] = True
    removed = dedup([rec("a", 300), rec("b", 200), rec("c", 100)], [a, b, c], MediaDedupSpec(max_distance=3))  # 64-bit arrays: any hash size works
    assert removed == {1: (0, 2)}


def test_readers(tmp_path):
    (tmp_path / "im.png").write_bytes(png())
    rows = [{"image": "im.png", "caption": "A red square on white.", "id": "p1", "url": "http://x"},
            {"image": {"bytes": base64.b64encode(png()).decode()}, "caption": "Inline red square.", "id": "p2"},
            {"image": 3, "caption": "bad", "id": "p3"}]
    (tmp_path / "pairs.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows) + "{broken\n")
    pq.write_table(pa.table({"image": [png()], "caption": ["Parquet bytes."]}), tmp_path / "rows.parquet")
    (tmp_path / "talk.wav").write_bytes(audio_bytes("WAV", 2.0))
    (tmp_path / "talk.vtt").write_text(format_vtt([Segment(0.1, 0.9, "Hello there."), Segment(1.0, 1.8, "Bye.")]))
    with tarfile.open(tmp_path / "shard.tar", "w") as tar:
        for key in ("a", "b"):
            for ext, data in (("png", png()), ("txt", f"caption {key}".encode())):
                info = tarfile.TarInfo(f"{key}.{ext}")
                info.size = len(data)
                tar.addfile(info, io.BytesIO(data))
    whole = (tmp_path / "shard.tar").read_bytes()
    (tmp_path / "cut.tar").write_bytes(whole[:2048 + 512 + 50])   # inside b.png, after sample a
    got = list(read_source(FilesMMSource(name="s", paths=["."], id_field="id"), tmp_path))
    recs = {g.id: g for g in got if isinstance(g, MMRecord)}
    bad = [g for g in got if isinstance(g, MMBad)]
    assert recs["s/p1"].media.path == "im.png" and recs["s/p1"].meta == {"url": "http://x"}
    assert recs["s/p2"].media.data == png()
    assert sorted(b.reason for b in bad) == ["bad_media", "invalid_json", "truncated"]
    assert {"s/shard/a", "s/shard/b", "s/cut/a"} <= set(recs) and recs["s/shard/b"].text == "caption b"
    talk = recs["s/talk.wav"]
    assert talk.media.kind == "audio" and talk.text == "Hello there. Bye." and len(talk.media.segments) == 2
    assert any(r.media.data == png() and r.text == "Parquet bytes." for r in recs.values())


def test_subtitles_round_trip_and_name_a_bad_line():
    segs = [Segment(0.0, 1.25, "One."), Segment(61.5, 3725.004, "Two <i>lines</i>.")]
    assert parse_cues(format_srt(segs)) == [Segment(0.0, 1.25, "One."), Segment(61.5, 3725.004, "Two lines.")]
    assert parse_cues(format_vtt(segs))[1].end == 3725.004
    with pytest.raises(ValueError, match="line 2"):
        parse_cues("1\n00:00:xx --> 00:00:01,000\nhi\n")


@pytest.mark.parametrize("name, pack", [
    ("shard.tar.gz", lambda b: __import__("gzip").compress(b, mtime=0)),
    ("shard.tgz", lambda b: __import__("gzip").compress(b, mtime=0)),
    ("shard.tar.xz", lambda b: __import__("lzma").compress(b)),
    ("shard.tar.bz2", lambda b: __import__("bz2").compress(b)),
    ("shard.tar.zst", lambda b: __import__("zstandard").ZstdCompressor().compress(b)),
])
def test_compressed_shards_are_read_and_a_cut_between_members_is_truncated(tmp_path, name, pack):
    """A shard named `.tar.gz`/`.tgz`/`.tar.xz`/`.tar.bz2`/`.tar.zst` was counted as media and skipped without a
    word (auto format); zstd was not read at all. Cut inside its compressed stream right after a sample, it is
    `truncated`, not a clean end."""
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w") as tar:
        for key in ("a", "b", "c"):
            for ext, data in (("png", png()), ("txt", f"caption {key}".encode())):
                info = tarfile.TarInfo(f"{key}.{ext}")
                info.size = len(data)
                tar.addfile(info, io.BytesIO(data))
    whole = pack(buf.getvalue())
    (tmp_path / "good").mkdir()
    (tmp_path / "good" / name).write_bytes(whole)
    got = list(read_source(FilesMMSource(name="s", paths=["good"]), tmp_path))
    stem = Path(name).stem           # ids keep the name less its last suffix, as for `.tar`
    assert sorted(g.id for g in got if isinstance(g, MMRecord)) == [f"s/{stem}/{k}" for k in "abc"], got
    assert all(g.text.startswith("caption ") for g in got)
    (tmp_path / "cut").mkdir()
    (tmp_path / "cut" / name).write_bytes(whole[:len(whole) * 2 // 3])
    got = list(read_source(FilesMMSource(name="s", paths=["cut"]), tmp_path))
    # bz2 and zstd decode nothing of a cut single block: the shard is then unreadable as a whole
    reasons = ["unreadable_file"] if name.endswith((".bz2", ".zst")) else ["truncated"]
    assert [g.reason for g in got if isinstance(g, MMBad)] == reasons, got
    assert f"s/{stem}/c" not in {g.id for g in got if isinstance(g, MMRecord)}
