"""Text normalization for the clean stage, and the key that exact deduplication compares.

`normalize_text` is what every later stage sees, so it must be safe for source code as well as prose:
- line breaks: `\\r\\n`, `\\r` and the other breaks `str.splitlines` knows (`\\f`, `\\v`, NEL, U+2028/9) → `\\n`;
- invisible characters are removed: C0/C1 controls except `\\t` and `\\n`, DEL, zero-width space, word joiner,
  BOM, soft hyphen, Mongolian vowel separator. ZWJ/ZWNJ and the LRM/RLM marks are kept where they can carry
  meaning (they change how Persian, Indic scripts and emoji sequences render, and the direction next to Hebrew or
  Arabic), and removed between two ASCII characters (not spaces), where they only hide a word or a number;
- exotic spaces (NBSP, en/em/thin spaces, ideographic space, …) → an ASCII space;
- Unicode normalization (`NFC` or `NFKC`), applied after the removals so that a removed character between a
  base letter and its combining mark cannot leave an uncomposed pair behind;
- trailing spaces/tabs of every line are stripped, runs of more than two blank lines become two (PEP 8 puts two
  blank lines between top-level definitions), leading blank lines and trailing whitespace of the document go.
Runs of spaces *inside* a line and leading indentation are kept: collapsing them would re-indent code and break
aligned tables and comments. The function is idempotent.

`exact_key` is deliberately more aggressive (NFKC, casefold, all whitespace runs → one space, ends stripped) and
returns a digest, not text: two documents that differ only in case, compatibility forms or layout are exact
duplicates for deduplication, although `normalize_text` keeps them different.

`shingle_text` folds a document for near dedup's shingles only (what is compared, never what is kept): HTML
markup read as its visible text (escaped markup, as in an RSS item's body, too), HTML entities decoded (escaped
up to three times over), markdown links, list numbers, reference links, wiki citation markers, BBCode and
MediaWiki source, emphasis underscores and footnote superscripts read as the text they mark (`textmarks`),
apostrophe look-alikes as `'`, invisible format characters (Unicode category Cf, ZWJ/ZWNJ included) and
variation selectors dropped, NFKC and casefold, Latin letters without their diacritics and German digraphs as
their vowel (`marks.fold_latin`, `fold_digraphs`), look-alike letters read as Latin (`lookalikes`), and for
char shingles typographic quotes and dashes as ASCII. Without it a copy whose apostrophes became `&#39;`
or whose words carry a ZWJ shares almost no word 5-gram with its original, and full-width letters or ligatures
defeat near dedup as soon as the copy also differs by a footer (exact dedup folds them, but only for otherwise
identical texts).
"""

from __future__ import annotations

import hashlib
import html
import re
import unicodedata
from functools import lru_cache
from typing import Literal

from tasks.data.cleanup.lookalikes import fold_confusables, look_alike_table
from tasks.data.cleanup.textmarks import (fold_apostrophes, fold_emphasis, fold_footnotes, fold_fullwidth,
                                          fold_html_footnotes, fold_markdown_links, fold_marks, fold_source_marks)
from tasks.data.dedup.feeds import feed_items, is_feed
from tasks.data.dedup.marks import fold_digraphs, fold_latin
from tasks.data.html_limits import without_attribute_floods

NormalForm = Literal["NFC", "NFKC", "none"]


def _control_table() -> dict[int, str | None]:
    table: dict[int, str | None] = {}
    for code in [*range(0x00, 0x20), 0x7F, *range(0x80, 0xA0)]:    # C0, DEL, C1 controls: removed ...
        table[code] = None
    for code in (0x09, 0x0A):                                          # ... except tab and newline
        del table[code]
    for code in (0x0B, 0x0C, 0x0D, 0x1C, 0x1D, 0x1E, 0x85):          # the controls splitlines() breaks on
        table[code] = "\n"
    return table


# The C0/C1 control characters (and DEL) as a str.translate table: removed, except tab and newline, which are
# kept, and the line-breaking controls, which become a newline. Ingest applies it to every kept record.
CONTROL_CHARS: dict[int, str | None] = _control_table()
_CONTROL_RE = re.compile("[" + "".join(re.escape(chr(c)) for c in sorted(CONTROL_CHARS)) + "]")


