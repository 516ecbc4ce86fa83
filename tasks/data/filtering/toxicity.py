"""Word/phrase-list toxicity filter.

A lexicon is a text file with one entry per line (`#` starts a comment line). Entries match case-insensitively
and only as whole words, so "class", "assess" and "Scunthorpe" never hit "ass" or "cunt":
- a single word (letters/digits only) is looked up in a set, against the text's word tokens;
- anything else (several words, a hyphen or an apostrophe) is a phrase, matched by one compiled regex in which a
  space or hyphen in the entry stands for any run of spaces/hyphens and `'` also matches `’`.
Phrases are matched first and blanked out before words are counted, so "son of a bitch" is one hit, not two.

A document is dropped (reason `toxic`) when `hits >= spec.min_hits` and `hits / words > spec.max_ratio`, where
`words` counts the same word tokens (runs of letters/digits; "don't" is two).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

from specs.clean import ToxicitySpec

BUNDLED = Path(__file__).resolve().parent / "wordlists" / "toxic_en.txt"
MAX_MATCHED = 10

_TOKEN = re.compile(r"[^\W_]+")          # a word: a run of letters and digits (no underscores)
_SEPARATOR = re.compile(r"[\s\-]+")


@dataclass(frozen=True)
class Lexicon:
    words: frozenset[str]                # single-word entries, lower-cased
    phrases: tuple[str, ...]             # multi-word entries, lower-cased, hyphens shown as spaces
    phrase_re: re.Pattern[str] | None    # all phrases, longest first; None when there are none
    source: str                          # where the list came from, for manifests and messages
    # per phrase, its words (letter/digit runs): a text holds the phrase only where it holds all of them as words
    phrase_words: tuple[frozenset[str], ...] = ()
    phrase_vocab: frozenset[str] = frozenset()           # the union of phrase_words

    def __len__(self) -> int:
        return len(self.words) + len(self.phrases)


@dataclass(frozen=True)
class ToxicityVerdict:
    keep: bool
    reason: str | None                   # "toxic" when dropped
    hits: int                            # occurrences of listed words/phrases
    ratio: float                         # hits / words (0 for a text without words)
    matched: tuple[str, ...]             # distinct entries that occurred, sorted, at most MAX_MATCHED


def _phrase_pattern(phrase: str) -> str:
    parts = [re.escape(part).replace("'", "['’]") for part in _SEPARATOR.split(phrase)]
    return r"[\s\-]+".join(parts)


def parse_lexicon(lines: list[str], source: str = "<memory>") -> Lexicon:
    """Build a lexicon from the lines of a word list."""
    words: set[str] = set()
    phrases: set[str] = set()
    for raw in lines:
        entry = " ".join(raw.strip().lower().replace("’", "'").split())
        if not entry or entry.startswith("#"):
            continue
        (words if _TOKEN.fullmatch(entry) else phrases).add(_canonical(entry))
    ordered = tuple(sorted(phrases, key=lambda p: (-len(p), p)))      # longest first: prefer the longer phrase
    phrase_re = None
    if ordered:
        alternation = "|".join(_phrase_pattern(p) for p in ordered)
        phrase_re = re.compile(rf"(?<!\w)(?:{alternation})(?!\w)")
    return Lexicon(words=frozenset(words), phrases=ordered, phrase_re=phrase_re, source=source,
                   phrase_words=tuple(frozenset(_TOKEN.findall(p)) for p in ordered),
                   phrase_vocab=frozenset(_TOKEN.findall(" ".join(ordered))))


def load_lexicon(path: Path | None = None) -> Lexicon:
    """Read a word list (None: the English list bundled with forgeline)."""
    path = BUNDLED if path is None else Path(path)
    return parse_lexicon(path.read_text(encoding="utf-8").splitlines(), source=str(path))


def _canonical(match: str) -> str:
    """How a phrase is reported: lower-cased, spaces/hyphens as one space, curly apostrophes straight."""
    return " ".join(part for part in _SEPARATOR.split(match.replace("’", "'")) if part)


def _may_hold_phrase(lexicon: Lexicon, tokens: list[str]) -> bool:
    """False only when no phrase can match: a match is bounded by non-word characters and its separators and
    apostrophes are not letters or digits, so each of the phrase's words is then one of the text's words.
    (The phrase regex is tried at every character; this is one pass of set look-ups.)"""
    if not lexicon.phrase_words:
        return True
    present = lexicon.phrase_vocab.intersection(tokens)           # the phrase words the text has
    return any(words <= present for words in lexicon.phrase_words)


def tokens(lowered: str) -> list[str]:
    """The word tokens of lower-cased text: runs of letters and digits."""
    return _TOKEN.findall(lowered)


def toxicity(text: str, lexicon: Lexicon, spec: ToxicitySpec, words: list[str] | None = None) -> ToxicityVerdict:
    """Count listed words and phrases in `text` and decide whether it is kept. `words`: `tokens(text.lower())`
    when the caller has them."""
    lowered = text.lower()
    tokens = _TOKEN.findall(lowered) if words is None else words
    n_words = len(tokens)
    matched: dict[str, int] = {}
    if lexicon.phrase_re is not None and _may_hold_phrase(lexicon, tokens) and lexicon.phrase_re.search(lowered):
        def blank(m: re.Match[str]) -> str:
            key = _canonical(m.group())
            matched[key] = matched.get(key, 0) + 1
            return " "
        tokens = _TOKEN.findall(lexicon.phrase_re.sub(blank, lowered))   # the words outside the phrases
    if not lexicon.words.isdisjoint(tokens):
        for token in tokens:
            if token in lexicon.words:
                matched[token] = matched.get(token, 0) + 1
    hits = sum(matched.values())
    ratio = hits / n_words if n_words else 0.0
    drop = hits >= spec.min_hits and ratio > spec.max_ratio
    return ToxicityVerdict(keep=not drop, reason="toxic" if drop else None, hits=hits, ratio=ratio,
                           matched=tuple(sorted(matched))[:MAX_MATCHED])
