"""Corpus-wide repeated-line removal (`clean.lines`, `tasks/data/dedup/linededup.py`) through the clean stage:
two sites' pages, each an encyclopedia article's lead in its site's chrome, one article also copied under the
other site's chrome. Near dedup misses the copy (the chromes differ); line removal takes the chrome out of all
pages but each site's best-ranked one, and the copy, left with nothing of its own, is dropped. A play's
speaker lines (repeated inside it) and code sources stay; the result does not depend on the executor, the
bucket count or the table boundaries; off, the outputs are the stage's as before."""

from __future__ import annotations

import itertools
import json

import pyarrow.parquet as pq
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
import yaml

from specs import Params
from specs.clean import LineDedupSpec
from tasks.core.runner import run_stage
from tasks.data.dedup import linededup
from tasks.data.embedded import read_embedded
from tasks.data.records import RECORD_SCHEMA, Doc, read_all_records, write_table

CHROME = {
    "ledger": ["The Daily Ledger | Home | News | History | Opinion | Log in | Subscribe",
               "Share this article: Facebook | X | LinkedIn | Email | Copy link",
               "© 2024 The Daily Ledger. All rights reserved. About us | Contact | Privacy Policy"],
    "gazette": ["Gazette Online — Front page · World · Science · Culture · Sign in",
                "We use cookies to improve your experience. By continuing you accept our cookie policy.",
                "Gazette Online is published by Gazette Media Group. Advertise with us · Careers · Help"],
}
PLAY = ("HAMLET.\nTo be, or not to be, that is the question: whether tis nobler in the mind to suffer.\n"
        "OPHELIA.\nGood my lord, how does your honour for this many a day?\nHAMLET.\nI humbly thank you; well.\n"
        "OPHELIA.\nMy lord, I have remembrances of yours that I have longed long to redeliver.\n")
OWN = ("{who}.\nThis is the {n} version's own speech, which no other document holds, long enough that what is left "
       "of it after the shared speeches go is still a text of its own.\n{who}.\nAnd a second speech of the {n} "
       "version, with more words in it, so that the play keeps well over fifty words of its own.\n")
CODE = "import os\nimport sys\n\n\ndef main():\n    return os.getcwd()\n"


def leads(count: int) -> list[str]:
    """The first 60 words of `count` embedded encyclopedia articles, as two lines of 30: a short page's body,
    shorter than its chrome (~40 words)."""
    docs = [d for d in itertools.islice(read_embedded("encyclopedia"), count * 2) if isinstance(d, Doc)]
    out = []
    for d in docs:
        words = " ".join(p for p in d.text.split("\n") if len(p.split()) > 12).split()
        if len(words) >= 60:
            out.append(" ".join(words[:30]) + "\n" + " ".join(words[30:60]))
    return out[:count]


HEADING = "See also"                           # a short line every page has, standing alone among its own lines
LINKS = ["About us", "Contact", "Careers"]      # short lines, in a block


def page(site: str, body: str) -> str:
    nav, share, footer = CHROME[site]
    first, second = body.split("\n")
    return "\n".join([nav, first, HEADING, second, share, footer, *LINKS])


def corpus() -> tuple[list[dict], dict[str, str]]:
    """(records, id -> body) : 5 ledger pages, 4 gazette pages, the first ledger article copied to the gazette,
    two plays sharing speaker names, two code files sharing their imports."""
    bodies = leads(9)
    rows, body_of = [], {}

    def add(key: str, source: str, text: str, body: str = "") -> None:
        rows.append({"id": key, "text": text, "source": source, "lang": "en", "origin": key, "meta": "{}",
                     "media": []})
        body_of[key] = body

    for k, body in enumerate(bodies):
        site = "ledger" if k < 5 else "gazette"
        add(f"{site}-{k}", "web", page(site, body), body)
    add("zz-copy", "web", page("gazette", bodies[0]), bodies[0])
    add("play-a", "web", PLAY + OWN.format(who="HAMLET", n="first") + "Exeunt.")
    add("play-b", "web", PLAY.replace("question", "matter") + OWN.format(who="OPHELIA", n="second") + "Exit.")
    add("code-a", "code", CODE)
    add("code-b", "code", CODE + "\n\ndef other():\n    return sys.argv\n")
    return rows, body_of


def params(**lines) -> dict:
    return {"run": {"seed": 5, "executor": {"workers": 1}},
            "ingest": {"sources": [{"name": "web", "kind": "embedded", "corpus": "encyclopedia"},
                                   {"name": "code", "kind": "embedded", "corpus": "code", "lang": "python"}]},
            "clean": {"filters": [], "pii": {"enabled": False}, "quality": {"enabled": False,
                                                                          "profiles": {"code": "code"}},
                      "lines": lines}}


