"""Planted IBANs, SSNs and obfuscated emails for `tests.helpers.pii_planted`, and their look-alikes.

Values are built from the formats, not from the detector (`tasks.data.privacy.pii_ids`, which asks `stdnum`):
- IBANs from the SWIFT IBAN Registry's BBAN structures (`IBAN_REGISTRY`, written out here from the registry)
  with ISO 7064 mod-97 check digits computed here;
- SSNs by the SSA's rules (area 001-899 but 666, group 01-99, serial 0001-9999, not a published number);
- obfuscated emails in the bracketed and upper-case word forms people use against address harvesters.
`look_alike_lines(rng, variants)` returns lines that hold none of these but come close: IBANs with a wrong check
digit, length or structure, SSN-shaped numbers the SSA never issues, dates, ZIP+4 codes, ISBNs, lower-case
"at ... dot" prose.
"""

from __future__ import annotations

import random
import string

# SWIFT IBAN Registry (https://www.swift.com/standards/data-standards/iban, release 99, 2025): country code ->
# BBAN structure, `n` digits, `a` upper-case letters, `c` either; the IBAN is the code, 2 check digits, the BBAN.
IBAN_REGISTRY = dict(entry.split(":") for entry in """
AD:4n4n12c AE:3n16n AL:8n16c AT:5n11n AZ:4a20c BA:3n3n8n2n BE:3n7n2n BG:4a4n2n8c BH:4a14c BI:5n5n11n2n
BR:8n5n10n1a1c BY:4c4n16c CH:5n12c CR:4n14n CY:3n5n16c CZ:4n6n10n DE:8n10n DJ:5n5n11n2n DK:4n9n1n DO:4c20n
EE:2n2n11n1n EG:4n4n17n ES:4n4n1n1n10n FI:3n11n FK:2a12n FO:4n9n1n FR:5n5n11c2n GB:4a6n8n GE:2a16n GI:4a15c
GL:4n9n1n GR:3n4n16c GT:4c20c HN:4a20n HR:7n10n HU:3n4n1n15n1n IE:4a6n8n IL:3n3n13n IQ:4a3n12n IS:4n2n6n10n
IT:1a5n5n12c JO:4a4n18c KW:4a22c KZ:3n13c LB:4n20c LC:4a24c LI:5n12c LT:5n11n LU:3n13c LV:4a13c LY:3n3n15n
MC:5n5n11c2n MD:2c18c ME:3n13n2n MK:3n10c2n MN:4n12n MR:5n5n11n2n MT:4a5n18c MU:4a2n2n12n3n3a NI:4a20n
NL:4a10n NO:4n6n1n OM:3n16c PK:4a16c PL:8n16n PS:4a21c PT:4n4n11n2n QA:4a21c RO:4a16c RS:3n13n2n RU:9n5n15c
SA:2n18c SC:4a2n2n16n3a SD:2n12n SE:3n16n1n SI:5n8n2n SK:4n6n10n SM:1a5n5n12c SO:4n3n12n ST:4n4n11n2n
SV:4a20n TL:3n14n2n TN:2n3n13n2n TR:5n1n16c UA:6n19c VA:3n15n VG:4a16n XK:4n10n2n YE:4a4n18c
""".split())
ALPHABETS = {"n": string.digits, "a": string.ascii_uppercase, "c": string.ascii_uppercase + string.digits}
# Numbers printed on sample cards and in advertisements (SSA): nobody's, and rejected by design.
PUBLISHED_SSNS = {"078-05-1120", "219-09-9999", "457-55-5462"}


def bban_length(structure: str) -> int:
    return sum(int(n) for n in structure.replace("n", " ").replace("a", " ").replace("c", " ").split())


def mod97_check_digits(country: str, bban: str) -> str:
    """ISO 7064 MOD 97-10 check digits: the BBAN, the country and `00` as a number (A=10 ... Z=35)."""
    number = int("".join(str(int(ch, 36)) for ch in bban + country + "00"))
    return f"{98 - number % 97:02d}"


def random_bban(rng: random.Random, structure: str) -> str:
    out, count = [], ""
    for ch in structure:
        if ch.isdigit():
            count += ch
        else:
            out += [rng.choice(ALPHABETS[ch]) for _ in range(int(count))]
            count = ""
    return "".join(out)


def grouped(compact: str) -> str:
    """The registry's printed form: groups of 4 separated by spaces."""
    return " ".join(compact[i:i + 4] for i in range(0, len(compact), 4))


