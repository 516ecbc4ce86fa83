"""Seeded synthetic corpus with planted near-duplicates and exact-Jaccard ground truth (tests + benchmarks).

Documents are 80–300 words of English-like prose: pseudo-words from a seeded syllable vocabulary, drawn with
Zipf–Mandelbrot frequencies (frequent words are short, as in English), grouped into capitalized sentences with
commas and full stops, and paragraphs. Some documents get a *family*: either one near-duplicate (target
word-5-gram Jaccard uniform in [0.8, 1.0], a tenth of them verbatim copies) or 2–3 light copies (target in
[0.9, 1.0]), plus 0–2 relatives (hard negatives, target Jaccard in [0.5, 0.8)), each made by word-level edits
(substitute / insert / delete) of the base. The exact Jaccard of every pair inside a family is computed on
word 5-gram sets and kept as ground truth; unrelated documents share essentially no 5-gram (callers can check
random pairs with `exact_jaccard`).

Families of several near-duplicates make the pair metric subtle: any clustering puts two copies of one base in
one cluster, which counts as a false pair when their mutual Jaccard is below the threshold. With the mix above
a perfect detector + union-find still scores pair F1 ≈ 0.985 (0.937 when every copy targeted [0.8, 1.0]).

Tokenization matches `tasks.data.dedup.minhash` (lowercase `\\w+` words), so ground truth and detector see the same
shingles.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from itertools import combinations

import numpy as np

from tasks.data.dedup.wordhash import join_words, read_escapes

_ONSETS = ("", "b", "c", "d", "f", "g", "h", "k", "l", "m", "n", "p", "r", "s", "t", "v", "w", "st", "th",
           "ch", "sh", "tr", "pl", "gr", "br")
_NUCLEI = ("a", "e", "i", "o", "u", "ea", "ou", "ai")
_CODAS = ("", "", "", "n", "r", "s", "t", "l", "nd", "ng", "st")


@dataclass
class SyntheticCorpus:
    """Documents in shuffled order plus the planted structure (indices refer to `texts`)."""

    ids: list[str]
    texts: list[str]
    scores: list[float]                         # quality score per doc, uniform in [0, 1)
    families: list[list[int]]                   # planted groups, base document first
    pair_jaccard: dict[tuple[int, int], float] = field(default_factory=dict)  # exact J, (i < j), in families

    def true_pairs(self, threshold: float) -> set[tuple[int, int]]:
        """Planted pairs whose exact word-5-gram Jaccard is ≥ threshold."""
        return {p for p, j in self.pair_jaccard.items() if j >= threshold}


def make_vocabulary(size: int, rng: np.random.Generator) -> list[str]:
    """`size` distinct lowercase pseudo-words, shortest first (so Zipf rank 1 is a short word)."""
    words: set[str] = set()
    while len(words) < size:
        batch = 4 * (size - len(words)) + 16  # draw in vectorized batches; duplicates are simply skipped
        syllables = rng.choice([1, 2, 3, 4], size=batch, p=[0.25, 0.4, 0.25, 0.1]).tolist()
        parts = np.stack([rng.integers(len(t), size=(batch, 4)) for t in (_ONSETS, _NUCLEI, _CODAS)]).tolist()
        for i, count in enumerate(syllables):
            words.add("".join(_ONSETS[parts[0][i][k]] + _NUCLEI[parts[1][i][k]] + _CODAS[parts[2][i][k]]
                              for k in range(count)))
            if len(words) == size:
                break
    return sorted(words, key=lambda w: (len(w), w))


def zipf_probabilities(size: int, exponent: float = 1.1, shift: float = 2.7) -> np.ndarray:
    """Zipf–Mandelbrot word probabilities p(rank) ∝ 1 / (rank + shift)^exponent."""
    weights = 1.0 / (np.arange(1, size + 1) + shift) ** exponent  # [size]
    return weights / weights.sum()


def word_shingle_set(text: str, n: int = 5) -> set[tuple[str, ...]]:
    """Exact word n-gram set of a text (same tokenization as the MinHash shingler: its escapes read and its
    contractions joined, `wordhash.join_words`)."""
    words = join_words(read_escapes(text.lower()))
    if len(words) < n:
        return {tuple(words)}
    return set(zip(*(words[k:] for k in range(n))))


def jaccard(a: set, b: set) -> float:
    return len(a & b) / len(a | b) if a or b else 1.0


def exact_jaccard(text_a: str, text_b: str, n: int = 5) -> float:
    return jaccard(word_shingle_set(text_a, n), word_shingle_set(text_b, n))


class _Writer:
    """Turns word-id sequences into prose, and edits them."""

    def __init__(self, vocab_size: int, rng: np.random.Generator) -> None:
        self.rng = rng
        self.vocab = make_vocabulary(vocab_size, rng)
        self.capitalized = [w.capitalize() for w in self.vocab]
        self.cdf = np.cumsum(zipf_probabilities(vocab_size))  # [vocab_size]

    def draw(self, count: int) -> np.ndarray:
        """`count` Zipf-distributed word ids."""  # searchsorted on the CDF: much faster than rng.choice(p=)
        return np.minimum(np.searchsorted(self.cdf, self.rng.random(count)), len(self.vocab) - 1)

    def render(self, ids: list[int]) -> str:
        rng, words = self.rng, [self.vocab[w] for w in ids]
        ends = np.cumsum(rng.integers(6, 19, size=len(ids) // 6 + 1)) - 1  # sentence-final word positions
        ends = np.append(ends[ends < len(ids) - 1], len(ids) - 1).tolist()
        for k in [0, *(e + 1 for e in ends[:-1])]:
            words[k] = self.capitalized[ids[k]]
        for k in np.flatnonzero(rng.random(len(ids)) < 0.06).tolist():
            words[k] += ","
        marks = rng.random(len(ends))  # "?" for one sentence in ten; a paragraph break after 15 %
        for e, m in zip(ends, marks.tolist()):
            words[e] = words[e].rstrip(",") + ("?" if m < 0.1 else ".") + ("\n\n" if m > 0.85 else "")
        return " ".join(words).replace("\n\n ", "\n\n").strip()

    def edit(self, base: list[int], target: float, n: int) -> list[int]:
        """Word-level edits of `base` until its word-n-gram Jaccard to `base` is about `target`.

        One isolated edit changes ≤ n shingles on each side, so k edits give J ≈ (N − nk) / (N + nk); a
        short binary search over a pre-drawn edit sequence absorbs overlaps between edits.
        """
        if target >= 1.0:
            return list(base)
        size = max(len(base) - n + 1, 1)
        k0 = int(np.ceil(size * (1 - target) / (n * (1 + target))))
        kinds = self.rng.choice(3, size=3 * k0 + 8, p=[0.6, 0.2, 0.2])  # substitute / insert / delete
        spots = self.rng.random(len(kinds))
        fresh = self.draw(len(kinds)).tolist()
        base_set = set(zip(*(base[k:] for k in range(n))))

        def apply(count: int) -> tuple[list[int], float]:
            words = list(base)
            for kind, spot, word in zip(kinds[:count], spots[:count], fresh[:count]):
                pos = int(spot * len(words))
                if kind == 0:
                    words[pos] = word
                elif kind == 1:
                    words.insert(pos, word)
                elif len(words) > n + 1:
                    del words[pos]
            return words, jaccard(base_set, set(zip(*(words[k:] for k in range(n)))))

        lo, hi = 0, len(kinds)  # find the fewest edits whose Jaccard is ≤ target
        while lo < hi:
            mid = (lo + hi) // 2
            if apply(mid)[1] <= target:
                hi = mid
            else:
                lo = mid + 1
        return apply(lo)[0]


def make_corpus(
    n_docs: int,
    seed: int = 0,
    family_rate: float = 0.08,
    vocab_size: int = 20_000,
    n: int = 5,
    words: tuple[int, int] = (80, 300),
) -> SyntheticCorpus:
    """`n_docs` documents of `words` (min, max) words; about `family_rate` of the base documents get planted
    near-duplicates/relatives. (360, 560) words make ~2 KB documents."""
    rng = np.random.default_rng(seed)
    writer = _Writer(vocab_size, rng)
    docs: list[list[int]] = []
    groups: list[list[int]] = []
    while len(docs) < n_docs:
        base = writer.draw(int(rng.integers(words[0], words[1] + 1))).tolist()
        group = [len(docs)]
        docs.append(base)
        if rng.random() < family_rate:
            # Most families are one near-duplicate of the base; a quarter are 2–3 light copies (templated pages,
            # mirrors), whose mutual Jaccard then also tends to stay ≥ 0.8. Relatives are hard negatives.
            if rng.random() < 0.75:
                targets = [1.0 if rng.random() < 0.1 else float(rng.uniform(0.8, 1.0))]
            else:
                targets = [float(rng.uniform(0.9, 1.0)) for _ in range(int(rng.integers(2, 4)))]
            targets += [float(rng.uniform(0.5, 0.8)) for _ in range(int(rng.choice(3, p=[0.4, 0.4, 0.2])))]
            for target in targets:
                if len(docs) >= n_docs:
                    break
                group.append(len(docs))
                docs.append(writer.edit(base, target, n))
        if len(group) > 1:
            groups.append(group)

    order = rng.permutation(n_docs)          # order[new] = old: families end up scattered
    new_of_old = np.empty(n_docs, dtype=np.int64)
    new_of_old[order] = np.arange(n_docs)
    texts = [writer.render(docs[old]) for old in order.tolist()]
    families = [sorted(int(new_of_old[o]) for o in g) for g in groups]
    pair_jaccard: dict[tuple[int, int], float] = {}
    for g in families:
        sets = {i: word_shingle_set(texts[i], n) for i in g}
        for i, j in combinations(g, 2):
            pair_jaccard[(i, j)] = jaccard(sets[i], sets[j])
    return SyntheticCorpus(
        ids=[f"syn-{i:07d}" for i in range(n_docs)],
        texts=texts,
        scores=rng.random(n_docs).tolist(),
        families=families,
        pair_jaccard=pair_jaccard,
    )


def cluster_pairs(clusters: list[list[int]]) -> set[tuple[int, int]]:
    """All (i < j) pairs that share a cluster: what a clustering predicts as duplicates."""
    return {(min(a, b), max(a, b)) for c in clusters for a, b in combinations(c, 2)}


def pair_scores(predicted: set[tuple[int, int]], true: set[tuple[int, int]]) -> tuple[float, float, float]:
    """Pair precision, recall and F1."""
    hits = len(predicted & true)
    precision = hits / len(predicted) if predicted else 1.0
    recall = hits / len(true) if true else 1.0
    f1 = 2 * precision * recall / (precision + recall) if precision + recall else 0.0
    return precision, recall, f1
