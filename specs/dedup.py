"""The `clean` section's deduplication knobs: near-duplicate documents (`DedupSpec`, MinHash LSH over folded
word shingles) and repeated lines (`LineDedupSpec`). Split from specs/clean.py (which re-exports both) to keep
each contract file readable."""

from __future__ import annotations

from typing import Literal

from pydantic import Field, model_validator

from specs.base import StrictModel


class DedupSpec(StrictModel):
    """Exact dedup on normalized text, then MinHash-LSH near dedup: documents are visited best-first and each
    kept one removes the undecided documents within `threshold` of itself (no transitive chains).

    Signatures are bit-identical to datasketch's MinHash; the LSH index is a numpy sort per band (same
    candidate pairs as datasketch's MinHashLSH, ~35× faster). Permutations are seeded by `run.seed`. Every
    run audits the decision on the exact Jaccard of all pairs of a seeded document sample."""

    exact: bool = Field(True, description="Drop exact duplicates of normalized text (reason `exact_duplicate`).")
    near: bool = Field(True, description="Drop near duplicates (reason `near_duplicate`).")
    shingle: Literal["word", "char"] = Field(
        "word", description="Shingle unit. A word is a lowercase `\\w+` run, except in scripts written without "
        "spaces (Chinese, Japanese kana and kanji, Thai, Lao, Khmer, Myanmar), where each character is a word of "
        "its own (`tasks/data/dedup/segment.py`)."
    )
    shingle_size: int = Field(5, ge=1, le=32, description="Shingle length in units (word 5-grams by default).")
    # The folds below change only the text shingled (signatures, verification, audit), never the kept text.
    fold_entities: bool = Field(
        True, description="Decode HTML entities (`&amp;`, `&#39;`, `&nbsp;`, …) before shingling: a page copied "
        "with its entities left in otherwise gains a word per entity (`amp`, `39`) and loses most shingles."
    )
    fold_markup: bool = Field(
        True, description="Read a text holding HTML element tags (3 or more, e.g. a page copied with its "
        "`<div>`/`<p>` markup) as HTML before shingling, keeping its visible text (resiliparse): each tag and "
        "attribute would otherwise be words of its own, and the copy would share few shingles with its plain "
        "original. Code or maths with `<` and `>` but no HTML element names is left alone, and so is markup "
        "showing fewer than 5 words (a code template, a form, a nav bar: read as its few visible words, any two "
        "such templates shingled alike and were near duplicates). Also reads a markdown "
        "link or image to a URL or path as its text (`[Paris](https://…)` → `Paris`: each URL is ~6 words the "
        "plain copy lacks); `handlers[key](request)` in code has no such target and is left alone. Likewise a "
        "reference link (`[Paris][1]` and its `[1]: https://…` line), a numbered list's numbers (`1. Mix`, "
        "`2) Bake`, `1️⃣`: html2text numbers an `<ol>` another extractor bullets) and wiki citation markers "
        "(`river.[12]`, `[citation needed]`, in a text with one after punctuation; code's `a[12]` is left alone), "
        "BBCode tags a text closes (`[b]…[/b]`, `[url=…]`; code's `a[i]` is left alone), MediaWiki source (in a "
        "text with a `[[link]]`: `[[Target|label]]` → `label`, `{{templates}}` and `<ref>…</ref>` dropped), "
        "markdown's `_italic_`/`__bold__` underscores (`snake_case` keeps its `_`) and footnote superscripts after a "
        "letter (`workers¹`, `<sup>1</sup>`); reStructuredText, AsciiDoc and Org links, and lynx/w3m `[12]` markers "
        "with their trailing `References` list, read as their text (`tasks/data/dedup/linkforms.py`), and LaTeX "
        "source as the text it typesets (command names, `\\cite`/`\\ref`/`\\label` keys and `%` comments dropped; "
        "`tasks/data/dedup/linkforms.py`).",
    )
    fold_confusables: bool = Field(
        True, description="Read look-alike letters (Unicode's confusables: Cyrillic `а`, `е`, `о`, `р`, `с`, "
        "Greek `ο`, `ν`, …, both cases alike) as the ASCII letters they imitate before shingling, in every text: "
        "a spam copy salted with them (`pаypаl`) otherwise shares almost no shingle with its original, and a "
        "Cyrillic or Greek text is folded as its copies are (one with a Latin `o` in a word, or in capitals).",
    )
    fold_line_prefixes: bool = Field(
        True, description="Drop line numbers and timestamps starting the lines of a text where most lines (80 %, "
        "3 or more, the first among them) start with one (`  12  return x`, `2024-03-01 12:00:01,234 INFO …`, "
        "`[12:00:01]`) before shingling: a code "
        "listing copied with its line numbers, or a log logged again at other times, otherwise has a different "
        "token in nearly every 5-gram. A text with a few numbered lines is left alone, and so is one whose bare "
        "numbers do not count up by one or whose clock times (no date) are all at whole minutes: a timetable's "
        "times (`0612`, `06:12:00`) are its content."
    )
    fold_urls: bool = Field(
        True, description="Drop the tracking and session parameters of a text's URLs (`scheme://…`) before "
        "shingling: `utm_*`, `fbclid`, `gclid`, `msclkid`, `ref`, `;jsessionid=…`, `sid`, `PHPSESSID`, … "
        "(`tasks/data/dedup/lineprefix.py`). The same page fetched in another session, whose links each carry a new "
        "session id, or shared with other click ids, otherwise differs in a few words per URL (a short page with "
        "a link list: J ~0.6-0.75). Parameters that name content (`?id=42`, `?q=…`, `?page=2`) and fragments stay."
    )
    fold_hyphenation: bool = Field(
        True, description="Read a word hyphenated at a line break (`infor-\\nmation`: a letter, `-` or U+2010, "
        "the line's end, a lower-case letter starting the next line) as one word before shingling: a typeset, "
        "PDF or OCR'd copy otherwise splits it in two. A compound a wrapper broke at its hyphen stays two words, "
        "as on one line, where the text shows it is one: written hyphenated elsewhere (`keyword-only`), part of "
        "a longer compound, a part of another compound, or both halves used as words elsewhere."
    )
    fold_pointing: bool = Field(
        True, description="Drop optional pointing before shingling: Arabic harakat (fatha, kasra, damma, sukun, "
        "shadda, tanwin, …), Hebrew niqqud and cantillation, stress accents on Cyrillic vowels. A copy with or "
        "without them is the same text, but each mark split its word and no pointed copy was found. Also the "
        "spelling variants writers put in or leave out (Lucene's Arabic, Persian and Hindi normalizers, Russian "
        "search): Arabic tatweel, hamza forms `أ إ آ ٱ` → `ا`, `ى` → `ي`, `ة` → `ه`, Persian `ی ک` → `ي ك`, the "
        "Devanagari nukta, chandrabindu → anusvara, `ё` → `е`, Greek tonos and dialytika dropped (`ά` → `α`), and the "
        "decimal digits of other scripts read as ASCII digits (`٢٠٢٤`, `۱۴۰۳`, `२०२४` → `2024`, …)."
    )
    marks_in_words: bool = Field(
        True, description="Read a combining mark (Unicode Mn/Mc: Devanagari, Bengali, Tamil … vowel signs and "
        "viramas) as part of its word instead of a break inside it (`हिन्दी` was `ह`, `न`, `द`). The marks of "
        "scripts shingled per character (Thai, Lao, Khmer, Myanmar, kana) still drop out "
        "(`tasks/data/dedup/marks.py`)."
    )
    fold_invisible: bool = Field(
        True, description="Drop Unicode format characters (category Cf: ZWJ, ZWNJ, bidi marks, …, which "
        "normalization keeps because they change rendering) and variation selectors (the VS16 of `❤️`) before "
        "shingling, so one inside a word does not split it in two, nor one after an emoji make a word of its own."
    )
    fold_escapes: bool = Field(
        True, description="Read the escapes `\\n`, `\\t`, `\\r` written out as two characters (a text kept as a JSON "
        "or CSV string literal: `one\\ntwo`) as spaces before word shingling: each glued its letter to the next word "
        "(`ntwo`), and no such copy of a prose document was found (0 of 60, J median 0.23). Code's `\"\\n\"` reads "
        "as a space too, in every copy alike (`wordhash.read_escapes`). Also: a backslash before ASCII punctuation "
        "but `\\` is dropped (a markdown escape, `prompt\\_toolkit`), and a JSON text's `\\uXXXX` escapes are "
        "decoded, surrogate pairs included (`dedup.jsonescapes`: Python's json.dumps writes `don\\u2019t`)."
    )
    join_contractions: bool = Field(
        True, description="Read a word split by an apostrophe (`'`, `’`; with `fold_unicode` also `ʼ ʹ ʻ ´`) as one "
        "word, and a contraction's end (`t`, `s`, `d`, `m`, `ll`, `re`, `ve`) after a word and one space as part of "
        "it, before word shingling: `don't`, `dont` and `don t` are one word (`wordhash.join_words`). A copy with "
        "its punctuation stripped (`str.translate` with `string.punctuation` writes `dont`) otherwise changed a "
        "word at every contraction (23 of 60 prose copies found; 53 with it), and one with punctuation replaced "
        "by spaces stays found (59 and 58 of 60). Hyphens are left as they are: joining them finds the stripped "
        "copy's `wellknown` but loses the spaced copy's `well known` (59 and 52)."
    )
    fold_formats: bool = Field(
        True, description="Read a quoted-printable mail body decoded (`=3D`, `=E2=80=99`, soft line breaks) and an SRT/"
        "WebVTT file as its cue text (no cue numbers, timing lines, headers or cue tags) before shingling, so either "
        "copy meets its plain text (`tasks/data/dedup/textforms.py`; only a text whose every `=` is an escape is QP); "
        "rolling captions read each line once, and UTF-8 read as cp1252 (`FranÃ§ais`) is read back (`mojibake.py`), as "
        "is a whole text of UTF-8 read as cp1251, KOI8-R, cp1250 or Mac Roman (`РїСЂРёРІРµС‚`); a page of two "
        "columns side by side (`pdftotext -layout`) reads column by column (`lineprefix.py`)."
    )
    fold_unicode: bool = Field(
        True, description="NFKC and casefold before shingling (as the exact-dedup key does): full-width letters, "
        "ligatures (`ﬁ`) and `ß`/`SS` then match their plain forms in near dedup too, not only in exact copies; "
        "with `shingle: char`, typographic quotes and dashes also count as their ASCII forms. Also reads Latin "
        "letters without their diacritics (`é` → `e`, `ß` → `ss`, `ø` → `o`; only on a Latin base letter: "
        "Devanagari, Arabic, Hebrew and Cyrillic marks are left to `fold_pointing`) and the German digraphs "
        "`ae`/`oe`/`ue` as `a`/`o`/`u` in every text, so an accent-stripped or transliterated copy (`Gebuehren`, "
        "`Gebuhren`) meets its original (`Gebühren`), the apostrophe look-alikes `ʼ ʹ ʻ ´` as `'`, and "
        "Traditional Chinese characters as their Simplified forms (OpenCC's character dictionaries, "
        "`tasks/data/dedup/hanfold.py`), so a copy converted between the two scripts meets its original."
    )
    num_perm: int = Field(128, ge=16, le=1024, description="MinHash permutations.")
    threshold: float = Field(0.8, gt=0, lt=1, description="Jaccard similarity that counts as a near duplicate.")
    bands: int | None = Field(None, ge=1, description="LSH bands; with `rows`, overrides the banding chosen "
                              "from the threshold (16×8 at 0.8, 128 perms). bands × rows ≤ num_perm.")
    rows: int | None = Field(None, ge=1, description="LSH rows per band (see `bands`).")
    verify: bool = Field(
        True, description="Judge LSH candidate pairs by exact shingle-set Jaccard ≥ threshold; false judges "
        "them by the signature estimate (noisier near the threshold)."
    )
    audit_sample: int = Field(
        2000, ge=0, description="Documents drawn (seeded) for the audit: the exact Jaccard of all their pairs "
        "gives the pair precision, recall and F1 of the near-dedup decision."
    )
    precision_sample: int = Field(
        200, ge=0, description="LSH candidate pairs whose two documents also join the audit sample, so that it "
        "holds duplicate pairs to measure on even when the corpus is much larger than `audit_sample`."
    )

    @model_validator(mode="after")
    def _banding(self) -> "DedupSpec":
        if (self.bands is None) != (self.rows is None):
            raise ValueError("set both `bands` and `rows`, or neither")
        if self.bands is not None and self.bands * self.rows > self.num_perm:
            raise ValueError(f"bands × rows = {self.bands * self.rows} exceeds num_perm = {self.num_perm}")
        return self


