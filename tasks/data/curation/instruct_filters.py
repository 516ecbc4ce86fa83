"""Instruct's per-conversation filters and its quality score, on the Filter protocol of `tasks/data/filtering/filters.py`.

A filter is called on a conversation's `Turns` and returns a `Verdict`: `keep`, a human-readable `reason` to
drop (the ledger's `reason`; the filter's `name` is the ledger's `filter`) and the `signals` it measured.
`instruct_filters(spec)` gives them in funnel order (after `format`): `length` -> `echo` -> `symbols` ->
`language`. `ScoreFilter` is the quality score (ranking; `min_score` drops below a floor), same shape.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass

from specs.instruct import FilterSpec
from tasks.data.filtering.decontaminate import words
from tasks.data.filtering.filters import Filter, Verdict
from tasks.data.curation.instructions import Turns

RATIO_MIN_TOKENS = 4        # the alpha-word rule needs this many tokens (a bare "1963" is a fine answer)
LANGUAGE_MIN_WORDS = 8      # the stopword rule needs this many words
FILTER_NAMES = ("length", "echo", "symbols", "language")

_WORD = re.compile(r"\w+")
_LETTER_WORD = re.compile(r"[^\W\d_]+")
_CODE = re.compile(r"```.*?(?:```|\Z)|`[^`\n]+`", re.DOTALL)    # fenced blocks and inline code spans
# Ordinary prose punctuation: not a "symbol" (a bare "No." must not read as 33 % noise).
_PUNCTUATION = frozenset(".,;:!?'\"()-/%–—‘’“”…")
STOPWORDS = frozenset("""a about above after again all also am an and any are as at be because been before being
below between both but by can could did do does doing down during each few for from further had has have having
he her here hers him his how i if in into is it its itself just me more most my no nor not now of off on once
only or other our out over own same she should so some such than that the their them then there these they this
those through to too under until up very was we were what when where which while who whom why will with would
you your yours""".split())


def prose(text: str) -> str:
    """Text outside ``` fenced code blocks and `inline code` spans."""
    return _CODE.sub(" ", text)


def symbol_ratio(text: str) -> float:
    """Share of non-space characters that are neither alphanumeric nor ordinary prose punctuation."""
    chars = "".join(text.split())
    return sum(not c.isalnum() and c not in _PUNCTUATION for c in chars) / len(chars) if chars else 0.0


def stopword_ratio(text: str) -> tuple[float, int]:
    """(share of words that are common English function words, number of words)."""
    found = _LETTER_WORD.findall(text.lower())
    return (sum(w in STOPWORDS for w in found) / len(found) if found else 0.0), len(found)


def _drop(reason: str, signals: dict[str, float]) -> Verdict:
    return Verdict(False, reason, signals)


@dataclass(frozen=True)
class LengthFilter:
    """Prompt and response characters within [min, max]."""

    spec: FilterSpec
    name: str = "length"

    def __call__(self, t: Turns) -> Verdict:
        signals = {"prompt_chars": float(len(t.prompt)), "response_chars": float(len(t.response))}
        for what, text in (("prompt", t.prompt), ("response", t.response)):
            lo, hi = getattr(self.spec, f"min_{what}_chars"), getattr(self.spec, f"max_{what}_chars")
            if not lo <= len(text) <= hi:
                return _drop(f"{what} has {len(text):,} characters, outside [{lo:,}, {hi:,}]", signals)
        return Verdict(True, None, signals)


@dataclass(frozen=True)
class EchoFilter:
    """No answer repeats its prompt verbatim or takes `max_echo_overlap` of its words from it."""

    spec: FilterSpec
    name: str = "echo"

    def __call__(self, t: Turns) -> Verdict:
        worst = 0.0
        for n, (user, answer) in enumerate(t.exchanges(), start=1):
            said, found = set(_WORD.findall(user.lower())), _WORD.findall(answer.lower())
            if " ".join(found) == " ".join(_WORD.findall(user.lower())):
                return _drop(f"answer {n} repeats its prompt verbatim", {"echo_overlap": 1.0})
            overlap = sum(w in said for w in found) / len(found) if found else 0.0
            worst = max(worst, overlap)
            if found and overlap >= self.spec.max_echo_overlap:
                return _drop(f"answer {n}: {overlap:.0%} of its words come from the prompt "
                             f"(max {self.spec.max_echo_overlap:.0%})", {"echo_overlap": overlap})
        return Verdict(True, None, {"echo_overlap": worst})


@dataclass(frozen=True)
class SymbolsFilter:
    """Prose (code spans left out) of prompt and response: symbol share and share of words with letters."""

    spec: FilterSpec
    name: str = "symbols"

    def __call__(self, t: Turns) -> Verdict:
        signals: dict[str, float] = {}
        for what, text in (("prompt", prose(t.prompt)), ("response", prose(t.response))):
            ratio = signals[f"{what}_symbol_ratio"] = symbol_ratio(text)
            if ratio > self.spec.max_symbol_ratio:
                return _drop(f"{what} prose is {ratio:.0%} symbols (max {self.spec.max_symbol_ratio:.0%})", signals)
            tokens = text.split()
            alpha = signals[f"{what}_alpha_words"] = (sum(bool(_LETTER_WORD.search(w)) for w in tokens) / len(tokens)
                                                      if tokens else 1.0)
            if len(tokens) >= RATIO_MIN_TOKENS and alpha < self.spec.min_alpha_word_ratio:
                return _drop(f"{what} prose has {alpha:.0%} words with letters "
                             f"(min {self.spec.min_alpha_word_ratio:.0%})", signals)
        return Verdict(True, None, signals)


@dataclass(frozen=True)
class LanguageFilter:
    """English by two cheap signals on the prose: the share of ASCII letters and of English function words."""

    spec: FilterSpec
    name: str = "language"

    def __call__(self, t: Turns) -> Verdict:
        text = prose(t.prompt + "\n" + t.response)
        letters = [c for c in text if c.isalpha()]
        ascii_share = sum(c.isascii() for c in letters) / len(letters) if letters else 1.0
        signals = {"ascii_letters": ascii_share}
        if ascii_share < self.spec.min_ascii_letter_ratio:
            return _drop(f"{ascii_share:.0%} of letters are ASCII (min {self.spec.min_ascii_letter_ratio:.0%}): "
                         "not English", signals)
        ratio, n = stopword_ratio(text)
        signals.update({"stopword_ratio": ratio, "words": float(n)})
        if n >= LANGUAGE_MIN_WORDS and ratio < self.spec.min_stopword_ratio:
            return _drop(f"{ratio:.0%} English function words among {n} "
                         f"(min {self.spec.min_stopword_ratio:.0%}): not English", signals)
        return Verdict(True, None, signals)


def instruct_filters(spec: FilterSpec) -> list[Filter]:
    """The per-conversation filters in funnel order (names: FILTER_NAMES)."""
    return [LengthFilter(spec), EchoFilter(spec), SymbolsFilter(spec), LanguageFilter(spec)]


# The quality score ranks conversations for the cap (and picks the keeper of a duplicate cluster). It is a
# weighted mean of sub-scores in [0, 1], all about the assistant's side (what SFT teaches):
#   substance  0.35  log-scaled response length in words, saturating at TARGET_WORDS: one-word replies teach
#                    little; past a paragraph more words stop counting (the length filter bounds the rest).
#   english    0.20  share of English function words in the response prose, saturating at 0.3 (fluent text
#                    sits at 0.35–0.55); full marks for an all-code answer.
#   diversity  0.15  distinct / total words of the response (repetitive answers lose).
#   form       0.15  half for starting with a capital, digit, quote or code fence; half for ending with
#                    terminal punctuation or a closing fence.
#   clean      0.15  1 − 5 × symbol ratio of the response prose (markup-heavy answers lose; 0 at 20 %).
SCORE_WEIGHTS = {"substance": 0.35, "english": 0.20, "diversity": 0.15, "form": 0.15, "clean": 0.15}
TARGET_WORDS = 60


def score_parts(t: Turns) -> dict[str, float]:
    """The quality score's sub-scores, each in [0, 1] (see SCORE_WEIGHTS above)."""
    tokens = words(t.response)
    text = prose(t.response)
    ratio, n = stopword_ratio(text)
    stripped = t.response.strip()
    return {
        "substance": min(1.0, math.log1p(len(tokens)) / math.log1p(TARGET_WORDS)),
        "english": min(1.0, ratio / 0.3) if n else 1.0,
        "diversity": len(set(tokens)) / len(tokens) if tokens else 0.0,
        "form": 0.5 * (stripped[:1].isupper() or stripped[:1].isdigit() or stripped[:1] in "`\"'")
        + 0.5 * stripped.endswith((".", "!", "?", "```", '."', ".)")),
        "clean": max(0.0, 1.0 - 5.0 * symbol_ratio(text)),
    }


def quality_score(t: Turns) -> float:
    """The documented ranking score: the SCORE_WEIGHTS-weighted mean of `score_parts`, in [0, 1]."""
    return round(sum(SCORE_WEIGHTS[k] * v for k, v in score_parts(t).items()), 6)


@dataclass(frozen=True)
class ScoreFilter:
    """The quality score as a filter: drops below `min_score`; signals are the parts and the `score`."""

    min_score: float
    name: str = "min_score"

    def __call__(self, t: Turns) -> Verdict:
        parts = score_parts(t)
        score = round(sum(SCORE_WEIGHTS[k] * v for k, v in parts.items()), 6)
        keep = score >= self.min_score
        return Verdict(keep, None if keep else f"quality score {score:.3f} < min_score {self.min_score}",
                       {**parts, "score": score})
