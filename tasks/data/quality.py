"""Gopher/C4-style quality heuristics with soft per-rule scores.

`quality_score(text, rules)` measures a handful of raw signals, turns each rule into a sub-score in [0, 1] and
averages them. Sub-scores are soft: 1 inside the allowed band, then falling linearly to 0 at a "hopeless"
distance (twice the limit for maxima, zero for minima, half/double the band for mean word length), so two
near-duplicates can be ranked by quality instead of tying at 1.0. The length rule is the exception: the spec
says fewer than `min_words` (or more than `max_words`) words *scores 0*.

Keeping: `keep = score >= rules.threshold and no sub-score is 0`. The veto matters: with seven rules a plain
mean keeps a document that fails two rules outright (5/7 ≥ 0.7), e.g. a three-word text or a page that repeats
one line; Gopher drops a document that fails any rule. The mean still decides for several partial violations.

Signals follow Gopher: words are whitespace-separated tokens, the symbol ratio counts `#` and ellipses per word,
the duplicate-line fraction is weighted by characters (a repeated paragraph counts, a recurring `else:` or
speaker name barely does), the top 2-gram fraction is the share of word characters covered by the most frequent
repeated word pair, and punctuated lines end in `.`, `!`, `?`, `…` or a closing quote.

The same function judges code, with the `code` rules of `QualitySpec`; a rule set to a value that cannot be
violated (a maximum of 1, a minimum of 0) is disabled and scores 1. Signals are computed with `str`/`re`/`Counter`
operations (no per-character Python loops), several MB/s on prose and code.
"""

from __future__ import annotations

import re
from collections import Counter
from dataclasses import dataclass, field

from specs.clean import QualityRules

# Lines ending with one of these count as punctuated (C4 keeps lines that end in terminal punctuation, a closing
# quote included). `:`, `;` and `)` are left out on purpose: they end most lines of code.
_TERMINAL = (".", "!", "?", "…", '"', "'", "”", "’", "»")
# Removes every whitespace-delimited token that holds a letter; what is left are the words without letters.
_WORD_WITH_LETTER = re.compile(r"\S*[^\W\d_]\S*")


@dataclass(frozen=True)
class QualityVerdict:
    score: float                     # mean of the rule sub-scores, in [0, 1]
    keep: bool
    reason: str | None               # "low_quality" when dropped
    signals: dict[str, float] = field(default_factory=dict)   # raw measurements and `rule:<name>` sub-scores

    @property
    def failed_rules(self) -> tuple[str, ...]:
        """Rules that scored 0 (each one vetoes the document, whatever the mean), for drop details."""
        return tuple(k[5:] for k, v in self.signals.items() if k.startswith("rule:") and v == 0.0)


def _at_most(value: float, limit: float, ceiling: float | None = 1.0) -> float:
    """1 up to `limit`, then linearly down to 0 at twice the limit (a limit ≥ `ceiling` disables the rule)."""
    if ceiling is not None and limit >= ceiling:
        return 1.0
    if value <= limit:
        return 1.0
    return max(0.0, 1.0 - (value - limit) / max(limit, 0.05))


def _at_least(value: float, limit: float) -> float:
    """1 from `limit` up, linearly down to 0 at 0 (a limit of 0 disables the rule)."""
    if limit <= 0 or value >= limit:
        return 1.0
    return max(0.0, value / limit)


def _within(value: float, low: float, high: float) -> float:
    """1 inside [low, high]; 0 at low/2 and at 2·high."""
    if low <= value <= high:
        return 1.0
    if value < low:
        return max(0.0, (value - low / 2) / (low / 2)) if low > 0 else 1.0
    return max(0.0, 1.0 - (value - high) / high)


def measure(text: str) -> dict[str, float]:
    """The raw signals the rules look at."""
    words = text.split()
    n_words = len(words)
    word_chars = sum(map(len, words))
    lines = [line.strip() for line in text.splitlines()]
    lines = [line for line in lines if line]
    n_lines = len(lines)

    # Repeated lines, weighted by characters (Gopher's "duplicate line character fraction"): a page that repeats
    # a paragraph scores high, while short recurring lines (a speaker's name in a play, `else:` or `return` in
    # code) weigh little.
    line_chars = sum(map(len, lines))
    counts = Counter(lines)
    repeated_chars = sum(len(line) * (count - 1) for line, count in counts.items() if count > 1)

    # Characters covered by the most frequent word 2-gram (case-folded), as a share of all word characters.
    top_ngram = 0.0
    if n_words >= 2:
        folded = text.lower().split()
        (pair, count), = Counter(zip(folded, folded[1:])).most_common(1)
        if count > 1:
            top_ngram = min(1.0, count * (len(pair[0]) + len(pair[1])) / word_chars)

    symbols = text.count("#") + text.count("...") + text.count("…")
    non_alpha = len(_WORD_WITH_LETTER.sub(" ", text).split())
    punctuated = sum(1 for line in lines if line.endswith(_TERMINAL))
    return {
        "words": float(n_words),
        "mean_word_length": word_chars / n_words if n_words else 0.0,
        "symbol_ratio": symbols / n_words if n_words else 0.0,
        "non_alpha_words": non_alpha / n_words if n_words else 0.0,
        "duplicate_line_fraction": repeated_chars / line_chars if line_chars else 0.0,
        "top_ngram_fraction": top_ngram,
        "punctuated_lines": punctuated / n_lines if n_lines else 0.0,
    }


def rule_scores(signals: dict[str, float], rules: QualityRules) -> dict[str, float]:
    """One sub-score in [0, 1] per rule."""
    words = signals["words"]
    low, high = rules.mean_word_length
    return {
        "length": 1.0 if rules.min_words <= words <= rules.max_words else 0.0,
        "mean_word_length": _within(signals["mean_word_length"], low, high) if words else 0.0,
        # the symbol ratio is per word, so it can exceed 1; the spec caps the field at 1, which then means "off"
        "symbol_ratio": _at_most(signals["symbol_ratio"], rules.max_symbol_ratio),
        "non_alpha_words": _at_most(signals["non_alpha_words"], rules.max_non_alpha_words),
        "duplicate_line_fraction": _at_most(signals["duplicate_line_fraction"], rules.max_duplicate_line_fraction),
        "top_ngram_fraction": _at_most(signals["top_ngram_fraction"], rules.max_top_ngram_fraction),
        "punctuated_lines": _at_least(signals["punctuated_lines"], rules.min_punctuated_lines),
    }


def quality_score(text: str, rules: QualityRules) -> QualityVerdict:
    """Score `text` under one rule profile (prose or code) and decide whether it is kept."""
    signals = measure(text)
    scores = rule_scores(signals, rules)
    score = sum(scores.values()) / len(scores)
    keep = score >= rules.threshold and min(scores.values()) > 0.0
    signals.update({f"rule:{name}": value for name, value in scores.items()})
    return QualityVerdict(score=round(score, 6), keep=keep, reason=None if keep else "low_quality",
                          signals=signals)
