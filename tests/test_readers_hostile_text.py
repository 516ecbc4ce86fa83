"""Text in the encodings and line ends real tools write, and compressed streams that decode without end
(tasks/data/formats/streams.py `text_stream`, `_ZstdRaw`; text.py).

Before, a UTF-16 or UTF-32 file (Windows "Unicode" exports, PowerShell redirection) was quarantined line by line
as invalid UTF-8, or kept with a NUL between every two letters; a JSON Lines file with classic-Mac CR line ends was
one line; a byte-order mark on the first line of a file appended to another (`cat a.jsonl b.jsonl`) made that
line invalid JSON; and 8 KB of zstd decoded to 256 MiB in one call. Each case is checked against the text the
file was written from.
"""

from __future__ import annotations

import io
import json
import tracemalloc

import pytest
import zstandard

from tests.helpers.readers import bads, docs, read

TEXT = "Zwölf Boxkämpfer jagen Viktor quer über den großen Sylter Deich. 一二三\n"
ROWS = [{"text": f"line {i}: {TEXT.strip()}", "n": i} for i in range(40)]
JSONL = "".join(json.dumps(r, ensure_ascii=False) + "\n" for r in ROWS)


@pytest.mark.parametrize("encoding", ["utf-16", "utf-16-le", "utf-16-be", "utf-32", "utf-32-le", "utf-32-be"])
def test_utf16_and_utf32_text_is_decoded_with_or_without_a_mark(tmp_path, encoding):
    """With a mark (`utf-16`, `utf-32` write one) the mark decides; without one the NUL pattern of the text is
    unambiguous (see `sniff_encoding`)."""
    (tmp_path / "a.txt").write_bytes((TEXT * 3).encode(encoding))
    (tmp_path / "b.md").write_bytes(("# Title\n\n" + TEXT).encode(encoding))
    (tmp_path / "c.jsonl").write_bytes(JSONL.encode(encoding))
    (tmp_path / "d.csv").write_bytes(("id,text\n" + "".join(f"k{i},{r['text']}\n" for i, r in enumerate(ROWS)))
                                     .encode(encoding))
    assert [d.text for d in read(tmp_path, ["a.txt"])] == [TEXT * 3]
    assert [d.text for d in read(tmp_path, ["b.md"])] == ["# Title\n\n" + TEXT]
    assert [(d.text, d.meta) for d in read(tmp_path, ["c.jsonl"])] == [(r["text"], {"n": r["n"]}) for r in ROWS]
    assert [d.text for d in read(tmp_path, ["d.csv"], fields={"id": "id"})] == [r["text"] for r in ROWS]


def test_a_bad_utf16_unit_costs_its_line_and_says_so(tmp_path):
    body = '{"text": "ok"}\n{"text": "lone '.encode("utf-16-le") + b"\x00\xdc" + '"}\n{"text": "after"}\n'.encode(
        "utf-16-le")
    (tmp_path / "a.jsonl").write_bytes(b"\xff\xfe" + body)
    (tmp_path / "b.txt").write_bytes(b"\xff\xfe" + "some text".encode("utf-16-le") + b"\x00\xd8")  # a lone high half
    items = read(tmp_path, ["a.jsonl", "b.txt"])
    assert [d.text for d in docs(items)] == ["ok", "after"]
    assert bads(items) == [("line 2", "invalid_utf8"), ("byte 9", "invalid_utf8")]
    assert all(b.detail.startswith("not valid UTF-16LE") for b in items if b not in docs(items))


def test_what_is_not_utf16_is_left_alone():
    """UTF-8 holds no NUL; binary bytes and NUL-padded numbers do not decode to plain text in either order."""
    from tasks.data.formats.encodings import sniff_encoding

    assert sniff_encoding(TEXT.encode() * 20) == (None, 0)
    assert sniff_encoding(bytes(range(256)) * 20) == (None, 0)
    assert sniff_encoding(b"".join(bytes([i % 256, 0]) for i in range(2000))) == (None, 0)  # controls, C1
    assert sniff_encoding(bytes(4000)) == (None, 0)
    assert sniff_encoding(("中文文本。" * 200).encode("utf-16-le")) == (None, 0)  # no NUL: left to the lines
    assert sniff_encoding(b"\xff\xfe" + bytes(range(256)) * 10) == (None, 0)  # a mark, then binary bytes
    assert sniff_encoding(TEXT.encode("utf-16-le") * 20) == ("utf-16-le", 0)


def test_cr_line_ends_and_marks_at_line_starts_in_jsonl(tmp_path):
    (tmp_path / "mac.jsonl").write_bytes(JSONL.replace("\n", "\r").encode())
    bom = b"\xef\xbb\xbf"
    (tmp_path / "cat.jsonl").write_bytes(bom + b'{"text": "one"}\n' + bom + b'{"text": "two"}\n')
    (tmp_path / "raw_cr.jsonl").write_bytes(b'{"text": "a\rb"}\n{"text": "c"}\n')  # LF file: a raw CR is text
    assert [d.text for d in read(tmp_path, ["mac.jsonl"])] == [r["text"] for r in ROWS]
    assert [d.text for d in read(tmp_path, ["cat.jsonl"])] == ["one", "two"]
    assert [d.text for d in read(tmp_path, ["raw_cr.jsonl"])] == ["a\rb", "c"]
    # One line, no LF at all, raw CRs inside its string before `{`: still one line (a review found it split)
    text = "word \r{x} " * 20
    (tmp_path / "one.jsonl").write_bytes(('{"text": "' + text + '"}').encode())   # raw CRs, unescaped
    assert [d.text for d in read(tmp_path, ["one.jsonl"])] == [text]


