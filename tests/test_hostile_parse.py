"""Hostile lines under the byte cap that parsing amplifies: 60 MB of `[{},{},...]` built 20 M dicts (1.5 GB) in
json.loads, and a CSV line of 60 M commas a list of 60 M fields (630 MB). A line that parses to more than
MAX_JSON_VALUES values, or a row of more than MAX_ROW_FIELDS fields, is now refused unparsed as
`record_too_large`, counted by bytes operations first; the records around it are read. A long text full of
commas, braces and quotes is one value: it is counted again outside its strings and read as before (controls)."""

from __future__ import annotations

import csv
import io
import json
import os
import random
import subprocess
import sys
import time
from pathlib import Path

from specs.ingest import FilesSource
from tasks.data.formats import read_files
from tasks.data.formats.json_lines import json_lines
from tasks.data.records import Bad, Doc

REPO = Path(__file__).resolve().parents[1]
CAP = 64 << 20

PEAK = """
import json, resource, sys, time
from pathlib import Path
from specs.ingest import FilesSource
from tasks.data.formats import read_files
from tasks.data.formats.json_lines import json_lines
path = Path(sys.argv[1])
base, start = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss, time.monotonic()
if sys.argv[2] == "json_lines":
    seen = [line.issue for line in json_lines(path, 64 << 20, "max_line_bytes")]
else:
    src = FilesSource(name="s", paths=[path.name], fields={"text": "text"})
    seen = [getattr(item, "reason", "doc") for item in read_files(src, path.parent, 64 << 20)]
print(json.dumps({"grew_mib": (resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - base) >> 10,
                  "seconds": time.monotonic() - start, "seen": seen}))
"""


def peak_of_reading(path: Path, reader: str = "ingest") -> dict:
    """Peak RSS growth (MiB), time and outcomes of reading `path` in a fresh interpreter, after the imports."""
    done = subprocess.run([sys.executable, "-c", PEAK, str(path), reader], capture_output=True, text=True,
                          cwd=REPO, env={**os.environ, "PYTHONPATH": str(REPO)}, timeout=120, check=True)
    return json.loads(done.stdout.strip().splitlines()[-1])


def read(path: Path, **fields) -> list[Doc | Bad]:
    src = FilesSource(name="s", paths=[path.name], fields={"text": "text", **fields})
    return list(read_files(src, path.parent, CAP))


# ------------------------------------------------------------------------------------------------ JSON Lines
def test_a_line_of_empty_objects_is_refused_unparsed_in_bounded_memory(tmp_path):
    """21 MB of `[{},...]`: 7 M dicts grew the reader by ~540 MB before (and the line was then `wrong_type`); 42 MB now."""
    path = tmp_path / "bomb.jsonl"
    path.write_bytes(b'{"text": "before"}\n[' + b"{}," * 7_000_000 + b'{}]\n{"text": "after"}\n')
    seen = peak_of_reading(path)
    assert seen["seen"] == ["doc", "record_too_large", "doc"], seen
    assert seen["grew_mib"] < 100, seen


def test_instruct_and_prefer_lines_are_refused_the_same_way(tmp_path):
    """`json_lines` (instruct, prefer_data, multimodal) parsed the line whole before."""
    path = tmp_path / "bomb.jsonl"
    path.write_bytes(b'{"messages": [' + b"[]," * 7_000_000 + b"[]]}\n" + b'{"messages": []}\n')
    seen = peak_of_reading(path, "json_lines")
    assert seen["seen"] == ["record_too_large", None] and seen["grew_mib"] < 100, seen
    first = next(json_lines(path, CAP, "max_line_bytes"))
    assert "JSON values" in first.detail and len(first.data) <= 2000


def test_many_short_strings_are_counted_outside_them(tmp_path):
    """`[",",",",...]`: the commas inside the strings are text, the ones between them
    separate values: a list and 2,000,001 strings."""
    path = tmp_path / "strings.jsonl"
    path.write_bytes(b'[' + b'",",' * 2_000_000 + b'""]\n')
    [bad] = read(path)
    assert bad.reason == "record_too_large" and "2,000,002 JSON values" in bad.detail, bad