def cleaned(root, lines: dict, shard_size: int = 4, workers: int = 1, memory_gb: float | None = None,
            executor: dict | None = None):
    rows, body_of = corpus()
    shards = root / "data/ingest/shards"
    shards.mkdir(parents=True)
    for n, start in enumerate(range(0, len(rows), shard_size)):
        write_table(rows[start:start + shard_size], RECORD_SCHEMA, shards / f"mixed-{n:05d}.parquet")
    p = params(**lines)
    p["run"]["executor"] = executor or {"workers": workers}
    if memory_gb:
        p["clean"]["memory_gb"] = memory_gb
    (root / "params.yaml").write_text(yaml.safe_dump(p))
    run_stage("clean", Params.model_validate(p), root)
    out = root / "data/clean"
    kept = {r["id"]: r["text"] for r in read_all_records(out).to_pylist()}
    ledger = {r["id"]: r for r in pq.read_table(out / "dropped.parquet").to_pylist()}
    return kept, ledger, json.loads((out / "report.json").read_text()), body_of


@pytest.fixture(scope="module")
def default_on(tmp_path_factory):
    return cleaned(tmp_path_factory.mktemp("lines"), {"enabled": True})


def test_near_dedup_alone_misses_the_copy_and_keeps_the_chrome(tmp_path):
    kept, ledger, report, _ = cleaned(tmp_path, {})
    assert "zz-copy" in kept and not ledger            # the chromes differ: J < 0.8
    assert sum(CHROME["ledger"][0] in t for t in kept.values()) == 5
    assert report["lines"] == {"enabled": False}


def test_chrome_stays_once_per_site_and_the_copy_is_dropped(default_on):
    kept, ledger, report, body_of = default_on
    for site, lines in CHROME.items():
        for line in lines:
            holders = sorted(k for k, t in kept.items() if line in t)
            assert holders == [f"{site}-{0 if site == 'ledger' else 5}"], (line, holders)
    assert [k for k, t in kept.items() if "\nCareers" in t] == ["gazette-5"]       # a block of short lines goes
    assert sum(f"\n{HEADING}\n" in t for t in kept.values()) == 9                   # a lone heading stays
    assert ledger["zz-copy"]["reason"] == linededup.REASON
    assert ledger["zz-copy"]["text"] == page("gazette", body_of["zz-copy"])   # the ledger keeps it whole
    for key, text in kept.items():                           # every article's own text is whole
        if key.startswith(("ledger", "gazette")):
            assert all(line in text for line in body_of[key].split("\n")), key
    lines = report["lines"]
    assert lines["documents_dropped"] == 1 and lines["documents_changed"] == 9     # 8 pages and play-b
    # the chromes' 6, the short links' 3, the heading, the copied body's 2, the plays' 3 shared speeches
    assert lines["repeated_lines"] == 6 + 3 + 1 + 2 + 3
    assert report["dropped_by_reason"] == {linededup.REASON: 1}
    assert {t["line"]: t["documents"] for t in lines["top"]}[CHROME["gazette"][0]] == 5


def test_a_plays_repeated_speaker_lines_and_code_stay(default_on):
    kept, _, _, _ = default_on
    assert kept["play-a"].count("HAMLET.") == 4 and kept["play-b"].count("OPHELIA.") == 4
    assert "Good my lord" in kept["play-a"] and "Good my lord" not in kept["play-b"]    # a shared speech goes
    assert "the matter" in kept["play-b"]
    assert kept["code-a"] == CODE.rstrip() and kept["code-b"].startswith(CODE)


def test_boilerplate_mode_removes_chrome_everywhere_and_keeps_a_text_two_documents_share(tmp_path):
    kept, ledger, report, body_of = cleaned(tmp_path, {"enabled": True, "keep_first": False, "min_docs": 3})
    assert not any(line in t for lines in CHROME.values() for line in lines for t in kept.values())
    for line in body_of["ledger-0"].split("\n"):
        assert line in kept["ledger-0"] and line in kept["zz-copy"]
    assert not ledger and report["lines"]["documents_changed"] == 10


def test_short_words_zero_removes_a_lone_heading_too(tmp_path):
    kept, _, _, _ = cleaned(tmp_path, {"enabled": True, "short_words": 0})
    assert [k for k, t in kept.items() if f"\n{HEADING}\n" in t] == ["gazette-5"]


@pytest.mark.parametrize("shard_size,workers,memory_gb", [(3, 2, None), (100, 1, 1e-6)])
def test_tables_executors_and_buckets_do_not_change_the_outputs(default_on, tmp_path, shard_size, workers,
                                                                 memory_gb):
    kept, ledger, report, _ = cleaned(tmp_path, {"enabled": True}, shard_size, workers, memory_gb)
    ref_kept, ref_ledger, ref_report, _ = default_on
    assert kept == ref_kept and ledger.keys() == ref_ledger.keys() and report["lines"] == ref_report["lines"]


