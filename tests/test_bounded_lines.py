"""The jsonl readers of instruct, prefer_data and multimodal hold one line, never a file, and drop a line over
their source's `max_line_bytes` as one row with its reason (`record_too_large`), as ingest does."""

from __future__ import annotations

import json
import tracemalloc
from pathlib import Path

import pyarrow.parquet as pq
import pytest

from specs.instruct import FilesInstructSource, InstructJob, InstructSpec
from specs.multimodal import FilesMMSource
from specs.prefer import FilesPreferenceSource, PreferDataJob, PreferDataSpec
from tasks.core.runner import StagePaths
from tasks.data.curation import instructions, preference
from tasks.data.multimodal import readers

DOC = 5 << 20          # one document: 5 MiB
DOCS = 24              # 120 MiB of lines in one file
ANSWER = "The answer explains the topic in a few clear words, and that is the whole of it."


def chat(prompt: str) -> dict:
    return {"messages": [{"role": "user", "content": prompt}, {"role": "assistant", "content": ANSWER}]}


def pair(prompt: str) -> dict:
    return {"prompt": prompt, "chosen": "A kind answer here.", "rejected": "A rude one."}


def caption(text: str) -> dict:
    return {"image": "missing.png", "caption": text}


def write_lines(path: Path, rows: list) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("w", encoding="utf-8") as fh:
        for r in rows:
            fh.write((r if isinstance(r, str) else json.dumps(r)) + "\n")


READERS = {
    "instruct": (chat, lambda root, cap: instructions.read_source(
        FilesInstructSource(name="s", paths=["d"], max_line_bytes=cap), root)),
    "prefer_data": (pair, lambda root, cap: preference.file_pairs(
        FilesPreferenceSource(name="s", paths=["d"], max_line_bytes=cap), root)),
    "multimodal": (caption, lambda root, cap: readers.read_source(
        FilesMMSource(name="s", paths=["d"], max_line_bytes=cap), root)),
}


@pytest.mark.parametrize("stage", sorted(READERS))
def test_a_file_of_huge_documents_is_read_a_line_at_a_time(tmp_path, stage):
    """24 documents of 5 MiB in one 120 MiB file: the readers held the whole file (and its split lines) before,
    a traced peak over the file's size; now a few times one document."""
    make, read = READERS[stage]
    write_lines(tmp_path / "d" / "big.jsonl", [make(f"{i} " + "w" * DOC) for i in range(DOCS)])
    assert (tmp_path / "d" / "big.jsonl").stat().st_size > DOCS * DOC
    tracemalloc.start()
    try:
        count = sum(1 for _ in read(tmp_path, 64 << 20))   # each item dropped at once, as the stages stream
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert count == DOCS
    print(f"{stage}: {DOCS} x {DOC:,}-byte lines, reader peak {peak:,} bytes ({peak / DOC:.1f} documents)")
    assert peak < 8 * DOC, peak   # the line, its decodings and the parsed text; the file is 24 documents


@pytest.mark.parametrize("stage", sorted(READERS))
def test_a_line_over_the_cap_is_one_row_with_its_reason_and_is_never_held(tmp_path, stage):
    make, read = READERS[stage]
    big = json.dumps(make("x" * (16 << 20)))
    write_lines(tmp_path / "d" / "a.jsonl", [make("What is the capital of France today?"), big,
                                              make("How do rivers carve their valleys?")])
    tracemalloc.start()
    try:
        items = list(read(tmp_path, 1 << 20))
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert len(items) == 3 and peak < 4 << 20, peak
    bad = items[1]
    text = " ".join(str(getattr(bad, k, "")) for k in ("reason", "detail"))
    assert "record_too_large" in text and f"line of {len(big) + 1:,} bytes" in text and "max_line_bytes" in text
    assert "a.jsonl:2" in (getattr(bad, "id", "") or getattr(bad, "origin", ""))


def test_instruct_ledgers_the_long_line_and_keeps_the_rest(tmp_path):
    import tasks.instruct as instruct

    write_lines(tmp_path / "inputs" / "chat.jsonl", [chat("What is the capital of France today?"),
                                                      chat("y" * 5000), chat("How do rivers carve their valleys?")])
    spec = InstructSpec.model_validate({"sources": [{"name": "chats", "kind": "files", "paths": ["inputs"],
                                                     "max_line_bytes": 4096}],
                                        "heldout_count": 0, "max_train_pairs": None})
    result = instruct.run(InstructJob(instruct=spec, eval_prompts=["zzz"]),
                          StagePaths(root=tmp_path, stage="instruct", seed=7))
    ledger = pq.read_table(tmp_path / "data" / "instruct" / "dropped.parquet").to_pylist()
    assert [(r["id"], r["filter"]) for r in ledger] == [("chats/inputs/chat.jsonl:2", "parse")]
    assert "record_too_large" in ledger[0]["reason"] and "4,096-byte cap" in ledger[0]["reason"]
    assert result.counts["train"] == 2


def test_prefer_data_ledgers_the_long_line_and_keeps_the_rest(tmp_path):
    import tasks.prefer_data as prefer_data
    from tests.helpers.prefer import approve

    approve(tmp_path)
    write_lines(tmp_path / "d" / "pairs.jsonl", [pair("How do I bake bread at home?"), pair("z" * 5000),
                                                  pair("How do rivers carve their valleys?")])
    job = PreferDataJob(data=PreferDataSpec(sources=[FilesPreferenceSource(name="f", paths=["d"],
                                                                           max_line_bytes=4096)],
                                            heldout_fraction=0), eval_prompts=["zzz"])
    result = prefer_data.run(job, StagePaths(root=tmp_path, stage="prefer_data", seed=7))
    dropped = pq.read_table(tmp_path / "data" / "prefer_data" / "dropped.parquet").to_pylist()
    assert [(r["id"], r["filter"]) for r in dropped] == [("f/d/pairs.jsonl:2", "parse")]
    assert "record_too_large" in dropped[0]["reason"] and "4,096-byte cap" in dropped[0]["reason"]
    assert result.counts["train"] == 2


