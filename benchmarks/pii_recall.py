"""PII scrubbing (`tasks.data.privacy.pii.scrub_pii`): recall per kind on a seeded planted set, false hits on look-alikes,
and throughput.

    python benchmarks/pii_recall.py                      # 2,000 plants per kind, seed 1234
    python benchmarks/pii_recall.py --per-kind 500 --seed 7

Plants come from `tests.helpers.pii_planted` (one fake email, obfuscated email, phone, IPv4/IPv6 address, card number,
IBAN, SSN or secret in a prose, code, config, log or HTTP line; `email/obfuscated` is reported apart, and so are
`secret/syntax`, secrets drawn from the whole alphabet of the syntax they sit in, and `phone/international`,
numbers in every international prefix form after every phone cue: `tests.helpers.pii_planted_syntax`;
`secret/config`, credentials in tool and config files: `tests.helpers.pii_planted_config`; `secret/shapes`,
password hashes, `.pgpass` lines, bootstrap tokens, `user:password` logins and presigned URLs, `ssn/national`, UK
NINOs, Canadian SINs and dotted SSNs, and `phone/national`, India's and China's mobile layouts:
`tests.helpers.pii_planted_shapes`; `dob/cued` and `passport/cued`, dates of birth and passport numbers or MRZs
after their cues: `tests.helpers.pii_planted_personal`). The last groups come from sources this project did not write
(`tests.helpers.pii_planted_published`, needs the test extra): `phone/libphonenumber`, every region's example
numbers in four formats; `credit_card/published`, processors' published test cards in every grouping;
`iban/schwifty`, every country of schwifty's IBAN registry, compact, grouped and lower case;
`secret/detect_secrets`, values in the shapes of detect-secrets' plugins; `email/forms`, `%40`, `=40`, HTML
entities, IDN, `mailto:` parameters, plus-tags, quoted local parts; `ssn/faker_national`, Faker's national identity
numbers of 27 locales, after a cue in the country's language or bare (`tests.helpers.pii_planted_national`).
Their misses are also listed by variant (format, brand, plugin, form, locale). A plant
counts as found when every part of the value is gone and only its own kind was counted (a carrier misread as
another kind counts as a miss); as partial when a part was replaced in part and a 4-character run of it is
still there (a cut value: worse than a miss, since the scrubbing looks done).
Look-alikes are lines without PII (versions, dates, UUIDs, hashes, slices, ISBNs,
prices, coordinates, placeholders, code, private addresses, IBANs with a wrong check digit/length/structure,
never-issued SSNs, ZIP+4, "at ... dot" prose); a false hit is a look-alike line with any count. Throughput is
measured on three texts, each scrubbed whole: the Python standard library's `json`, `email`, `http`, `logging` and
`asyncio` sources (code without PII, where most of clean's input time goes), the planted lines joined, and the
look-alikes joined.
"""

from __future__ import annotations

import argparse
import sys
import sysconfig
import time
from collections import Counter
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from specs.clean import PII_KINDS  # noqa: E402  (after the sys.path insert above)
from tasks.data.privacy.pii import scrub_pii  # noqa: E402
from tests.helpers.pii_planted import Plant, look_alikes, planted  # noqa: E402
from tests.helpers.pii_planted_published import published  # noqa: E402
from tests.helpers.pii_planted_syntax import leaked_runs  # noqa: E402

STDLIB_PACKAGES = ("json", "email", "http", "logging", "asyncio")


def recall(plants: list[Plant]) -> tuple[Counter[str], Counter[str], Counter[str], list[Plant], list[Plant]]:
    """Per group: plants found, planted, and partial (a part was replaced, but a 4-character run of it is
    still in the text: a cut value, worse than a miss); the missed and the partial plants."""
    found: Counter[str] = Counter()
    total: Counter[str] = Counter()
    partial: Counter[str] = Counter()
    missed, cut = [], []
    for plant in plants:
        scrubbed, counts = scrub_pii(plant.text)
        group = f"{plant.kind}/{plant.form}" if plant.form else plant.kind     # variants on their own
        total[group] += 1
        if set(counts) == {plant.kind} and not any(part in scrubbed for part in plant.parts):
            found[group] += 1
        else:
            missed.append(plant)
        if any(part not in scrubbed and leaked_runs(part, plant.text, scrubbed) for part in plant.parts):
            partial[group] += 1
            cut.append(plant)
    return found, total, partial, missed, cut


