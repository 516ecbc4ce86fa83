"""Markdown and wiki marks that near dedup's shingles read as the text they mark (`DedupSpec.fold_markup`, in
`normalize.shingle_text`; never the kept text). Each is a token or a URL one extraction of a page writes and
another does not, so the copies of one text differed in it throughout:

- a markdown link or image to a URL or path reads as its text (`[Paris](https://…)` → `Paris`), also when the
  text wraps onto a second line or the target holds one level of parentheses (`/wiki/Mercury_(planet)`);
- a reference-style link (`[Paris][1]`, `[Paris][]`) reads as its text where the text defines its label
  (`[1]: https://…` on a line of its own), and those definition lines are not read: a copy with four of them
  was at J 0.67-0.90 (7 of 34 found);
- a numbered list item (`1. Mix the flour`, `2) Bake`, a keycap `1️⃣ Mix`) reads as its item: html2text
  writes an `<ol>` as `1. Mix` where another extractor writes `• Mix`, and the numbers were a word in every line's
  5-grams (J 0.37-0.86 on recipes and product pages, 1 of 8 found). Only 1-3 digits, then `.` or `)` and a
  space, then no digit, at a line's start: a year, `3.14` or `1. 2. 3.` starts no item;
- a wiki citation marker right after a word or punctuation (`river.[12]`, `[a]`, `[note 3]`,
  `[citation needed]`, `[edit]`), in a text that has one after punctuation or a `[… needed]` one: a mirror that
  strips them shared J 0.76-0.98 with the page (8 of 11 found). Code's `a[12]` is left alone: it has no marker
  after punctuation (`.[1]`), and one at a line's start is a reference list's entry, not a marker;
- forum and wiki source (`fold_source_marks`): BBCode tags (`[b]`, `[/i]`, `[url=https://…]`, `[quote="Ann"]`,
  `[*]`) read as nothing where the text closes a tag of that name somewhere (`[/b]`: code's `m[b]` or `a[i]` has
  no `[/i]`), `[img]…[/img]` with its URL; in MediaWiki source (a `[[link]]` in it) a link reads as its
  label (`[[Paris (city)|Paris]]` → `Paris`, `[[Seine]]` → `Seine`), templates (`{{cite web|…}}`, nested) and
  `<ref>…</ref>` footnotes as nothing, `''italic''` and `'''bold'''` as their text. The rendered page shows none
  of it, and a source copy differed by a URL or a citation every few words (a probe: J 0.54-0.97, 20 of 72 found);
- emphasis underscores (`fold_emphasis`): markdown's `_italic_` and `__bold__` read as their text, the `_` or
  `__` opening after no word character and closing before none, on one line (`__init__` too, in every text
  alike); a `_` inside a word (`snake_case`) or on one side only (`_private`, `a_(b)`) is kept. `_` is a word
  character, and `_italic_` was a word no plain copy has (J 0.51-0.93, 17 of 36 found);
- footnote superscripts right after a letter (`workers¹²`, `fold_footnotes`: NFKC made it the word `workers12`;
  `<sup>1</sup>` in a page, before its text is read, which glued it to the word the same way), and apostrophe
  look-alikes (`fold_apostrophes`): the modifier letters `ʼ ʹ ʻ` (letters: `donʼt` was one word) and the acute
  accent `´` (NFKC makes it a space and a combining mark) read as `'` wherever they are (a prime `′` or a backtick
  is no word character: only char shingles see it, and they read `′` as `'` already, `normalize.TYPOGRAPHIC`).
"""

from __future__ import annotations

import re

import numpy as np

