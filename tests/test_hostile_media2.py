"""Hostile media paths that made the OS, not the file, say no: a media link to itself (or a folder that links to
itself), a media path naming a folder, and a path with a name over 255 bytes (ENAMETOOLONG). Each is that one
record's quarantine row; the stage goes on and the rows after it in the same file are read — a name too long
turned the whole file into one `unreadable_file` row (4 lines, 2 records), and the loop and the folder stopped
the stage."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from specs import Params
from tasks.core.runner import run_stage
from tasks.data.multimodal.decode import MediaError, read_media
from tasks.data.multimodal.records import MediaRef, MMRecord
from tasks.data.records import read_all_records
from tests.test_multimodal_hostile import CAPTION, png, run

LONG_NAME = "x" * 300 + ".png"          # one component over NAME_MAX (255 bytes)
LONG_FOLDER = "d" * 300 + "/a.png"      # the over-long component is a folder's


def rows(src: Path, media: list[str]) -> None:
    """`src/rows.jsonl`, one row per media path, each with its own caption (line n names media[n - 1])."""
    (src / "rows.jsonl").write_text("".join(json.dumps({"image": m, "caption": f"{CAPTION} Row {n}."}) + "\n"
                                            for n, m in enumerate(media, 1)))


def source(tmp_path: Path) -> Path:
    src = tmp_path / "src"
    src.mkdir()
    (src / "ok.png").write_bytes(png())
    return src


def by_line(bad: dict[str, dict]) -> dict[int, tuple[str, str]]:
    return {int(k.rsplit(":", 1)[1]): (v["check"], v["reason"]) for k, v in bad.items() if "rows.jsonl:" in k}


# ------------------------------------------------------------------------------------------- F1: symlink loops
def test_a_media_link_to_itself_is_unreadable_not_a_crash(tmp_path):
    src = source(tmp_path)
    os.symlink("loop.png", src / "loop.png")
    os.symlink("ring", src / "ring")            # a folder link to itself: `ring/a.png` loops in its parent
    rows(src, ["loop.png", "ring/a.png", "ok.png"])
    counts, bad = run(tmp_path)
    assert by_line(bad) == {1: ("read", "media_unreadable"), 2: ("read", "media_unreadable")}
    assert "loop" in bad["src/rows.jsonl:1"]["detail"].lower()
    assert counts["kept"] == 1


# ------------------------------------------------------------------------------------------- F2: a folder as media
def test_a_media_path_naming_a_folder_is_unreadable_never_opened(tmp_path):
    src = source(tmp_path)
    (src / "img").mkdir()
    rows(src, ["img/", "img", "ok.png"])
    counts, bad = run(tmp_path)
    assert by_line(bad) == {1: ("decode", "media_unreadable"), 2: ("decode", "media_unreadable")}
    assert "not a regular file" in bad["src/rows.jsonl:1"]["detail"]
    assert counts["kept"] == 1


def test_reading_a_folder_as_media_refuses_it_and_leaves_no_descriptor_open(tmp_path):
    (tmp_path / "img").mkdir()
    rec = MMRecord(id="u/1", source="u", text=CAPTION, lang="en", media=MediaRef("image", path="img"), origin="x")
    before = len(os.listdir("/proc/self/fd"))
    for _ in range(20):
        with pytest.raises(MediaError) as caught:
            read_media(rec, tmp_path, 1 << 20)
        assert caught.value.reason == "media_unreadable"
    assert len(os.listdir("/proc/self/fd")) <= before


# ------------------------------------------------------------------------------------------- F3: ENAMETOOLONG
def test_a_media_name_too_long_quarantines_its_record_and_the_rest_of_the_file_is_read(tmp_path):
    src = source(tmp_path)
    rows(src, ["ok.png", LONG_NAME, LONG_FOLDER, "ok.png"])
    counts, bad = run(tmp_path)
    assert counts["read"] == 4      # every line is a record: none lost behind the long name
    reasons = by_line(bad)
    assert reasons[2] == ("read", "media_unreadable") and reasons[3] == ("read", "media_unreadable")
    assert "too long" in bad["src/rows.jsonl:2"]["detail"]
    assert 1 not in reasons and reasons.get(4, ("",))[0] != "read"   # line 4 was read (dedup may drop a copy)
    assert not any(v["reason"] == "unreadable_file" for v in bad.values())


def test_an_audio_clip_whose_transcript_name_would_be_too_long_does_not_stop_the_stage(tmp_path):
    src = source(tmp_path)
    (src / ("a" * 251 + ".wav")).write_bytes(b"RIFF")   # 255 bytes: its `.json` sidecar's name would be 256
    rows(src, ["ok.png"])
    counts, _ = run(tmp_path)
    assert counts["kept"] == 1


def test_ingest_quarantines_one_record_whose_media_name_is_too_long_and_reads_the_rest(tmp_path):
    folder = tmp_path / "in"
    folder.mkdir()
    (folder / "cat.png").write_bytes(png())
    os.symlink("ring", folder / "ring")
    text = "A plain sentence about a cat that sits on a mat in the sun."
    media = ["cat.png", LONG_NAME, LONG_FOLDER, "ring/a.png", "cat.png"]
    (folder / "docs.jsonl").write_text("".join(json.dumps({"id": f"d{n}", "text": text, "media": [m]}) + "\n"
                                               for n, m in enumerate(media, 1)))
    params = Params.model_validate({"ingest": {"sources": [
        {"name": "user", "kind": "files", "paths": ["in/docs.jsonl"], "fields": {"id": "id", "media": "media"}}]}})
    result = run_stage("ingest", params, tmp_path)
    assert result.counts["read"] == 5 and result.counts["kept"] == 2
    assert sorted(read_all_records(tmp_path / "data" / "ingest").column("id").to_pylist()) == ["user/d1", "user/d5"]
    # each of the three is its own record's `bad_media` (not `unreadable_file` for the file and the rest unread)
    assert result.counts["by_source"]["user"]["by_reason"] == {"bad_media": 3}