def strip_control_chars(text: str) -> tuple[str, int]:
    """`text` with CONTROL_CHARS applied, and how many control characters it held (0: `text` unchanged)."""
    if _CONTROL_RE.search(text) is None:  # the common case costs one scan and no copy
        return text, 0
    return text.translate(CONTROL_CHARS), sum(1 for _ in _CONTROL_RE.finditer(text))


# Characters that draw nothing and are neither whitespace nor category Cf (format: zero-width spaces and joiners,
# bidi controls, BOM, tag characters): the combining grapheme joiner, variation selectors, the Hangul fillers.
_BLANK_MARKS = frozenset([0x034F, 0x115F, 0x1160, 0x3164, 0xFFA0, *range(0xFE00, 0xFE10), *range(0xE0100, 0xE01F0)])


def invisible_only(text: str) -> bool:
    """True when `text` holds nothing visible: only whitespace, format characters (Cf) and `_BLANK_MARKS`. Such
    a "document" (`\u200b\u200d`, a run of bidi overrides) would train on nothing. Stops at the first visible
    character, so a real document costs a few character tests."""
    return all(c.isspace() or ord(c) in _BLANK_MARKS or unicodedata.category(c) == "Cf" for c in text)


def _translation_table() -> dict[int, str | None]:
    table = dict(CONTROL_CHARS)
    for code in (0x2028, 0x2029):                                      # the other breaks splitlines() knows
        table[code] = "\n"
    for code in (0x200B, 0x2060, 0xFEFF, 0x00AD, 0x180E):             # zero-width / invisible
        table[code] = None
    for code in (0x00A0, 0x1680, *range(0x2000, 0x200B), 0x202F, 0x205F, 0x3000):  # space-like
        table[code] = " "
    return table


TRANSLATION_TABLE = _translation_table()
_TABLE_CHARS = re.compile("[" + "".join(re.escape(chr(c)) for c in sorted(TRANSLATION_TABLE)) + "]")
# tried only where a run starts: `[ \t]+$` ran from each space of a run not ending a line to its end (quadratic)
_TRAILING_SPACE = re.compile(r"(?<![ \t])[ \t]+$", re.MULTILINE)
_MANY_BLANK_LINES = re.compile(r"\n{4,}")          # 4 newlines = 3 blank lines


# ZWNJ, ZWJ, LRM and RLM between two ASCII characters other than a space shape nothing there (they join or part
# letters of Persian and Indic scripts and emoji, and set direction beside Hebrew or Arabic); inside ASCII they
# hide what a token is: `john.doe\u200c@example.com` or `415\u200d555\u200e2671` escaped PII scrubbing. ZWNJ and
# ZWJ join nothing beside an ASCII space either (`4111 1111\u200c 1111 1111`); LRM/RLM there can still order a
# Hebrew or Arabic line's neutrals, so they stay. So do the other invisible characters that mean something only
# beside other scripts or emoji and hid PII from clean the same way (a hostile-input probe: `4111\u20631111…`,
# `123\ufe00-45-6789`, `john\u034f.doe@…` kept unredacted): the combining grapheme joiner, the invisible
# operators U+2061–2064, bidi embeddings, overrides and isolates, variation selectors and tag characters.
_HIDERS = "\u034f\u2061-\u2064\u202a-\u202e\u2066-\u2069\ufe00-\ufe0f\U000e0000-\U000e007f\U000e0100-\U000e01ef"
_JOINERS = re.compile(f"[\u200c-\u200f{_HIDERS}]")
_JOINERS_IN_ASCII = re.compile(f"(?<=[ -~])[\u200c\u200d]+(?=[ -~])|(?<=[!-~])[\u200c-\u200f{_HIDERS}]+(?=[!-~])")


def _translated(m: re.Match[str]) -> str:
    return TRANSLATION_TABLE[ord(m.group())] or ""


def joiners_in(text: str) -> bool:
    """Whether `text` holds a ZWNJ, ZWJ, LRM, RLM or another of `_HIDERS`, which `normalize_text` removes between
    ASCII characters (the batch paths leave such text to `normalize_text` and `exact_key` themselves)."""
    return _JOINERS.search(text) is not None


def table_chars_in(text: str) -> bool:
    """Whether `text` holds a character `normalize_text` removes or replaces (a control, an exotic space, ...)."""
    return _TABLE_CHARS.search(text) is not None


