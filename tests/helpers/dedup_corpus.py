"""A near-dedup benchmark corpus that reads like real text, with exact truth (`benchmarks/dedup_real.py`).

`tests.helpers.synthetic_corpus`'s corpus is one length (80–300 pseudo-words), one register and no boilerplate: easier
than a crawl. This one is cut from the embedded corpora (plays, Wikipedia articles, standard-library code,
pydoc topics):

- **Lengths**: windows cut at line breaks to a log-normal length, median `MEDIAN_CHARS` (1,500) and σ 1.0,
  clipped to 150–60,000 characters (mean ~2.5 KB; a tenth over 5 KB, a few past 30 KB): web pages' and
  source files' shape. Each *round* cuts every source text once, from its own random lengths, so the rounds
  overlap: excerpts of one text that differ in where they start and end, which near dedup must judge on
  their real overlap (most are below the threshold, a few just above or below it). Rounds are added until
  the corpus is as large as asked.
- **Markup and boilerplate**: prose documents get, by `WEB_SHARE`, one of `SITES` site templates (a nav line,
  a cookie banner, a footer: the same text in thousands of documents); `HTML_SHARE` of them are whole HTML pages
  (tags, attributes); code documents get a license header by `LICENSE_SHARE`.
- **Copies**: `COPY_SHARE` of the documents get 1–3 copies, each with the edits crawls make: words changed
  (0.5–8 %), truncated to 75–100 %, extended by 5–30 % from another document, re-wrapped or re-spaced, smart
  quotes, HTML entities or markup, another site's template, or verbatim.

Truth: for every pair of documents cut from one source text with overlapping line ranges (every copy with its
original and its siblings) whose sizes allow Jaccard ≥ `TRUTH_FLOOR`, the exact Jaccard of their word-5-gram
sets of what near dedup compares (`normalize.shingle_text`, lowercase `\\w+` words: what the shingler reads),
as Python sets. Documents from different source texts share at most boilerplate, which `_decorate` keeps
small beside the body (the benchmark checks every predicted pair outside the truth exactly as well).
"""

from __future__ import annotations

import math
import random
import re
from collections import defaultdict
from dataclasses import dataclass

from tests.helpers.dedup_variants import APACHE, FORMATS
from tasks.data.embedded import CORPORA, read_embedded
from tasks.data.cleanup.normalize import shingle_text
from tasks.data.records import Doc
from tests.helpers.synthetic_corpus import SyntheticCorpus, jaccard, word_shingle_set

MEDIAN_CHARS, SIGMA, MIN_CHARS, MAX_CHARS = 1500, 1.0, 150, 60_000
WEB_SHARE, HTML_SHARE, LICENSE_SHARE, COPY_SHARE = 0.35, 0.08, 0.3, 0.12
TRUTH_FLOOR = 0.5            # pairs whose sizes cannot reach this Jaccard are not computed (truth is ≥ 0.8)
SITES = 40
PROSE = ("literature", "encyclopedia", "docs")
MIT = ("# Permission is hereby granted, free of charge, to any person obtaining a copy of this software and\n"
       "# associated documentation files (the \"Software\"), to deal in the Software without restriction,\n"
       "# including without limitation the rights to use, copy, modify, merge, publish, distribute, sublicense,\n"
       "# and/or sell copies of the Software. THE SOFTWARE IS PROVIDED \"AS IS\", WITHOUT WARRANTY OF ANY KIND.\n")


@dataclass
class Piece:
    """A document before decoration: a line range [lo, hi) of one source text."""

    source: str                  # embedded corpus name
    text_id: int                 # which source text
    lo: int
    hi: int
    body: str


def source_texts() -> list[tuple[str, list[str]]]:
    """(corpus, lines) of every embedded text; the stdlib's codec tables (`encodings/`, near copies of each
    other) are left out, so that no two source texts are near duplicates."""
    out = []
    for corpus in CORPORA:
        for doc in read_embedded(corpus):
            if isinstance(doc, Doc) and isinstance(doc.text, str) and not doc.key.startswith("encodings/"):
                out.append((corpus, doc.text.split("\n")))
    return out


