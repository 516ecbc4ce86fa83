"""Combining marks, spelling variants and line-break hyphens as near dedup's word shingles read them
(`DedupSpec.marks_in_words`, `fold_pointing`, `fold_hyphenation`).

- Combining marks (Unicode Mn/Mc) are no `\\w`. In Devanagari, Bengali, Tamil and the other Indic scripts the
  vowel signs and viramas are marks, so `हिन्दी` split into `ह`, `न`, `द`: a 5-gram spanned two written words,
  and two different texts drawn from one vocabulary shared far more fragment 5-grams than word 5-grams.
  `mark_words` reads a mark as part of the word it sits on. The marks of the scripts `segment` spaces out
  character by character (Thai, Lao, Khmer, Myanmar, kana voicing marks) keep dropping out as they did: there
  each character is a unit already, and a mark would be a unit of its own.
- Optional pointing: Arabic harakat (fatha, kasra, damma, sukun, shadda, tanwin, superscript alef, Quranic
  marks), Hebrew niqqud and cantillation, and stress accents (a combining acute) on Cyrillic vowels are
  added to teaching texts, scripture and dictionaries and left out of ordinary writing: a copy with or without
  them is the same text, yet each mark split its word in two (`كَتَبَ` → `ك`, `ت`, `ب`), and no pointed copy was
  found. `drop_pointing` removes them. Marks that are letters (the Indic vowel signs) are never dropped:
  datatrove's strip-all-marks would make distinct words collide.
- Spelling variants that writers put in or leave out freely, so that a copy differs from its original in them
  word after word (a probe of crawl edits: tatweel J 0.21-0.47, hamza 0.29-0.35, final yeh 0.27-0.52, teh
  marbuta 0.20-0.36, Persian keyboard 0.04, Hindi nukta 0.41-0.75, Russian `ё` 0.71-0.75; none was found), are
  read as one letter with the pointing (`fold_spelling`, `SPELLING`), the standard folds of search engines
  (Lucene's Arabic, Persian and Hindi normalizers; Russian engines read `ё` as `е`): Arabic tatweel (kashida,
  U+0640, which stretches a word for display) dropped; alef with hamza above or below, with madda and alef
  wasla (`أ إ آ ٱ`) → bare alef `ا`, alef maksura `ى` → yeh `ي`, teh marbuta `ة` → heh `ه`; Persian yeh `ی` and
  keheh `ک` → Arabic yeh `ي` and kaf `ك` (Persian typed on an Arabic keyboard, and back); Devanagari nukta
  (U+093C, `ज़` → `ज`, and the precomposed `ऩ ऱ ऴ`) dropped, chandrabindu `ँ` → anusvara `ं`; Russian `ё` → `е`;
  Greek tonos and dialytika dropped (`ά` → `α`); other scripts' decimal digits read as ASCII (`DIGITS`).
  Distinct texts stay apart: a 5-gram would have to fold onto another text's five words.
- A word hyphenated at a line break (`exam-\\nple` or with U+2010 HYPHEN, hard-wrapped, typeset or OCR'd text; a
  lower-case letter after the break) is read as one word (`join_hyphenated`), unless the text shows it is a
  compound broken at its hyphen (written hyphenated on one line elsewhere, `left-hand`, and the like).
- Variation selectors (U+FE00-FE0F, U+E0100-E01EF: emoji presentation `❤️`, keycaps `1️⃣`, ideographic
  variants) are category Mn but join nothing: they are no part of a word (`normalize.shingle_text` drops them).
- Latin diacritics (`fold_latin`, in `normalize.shingle_text` under `DedupSpec.fold_unicode`): a copy typed on
  an ASCII keyboard or passed through an ASCII transliteration writes `Gebuhren` or `Gebuehren` for `Gebühren`,
  `mediatheque` for `médiathèque`, and shared no 5-gram with its original in most sentences (a probe's German
  and French/Spanish copies: J 0.14-0.81, 1 of 108 found). The combining marks of a Latin letter (A-Z, a-z:
  `é` → `e`, `ǘ` → `u`, a decomposed `e\u0301` too) are dropped, the letters with no decomposition read as
  their ASCII spelling (`LATIN_LETTERS`: `ß` → `ss`, `æ` → `ae`, `ø` → `o`, `ł` → `l`, …), and the German
  digraphs `ae`, `oe`, `ue` as `a`, `o`, `u` (DIN 5007-2's transliteration undone: `Gebuehren`, `Gebuhren` and
  `Gebühren` all read `gebuhren`), in every text alike. Only marks on a Latin letter go: Devanagari vowel signs,
  Arabic and Hebrew pointing and the Cyrillic `й` or `ё` keep theirs (the marks' own rules above); the pointing
  of a Vietnamese word goes with its Latin letter (`Việt` → `viet`), in every Vietnamese text alike.
"""