@pytest.mark.slow
def test_dask_workers_give_the_same_outputs(default_on, tmp_path):
    kept, ledger, report, _ = cleaned(tmp_path, {"enabled": True}, 3, executor={"kind": "dask", "workers": 2})
    assert (kept, ledger.keys(), report) == (default_on[0], default_on[1].keys(), default_on[2])


def test_a_line_is_keyed_by_its_words_not_its_spacing_or_case():
    text = "Home | News\nBody text here\nhome  |  NEWS \n"
    assert len(linededup.distinct_line_hashes(text)) == 1                   # the menu repeats inside: structure
    new, removed = linededup.strip_lines("A\n\nHome | News\n\n\n\nB", {linededup.key_hash("home | news")})
    assert (new, removed) == ("A\n\n\nB", ["Home | News"])
    assert linededup.strip_lines("A\nB", {1}) == ("A\nB", [])


def test_spec_bounds():
    with pytest.raises(ValueError):
        LineDedupSpec(min_docs=1)
    assert not LineDedupSpec().enabled


def test_a_document_left_short_or_mostly_removed_is_dropped():
    menu = "Home | News | World | Science | Culture | Opinion | Sport | Travel | Log in | Subscribe"
    own = " ".join(f"word{k}" for k in range(60))
    gone = {linededup.key_hash(linededup.line_key(menu))}
    short = linededup.rewrite([0], [f"{menu}\nPublished 3 March 2021 by the desk"], {0: gone}, LineDedupSpec())
    assert short.dropped == [0] and "7 words left" in short.details[0]
    long_menu = "\n".join(f"{menu} {k}" for k in range(20))
    hashes = {linededup.key_hash(linededup.line_key(ln)) for ln in long_menu.split("\n")}
    mostly = linededup.rewrite([3], [f"{long_menu}\n{own}"], {3: hashes}, LineDedupSpec(max_removed=0.8))  # 60 words
    assert mostly.dropped == [3] and "(82% of its characters)" in mostly.details[0]
    kept = linededup.rewrite([3], [f"{long_menu}\n{own}"], {3: hashes}, LineDedupSpec(max_removed=1))
    assert kept.rows == [3] and kept.texts == [own] and kept.tally["lines_removed"] == 20


def test_a_short_line_goes_only_beside_another_that_goes():
    gone = {linededup.key_hash(k) for k in ("notes", "home", "news")}
    text = "Own line one.\n\nNotes\n\nOwn line two.\nHome\n\nNews\nOwn line three."
    assert linededup.strip_lines(text, gone, 3) == ("Own line one.\n\nNotes\n\nOwn line two.\n\nOwn line three.",
                                                    ["Home", "News"])
    assert linededup.strip_lines(text, gone, 0)[1] == ["Notes", "Home", "News"]


@given(st.lists(st.sampled_from(["Home", "News", "a b c d", "Own text one", "", "  ", "Own text two here",
                                 "x"]), max_size=12), st.sets(st.sampled_from(["home", "news", "a b c d", "x"])),
       st.integers(0, 4))
@settings(max_examples=200, deadline=None)
def test_strip_lines_takes_out_only_named_lines_and_keeps_the_order(lines, named, short_words):
    text = "\n".join(lines)
    new, removed = linededup.strip_lines(text, {linededup.key_hash(k) for k in named}, short_words)
    left = [ln for ln in new.split("\n") if ln.strip()]
    before = [ln for ln in text.split("\n") if ln.strip()]
    gone = list(before)
    for ln in left:                                   # what is left is the text's lines, in order
        gone = gone[gone.index(ln) + 1:] if ln in gone else None
        assert gone is not None
    assert len(before) - len(left) == len(removed)
    assert all(linededup.line_key(ln) in named for ln in removed)
    assert all(linededup.line_key(ln) in named for ln in before if ln not in left)
    if short_words == 0:
        assert not any(linededup.line_key(ln) in named for ln in left)


def test_the_lines_taken_out_of_kept_documents_are_written(tmp_path):
    kept, ledger, _, body_of = cleaned(tmp_path, {"enabled": True})
    removed = {r["id"]: r for r in pq.read_table(tmp_path / "data/clean/lines_removed.parquet").to_pylist()}
    assert removed["ledger-1"]["lines"] == [*CHROME["ledger"], *LINKS] and removed["ledger-1"]["source"] == "web"
    assert removed["play-b"]["lines"][0].startswith("Good my lord")
    # every kept document but the one holding each line first (gazette-5 ranks first), play-a and the code
    assert set(removed) == set(kept) - {"gazette-5", "play-a", "code-a", "code-b"}
    assert "zz-copy" not in removed and "zz-copy" in ledger        # a dropped document is the ledger's, whole
    for key, row in removed.items():                                 # what is written went, and nothing else
        assert not any(line in kept[key].split("\n") for line in row["lines"])
    off = tmp_path / "off"
    off.mkdir()
    cleaned(off, {})
    assert not (off / "data/clean/lines_removed.parquet").exists()
