"""Gopher + C4 quality rules with soft per-rule scores: `measure` -> `rule_scores` -> `quality_score`.

`measure(text)` computes the raw signals (Gopher, Rae et al. 2021, appendix A; C4, Raffel et al. 2020, §2.2);
`rule_scores` turns each rule into a sub-score in [0, 1]; the quality score is their **product**, and a document
is kept when `score >= rules.threshold`. A sub-score is 1 inside the allowed band and falls linearly to 0 over a
"hopeless" distance past the limit (for a fraction limit L: min(L, 1 − L), so 100 % bullet lines score 0 against
Gopher's 90 %; for unbounded per-word ratios: L), so near-duplicates rank by quality instead of tying at 1. The
product makes any hard failure (a 0) drop the document whatever the rest, and several partial violations add
up; the threshold curve in the clean report shows what each threshold would keep.

Signals. Words are whitespace tokens (Gopher); n-grams are over lower-cased words; character fractions are over
the characters of all words (whitespace excluded), duplicates count every occurrence after the first:
- `words`, `mean_word_length`, `hash_ratio` (`#` per word), `ellipsis_ratio` (`...`/`…` per word),
  `bullet_lines` (lines starting with a bullet), `ellipsis_lines` (lines ending in one), `stop_words` (count of
  the, be, to, of, and, that, have, with), `alpha_words` (share of words holding a letter);
- `dup_lines` / `dup_paragraphs` (share of lines / blank-line paragraphs that repeat an earlier one) and
  `dup_line_chars` / `dup_paragraph_chars` (their characters); lines of fewer than `rules.min_words_per_line`
  words are left out of the *count* rule (a speaker's name in a play, `else:` in code; see QualityRules);
- `top_2gram` … `top_4gram` (characters of the most frequent repeated n-gram × its count) and `dup_5gram` …
  `dup_10gram` (characters of words covered by repeated n-grams), computed with numpy on word ids;
- C4's line rules: `c4_lines` (share of lines C4 would keep: ending in terminal punctuation, not an ellipsis,
  ≥ `min_words_per_line` words, no `javascript`, no cookie/terms/privacy-policy phrase), `boilerplate_lines`
  (lines with `javascript` or a policy phrase), `curly_lines` (lines with `{`), `lorem_ipsum` (0/1).
Code is judged by the `code` profile of QualitySpec, in which the prose rules are off (a limit that cannot be
violated disables its rule and it scores 1).
"""

from __future__ import annotations

import itertools
import re
from collections import Counter
from dataclasses import dataclass, field

import numpy as np

from specs.clean import QualityRules

STOP_WORDS = frozenset(("the", "be", "to", "of", "and", "that", "have", "with"))    # Gopher's list
BULLETS = ("•", "‣", "▪", "◦", "●", "○", "- ", "* ", "– ", "· ")
ELLIPSES = ("...", "…")
# C4 keeps lines ending in . ? ! " ' (an ellipsis does not count); curly quotes added for typeset text.
TERMINAL = (".", "?", "!", '"', "'", "”", "’")
POLICY_PHRASES = ("terms of use", "privacy policy", "cookie policy", "uses cookies", "use of cookies", "use cookies")
POLICY = re.compile("|".join(POLICY_PHRASES))
TOP_NGRAMS = (2, 3, 4)
DUP_NGRAMS = (5, 6, 7, 8, 9, 10)
_PARAGRAPH = re.compile(r"\n\s*\n")
_NO_LETTER_WORD = re.compile(r"(?<!\S)(?:[^\w\s]|[\d_])+(?!\S)")    # a whitespace token without a letter
_PRIME = np.uint64(1_000_003)


@dataclass(frozen=True)
class QualityVerdict:
    score: float                     # product of the rule sub-scores, in [0, 1]
    keep: bool
    reason: str | None               # "low_quality" when dropped
    signals: dict[str, float] = field(default_factory=dict)   # raw measurements and `rule:<name>` sub-scores

    @property
    def failed_rules(self) -> tuple[str, ...]:
        """Rules that scored below 1, worst first (the ones that cost the document its score)."""
        rules = [(v, k[5:]) for k, v in self.signals.items() if k.startswith("rule:") and v < 1.0]
        return tuple(name for _, name in sorted(rules))


