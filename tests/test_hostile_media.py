"""Hostile media and rows, through the real readers and stages: inline media is parked on disk as each record
arrives (the stage held every blob to the end: 1.2 GB for a 4 MB gzip shard), WebDataset members nobody reads
are never held and captions are capped, a Parquet row group whose footer says it decompresses past the cap is
refused without decompressing it (a 19 KB file reached 1.86 GB), images in formats the stage does not accept are
`media_undecodable` (a 128-byte DDS named .png killed the stage), and lone surrogates — a JSON "\\ud800" escape
or a tar member name that is not UTF-8 — are one quarantine or drop row each, not a UnicodeEncodeError."""

from __future__ import annotations

import base64
import io
import json
import random
import struct
import tarfile
import tracemalloc
import zlib
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from specs.instruct import InstructJob, InstructSpec
from specs.multimodal import FilesMMSource, MultimodalSpec
from specs.prefer import FilesPreferenceSource, PreferDataJob, PreferDataSpec
from tasks.core.runner import StagePaths
from tasks.data.formats import parquet_rows as rows_module
from tasks.data.multimodal import readers, shards
from tasks.data.multimodal.curate import curate
from tasks.data.multimodal.decode import MediaError, decode_image
from tasks.data.multimodal.records import MediaRef, MMRecord
from tests.test_multimodal_hostile import CAPTION, member, png, run

DDS = b"DDS " + struct.pack("<7I", 124, 0x1007, 4, 4, 0, 0, 0) + b"\0" * 44 + struct.pack("<8I", 32, *[0] * 7) + \
    b"\0" * 20   # 128 bytes: Pillow's DDS plugin raised NotImplementedError
# Fuzzed files that made Pillow's plugins raise RuntimeError (AVIF), AttributeError (SPIDER), BLPFormatError
FUZZED = {
    "avif": "eNpjYGBQSCupLEgsy0xjAAIQnZuZZpibmZjm62joBBR6nZtaksgAAYoZKTlFUDZDQWZyCQMa4CvILMkFsxiBWC4zJz8ZxHEB8Rkh"
            "oozCQNoKiDUyM/PS4GqlgJxUJigvsczA0Dk/Jx9sV1ZmQVEBkPbOLEjOB9IimcUFqVD7NEC2ALFAQWZFJkiAmYODA0jxJJYZOjcy"
            "8ICEhJPzc4ryknMqgCbzMrA1AIXEMwtyYX4COoyFkamZBch0yk1JLBFi4OKUEFV/7cJiIiVgpC1yvL0tlYlDYV6oAwPD8UnrLWdG"
            "x1UyX9Tblvl0lp3e2QdVXY6zXrGJLUne6gYAVLpBHg==",
    "spider": "eNpjYGiwZ2D44AjBIADi4wIKTgwMDxwYCIIeF6BaZySBfbM4bf0A98kIgg==",
    "blp": "eNrF0rFxHDEMBdD1jOtQ7NjoQLEDVYGKnKAL524BPX2/o1mAZxR4V5Tu/i6BJ5LvPz6+/36e54vxzXgzfn59PnX9+uR8V/59lNHG"
           "GGskT8lLXvKSl7zkLW95y1ve8paPfOQjH/nIR77yla985Stf+bnlkUceeZLSvDQqRUuB8jJKyq/iKZ7iKR5fUzzFUzzFUzxeSfEU"
           "T/EUT/GYluIpnuIpnuJR6kjq3HKe4lE+zdM8zdM8zaNlmqcBWrNWuBXBSHvYPjRP8zSPj2me5mme5mkej9M8zdM8zdM8ppxV6aN5"
           "3XIeZTI8wzM8wzM8Smd4hmd4hmd4tMvwDM9AjIajOELGpPHC+DI8w+NPhmd4hmd4hsejs0NzVualed1ynuVZnuVZnuVRIsuzPMuz"
           "PMujbJZneZZneZZHqyzP8izPgqym2mcVWxPXSytYHj/ntOzZpT6SPbfr7+HNPZS5hy33EOUejtxNz93M3E3KXfzcRc1drNxFyP3n"
           "ctG5mNwmuZNzwzz/6foDVKInVw==",
}


# ------------------------------------------------------------------------------------------- image formats
@pytest.mark.parametrize("name, data", [("dds", DDS), *((k, zlib.decompress(base64.b64decode(v)))
                                                       for k, v in FUZZED.items())])
def test_an_image_in_a_format_the_stage_does_not_accept_is_undecodable(name, data):
    with pytest.raises(MediaError) as caught:
        decode_image(data)
    assert caught.value.reason == "media_undecodable", name


