"""PII scrubbing against every Faker locale (`tasks.data.privacy.pii.scrub_pii`): identity numbers under English and
own-name field labels, phones, passports and generated passwords, from a generator this project did not write.

    python benchmarks/pii_faker_locales.py               # 40 values per locale and method, seed 11
    python benchmarks/pii_faker_locales.py --per 20 --seed 3

Needs the test extra (Faker). Identity numbers: each locale's ssn-provider methods (business ids — VAT, EIN, CIF,
company and legal-person numbers, GSTIN, KVNR — and Faker's deliberately invalid SSNs left out), each value after
`SSN:`, `National ID:`, `ID number:`, `Social security number:` and the method's own name in capitals; found when
the value is gone. Faker draws some ids without their check digit (most of `en_IN.aadhaar_id`), which the scrubber
keeps by design (a checked scheme's number must pass its check), so 100 % is not the ceiling here. Phones: each
locale's `phone_number()` after `Phone:` and in `Call me at … tomorrow.`. Passports: `passport_number()` after three
cues. Passwords: `en_US.password()` after `password:`, `Password=` and in JSON. Prints one table: found / planted.
"""

from __future__ import annotations

import argparse
import inspect
import sys
import warnings
from collections import Counter
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from tasks.data.privacy.pii import scrub_pii  # noqa: E402

# (label in the table, carrier)
ID_CUES = (("SSN:", "SSN: {v}"), ("National ID:", "National ID: {v}"), ("ID number:", "ID number: {v}"),
           ("Social security number:", "Social security number: {v}"), ("<METHOD>:", "{name}: {v}"))
BUSINESS = ("ein", "invalid_ssn", "vat_id", "cif", "org_id", "rif", "gstin", "org_and_vat_id", "kvnr")
PHONE_CUES = (("Phone:", "Phone: {v}"), ("Call me at", "Call me at {v} tomorrow."))
PASSPORT_CUES = (("Passport No:", "Passport No: {v}"), ("passport number", "passport number {v}"),
                 ("Reisepass:", "Reisepass: {v}"))
PASSWORD_CUES = (("password:", "password: {v}"), ("Password=", "Password={v}"), ("JSON", '{{"password": "{v}"}}'))


def _found(carrier: str, value: str, **extra: str) -> bool:
    return value not in scrub_pii(carrier.format(v=value, **extra))[0]


def _fakers(seed: int):
    import faker
    from faker.config import AVAILABLE_LOCALES

    for locale in sorted(AVAILABLE_LOCALES):
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")     # Faker's deprecated locales (`fr_QC`) warn when built
                fake = faker.Faker(locale)
        except Exception:               # a locale Faker lists but cannot build
            continue
        fake.seed_instance(seed)
        yield locale, fake


def _id_methods(fake) -> list[str]:
    """Public methods of the locale's ssn provider that are a person's number."""
    names = set()
    for provider in fake.providers:
        if "ssn" in type(provider).__module__:
            names |= {n for n, _ in inspect.getmembers(type(provider), inspect.isfunction)
                      if "ssn" in inspect.getsourcefile(getattr(type(provider), n)) and not n.startswith("_")}
    return sorted(n for n in names if n not in BUSINESS and "company" not in n and "legal" not in n)


def _draw(fake, method: str, n: int) -> list[str]:
    try:
        return [str(getattr(fake, method)()) for _ in range(n)]
    except Exception:                   # a method that needs arguments
        return []


def run(per: int, seed: int) -> Counter:
    found, planted = Counter(), Counter()
    for _, fake in _fakers(seed):
        for method in _id_methods(fake):
            for v in _draw(fake, method, per):
                for label, cue in ID_CUES:
                    planted["id", label] += 1
                    found["id", label] += _found(cue, v, name=method.upper())
        for kind, method, cues in (("phone", "phone_number", PHONE_CUES), ("passport", "passport_number",
                                                                             PASSPORT_CUES)):
            for v in _draw(fake, method, per):
                for label, cue in cues:
                    planted[kind, label] += 1
                    found[kind, label] += _found(cue, v)
        if fake.locales == ["en_US"]:
            for v in _draw(fake, "password", per * 5):
                for label, cue in PASSWORD_CUES:
                    planted["password", label] += 1
                    found["password", label] += _found(cue, v)
    return Counter({k: (found[k], planted[k]) for k in planted})


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--per", type=int, default=40, help="values per locale and method")
    parser.add_argument("--seed", type=int, default=11)
    args = parser.parse_args()
    table = run(args.per, args.seed)
    print(f"{'kind':10} {'carrier':24} {'found':>8} {'planted':>8} {'share':>7}")
    for (kind, carrier), (hit, total) in sorted(table.items()):
        print(f"{kind:10} {carrier:24} {hit:8,} {total:8,} {hit / total:7.3f}")


if __name__ == "__main__":
    main()