def _length(rng: random.Random, median: int) -> int:
    return int(min(MAX_CHARS, max(MIN_CHARS, rng.lognormvariate(math.log(median), SIGMA))))


def cut_round(texts: list[tuple[str, list[str]]], rng: random.Random, median: int = MEDIAN_CHARS) -> list[Piece]:
    """One round: every source text cut at line breaks into windows of drawn lengths, from a random start."""
    pieces = []
    for t, (corpus, lines) in enumerate(texts):
        lo = rng.randrange(min(len(lines), 20))
        while lo < len(lines):
            want, size, hi = _length(rng, median), 0, lo
            while hi < len(lines) and size < want:
                size += len(lines[hi]) + 1
                hi += 1
            body = "\n".join(lines[lo:hi]).strip()
            if len(body) >= MIN_CHARS and len(body.split()) >= 20:
                pieces.append(Piece(corpus, t, lo, hi, body))
            lo = hi
    return pieces


def _site(k: int) -> tuple[str, str]:
    """Site k's header (nav line + cookie banner) and footer: boilerplate shared by all its pages."""
    r = random.Random(k)
    first, second = r.choice(["Daily", "The", "Open", "Global", "City"]), r.choice(["Herald", "Review", "Wiki", "Post"])
    name = f"{first} {second} {k}"
    nav = " | ".join(r.sample(["Home", "News", "Sport", "Culture", "Opinion", "Archive", "About us", "Contact",
                               "Subscribe", "Log in", "Register", "Search", "Podcasts", "Newsletters"], 7))
    cookie = ("We use cookies and similar technologies to improve your experience, measure traffic and show "
              "relevant ads. By clicking Accept you agree to this. Accept | Reject | Settings")
    footer = (f"Copyright {r.randint(2009, 2025)} {name}. All rights reserved. Terms of Use | Privacy Policy | "
              f"Cookie settings | Advertise | Careers. Follow {name} on social media.")
    return f"{name}\n{nav}\n{cookie}\n", f"\n{footer}"


def _decorate(piece: Piece, body: str, rng: random.Random) -> str:
    """Boilerplate around the body: a site template (prose) or a license header (code), only where the body is
    long enough that two unrelated documents sharing it stay far below the threshold."""
    words = len(body.split())
    if piece.source == "code":
        if words >= 80 and rng.random() < LICENSE_SHARE:
            return (APACHE if rng.random() < 0.6 else MIT) + body
        return body
    if words < 120 or rng.random() >= WEB_SHARE:
        return body
    head, foot = _site(rng.randrange(SITES))
    text = head + "\n" + body + foot
    return FORMATS["HTML markup"](text, rng) if rng.random() < HTML_SHARE else text


def _change_words(body: str, rng: random.Random, share: float, pool: list[str]) -> str:
    return re.sub(r"\w{3,}", lambda m: rng.choice(pool) if rng.random() < share else m.group(), body)


def edit_copy(body: str, rng: random.Random, other: str) -> str:
    """A copy of `body` as crawls make them: one or two edits of content, then maybe one of formatting."""
    pool = re.findall(r"\w{4,}", other) or ["changed"]
    for _ in range(rng.choice((1, 1, 2))):
        kind = rng.randrange(5)
        if kind == 0:
            body = _change_words(body, rng, rng.uniform(0.005, 0.08), pool)
        elif kind == 1:
            lines = body.split("\n")
            body = "\n".join(lines[: max(1, round(len(lines) * rng.uniform(0.75, 1.0)))])
        elif kind == 2:
            words = other.split()
            body += "\n\n" + " ".join(words[: int(len(body.split()) * rng.uniform(0.05, 0.3))])
        # kind 3, 4: verbatim content (formatting or template only)
    if rng.random() < 0.3:
        body = FORMATS[rng.choice(["re-wrapped", "doubled spaces", "trailing whitespace", "smart quotes/dashes",
                                   "HTML entities", "CRLF"])](body, rng)
    return body


