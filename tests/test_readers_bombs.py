"""Small files that would keep ingest busy for hours (a hostile-input review): 97 KB of gzip holding 100 M newlines
took two minutes a line at a time (a 10 MB one, hours, with no progress line), and 29 KB holding ten million `{}`
lines a minute of quarantine rows. Blank runs are now skipped from the read buffer in bulk, line numbers exact,
and a file that gives `ingest.max_bad_run` quarantined records in a row is abandoned with one row saying so."""

from __future__ import annotations

import gzip
import io
import json
from pathlib import Path

import pyarrow.parquet as pq
import pytest

from specs import load_params
from specs.ingest import IngestSpec
from tasks import ingest
from tasks.core.runner import StagePaths
from tasks.data.formats import streams
from tasks.data.formats.streams import JSON_BLANK, iter_lines
from tests.helpers.readers import bads, docs, read

REPO = Path(__file__).resolve().parents[1]


class _Counting(io.BufferedReader):
    """A buffered reader that counts its readline calls (a line at a time or a buffer at a time)."""
    calls = 0

    def readline(self, *args):
        type(self).calls += 1
        return super().readline(*args)


def _stream(data: bytes) -> streams.Stream:
    guard = streams._Guard(io.BytesIO(data))  # noqa: SLF001 — the test builds the reader open_stream would
    return streams.Stream(_Counting(guard, streams.BUFFER), None, guard)


def test_a_run_of_blank_lines_is_skipped_in_bulk_with_exact_line_numbers():
    data = b'{"text": "a"}\n' + b"\n" * 3_000_000 + b" \t\r\n" * 1000 + b'{"text": "b"}\n  \n\n'
    _Counting.calls = 0
    lines = list(iter_lines(_stream(data), 1 << 20, blank=lambda: JSON_BLANK))
    assert [(line.number, line.data) for line in lines] == [(1, b'{"text": "a"}'), (3_001_002, b'{"text": "b"}')]
    assert _Counting.calls < 100  # a line at a time: three million calls
    # without `blank`, every line is still yielded (a CSV quoted field holds its blank lines)
    assert len(list(iter_lines(_stream(b"a\n\n\n b\n"), 100))) == 4


def test_blank_run_stops_at_the_indent_of_the_next_line():
    lines = list(iter_lines(_stream(b"\n\n   " + b" " * 5 + b'{"text": "x"}\n'), 100, blank=lambda: JSON_BLANK))
    assert [(line.number, line.data) for line in lines] == [(3, b'        {"text": "x"}')]


def test_compressed_blank_bomb_costs_no_records_and_keeps_locations(tmp_path):
    (tmp_path / "bomb.jsonl.gz").write_bytes(gzip.compress(b"\n" * 2_000_000 + b'{"text": "after"}\n' + b"\r\n" * 10))
    items = read(tmp_path, ["bomb.jsonl.gz"])
    assert [(d.location, d.text) for d in docs(items)] == [("line 2000001", "after")] and not bads(items)


def test_csv_blank_lines_between_rows_are_skipped_and_inside_a_quote_kept(tmp_path):
    (tmp_path / "t.csv").write_bytes(b'text,id\n\n\nhello,1\n' + b"\n" * 100_000 + b'"multi\n\n\nline",2\n\r\n'
                                     b'"bad"x,3\n\n\n1,2,3\n \n')
    items = read(tmp_path, ["t.csv"], fields={"id": "id"}, csv={"quotechar": '"'})
    assert [(d.location, d.text) for d in docs(items)] == [("line 4", "hello"), ("line 100005", "multi\n\n\nline")]
    assert bads(items) == [("line 100010", "bad_row"), ("line 100013", "bad_row"), ("line 100014", "bad_row")]


def _ingest(tmp_path, files: dict[str, bytes], **spec):
    for name, data in files.items():
        (tmp_path / name).write_bytes(data)
    source = {"name": "s", "kind": "files", "paths": sorted(files)}
    result = ingest.run(IngestSpec.model_validate({"sources": [source], **spec}), StagePaths(tmp_path, "ingest"))
    quarantine = pq.read_table(tmp_path / "data/ingest/quarantine.parquet").to_pylist()
    return result.counts["by_source"]["s"], quarantine


def _jsonl(*texts: str | None) -> bytes:
    return b"".join(b"{}\n" if t is None else json.dumps({"text": t}).encode() + b"\n" for t in texts)


def test_a_file_of_bad_records_is_abandoned_after_max_bad_run(tmp_path):
    files = {"a.jsonl": _jsonl("one", *[None] * 4, "two", *[None] * 7, "never read", *[None] * 3),
             "b.jsonl": _jsonl(None, "three")}
    counts, quarantine = _ingest(tmp_path, files, max_bad_run=5)
    # a run of 4 is read on; the run of 5 ends a.jsonl (its line 12), b.jsonl is read whole
    assert counts["kept"] == 3 and counts["read"] == counts["kept"] + counts["quarantined"]
    assert counts["by_reason"] == {"missing_text": 10, "abandoned_file": 1}
    stop = [q for q in quarantine if q["reason"] == "abandoned_file"]
    assert [(q["origin"], q["location"]) for q in stop] == [("a.jsonl", "line 11")]
    assert "5 records in a row were quarantined (missing_text 5)" in stop[0]["detail"]
    assert quarantine[-2]["reason"] == "abandoned_file"  # after the run's last row, before b.jsonl's


@pytest.mark.parametrize("limit", [None, 100_000])
def test_without_a_long_run_every_file_is_read_to_its_end(tmp_path, limit):
    counts, _ = _ingest(tmp_path, {"a.jsonl": _jsonl(*[None] * 20, "kept", "")}, max_bad_run=limit)
    assert counts["by_reason"] == {"missing_text": 20, "empty_text": 1} and counts["kept"] == 1


def test_shipped_params_abandon_a_zipped_empty_object_bomb(tmp_path):
    limit = load_params(REPO / "params.yaml").ingest.max_bad_run
    assert limit == 100_000
    counts, quarantine = _ingest(tmp_path, {"bomb.jsonl.gz": gzip.compress(b"{}\n" * 1_000_000),
                                            "good.jsonl": _jsonl("fine")}, max_bad_run=limit)
    # 100,000 rows of the bomb, its abandoned_file row, the good file's record: not a million rows
    assert counts["read"] == limit + 2 and counts["kept"] == 1 and len(quarantine) == limit + 1