# A markdown link or image, `[text](target "title")`, whose target is a URL or a path (`https://`, `www.`, `/`,
# `./`, `../`, `#`, `mailto:`): code's `handlers[key](request)` has no such target and is left alone. Its text
# may wrap onto a second line (`[the Seine\nriver](https://…)`, as text filled to 80 columns has it: such a copy
# shared J 0.31 with the same links unwrapped, in the dedup audit), not past a blank line (markdown ends the
# link there).
# the target may hold one level of balanced parentheses: Wikipedia's `/wiki/Mercury_(planet)`, every
# disambiguated title (without them such links stayed whole: a copy with 3 in 70 words was at J 0.63)
_TARGET = r"(?:[a-z][a-z0-9+.-]{1,15}://|www\.|\.{0,2}/|#|mailto:)"
_MD_LINK = re.compile(r"!?\[([^\[\]\n]{0,500}(?:\n[^\[\]\n]{0,500})?)\]"
                      rf"\((?:<?{_TARGET}"
                      r"(?:[^()\s]|\([^()\s]{0,200}\)){0,2000}>?)(?:\s+\"[^\"\n]{0,300}\")?\)", re.I)
# `[label]: target "title"` on a line of its own (up to 3 spaces in, as CommonMark allows); `\n` first, which `re`
# finds by a fast search (the text's first line is read with a `\n` put before it)
_REF_DEFINITION = re.compile(rf"\n {{0,3}}\[([^\[\]\n]{{1,100}})\]:[ \t]*<?{_TARGET}[^\s>]*>?"
                             r"(?:[ \t]+(?:\"[^\"\n]*\"|'[^'\n]*'|\([^()\n]*\)))?[ \t]*(?=\n|$)", re.I)
_REF_LINK = re.compile(r"!?\[([^\[\]\n]{1,500})\]\[([^\[\]\n]{0,100})\]")
# up to 4 spaces or tabs in (what `marked_docs` reads), 1-3 digits, `.` or `)`, blanks, then no digit; the first
# digit outside the alternation, so that a line starting with a letter fails at once (1.9 ns a character, not 2.9)
_LIST_NUMBER = re.compile(r"\n[ \t]{0,4}[0-9](?:[0-9]{0,2}[.)][ \t]+|\ufe0f?\u20e3[ \t]*)(?=[^\s\d])")
# a marker's brackets come first, which `re` finds by a fast search (a leading class of punctuation tried at
# every `.` and `,`: ~17 ns a character); group 1: a number, which is a marker after punctuation only
_NEEDED = r"[a-z][a-z ,'\u2013-]{1,40}(?:needed|\?|discuss)"
_MARKER = re.compile(rf"\[(?:([0-9]{{1,3}})|[a-z]|(?:note|nb|n) ?[0-9]{{1,3}}|edit|({_NEEDED}))\]")
_CITING = frozenset(".,;:!?\u201d\u2019")
_PUNCT_BYTES = np.zeros(256, np.bool_)           # the last byte of a `_CITING` character, as `marked_docs` reads it
_PUNCT_BYTES[[ord(c) for c in ".,;:!?"] + [0x9D, 0x99]] = True


