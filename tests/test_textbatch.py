"""clean's batch text functions equal the per-document ones they stand for, on generated text of every kind the
folds treat apart: ASCII, controls, CR, trailing spaces, blank-line runs, exotic spaces, format characters,
typographic quotes, accented and upper-case letters, look-alikes, combining marks, jamo, astral characters."""

from __future__ import annotations

import re
import sys
import unicodedata

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from specs.clean import DedupSpec
from tasks.data.dedup import minhash
from tasks.data.cleanup.lookalikes import has_look_alikes, look_alike_table
from tasks.data.cleanup.normalize import (TRANSLATION_TABLE, exact_key, format_chars, has_markup, normalize_layout,
                                          normalize_text, shingle_text, simple_chars)
from tasks.data.cleanup.textbatch import ENTITY, MARKUP, NOT_SIMPLE, Encoded, exact_keys, normalize_encoded, normalize_texts
from tests.helpers.shingle_definition import assert_compiled_path_is_the_definition

PIECES = ["the", "Word", "ÉTÉ", "été", "naïve", " ", "  ", "\t", "\n", "\n\n\n\n", "\r\n", "\r", "\x00",
          "\x1f", "\x7f", "\x85", "\xa0", "\u3000", "\u2028", "\u200b", "\u200d", "\u00ad", "\ufeff", "’", "“",
          "—", "–", "…", "½", "ﬁ", "ß", "İ", "ı", "ſ", "K", "а", "о", "pаypаl", "α", "Σ", "ς", "e\u0301",
          "\u0301", "\u1100\u1161", "한", "日本", "𝐚𝐛", "😀", "&amp;", "&#39;", "a&b", "x", "7", "_", ".", ",",
          "<p>x</p><p>y</p><div>z</div>", "Ω", "ǅ", "ᏸ", "\u0345", "[a](https://x.y/z)", "](", "ｶ", "ไทย", "𠀀",
          "12 ", "[", "2024-03-01 12:00:01,5 ", "हिन्दी", "\u093f", "كَتَبَ", "שָׁלוֹם", "моло\u0301ко", "exam-\n",
          "-", "\U00011000\U00011038", "ก\u0e34"]
texts = st.lists(st.sampled_from(PIECES), max_size=12).map("".join)


@settings(max_examples=300, deadline=None)
@given(st.lists(texts, min_size=1, max_size=8))
def test_normalize_texts_equal_normalize_text(batch):
    for form in ("NFC", "NFKC", "none"):
        assert normalize_texts(batch, form) == [normalize_text(t, form) for t in batch]


@settings(max_examples=300, deadline=None)
@given(st.lists(texts, min_size=0, max_size=8), st.sampled_from(["NFC", "NFKC", "none"]))
def test_normalized_batch_is_its_texts_encoded(batch, form):
    # the compiled pass writes the bytes and flags itself (the texts it cannot finish spliced in after)
    normalized = normalize_encoded(batch, form)
    again = Encoded.of(list(normalized.texts))
    assert normalized.data.tobytes() == again.data.tobytes() and normalized.ends.tolist() == again.ends.tolist()
    hints = MARKUP | ENTITY             # read before the table applied: set where text_flags sets them, or more
    assert [f & ~hints for f in normalized.flags] == [f & ~hints for f in again.flags]
    assert all(f & a & hints == a & hints for f, a in zip(normalized.flags, again.flags))
    assert all((a is b) == (a == b) for a, b in zip(normalized.texts, batch))  # unchanged: the same object


@settings(max_examples=300, deadline=None)
@given(st.lists(texts, min_size=0, max_size=8), st.data())
def test_a_selection_of_rows_is_those_texts_encoded_with_their_folds(batch, data):
    encoded = normalize_encoded(batch)
    exact_keys(encoded)                                   # (fills the folds the shingles reuse)
    rows = sorted(data.draw(st.sets(st.integers(0, max(len(batch) - 1, 0)), max_size=len(batch))) if batch else [])
    picked, again = encoded.select(rows), Encoded.of([encoded.texts[k] for k in rows])
    assert picked.data.tobytes() == again.data.tobytes() and picked.ends.tolist() == again.ends.tolist()
    assert picked.flags == [encoded.flags[k] for k in rows] and list(picked.texts) == list(again.texts)
    assert [picked.folds_of(i) for i in range(len(rows))] == [encoded.folds_of(k) for k in rows]


