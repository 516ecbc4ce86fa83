"""Files concatenated with their header lines (`cat *.csv`, a TSV export per page): each header starts its own
table. The header-column passes read every row after a header to the table's end, and a later header line of the
same width read as one more row, so a text of n header/row pairs was read n²/2 rows deep (2,000 pairs of a TSV,
112 KB: 30.9 s to scrub; now 0.6 s); the aligned label rows' pass stopped at 200 rows, still 200 a header. Counted
here by the rows split, not timed."""

from __future__ import annotations

import pytest

from tasks.data.privacy import pii_columns, pii_labelrows
from tasks.data.privacy.pii import scrub_pii


def _pairs(n: int) -> str:
    return "".join(f"Name\tPhone\tDate of birth\nJohn Smith\t555-01{i % 100:02d}\t1980-01-{i % 28 + 1:02d}\n"
                   for i in range(n))


@pytest.mark.parametrize("module", [pii_columns, pii_labelrows])
def test_rows_after_repeated_headers_are_read_once(module, monkeypatch):
    calls = []
    split = module._fields
    monkeypatch.setattr(module, "_fields", lambda *a, **k: (calls.append(1), split(*a, **k))[1])
    scrub_pii(_pairs(400))
    small = len(calls)
    calls.clear()
    out, counts = scrub_pii(_pairs(800))
    assert counts == {"dob": 800, "phone": 800}
    assert len(calls) <= 2.2 * small                  # twice the pairs, twice the rows split (was four times)
    assert len(calls) <= 24 * 800                     # a few splits a pair (rows read to 200 deep: 200 a pair)


def test_a_second_header_names_its_own_columns():
    text = "name,dob\nA,1980-01-02\nname,passport\nB,1980-01-03\nC,X1234567\n"
    out, counts = scrub_pii(text)
    assert out == "name,dob\nA,<DOB>\nname,passport\nB,1980-01-03\nC,<PASSPORT>\n"
    assert counts == {"dob": 1, "passport": 1}


def test_control_one_table_reads_all_its_rows():
    rows = "".join(f"P{i},1980-01-{i % 28 + 1:02d},X{i:07d}\n" for i in range(300))
    out, counts = scrub_pii("name,dob,passport\n" + rows)
    assert counts == {"dob": 300, "passport": 300}
