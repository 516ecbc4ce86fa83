"""Near-duplicate variants of real documents, made the way web crawls and code hosts make them, with known truth.

The planted corpora of `tests.helpers.synthetic_corpus` were written beside the detector; these start from the embedded
corpus (Shakespeare's scenes, Wikipedia articles, standard-library sources, pydoc help texts) and copy a document
the way the web does:

- `FORMATS`, formatting-only copies (any serious dedup calls them duplicates, whatever their shingles): case,
  re-wrapped lines, doubled whitespace, CRLF, smart quotes and dashes, full-width letters, ligatures, invisible
  characters (zero-width space, word joiner, soft hyphen; ZWJ/ZWNJ), HTML entities left in, trailing whitespace,
  Cyrillic look-alike letters in a fifth of the words, the text as an HTML page with its markup, and all of the
  first twelve at once. Each also comes as `+footer`: the copy has a site footer too, so exact dedup cannot
  catch it and near dedup must see through the formatting;
- `EDITS`, content edits whose truth is the exact word-5-gram Jaccard of the two texts before any formatting
  (`tests.helpers.synthetic_corpus.exact_jaccard`, plain Python sets): boilerplate header/footer, words or sentences
  changed, paragraphs reordered, truncated or extended copies;
- `LOOK_ALIKES`, pairs that must stay apart: template pages (same boilerplate, different body), code files
  sharing only a license header, different documents with the same title, fact pages from one template.

`evaluate` runs each kind through clean's own decision path (`cleaning.clean_records` → `minhash.signatures` →
`cleaning.deduplicate`, which tests/test_dedup_ooc.py holds equal to the stage's out-of-core one) and measures pair
recall and precision: a pair is predicted when both documents end in one keeper's group.
"""

from __future__ import annotations

import html
import random
import re
import textwrap
import unicodedata
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from itertools import combinations, islice
from pathlib import Path

import pyarrow as pa

from specs.clean import CleanSpec
from tasks.data.cleanup import cleaning
from tasks.data.dedup import minhash
from tasks.data.embedded import CORPORA, read_embedded
from tasks.data.records import Doc
from tests.helpers.synthetic_corpus import exact_jaccard

ROOT = Path(__file__).resolve().parents[2]
COOKIE = ("We use cookies to improve your experience on our site and to show you relevant advertising. By "
          "clicking Accept all you agree to our use of cookies. Accept all | Reject | Manage settings")
NAV = "Home > Library > Articles | Log in | Register | Search | Subscribe to our newsletter"
FOOTER = ("Copyright 2024 Example Media Group. All rights reserved. Privacy Policy | Terms of Use | Contact us | "
          "Advertise with us | Follow us on social media for daily updates and news")
APACHE = """# Copyright 2023 The Example Authors. All rights reserved.
#
# Licensed under the Apache License, Version 2.0 (the "License");
# you may not use this file except in compliance with the License.
# You may obtain a copy of the License at
#
#     http://www.apache.org/licenses/LICENSE-2.0
#
# Unless required by applicable law or agreed to in writing, software
# distributed under the License is distributed on an "AS IS" BASIS,
# WITHOUT WARRANTIES OR CONDITIONS OF ANY KIND, either express or implied.
# See the License for the specific language governing permissions and
# limitations under the License.
"""
FACT_PAGE = """{city} - City profile
Population: {n1} inhabitants (census of {year}). Area: {n2} square kilometres.
Mayor: {name}, in office since {year2}. Elevation: {n3} metres above sea level.
Twin towns: {twin}. Postal code: {zip}. Average temperature in July: {t} degrees.
Founded in {n4}, {city} is known for its {thing} and its annual {event} festival."""
NAMES = ("Ashford Marlow Kesteven Dunmore Halloway Brenton Carrick Elsdon Fenwick Garlow Hexley Idris Jarrow "
         "Kilmory Lanark Morven Netley Orrin Pelham Quarry Rendle Selby Thurso Upton Vardy Wexford").split()
THINGS = "cathedral harbour bridges vineyards museums gardens castle markets canals mills".split()


def docs_of(corpus: str, count: int, min_words: int = 150, max_words: int = 3000) -> list[tuple[str, str]]:
    """The first `count` (id, text) documents of an embedded corpus with `min_words`..`max_words` words."""
    docs = (d for d in read_embedded(corpus) if isinstance(d, Doc) and isinstance(d.text, str))
    fit = ((f"{corpus}/{d.key}", d.text) for d in docs if min_words <= len(d.text.split()) <= max_words)
    return list(islice(fit, count))