def normalize_text(text: str, form: NormalForm = "NFC") -> str:
    """Normalize `text` for training: see the module docstring for the exact rules."""
    # Each step is skipped where it cannot change the text (one scan, no copy): `str.translate` looks every
    # character up in a dict once any character is not ASCII, and `[ \t]+$` is tried at every space.
    text = text.replace("\r\n", "\n")
    if _TABLE_CHARS.search(text) is not None:    # (a regex pass: `translate` looks up every character, ~60 ns)
        text = _TABLE_CHARS.sub(_translated, text)
    if form != "none":
        text = unicodedata.normalize(form, text)
    # (after NFKC, which may make the neighbours ASCII: `a\u200c𝐚` → `a\u200ca`, removed in the same call)
    if not text.isascii() and joiners_in(text):
        text = _JOINERS_IN_ASCII.sub("", text)
    return normalize_layout(text)


def normalize_layout(text: str) -> str:
    """`normalize_text`'s line rules alone: trailing spaces/tabs of every line stripped, runs of blank lines
    cut to two, leading blank lines and trailing whitespace of the document removed. On ASCII text without
    control characters this is all `normalize_text` changes (no CR, no table character, NFC/NFKC the identity);
    the batch form compiles these rules with the table's (`textscan.normalize_simple`)."""
    if " \n" in text or "\t\n" in text or text.endswith((" ", "\t")):   # `$`: before a newline or at the end
        text = _TRAILING_SPACE.sub("", text)
    if "\n\n\n\n" in text:
        text = _MANY_BLANK_LINES.sub("\n\n\n", text)
    return text.lstrip("\n").rstrip()


def exact_key(text: str) -> str:
    """A 32-hex-digit digest of `text` folded for exact dedup (case, compatibility forms and layout ignored)."""
    folded = unicodedata.normalize("NFKC", normalize_text(text, "NFKC").casefold())
    # a lone surrogate (a JSON `\ud800` that reached clean) is hashed as `exact_keys` encodes it, not raised on
    return hashlib.blake2b(" ".join(folded.split()).encode("utf-8", "surrogatepass"), digest_size=16).hexdigest()


@lru_cache(maxsize=1)
def format_chars() -> tuple[dict[int, None], re.Pattern[str]]:
    """Every Unicode format character (category Cf: soft hyphen, ZWSP, ZWJ/ZWNJ, bidi marks, word joiner, BOM,
    tag characters, …) as a `str.translate` table that deletes it, and a pattern that finds where one may be.

    Derived from `unicodedata` (~0.15 s, once per process) rather than listed, so it follows the Unicode version
    NFKC uses. The pattern holds the BMP ones and *any* astral character: `re` tests that class with a bitmap
    and one range (~5 ns a character) where the exact class with its astral ranges took ~20 and `translate`,
    a dict lookup per character, ~60; so the table is only applied to the rare text that needs it."""
    table = {c: None for c in _format_codes()}
    bmp = "".join(re.escape(chr(c)) for c in sorted(table) if c <= 0xFFFF)
    return table, re.compile(f"[{bmp}\U00010000-\U0010ffff]")


# Variation selectors (Mn, not Cf) draw nothing either: VS16 makes `❤️` an emoji, keycaps are `1️⃣`, the
# supplement picks an ideograph's glyph. Word shingles read a mark as part of its word, so a selector after an
# emoji or a digit was a word of its own (a copy adding emoji with VS16: J 0.67, 30 of 44 found).
VARIATION_SELECTORS = (*range(0xFE00, 0xFE10), *range(0xE0100, 0xE01F0))
# Letters Unicode marks default-ignorable (DerivedCoreProperties): the Hangul fillers (U+115F, U+1160, U+3164,
# U+FFA0, category Lo) and Khmer's inherent vowels (U+17B4/5, Mn) draw nothing in most fonts, and spam puts them
# inside words to hide a copy (one per word: J 0.01, 0 of 50 copies found).
IGNORABLE_LETTERS = (0x115F, 0x1160, 0x17B4, 0x17B5, 0x3164, 0xFFA0)


@lru_cache(maxsize=1)
def invisible_chars() -> tuple[dict[int, None], re.Pattern[str]]:
    """What `shingle_text`'s `invisible` fold drops: the format characters (`format_chars`), the variation
    selectors and the default-ignorable letters, as a `str.translate` table and a pattern that finds where one
    may be (any astral character included, as `format_chars`' does)."""
    table, _ = format_chars()
    table = {**table, **dict.fromkeys(VARIATION_SELECTORS), **dict.fromkeys(IGNORABLE_LETTERS)}
    bmp = "".join(re.escape(chr(c)) for c in sorted(table) if c <= 0xFFFF)
    return table, re.compile(f"[{bmp}\U00010000-\U0010ffff]")


