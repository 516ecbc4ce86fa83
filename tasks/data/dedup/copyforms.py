"""Edits that copies of one text make to its words, undone before shingling (`DedupSpec.fold_formats`; never the
kept text). A seventh blind probe of near dedup found each missed:

- words hyphenated at a line's end, then the lines joined with a space (`docu- ment`, PDF text re-flowed;
  `read_spaced_hyphens`): 8 of 11 copies missed at J 0.56-0.78. `letter- lower-case letter` reads as a break
  `-\\n`, which `marks.join_hyphenated` joins on the evidence it weighs for any break; a suspended compound
  (`pre- and post-war`, `Ein- und Ausgang`) is left as written.
- URL-encoded text (`read_percent`): a text saved from a query string or a link target (`The%20river%20rises`)
  read as one word per sentence (13 of 13 missed, J 0.0). A text with PERCENT_MIN or more `%20` escapes reads
  with every `%XX` run that is UTF-8 decoded.

The probe's other misses (digit grouping `1,234`/`1234`, US dates, footnote markers before punctuation) had folds
here too, and each found its copies, but ~5-10 % of the texts of `benchmarks/dedup_real.py` hold a grouped
number, a date or a code subscript before a comma: read in Python, they cost the signatures +20-60 % CPU, past
the stage's budget (see tests/test_dedup_probe7.py). The rules left are rare in text (104 of those 20,000).
`textforms.format_flags` finds the texts a rule may change in its byte scan; only those are read in Python.
"""

from __future__ import annotations

import re
from urllib.parse import unquote


def _before(m: re.Match[str]) -> str:
    return m.string[m.start() - 1] if m.start() else ""


# --- words hyphenated at a line's end, the line then joined with a space ------------------------------------
# a conjunction after the hyphen is a suspended compound's (`pre- and post-war`, `Ein- und Ausgang`, `pré- ou`)
# (led by the letter before it: a dash between spaced words, ` - `, is common and never a match to call back for)
_SPACED_HYPHEN = re.compile(r"(?<=[^\W\d_])- (?!(?:and|or|nor|to|und|oder|bis|sowie|et|ou|y|e|o|i|a|или|и)\b)"
                            r"(?=[^\W\d_])")


def _broken(m: re.Match[str]) -> str:
    before = _before(m)
    return "-\n" if before.isalpha() and m.string[m.end()].islower() else m.group()


def read_spaced_hyphens(text: str) -> str:
    """`text` with each `letter- lower-case letter` as a hyphen at a line break (`docu- ment` → `docu-\\nment`),
    for `marks.join_hyphenated` to judge as the break it was."""
    return _SPACED_HYPHEN.sub(_broken, text) if "- " in text else text


# --- URL encoding ---------------------------------------------------------------------------------------------
# a link's target in prose holds a `%20` or two; a text that is URL-encoded holds one per word
PERCENT_MIN = 8
_PERCENT_RUN = re.compile(r"(?:%[0-9A-Fa-f]{2})+")


def percent_encoded(text: str) -> bool:
    """Whether `text` holds PERCENT_MIN `%20` escapes or more."""
    return text.count("%20") >= PERCENT_MIN


def read_percent(text: str) -> str:
    """`text` with its `%XX` runs decoded as UTF-8 (`%C3%A9` → `é`) where it is URL-encoded; else `text` itself."""
    if "%20" not in text or not percent_encoded(text):
        return text
    return _PERCENT_RUN.sub(lambda m: unquote(m.group(), errors="strict") if _utf8(m.group()) else m.group(), text)


def _utf8(run: str) -> bool:
    try:
        bytes.fromhex(run.replace("%", "")).decode("utf-8")
    except UnicodeDecodeError:
        return False
    return True


def read_copyforms(text: str) -> str:
    """`text` with every rule of this module read (URL encoding first: it may hide a spaced hyphen)."""
    return read_edits(read_percent(text))


def read_edits(text: str) -> str:
    """`text` with the rules read that only move characters (all but URL decoding, which may make markup:
    `textforms.prefold` reads a text these alone change without the markup folds)."""
    return read_spaced_hyphens(text)