def originals(per_corpus: int, threshold: float = 0.5) -> list[tuple[str, str]]:
    """Documents of every embedded corpus, none within word-5-gram Jaccard `threshold` of an earlier pick (the
    stdlib's codec tables are near copies of each other: they would blur every kind's pairs)."""
    picked: list[tuple[str, str]] = []
    for corpus in CORPORA:
        for doc in docs_of(corpus, 3 * per_corpus):
            if sum(d[0].startswith(corpus) for d in picked) < per_corpus and all(
                    exact_jaccard(doc[1], t) < threshold for _, t in picked):
                picked.append(doc)
    return picked


# --- formatting-only copies ---------------------------------------------------------------------------------
def _per_word(text: str, rng: random.Random, share: float, change: Callable[[str], str]) -> str:
    return re.sub(r"\w{3,}", lambda m: change(m.group()) if rng.random() < share else m.group(), text)


def _inside(marks: str) -> Callable[[str, random.Random], str]:
    def insert(text: str, rng: random.Random) -> str:
        def one(word: str) -> str:
            k = rng.randrange(1, len(word))
            return word[:k] + rng.choice(marks) + word[k:]
        return _per_word(text, rng, 0.3, one)
    return insert


def _smart(text: str, rng: random.Random) -> str:
    text = re.sub(r'"([^"\n]*)"', "\u201c\\1\u201d", text)
    return text.replace("'", "\u2019").replace(" - ", " \u2013 ").replace("--", "\u2014")


def _entities(text: str, rng: random.Random) -> str:
    text = text.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;").replace('"', "&quot;")
    text = text.replace("'", rng.choice(["&#39;", "&rsquo;", "&#x27;"]))
    return re.sub(r"\. ", lambda m: ".&nbsp; " if rng.random() < 0.5 else ". ", text)


def _rewrap(text: str, rng: random.Random) -> str:
    width = rng.randrange(40, 90)
    return "\n\n".join(textwrap.fill(" ".join(p.split()), width) for p in text.split("\n\n") if p.strip())


def _trailing(text: str, rng: random.Random) -> str:
    lines = [line + rng.choice(["", " ", "  ", "\t", " \t "]) for line in text.split("\n")]
    return "\n\n" + "\n".join(lines) + "\n \n\t\n\n"


def _ligatures(text: str, rng: random.Random) -> str:
    for plain, lig in (("ffi", "\ufb03"), ("ffl", "\ufb04"), ("ff", "\ufb00"), ("fi", "\ufb01"), ("fl", "\ufb02")):
        text = text.replace(plain, lig)
    return text


def _fullwidth(text: str, rng: random.Random) -> str:
    wide = {c: chr(ord(c) + 0xFEE0) for c in "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789"}
    return _per_word(text, rng, 0.5, lambda w: "".join(wide.get(c, c) for c in w))


def _look_alikes(text: str, rng: random.Random) -> str:
    cyrillic = str.maketrans("aeopcxyAEOPCXH", "аеорсхуАЕОРСХН")    # Cyrillic look-alikes of Latin
    return _per_word(text, rng, 0.2, lambda w: w.translate(cyrillic))


def _markup(text: str, rng: random.Random) -> str:
    paras = "".join(f'<p class="article-body" data-i="{k}">{html.escape(p, quote=False)}</p>\n'
                    for k, p in enumerate(q for q in text.split("\n\n") if q.strip()))
    title = f"<title>{rng.randrange(10**6)}</title>"
    return f'<html><head>{title}</head><body><div class="main">\n{paras}</div></body></html>'