def _ramp_down(value: float, limit: float, width: float) -> float:
    return 1.0 if value <= limit else max(0.0, 1.0 - (value - limit) / max(width, 1e-9))


def at_most_fraction(value: float, limit: float) -> float:
    """A fraction's maximum: 1 up to `limit`, 0 at limit + min(limit, 1 − limit); a limit of 1 disables."""
    return 1.0 if limit >= 1.0 else _ramp_down(value, limit, max(min(limit, 1.0 - limit), 0.02))


def at_most_ratio(value: float, limit: float, off: float) -> float:
    """An unbounded ratio's maximum: 1 up to `limit`, 0 at twice it; a limit >= `off` disables."""
    return 1.0 if limit >= off else _ramp_down(value, limit, max(limit, 0.02))


def at_least(value: float, limit: float, width: float | None = None) -> float:
    """A minimum: 1 from `limit` up, 0 at limit − width (default: at 0); a limit of 0 disables."""
    if limit <= 0 or value >= limit:
        return 1.0
    width = limit if width is None else max(width, 1e-9)
    return max(0.0, 1.0 - (limit - value) / width)


def _duplicates(items: list[str]) -> tuple[int, int]:
    """(occurrences that repeat an earlier item, their characters)."""
    counts = Counter(items)
    return (sum(c - 1 for c in counts.values()),
            sum(len(item) * (c - 1) for item, c in counts.items() if c > 1))


def _ngram_signals_many(docs: list[tuple[list[str], np.ndarray]]) -> list[dict[str, float]]:
    """Top 2–4-gram and duplicate 5–10-gram character fractions of each (lower-cased words, word lengths), on
    integer word ids hashed per n-gram; all documents at once, in one set of arrays (row g = the g-th word of
    the documents concatenated), so that numpy's per-call cost is paid per batch, not per document. Every
    grouping is by (document, n-gram hash): documents never see each other's words."""
    out = [{f"top_{n}gram": 0.0 for n in TOP_NGRAMS} | {f"dup_{n}gram": 0.0 for n in DUP_NGRAMS} for _ in docs]
    sizes = np.array([len(lowered) for lowered, _ in docs], dtype=np.int64)
    if not sizes.sum():
        return out
    offsets = np.concatenate(([0], np.cumsum(sizes)))
    n_all = int(offsets[-1])
    ids = np.empty(n_all, dtype=np.uint64)          # a word's id: the position of its first occurrence, per doc
    for d, (lowered, _) in enumerate(docs):
        vocab: dict[str, int] = {}
        # setdefault with a running counter: C-level map
        ids[offsets[d]:offsets[d + 1]] = np.fromiter(map(vocab.setdefault, lowered, itertools.count()),
                                                     dtype=np.uint64, count=len(lowered))
    lengths = np.concatenate([lengths for _, lengths in docs]).astype(np.int64)
    totals = [float(lengths[offsets[d]:offsets[d + 1]].sum()) for d in range(len(docs))]
    doc_of = np.repeat(np.arange(len(docs)), sizes)
    local = np.arange(n_all) - offsets[doc_of]
    cum = np.concatenate(([0], np.cumsum(lengths, dtype=np.int64)))
    nonempty = offsets[:-1][sizes > 0]
    # Every occurrence of a repeated n-gram starts where the (n-1)-gram is repeated too, so each n only sorts
    # the positions that were repeated at n-1 (a shrinking set; exact, since no occurrence is left out).
    word_key = (offsets[doc_of] + ids.astype(np.int64))
    cand = np.flatnonzero(np.bincount(word_key, minlength=n_all)[word_key] > 1)
    hashes = ids
    for n in range(2, DUP_NGRAMS[-1] + 1):
        hashes = hashes[:-1] * _PRIME + ids[n - 1:]       # uint64 wrap-around: a rolling n-gram hash
        cand = cand[local[cand] < sizes[doc_of[cand]] - n + 1]     # n-grams that end inside their document
        order = np.lexsort((hashes[cand], doc_of[cand]))           # equal (document, n-gram) adjacent
        pos, h, dc = cand[order], hashes[cand][order], doc_of[cand][order]
        starts = np.flatnonzero(np.concatenate(([True], (h[1:] != h[:-1]) | (dc[1:] != dc[:-1])))) \
            if len(pos) else np.zeros(0, dtype=np.int64)
        counts = np.diff(np.append(starts, len(pos)))
        repeated = np.repeat(counts > 1, counts)            # per sorted entry: its n-gram occurs again
        if not repeated.any():
            break                                           # no repeated n-gram: none of any longer n either
        earliest = np.minimum.reduceat(pos, starts)         # each distinct n-gram's first position
        if n in TOP_NGRAMS:   # the most frequent n-gram; among equally frequent ones, the longest
            _top_ngram(out, n, dc[starts], counts, cum[earliest + n] - cum[earliest], totals)
        if n in DUP_NGRAMS:
            is_repeat = np.zeros(n_all, dtype=bool)
            is_repeat[pos[repeated]] = True
            is_repeat[earliest] = False
            repeats = np.flatnonzero(is_repeat)             # start of every occurrence after the first
            cover = np.zeros(n_all + 1, dtype=np.int64)     # words covered by a repeated n-gram
            np.add.at(cover, repeats, 1)
            np.add.at(cover, repeats + n, -1)
            covered = np.add.reduceat(np.where(np.cumsum(cover[:-1]) > 0, lengths, 0), nonempty)
            for d, chars in zip(np.flatnonzero(sizes > 0).tolist(), covered.tolist()):
                if chars:
                    out[d][f"dup_{n}gram"] = float(chars) / totals[d]
        cand = np.sort(pos[repeated])
    return out