def _format_codes() -> list[int]:
    """The code points of category Cf. They live in planes 0, 1 and 14 (planes 2-3 are ideographs, 15-16
    private use, the rest unassigned, in every Unicode version so far; a test compares with a scan of all of
    them), and blocks of 256 that are all printable hold none: so ~0.1 s instead of ~0.75 s for every code point,
    once per process (a clean worker's fixed cost)."""
    found = []
    for plane in (0, 1, 14):
        for lo in range(plane << 16, (plane + 1) << 16, 256):
            if not "".join(map(chr, range(lo, lo + 256))).isprintable():
                found += [c for c in range(lo, lo + 256) if unicodedata.category(chr(c)) == "Cf"]
    return found


# Typographic quotes, primes and dashes NFKC keeps, as ASCII (ftfy's `uncurl_quotes` and its dashes): only char
# shingles see punctuation, word shingles drop it either way.
TYPOGRAPHIC = (("\u2018", "'"), ("\u2019", "'"), ("\u201a", "'"), ("\u201b", "'"), ("\u2032", "'"),
               ("\u201c", '"'), ("\u201d", '"'), ("\u201e", '"'), ("\u201f", '"'), ("\u2033", '"'),
               ("\u2010", "-"), ("\u2012", "-"), ("\u2013", "-"), ("\u2014", "-"), ("\u2015", "-"),
               ("\u2212", "-"))


# Tags of HTML elements: a text with MARKUP_MIN of them is markup left in (a raw page, a scraped body). One
# named element, not any `<...>`, so that `a<b and c>d` in code or maths is not read as a tag.
_HTML_TAG = re.compile(r"</?(?:a|abbr|article|aside|b|blockquote|body|br|button|center|code|dd|div|dl|dt|em|"
                       r"figcaption|figure|font|footer|form|h[1-6]|head|header|hr|html|i|iframe|img|input|label|"
                       r"li|link|main|meta|nav|noscript|ol|option|p|pre|script|section|select|small|span|strong|"
                       r"style|sub|sup|table|tbody|td|th|thead|title|tr|u|ul)(?=[\s/>])[^<>]{0,2000}>", re.I)
MARKUP_MIN = 3
# A page read as HTML keeps its visible text only when that holds a word shingle's worth of words (the default
# shingle size): a code template (`<ul><li *ngFor="let item of items" (click)="select(item)">`, a form, a nav bar)
# shows a few words or none, and read as its visible text every such template shingled alike (one empty shingle:
# any two at J = 1, near duplicates of each other). Its markup is then its content, shingled as written.
VISIBLE_MIN_WORDS = 5
_WORD = re.compile(r"\w+")


def mostly_text(visible: str) -> bool:
    """Whether `visible` (a page's text, `shingle_text`'s markup step) has VISIBLE_MIN_WORDS words."""
    return sum(1 for _ in zip(range(VISIBLE_MIN_WORDS), _WORD.finditer(visible))) == VISIBLE_MIN_WORDS


# Where `html.unescape` can change anything: every named reference starts with a letter, every numeric one with
# `#`. Code is full of `&&` and `&=`, which made `unescape` (a regex pass calling Python per `&`) run on most of it.
_ENTITY_START = re.compile(r"&[#A-Za-z]")


def entity_in(text: str) -> bool:
    """Whether `html.unescape` could change `text` (an `&` before a letter or `#`)."""
    return _ENTITY_START.search(text) is not None


# Escaping rounds `_unescaped` undoes: a feed re-encoded by a CMS holds `&amp;quot;` (twice) and `&amp;amp;lt;`
# (three times); decoded once, each left `&quot;` or `&amp;lt;` as a word of its own (`quot`, `amp`, `lt`), and
# a copy escaped twice shared J 0.29 with its original (median; recall 0 in the dedup audit).
ENTITY_ROUNDS = 3