def iban_value(rng: random.Random, country: str, spaced: bool) -> str:
    bban = random_bban(rng, IBAN_REGISTRY[country])
    compact = country + mod97_check_digits(country, bban) + bban
    return grouped(compact) if spaced else compact


IBAN_CARRIERS = ["IBAN: {}", '"iban": "{}",', "iban={}", "Please transfer the deposit to {} by Friday.",
                 "<Iban>{}</Iban>", "Account {} (EUR)", "| Ann Lee | {} | 1,200.00 |", "{} EUR 250.00",
                 "payee_account = '{}'", "Bankverbindung: {}"]


def ssn_value(rng: random.Random) -> str:
    while True:
        area = rng.randint(1, 899)
        value = f"{area:03d}-{rng.randint(1, 99):02d}-{rng.randint(1, 9999):04d}"
        if area != 666 and value not in PUBLISHED_SSNS:
            return value


SSN_CARRIERS = ["SSN: {}", '"ssn": "{}"', "ssn={}", "Social Security Number {} on file.", "SS# {}",
                "employee {} (payroll)", "<ssn>{}</ssn>", "| Ann Lee | {} | 1984 |", "tax id {}; expires never"]
# A bare 9-digit run counts only after a cue word (`pii_ids`): these carriers hold one.
SSN_CUED = ["SSN: {}", '"ssn": "{}"', "ssn={}", "SSN {}", "Social Security Number: {}", "social security no. {}",
            "SS# {}", "customer_ssn = '{}'", "her SSN is {}."]

LOCALS = ["ann", "john.doe", "mary_smith", "dev+ci", "Ann.Lee", "bob99", "k-nakamura", "info", "x7"]
DOMAINS = [["example", "com"], ["mail", "example", "org"], ["uni-bonn", "de"], ["startup", "io"],
           ["mail", "example", "co", "uk"], ["dept", "cs", "example", "edu"], ["gmail", "com"]]
BRACKETS = ["[]", "()", "{}", "<>"]


def obfuscated_email(rng: random.Random) -> tuple[str, tuple[str, ...]]:
    """An obfuscated address and its parts that must vanish (the local part with its `at`, the last dot and
    the TLD: a match that stops early leaves one of them)."""
    local, labels = rng.choice(LOCALS), rng.choice(DOMAINS)
    style = rng.randint(0, 5)
    if style == 4:                                  # the upper-case word form
        at, dots = " AT ", [" DOT "] * (len(labels) - 1)
    else:
        left, right = rng.choice(BRACKETS)
        pad = rng.choice(["", " "])
        inner = rng.choice(["at", "at", "AT", "At", "@"]) if style < 3 else "at"
        at = f"{pad}{left}{inner}{right}{pad}"
        dot = f"{pad}{left}{rng.choice(['dot', 'dot', 'DOT', '.'])}{right}{pad}"
        if style == 3:                              # bracketed `at`, literal dots: ann [at] example.com
            dots = ["."] * (len(labels) - 1)
        elif style == 5:                            # a plain `@`, bracketed dots: ann@example[dot]com
            at, dots = "@", [dot] * (len(labels) - 1)
        else:
            dots = [dot] * (len(labels) - 1)
    domain = labels[0] + "".join(d + label for d, label in zip(dots, labels[1:]))
    return local + at + domain, (local + at.rstrip(), (dots[-1] + labels[-1]).lstrip())


EMAIL_CARRIERS = ["Contact: {}", '{{"email": "{}"}}', "# Maintainer: {}", "mail me: {} (no spam)",
                  "Reply to {}, thanks.", "author = '{}'", "Kontakt: {}"]

