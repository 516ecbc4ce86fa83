"""Near dedup of copies in another container or markup (`DedupSpec.fold_formats`, `fold_markup`): a mail body in
quoted-printable, a talk's SRT and WebVTT subtitles against its transcript, and links written as reStructuredText,
AsciiDoc, Org or a lynx/w3m dump writes them. A blind probe found 0-5 of 30 copies of each kind; each copy below
was J < 0.8 with its original before its rule, and is found now, by clean's in-memory and real paths. Text that
only looks like a form (code's `x=10`, an HTML comment's `-->`, `a[[i][j]]`, a `[12]` no reference list holds)
reads as before, and the compiled path (a byte scan picks the texts `textforms.read_formats` reads) equals the
definition on text made of these pieces."""

from __future__ import annotations

import quopri
import re

import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

from specs.clean import DedupSpec
from tasks.data.dedup.linkforms import read_links
from tasks.data.dedup.textforms import format_flags, read_formats, read_quoted_printable, read_subtitles
from tests.helpers.shingle_definition import assert_compiled_path_is_the_definition
from tests.test_dedup_folds import assert_copies_removed, assert_near_copy, jaccard

# invented prose: a talk's transcript, a mail's body, a page with links
TALK = ("Thank you all for coming. Today I want to talk about how small towns can keep their libraries open when "
        "budgets shrink every year. We started with a survey of four hundred readers and found that most of them "
        "came for the reading room, not for the books. So we moved the shelves, opened a café corner and asked "
        "volunteers to run evening classes. Within two years the number of visitors doubled, and the council "
        "agreed to fund a second librarian. The lesson is simple: ask people what they use, then build around it.")
MAIL = ("Hi Marta,\n\nthanks for the notes from Thursday’s meeting. I’ve gone through the budget again and the "
        "numbers for the café renovation don’t add up: the quote says 12,400 euros but the invoice we received "
        "lists 14,950, which is roughly 20 % more than what the committee approved. Could you ask the contractor "
        "whether the extra cost = the new wiring they mentioned, or something else entirely? I would rather settle "
        "this before the next meeting so that we can present a clean report to the members.\n\nBest wishes,\nJosé")
PAGE = ("The river rises in a shallow bog and runs east through a narrow wooded valley where it is joined by several "
        "fast mountain streams. Below the village it enters a broad plain, slows down and begins to meander, "
        "forming lakes and wide wetlands that flood almost every winter. Farmers along its banks grow barley and "
        "keep cattle, and the old mill at the ford still grinds flour for the market town on summer weekends.")
LINKED = ["river", "narrow wooded valley", "mountain streams", "village", "wetlands", "barley", "old mill"]


def _stamp(seconds: float, sep: str, hours: bool = True) -> str:
    h, rest = divmod(int(seconds * 1000), 3_600_000)
    m, rest = divmod(rest, 60_000)
    s, ms = divmod(rest, 1000)
    return (f"{h:02d}:" if hours else "") + f"{m:02d}:{s:02d}{sep}{ms:03d}"


def _cues(text: str, words: int = 7) -> list[str]:
    split = text.split()
    return [" ".join(split[k:k + words]) for k in range(0, len(split), words)]


def srt(text: str) -> str:
    return "\n\n".join(f"{n}\n{_stamp(2.5 * n, ',')} --> {_stamp(2.5 * n + 2.2, ',')}\n{cue}"
                       for n, cue in enumerate(_cues(text), 1)) + "\n"


def vtt(text: str) -> str:
    cues = [f"{_stamp(2.5 * n, '.', False)} --> {_stamp(2.5 * n + 2.2, '.', False)} align:start position:0%\n"
            f"<v Speaker>{cue}</v>" for n, cue in enumerate(_cues(text), 1)]
    return "WEBVTT\nKind: captions\nLanguage: en\n\nNOTE recorded at the town hall\n\n" + "\n\n".join(cues) + "\n"


def qp(text: str) -> str:
    return quopri.encodestring(text.encode("utf-8")).decode("ascii")


def _url(words: str) -> str:
    return "https://en.wikipedia.org/wiki/" + words.title().replace(" ", "_")


def linked(text: str, form: str) -> str:
    for n, words in enumerate(LINKED, 1):
        text = text.replace(words, form.format(text=words, url=_url(words), n=n), 1)
    return text


def lynx(text: str) -> str:
    refs = "\n".join(f"   {n}. {_url(words)}" for n, words in enumerate(LINKED, 1))
    return linked(text, "[{n}]{text}") + "\n\nReferences\n\n   Visible links:\n" + refs + "\n"


COPIES = {
    "quoted-printable": (MAIL, qp(MAIL)),
    "SRT": (TALK, srt(TALK)),
    "WebVTT": (TALK, vtt(TALK)),
    "reStructuredText links": (PAGE, linked(PAGE, "`{text} <{url}>`_")),
    "AsciiDoc links": (PAGE, linked(PAGE, "{url}[{text}]")),
    "AsciiDoc link: macros": (PAGE, linked(PAGE, "link:{url}[{text}^]")),
    "Org links": (PAGE, linked(PAGE, "[[{url}][{text}]]")),
    "lynx dump": (PAGE, lynx(PAGE)),
}


@pytest.mark.parametrize("name", list(COPIES))
def test_a_copy_is_a_near_duplicate(name):
    assert_near_copy(*COPIES[name])


def test_every_copy_is_removed_by_the_real_path(tmp_path):
    assert_copies_removed(COPIES, tmp_path)


@pytest.mark.parametrize("name", list(COPIES))
def test_without_their_rules_the_copies_were_missed(name):
    off = DedupSpec(fold_formats=False) if name in ("quoted-printable", "SRT", "WebVTT") else None
    off = off or DedupSpec(fold_markup=False)
    assert jaccard(*COPIES[name], off) < 0.8