def _unescaped(text: str) -> str:
    """`text` with HTML entities decoded until none is left or a round changes nothing, at most ENTITY_ROUNDS
    rounds. `AT&amp;T` stops at `AT&T` (a second round finds no reference to decode)."""
    for _ in range(ENTITY_ROUNDS):
        if "&" not in text or not entity_in(text):
            break
        decoded = html.unescape(text)
        if decoded == text:
            break
        text = decoded
    return text


# An HTML tag escaped as text, once or more (`&lt;p&gt;`, `&lt;/div&gt;`, `&amp;lt;span`): an RSS or Atom item's
# body is its page's HTML escaped (`feed_markup`).
_ESCAPED_TAG = re.compile(r"&(?:amp;){0,2}lt;/?[a-z]", re.I)


def feed_markup(text: str) -> str:
    """`text` with its escaped HTML tags decoded, so that the markup step reads it as the page it escapes:
    `&lt;p&gt;Hello&lt;/p&gt;` → `<p>Hello</p>`. One escaping round at a time, while no round has made it markup
    and escaped tags are left (at most ENTITY_ROUNDS); `text` itself when it holds no escaped tag.

    A text that already has markup is a page whose escaped tags are its visible text (an HTML tutorial's
    `<code>&lt;b&gt;</code>`): it is left as it is, for the markup step to decode those as text."""
    for _ in range(ENTITY_ROUNDS):
        if "&" not in text or _ESCAPED_TAG.search(text) is None or has_markup(text):
            break
        text = html.unescape(text)
    return text


def has_markup(text: str) -> bool:
    """True when `text` holds at least MARKUP_MIN HTML element tags."""
    if "<" not in text or text.count("<") < MARKUP_MIN:   # each tag holds its own `<` (no regex below that)
        return False
    found = _HTML_TAG.finditer(text)
    return all(next(found, None) is not None for _ in range(MARKUP_MIN))


def shingle_text(text: str, entities: bool = True, invisible: bool = True, unicode: bool = True,
                 quotes: bool = False, markup: bool = True, confusables: bool = True, marks: bool = True) -> str:
    """`text` folded for near-dedup shingling (see the module docstring); each fold can be turned off.
    `quotes`: typographic quotes and dashes → ASCII too (`TYPOGRAPHIC`; for char shingles).
    `markup`: a text holding HTML tags (`has_markup`), or only escaped ones (`feed_markup`: an RSS item's body),
    is read as HTML, its visible text kept (an RSS or Atom file as its items' titles and bodies, `feeds`); a
    markdown link or image to a URL or path as its text (`[Paris](https://en.wikipedia.org/wiki/Paris)` →
    `Paris`; full-width, `textmarks.fold_fullwidth`, too), and so are reference links, numbered-list
    numbers, wiki citation markers, BBCode and MediaWiki source (`textmarks.fold_marks`, `fold_source_marks`;
    `marks` False: the caller knows the text holds none, `textmarks.marked_docs`), emphasis underscores and
    footnote superscripts (`fold_emphasis`, `fold_footnotes`; a page's `<sup>` markers before its text is read).
    `invisible`: format characters (Cf), variation selectors and ignorable letters dropped (`invisible_chars`).
    `unicode`: NFKC and casefold, apostrophe look-alikes as `'`, Latin diacritics and German digraphs
    (`marks.fold_latin`).
    `confusables`: look-alike letters → the ASCII letters they imitate, in every text (`fold_confusables`)."""
    text = fold_fullwidth(text) if markup else text     # (a full-width link read as one before the link folds)
    if markup and "<" in text and is_feed(text) and (entities and entity_in(text) or has_markup(text)):
        text = feed_items(text)     # a whole feed: its items' HTML, each escaped body decoded once (`feeds`)
    elif markup and entities and "&" in text:
        # an RSS item's body is its page escaped (`&lt;p&gt;&lt;span class="c3"&gt;Hello`): decoded after the markup
        # step, its tags were words (`p`, `span`, `class`; J 0.57); decoded first, it is read as the page
        text = feed_markup(text)
    if markup:
        # each link's URL is ~6 words (`https en wikipedia org wiki paris`) that its plain copy lacks: a copy
        # with a link in every 20th word shared too few shingles (1 of 20 copies found); list numbers,
        # reference links and citation markers are a token one extraction writes and another not (`textmarks`)
        text = fold_markdown_links(text)
        text = fold_source_marks(fold_marks(text)) if marks else text
    if markup and has_markup(text):
        # resiliparse's plain-text pass (script/style and comments dropped, entities decoded): a copy that kept
        # its `<div class="article-body">` otherwise gains a "word" per tag and attribute and loses its shingles
        from resiliparse.extract.html2text import extract_plain_text

        # (a `<sup>1</sup>` footnote marker: the plain text glues it to its word, `river1`)
        # (a tag's flood of attributes is dropped first: the parser's time grows with the square of their count)
        visible = extract_plain_text(fold_html_footnotes(without_attribute_floods(text)[0]), main_content=False,
                                     preserve_formatting=False, alt_texts=False)
        text = visible if mostly_text(visible) else text
    # Entities first: `&rsquo;`, `&nbsp;` decode to non-ASCII characters the later folds then see. Decoding is
    # safe for comparison even in code (both documents of a pair are folded alike; the kept text is untouched).
    if entities and "&" in text and entity_in(text):
        text = _unescaped(text)
    # before NFKC, which makes `´` a space and a mark and `workers¹` the word `workers1`
    text = fold_apostrophes(text) if unicode else text
    text = fold_footnotes(text) if markup else text
    if text.isascii():          # the common case: no format character, NFKC and casefold are the identity
        return fold_words(text, unicode, markup)     # (lowercase: the shingler lowercases ASCII itself)
    if invisible:
        table, maybe = invisible_chars()
        if maybe.search(text) is not None:
            text = text.translate(table)
    if unicode:                 # NFKC_Casefold's recipe (as exact_key): casefold can un-normalize, so NFKC again;
        text = _nfkc(text)      # the quick check (~4× cheaper than normalizing) skips text already in NFKC
    if unicode:
        text = _nfkc(text.casefold())
    text = fold_words(text, unicode, markup)
    if confusables:             # after NFKC, which folds full-width and mathematical letters, and casefold (`ς`)
        text = fold_confusables(text)
    if quotes:                  # one C-speed scan per character kind (~1 ns a character each); translate's dict
        for curly, plain in TYPOGRAPHIC:    # lookup per character was ~60
            if curly in text:
                text = text.replace(curly, plain)
    return text