# BBCode: the tags a forum's editor writes; a tag is dropped only where the text closes a tag of that name
_BB_NAMES = r"b|i|u|s|quote|code|url|img|color|colour|size|font|center|left|right|list|spoiler|email|\*"
_BB_CLOSE = re.compile(rf"\[/({_BB_NAMES})\]", re.I)
_BB_TAG = re.compile(rf"\[/?({_BB_NAMES})(?:=[^\[\]\n]{{0,300}})?\]", re.I)
_BB_IMAGE = re.compile(r"\[img(?:=[^\[\]\n]{0,300})?\][^\[\]\n]{0,2000}\[/img\]", re.I)
# MediaWiki: a link (no word character before it, nor a blank after `[[`: numpy's `a[[0, 1]]`, bash's `[[ -f x ]]`)
# reads as the part after its last `|`; a text is wiki source when it holds such a link (the `[[` first, which
# `re` finds by a fast search, then the lookbehind)
_WIKI_LINK = re.compile(r"\[\[(?<!\w\[\[)(?=[^\s\[\]|])(?:[^\[\]\n]{0,300}\|)?([^\[\]|\n]{1,300})\]\]")
_WIKI_REF = re.compile(r"<ref\b[^<>/]{0,300}>.{0,4000}?</ref\s*>|<ref\b[^<>]{0,300}/>", re.I | re.S)
_WIKI_TEMPLATE = re.compile(r"\{\{[^{}]{0,4000}\}\}")           # innermost first: `{{a|{{b}}}}` in two rounds
_WIKI_QUOTES = re.compile(r"'{2,5}")
TEMPLATE_ROUNDS = 3
# `_x_` or `__x y__` on one line: the opening run after no word character (a lookbehind after the literal, which
# `re` then finds by a fast search), a word character but `_` inside each end, the same run closing before none
EMPHASIS_CHARS = 300           # (`wordfolds.blank_emphasis` reads the same rule in bytes)
_EMPHASIS = re.compile(rf"(__(?<!\w__)|_(?<!\w_))(?=[^\W_])(.{{0,{EMPHASIS_CHARS}}}?[^\W_])\1(?!\w)")
# superscript digits (NFKC makes them digits) right after a letter: footnote markers
_SUPERSCRIPTS = "\u00b9\u00b2\u00b3\u2070\u2074-\u2079"
_FOOTNOTE = re.compile(rf"(?<=[^\W\d_])[{_SUPERSCRIPTS}]+")
_SUPERSCRIPT = re.compile(f"[{_SUPERSCRIPTS}]")
_HTML_FOOTNOTE = re.compile(r"<sup\b[^<>]{0,300}>(?:\s|\[|\]|\d|<a\b[^<>]{0,300}>|</a\s*>){1,40}</sup\s*>", re.I)
APOSTROPHES = "\u02bc\u02b9\u02bb\u00b4"           # ʼ ʹ ʻ ´: read as `'` wherever they are
# The full-width forms of ASCII (U+FF01-FF5E) and the ideographic space, which NFKC reads as ASCII: a copy written
# in them (`［text］（ｈｔｔｐｓ：／／…）`) shows its marks only after NFKC, which the folds run after, so its link
# targets stayed words (J 0.67 for a README with links, 0.93 with them folded). A text with a full-width link's
# `］（` is read in ASCII before the folds (`fold_fullwidth`; NFKC would do the same later)
FULLWIDTH = {0xFF01 + k: 0x21 + k for k in range(94)} | {0x3000: 0x20}
FULLWIDTH_LINK = "\uff3d\uff08"


def markdown_links_in(text: str) -> bool:
    """Whether `text` holds a markdown link or image to a URL or path (`[text](https://…)`)."""
    return "](" in text and _MD_LINK.search(text) is not None


def fold_fullwidth(text: str) -> str:
    """`text` with `FULLWIDTH` read as ASCII where it holds a full-width link's `］（`; else `text` itself."""
    return text.translate(FULLWIDTH) if FULLWIDTH_LINK in text else text


def fold_markdown_links(text: str) -> str:
    """`text` with each markdown link or image to a URL or path read as its text."""
    return _MD_LINK.sub(r"\1", text) if "](" in text else text


def source_marks_in(text: str) -> bool:
    """Whether `fold_source_marks` could change `text` (a closed BBCode tag, or MediaWiki source)."""
    return "[/" in text and _BB_CLOSE.search(text) is not None or _wiki_source(text)


def _wiki_source(text: str) -> bool:
    return "[[" in text and _WIKI_LINK.search(text) is not None


def fold_source_marks(text: str) -> str:
    """`text` with its BBCode tags and MediaWiki markup read as the page shows them (see the module docstring);
    `text` itself when it has none."""
    if "[/" in text:
        closed = {m.group(1).lower() for m in _BB_CLOSE.finditer(text)}
        if "list" in closed:
            closed.add("*")
        if "img" in closed:
            text = _BB_IMAGE.sub("", text)
        if closed:
            text = _BB_TAG.sub(lambda m: "" if m.group(1).lower() in closed else m.group(), text)
    if _wiki_source(text):
        text = _WIKI_REF.sub("", text) if "<" in text else text
        for _ in range(TEMPLATE_ROUNDS):
            if "{{" not in text:
                break
            text = _WIKI_TEMPLATE.sub("", text)
        text = _WIKI_QUOTES.sub("", _WIKI_LINK.sub(r"\1", text))
    return text


def fold_emphasis(text: str) -> str:
    """`text` with `_x_` and `__x__` read as `x` (`__init__` too); `snake_case` and `_private` keep their `_`."""
    return _EMPHASIS.sub(r"\2", text) if "_" in text else text