from __future__ import annotations

import re
import unicodedata
from collections import Counter
from functools import lru_cache

import numpy as np
from numba import njit

from tasks.data.cleanup.lookalikes import look_alike_table
from tasks.data.dedup import hashloops
from tasks.data.dedup.segment import script_table

_POINTS = ("\u0591-\u05bd\u05bf\u05c1\u05c2\u05c4\u05c5\u05c7\u0610-\u061a\u064b-\u065f\u0670\u06d6-\u06dc"
           "\u06df-\u06e4\u06e7\u06e8\u06ea-\u06ed")
_POINTING = re.compile(f"[{_POINTS}]|(?<=[\u0400-\u04ff])\u0301")
_MAYBE_POINTING = re.compile(f"[{_POINTS}\u0301]")     # one class: `re` scans for it at C speed
# starts with its literal, which `re` finds by a fast search (a leading lookbehind for the letter before the
# hyphen made it try every position: 0.47 CPU s for 20,000 documents, ~40 % of their shingles); that letter is
# asked in Python, at the few matches
_HYPHEN_BREAK = re.compile(r"[-\u2010]\n[ \t]*(?=([^\W\d_]))")
_SEARCHED_BREAKS = 8          # `join_hyphenated` searches the text for this many breaks, then indexes its words
_WORD = re.compile(r"\w+")
_LAST_WORD = re.compile(r"\w+$")
_VARIATION_SELECTORS = (range(0xFE00, 0xFE10), range(0xE0100, 0xE01F0))
# (variant, canonical form) for `fold_spelling`, in the order it replaces them
SPELLING: tuple[tuple[str, str], ...] = (
    ("\u0640", ""),                                                   # tatweel
    ("\u0623", "\u0627"), ("\u0625", "\u0627"), ("\u0622", "\u0627"), ("\u0671", "\u0627"),   # أ إ آ ٱ → ا
    ("\u0649", "\u064a"), ("\u0629", "\u0647"),                       # ى → ي, ة → ه
    ("\u06cc", "\u064a"), ("\u06a9", "\u0643"),                       # Persian ی → ي, ک → ك
    ("\u093c", ""), ("\u0929", "\u0928"), ("\u0931", "\u0930"), ("\u0934", "\u0933"),   # nukta, ऩ ऱ ऴ
    ("\u0901", "\u0902"),                                             # chandrabindu → anusvara
    ("\u0451", "\u0435"), ("\u0401", "\u0415"),                       # ё → е, Ё → Е
    # Greek tonos and dialytika (Lucene's GreekLowerCaseFilter): capitals are written without them, and a copy
    # typed without accents shared no word with its original (a probe: 0 of 30 found, J ≤ 0.01)
    *((c, unicodedata.normalize("NFD", c)[0]) for c in "άέήίόύώϊϋΐΰΆΈΉΊΌΎΏΪΫ"),
)
# The decimal digits of other scripts (Arabic-Indic, Persian, Devanagari, Bengali, Thai, …: category Nd outside
# ASCII and the full-width ones NFKC reads) as ASCII digits: NFKC keeps them, and a page's numbers written in
# one script or the other shared no word (a probe's Arabic and Persian copies: 0 of 30 each, J 0.20-0.58)
DIGITS = "".join(c for c in map(chr, range(0x80, 0x10000)) if unicodedata.category(c) == "Nd"
                 and unicodedata.decimal(c, None) is not None and not "\uff10" <= c <= "\uff19")
_DIGIT = re.compile(f"[{DIGITS}]")
_ASCII_DIGITS = str.maketrans({c: str(unicodedata.decimal(c)) for c in DIGITS})


