"""Stage multimodal on hostile user files, through the real stage: media paths that leave the source's folder, URLs,
FIFOs, decompression bombs (image and audio), JSON nested past the parser's depth, WebDataset shards with
repeated keys, repeated members, oversized members and non-text captions. Each is quarantined with a reason
and a detail that is the same on every run; none crashes, hangs or reads what it should not."""

from __future__ import annotations

import io
import json
import os
import signal
import struct
import tarfile
import zlib
from pathlib import Path

import numpy as np
import pyarrow.parquet as pq
import pytest

from specs.multimodal import AudioBounds, FilesMMSource, ImageBounds, MultimodalSpec
from tasks.core.runner import StagePaths

CAPTION = "A red square drawn on a plain white background."


def png(size=(64, 48), colour=(200, 30, 30)) -> bytes:
    from PIL import Image

    buf = io.BytesIO()
    Image.new("RGB", size, colour).save(buf, "PNG")
    return buf.getvalue()


def bomb_png(side: int) -> bytes:
    """A grey PNG of side × side pixels of one value: a few KB on disk."""
    z = zlib.compressobj(9)
    data = b"".join(z.compress(b"\x00" * (side + 1)) for _ in range(side)) + z.flush()

    def chunk(kind: bytes, body: bytes) -> bytes:
        return struct.pack(">I", len(body)) + kind + body + struct.pack(">I", zlib.crc32(kind + body))
    return (b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", struct.pack(">IIBBBBB", side, side, 8, 0, 0, 0, 0))
            + chunk(b"IDAT", data) + chunk(b"IEND", b""))


def member(tar: tarfile.TarFile, name: str, data: bytes) -> None:
    info = tarfile.TarInfo(name)
    info.size = len(data)
    tar.addfile(info, io.BytesIO(data))


def run(root: Path, **spec) -> tuple[dict, dict[str, dict]]:
    """Run the stage on `root/src` (under a 60 s alarm: a hang fails the test); (counts, quarantine by origin)."""
    import tasks.multimodal as stage

    source = FilesMMSource(name="u", paths=["src"], **spec.pop("source", {}))
    paths = StagePaths(root=root, stage="multimodal", seed=1234)
    paths.out.mkdir(parents=True, exist_ok=True)

    def hung(*_):
        raise TimeoutError("the stage hung")
    old = signal.signal(signal.SIGALRM, hung)
    signal.alarm(60)
    try:
        result = stage.run(MultimodalSpec(from_ingest=False, sources=[source], **spec), paths)
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, old)
    rows = pq.read_table(paths.out / "quarantine.parquet").to_pylist()
    return result.counts, {r["origin"]: r for r in rows}


def test_media_paths_outside_the_source_urls_and_fifos_are_refused_unread(tmp_path):
    src = tmp_path / "src"
    src.mkdir()
    (tmp_path / "secret.png").write_bytes(png())
    (src / "ok.png").write_bytes(png())
    os.symlink(tmp_path / "secret.png", src / "link.png")
    os.mkfifo(src / "pipe.png")
    rows = ["../secret.png", str(tmp_path / "secret.png"), "link.png", "/dev/zero", "https://example.com/a.png",
            "a\x00b.png", "pipe.png", "ok.png"]
    (src / "rows.jsonl").write_text("".join(json.dumps({"image": r, "caption": f"{CAPTION} {n}"}) + "\n"
                                            for n, r in enumerate(rows)))
    counts, bad = run(tmp_path)
    reasons = {int(k.rsplit(":", 1)[1]): (v["check"], v["reason"]) for k, v in bad.items() if "rows.jsonl" in k}
    assert reasons == {1: ("read", "media_outside"), 2: ("read", "media_outside"), 3: ("read", "media_outside"),
                       4: ("read", "media_outside"), 5: ("read", "media_url"), 6: ("read", "bad_media"),
                       7: ("decode", "media_unreadable")}
    assert "outside the source's folders" in bad["src/rows.jsonl:1"]["detail"]
    assert counts["kept"] == 1   # ok.png; the link itself is also listed by the folder and refused there


def test_media_roots_lets_a_source_name_a_sibling_folder(tmp_path):
    (tmp_path / "src").mkdir()
    (tmp_path / "images").mkdir()
    (tmp_path / "images" / "a.png").write_bytes(png())
    (tmp_path / "src" / "rows.jsonl").write_text(json.dumps({"image": "../images/a.png", "caption": CAPTION}) + "\n")
    assert run(tmp_path, source={"media_roots": ["images"]})[0]["kept"] == 1


def test_an_image_bomb_is_refused_before_it_is_decoded(tmp_path):
    (tmp_path / "src").mkdir()
    (tmp_path / "src" / "bomb.png").write_bytes(bomb_png(10_000))   # 100 M pixels in ~100 KB
    (tmp_path / "src" / "rows.jsonl").write_text(json.dumps({"image": "bomb.png", "caption": CAPTION}) + "\n")
    _, bad = run(tmp_path)
    assert (bad["src/rows.jsonl:1"]["check"], bad["src/rows.jsonl:1"]["reason"]) == ("decode", "media_too_large")


