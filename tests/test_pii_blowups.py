"""Inputs on which a scrubber regex backtracked without end. A blind probe found them:
- `pii_credentials._WORDS_AND_NUMBER` (`(?:[A-Z]?[a-z]+)+\\d*`, read from `_yaml_led`): exponential in a YAML
  password's run of lower case letters (`pwd: #aaaa…!`, 24 letters 1.4 s, ×4-5 for each 2 more);
- `pii_values.IDENTIFIER` (`(?:[A-Z]+[a-z_]*)*`, in `identifier_only` and `_TEMPLATE`): exponential in a run of
  capitals (`password: $AAAA…!`);
- `pii_plainwords._RULE_LINE`, `pii_sql._VALUE`, `pii_pairs._TABLE_ROW`: quadratic in a run of blanks under a
  Markdown header, inside an INSERT's bare value, after a TSV row's name (40,000 blanks: 16-37 s).
Each call here runs in a forked child with a deadline (the `re` module holds the GIL, so a thread's timeout would
wait for the match anyway): the old code needed hours or more for these sizes, the fixed one well under a second.
The small versions' outputs, and the real values in the same shapes, are the old code's."""

from __future__ import annotations

import pytest

from tasks.data.privacy.pii import scrub_pii
from tasks.data.privacy.pii_values import identifier_only, is_placeholder
from tests.helpers.deadline import run_within


def _yaml(lead: str, k: int) -> str:
    return lead + "a" * k + ("%" if lead.endswith("*") else "!")


_YAML_LEADS = ["pwd: #", "db_password: #", "password: !", "x_password: *", "- password: #"]
_BLANK_RUNS = {
    "table_no_header": lambda n: "|pw||\n" + " " * n + "x",
    "table_header": lambda n: "| user | password |\n" + " " * n + "x",
    "sql_bare_value": lambda n: "INSERT INTO t(a) VALUES(a" + " " * n + "b",
    "tsv_row": lambda n: "password" + "\t" * n + "x",
}


@pytest.mark.parametrize("lead", _YAML_LEADS)
def test_yaml_led_letter_run_finishes(lead):
    run_within(scrub_pii, _yaml(lead, 60))


@pytest.mark.parametrize("shape", sorted(_BLANK_RUNS))
def test_blank_run_finishes(shape):
    run_within(scrub_pii, _BLANK_RUNS[shape](200_000))


def test_capital_run_finishes():
    run_within(identifier_only, "A" * 60 + "!")
    run_within(is_placeholder, "$" + "A" * 60 + "!")
    run_within(scrub_pii, "password: $" + "A" * 60 + "!")


@pytest.mark.parametrize("text, expected", [
    ("pwd: #" + "a" * 12 + "!", ("pwd: #" + "a" * 12 + "!", {})),
    ("db_password: #" + "a" * 12 + "!", ("db_password: #" + "a" * 12 + "!", {})),
    ("password: !" + "a" * 12 + "!", ("password: !" + "a" * 12 + "!", {})),
    ("x_password: *" + "a" * 12 + "%", ("x_password: <SECRET>", {"secret": 1})),
    ("- password: #" + "a" * 12 + "!", ("- password: #" + "a" * 12 + "!", {})),
    ("|pw||\n" + " " * 20 + "x", ("|pw||\n" + " " * 20 + "x", {})),
    ("| user | password |\n" + " " * 20 + "x", ("| user | password |\n" + " " * 20 + "x", {})),
    ("INSERT INTO t(a) VALUES(a" + " " * 20 + "b", ("INSERT INTO t(a) VALUES(a" + " " * 20 + "b", {})),
    ("password" + "\t" * 20 + "x", ("password" + "\t" * 20 + "x", {})),
    ("password: $" + "A" * 12 + "!", ("password: <SECRET>", {"secret": 1})),
])
def test_small_versions_scrub_as_before(text, expected):
    assert scrub_pii(text) == expected