# The combining marks a Latin letter may carry (category Mn of the combining diacritical blocks), and the letters
# whose ASCII spelling is no decomposition (lower case: `fold_latin` reads casefolded text, and the upper case too)
_LATIN_MARKS = "".join(chr(c) for lo, hi in ((0x300, 0x370), (0x1AB0, 0x1B00), (0x1DC0, 0x1E00), (0x20D0, 0x2100),
                                              (0xFE20, 0xFE30)) for c in range(lo, hi)
                       if unicodedata.category(chr(c)) == "Mn")
LATIN_LETTERS = {"ß": "ss", "ẞ": "ss", "æ": "ae", "Æ": "Ae", "œ": "oe", "Œ": "Oe", "ø": "o", "Ø": "O", "ł": "l",
                 "Ł": "L", "đ": "d", "Đ": "D", "ħ": "h", "Ħ": "H", "ı": "i"}
_MARKED_LATIN = re.compile(f"([A-Za-z])[{_LATIN_MARKS}]+")
_MAYBE_MARKED = re.compile(f"[{_LATIN_MARKS}]")


@lru_cache(maxsize=1)
def latin_letters() -> tuple[dict[str, str], re.Pattern[str]]:
    """Every BMP letter that is a Latin letter with combining marks (its NFD an ASCII letter and marks of
    `_LATIN_MARKS`), or one of `LATIN_LETTERS`, with its ASCII spelling, and a pattern that finds where they may
    be: the blocks that hold them all (Latin-1 Supplement to Latin Extended-B, Latin Extended Additional, the
    Ångström sign), whose ranges `re` tests ~3x as fast as the class of the letters themselves (~15 ms once per
    process)."""
    marks = frozenset(_LATIN_MARKS)
    table = dict(LATIN_LETTERS)
    for code in range(0xC0, 0x10000):
        nfd = unicodedata.normalize("NFD", chr(code))
        if len(nfd) > 1 and nfd[0].isascii() and nfd[0].isalpha() and all(m in marks for m in nfd[1:]):
            table[chr(code)] = nfd[0]
    blocks = "\u00c0-\u024f\u1e00-\u1eff\u212b"
    assert all(re.match(f"[{blocks}]", letter) for letter in table)
    return table, re.compile(f"[{blocks}]")


def fold_latin(text: str) -> str:
    """`text` with each Latin letter's diacritics dropped and the letters of `LATIN_LETTERS` spelled in ASCII (see
    the module docstring; `fold_digraphs` reads the digraphs); `text` itself when it holds none. A letter of
    `latin_letters` is replaced by `str.replace`, once per distinct letter the text holds."""
    if not text.isascii():
        table, pattern = latin_letters()
        for letter in set(pattern.findall(text)) & table.keys():
            text = text.replace(letter, table[letter])
        if _MAYBE_MARKED.search(text) is not None:          # a mark left: decomposed, or no precomposed form
            text = unicodedata.normalize("NFC", _MARKED_LATIN.sub(r"\1", unicodedata.normalize("NFD", text)))
    return text


def fold_digraphs(text: str) -> str:
    """`text` with `ae`, `oe`, `ue` (either case) read as `a`, `o`, `u`: each `e` right after one of those vowels
    in `text` dropped (`ValueError` → `ValuError`, as the word loop reads it, `hashloops.word_hashes`), the
    letters written with a look-alike too (Cyrillic `ое`, Greek `σε`: `lookalikes` reads them as `oe` after this
    fold, so a copy salted with them reads as its original). Compiled, over the text's UTF-8 (`_drop_digraph_e`:
    ~3 ns a character; a regex `e` with a lookbehind for the vowel took ~12)."""
    data = bytearray(text.encode("utf-8", "surrogatepass"))
    kept = _drop_digraph_e(np.frombuffer(data, np.uint8), digraph_letters())
    return text if kept == len(data) else data[:kept].decode("utf-8", "surrogatepass")


@lru_cache(maxsize=1)
def digraph_letters() -> np.ndarray:
    """uint8 [65536]: 1 for `e`, `E` and their look-alikes (`lookalikes.look_alike_table`), 2 for `a o u A O U`
    and theirs, 0 for the other characters (BMP; the look-alikes beyond it are mathematical letters NFKC folds)."""
    table = np.zeros(0x10000, np.uint8)
    for code, ascii_ in [*((ord(c), c.lower()) for c in "aouAOUeE"), *look_alike_table().items()]:
        if code < 0x10000 and ascii_ in "aoue":
            table[code] = 1 if ascii_ == "e" else 2
    return table