def chat_pair(prompt: str, answer: str = "A kind answer here.") -> dict:
    """A pair in TRL's conversational shape: Parquet stores its turns as lists of structs."""
    return {"prompt": [{"role": "user", "content": prompt}], "chosen": [{"role": "assistant", "content": answer}],
            "rejected": [{"role": "assistant", "content": "A rude one."}]}


def read_parquet_pairs(root: Path, rows: list[dict], cap: int) -> tuple[list, int]:
    import pyarrow as pa

    (root / "d").mkdir(parents=True, exist_ok=True)
    pq.write_table(pa.Table.from_pylist(rows), root / "d" / "pairs.parquet", compression="zstd")
    tracemalloc.start()
    try:
        items = [(type(i).__name__, i.id, getattr(i, "reason", ""))   # each pair dropped at once, as streamed
                 for i in preference.file_pairs(FilesPreferenceSource(name="s", paths=["d"], max_line_bytes=cap), root)]
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    return items, peak


def test_prefer_data_streams_a_parquet_file_of_huge_pairs(tmp_path):
    """24 pairs of 5 MiB in one Parquet file: prefer_data read it whole (`pq.read_table(...).to_pylist()`), a
    traced peak over the file's 120 MiB of text; now it is read a batch (or a row) at a time."""
    items, peak = read_parquet_pairs(tmp_path, [chat_pair(f"{i} " + "w" * DOC) for i in range(DOCS)], 64 << 20)
    assert len(items) == DOCS and {kind for kind, _, _ in items} == {"Pair"}
    assert peak < 8 * DOC, peak


def test_prefer_data_parquet_row_over_the_cap_is_one_parse_row_never_held(tmp_path):
    """One 16 MiB answer among 40 small pairs: measured by its own strings (nested in the chosen turns, not
    averaged over the batch), it is one Unread `record_too_large`; the other pairs are read."""
    rows = [chat_pair(f"Question number {i} about rivers?") for i in range(40)]
    rows[7] = chat_pair("Question seven?", "x" * (16 << 20))
    items, peak = read_parquet_pairs(tmp_path, rows, 1 << 20)
    unread = [(key, reason) for kind, key, reason in items if kind == "Unread"]
    assert len(items) == 40 and [key for key, _ in unread] == ["s/d/pairs.parquet:row8"]
    assert "record_too_large" in unread[0][1] and "1,048,576-byte cap" in unread[0][1]
    assert peak < 4 << 20, peak


def test_multimodal_parquet_row_over_the_cap_is_one_row_never_held(tmp_path):
    """Multimodal's Parquet rows go through prefer_data's bounded reader: one 16 MiB caption among 40 rows was
    decoded with its batch before (no cap); now it is one `record_too_large` row, measured unread."""
    import pyarrow as pa

    rows = [caption(f"A small caption number {i}.") for i in range(40)]
    rows[7] = caption("x" * (16 << 20))
    (tmp_path / "d").mkdir()
    pq.write_table(pa.Table.from_pylist(rows), tmp_path / "d" / "rows.parquet", compression="zstd")
    tracemalloc.start()
    try:
        items = [(type(i).__name__, getattr(i, "origin", ""), getattr(i, "reason", ""), getattr(i, "detail", ""))
                 for i in readers.read_source(FilesMMSource(name="s", paths=["d"], max_line_bytes=1 << 20), tmp_path)]
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    bad = [i for i in items if i[0] == "MMBad"]
    assert len(items) == 40 and [(o, r) for _, o, r, _ in bad] == [("d/rows.parquet:8", "record_too_large")]
    assert "1,048,576-byte cap" in bad[0][3] and "max_line_bytes" in bad[0][3]
    assert [o for _, o, _, _ in items if o != "d/rows.parquet:8"] == [f"d/rows.parquet:{n}" for n in range(1, 41)
                                                                      if n != 8]
    assert peak < 4 << 20, peak


@pytest.mark.parametrize("stage", sorted(READERS))
def test_one_shared_reader_reads_a_bom_and_refuses_a_huge_integer_as_one_line(tmp_path, stage):
    """The three readers parse through `json_lines`. A UTF-8 byte-order mark (Windows tools, or a second file
    concatenated) was invalid JSON to instruct and prefer_data; a 5,000-digit integer (valid JSON that json.loads
    refuses with a plain ValueError) stopped instruct and prefer_data and cost multimodal the rest of the file."""
    make, read = READERS[stage]
    first, second = json.dumps(make("What is the capital of France today?")), json.dumps(make("Why is sky blue?"))
    (tmp_path / "d").mkdir()
    (tmp_path / "d" / "a.jsonl").write_bytes(b"\xef\xbb\xbf" + first.encode() + b'\n{"n": ' + b"7" * 5000 +
                                             b"}\n\xef\xbb\xbf" + second.encode() + b"\n")
    items = list(read(tmp_path, 64 << 20))
    where = [getattr(i, "origin", None) or i.id for i in items]
    assert [w.rsplit(":", 1)[-1] for w in where] == ["1", "2", "3"], where
    good = [i for n, i in enumerate(items) if n != 1]
    assert not any(type(i).__name__ in ("Rejected", "Unread", "MMBad") for i in good), good
    bad = " ".join(str(getattr(items[1], k, "")) for k in ("reason", "detail"))
    assert "invalid JSON" in bad or "invalid_json" in bad, bad