def test_control_a_long_text_full_of_commas_braces_and_escapes_is_read(tmp_path):
    """Control (passes before too): 1.5 M commas, braces, colons and escaped quotes inside one string put the
    byte count over the cap; counted outside the strings it is a record of 3 values, read as json reads it."""
    text = 'f(a, b): {"k": [1, 2]} \\ ' * 250_000
    line = json.dumps({"text": text, "id": "x"})
    path = tmp_path / "code.jsonl"
    path.write_text(line + "\n")
    [doc] = read(path, id="id")
    assert isinstance(doc, Doc) and doc.text == text
    [entry] = list(json_lines(path, CAP, "max_line_bytes"))
    assert entry.issue is None and entry.value == json.loads(line)


# ---------------------------------------------------------------------------------------------------- CSV/TSV
def test_a_row_of_commas_is_refused_unparsed_in_bounded_memory(tmp_path):
    """20 M commas: a list of 20 M fields grew the reader by ~240 MB before (then `bad_row`); 39 MB now."""
    path = tmp_path / "bomb.csv"
    path.write_bytes(b"text,id\nbefore,1\n" + b"," * 20_000_000 + b"\nafter,2\n")
    seen = peak_of_reading(path)
    assert seen["seen"] == ["doc", "record_too_large", "doc"], seen
    assert seen["grew_mib"] < 60, seen


def test_a_tsv_row_with_quoting_off_is_refused(tmp_path):
    path = tmp_path / "bomb.tsv"
    path.write_bytes(b"text\tid\n" + b"\t" * 2_000_000 + b"\nafter\t2\n")
    src = FilesSource(name="s", paths=[path.name], fields={"text": "text"}, csv={"quotechar": None})
    items = list(read_files(src, tmp_path, CAP))
    assert [getattr(i, "reason", "doc") for i in items] == ["record_too_large", "doc"]
    assert "more than 1,000,000 fields" in items[0].detail


def test_a_row_of_quoted_fields_is_refused_in_seconds(tmp_path):
    """`",",` 5 M times: each field is quoted, so only a count that follows the quotes sees 5 M fields; it stops
    past the cap instead of walking all of them: the 5 M row takes about as long as a row of 1.2 M (just over
    the 1 M cap), timed side by side, not against a clock a loaded machine can miss."""
    took = {}
    for fields in (1_200_000, 5_000_000):
        path = tmp_path / f"quoted{fields}.csv"
        path.write_bytes(b"text,id\n" + b'",",' * fields + b"\nafter,2\n")
        start = time.monotonic()
        items = read(path)
        took[fields] = time.monotonic() - start
        assert [getattr(i, "reason", "doc") for i in items] == ["record_too_large", "doc"]
    assert took[5_000_000] < 2 * took[1_200_000] + 0.5, took


def test_a_refused_row_that_goes_on_past_its_line_is_followed_to_its_end(tmp_path):
    """The refused line ends inside a quoted field: the row's next line is part of it, not a record."""
    path = tmp_path / "open.csv"
    path.write_bytes(b"text,id\n" + b"," * 1_500_000 + b'"open\nstill, inside"\nafter,2\n')
    items = read(path)
    assert [getattr(i, "reason", "doc") for i in items] == ["record_too_large", "doc"], items
    assert "lines 2-3" in items[0].detail and items[1].text == "after"


def test_control_a_quoted_text_full_of_commas_is_read(tmp_path):
    """Control (passes before too): 1.5 M commas and escaped quotes inside one quoted field, over several lines."""
    text = 'a, "b", c,\n' * 150_000
    buf = io.StringIO()
    csv.writer(buf, lineterminator="\n").writerows([["text", "id"], [text, "1"], ["next", "2"]])
    path = tmp_path / "long.csv"
    path.write_text(buf.getvalue())
    docs = read(path, id="id")
    assert [d.text for d in docs] == [text, "next"]


def test_field_count_agrees_with_csv_on_random_rows():
    """FieldCount (new) counts what csv's strict parser splits, for every row csv accepts."""
    from tasks.data.formats.delimited import FieldCount
    rng = random.Random(7)
    checked = 0
    for _ in range(4000):
        text = "".join(rng.choice('ab,"\n') for _ in range(rng.randint(1, 14)))
        try:
            row = next(csv.reader(io.StringIO(text + "\n"), strict=True))
        except (csv.Error, StopIteration):
            continue
        count = FieldCount(b",", b'"', 1000)
        for line in text.split("\n"):
            count.feed(line.encode())
            if not count.inside:
                break
        assert not row or count.fields == len(row), (text, row)
        checked += 1
    assert checked > 2000
