"""Hostile compressed inputs and tar shards: decompression bombs stay in bounded memory, frames and members
concatenated are all read, damage after a complete zstd frame keeps that frame's records, and a tar shard's
`../` names and link members reach no file. Streams are written with the codecs' own compressors."""

from __future__ import annotations

import io
import json
import tarfile
import tracemalloc
import zlib
from pathlib import Path

import pytest
import zstandard

from specs.ingest import FilesSource
from tasks.data.formats import read_files
from tasks.data.records import Bad

CAP = 1 << 20  # ingest's max_record_bytes for these reads


def bomb(compressobj, total: int, line: bytes) -> bytes:
    """`total` bytes of `line` repeated, compressed a 16 MiB piece at a time (never held decompressed)."""
    piece = line * ((16 << 20) // len(line))
    return b"".join(compressobj.compress(piece) for _ in range(total // len(piece))) + compressobj.flush()


def read_traced(folder: Path, name: str) -> tuple[list, int]:
    tracemalloc.start()
    try:
        items = list(read_files(FilesSource(name="m", paths=[name]), folder, CAP))
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    return items, peak


@pytest.mark.parametrize("name, compressobj, size", [
    ("bomb.jsonl.zst", lambda: zstandard.ZstdCompressor(level=1).compressobj(), 256 << 20),
    ("bomb.txt.gz", lambda: zlib.compressobj(1, zlib.DEFLATED, 31), 128 << 20),  # gzip decodes ~4x slower
])
def test_a_decompression_bomb_without_newlines_is_one_bad_record_in_bounded_memory(tmp_path, name, compressobj,
                                                                                     size):
    # one byte repeated, ~1000:1 (gzip) to ~30000:1 (zstd): a single "line" far over the record cap. A 2 GiB
    # bomb through the same readers: 4-7 s, +23-83 MB RSS (this 2-core box, measured by hand)
    (tmp_path / name).write_bytes(bomb(compressobj(), size, b"\0"))
    items, peak = read_traced(tmp_path, name)
    assert [(type(i), i.reason) for i in items] == [(Bad, "record_too_large")]
    assert peak < size // 8, peak  # streamed past, never held


def records(n: int) -> list[bytes]:
    return [json.dumps({"text": f"document number {i}"}).encode() + b"\n" for i in range(n)]


def test_garbage_after_a_complete_zstd_frame_keeps_the_frame_and_reports_the_damage(tmp_path):
    first, second = records(2)
    packed = zstandard.ZstdCompressor().compress(first) + zstandard.ZstdCompressor().compress(second)
    (tmp_path / "g.jsonl.zst").write_bytes(packed + b"not a zstd frame")  # before: 0 documents, 1 truncated
    items = list(read_files(FilesSource(name="m", paths=["g.jsonl.zst"]), tmp_path, CAP))
    assert [i.text for i in items if not isinstance(i, Bad)] == ["document number 0", "document number 1"]
    assert [i.reason for i in items if isinstance(i, Bad)] == ["truncated"]


def test_a_frame_with_a_2_gib_window_is_read(tmp_path):
    params = zstandard.ZstdCompressionParameters(window_log=31, enable_ldm=True)  # `zstd --long=31`
    (tmp_path / "w.jsonl.zst").write_bytes(zstandard.ZstdCompressor(compression_params=params).compress(
        b"".join(records(3))))
    items, _ = read_traced(tmp_path, "w.jsonl.zst")
    assert [i.text for i in items] == [f"document number {i}" for i in range(3)]


def test_tar_members_named_out_of_the_shard_or_linked_out_are_never_written_or_followed(tmp_path):
    from tasks.data.multimodal.readers import Scope, read_webdataset
    from specs.multimodal import FilesMMSource

    shard = tmp_path / "src" / "s.tar"
    shard.parent.mkdir()
    with tarfile.open(shard, "w") as tar:
        for name, data in (("../../escape.txt", b"a caption"), ("/abs/escape.json", b'{"caption": "c"}')):
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
        link = tarfile.TarInfo("x.png")
        link.type, link.linkname = tarfile.SYMTYPE, "/etc/passwd"
        tar.addfile(link)
    before = sorted(p for p in tmp_path.rglob("*"))
    scope = Scope(root=tmp_path, folders=(shard.parent,), max_bytes=1 << 20)
    out = list(read_webdataset(shard, "src/s.tar", FilesMMSource(name="u", paths=["src"]), scope))
    assert sorted(p for p in tmp_path.rglob("*")) == before and not Path("/abs").exists()
    # read into memory only; the link member is skipped unread, so `x` is no sample at all
    assert [(o.origin, o.reason) for o in out] == [("src/s.tar:../../escape", "missing_media"),
                                                   ("src/s.tar:/abs/escape", "missing_media")]