LOOK_ALIKES = [
    # IBAN near misses: a wrong check digit, a wrong length, an unknown country, lower case, bank codes
    "Wire to GB82 WEST 1234 5698 7654 33 (typo) or DE88 3704 0044 0532 0130 00.",
    "Lengths: DE89 3704 0044 0532 0130 0 and GB82 WEST 1234 5698 7654 3210 are one short, one long.",
    "XX82 WEST 1234 5698 7654 32 and ZZ12 3456 7890 1234 56 name no country.",
    "BIC DEUTDEFF500, sort code 20-00-00, account 31926819, ABA 021000021, routing 026009593.",
    "Encodings ISO 8859-1, UTF-16LE, CP1252; keys AB12 CD34 EF56 GH78 and XJ4K-9PLM-2QRS-8TUV.",
    "Parts DE12-3456-7890, NL-1234AB, PO1234567890123, EN 60320 C13, RFC 2822, ISO 3166 AT.",
    # SSN-shaped numbers the SSA never issues, published fakes, and other 3-2-4 or 9-digit shapes
    "SSN 000-12-3456, 666-12-3456, 900-12-3456, 987-65-4321, 123-00-4567 and 123-45-0000 are invalid.",
    "The Woolworth card's 078-05-1120 and the pamphlet's 219-09-9999 were never anyone's.",
    "ssn_length = 123456789; SSN: 000123456; ssn=999999999 and social security no. 666554444.",
    "Order 536904399 shipped; ticket 123456789 closed; ids 001234567, 987654321.",
    "build-123-45-6789, v123-45-6789, 1.123-45-6789, 123-45-6789-A and 123-45-67890 are versions or parts.",
    "Row 10 123 45 6789 22 and 1 234 56 7890 are table cells; 12 34 5678 is too short.",
    # dates, ZIP+4, ISBNs, other numbers
    "Due 2024-01-15, 15-01-2024, 01/15/2024, 2024 01 15; ZIP 12345-6789 and 90210-1234.",
    "ISBN 978-3-16-148410-0, 0-306-40615-2, 978 0 306 40615 7; ISSN 2049-3630.",
    "Group 1234 5678 9012 3456 fails Luhn, 4111 1111 1111 1112 too.",
    # lower-case "at ... dot" prose and shouting
    "Look at the dot com bubble: money at work, dot by dot.",
    "LOOK AT THE DOT COM BUBBLE. MEET AT NOON DOT SHARP.",
    "Meet ann at noon dot sharp, or bob at work dot by dot; contact us at the dot com office.",
    "SELECT created_at AT TIME ZONE 'UTC' FROM events; -- at most one row",
    "values[at] = data[dot]; f(at) + g(dot); the markdown [at](https://x.org) link; @property",
]


DIGITS_ONLY = sorted(c for c, structure in IBAN_REGISTRY.items() if set(structure) <= set(string.digits + "n"))


def iban_with(country: str, bban: str, check: str | None = None) -> str:
    return country + (check if check is not None else mod97_check_digits(country, bban)) + bban


def look_alike_lines(rng: random.Random, variants: int) -> list[str]:
    """`LOOK_ALIKES` plus seeded near misses: a valid IBAN with one check digit changed, a BBAN one character
    short or long (mod-97 recomputed, so only the length is wrong), a BBAN of the wrong structure (letters for
    digits, mod-97 right), and SSNs with an area, group or serial the SSA never issues."""
    out = list(LOOK_ALIKES)
    countries = sorted(IBAN_REGISTRY)
    for i in range(variants):
        country = countries[rng.randrange(len(countries))]
        bban = random_bban(rng, IBAN_REGISTRY[country])
        check = mod97_check_digits(country, bban)
        choice = i % 5
        if choice == 0:
            wrong = f"{2 + (int(check) - 2 + rng.randint(1, 9)) % 97:02d}"     # 02-98, never ≡ check mod 97
            out.append(f"IBAN {grouped(iban_with(country, bban, wrong))} bounced")
        elif choice == 1:           # printed bare: a grouped one could hold a valid shorter prefix by chance
            other = bban[:-1] if rng.random() < 0.5 else bban + rng.choice(string.digits)
            out.append(f"account {iban_with(country, other)} (wrong length)")
        elif choice == 2:
            country = DIGITS_ONLY[rng.randrange(len(DIGITS_ONLY))]
            bban = random_bban(rng, IBAN_REGISTRY[country])
            k = rng.randrange(len(bban))
            out.append(f"ref {iban_with(country, bban[:k] + rng.choice(string.ascii_uppercase) + bban[k + 1:])} "
                       "is no account")
        elif choice == 3:
            area = rng.choice([0, 666, rng.randint(900, 999)])
            out.append(f"SSN {area:03d}-{rng.randint(1, 99):02d}-{rng.randint(1, 9999):04d} is not issued")
        else:
            group, serial = rng.choice([(0, rng.randint(1, 9999)), (rng.randint(1, 99), 0)])
            out.append(f"ssn: {rng.randint(1, 665):03d}-{group:02d}-{serial:04d} (invalid)")
    return out
