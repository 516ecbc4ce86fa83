"""Near dedup on near-duplicate shapes the other dedup benchmarks do not cover, through clean's real path.

    python benchmarks/dedup_scripts.py                  # every kind, 40 originals per script kind
    python benchmarks/dedup_scripts.py --kinds zh ja    # some kinds only
    python benchmarks/dedup_scripts.py --per-kind 20

Two groups of kinds:

- **scripts written without spaces** — Chinese (`zh`, Faker's zh_CN words plus the stdlib's cjkencodings prose),
  Japanese (`ja`: kana + kanji), Thai (`th`) — and Korean (`ko`: spaces between eojeol). Each original (3-9
  sentences) gets copies with 1 / 3 characters replaced, a sentence added, a sentence removed; a pair is true when
  its *unit* 5-gram Jaccard is ≥ 0.8, a unit being one character of those scripts (each ideograph, kana, Thai /
  Lao / Khmer / Myanmar letter; their combining marks are not word characters and drop out) and a `\\w+` run
  elsewhere (`units`, plain Python, written apart from the shingler). Distinct originals are the negatives.
- **other shapes** on the embedded corpus' documents: logs whose copies differ only in timestamps, code listings
  with line-number prefixes, truncated copies (prefixes), documents under 5 words, 100k-word documents with one
  paragraph changed, whitespace removed / doubled, case changed, markdown around plain text, and short
  template pages (forms, product pages) that differ only in their numbers and names. Formatting-only copies
  (whitespace, case, markdown, line numbers, timestamps) count as duplicates by definition; edits and templates
  by their unit 5-gram Jaccard.

Each kind is one run of clean's real path (`cleaning.process_shard` on ingest shards of up to 2,000 records, then
`dedup_global.deduplicate` with one worker; filters, PII and quality off): a pair is found when both documents
end in one keeper's group; a merged pair that is not true is a false merge.
"""

from __future__ import annotations

import argparse
import random
import re
import sys
import tempfile
from collections.abc import Callable
from itertools import combinations
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from tests.helpers.dedup_variants import docs_of  # noqa: E402  (after the sys.path insert above)

PER_SHARD = 2000
# The unit truth: each \w character of these scripts alone, else a \w+ run (stated here, not imported from the
# shingler, so the benchmark checks it).
_SCRIPTS = ("\u0e00-\u0eff\u1000-\u109f\u1780-\u17ff\u3040-\u30ff\u3100-\u312f\u31a0-\u31ff\u3400-\u4dbf"
            "\u4e00-\u9fff\uf900-\ufaff\uff66-\uff9f\U00020000-\U0003134f")
_UNIT = re.compile(f"(?:(?![{_SCRIPTS}])\\w)+|(?=\\w)[{_SCRIPTS}]")


def units(text: str) -> list[str]:
    """The units of `text` as shingled (after `shingle_text`, lower case)."""
    from tasks.data.cleanup.normalize import shingle_text

    return _UNIT.findall(shingle_text(text).lower())


def unit_jaccard(a: str, b: str, n: int = 5, split: Callable[[str], list[str]] | None = None) -> float:
    """The exact n-gram Jaccard of two texts' units (`split`: another unit definition, default `units`)."""
    def grams(text: str) -> set[tuple[str, ...]]:
        u = (split or units)(text)
        return {tuple(u)} if len(u) < n else set(zip(*(u[k:] for k in range(n))))
    x, y = grams(a), grams(b)
    return len(x & y) / len(x | y) if x | y else 1.0


# --- scripts without spaces -----------------------------------------------------------------------------------
def _stdlib_prose(names: tuple[str, ...]) -> list[str]:
    folder = Path(re.__file__).parent / "test" / "cjkencodings"
    paras = []
    for name in names:
        path = folder / f"{name}-utf8.txt"
        if path.exists():
            paras += [p for p in path.read_text("utf-8", "replace").split("\n") if len(p) > 30]
    return paras