def stdlib_code() -> str:
    root = Path(sysconfig.get_paths()["stdlib"])
    files = sorted(p for package in STDLIB_PACKAGES for p in (root / package).rglob("*.py"))
    return "\n".join(p.read_text(encoding="utf-8") for p in files)


def throughput(text: str | list[str], repeats: int = 3) -> float:
    """Characters per second, the best of `repeats` runs (the least disturbed by other processes); a list is
    scrubbed one call per text, as clean scrubs short documents (posts, chat lines): a fixed cost per call shows."""
    texts = [text] if isinstance(text, str) else text
    best = float("inf")
    for _ in range(repeats):
        start = time.perf_counter()
        for one in texts:
            scrub_pii(one)
        best = min(best, time.perf_counter() - start)
    return sum(map(len, texts)) / best


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seed", type=int, default=1234)
    parser.add_argument("--per-kind", type=int, default=2000)
    args = parser.parse_args()

    extra = published(args.seed, args.per_kind)         # after the others: their plants for a seed stay the same
    plants = planted(args.seed, args.per_kind) + [plant for plant, _ in extra]
    found, total, partial, missed, cut = recall(plants)
    print(f"recall on {len(plants)} plants (seed {args.seed}); partial = cut: replaced in part, a 4-character "
          "run of the value left")
    print(f"{'kind':<22} {'found':>7} {'planted':>8} {'recall':>8} {'partial':>8}")
    for kind in [*(k for k in PII_KINDS if total[k]), *sorted(set(total) - set(PII_KINDS))]:   # dob: cued only
        print(f"{kind:<22} {found[kind]:>7} {total[kind]:>8} {found[kind] / total[kind]:>8.4f} {partial[kind]:>8}")
    all_found, all_total = sum(found.values()), sum(total.values())
    print(f"{'all':<22} {all_found:>7} {all_total:>8} {all_found / all_total:>8.4f} {sum(partial.values()):>8}")
    for plant in cut[:10]:
        print(f"  partial {plant.kind}/{plant.form}: {plant.text[:120]!r} -> {scrub_pii(plant.text)[0][:120]!r}")
    for plant in [p for p in missed if p not in cut][:10]:
        print(f"  missed {plant.kind}/{plant.form}: {plant.text[:120]!r}")
    lost = {id(p) for p in missed}
    by_variant = Counter(f"{p.kind}/{p.form} {variant}" for p, variant in extra if id(p) in lost)
    for name, count in sorted(by_variant.items()):
        print(f"  missed {count} of {name}: e.g. {next(p.text for p, v in extra if f'{p.kind}/{p.form} {v}' == name and id(p) in lost)[:80]!r}")

    lines = look_alikes(args.seed)
    hits = [(line, scrub_pii(line)[1]) for line in lines]
    hits = [(line, counts) for line, counts in hits if counts]
    print(f"\nfalse hits on look-alikes: {len(hits)} of {len(lines)} lines")
    for line, counts in hits[:10]:
        print(f"  {counts}: {line[:120]!r}")

    texts = {"stdlib code": stdlib_code(), "planted lines": "\n".join(p.text for p in plants),
             "look-alikes": "\n".join(lines), "lines, 1 call each": lines[:2000]}
    print(f"\n{'throughput':<19} {'chars':>10} {'M chars/s':>10}")
    for name, text in texts.items():
        chars = len(text) if isinstance(text, str) else sum(map(len, text))
        print(f"{name:<19} {chars:>10,} {throughput(text) / 1e6:>10.2f}")


if __name__ == "__main__":
    main()