@njit(cache=True)
def _drop_digraph_e(data, kinds):
    """Move the UTF-8 `data` up over each character of kind 1 (an `e`) right after one of kind 2 (a vowel),
    in place; the length kept."""
    w, i, vowel = 0, 0, False
    while i < len(data):
        c = data[i]
        code, size = (np.int64(c), 1) if c < 128 else hashloops.code_point(data, i)
        kind = kinds[code] if 0 <= code < 0x10000 else 0
        if not (kind == 1 and vowel):
            for k in range(size):
                data[w + k] = data[i + k]
            w += size
        vowel = kind == 2
        i += size
    return w


@lru_cache(maxsize=1)
def latin_bytes() -> np.ndarray:
    """uint16 [65536]: for each BMP character `fold_latin` spells in ASCII, its one or two ASCII bytes (the first
    in the low byte; 0: none), for the compiled word path (`hashloops.blank_non_words`). None is longer than the
    character's UTF-8."""
    table = np.zeros(0x10000, np.uint16)
    for letter, ascii_ in latin_letters()[0].items():
        assert len(ascii_) <= min(2, len(letter.encode()))
        table[ord(letter)] = sum(ord(c) << (8 * k) for k, c in enumerate(ascii_))
    return table


def drop_pointing(text: str) -> str:
    """`text` without Arabic harakat, Hebrew niqqud/cantillation and Cyrillic stress accents, and with the
    spelling variants of `SPELLING` read as one letter (itself when ASCII or without any)."""
    if text.isascii():
        return text
    if _MAYBE_POINTING.search(text) is not None:
        text = _POINTING.sub("", text)
    return fold_spelling(text)


def fold_spelling(text: str) -> str:
    """`text` with every spelling variant of `SPELLING` read as its canonical letter and `DIGITS` as ASCII digits;
    `text` itself when it holds none (ASCII text is not searched). Each is a C-speed `str.replace`, only for the letters the text holds (~1 ns
    a character, against ~75-150 for `str.translate`'s dict lookup per character)."""
    if text.isascii():
        return text
    for variant, canonical in SPELLING:
        if variant in text:
            text = text.replace(variant, canonical)
    return text.translate(_ASCII_DIGITS) if _DIGIT.search(text) is not None else text


@lru_cache(maxsize=1)
def spelling_table() -> np.ndarray:
    """uint8 [65536]: 1 for each character `fold_spelling` replaces (all in the BMP, digits too)."""
    table = np.zeros(0x10000, np.uint8)
    table[[ord(variant) for variant, _ in SPELLING] + [ord(c) for c in DIGITS]] = 1
    return table


def spelling_docs(data: np.ndarray, ends: np.ndarray, docs: np.ndarray) -> list[int]:
    """Which of the texts `docs` (int64 [k], those holding non-ASCII text, as UTF-8 in `data` with a `\\n` after
    each, at `ends`) hold a character `fold_spelling` replaces, or an astral ideograph (a superset: the caller's
    `fold_spelling` leaves those as they are): a compiled scan of their non-ASCII characters
    (`hashloops.docs_holding`, ~0.5 ns a byte)."""
    if len(docs) == 0:
        return []
    return docs[hashloops.docs_holding(data, ends, docs, spelling_table()) == 1].tolist()