def test_quoted_printable_definition():
    assert read_quoted_printable("a=3Db caf=C3=A9 it=E2=80=99s informa=\ntion=") == "a=b café it’s information"
    long = "the long line of a body, broken after its 76th character by the encoder, ends in li=\nne"
    assert read_quoted_printable("na=EFve=20caf=E9 " + long) == "naïve café " + long.replace("=\n", "")   # Latin-1
    for code in ("x=10", "a = b", "x == y", "color=3D and y = 2", "=3d lower case", "x=10\ny=\n"):
        assert read_quoted_printable(code) is code                                # an `=` no encoder writes
    assert read_quoted_printable("x=10\ny=20") == "x=10\ny=20"                   # no sign of QP: as written


def test_subtitles_definition():
    assert read_subtitles("1\n00:00:01,000 --> 00:00:04,000\n<i>Hello</i> {\\an8}there\n\n2\n"
                          "00:00:05,000 --> 00:00:07,500\nfriend\n") == "<i>Hello</i> {\\an8}there\n\nfriend\n" \
        .replace("<i>", "").replace("</i>", "").replace("{\\an8}", "")
    assert read_subtitles("WEBVTT\nKind: captions\n\nNOTE a\nnote\n\nintro\n00:01.000 --> 00:04.000 align:start\n"
                          "<v Ann>Hi <00:02.000>all</v>\n") == "\n\nHi all\n"
    for text in ("<!-- a comment --> text", "a --> b", "x\n12:00 --> 13:00 lunch\n"):
        assert read_subtitles(text) is text


def test_links_definition():
    assert read_links("see `the docs <https://docs.python.org/>`_, `Paris`_ and Paris_ now\n\n"
                      ".. _Paris: https://en.wikipedia.org/wiki/Paris\n") == "see the docs, Paris and Paris now\n\n\n"
    assert read_links("https://a.org/b[the docs^], link:https://a.org[text,window=_blank], "
                      "mailto:a@b.org[mail], https://a.org[]") == "the docs, text, mail, https://a.org[]"
    assert read_links("[[https://orgmode.org][Org mode]] and [[file:x.org]]") == "Org mode and [[file:x.org]]"
    assert read_links("the [1]river and [3]sea\n\nReferences\n\n   1. https://a.org/r\n") == "the river and [3]sea\n"
    for text in ("a[[i][j]] = b[[0][1]]", "x[12] = 3\n\nReferences\n\nsee the book", "[link](https://a.org)[1]",
                 "data[i] at https://a.org/x [y]", "rename `x`_ to y", "[url]https://a.org/x[/url]"):
        assert read_links(text) is text


def _flags(texts: list[str]) -> np.ndarray:
    raw = [t.encode() for t in texts]
    data = np.frombuffer(b"\n".join(raw) + b"\n", np.uint8)
    return format_flags(data, np.cumsum([len(r) + 1 for r in raw]) - 1)


def test_the_scan_picks_the_copies_and_passes_plain_text():
    copies = [copy for _, copy in COPIES.values()]
    assert (_flags(copies) != 0).all()
    assert (_flags([MAIL, TALK, PAGE, "x = 1 if a == b else 2\nb=10", "a[i][j] at https://a.org/ now"]) == 0).all()


PIECES = ["the", "word", "Caf", " ", "\n", "\n\n", "=", "=3D", "=C3=A9", "=E2=80=99", "=E9", "=\n", "3D", "A", "x=10",
          "1", "12", "00:00:01,000 --> 00:00:04,000", "00:01.000 --> 00:04.000 align:start", "WEBVTT", "NOTE", "-->",
          "<i>", "</i>", "<v Ann>", "{\\an8}", "`", "`_", "<https://a.org/x>", ".. _", "word_", ": ", "https://a.org",
          "link:", "mailto:", "[", "]", "[[", "][", "]]", "[1]", "[12]", "References", "   1. ", "Visible links:",
          "_", "'", "é", "\\n", "&amp;", "<p>a</p><p>b</p><div>c</div>",
          # whole forms, so that every rule is met often
          "`the docs <https://a.org/x>`_", "\n.. _word: https://a.org\n", "`word`_", "https://a.org/x[the docs^]",
          "link:x.html[a, window=_blank]", "[[https://a.org][Org]]", "\n\nReferences\n\n   1. https://a.org/x\n",
          "\n1\n00:00:01,000 --> 00:00:04,000\n", "WEBVTT\n\n", "caf=C3=A9 =E2=80=99s a=3Db "]
texts = st.lists(st.sampled_from(PIECES), max_size=18).map("".join)


@settings(max_examples=300, deadline=None)
@given(st.lists(texts, min_size=1, max_size=8))
def test_word_shingles_equal_the_formats_definition(raw):
    """The compiled path (the texts the byte scan picks read by `read_formats`, then folded whole) equals the folds'
    chain with `read_formats` first, on text made of the pieces these rules read."""
    assert_compiled_path_is_the_definition(raw)


@settings(max_examples=500, deadline=None)
@given(st.lists(texts, min_size=1, max_size=8))
def test_the_scan_finds_every_text_the_rules_change(raw):
    flags = _flags(raw)
    for text, flag in zip(raw, flags.tolist()):
        assert flag or read_formats(text) == text, text


def test_distinct_talks_stay_apart():
    other = re.sub(r"libraries", "swimming pools", TALK).replace("books", "lanes").replace("reading room", "sauna")
    other = other.replace("four hundred readers", "two hundred swimmers").replace("café corner", "kiosk")
    assert jaccard(srt(TALK), srt(other)) < 0.8 and jaccard(TALK, other) < 0.8