def test_a_lone_surrogate_is_encoded_as_surrogatepass_writes_it():
    batch = ["plain", "a\ud800b", "é"]
    assert Encoded.of(batch).data.tobytes() == b"".join(t.encode("utf-8", "surrogatepass") + b"\n" for t in batch)
    assert normalize_texts(batch) == [normalize_text(t) for t in batch]


@settings(max_examples=300, deadline=None)
@given(st.lists(texts, min_size=1, max_size=8))
def test_exact_keys_equal_exact_key(batch):
    assert exact_keys(batch) == [exact_key(t) for t in batch]
    normalized = normalize_encoded(batch)
    assert exact_keys(normalized) == [exact_key(t) for t in normalized.texts]


ASCII_LAYOUT = st.lists(st.sampled_from(["x", "Word", " ", "  ", "\t", "\n", "\n\n\n\n\n", " \n", "\t\n", "<", "&"]),
                        max_size=14).map("".join)


@settings(max_examples=300, deadline=None)
@given(ASCII_LAYOUT)
def test_line_rules_are_all_normalize_text_changes_in_plain_ascii(text):
    # what the batch's compiled pass does to such text (dense in the cases its streamed line rules treat apart)
    for form in ("NFC", "NFKC", "none"):
        assert normalize_layout(text) == normalize_text(text, form) == normalize_texts([text, text], form)[1]


def test_markup_needs_three_tags_not_three_angle_brackets():
    assert has_markup("<p>a</p> <b>c")
    assert not has_markup("if a < b and c < d: <p>x</p>")           # four `<`, two tags
    assert not has_markup("<p>x</p>")


@settings(max_examples=200, deadline=None)
@given(texts)
def test_table_replacement_equals_translate(text):
    assert normalize_text(text, "none") == _reference_normalize(text)


def _reference_normalize(text: str) -> str:
    """normalize_text with `form="none"` as it was written before the regex replacement (str.translate), and a
    run of ZWNJ/ZWJ/LRM/RLM dropped between two ASCII characters (not a space beside LRM/RLM) read run by run."""
    text = text.replace("\r\n", "\n").translate(TRANSLATION_TABLE)

    def joiners(m: re.Match[str]) -> str:
        before, after = m.string[m.start() - 1:m.start()], m.string[m.end():m.end() + 1]
        printable = {before, after} <= set(map(chr, range(0x21, 0x7F)))
        spaced = {before, after} <= set(map(chr, range(0x20, 0x7F))) and set(m.group()) <= {"\u200c", "\u200d"}
        return "" if printable or spaced else m.group()
    text = re.sub("[\u200c-\u200f]+", joiners, text)
    text = re.sub(r"[ \t]+$", "", text, flags=re.MULTILINE)
    return re.sub(r"\n{4,}", "\n\n\n", text).lstrip("\n").rstrip()


@settings(max_examples=300, deadline=None)
@given(texts)
def test_look_alikes_as_the_regex_says(text):
    # the definition, written as a (slow) regex over every look-alike, both cases spelled out
    look = "".join(re.escape(chr(c)) for c in sorted(look_alike_table()))
    assert has_look_alikes(text) == (re.search(f"[{look}]", text) is not None)


def test_look_alikes_fold_alike_in_either_case():
    """Both cases of a letter fold to one lower-case ASCII letter, so casefolding before or after the fold
    gives one text; `н` (which imitates nothing) goes where `Н` does."""
    table = look_alike_table()
    assert all(v.isascii() and v.islower() and len(v) == 1 for v in table.values())
    for code, letter in table.items():
        for other in (chr(code).lower(), chr(code).upper()):
            if len(other) == 1 and not other.isascii():
                assert table[ord(other)] == letter, (chr(code), other)
    assert table[ord("н")] == table[ord("Н")] == "h" and table[ord("ν")] == table[ord("Ν")] == "v"
    assert shingle_text("ΝΑΙ, ΗΕΛΛΑΣ") == shingle_text("ναι, ηελλασ")