def join_hyphenated(text: str) -> str:
    """`text` with each letter-hyphen-line break-lower-case letter (`exam-\\n  ple`; the hyphen `-` or U+2010)
    joined into one word (`example`), unless the text shows the break is a compound's hyphen; `text` itself when
    it has no such break.

    A word cut by the typesetter and a compound that a wrapper broke at its hyphen (`keyword-\\nonly`: Python's
    `textwrap` breaks there) look alike, and which one a break is decides whether its copy (re-wrapped, or as
    one line) shares its shingles. The text itself is the evidence where it has some: the joined word written
    elsewhere (`notebook`) joins; the compound written on one line (`left-hand`), one part of a longer one
    (`angle-addr-\\nstart`), a part of it starting or ending another compound (`non-\\nnegative` in a text that
    says `non-zero`, `left-\\nhand` beside `right-hand`), or both parts written as words elsewhere
    (`decimal-\\npoint` in a text that says `decimal` and `point`) stays two words. Without evidence either way
    — in a 200-word document most cut words occur once — the break is joined: hyphenation at the margin cuts
    many words of a wrapped text (a probe's 72-column copies: 6 of 30 missed at J 0.75-0.80 while only the words
    spelled elsewhere were joined), and a compound lands at the margin rarely, costing its copy ~5 shingles
    where it does. Of the probe's 88 cut words one showed such evidence (`por-\\nque`: `por` and `que` are
    words); of the 291 compounds of `benchmarks/dedup_real.py`'s help texts (re-wrapped by `textwrap`) 140 did
    and stay two words (4 more spell the joined word elsewhere). A capital after the break is a dash that
    interrupts a speech (`to whose falls-\\nHeaven prosper`), not a word cut in two."""
    if "-\n" not in text and "\u2010\n" not in text:
        return text
    low, words, asked = "", None, 0         # the text in lower case and its words, made at the first break asked
    searched: dict[tuple[str, str, bool], bool] = {}

    def join(m: re.Match[str]) -> str:
        nonlocal low, words, asked
        at = m.start()
        if not (at and text[at - 1].isalpha() and m.group(1).islower()):
            return m.group()
        head, tail = _LAST_WORD.search(text, max(0, at - 64), at), _WORD.match(text, m.end())
        if not (head and tail):
            return m.group()
        low = low or text.lower()
        first, second = head.group().lower(), tail.group().lower()
        # part of a longer compound (`angle-addr-\nstart`)
        longer = text[head.start() - 1:head.start()] in ("-", "\u2010")
        asked += 1
        # A text's first breaks are searched for (`str.find`, C speed: most texts have one or two, and indexing
        # their words cost more); past those its words are indexed once, as a search per break is quadratic. A
        # lower-cased `İ` (`i` and a combining dot) is no `\w` word, which the index cannot look up.
        if asked <= _SEARCHED_BREAKS or _WORD.fullmatch(first + second) is None:
            # (each distinct break searched for once: `İ-\nb` repeated was quadratic still)
            key = (first, second, longer)
            if key not in searched:
                searched[key] = _compound_found(low, first, second, longer)
            return m.group() if searched[key] else ""
        words = words or _TextWords(low)
        return m.group() if words.compound(first, second, longer) else ""
    joined = _HYPHEN_BREAK.sub(join, text)
    return text if joined == text else joined


class _TextWords:
    """The words (`\\w` runs) of a lower-cased text, counted, and its one-line compounds of two (`left-hand`), for
    `join_hyphenated`'s evidence looked up rather than searched for (a `str.find` loop over the text per break:
    10,000 breaks took 3 s, 20,000 13 s). A word written whole is a whole `\\w` run, so for `\\w` words the
    answers are exactly `_compound_found`'s."""

    def __init__(self, low: str) -> None:
        spans = [m.span() for m in _WORD.finditer(low)]
        words = [low[start:end] for start, end in spans]
        self.counts = Counter(words)
        # (word, `-` or U+2010, next word) for each two words with only that hyphen between them
        self.pairs = {(words[i], low[end], words[i + 1]) for i, (_, end) in enumerate(spans[:-1])
                      if spans[i + 1][0] == end + 1 and low[end] in "-\u2010"}
        self.heads = {a for a, hyphen, _ in self.pairs if hyphen == "-"}      # `first-x` (`_in_compound`)
        self.tails = {b for _, hyphen, b in self.pairs if hyphen == "-"}      # `x-second`

    def compound(self, first: str, second: str, longer: bool) -> bool:
        """`_compound_found`, for `\\w` words `first` and `second`."""
        if self.counts[first + second]:
            return False
        return longer or (first, "-", second) in self.pairs or (first, "\u2010", second) in self.pairs \
            or first in self.heads or second in self.tails or self.counts[first] >= 2 and self.counts[second] >= 2