def _top_ngram(out: list[dict[str, float]], n: int, group_doc: np.ndarray, counts: np.ndarray,
               chars: np.ndarray, totals: list[float]) -> None:
    """`top_<n>gram` of each document holding a repeated n-gram: count × characters of its most frequent one
    (the longest among equally frequent), over the document's characters. Groups come sorted by document."""
    key = (counts.astype(np.int64) << 32) | chars           # (count, chars) ordered as one integer
    firsts = np.flatnonzero(np.concatenate(([True], group_doc[1:] != group_doc[:-1])))
    best = np.maximum.reduceat(key, firsts)
    for d, b in zip(group_doc[firsts].tolist(), best.tolist()):
        count, length = b >> 32, b & 0xFFFFFFFF
        if count > 1:
            out[d][f"top_{n}gram"] = min(1.0, float(count * length) / totals[d])


def measure(text: str, min_words_per_line: int = 3) -> dict[str, float]:
    """The raw signals the rules look at (see the module docstring)."""
    return measure_many([text], [min_words_per_line])[0]


def measure_many(texts: list[str], min_words_per_line: list[int]) -> list[dict[str, float]]:
    """`[measure(t, m) for t, m in zip(texts, min_words_per_line)]`, the n-gram signals of all in one batch."""
    signals, words = [], []
    for text, m in zip(texts, min_words_per_line):
        lowered_text = text.lower()
        lowered = lowered_text.split()
        # ASCII: lower-casing changes no character's length or kind, so the lower-cased words are the words
        n_chars = np.fromiter(map(len, lowered if text.isascii() else text.split()), dtype=np.int64)
        signals.append(_text_signals(text, lowered_text, lowered, n_chars, m))
        words.append((lowered, n_chars))
    for mine, ngrams in zip(signals, _ngram_signals_many(words)):
        mine.update(ngrams)
    return signals