def footnotes_in(text: str) -> bool:
    """Whether `text` holds a superscript digit (which `fold_footnotes` drops after a letter, before NFKC)."""
    return not text.isascii() and _SUPERSCRIPT.search(text) is not None


def fold_footnotes(text: str) -> str:
    """`text` without the superscript digits right after a letter (`workers¹²` → `workers`)."""
    return _FOOTNOTE.sub("", text) if footnotes_in(text) else text


def fold_html_footnotes(page: str) -> str:
    """An HTML page without its `<sup>` footnote markers (`<sup>3</sup>`, `<sup><a href="#fn3">[3]</a></sup>`)."""
    return _HTML_FOOTNOTE.sub("", page) if "<sup" in page or "<SUP" in page else page


def fold_apostrophes(text: str) -> str:
    """`text` with `APOSTROPHES` read as `'`."""
    if not text.isascii():
        for mark in APOSTROPHES:
            if mark in text:
                text = text.replace(mark, "'")
    return text


def _cites(text: str) -> bool:
    """Whether `text` holds a citation marker after punctuation (`river.[12]`) or a `[citation needed]`."""
    for m in _MARKER.finditer(text):
        if m.group(2) or m.group(1) and m.start() and text[m.start() - 1] in _CITING:
            return True
    return False


def marks_in(text: str) -> bool:
    """Whether `fold_marks` could change `text` (list numbers, reference links, citation markers)."""
    return (_LIST_NUMBER.search(text) is not None or _LIST_NUMBER.match("\n" + text[:32]) is not None
            or "[" in text and ("]:" in text and _REF_DEFINITION.search("\n" + text) is not None or _cites(text)))


def fold_marks(text: str) -> str:
    """`text` with numbered-list numbers, reference-style links and wiki citation markers read as the text they
    mark (see the module docstring); `text` itself when it has none."""
    listed = _LIST_NUMBER.search(text) is not None or _LIST_NUMBER.match("\n" + text[:32]) is not None
    lined = _LIST_NUMBER.sub("\n", "\n" + text) if listed else "\n" + text
    if "[" in lined and "]:" in lined:
        labels = {m.group(1).strip().lower() for m in _REF_DEFINITION.finditer(lined)}
        if labels:
            lined = _REF_LINK.sub(lambda m: m.group(1) if (m.group(2) or m.group(1)).strip().lower() in labels
                                  else m.group(), _REF_DEFINITION.sub("", lined))
    if "[" in lined and _cites(lined):
        lined = _MARKER.sub(lambda m: m.group() if lined[m.start() - 1].isspace() else "", lined)
    return text if len(lined) == len(text) + 1 and lined[1:] == text else lined[1:]


def marked_docs(texts, data: np.ndarray, ends: np.ndarray, newlines: np.ndarray | None = None) -> set[int]:
    """Which texts of a batch (their UTF-8 `data`, a `\\n` after each, at `ends`; `newlines`: where `data` is
    `\\n`, when the caller has them) hold a markdown link (`markdown_links_in`), a mark `fold_marks` reads
    (`marks_in`; a keycap list is not looked for: its characters are folded in any case) or BBCode or wiki source
    (`source_marks_in`). numpy passes over the `]` and the line starts find the few texts with a `](`, a
    `[label]:` starting a line, a number in brackets after punctuation, a `needed]`, `discuss]` or `?]`, a line
    starting with a list number, a `]]` or a `[/` tag, and those are asked (a regex or `bytes.find` loop over the
    bytes took 3x as long as numpy for the `](`)."""
    if len(data) == 0:
        return set()
    starts = np.flatnonzero(data == 10) if newlines is None else newlines
    starts = np.concatenate([[0], starts[:-1] + 1]).astype(np.int64)             # each line's first byte
    close = np.flatnonzero(data[:-1] == 93)                          # each `]` (a byte follows: the `\n`)
    after = data[close + 1]
    links = close[after == 40]                                       # `](`
    defined = close[after == 58]                                     # `]:`, on a line starting with `[`
    defined = defined[_opens(data, starts[np.searchsorted(starts, defined, side="right") - 1], 3, 91)]
    found = set()
    if len(links):
        found = {k for k in set(np.searchsorted(ends, links).tolist()) if markdown_links_in(texts[k])}
    listed = _listed(data, starts)
    maybe = set(np.searchsorted(ends, np.concatenate([defined, _cited(data, close), listed])).tolist()) - found
    found |= {k for k in maybe if marks_in(texts[k])}
    sourced = set(np.searchsorted(ends, np.concatenate([close[after == 93], _tag_closes(data, close)])).tolist())
    return found | {k for k in sourced - found if source_marks_in(texts[k])}