def _compound_found(low: str, first: str, second: str, longer: bool) -> bool:
    """Whether the text (`low`, lower case) shows a break of `first` and `second` is a compound's hyphen: not
    when it writes the joined word; when the break ends a longer compound (`longer`), the compound is written
    hyphenated on one line, a part of another compound on one line (`non-zero`, `right-hand`), or both parts
    words elsewhere (the break holds each once)."""
    if _written(low, first + second):
        return False
    return longer or _written(low, f"{first}-{second}") or _written(low, f"{first}\u2010{second}") \
        or _in_compound(low, first, second) or _written(low, first, 2) and _written(low, second, 2)


def _written(text: str, word: str, times: int = 1) -> bool:
    """Whether `word` occurs in `text` as a whole (no `\\w` character on either side) `times` times or more, by a
    `str.find` loop over `text` (a text's first breaks, and the words `_TextWords` cannot look up)."""
    at = text.find(word)
    while at >= 0:
        end = at + len(word)
        if not (at and (text[at - 1].isalnum() or text[at - 1] == "_")) \
                and not (end < len(text) and (text[end].isalnum() or text[end] == "_")):
            times -= 1
            if not times:
                return True
        at = text.find(word, at + 1)
    return False


def _in_compound(text: str, first: str, second: str) -> bool:
    """Whether `text` writes `first` as the first part of a hyphenated compound on one line (`first-x`), or
    `second` as the last (`x-second`)."""
    def word(at: int) -> bool:
        return 0 <= at < len(text) and (text[at].isalnum() or text[at] == "_")
    at = text.find(first + "-")
    while at >= 0:
        if not word(at - 1) and word(at + len(first) + 1):
            return True
        at = text.find(first + "-", at + 1)
    at = text.find("-" + second)
    while at >= 0:
        if word(at - 1) and not word(at + len(second) + 1):
            return True
        at = text.find("-" + second, at + 1)
    return False


def hyphenated_docs(data: np.ndarray, ends: np.ndarray, newlines: np.ndarray | None = None) -> list[int]:
    """Which texts of a batch (UTF-8 bytes `data`, a `\\n` after each, at `ends`; `newlines`: where `data` is
    `\\n`, when the caller has them) hold a hyphen (`-` or U+2010) directly before a line break, after an ASCII
    letter or a non-ASCII byte: a superset of those `join_hyphenated` changes (numpy passes over the bytes;
    `--\\n`, ` -\\n` and `x = y -\\n` in code are not asked)."""
    at = (np.flatnonzero(data == 10) if newlines is None else newlines) - 1          # the byte before each `\n`
    at = at[at >= 1]
    last = data[at]
    wide = at[(last == 0x90) & (at >= 3)]                 # U+2010 is E2 80 90: its first byte two before
    wide = wide[(data[wide - 1] == 0x80) & (data[wide - 2] == 0xE2)] - 2
    at = np.concatenate([at[last == 45], wide[wide >= 1]])
    before = data[at - 1] | np.uint8(0x20)
    at = at[(before >= 0x80) | ((before >= 0x61) & (before <= 0x7A))]
    return sorted(set(np.searchsorted(ends, at).tolist())) if len(at) else []


def _marks() -> list[int]:
    """Code points of category Mn/Mc outside `segment.SCRIPT_RANGES`, but the variation selectors, which select a
    glyph and join no word (`❤️`'s U+FE0F was a word of its own). They live in planes 0, 1 and 14 (the
    variation selectors supplement), as the format characters do (`normalize._format_codes`; a test scans every
    plane): reading only those is ~0.05 s once per process instead of ~0.3."""
    table = script_table()
    return [c for plane in (0, 1, 14) for c in range(max(plane << 16, 0x300), (plane + 1) << 16)
            if unicodedata.category(chr(c)) in ("Mn", "Mc") and not (c < 0x10000 and table[c])
            and not any(c in r for r in _VARIATION_SELECTORS)]


@lru_cache(maxsize=1)
def mark_words() -> tuple[np.ndarray, re.Pattern[str]]:
    """The marks that join their word: as a uint8 [65536] table (1 for a BMP one) and the astral path's word
    regex (`\\w` or one of them; built once per process, ~0.3 s)."""
    codes = _marks()
    table = np.zeros(0x10000, np.uint8)
    table[[c for c in codes if c < 0x10000]] = 1
    return table, re.compile("[\\w" + "".join(re.escape(chr(c)) for c in codes) + "]+")