def script_originals(lang: str, count: int, seed: int) -> list[str]:
    """`count` distinct originals of 3-9 sentences in `lang` (zh, ja, th, ko)."""
    from faker import Faker

    rng = random.Random(f"{seed}/{lang}")
    if lang == "ko":                        # no Korean lorem: eojeol from ko_KR's jobs and places + a particle
        fake = Faker("ko_KR")
        fake.seed_instance(seed)
        stems = sorted({w for _ in range(400) for w in (fake.job() + " " + fake.city() + " " + fake.company()).split()})
        particles = ["은", "는", "이", "가", "을", "를", "에서", "으로", "의", "와", "도", ""]

        def sentence() -> str:
            return " ".join(rng.choice(stems) + rng.choice(particles) for _ in range(rng.randint(6, 12))) + "."
    else:
        fake = Faker({"zh": "zh_CN", "ja": "ja_JP", "th": "th_TH"}[lang])
        fake.seed_instance(seed)
        stop = {"zh": "。", "ja": "。", "th": " "}[lang]

        def sentence() -> str:
            return "".join(fake.words(rng.randint(5, 12))) + stop
    prose = _stdlib_prose({"zh": ("gb18030", "big5"), "ja": ("euc_jp",), "ko": ("euc_kr",), "th": ()}[lang])
    docs = [p + "".join(sentence() for _ in range(2)) for p in prose]
    while len(docs) < count:
        docs.append("".join(sentence() for _ in range(rng.randint(3, 9))).strip())
    return docs[:count]


def _replace_chars(k: int) -> Callable[[str, random.Random, str], str]:
    def edit(text: str, rng: random.Random, other: str) -> str:
        chars, pool = list(text), [c for c in other if c.isalpha()] or ["字"]
        spots = [i for i, c in enumerate(chars) if c.isalpha()]
        for i in rng.sample(spots, min(k, len(spots))):
            chars[i] = rng.choice(pool)
        return "".join(chars)
    return edit


def _sentences(text: str) -> list[str]:
    return [s for s in re.split(r"(?<=[。.!?])|(?<= )", text) if s]


def _add_sentence(text: str, rng: random.Random, other: str) -> str:
    mine, theirs = _sentences(text), _sentences(other)
    mine.insert(rng.randrange(len(mine) + 1), rng.choice(theirs))
    return "".join(mine)


def _drop_sentence(text: str, rng: random.Random, other: str) -> str:
    mine = _sentences(text)
    if len(mine) > 1:
        mine.pop(rng.randrange(len(mine)))
    return "".join(mine)


SCRIPT_EDITS = {"1 char replaced": _replace_chars(1), "3 chars replaced": _replace_chars(3),
                "sentence added": _add_sentence, "sentence removed": _drop_sentence}


def script_kind(lang: str, count: int, seed: int) -> tuple[list[str], list[tuple[int, int]]]:
    """Originals then one copy per (original, edit); the planted pairs as (original, copy) indices."""
    rng = random.Random(f"{seed}/{lang}/edits")
    docs = script_originals(lang, count, seed)
    texts, planted = list(docs), []
    for edit in SCRIPT_EDITS.values():
        for k, text in enumerate(docs):
            planted.append((k, len(texts)))
            texts.append(edit(text, rng, docs[(k + 1) % len(docs)]))
    return texts, planted


# --- other shapes ------------------------------------------------------------------------------------------------
LEVELS = ("INFO", "INFO", "INFO", "DEBUG", "WARNING", "ERROR")
PRODUCT = """{name} - Buy online
SKU: {sku}
Price: ${price}
In stock: {stock} units
Ships in {days} days
Rated {rating} out of 5 by {reviews} customers
Add to cart | Add to wishlist | Compare"""
FORM = """Order confirmation #{order}
Name: {name}
Quantity: {qty}
Total: {total} EUR
Delivery date: 2024-{month:02d}-{day:02d}"""


def _log(sentences: list[str], rng: random.Random, start: int) -> tuple[str, str]:
    """A log of 30 lines and the same messages logged at another time (every timestamp differs)."""
    lines = [(rng.choice(LEVELS), rng.choice(("worker-1", "db", "http", "scheduler")), rng.choice(sentences))
             for _ in range(30)]

    def stamp(second: int) -> str:
        return f"2024-03-{1 + second // 86400 % 28:02d} {second // 3600 % 24:02d}:{second // 60 % 60:02d}:" \
               f"{second % 60:02d},{second * 7 % 1000:03d}"
    times = sorted(rng.sample(range(3600), 30))
    shift = rng.randrange(86400, 864000)
    return tuple("\n".join(f"{stamp(start + t + d)} {lvl} [{who}] {msg}" for t, (lvl, who, msg) in zip(times, lines))
                 for d in (0, shift))


def _markdown(text: str, rng: random.Random) -> str:
    words = text.split(" ")
    for i in range(len(words)):
        if words[i].isalpha() and rng.random() < 0.1:
            words[i] = f"**{words[i]}**"
        elif words[i].isalpha() and rng.random() < 0.05:
            words[i] = f"[{words[i]}](https://en.wikipedia.org/wiki/{words[i]})"
    paras = " ".join(words).split("\n\n")
    return "# " + paras[0] + "\n\n" + "\n\n".join(("- " + p if k % 3 == 0 else p) for k, p in enumerate(paras[1:]))


