"""Near dedup's folds, as `DedupSpec` promises them: a text and its copy with the folds' noise added — HTML
entities, zero-width and other format characters inside words, look-alike letters mixed into Latin words,
full-width letters and case, markdown links to URLs — have the same shingle set, for word and char shingles,
through the batch path (`minhash.shingles`) and `shingle_text` alike."""

from __future__ import annotations

import re

from hypothesis import given, settings
from hypothesis import strategies as st

from specs.clean import DedupSpec
from tasks.data.cleanup.normalize import shingle_text
from tasks.data.dedup.minhash import shingles

WORD = st.text(alphabet="abcdefghijklmnopqrstuvwxyz", min_size=2, max_size=9)
PUNCT = st.sampled_from([" ", " ", " ", ", ", ". ", "'", " & ", "\n", " - "])
BASE = st.lists(st.tuples(WORD, PUNCT), min_size=6, max_size=30).map(lambda ws: "".join(w + p for w, p in ws).strip())
ZERO_WIDTH = ["\u200b", "\u200c", "\u200d", "\u2060", "\ufeff", "\u00ad", "\u200e"]
LOOK_ALIKE = {"a": "\u0430", "e": "\u0435", "o": "\u043e", "p": "\u0440", "c": "\u0441", "x": "\u0445"}
ENTITIES = {"'": ["&#39;", "&apos;", "&#x27;"], "&": ["&amp;", "&#38;"], " ": ["&nbsp;", " "]}


def noisy(rng, text: str) -> str:
    """`text` with each word, at random, salted with one kind of noise the folds take away."""
    out = []
    for piece in re.split(r"(\w+)", text):
        if not piece.isalpha():
            out.append("".join(rng.choice(ENTITIES[c]) if c in ENTITIES and rng.random() < 0.5 else c for c in piece))
            continue
        kind = rng.choice(["plain", "zero_width", "look_alike", "full_width", "upper", "link", "entity"])
        k = rng.randrange(1, len(piece)) if len(piece) > 1 else 1
        if kind == "zero_width":
            piece = piece[:k] + rng.choice(ZERO_WIDTH) + piece[k:]
        elif kind == "look_alike" and any(c in LOOK_ALIKE for c in piece[1:]):
            i = next(i for i in range(1, len(piece)) if piece[i] in LOOK_ALIKE)     # one letter: the word mixes
            piece = piece[:i] + LOOK_ALIKE[piece[i]] + piece[i + 1:]
        elif kind == "full_width":
            piece = "".join(chr(ord(c) - 0x61 + 0xFF41) for c in piece)
        elif kind == "upper":
            piece = piece.upper()
        elif kind == "entity" and k < len(piece):       # a letter written as a numeric reference
            piece = piece[:k] + rng.choice([f"&#{ord(piece[k])};", f"&#x{ord(piece[k]):x};"]) + piece[k + 1:]
        elif kind == "link":
            piece = f"[{piece}](https://example.org/{piece}/x?id=1)"
        out.append(piece)
    return "".join(out)


def words(text: str) -> list[str]:
    return re.findall(r"\w+", text.lower())


@settings(max_examples=150, deadline=None)
@given(BASE, st.randoms(use_true_random=False))
def test_a_copy_with_the_folds_noise_has_the_same_shingles(text, rng):
    copy = noisy(rng, text)
    assert words(shingle_text(copy)) == words(shingle_text(text)), (text, copy)
    for shingle in ("word", "char"):
        spec = DedupSpec(shingle=shingle)
        assert shingles(copy, spec).tolist() == shingles(text, spec).tolist(), (shingle, text, copy)


@settings(max_examples=100, deadline=None)
@given(st.text(alphabet=st.characters(blacklist_categories=()), max_size=60))
def test_shingling_takes_any_str(text):
    for shingle in ("word", "char"):
        assert len(shingles(text, DedupSpec(shingle=shingle))) >= 1


@settings(max_examples=60, deadline=None)
@given(BASE, st.randoms(use_true_random=False))
def test_a_copy_kept_as_html_has_the_same_word_shingles(text, rng):
    # a page copied with its markup: each line a paragraph in an article, a word now and then in a span
    lines = [re.sub(r"\w+", lambda m: f'<span class="w">{m.group()}</span>' if rng.random() < 0.2 else m.group(), line)
             for line in text.split("\n")]
    page = '<html><body><div class="article-body">' + "".join(f"<p>{line}</p>" for line in lines) + "</div></body></html>"
    spec = DedupSpec()
    assert shingles(page, spec).tolist() == shingles(text, spec).tolist(), (text, page)
