"""Text functions that took quadratic time on hostile input: trailing blanks of a line (`normalize_layout`'s
`[ \\t]+$`, tried from every space of a long run that does not end its line) and hyphenated line breaks
(`join_hyphenated` searched the whole text for each break's evidence). Each must finish on input far past where
it blew up (0.5 s at 10,000 characters, minutes at these sizes) and give the output it gave before, byte for
byte (the clean stage's outputs are compared byte for byte).

The deadline is kept by a forked worker, not a thread: a regex holds the GIL for its whole run, so a thread's
`future.result(timeout=...)` would only return when the regex does."""

from __future__ import annotations

import re
from unittest import mock

from hypothesis import given, settings
from hypothesis import strategies as st

from tasks.data.cleanup.normalize import normalize_layout
from tasks.data.cleanup.textbatch import normalize_texts
from tasks.data.dedup import marks
from tasks.data.dedup.marks import join_hyphenated
from tests.helpers.deadline import run_within


def _word(i: int, letters: str) -> str:
    """A distinct word of `letters` for each `i`: `i` in base `len(letters)`."""
    word = ""
    while True:
        i, digit = divmod(i, len(letters))
        word += letters[digit]
        if not i:
            return word


def test_long_space_run_not_ending_a_line_finishes():
    n = 400_000
    assert run_within(normalize_layout, "x" + " " * n + "b \n") == "x" + " " * n + "b"
    # the decomposed `é` sends the batch to `normalize_text` (not the compiled simple-text path)
    assert run_within(normalize_texts, ["e\u0301" + " \t" * (n // 2) + "b \n"]) == ["\u00e9" + " \t" * (n // 2) + "b"]


def test_many_hyphenated_breaks_finish():
    n = 200_000
    compounds = ("a-\nb " * n)[:n]                   # both parts words elsewhere: every break stays
    assert run_within(join_hyphenated, compounds) == compounds
    # first parts of `a`-`m`, second parts of `n`-`z`, each once: no evidence, every break joins
    cut = " ".join(f"{_word(i, 'abcdefghijklm')}-\n{_word(i, 'nopqrstuvwxyz')}" for i in range(n // 12))
    assert len(cut) > n // 2
    assert run_within(join_hyphenated, cut) == cut.replace("-\n", "")


# (input, normalize_layout's output, normalize_texts'), as the code before the fix gave them
LAYOUT_CASES = [
    ("a \t \nb\t\n \n\n\n\n\nc  ", "a\nb\n\n\nc", "a\nb\n\n\nc"),
    (" \t x \t y\t \n\t\n", " \t x \t y", " \t x \t y"),
    ("x          b \n", "x          b", "x          b"),
    ("\n\n a  \r\n b \t", " a  \r\n b", " a\n b"),
    ("e\u0301     b \n", "e\u0301     b", "\u00e9     b"),
    ("\t", "", ""),
    ("a\xa0 \n\u2028b  ", "a\xa0\n\u2028b", "a\n\nb"),
]


def test_layout_output_unchanged():
    for text, layout, normalized in LAYOUT_CASES:
        assert normalize_layout(text) == layout, text
        assert normalize_texts([text]) == [normalized], text


# (input, join_hyphenated's output), as the code before the fix gave them; each also after `PAD`'s nine breaks,
# so that its break is answered from the word index, not searched for
PAD = "pa-\nd " * 9
HYPHEN_CASES = [
    ("exam-\nple and example", "example and example"),
    ("left-\nhand and left-hand", "left-\nhand and left-hand"),
    ("non-\nnegative non-zero", "non-\nnegative non-zero"),
    ("left-\nhand right-hand", "left-\nhand right-hand"),
    ("decimal-\npoint decimal point", "decimal-\npoint decimal point"),
    ("note-\nbook", "notebook"),
    ("angle-addr-\nstart", "angle-addr-\nstart"),
    ("to whose falls-\nHeaven prosper", "to whose falls-\nHeaven prosper"),
    ("co\u2010\nop co\u2010op", "co\u2010\nop co\u2010op"),
    ("co-\n  op co\u2010op", "co-\n  op co\u2010op"),
    ("ab_-\ncd ab_cd", "ab_-\ncd ab_cd"),
    ("\u0130x-\nyz \u0130x-yz", "\u0130x-\nyz \u0130x-yz"),
    ("x\u0130-\nyz xi\u0307yz", "x\u0130yz xi\u0307yz"),
    ("xi-\nyz X\u0130YZ", "xi-\nyz X\u0130YZ"),
    ("Stra\u00dfe-\nbahn strassebahn", "Stra\u00dfebahn strassebahn"),
]


def test_hyphenation_output_unchanged():
    assert join_hyphenated(PAD) == PAD
    for text, joined in HYPHEN_CASES:
        assert join_hyphenated(text) == joined, text
        assert join_hyphenated(PAD + text) == PAD + joined, text


def _reference_layout(text: str) -> str:
    """`normalize_layout`'s rules, written plainly: each line's trailing spaces and tabs, then runs of more than
    three line breaks, then the document's leading line breaks and trailing whitespace."""
    text = "\n".join(line.rstrip(" \t") for line in text.split("\n"))
    return re.sub(r"\n{4,}", "\n\n\n", text).lstrip("\n").rstrip()


_PIECES = [" ", "  ", "\t", "\n", "\n\n", "a", "b", "-", "\u2010", "\u0301", "\r", "\xa0", " " * 40]


@settings(max_examples=200, deadline=None)
@given(st.lists(st.sampled_from(_PIECES), max_size=40).map("".join))
def test_layout_matches_reference(text):
    assert normalize_layout(text) == _reference_layout(text)


# words (a few recurring ones, so that the evidence is there for some breaks and not for others), each followed by
# a hyphen, a line break, a hyphenated line break or a space
_WORDS = st.one_of(st.sampled_from(["ab", "cd", "abcd", "e", "\u0130a", "a\u0130", "Ab"]),
                   st.text("abc\u0130_1\u00e9", min_size=1, max_size=3))
_AFTER = st.sampled_from(["-\n", "-\n", "-\n ", "\u2010\n", "-", "\u2010", " ", "\n"])
_TEXTS = st.lists(st.tuples(_WORDS, _AFTER), max_size=30).map(lambda pairs: "".join(w + a for w, a in pairs))


@settings(max_examples=200, deadline=None)
@given(_TEXTS)
def test_indexed_evidence_matches_searched(text):
    # every break searched for (the code before the fix) against every break answered from the word index
    with mock.patch.object(marks, "_SEARCHED_BREAKS", 10**9):
        searched = join_hyphenated(text)
    with mock.patch.object(marks, "_SEARCHED_BREAKS", 0):
        indexed = join_hyphenated(text)
    assert indexed == searched
