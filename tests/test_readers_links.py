"""Symbolic links in a files source: read inside the source's folder, refused (never opened) outside it.

A downloaded corpus is untrusted: a link `notes.txt -> /proc/self/environ` (or `~/.ssh/id_rsa`) in it would put
the environment or a key into the training data. The default `symlinks: inside` quarantines such links as
`link_outside`; a Hugging Face hub cache, whose files are links into the repo's `blobs/`, still reads — the
cache layout here is checked with `huggingface_hub`'s own cache scanner, so it is the real one.
"""

from __future__ import annotations

import glob
import json
import os
import signal
from pathlib import Path

import pytest

import tasks.data.formats as formats
from tasks.core.globs import glob_once
from tests.helpers.readers import bads, docs, read

SECRET = "AKIA-not-for-training-0451"


@pytest.fixture
def opened(monkeypatch) -> list[Path]:
    """Every path the readers open."""
    seen: list[Path] = []
    real = formats.open_stream

    def spy(path):
        seen.append(Path(path))
        return real(path)

    monkeypatch.setattr(formats, "open_stream", spy)
    return seen


def corpus(tmp_path: Path) -> Path:
    """`corpus/` with one real page, a link to a page inside it, and links that leave it."""
    outside = tmp_path / "home"
    outside.mkdir()
    (outside / "id_rsa").write_text(f"-----BEGIN KEY----- {SECRET}\n")
    (outside / "more").mkdir()
    (outside / "more" / "page.txt").write_text(f"behind a linked folder {SECRET}\n")
    src = tmp_path / "corpus"
    (src / "sub").mkdir(parents=True)
    (src / "sub" / "page.txt").write_text("a page of the corpus\n")
    os.symlink("sub/page.txt", src / "alias.txt")            # inside: the same page, read once
    os.symlink(outside / "id_rsa", src / "key.txt")           # outside: refused
    os.symlink("../home/more", src / "linked")                # a folder link (followed by a glob's **)
    if Path("/proc/self/environ").exists():
        os.symlink("/proc/self/environ", src / "environ.txt")
    return src


def test_links_out_of_the_folder_are_quarantined_unopened(tmp_path, opened):
    src = corpus(tmp_path)
    items = read(tmp_path, ["corpus"])
    assert [d.text for d in docs(items)] == ["a page of the corpus\n"]  # alias and page: one file, read once
    refused = sorted(i.origin for i in items if not isinstance(i, formats.Doc))
    want = ["corpus/environ.txt", "corpus/key.txt"] if (src / "environ.txt").is_symlink() else ["corpus/key.txt"]
    assert refused == want
    assert {r for _, r in bads(items)} == {"link_outside"}
    assert all(p.resolve() == (src / "sub" / "page.txt").resolve() for p in opened)
    environ = "\n".join(f"{k}={v}" for k, v in os.environ.items())
    assert all(SECRET not in d.text and environ[:40] not in d.text for d in docs(items))


def test_a_glob_through_a_linked_folder_is_held_to_the_folder_it_names(tmp_path, opened):
    corpus(tmp_path)
    items = read(tmp_path, ["corpus/**/*.txt"])
    assert [d.text for d in docs(items)] == ["a page of the corpus\n"]
    assert "corpus/linked/page.txt" in [i.origin for i in items if not isinstance(i, formats.Doc)]
    assert not any("home" in str(p.resolve()) for p in opened)


def test_follow_reads_every_link(tmp_path):
    corpus(tmp_path)
    items = read(tmp_path, ["corpus/**/*.txt"], symlinks="follow")
    assert bads(items) == []
    texts = sorted(d.text for d in docs(items))
    assert f"-----BEGIN KEY----- {SECRET}\n" in texts and f"behind a linked folder {SECRET}\n" in texts


def test_a_file_named_directly_is_read_even_as_a_link(tmp_path):
    corpus(tmp_path)
    items = read(tmp_path, ["corpus/key.txt"])
    assert [(d.origin, d.text) for d in docs(items)] == [("corpus/key.txt", f"-----BEGIN KEY----- {SECRET}\n")]


def hub_cache(tmp_path: Path) -> tuple[Path, Path]:
    """A hub cache as `huggingface_hub` lays it out: snapshot files are relative links to `blobs/<sha256>`."""
    repo = tmp_path / "hub" / "datasets--org--corpus"
    rev = "0123456789abcdef0123456789abcdef01234567"
    snapshot = repo / "snapshots" / rev
    (snapshot / "data").mkdir(parents=True)
    (repo / "blobs").mkdir()
    (repo / "refs").mkdir()
    (repo / "refs" / "main").write_text(rev)
    files = {"data/train.jsonl": "".join(json.dumps({"text": f"row {i}"}) + "\n" for i in range(3)),
             "README.md": "---\nconfigs:\n- config_name: default\n---\n# card, not a record\n"}
    for i, (name, body) in enumerate(sorted(files.items())):
        blob = f"{i:064x}"
        (repo / "blobs" / blob).write_text(body)
        depth = name.count("/") + 2
        os.symlink("../" * depth + f"blobs/{blob}", snapshot / name)
    return tmp_path / "hub", snapshot