def _text_signals(text: str, lowered_text: str, lowered: list[str], lengths: np.ndarray,
                  min_words_per_line: int) -> dict[str, float]:
    """Every signal but the n-gram ones; `lowered`: the whitespace words of `lowered_text` (the lower-cased
    text), `lengths`: the characters of each word of `text`."""
    n_words = len(lengths)
    word_chars = int(lengths.sum())
    raw_lines = [line.strip() for line in text.splitlines()]
    lines = [line for line in raw_lines if line]
    n_lines = len(lines)
    # words per line, counted by spaces (lines are stripped; a double space inside a line can overcount)
    line_words = [line.count(" ") + 1 for line in lines]

    long_lines = [line for line, k in zip(lines, line_words) if k >= min_words_per_line]
    dup_long, _ = _duplicates(long_lines)
    _, dup_line_chars = _duplicates(lines)
    paragraphs = [p.strip() for p in _PARAGRAPH.split(text) if p.strip()]
    dup_paras, dup_para_chars = _duplicates(paragraphs)
    line_chars = sum(map(len, lines))
    boiler = 0
    if "javascript" in lowered_text or _policy(lowered_text):      # rare: look at lines only then
        boiler = sum(1 for line in lines if "javascript" in line.lower() or _policy(line.lower()))
    # C4 judges lines of extracted web text, where a line is a paragraph; our sources are hard-wrapped (plays,
    # help texts), so its line rules are applied to paragraphs with their wraps joined, weighted by characters.
    c4_ok = sum(len(p) for p in paragraphs if p.endswith(TERMINAL) and not p.endswith(ELLIPSES)
                and p.count(" ") + p.count("\n") + 1 >= min_words_per_line
                and not (boiler and ("javascript" in p.lower() or _policy(p.lower()))))
    per_word = (lambda x: x / n_words) if n_words else (lambda x: 0.0)
    per_line = (lambda x: x / n_lines) if n_lines else (lambda x: 0.0)
    return {
        "words": float(n_words),
        "mean_word_length": word_chars / n_words if n_words else 0.0,
        "hash_ratio": per_word(text.count("#")),
        "ellipsis_ratio": per_word(text.count("...") + text.count("…")),
        "bullet_lines": per_line(sum(line.startswith(BULLETS) for line in lines)),
        "ellipsis_lines": per_line(sum(line.endswith(ELLIPSES) for line in lines)),
        "stop_words": float(sum(map(STOP_WORDS.__contains__, lowered))),
        "alpha_words": 1.0 - per_word(_no_letter_words(text, lowered)) if n_words else 0.0,
        "dup_lines": dup_long / len(long_lines) if long_lines else 0.0,
        "dup_line_chars": dup_line_chars / line_chars if line_chars else 0.0,
        "dup_paragraphs": dup_paras / len(paragraphs) if paragraphs else 0.0,
        "dup_paragraph_chars": dup_para_chars / sum(map(len, paragraphs)) if paragraphs else 0.0,
        "c4_lines": c4_ok / sum(map(len, paragraphs)) if paragraphs else 0.0,
        "boilerplate_lines": per_line(boiler),
        "curly_lines": per_line(sum("{" in line for line in lines)) if "{" in text else 0.0,
        "lorem_ipsum": float("lorem ipsum" in lowered_text),
    }


def _no_letter_words(text: str, lowered: list[str]) -> int:
    """Whitespace words of `text` without a letter. In ASCII a letter is a cased character, so a lower-cased
    word holds one exactly when `str.islower` says so (one C call per word instead of a regex over the text)."""
    if text.isascii():
        return len(lowered) - sum(map(str.islower, lowered))
    return len(_NO_LETTER_WORD.findall(text))


def _policy(lowered: str) -> bool:
    """`POLICY.search(lowered)`, as plain substring tests (its alternatives are literals; ~6x faster)."""
    return any(phrase in lowered for phrase in POLICY_PHRASES)


def rule_scores(signals: dict[str, float], rules: QualityRules) -> dict[str, float]:
    """One sub-score in [0, 1] per rule."""
    words = signals["words"]
    low, high = rules.mean_word_length
    mwl = signals["mean_word_length"]
    scores = {
        "length": 1.0 if rules.min_words <= words <= rules.max_words else 0.0,
        "mean_word_length": (at_least(mwl, low, low / 2) if mwl < low else at_most_ratio(mwl, high, float("inf")))
        if words else 0.0,
        "hash_ratio": at_most_ratio(signals["hash_ratio"], rules.max_hash_ratio, 1.0),
        "ellipsis_ratio": at_most_ratio(signals["ellipsis_ratio"], rules.max_ellipsis_ratio, 1.0),
        "bullet_lines": at_most_fraction(signals["bullet_lines"], rules.max_bullet_lines),
        "ellipsis_lines": at_most_fraction(signals["ellipsis_lines"], rules.max_ellipsis_lines),
        "stop_words": at_least(signals["stop_words"], rules.min_stop_words),
        "alpha_words": at_least(signals["alpha_words"], rules.min_alpha_words,
                                min(rules.min_alpha_words, 1 - rules.min_alpha_words)),
        "dup_lines": at_most_fraction(signals["dup_lines"], rules.max_dup_lines),
        "dup_line_chars": at_most_fraction(signals["dup_line_chars"], rules.max_dup_line_chars),
        "dup_paragraphs": at_most_fraction(signals["dup_paragraphs"], rules.max_dup_paragraphs),
        "dup_paragraph_chars": at_most_fraction(signals["dup_paragraph_chars"], rules.max_dup_paragraph_chars),
        "c4_lines": at_least(signals["c4_lines"], rules.min_c4_lines),
        "boilerplate_lines": at_most_fraction(signals["boilerplate_lines"], rules.max_boilerplate_lines),
        "curly_lines": at_most_fraction(signals["curly_lines"], rules.max_curly_lines),
        "lorem_ipsum": 0.0 if rules.lorem_ipsum and signals["lorem_ipsum"] else 1.0,
    }
    for n, limit in zip(TOP_NGRAMS, rules.max_top_ngram):
        scores[f"top_{n}gram"] = at_most_fraction(signals[f"top_{n}gram"], limit)
    for n, limit in zip(DUP_NGRAMS, rules.max_dup_ngram):
        scores[f"dup_{n}gram"] = at_most_fraction(signals[f"dup_{n}gram"], limit)
    return scores