FORMATS: dict[str, Callable[[str, random.Random], str]] = {
    "upper case": lambda t, rng: t.upper(),
    "re-wrapped": _rewrap,
    "doubled spaces": lambda t, rng: re.sub(" ", lambda m: rng.choice([" ", "  ", " \t"]), t),
    "CRLF": lambda t, rng: t.replace("\n", "\r\n"),
    "re-indented with tabs": lambda t, rng: re.sub(r"(?m)^((?:    )+)", lambda m: "\t" * (len(m.group(1)) // 4), t),
    "smart quotes/dashes": _smart,
    "full-width letters": _fullwidth,
    "ligatures": _ligatures,
    "ZWSP/WJ/soft hyphen": _inside("\u200b\u2060\u00ad"),
    "ZWJ/ZWNJ": _inside("\u200d\u200c"),
    "HTML entities": _entities,
    "trailing whitespace": _trailing,
    "Cyrillic look-alikes": _look_alikes,
    "HTML markup": _markup,
}
# Not folded (measured, README): accents stripped (datatrove folds them: NFD, drop marks) and UTF-8 read as
# cp1252 (`don’t` → `donâ€™t`; ftfy repairs it, which NeMo Curator runs before its dedup).
NOT_FOLDED: dict[str, Callable[[str, random.Random], str]] = {
    "accents stripped": lambda t, rng: "".join(c for c in unicodedata.normalize("NFD", t)
                                               if not unicodedata.combining(c)),
    "mojibake (UTF-8 as cp1252)": lambda t, rng: t.encode("utf-8").decode("cp1252", errors="replace"),
}
FORMATS["all formats"] = lambda t, rng: _trailing(_entities(_inside("\u200b\u200d\u00ad")(
    _fullwidth(_ligatures(_smart(t.replace("\n", "\r\n"), rng), rng), rng), rng), rng), rng)


# --- content edits (truth: exact Jaccard before formatting) ---------------------------------------------------
def _change_words(share: float) -> Callable[[str, random.Random, str], str]:
    def edit(text: str, rng: random.Random, other: str) -> str:
        pool = re.findall(r"\w{4,}", other) or ["changed"]
        return _per_word(text, rng, share, lambda w: rng.choice(pool))
    return edit


def _change_sentences(text: str, rng: random.Random, other: str) -> str:
    ours, theirs = re.split(r"(?<=[.!?])\s+", text), re.split(r"(?<=[.!?])\s+", other)
    for _ in range(2):
        ours[rng.randrange(len(ours))] = rng.choice(theirs)
    return " ".join(ours)


def _reorder(text: str, rng: random.Random, other: str) -> str:
    parts = [p for p in text.split("\n\n") if p.strip()]
    if len(parts) < 3:              # one block: cut it into thirds of lines
        lines = text.split("\n")
        parts = ["\n".join(lines[k::3]) for k in range(3)] if len(lines) >= 3 else parts
    rng.shuffle(parts)
    return "\n\n".join(parts)


def _truncate(keep: float) -> Callable[[str, random.Random, str], str]:
    return lambda t, rng, other: " ".join(t.split()[: max(1, int(len(t.split()) * keep))])


def _extend(share: float) -> Callable[[str, random.Random, str], str]:
    return lambda t, rng, other: t + "\n\n" + " ".join(other.split()[: int(len(t.split()) * share)])


EDITS: dict[str, Callable[[str, random.Random, str], str]] = {
    "cookie banner + nav + footer": lambda t, rng, other: f"{COOKIE}\n{NAV}\n\n{t}\n\n{FOOTER}",
    "license header added": lambda t, rng, other: f"{APACHE}\n{t}",
    "1% words changed": _change_words(0.01),
    "4% words changed": _change_words(0.04),
    "2 sentences changed": _change_sentences,
    "paragraphs reordered": _reorder,
    "truncated to 90%": _truncate(0.9),
    "truncated to 70%": _truncate(0.7),
    "extended by 10%": _extend(0.1),
    "extended by 40%": _extend(0.4),
}


# Edits on both sides of the threshold, also judged after every formatting at once.
FORMATTED_EDITS = ("2 sentences changed", "4% words changed", "truncated to 90%", "truncated to 70%")


@dataclass
class Kind:
    """One variant kind's documents and truth: `pairs` are the (a, b) pairs it judges, `truth` the true ones."""

    name: str
    group: str                                  # "format", "format+footer", "edit" or "look-alike"
    texts: dict[str, str]
    pairs: list[tuple[str, str]]
    truth: set[tuple[str, str]]
    jaccard: dict[tuple[str, str], float] = field(default_factory=dict)   # edits: each pair's truth Jaccard


def format_kind(name: str, docs: list[tuple[str, str]], seed: int, footer: bool) -> Kind:
    rng, change = random.Random(f"{seed}/{name}/{footer}"), {**FORMATS, **NOT_FOLDED}[name]
    texts, pairs, truth = dict(docs), [], set()
    for doc_id, text in docs:
        base = f"{text}\n\n{FOOTER}" if footer else text
        texts[f"{doc_id}~v"] = change(base, rng)
        pairs.append((doc_id, f"{doc_id}~v"))
        if not footer or exact_jaccard(text, base) >= 0.8:    # formatting-only: a duplicate by definition
            truth.add(pairs[-1])
    return Kind(f"{name}{' +footer' if footer else ''}", "format+footer" if footer else "format", texts, pairs,
                truth)


def edit_kind(name: str, docs: list[tuple[str, str]], seed: int, threshold: float, fmt: str | None = None) -> Kind:
    """Edited copies; with `fmt`, formatted by FORMATS[fmt] after the edit (truth stays the edit's Jaccard, so
    a fold that made unrelated text look alike would show up as false merges of the true negatives)."""
    rng, edit = random.Random(f"{seed}/{name}/{fmt}"), EDITS[name]
    texts, pairs, truth, jaccard = dict(docs), [], set(), {}
    for k, (doc_id, text) in enumerate(docs):
        edited = edit(text, rng, docs[(k + 1) % len(docs)][1])
        texts[f"{doc_id}~v"] = FORMATS[fmt](edited, rng) if fmt else edited
        pairs.append((doc_id, f"{doc_id}~v"))
        jaccard[pairs[-1]] = exact_jaccard(text, edited)
        if jaccard[pairs[-1]] >= threshold:
            truth.add(pairs[-1])
    return Kind(f"{name}{f' + {fmt}' if fmt else ''}", "edit", texts, pairs, truth, jaccard)


def look_alike_kinds(docs: list[tuple[str, str]], seed: int, threshold: float) -> list[Kind]:
    """Pairs of different documents dressed alike; a pair is true only if its Jaccard really is ≥ threshold."""
    rng = random.Random(f"{seed}/look-alikes")
    code = [(i, t) for i, t in docs if i.startswith("code/")]
    prose = [(i, " ".join(t.split()[:120])) for i, t in docs if not i.startswith("code/")]
    dressed = {
        "template pages, different body": [f"{COOKIE}\n{NAV}\n\n{t}\n\n{FOOTER}" for _, t in prose],
        "license header only shared": [f"{APACHE}\n{t}" for _, t in code],
        "same title, different doc": [f"Introduction\n\n{t}" for _, t in prose],
        "fact pages, only numbers differ": _fact_pages(rng, len(prose)),
    }
    kinds = []
    for name, texts in dressed.items():
        ids = [f"{name.split()[0]}/{k:03d}" for k in range(len(texts))]
        pairs = list(zip(ids[0::2], ids[1::2]))
        of = dict(zip(ids, texts))
        truth = {p for p in pairs if exact_jaccard(of[p[0]], of[p[1]]) >= threshold}
        kinds.append(Kind(name, "look-alike", of, pairs, truth))
    return kinds


def _fact_pages(rng: random.Random, count: int) -> list[str]:
    """Pairs of profile pages of one place that differ only in their numbers (as two product or census pages
    do): word 5-grams see different facts; datatrove's default `norm_numbers` (every number → 0) would make
    each pair identical."""
    pages = []
    for _ in range(count // 2):
        words = dict(city=rng.choice(NAMES), name=f"{rng.choice(NAMES)} {rng.choice(NAMES)}", twin=rng.choice(NAMES),
                     thing=rng.choice(THINGS), event=rng.choice(THINGS))
        for _ in range(2):
            n = lambda lo, hi: str(rng.randrange(lo, hi))  # noqa: E731
            pages.append(FACT_PAGE.format(**words, n1=n(1000, 900000), year=n(1990, 2023), n2=n(5, 900),
                                          year2=n(2000, 2024), n3=n(1, 2000), zip=n(10000, 99999), t=n(12, 35),
                                          n4=n(800, 1900)))
    return pages


def all_kinds(per_corpus: int = 12, seed: int = 1, threshold: float = 0.8) -> list[Kind]:
    docs = originals(per_corpus)
    return ([format_kind(n, docs, seed, False) for n in FORMATS] + [format_kind(n, docs, seed, True) for n in FORMATS]
            + [format_kind(n, docs, seed, footer) for n in NOT_FOLDED for footer in (False, True)]
            + [edit_kind(n, docs, seed, threshold) for n in EDITS]
            + [edit_kind(n, docs, seed, threshold, "all formats") for n in FORMATTED_EDITS]
            + look_alike_kinds(docs, seed, threshold))


# --- clean's decision path ----------------------------------------------------------------------------------
def eval_spec(clean: CleanSpec) -> CleanSpec:
    """`clean` with the per-document filters off (they judge quality, not duplication) and one quality score."""
    off = {"enabled": False}
    return clean.model_copy(update={"filters": [], "quality": clean.quality.model_copy(update=off),
                                    "language": clean.language.model_copy(update=off),
                                    "toxicity": clean.toxicity.model_copy(update=off),
                                    "decontamination": clean.decontamination.model_copy(update=off)})


def groups(texts: dict[str, str], clean: CleanSpec, seed: int = 1) -> dict[str, str]:
    """Document id -> the id of the document kept for it, by clean's phase 1 (normalize, PII) and its dedup."""
    spec = eval_spec(clean)
    records = [{"id": i, "text": t, "source": i.split("/")[0], "lang": "en", "origin": i, "meta": "{}",
                "media": []} for i, t in sorted(texts.items())]
    rows = cleaning.clean_records(records, spec, ROOT, [])
    table = pa.Table.from_pylist(rows, schema=cleaning.WORK_SCHEMA)
    sigs = minhash.signatures([r["text"] for r in rows], spec.dedup, seed)
    reasons = cleaning.deduplicate(table, sigs, spec, seed)["reasons"]
    keeper = {r["id"]: r["id"] for r in rows}
    keeper.update({rows[k]["id"]: kept for k, (_, kept, _) in reasons.items()})
    return keeper


def predicted_pairs(keeper: dict[str, str]) -> set[tuple[str, str]]:
    members: dict[str, list[str]] = {}
    for doc, kept in keeper.items():
        members.setdefault(kept, []).append(doc)
    return {tuple(sorted(p)) for group in members.values() for p in combinations(group, 2)}


def evaluate(kind: Kind, clean: CleanSpec, seed: int = 1) -> dict[str, float | int | str]:
    """Pair recall over `kind.truth` and precision over every predicted pair (one not among the kind's truth
    counts as true only if its exact Jaccard is ≥ threshold, e.g. two originals that really are near copies)."""
    predicted = predicted_pairs(groups(kind.texts, clean, seed))
    truth = {tuple(sorted(p)) for p in kind.truth}
    judged = {tuple(sorted(p)) for p in kind.pairs}
    good = {p for p in predicted if p in truth or (p not in judged and exact_jaccard(
        kind.texts[p[0]], kind.texts[p[1]]) >= clean.dedup.threshold)}
    found = len(truth & predicted)
    return {"kind": kind.name, "group": kind.group, "pairs": len(judged), "true": len(truth), "found": found,
            "predicted": len(predicted), "false": len(predicted) - len(good),
            "recall": found / len(truth) if truth else float("nan"),
            "precision": len(good) / len(predicted) if predicted else float("nan")}


def table(results: Iterable[dict]) -> str:
    lines = ["| kind | group | pairs | true | found | recall | merged | false | precision |", "|" + "---|" * 9]
    for r in results:
        lines.append(f"| {r['kind']} | {r['group']} | {r['pairs']} | {r['true']} | {r['found']} | "
                     f"{r['recall']:.3f} | {r['predicted']} | {r['false']} | {r['precision']:.3f} |")
    return "\n".join(lines)


def hyphen_wrap(text: str, width: int = 72, hyphen: str = "-") -> str:
    """Each paragraph wrapped at `width`, a word of 6+ letters crossing the margin split there with `hyphen`
    (`exam-\\nple`), as typeset, PDF and OCR'd copies are."""
    out = []
    for para in text.split("\n\n"):
        lines, line = [], ""
        for word in para.split():
            if line and len(line) + 1 + len(word) > width:
                room = width - len(line) - 2
                if word.isalpha() and len(word) >= 6 and room >= 3:
                    cut = min(room, len(word) - 3)
                    lines.append(f"{line} {word[:cut]}{hyphen}")
                    line = word[cut:]
                    continue
                lines.append(line)
                line = word
            else:
                line = f"{line} {word}" if line else word
        out.append("\n".join([*lines, line]))
    return "\n\n".join(out)