def test_a_hugging_face_hub_cache_snapshot_reads_through_its_blob_links(tmp_path):
    hub, snapshot = hub_cache(tmp_path)
    huggingface_hub = pytest.importorskip("huggingface_hub")
    scanned = huggingface_hub.scan_cache_dir(hub)
    assert not scanned.warnings
    assert {f.file_name for r in scanned.repos for rev in r.revisions for f in rev.files} == {"train.jsonl",
                                                                                            "README.md"}
    for pattern in (str(snapshot), str(snapshot / "data"), str(snapshot / "**" / "*.jsonl")):
        items = read(tmp_path, [pattern])
        assert bads(items) == []  # before: the jsonl was read as `blobs/<sha>`, a file with no format
        assert [(d.origin, d.text) for d in docs(items)] == [
            (str((snapshot / "data" / "train.jsonl").relative_to(tmp_path)), f"row {i}") for i in range(3)]


def test_a_glob_through_looping_folder_links_lists_each_file_once(tmp_path):
    # Two links back to the folder and one to its parent: glob's `**` followed them without noticing the cycle,
    # 2^40 paths down to the kernel's link limit (it never finished). Now each real folder is walked once.
    src = corpus(tmp_path)
    for name, target in (("a", "."), ("b", "."), ("up", "..")):
        os.symlink(target, src / "sub" / name)
    signal.signal(signal.SIGALRM, lambda *_: pytest.fail("listing a glob through looping links did not finish"))
    signal.alarm(20)
    try:
        items = read(tmp_path, ["corpus/**/*.txt"])
    finally:
        signal.alarm(0)
    assert [d.text for d in docs(items)] == ["a page of the corpus\n"]
    # what lies outside (the linked folder, the key) is refused once each, as without the loops
    refused = [i.origin for i in items if not isinstance(i, formats.Doc)]
    assert len(refused) == len(set(refused)) and "corpus/linked/page.txt" in refused
    assert items == read(tmp_path, ["corpus/**/*.txt"])  # and the same on a rerun


def test_glob_once_lists_what_glob_lists_without_loops(tmp_path):
    (tmp_path / "c" / "sub" / ".hidden").mkdir(parents=True)
    (tmp_path / "c" / "[x]").mkdir()
    for name in ("top.jsonl", "sub/a.jsonl", "sub/.h.jsonl", "sub/.hidden/z.jsonl", "[x]/q.jsonl", "sub/b.txt"):
        (tmp_path / "c" / name).write_text("{}\n")
    os.symlink("sub", tmp_path / "c" / "alias")  # a link to a folder, no cycle: glob follows it
    for pattern in ("c/**/*.jsonl", "c/**", "c/**/sub/**/*.jsonl", "c/*/**/*.jsonl", "c/**/[[]x]/*", "c/*.jsonl"):
        full = str(tmp_path / pattern)
        # the same files (by their real path: `alias/a.jsonl` and `sub/a.jsonl` are one, read once either way)
        want = {Path(p).resolve() for p in glob.glob(full, recursive=True) if os.path.isfile(p)}
        assert {p.resolve() for p in glob_once(full) if p.is_file()} == want, pattern


def test_a_fifo_a_link_to_one_and_a_named_one_are_quarantined_unopened(tmp_path, opened):
    """A FIFO among a source's files was skipped without a record (and one named directly was "matched no
    files"); opening one would wait for a writer forever. Each is quarantined as `not_a_file`, never opened."""
    src = tmp_path / "corpus"
    src.mkdir()
    (src / "a.jsonl").write_text('{"text": "a page"}\n')
    os.mkfifo(src / "pipe.jsonl")
    os.symlink("pipe.jsonl", src / "to_pipe.jsonl")
    items = read(tmp_path, ["corpus"]) + read(tmp_path, ["corpus/pipe.jsonl"]) + read(tmp_path, ["corpus/to_pipe*"])
    assert [d.text for d in docs(items)] == ["a page"]
    refused = [(i.origin, i.reason) for i in items if not isinstance(i, formats.Doc)]
    # (the folder's FIFO and its link are one file, listed once, as for any file and a link to it)
    assert refused == [("corpus/pipe.jsonl", "not_a_file")] * 2 + [("corpus/to_pipe.jsonl", "not_a_file")]
    assert "FIFO" in next(i for i in items if not isinstance(i, formats.Doc)).detail
    assert [p.name for p in opened] == ["a.jsonl"]