def build(n_docs: int, seed: int = 0, median: int = MEDIAN_CHARS) -> SyntheticCorpus:
    """`n_docs` documents (rounds of windows plus their copies) in a seeded shuffled order, with exact truth;
    `median`: the windows' median length in characters."""
    rng = random.Random(seed)
    texts = source_texts()
    pieces: list[Piece] = []
    docs: list[tuple[Piece, str]] = []
    while len(docs) < n_docs:
        round_pieces = cut_round(texts, rng, median)
        rng.shuffle(round_pieces)
        for piece in round_pieces:
            if len(docs) >= n_docs:
                break
            docs.append((piece, _decorate(piece, piece.body, rng)))
            for _ in range(_copies(rng)):
                if len(docs) < n_docs:
                    other = rng.choice(round_pieces).body
                    docs.append((piece, _decorate(piece, edit_copy(piece.body, rng, other), rng)))
        pieces += round_pieces
    order = list(range(len(docs)))
    rng.shuffle(order)
    docs = [docs[k] for k in order]
    corpus_texts = [text for _, text in docs]
    pair_jaccard = _truth([p for p, _ in docs], corpus_texts)
    return SyntheticCorpus(
        ids=[f"{k:07d}-{p.source}" for k, (p, _) in enumerate(docs)], texts=corpus_texts,
        scores=[0.0] * len(docs), families=_families(pair_jaccard), pair_jaccard=pair_jaccard)


def _copies(rng: random.Random) -> int:
    if rng.random() >= COPY_SHARE:
        return 0
    return rng.choice((1, 1, 1, 2, 2, 3))


def shingles_of(text: str) -> set[tuple[str, ...]]:
    """The word-5-gram set near dedup compares (default folds), as Python tuples: the truth's own shingling."""
    return word_shingle_set(shingle_text(text))


def _truth(pieces: list[Piece], texts: list[str]) -> dict[tuple[int, int], float]:
    """Exact Jaccard of every pair cut from one source text with overlapping ranges whose line counts allow
    Jaccard ≥ TRUTH_FLOOR (copies share their original's range, so every family pair is computed)."""
    by_text: dict[int, list[int]] = defaultdict(list)
    for k, p in enumerate(pieces):
        by_text[p.text_id].append(k)
    sets: dict[int, set] = {}
    out: dict[tuple[int, int], float] = {}
    for members in by_text.values():
        members.sort(key=lambda k: pieces[k].lo)
        for a, i in enumerate(members):
            pi = pieces[i]
            for j in members[a + 1:]:
                pj = pieces[j]
                if pj.lo >= pi.hi:
                    break
                overlap = min(pi.hi, pj.hi) - pj.lo
                if overlap < TRUTH_FLOOR * (max(pi.hi, pj.hi) - pi.lo):
                    continue
                for k in (i, j):
                    if k not in sets:
                        sets[k] = shingles_of(texts[k])
                out[(min(i, j), max(i, j))] = jaccard(sets[i], sets[j])
    return out


def _families(pair_jaccard: dict[tuple[int, int], float], threshold: float = 0.8) -> list[list[int]]:
    """Connected groups of the true pairs (for the report's counts)."""
    parent: dict[int, int] = {}

    def find(x: int) -> int:
        while parent.setdefault(x, x) != x:
            parent[x] = parent[parent[x]]
            x = parent[x]
        return x

    for (i, j), sim in pair_jaccard.items():
        if sim >= threshold:
            parent[find(i)] = find(j)
    groups: dict[int, list[int]] = defaultdict(list)
    for x in list(parent):
        groups[find(x)].append(x)
    return sorted(sorted(g) for g in groups.values() if len(g) > 1)