def _tag_closes(data: np.ndarray, close: np.ndarray) -> np.ndarray:
    """The `]` of `close` that end a closing tag `[/x]` of 1-7 letters or `*` (`[/b]`, `[/spoiler]`)."""
    found = []
    for width in range(1, 8):
        ok = close >= width + 2
        at = np.where(ok, close - width - 2, 0)                     # the `[`
        found.append(close[ok & (data[at] == 91) & (data[at + 1] == 47)])
    return np.concatenate(found)


def _digits(values: np.ndarray) -> np.ndarray:
    return (values >= 48) & (values <= 57)


def _cited(data: np.ndarray, close: np.ndarray) -> np.ndarray:
    """The `]` of `close` that end `[1]`-`[999]` after punctuation (`_PUNCT_BYTES`), `needed]`, `discuss]` or
    `?]` after a lower-case letter (`[citation needed]`, `[dubious – discuss]`, `[who?]`)."""
    def ends_with(at: np.ndarray, word: bytes) -> np.ndarray:
        ok = at >= len(word)
        for k, byte in enumerate(reversed(word), 1):
            ok &= data[np.maximum(at - k, 0)] == byte
        return at[ok]
    before = data[np.maximum(close - 1, 0)]
    asked = close[(before == 63) & (close >= 2)]
    found = [ends_with(close[before == 100], b"needed"), ends_with(close[before == 115], b"discuss"),
             asked[(data[asked - 2] >= 0x61) & (data[asked - 2] <= 0x7A)]]
    close = close[_digits(before)]
    for width in (1, 2, 3):                     # digits at close - width .. close - 1, `[` before them
        ok = close >= width + 2
        at = np.where(ok, close - width - 1, 1)                     # the `[`
        ok &= (data[at] == 91) & _PUNCT_BYTES[data[at - 1]]
        for k in range(1, width):
            ok &= _digits(data[at + k])
        found.append(close[ok])
    return np.concatenate(found)


def _opens(data: np.ndarray, starts: np.ndarray, blanks: int, byte: int) -> np.ndarray:
    """bool per line start: the line's first byte after up to `blanks` spaces or tabs is `byte`."""
    ok, blank = np.zeros(len(starts), np.bool_), np.ones(len(starts), np.bool_)
    for k in range(blanks + 1):
        b = data[np.minimum(starts + k, len(data) - 1)]
        ok |= blank & (b == byte)
        blank &= (b == 32) | (b == 9)
    return ok


def _listed(data: np.ndarray, starts: np.ndarray) -> np.ndarray:
    """The line starts whose line begins with up to 4 spaces or tabs, 1-3 digits, `.` or `)` and a space or
    tab (`_LIST_NUMBER`'s start, as bytes): the lines narrowed a byte at a time (most start with a letter)."""
    firsts, n = [], len(data)
    for _ in range(5):
        b = data[starts]
        firsts.append(starts[_digits(b)])
        starts = starts[(b == 32) | (b == 9)] + 1
        starts = starts[starts < n]
    first = np.concatenate(firsts)                                   # a line's first digit

    def at(k: int) -> np.ndarray:
        return data[np.minimum(first + k, n - 1)]
    listed = np.zeros(len(first), np.bool_)
    for width in (1, 2, 3):
        ok = np.ones(len(first), np.bool_)
        for k in range(1, width):
            ok &= _digits(at(k))
        listed |= ok & ((at(width) == 46) | (at(width) == 41)) & ((at(width + 1) == 32) | (at(width + 1) == 9))
    return first[listed]
