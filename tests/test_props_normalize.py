"""Invariants of clean's normalization on any text: `normalize_text` is idempotent and its output is in the form
asked (and valid UTF-8 when its input was); the batch path (`normalize_texts`, `exact_keys`) equals the per-text
functions on text built from the characters that break scanners: combining marks after removed characters,
CR/LF mixtures, zero-width and bidi characters, lone surrogates, astral and look-alike letters."""

from __future__ import annotations

import unicodedata

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tasks.data.cleanup.normalize import exact_key, normalize_text
from tasks.data.cleanup.textbatch import exact_keys, normalize_texts

SETTINGS = settings(max_examples=250, deadline=None)
FORMS = ("NFC", "NFKC", "none")

HOSTILE = ["\r", "\n", "\r\n", "\n\r", "\r\r\n", " \r\n", "\t\r", "\x0b", "\x0c", "\x1c", "\x85", "\u2028", "\u2029",
           "\u200b", "\u200c", "\u200d", "\u2060", "\ufeff", "\u00ad", "\u180e", "\u200e", "\u200f", "\u202e",
           "\u0301", "\u0308", "\u0327", "\u0345", "\u034f", "\ufe0f", "\u3099", "\u1161", "\u11a8", "\u1100",
           "e", "A", "ı", "ß", "ﬁ", "Å", "Ω", "ǅ", "а", "ｶ", "\uff9e", "𝐚", "😀", "\U000e0041", "\ud800", "\udfff",
           "\x00", "\x7f", "\x9f", "\xa0", "\u3000", "\u2003", " ", "  ", "\t", "x", "<p>", "&amp;", "&#769;",
           "\u0f73", "\u0344", "\u1e9b\u0323", "\u0958", "\uac00", "\u0e33", "\u2126", "\u212b"]
texts = st.lists(st.one_of(st.sampled_from(HOSTILE), st.text(max_size=4)), max_size=16).map("".join)
any_str = st.text(alphabet=st.characters(blacklist_categories=()), max_size=40)   # surrogates included


@SETTINGS
@given(st.one_of(texts, any_str), st.sampled_from(FORMS))
def test_normalize_text_is_idempotent(text, form):
    once = normalize_text(text, form)
    assert normalize_text(once, form) == once, (text, once)


@SETTINGS
@given(st.one_of(texts, any_str).filter(lambda t: not any("\ud800" <= c <= "\udfff" for c in t)),
       st.sampled_from(["NFC", "NFKC"]))
def test_normalized_text_is_valid_utf8_in_its_form(text, form):
    out = normalize_text(text, form)
    assert out.encode("utf-8").decode("utf-8") == out
    assert unicodedata.is_normalized(form, out), (text, out)
    assert "\r" not in out and out == out.strip("\n") and not out.endswith((" ", "\t")), (text, out)


@SETTINGS
@given(st.lists(st.one_of(texts, any_str), min_size=1, max_size=8))
def test_batch_equals_per_text_on_hostile_text(batch):
    for form in FORMS:
        assert normalize_texts(batch, form) == [normalize_text(t, form) for t in batch], batch
    assert exact_keys(batch) == [exact_key(t) for t in batch], batch


@pytest.mark.parametrize("batch", [
    ["a\r", "\nb"],                   # a CR ending one text and a LF opening the next are no CRLF
    ["\r\n\u0301", "e\u200b\u0301"],  # a mark after a break, after a removed character
    ["\ud800\r\n \u200b", "x"],
])
def test_batch_equals_per_text_on_drawn_cases(batch):
    for form in FORMS:
        assert normalize_texts(batch, form) == [normalize_text(t, form) for t in batch], batch
    assert exact_keys(batch) == [exact_key(t) for t in batch], batch