class LineDedupSpec(StrictModel):
    """Corpus-wide repeated-line removal, after document dedup (the paragraph dedup of CCNet and Dolma): a line
    found in at least `min_docs` of the documents dedup kept is removed from them — site navigation, cookie and
    share notices, footers, and the body of a copy that document dedup missed because its page chrome differs
    (a page's article copied under another site's menus). Lines are compared with whitespace collapsed and
    case folded. A line a document repeats itself is that document's structure (a play's speaker names, a
    table's rows, code's braces) and is never counted for it; a short repeated line standing alone among the
    document's own lines (a heading such as `References`, a stage direction) stays (`short_words`). Out of
    core, on the stage's executor (`tasks/data/dedup/linededup.py`); the report's `lines` field lists the most
    repeated lines."""

    enabled: bool = Field(False, description="Remove repeated lines (off: the kept texts are dedup's as they are).")
    min_docs: int = Field(
        2, ge=2, description="A line in at least this many kept documents is repeated. 2 with `keep_first` is "
        "Dolma's paragraph dedup (every copy after the first goes); a higher count with `keep_first: false` "
        "removes only boilerplate, from every document (CCNet's reading)."
    )
    keep_first: bool = Field(
        True, description="The best-ranked document holding a repeated line keeps it (dedup's order: highest "
        "quality, then id), so a text found in two documents stays once; false removes it from all of them."
    )
    short_words: int = Field(
        3, ge=0, description="A repeated line of at most this many words is removed only next to another removed "
        "line (the nearest non-blank line before or after it): chrome comes in blocks (a menu's items, a footer "
        "under a share line), while a heading (`References`, `See also`, `Ingredients`) or a stage direction "
        "(`[Exit]`) repeated across documents stands alone between a document's own lines. 0 removes short lines "
        "as any other."
    )
    exempt_code: bool = Field(True, description="Leave the documents of sources judged by the `code` quality "
                              "profile alone (licence headers and imports repeat across files by design).")
    min_words: int = Field(
        50, ge=0, description="A document that lost lines and is left with fewer words (whitespace-separated) is "
        "dropped (reason `repeated_lines`; the ledger keeps its whole text): Gopher's minimum, the prose quality "
        "rule's, so what is left is as long as a document the quality filter accepts; 0 drops none by length."
    )
    max_removed: float = Field(
        1.0, gt=0, le=1, description="A document that lost at least this share of its characters is dropped too "
        "(reason `repeated_lines`). 1 drops by `min_words` alone (and what was left empty); 0.6-0.8 also drops "
        "copies that kept an edited paragraph, and short articles under heavy page chrome with them (a site's "
        "whole menu on every page is most of a short page)."
    )
    report_top: int = Field(20, ge=0, le=1000, description="The most repeated lines the report lists (text cut "
                            "at 200 characters, with their document counts).")