def _one_paragraph_changed(text: str, rng: random.Random, other: str) -> str:
    paras = text.split("\n\n")
    k = rng.randrange(len(paras))
    paras[k] = " ".join(other.split()[:100])
    return "\n\n".join(paras)


FORMATS: dict[str, Callable[[str, random.Random], str]] = {
    "whitespace removed": lambda t, rng: re.sub(r"\s+", "", t),
    "whitespace doubled": lambda t, rng: re.sub(r"(\s)", r"\1\1", t),
    "case changed": lambda t, rng: t.upper(),
    "markdown around plain text": _markdown,
    "line-number prefixes": lambda t, rng: "\n".join(f"{n:>4}  {line}" for n, line in enumerate(t.split("\n"), 1)),
}
EDITS: dict[str, Callable[[str, random.Random, str], str]] = {
    "truncated to 95%": lambda t, rng, o: " ".join(t.split(" ")[: int(len(t.split(" ")) * 0.95)]),
    "truncated to 80%": lambda t, rng, o: " ".join(t.split(" ")[: int(len(t.split(" ")) * 0.8)]),
    "truncated to 60%": lambda t, rng, o: " ".join(t.split(" ")[: int(len(t.split(" ")) * 0.6)]),
}


def shape_kinds(count: int, seed: int) -> dict[str, tuple[list[str], list[tuple[int, int]], bool]]:
    """kind -> (texts, planted pairs, whether they are duplicates by definition: formatting only)."""
    rng = random.Random(f"{seed}/shapes")
    prose = [t for _, t in docs_of("encyclopedia", count, 200, 3000)]
    code = [t for _, t in docs_of("code", count, 100, 3000)]
    kinds = {}
    for name, change in FORMATS.items():
        base = code if name == "line-number prefixes" else prose
        kinds[name] = (base + [change(t, rng) for t in base], [(k, k + len(base)) for k in range(len(base))], True)
    for name, edit in EDITS.items():
        kinds[name] = (prose + [edit(t, rng, "") for t in prose], [(k, k + len(prose)) for k in range(len(prose))],
                       False)
    sentences = [s for t in prose for s in re.split(r"(?<=\.) ", t.replace("\n", " ")) if 5 < len(s.split()) < 25]
    logs = [_log(sentences, rng, 3600 * k) for k in range(count)]
    kinds["logs: timestamps differ"] = ([a for a, _ in logs] + [b for _, b in logs],
                                        [(k, k + count) for k in range(count)], True)
    short = [" ".join(rng.sample(s.split(), rng.randint(2, 4))) for s in sentences[:count]]
    kinds["under 5 words: case + punctuation"] = (short + [s.upper() + "!" for s in short],
                                                  [(k, k + count) for k in range(count)], True)
    pool = [t for corpus in ("encyclopedia", "literature") for _, t in docs_of(corpus, 400, 50, 50_000)]
    long_docs = ["\n\n".join(pool[k:] + pool[:k]) for k in range(3)]           # ~930k words each
    kinds["~930k words, one paragraph changed"] = (
        long_docs + [_one_paragraph_changed(t, rng, prose[k]) for k, t in enumerate(long_docs)],
        [(k, k + 3) for k in range(3)], False)
    names = [f"{a} {b}" for a in ("Anna", "Bruno", "Chen", "Dara", "Emil", "Fatima")
             for b in ("Kowalski", "Ito", "Silva")]
    pages = [PRODUCT.format(name=f"Acme Kettle Model {chr(65 + k % 26)}{k}", sku=rng.randrange(10**6, 10**7),
                            price=f"{rng.randrange(10, 99)}.{rng.randrange(100):02d}", stock=rng.randrange(1, 500),
                            days=rng.randrange(1, 9), rating=f"{rng.uniform(1, 5):.1f}",
                            reviews=rng.randrange(2, 3000)) for k in range(count)]
    forms = [FORM.format(order=rng.randrange(10**5, 10**6), name=rng.choice(names), qty=rng.randrange(1, 20),
                         total=f"{rng.uniform(5, 500):.2f}", month=rng.randrange(1, 13), day=rng.randrange(1, 29))
             for _ in range(count)]
    pairs = list(combinations(range(count), 2))[: 4 * count]          # pages with pages, forms with forms
    kinds["template pages, numbers differ"] = (pages + forms, pairs + [(count + a, count + b) for a, b in pairs],
                                               False)
    return kinds