def fold_words(text: str, unicode: bool = True, markup: bool = True) -> str:
    """`shingle_text`'s folds of the words of a text in NFKC (and casefolded, or simple characters only): with
    `unicode` apostrophe look-alikes as `'` (`textmarks.fold_apostrophes`; `ʼ` is a letter) and Latin letters
    without their diacritics (`marks.fold_latin`), with `markup` emphasis underscores read as their text
    (`textmarks.fold_emphasis`), with `unicode` German digraphs as their vowel (`marks.fold_digraphs`). In this
    order, the one the compiled word path reads them in (`wordfolds`)."""
    text = fold_latin(fold_apostrophes(text)) if unicode else text
    text = fold_emphasis(text) if markup else text
    return fold_digraphs(text) if unicode else text


def _nfkc(text: str) -> str:
    return text if unicodedata.is_normalized("NFKC", text) else unicodedata.normalize("NFKC", text)


_WORD_CHAR = re.compile(r"\w")
_JAMO = (range(0x1100, 0x1200), range(0xA960, 0xA980), range(0xD7B0, 0xD800))   # conjoining: they compose


@lru_cache(maxsize=1)
def simple_chars() -> bytes:
    """Per BMP code point, 2 for a word character (`\\w`) and 1 for another one that every fold here leaves as
    it is — NFKC, casefold and lower case keep it, it is no format, table or look-alike character, no combining
    mark and no conjoining jamo (nothing composes with it) —, 0 otherwise (ASCII included: callers test it
    apart). A text whose non-ASCII characters are all simple (typographic quotes and dashes, lower-case
    accented letters, ...) needs no per-character fold: its NFKC + casefold is its ASCII letters in lower case.
    Built once per process from `unicodedata` (~0.1 s)."""
    excluded = {*TRANSLATION_TABLE, *format_chars()[0], *look_alike_table()}
    table = bytearray(0x10000)
    for code in range(0x80, 0x10000):
        if code in excluded or 0xD800 <= code < 0xE000 or any(code in r for r in _JAMO):
            continue
        char = chr(code)
        if unicodedata.combining(char) or unicodedata.category(char)[0] == "M":
            continue
        if unicodedata.normalize("NFKC", char) != char or char.casefold() != char or char.lower() != char:
            continue
        table[code] = 2 if _WORD_CHAR.match(char) else 1
    return bytes(table)