def test_a_dds_named_png_is_one_quarantine_row_naming_the_file(tmp_path):
    (tmp_path / "src").mkdir()
    (tmp_path / "src" / "fake.png").write_bytes(DDS)
    (tmp_path / "src" / "real.png").write_bytes(png())
    rows = [{"image": "fake.png", "caption": CAPTION}, {"image": "real.png", "caption": CAPTION}]
    (tmp_path / "src" / "rows.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    counts, bad = run(tmp_path)
    assert bad["src/rows.jsonl:1"]["reason"] == "media_undecodable" and bad["src/rows.jsonl:1"]["media"] == \
        "src/fake.png"
    assert counts["kept"] == 1


# --------------------------------------------------------------------------------------- memory of media
def noise_png(seed: int) -> bytes:
    from PIL import Image

    buf = io.BytesIO()
    Image.frombytes("RGB", (64, 48), random.Random(seed).randbytes(64 * 48 * 3)).save(buf, "PNG")
    return buf.getvalue()


def inline(n: int, size: int):
    """Records with `size` bytes of inline media each, made as they are read: even ones a PNG of noise followed
    by padding (Pillow stops at IEND: kept), odd ones garbage (quarantined)."""
    for i in range(n):
        data = noise_png(i) + bytes(size) if i % 2 == 0 else bytes([i]) * size
        yield MMRecord(id=f"u/{i}", source="u", text="A square of one colour on a white background.", lang="en",
                       media=MediaRef("image", data=data), origin=f"mem:{i}")


def test_inline_media_is_parked_on_disk_not_held_and_written_unchanged(tmp_path):
    """24 records of 2 MB inline media: all were held to the end of the stage (48 MB here; 1.2 GB for the
    probe's gzip shard); now each is parked on disk as it arrives, and the shards hold the bytes as read."""
    spec = MultimodalSpec(from_ingest=False, sources=[FilesMMSource(name="u", paths=["src"])])
    curate(inline(2, 16), spec, tmp_path)   # loads the language-id model (~140 MB traced) before measuring
    tracemalloc.start()
    try:
        result = curate(inline(24, 2 << 20), spec, tmp_path)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert peak < 12 << 20, peak
    assert all(o.rec.media.data is None and o.rec.media.spooled is not None for o in result.outcomes)
    kept = [o for o in result.outcomes if o.kept]
    assert len(kept) == 12
    shards.write_shards(kept, tmp_path / "out", tmp_path, 100)
    with tarfile.open(tmp_path / "out" / "shards" / "mm-000000.tar") as tar:
        written = {m.name: tar.extractfile(m).read() for m in tar if m.name.endswith(".png")}
    expected = {o.rec.id: data for o, data in zip(result.outcomes, (r.media.data for r in inline(24, 2 << 20)))}
    assert sorted(written.values()) == sorted(expected[o.rec.id] for o in kept)


def test_webdataset_members_nobody_reads_are_not_held_and_captions_are_capped(tmp_path, monkeypatch):
    """A second image, a `.npy` and a caption over the cap (SIDECAR_MAX_BYTES, lowered here) are never read
    into memory; the oversized caption refuses its sample by name, as an oversized media member does."""
    monkeypatch.setattr(readers, "SIDECAR_MAX_BYTES", 4096)
    (tmp_path / "src").mkdir()
    with tarfile.open(tmp_path / "src" / "s.tar", "w:gz") as tar:
        member(tar, "a.png", png())
        member(tar, "a.jpg", png(colour=(1, 2, 3)))
        member(tar, "a.npy", bytes(3 << 20))
        member(tar, "a.txt", CAPTION.encode())
        member(tar, "b.png", png(colour=(0, 200, 0)))
        member(tar, "b.txt", b"x" * 5000)
    extracted: list[str] = []
    real = tarfile.TarFile.extractfile
    monkeypatch.setattr(tarfile.TarFile, "extractfile", lambda self, m: extracted.append(m.name) or real(self, m))
    items = list(readers.read_source(FilesMMSource(name="u", paths=["src"]), tmp_path))
    assert sorted(extracted) == ["a.png", "a.txt", "b.png"]
    rec, bad = items
    assert rec.media.data == png() and rec.text == CAPTION
    assert (bad.reason, bad.origin) == ("file_too_large", "src/s.tar:b") and "b.txt: 5000 bytes > 4096" in bad.detail


# ---------------------------------------------------------------------------------------- Parquet footer
def test_a_parquet_row_group_over_the_cap_is_refused_from_its_footer(tmp_path, monkeypatch):
    """A row group of one 8 MiB string is a few KB of zstd: pyarrow decompressed the whole page before the row
    was measured (600 MB → 1.86 GB). Its footer says how big it is, so it is now refused unread, and the group
    of small rows beside it is read."""
    path = tmp_path / "d" / "pairs.parquet"
    path.parent.mkdir()
    small = pa.table({"prompt": [f"How do I bake bread {i}?" for i in range(3)], "chosen": ["Knead it."] * 3,
                      "rejected": ["No."] * 3})
    bomb = pa.table({"prompt": ["a" * (8 << 20)], "chosen": ["x"], "rejected": ["y"]})
    with pq.ParquetWriter(path, small.schema, compression="zstd") as writer:
        writer.write_table(small)
        writer.write_table(bomb)
    assert path.stat().st_size < 64 << 10
    read_groups: list = []

    class Spy(pq.ParquetFile):
        def iter_batches(self, *args, **kwargs):
            read_groups.append(kwargs.get("row_groups"))
            return super().iter_batches(*args, **kwargs)
    monkeypatch.setattr(rows_module.pq, "ParquetFile", Spy)
    rows = list(rows_module.parquet_rows(path, 1 << 20))
    assert read_groups == [[0]]
    assert [r.data["prompt"] for r in rows[:3]] == [f"How do I bake bread {i}?" for i in range(3)]
    assert (rows[3].number, rows[3].issue, rows[3].last, rows[3].group) == (4, "record_too_large", 4, 1)
    assert rows[3].size > 8 << 20
    from tasks.data.curation.preference import file_pairs
    unread = [p for p in file_pairs(FilesPreferenceSource(name="s", paths=["d"], max_line_bytes=1 << 20), tmp_path)
              if not hasattr(p, "chosen")]
    assert [u.id for u in unread] == ["s/d/pairs.parquet:row4"] and "not decompressed" in unread[0].reason


# -------------------------------------------------------------------------------------- lone surrogates
def lines(path: Path, rows: list[dict]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes("".join(json.dumps(r) + "\n" for r in rows).encode())   # "\ud800" written as an escape


def test_instruct_drops_an_id_no_utf8_can_hold(tmp_path):
    import tasks.instruct as instruct

    answer = "A list comprehension builds a list from an iterable in one expression."
    lines(tmp_path / "in" / "x.jsonl", [{"uid": "a", "prompt": "What is a list comprehension?", "response": answer},
                                        {"uid": "\ud800", "prompt": "What is a generator?", "response": answer}])
    src = {"name": "pairs", "kind": "files", "paths": ["in"], "fields": {"id": "uid"}}
    job = InstructJob(instruct=InstructSpec.model_validate({"sources": [src], "heldout_count": 0}),
                      eval_prompts=["zzz"])
    result = instruct.run(job, StagePaths(root=tmp_path, stage="instruct", seed=1))
    ledger = pq.read_table(tmp_path / "data" / "instruct" / "dropped.parquet").to_pylist()
    assert [(r["id"], r["filter"]) for r in ledger] == [("pairs/in/x.jsonl:2", "parse")]
    assert "id field 'uid' is not valid Unicode" in ledger[0]["reason"] and result.counts["train"] == 1


def test_prefer_data_drops_an_id_no_utf8_can_hold(tmp_path):
    import tasks.prefer_data as prefer_data

    (tmp_path / "data" / "review_sft").mkdir(parents=True)
    (tmp_path / "data" / "review_sft" / "decision.json").write_text(json.dumps(
        {"decision": "approve", "reviewer": "auto", "mode": "auto", "sample_sha256": "0" * 64, "items": []}))
    lines(tmp_path / "d" / "p.jsonl", [
        {"uid": "a", "prompt": "How do I bake bread at home?", "chosen": "Knead the dough well.", "rejected": "No."},
        {"uid": "\ud800", "prompt": "How do I bake a cake?", "chosen": "Whisk the eggs well.", "rejected": "No."}])
    source = FilesPreferenceSource(name="f", paths=["d"], fields={"id": "uid"})
    job = PreferDataJob(data=PreferDataSpec(sources=[source], heldout_fraction=0), eval_prompts=["zzz"])
    result = prefer_data.run(job, StagePaths(root=tmp_path, stage="prefer_data", seed=7))
    dropped = pq.read_table(tmp_path / "data" / "prefer_data" / "dropped.parquet").to_pylist()
    assert [(r["id"], r["filter"]) for r in dropped] == [("f/d/p.jsonl:2", "parse")]
    assert "id field 'uid' is not valid Unicode" in dropped[0]["reason"] and result.counts["train"] == 1


def test_multimodal_quarantines_surrogates_in_rows_and_tar_member_names(tmp_path):
    (tmp_path / "src").mkdir()
    data = base64.b64encode(png()).decode()
    lines(tmp_path / "src" / "rows.jsonl", [
        {"uid": "ok", "image": {"bytes": data}, "caption": CAPTION},
        {"uid": "\ud800", "image": {"bytes": data}, "caption": CAPTION},
        {"uid": "cap", "image": {"bytes": data}, "caption": CAPTION + " \udfff"},
        {"uid": "meta", "image": {"bytes": data}, "caption": CAPTION, "note": "\ud83d"}])
    with tarfile.open(tmp_path / "src" / "s.tar", "w", format=tarfile.GNU_FORMAT) as tar:
        for name, body in ((b"b\xffd.png", png(colour=(0, 9, 200))), (b"b\xffd.txt", CAPTION.encode())):
            member(tar, name.decode("utf-8", "surrogateescape"), body)
    counts, bad = run(tmp_path, source={"id_field": "uid"})
    got = {k: (v["reason"], v["detail"].split(" is ")[0]) for k, v in bad.items() if v["check"] == "read"}
    assert got == {"src/rows.jsonl:2": ("invalid_utf8", "id"), "src/rows.jsonl:3": ("invalid_utf8", "caption"),
                   "src/rows.jsonl:4": ("invalid_utf8", "meta"), "src/s.tar:b\\xffd": ("invalid_utf8", "id")}
    assert counts["kept"] == 1