def test_line_ends_that_turn_from_lf_to_cr_past_the_sniffed_head_keep_every_record(tmp_path):
    """Two files concatenated, LF for the first 64 KiB then classic-Mac CR: the CR part was one line, and its
    1,000 records one `invalid_json`. Each is now a record (its location `line N record k`); a CR part that
    does not parse as records stays one quarantined line."""
    lf = b"".join(b'{"text": "lf %d"}\n' % i for i in range(4000))
    cr = b"".join(b'{"text": "cr %d"}\r' % i for i in range(1000))
    (tmp_path / "m.jsonl").write_bytes(lf + cr + b'{"text": "after"}\n')
    (tmp_path / "bad.jsonl").write_bytes(lf + b'{"text": "x"}\r{"text": \n')
    items = read(tmp_path, ["m.jsonl"])
    assert [d.text for d in items] == [f"lf {i}" for i in range(4000)] + [f"cr {i}" for i in range(1000)] + ["after"]
    assert {d.location for d in items[4000:4002]} == {"line 4001 record 1", "line 4001 record 2"}
    assert bads(read(tmp_path, ["bad.jsonl"])) == [("line 4001", "invalid_json")]


def test_a_zstd_bomb_is_decoded_in_bounded_pieces(tmp_path):
    """256 MiB of zeros in 8 KB of zstd: the decompressobj returned all of it from one call (515 MiB traced peak,
    55 s); input now goes in 256-byte pieces, each at most 8 MiB of output."""
    out = io.BytesIO()
    with zstandard.ZstdCompressor(level=19).stream_writer(out, closefd=False) as writer:
        for _ in range(16):
            writer.write(bytes(16 << 20))
    assert len(out.getvalue()) < 64 << 10
    (tmp_path / "bomb.jsonl.zst").write_bytes(out.getvalue())
    tracemalloc.start()
    try:
        items = read(tmp_path, ["bomb.jsonl.zst"], cap=1 << 20)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert bads(items) == [("line 1", "record_too_large")] and f"{256 << 20:,} bytes" in items[0].detail
    assert peak < 48 << 20, peak


def test_a_zstd_frame_made_with_a_dictionary_says_so(tmp_path):
    samples = [f"sample record {i} about rivers and mills".encode() for i in range(500)]
    table = zstandard.train_dictionary(512, samples)
    (tmp_path / "d.jsonl.zst").write_bytes(zstandard.ZstdCompressor(dict_data=table).compress(JSONL.encode()))
    items = read(tmp_path, ["d.jsonl.zst"])
    assert bads(items) == [("line 1", "truncated")]
    assert f"needs zstd dictionary {table.dict_id()}" in items[0].detail


def test_a_file_growing_while_it_is_read_ends_at_its_size_when_opened(tmp_path, monkeypatch):
    """A writer appending to a file as fast as ingest read it kept the file going forever (5.7 GB in 45 s): a
    plain file is read up to the size it had when opened."""
    import contextlib

    import tasks.data.formats as formats
    (tmp_path / "g.jsonl").write_text(JSONL, encoding="utf-8")
    real = formats.open_stream

    @contextlib.contextmanager
    def growing(p):
        with real(p) as stream:
            with open(p, "ab") as f:      # the writer: more rows after the file was opened
                f.write(b'{"text": "written later"}\n' * 100)
            yield stream
    monkeypatch.setattr(formats, "open_stream", growing)
    items = read(tmp_path, ["g.jsonl"])
    assert [d.text for d in docs(items)] == [r["text"] for r in ROWS] and bads(items) == []


def test_a_nul_inside_utf16_text_with_a_mark_costs_no_line(tmp_path):
    """A UTF-16 export with a mark and one U+0000 in a record (a C string's terminator pasted into a field) was
    not decoded at all (its mark's text held a NUL): every line went to quarantine as invalid UTF-8. The mark
    decides, the NUL is one odd character among the rest; binary bytes after a mark are still left alone."""
    rows = [dict(r, text=r["text"] + ("\x00" if r["n"] == 7 else "")) for r in ROWS]
    (tmp_path / "a.jsonl").write_bytes("".join(json.dumps(r, ensure_ascii=False) + "\n" for r in rows)
                                       .replace("\\u0000", "\x00").encode("utf-16"))
    items = read(tmp_path, ["a.jsonl"])
    assert not bads(items) and [d.meta["n"] for d in docs(items)] == list(range(40))
    assert docs(items)[3].text == rows[3]["text"]