@pytest.mark.parametrize("text, expected", [
    ("db:\n  user: app\n  db_password: #Qw9zx1Lm\n", "db:\n  user: app\n  db_password: <SECRET>\n"),
    ("DOCKER_PASSWORD: !PBpfot2A89Q2\n", "DOCKER_PASSWORD: <SECRET>\n"),
    ("password: $Ab1xQ9!\n", "password: <SECRET>\n"),
    ("| user | password |\n|------|----------|\n| alice | Tr0ub4dor&3 |\n| bob | hunter2x! |\n",
     "| user | password |\n|------|----------|\n| alice | <SECRET> |\n| bob | <SECRET> |\n"),
    ("INSERT INTO users(id, email) VALUES(1, 'jane.doe@example.com'), (2,   'bob@example.org'  );\n",
     "INSERT INTO users(id, email) VALUES(1, '<EMAIL>'), (2,   '<EMAIL>'  );\n"),
    ("INSERT INTO users(id, name, phone) VALUES(1,  John Smith , 5550142367  ), (2, 'Ann Lee',   5550199876);\n",
     "INSERT INTO users(id, name, phone) VALUES(1,  John Smith , <PHONE>  ), (2, 'Ann Lee',   <PHONE>);\n"),
    ("INSERT INTO people(id, full_name, dob) VALUES(1, 'Maria Garcia',   '1984-03-12'   );\n",
     "INSERT INTO people(id, full_name, dob) VALUES(1, 'Maria Garcia',   '<DOB>'   );\n"),
    ("INSERT INTO users(id, name, password) VALUES(1,  'bob' , 'Tr0ub4dor3'  );\n",
     "INSERT INTO users(id, name, password) VALUES(1,  'bob' , '<SECRET>'  );\n"),
    ("name\tvalue\npassword\t\t\tS3cr3t!Pass\n", "name\tvalue\npassword\t\t\t<SECRET>\n"),
    ("db_password\tQw9$z1Lm77\n", "db_password\t<SECRET>\n"),
])
def test_real_values_still_scrubbed(text, expected):
    assert scrub_pii(text)[0] == expected


@pytest.mark.parametrize("value, code", [("A" * 12 + "!", False), ("api_key2", True), ("AAAAbbbCC_x9", True),
                                         ("getHTTPResponse", True), ("a1b", False)])
def test_identifiers_read_as_before(value, code):
    assert identifier_only(value) is code
    assert is_placeholder("$" + value) is code


# `pii_pairs.TableCells` searched back to its line's start once per credential word followed by a separator:
# quadratic in a long line of them (`password|key|token|…`, 4.9 MB: 63 s in the old code, under a second now)
_CELL_LINES = {"pipe": "password|key|token|", "tab": "password\tkey\ttoken\t", "comma": "password,key,token,"}


@pytest.mark.parametrize("shape", sorted(_CELL_LINES))
def test_long_line_of_cell_words_finishes(shape):
    from tasks.data.privacy.pii_pairs import TABLE_CELLS
    run_within(TABLE_CELLS.sub, lambda m: "<SECRET>", _CELL_LINES[shape] * 256_000)


@pytest.mark.parametrize("shape", sorted(_CELL_LINES))
def test_small_line_of_cell_words_scrubs_as_before(shape):
    text = _CELL_LINES[shape] * 20
    assert scrub_pii(text) == (text, {})


@pytest.mark.parametrize("text, expected", [
    ("pwd|" * 30 + "\n| api_key | Qw9zx1Lm77 |\n", ("pwd|" * 30 + "\n| api_key | <SECRET> |\n", {"secret": 1})),
    ("notes\n" + "password key token " * 10 + "\npassword\tS3cr3t!Pass\n" + "token|key|" * 10
     + "\ndb_password,Qw9$z1Lm77\n",
     ("notes\n" + "password key token " * 10 + "\npassword\t<SECRET>\n" + "token|key|" * 10
      + "\ndb_password,<SECRET>\n", {"secret": 2})),
    ("| password | Tr0ub4dor&3 | key | token |\n| api_key | hunter2x!9 |\n",
     ("| password | <SECRET> | key | token |\n| api_key | <SECRET> |\n", {"secret": 2})),
])
def test_rows_after_long_lines_scrubbed_as_before(text, expected):
    assert scrub_pii(text) == expected