# --- clean's real path -------------------------------------------------------------------------------------------
def real_keepers(texts: list[str]) -> dict[int, int]:
    """Row -> the row kept for it (dropped rows only), by `process_shard` per ingest shard + `deduplicate`."""
    from specs.clean import CleanSpec
    from specs.run import ExecutorSpec
    from tasks.data.cleanup import cleaning
    from tasks.data.dedup import dedup_global
    from tasks.data.records import RECORD_SCHEMA, write_table

    spec, executor = CleanSpec(filters=[], pii={"enabled": False}, quality={"enabled": False}), ExecutorSpec(workers=1)
    with tempfile.TemporaryDirectory(prefix="forgeline-dedup-scripts-") as tmp:
        work, stems = Path(tmp), []
        buckets = dedup_global.plan_buckets(len(texts), spec, executor)
        for n, lo in enumerate(range(0, len(texts), PER_SHARD)):
            rows = [{"id": f"{k:07d}", "text": texts[k], "source": "probe", "lang": "xx", "origin": f"probe:{k}",
                     "meta": "{}", "media": []} for k in range(lo, min(lo + PER_SHARD, len(texts)))]
            stems.append(f"probe-{n:05d}")
            write_table(rows, RECORD_SCHEMA, work / f"{stems[-1]}.in.parquet")
            cleaning.process_shard(work / f"{stems[-1]}.in.parquet", work / f"{stems[-1]}.parquet", spec, 1, ROOT,
                                   buckets)
        d = dedup_global.deduplicate(dedup_global.layout_of(work, stems), spec, 1, executor)["decisions"]
        return dict(zip(d.rows.tolist(), d.keeper.tolist()))


def merged_pairs(keeper: dict[int, int]) -> set[tuple[int, int]]:
    """Every pair of rows that ends in one keeper's group (an exact copy follows its keeper's keeper)."""
    def final(k: int) -> int:
        while k in keeper:
            k = keeper[k]
        return k
    groups: dict[int, set[int]] = {}
    for row in keeper:
        groups.setdefault(final(row), {final(row)}).add(row)
    return {p for g in groups.values() for p in combinations(sorted(g), 2)}


def judge(texts: list[str], planted: list[tuple[int, int]], by_definition: bool, merged: set[tuple[int, int]],
          templates: bool = False, threshold: float = 0.8,
          similarity: Callable[[str, str], float] = unit_jaccard) -> dict[str, int]:
    """Planted pairs true / found, and false merges: merged pairs of two different originals' families (an
    original and its copies) whose unit 5-gram Jaccard is below `threshold` (two copies of one original both
    within it of the original are no false merge, though their own Jaccard may be lower). `templates`: the planted
    pairs are of distinct documents (no copies). `similarity`: the truth's Jaccard (this script's units)."""
    true = {p for p in planted if by_definition or similarity(texts[p[0]], texts[p[1]]) >= threshold}
    family = {b: a for a, b in planted if not templates}     # copy -> its original
    false = {p for p in merged - true if family.get(p[0], p[0]) != family.get(p[1], p[1])
             and similarity(texts[p[0]], texts[p[1]]) < threshold}
    return {"pairs": len(planted), "true": len(true), "found": len(true & merged), "false": len(false)}


def arguments(doc: str, kinds: str) -> argparse.Namespace:
    """This script's command line (and `dedup_probes.py`'s): --per-kind, --seed, --kinds (`kinds`: its help)."""
    parser = argparse.ArgumentParser(description=doc, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--per-kind", type=int, default=40, help="originals per kind")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--kinds", nargs="*", help=kinds)
    return parser.parse_args()


def main() -> None:
    args = arguments(__doc__, "zh ja th ko, or shape names (default: all)")
    print("| kind | planted pairs | true | found | recall | false merges |\n|---|---:|---:|---:|---:|---:|")

    def row(name: str, r: dict[str, int]) -> None:
        recall = f"{r['found'] / r['true']:.3f}" if r["true"] else "—"
        print(f"| {name} | {r['pairs']} | {r['true']} | {r['found']} | {recall} | {r['false']} |", flush=True)
    for lang in ("zh", "ja", "th", "ko"):
        if args.kinds and lang not in args.kinds:
            continue
        texts, planted = script_kind(lang, args.per_kind, args.seed)
        merged = merged_pairs(real_keepers(texts))
        for k, edit in enumerate(SCRIPT_EDITS):
            part = planted[k * args.per_kind: (k + 1) * args.per_kind]
            row(f"{lang}: {edit}", judge(texts, part, False, merged & set(part)))
        row(f"{lang}: all pairs (false merges between any two documents)", judge(texts, planted, False, merged))
    for name, (texts, planted, by_definition) in shape_kinds(args.per_kind, args.seed).items():
        if not args.kinds or name in args.kinds:
            merged = merged_pairs(real_keepers(texts))
            row(name, judge(texts, planted, by_definition, merged, name.startswith("template")))


if __name__ == "__main__":
    main()