def test_audio_is_decoded_only_up_to_its_duration_bound(tmp_path, monkeypatch):
    import soundfile as sf

    import tasks.data.multimodal.decode as decode

    (tmp_path / "src").mkdir()
    with sf.SoundFile(tmp_path / "src" / "long.flac", "w", 16000, 2, format="FLAC") as f:
        f.write(np.zeros((16000 * 60, 2), np.float32))    # a minute of silence: a few KB of FLAC
    (tmp_path / "src" / "long.txt").write_text("hello there, a long silence follows this sentence")
    blocks = []
    real = sf.SoundFile.blocks
    monkeypatch.setattr(sf.SoundFile, "blocks", lambda self, *a, **k: (blocks.append(1) or b for b in
                                                                         real(self, *a, **k)))
    monkeypatch.setattr(decode, "AUDIO_BLOCK_SAMPLES", 16000 * 2)   # one second a block
    _, bad = run(tmp_path, audio=AudioBounds(max_duration_s=5.0))
    row = bad["src/long.flac"]
    assert (row["check"], row["reason"]) == ("decode", "audio_too_long")
    assert len(blocks) == 6     # five seconds and the block that passed them, not sixty


def test_json_nested_too_deep_is_a_reason_everywhere(tmp_path):
    import soundfile as sf

    src = tmp_path / "src"
    src.mkdir()
    deep = "[" * 100_000 + "]" * 100_000
    (src / "ok.png").write_bytes(png())
    (src / "rows.jsonl").write_text(deep + "\n" + json.dumps({"image": "ok.png", "caption": CAPTION}) + "\n")
    buf = io.BytesIO()
    sf.write(buf, np.zeros(16000, np.float32), 16000, format="WAV")
    (src / "clip.wav").write_bytes(buf.getvalue())
    (src / "clip.json").write_text(deep)
    with tarfile.open(src / "s.tar", "w") as tar:
        member(tar, "a.png", png(colour=(0, 0, 200)))
        member(tar, "a.json", deep.encode())
    counts, bad = run(tmp_path)
    assert bad["src/rows.jsonl:1"]["reason"] == "invalid_json"
    assert bad["src/s.tar:a"]["reason"] == "invalid_json"
    assert bad["src/clip.wav"]["reason"] == "unreadable_file" and "RecursionError" in bad["src/clip.wav"]["detail"]
    assert counts["kept"] == 1


def test_webdataset_repeated_keys_members_oversized_members_and_odd_captions(tmp_path):
    (tmp_path / "src").mkdir()
    with tarfile.open(tmp_path / "src" / "s.tar", "w") as tar:
        member(tar, "a.png", png(colour=(200, 0, 0)))
        member(tar, "a.txt", CAPTION.encode())
        member(tar, "b.png", png(colour=(0, 200, 0)))
        member(tar, "b.txt", b"first caption of b")
        member(tar, "b.txt", b"second caption of b")        # webdataset refuses a repeated member
        member(tar, "c.png", png(colour=(0, 0, 200)))
        member(tar, "c.json", b'{"caption": 5}')              # a caption that is not text
        member(tar, "d.png", png((300, 300), (9, 90, 9)) + b"\x00" * 4000)
        member(tar, "d.txt", CAPTION.encode())
        member(tar, "a.png", png(colour=(90, 90, 0)))          # key `a` again, later in the shard
        member(tar, "a.txt", CAPTION.encode())
    counts, bad = run(tmp_path, image=ImageBounds(max_bytes=3000), audio=AudioBounds(max_bytes=3000))
    got = {k: (v["check"], v["reason"]) for k, v in bad.items()}
    assert got["src/s.tar:b"] == ("read", "duplicate_member")
    assert got["src/s.tar:d"] == ("read", "file_too_large")
    assert got["src/s.tar:a"] == ("read", "duplicate_id")
    assert bad["src/s.tar:a"]["detail"] == "id 'u/s/a' already read at src/s.tar:a"
    assert got["src/s.tar:c"] == ("caption", "caption_missing")
    assert counts == {**counts, "read": 5, "kept": 1}


def test_a_repeated_id_field_is_quarantined_not_overwritten(tmp_path):
    (tmp_path / "src").mkdir()
    (tmp_path / "src" / "a.png").write_bytes(png(colour=(1, 2, 250)))
    (tmp_path / "src" / "b.png").write_bytes(png((80, 64), (250, 2, 1)))
    (tmp_path / "src" / "rows.jsonl").write_text(
        json.dumps({"id": "x", "image": "a.png", "caption": CAPTION}) + "\n"
        + json.dumps({"id": "x", "image": "b.png", "caption": "A blue square drawn on a plain white background."})
        + "\n")
    counts, bad = run(tmp_path, source={"id_field": "id"})
    assert bad["src/rows.jsonl:2"]["reason"] == "duplicate_id" and counts["kept"] == 1


def test_an_undecodable_clip_has_the_same_detail_on_every_run(tmp_path):
    import soundfile as sf

    buf = io.BytesIO()
    sf.write(buf, np.zeros(16000, np.float32), 16000, format="WAV", subtype="PCM_16")
    data = bytearray(buf.getvalue())
    struct.pack_into("<I", data, 24, 0)   # a sample rate of 0 Hz
    (tmp_path / "src").mkdir()
    (tmp_path / "src" / "zero.wav").write_bytes(bytes(data))
    (tmp_path / "src" / "zero.txt").write_text("a transcript of a clip that has no sample rate")
    _, bad = run(tmp_path)
    row = bad["src/zero.wav"]
    assert row["reason"] == "media_undecodable" and " at 0x" not in row["detail"]