def quality_score(text: str, rules: QualityRules) -> QualityVerdict:
    """Score `text` under one rule profile (prose or code) and decide whether it is kept."""
    return quality_scores([text], [rules])[0]


def quality_scores(texts: list[str], rules: list[QualityRules]) -> list[QualityVerdict]:
    """`[quality_score(t, r) for t, r in zip(texts, rules)]`, measured in one batch (`measure_many`)."""
    measured = measure_many(texts, [r.min_words_per_line for r in rules])
    return [_verdict(signals, r) for signals, r in zip(measured, rules)]


def _verdict(signals: dict[str, float], rules: QualityRules) -> QualityVerdict:
    scores = rule_scores(signals, rules)
    score = float(np.multiply.reduce(np.array(list(scores.values()))))   # np.prod's reduction, without its wrapper
    keep = score >= rules.threshold
    signals.update({f"rule:{name}": value for name, value in scores.items()})
    signals["score"] = round(score, 6)
    return QualityVerdict(score=round(score, 6), keep=keep, reason=None if keep else "low_quality",
                          signals=signals)


def threshold_curve(docs: list[tuple[str, float | None, int]], thresholds: list[float]) -> list[dict[str, object]]:
    """What the quality filter alone would keep at each threshold: `docs` are (source, score, words) with score
    None for documents it never measured (left out). One row per (threshold, source) plus source `all`, with
    documents and whitespace words kept and their shares of the measured ones."""
    measured = [(s, score, w) for s, score, w in docs if score is not None]
    if not measured:
        return []
    sources = sorted({s for s, _, _ in measured})
    rows: list[dict[str, object]] = []
    for t in thresholds:
        for src in [*sources, "all"]:
            mine = [(score, w) for s, score, w in measured if src in ("all", s)]
            kept = [(score, w) for score, w in mine if score >= t]
            total_words = sum(w for _, w in mine)
            rows.append({"threshold": round(t, 6), "source": src, "docs": len(kept),
                         "words": sum(w for _, w in kept), "docs_share": round(len(kept) / len(mine), 6),
                         "words_share": round(sum(w for _, w in kept) / total_words, 6) if total_words else 0.0})
    return rows


def curve_csv(rows: list[dict[str, object]]) -> str:
    """The curve as one CSV row per threshold (what `dvc plots` reads): totals (`docs`, `words`, their shares),
    then `docs:<source>` and `words:<source>` per source."""
    sources = sorted({str(r["source"]) for r in rows} - {"all"})
    header = ["threshold", "docs", "words", "docs_share", "words_share",
              *(f"{k}:{s}" for s in sources for k in ("docs", "words"))]
    by_key = {(r["threshold"], r["source"]): r for r in rows}
    lines = [",".join(header)]
    for t in sorted({r["threshold"] for r in rows}):
        total = by_key[(t, "all")]
        cells = [t, total["docs"], total["words"], total["docs_share"], total["words_share"],
                 *(by_key[(t, s)][k] for s in sources for k in ("docs", "words"))]
        lines.append(",".join(str(c) for c in cells))
    return "\n".join(lines) + "\n"
