"""Near dedup on more near-duplicate shapes: Indic scripts, pointed Arabic/Hebrew, hyphenation, wrapping, noise.

    python benchmarks/dedup_probes.py                   # every kind, 40 originals each
    python benchmarks/dedup_probes.py --kinds hi ar     # some kinds only (a kind's name or its prefix)

Originals are text we did not write: Faker's bn_BD / ar_AA / he_IL / ru_RU lorem words, hi_IN / ta_IN names,
streets and cities (those locales have no lorem), and the embedded corpus' articles. Kinds:

- `hi` / `bn` / `ta`: sentences of Devanagari / Bengali / Tamil words, copies with 1 or 3 words replaced.
  Vowel signs and viramas are combining marks (Unicode Mn/Mc), not `\\w`: the truth's unit is a run of word
  characters *and* combining marks (a written word), not the `\\w+` fragments between the marks.
- `ar` / `he`: copies with harakat / niqqud (optional vowel pointing) added to a third of the letters, or every
  pointing mark stripped; `ru`: stress marks (a combining acute) on a fifth of the words. Same text: duplicates
  by definition.
- Latin (encyclopedia articles): soft hyphens inside words, hyphenated at line breaks (`exam-\\nple`, wrapped at
  72 columns), hard-wrapped at 72 columns, whitespace removed — duplicates by definition; paragraphs reordered,
  sentences interleaved with site boilerplate (nav, cookie, share lines), OCR-style noise (`rn`→`m`, `m`→`rn`,
  `l`→`1`, `O`→`0` at 1 % / 2 % of the characters) — true when their unit 5-gram Jaccard is ≥ 0.8.

Each kind is one run of clean's real path (`dedup_scripts.real_keepers`); distinct originals (and, for the
boilerplate kind, every other document carrying the same boilerplate) are the look-alikes that must stay apart:
a merged pair of two families below unit Jaccard 0.8 is a false merge.
"""

from __future__ import annotations

import random
import re
import sys
import textwrap
import unicodedata
from collections.abc import Callable
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from benchmarks.dedup_scripts import arguments, judge, merged_pairs, real_keepers  # noqa: E402
from benchmarks.dedup_scripts import unit_jaccard as scripts_jaccard  # noqa: E402
from tests.helpers.dedup_variants import COOKIE, NAV, docs_of, hyphen_wrap  # noqa: E402

_MARK = "".join(chr(c) for c in range(0x300, 0x110000) if unicodedata.category(chr(c)) in ("Mn", "Mc"))
# the truth's unit: word characters and combining marks (stated here, not imported from the shingler)
_UNIT = re.compile("[\\w" + re.escape(_MARK) + "]+")
_POINTING = re.compile("[\u0591-\u05bd\u05bf\u05c1\u05c2\u05c4\u05c5\u05c7\u0610-\u061a\u064b-\u065f\u0670"
                       "\u06d6-\u06dc\u06df-\u06e4\u06e7\u06e8\u06ea-\u06ed]")
HARAKAT = "\u064e\u064f\u0650\u0652\u0651\u064b"
NIQQUD = "\u05b0\u05b4\u05b5\u05b6\u05b7\u05b8\u05b9\u05bb\u05bc"
SHARE_LINE = "Share this article: Facebook | Twitter | LinkedIn | Email | Print"


def units(text: str) -> list[str]:
    """The words of `text` after `shingle_text`, lower case, Arabic/Hebrew pointing dropped."""
    from tasks.data.cleanup.normalize import shingle_text

    return _UNIT.findall(_POINTING.sub("", shingle_text(text).lower()))


def unit_jaccard(a: str, b: str) -> float:
    """The exact 5-gram Jaccard of the two texts' `units`."""
    return scripts_jaccard(a, b, split=units)


# --- scripts -------------------------------------------------------------------------------------------------
def _faker_words(locale: str, seed: int) -> list[str]:
    from faker import Faker

    fake = Faker(locale)
    fake.seed_instance(seed)
    if locale in ("hi_IN", "ta_IN"):            # no lorem: the locale's names, streets and cities
        raw = " ".join(f"{fake.name()} {fake.street_name()} {fake.city()}" for _ in range(600)).split()
    else:
        raw = fake.words(3000)
    return sorted({w.strip(".,") for w in raw if not w.isascii() and not any(c.isdigit() for c in w)})


def _sentence_docs(words: list[str], count: int, rng: random.Random, stop: str = ".") -> list[str]:
    def sentence() -> str:
        return " ".join(rng.choice(words) for _ in range(rng.randint(6, 12))) + stop
    return [" ".join(sentence() for _ in range(rng.randint(10, 18))) for _ in range(count)]


def _replace_words(k: int) -> Callable[[str, random.Random, list[str]], str]:
    def edit(text: str, rng: random.Random, pool: list[str]) -> str:
        words = text.split(" ")
        for i in rng.sample(range(len(words)), k):
            words[i] = rng.choice(pool) + ("." if words[i].endswith(".") else "")
        return " ".join(words)
    return edit


def _point(marks: str, share: float) -> Callable[[str, random.Random, list[str]], str]:
    def edit(text: str, rng: random.Random, pool: list[str]) -> str:
        return "".join(c + rng.choice(marks) if c.isalpha() and rng.random() < share else c
                       for c in _POINTING.sub("", text))
    return edit


def _stress(text: str, rng: random.Random, pool: list[str]) -> str:
    def mark(m: re.Match[str]) -> str:
        word = m.group()
        vowels = [i for i, c in enumerate(word) if c in "аеиоуыэюяАЕИОУЫЭЮЯ"]
        if not vowels or rng.random() >= 0.2:
            return word
        i = rng.choice(vowels)
        return word[: i + 1] + "\u0301" + word[i + 1:]
    return re.sub(r"\w{4,}", mark, text)


