"""Folders written by the Hugging Face `datasets` library itself, read by ingest's file readers.

The reference for every expected value is `datasets` reading its own files back (`load_from_disk`, or the
`parquet` / `json` builders on the hub layout), so the test checks compatibility with the real writer, not
with a layout written by hand.
"""

from __future__ import annotations

import pyarrow as pa
import pyarrow.ipc as ipc
import pytest

from tests.helpers.readers import bads, docs, read

datasets = pytest.importorskip("datasets")

ROWS = {
    "text": ["one", "Zwei – zwei", "三 three", "", "five\nlines\n"],
    "k": [1, 2, None, 4, 5],
    "tags": [["a"], [], ["b", "c"], None, ["d"]],
    "info": [{"lang": "en"}, {"lang": "de"}, {"lang": "zh"}, {"lang": None}, {"lang": "en"}],
}


def expected_rows(ds) -> list[tuple[str, dict]]:
    """(text, every other column) per row, as `datasets` itself yields them."""
    return [(row["text"], {k: v for k, v in row.items() if k != "text"}) for row in ds]


def test_save_to_disk_dataset_reads_as_the_library_reads_it(tmp_path):
    datasets.Dataset.from_dict(ROWS).save_to_disk(str(tmp_path / "ds"))
    items = read(tmp_path, ["ds"])
    want = expected_rows(datasets.load_from_disk(str(tmp_path / "ds")))
    assert bads(items) == []  # state.json / dataset_info.json are metadata, not quarantined records
    assert [(d.text, d.meta) for d in items] == want
    assert want[2][1] == {"k": None, "tags": ["b", "c"], "info": {"lang": "zh"}}  # nulls and nesting kept


def test_save_to_disk_dataset_dict_with_sharded_splits(tmp_path):
    train = datasets.Dataset.from_dict({"text": [f"train {i}" for i in range(7)], "n": list(range(7))})
    test = datasets.Dataset.from_dict({"text": ["test 0", "test 1"], "n": [0, 1]})
    datasets.DatasetDict({"train": train, "test": test}).save_to_disk(
        str(tmp_path / "dd"), num_shards={"train": 3, "test": 1})
    assert len(list((tmp_path / "dd" / "train").glob("*.arrow"))) == 3
    loaded = datasets.load_from_disk(str(tmp_path / "dd"))
    items = read(tmp_path, ["dd"])
    # Files are read in sorted path order: the test split's one shard, then train's three in shard order.
    assert bads(items) == []
    assert [(d.text, d.meta) for d in items] == expected_rows(loaded["test"]) + expected_rows(loaded["train"])
    assert len({d.key for d in items}) == 9  # every record has its own key across shards and splits


def test_hub_layout_written_by_datasets(tmp_path):
    ds = datasets.Dataset.from_dict(ROWS)
    data = tmp_path / "hub" / "data"
    ds.select(range(3)).to_parquet(str(data / "train-00000-of-00002.parquet"))
    ds.select(range(3, 5)).to_parquet(str(data / "train-00001-of-00002.parquet"))
    ds.to_json(str(data / "validation.jsonl"))  # JSON lines, the library's default for to_json
    (tmp_path / "hub" / "README.md").write_text("---\nconfigs:\n- config_name: default\n  data_files: data/*\n"
                                                 "---\n# A dataset card, not a record\n")
    items = read(tmp_path, ["hub"])
    parquet = datasets.load_dataset("parquet", data_files=sorted(map(str, data.glob("*.parquet"))), split="train")
    jsonl = datasets.load_dataset("json", data_files=str(data / "validation.jsonl"), split="train")
    assert bads(items) == []
    assert [(d.text, d.meta) for d in items] == expected_rows(parquet) + expected_rows(jsonl)


def test_truncated_save_to_disk_shard_keeps_the_batches_before_the_cut(tmp_path):
    big = {"text": [f"document {i} " + "word " * (i % 17) for i in range(3000)]}
    datasets.Dataset.from_dict(big).save_to_disk(str(tmp_path / "ds"), num_shards=1)
    shard = next((tmp_path / "ds").glob("*.arrow"))
    whole = shard.read_bytes()
    shard.write_bytes(whole[: len(whole) * 2 // 3])
    # Independently: the rows pyarrow's own stream reader gets out of the cut file before it fails.
    readable = 0
    with pa.OSFile(str(shard)) as fh:
        reader = ipc.open_stream(fh)
        try:
            for batch in reader:
                readable += batch.num_rows
        except (pa.ArrowInvalid, OSError):
            pass
    assert 0 < readable < 3000
    items = read(tmp_path, ["ds"])
    assert [d.text for d in docs(items)] == big["text"][:readable]
    assert bads(items) == [(f"row {readable + 1}", "truncated")]