def test_ascii_i_s_k_beside_a_non_ascii_character_are_no_look_alikes():
    # With IGNORECASE a regex class matched `i`, `s`, `k` as dotless ı, long ſ and the Kelvin sign: ASCII text
    # beside a curly quote is no look-alike and is not folded.
    assert not has_look_alikes("the river’s mouth, kiss") and has_look_alikes("pаypаl")
    assert shingle_text("the river’s mouth") == "the river’s mouth"
    assert shingle_text("pаypаl login") == "paypal login"


def test_format_characters_are_found_in_every_plane():
    every = [c for c in range(sys.maxunicode + 1) if unicodedata.category(chr(c)) == "Cf"]
    assert sorted(format_chars()[0]) == every


def test_simple_characters_survive_every_fold():
    table = simple_chars()
    simple = [chr(c) for c in range(0x80, 0x10000) if table[c]]
    assert "’" in simple and "é" in simple and "É" not in simple and "а" not in simple and "…" not in simple
    text = "".join(simple)
    assert unicodedata.normalize("NFKC", text) == text == text.casefold() == text.lower()
    assert all((table[ord(c)] == 2) == bool(re.match(r"\w", c)) for c in simple)


def test_text_of_simple_characters_is_normalized_whatever_precedes_them():
    """What lets the batch functions skip the quick check for text whose non-ASCII characters are all simple:
    no simple character is the second of a canonical composition pair, so after any character (ASCII or
    simple) it stays as it is in NFC and NFKC."""
    table = simple_chars()
    simple = {chr(c) for c in range(0x80, 0x10000) if table[c]}
    seconds = set()
    for code in range(sys.maxunicode + 1):
        parts = unicodedata.decomposition(chr(code)).split()
        if len(parts) == 2 and not parts[0].startswith("<"):
            seconds.add(chr(int(parts[1], 16)))
    assert "\u0301" in seconds and not simple & seconds
    text = "".join(f"e{c}A{c}{c}" for c in sorted(simple))
    assert all(unicodedata.is_normalized(form, text) for form in ("NFC", "NFKC"))
    flags = Encoded.of([text, "e\u0301’"]).flags           # (as read: a combining mark is not simple)
    assert not flags[0] & NOT_SIMPLE and flags[1] & NOT_SIMPLE


@settings(max_examples=150, deadline=None)
@given(st.lists(texts, min_size=1, max_size=10), st.sampled_from(["default", "no_unicode", "no_entities"]))
def test_word_shingles_without_the_fold_equal_the_folded_ones(raw, variant):
    spec = {"default": DedupSpec(), "no_unicode": DedupSpec(fold_unicode=False),
            "no_entities": DedupSpec(fold_entities=False, fold_markup=False)}[variant]
    batch = [normalize_text(t) for t in raw]
    fast = minhash.signatures_and_shingles(batch, spec, 1, normalize_encoded(raw))      # as clean encodes them
    slow = _folded_reference(batch, spec)
    assert all(np.array_equal(a, b) for a, b in zip(fast, slow))
    encoded = normalize_encoded(raw)    # as clean runs them: the exact keys first, whose folds the shingles reuse
    exact_keys(encoded)
    fast = minhash.signatures_and_shingles(batch, spec, 1, encoded)
    assert all(np.array_equal(a, b) for a, b in zip(fast, slow))


@settings(max_examples=150, deadline=None)
@given(st.lists(texts, min_size=1, max_size=10))
def test_word_shingles_equal_the_regex_words_of_the_folded_texts(raw):
    # the definition: `wordhash.word_hashes` of the folded texts (the regex split of every non-ASCII one), each
    # character of a script written without spaces a word of its own (`segment.split_unspaced`), line-number and
    # timestamp prefixes dropped first where most lines have one (`lineprefix.strip_line_prefixes`), then words
    # hyphenated at line breaks joined; Arabic/Hebrew pointing dropped after the folds, combining marks read as
    # part of their word (`marks`), and look-alike letters read as ASCII last (`lookalikes`)
    assert_compiled_path_is_the_definition(raw)


def _folded_reference(batch: list[str], spec: DedupSpec):
    """The same with every text folded and split by the regex (no text takes the compiled shortcut)."""
    original = minhash._needs_fold
    minhash._needs_fold = lambda batch, k, spec: True
    try:
        return minhash.signatures_and_shingles(batch, spec, 1)
    finally:
        minhash._needs_fold = original