SCRIPT_KINDS = {"hi": ("hi_IN", {"1 word replaced": _replace_words(1), "3 words replaced": _replace_words(3)}),
                "bn": ("bn_BD", {"1 word replaced": _replace_words(1), "3 words replaced": _replace_words(3)}),
                "ta": ("ta_IN", {"1 word replaced": _replace_words(1), "3 words replaced": _replace_words(3)}),
                "ar": ("ar_AA", {"harakat added": _point(HARAKAT, 0.35),
                                 "pointing stripped": lambda t, rng, pool: _POINTING.sub("", t)}),
                "he": ("he_IL", {"niqqud added": _point(NIQQUD, 0.35)}),
                "ru": ("ru_RU", {"stress marks on 1/5 of words": _stress})}


def script_kind(lang: str, count: int, seed: int) -> dict[str, tuple[list[str], list[tuple[int, int]], bool]]:
    """Per edit of `lang`: (originals + one copy each, planted pairs, duplicates by definition)."""
    locale, edits = SCRIPT_KINDS[lang]
    rng = random.Random(f"{seed}/{lang}")
    pool = _faker_words(locale, seed)
    docs = _sentence_docs(pool, count, rng, "।" if lang == "hi" else ".")
    if lang == "ar":                            # Faker's own Arabic text, which carries some pointing already
        from faker import Faker
        fake = Faker(locale)
        fake.seed_instance(seed)
        docs = [fake.text(600) for _ in range(count)]
    pointing = lang in ("ar", "he", "ru")
    return {f"{lang}: {name}": (docs + [edit(t, rng, pool) for t in docs], [(k, k + count) for k in range(count)],
                                pointing) for name, edit in edits.items()}


# --- Latin shapes --------------------------------------------------------------------------------------------
def _soft_hyphens(text: str, rng: random.Random) -> str:
    return re.sub(r"[^\W\d_]{6,}", lambda m: m.group()[:3] + "\u00ad" + m.group()[3:] if rng.random() < 0.3
                  else m.group(), text)


def _hyphenated(text: str, rng: random.Random, width: int = 72) -> str:
    """Each paragraph wrapped at `width`, a word crossing the margin split there with a hyphen (`exam-\\nple`)."""
    return hyphen_wrap(text, width)


def _reordered(text: str, rng: random.Random) -> str:
    paras = text.split("\n\n")
    rng.shuffle(paras)
    return "\n\n".join(paras)


def _boilerplate(text: str, rng: random.Random) -> str:
    sentences = re.split(r"(?<=[.!?])\s+", text)
    lines = [NAV]
    for k, s in enumerate(sentences):
        lines.append(s)
        if k % 4 == 3:
            lines.append(rng.choice((COOKIE, SHARE_LINE, NAV)))
    return "\n".join(lines)


OCR = (("rn", "m"), ("m", "rn"), ("l", "1"), ("O", "0"), ("cl", "d"), ("e", "c"))


def _ocr(share: float) -> Callable[[str, random.Random], str]:
    def noise(text: str, rng: random.Random) -> str:
        out, k = [], 0
        while k < len(text):
            for a, b in OCR:
                if text.startswith(a, k) and rng.random() < share * 4:      # ~1/4 of the characters can flip
                    out.append(b)
                    k += len(a)
                    break
            else:
                out.append(text[k])
                k += 1
        return "".join(out)
    return noise


LATIN: dict[str, tuple[Callable[[str, random.Random], str], bool]] = {
    "soft hyphens in 30 % of long words": (_soft_hyphens, True),
    "hyphenated at line breaks (72 columns)": (_hyphenated, True),
    "hard-wrapped at 72 columns": (lambda t, rng: "\n\n".join(textwrap.fill(p, 72) for p in t.split("\n\n")), True),
    "whitespace removed": (lambda t, rng: re.sub(r"\s+", "", t), True),
    "paragraphs reordered": (_reordered, False),
    "sentences interleaved with boilerplate": (_boilerplate, False),
    "OCR noise 1 %": (_ocr(0.01), False),
    "OCR noise 2 %": (_ocr(0.02), False),
}


def latin_kinds(count: int, seed: int) -> dict[str, tuple[list[str], list[tuple[int, int]], bool]]:
    rng = random.Random(f"{seed}/latin")
    prose = [t for _, t in docs_of("encyclopedia", count, 200, 3000)]
    return {name: (prose + [change(t, rng) for t in prose], [(k, k + len(prose)) for k in range(len(prose))], d)
            for name, (change, d) in LATIN.items()}


def main() -> None:
    args = arguments(__doc__, "kind names or prefixes (default: all)")
    print("| kind | planted pairs | true | found | recall | planted, merged below 0.8 | false merges |\n"
          "|---|---:|---:|---:|---:|---:|---:|")
    kinds = {}
    for lang in SCRIPT_KINDS:
        if not args.kinds or lang in args.kinds:
            kinds.update(script_kind(lang, args.per_kind, args.seed))
    kinds.update({k: v for k, v in latin_kinds(args.per_kind, args.seed).items()
                  if not args.kinds or any(k.startswith(p) for p in args.kinds)})
    for name, (texts, planted, by_definition) in kinds.items():
        merged = merged_pairs(real_keepers(texts))
        r = judge(texts, planted, by_definition, merged, similarity=unit_jaccard)
        recall = f"{r['found'] / r['true']:.3f}" if r["true"] else "—"
        below = len(merged & set(planted)) - r["found"]        # a copy merged though its words differ too much
        print(f"| {name} | {r['pairs']} | {r['true']} | {r['found']} | {recall} | {below} | {r['false']} |",
              flush=True)


if __name__ == "__main__":
    main()
