"""IBANs, SSNs and obfuscated emails (`tasks.data.privacy.pii_ids`): public examples, SSA rules by brute force, the
registry table of the planted generator against stdnum's, look-alikes, pass order, counts and idempotence.

Expected outputs are written by hand; the IBAN examples are the SWIFT IBAN Registry's own (their check digits
are recomputed here with the generator's mod-97, independent of the detector's stdnum)."""

from __future__ import annotations

import itertools
import random
import re

import pytest
from stdnum import numdb

from tasks.data.privacy.pii import scrub_pii
from tests.helpers.pii_planted import planted
from tests.helpers.pii_planted_ids import IBAN_REGISTRY, LOOK_ALIKES, PUBLISHED_SSNS, look_alike_lines, \
    mod97_check_digits

REGISTRY_EXAMPLES = [  # the registry's example IBANs (electronic and printed forms)
    "GB82 WEST 1234 5698 7654 32", "DE89 3704 0044 0532 0130 00", "FR14 2004 1010 0505 0001 3M02 606",
    "NL91ABNA0417164300", "NO93 8601 1117 947", "BE68 5390 0754 7034", "CH93 0076 2011 6238 5295 7",
    "MT84 MALT 0110 0001 2345 MTLC AST0 01S", "LC55 HEMM 0001 0001 0012 0012 0002 3015",
    "RU02 0445 2560 0407 0281 0412 3456 7890 1", "ES91 2100 0418 4502 0005 1332",
    "IT60 X054 2811 1010 0000 0123 456", "SC18 SSCB 1101 0000 0000 0000 1497 USD",
    "BR18 0036 0305 0000 1000 9795 493C 1",
]


def _expand(structure: str) -> str:
    """`4!a6!n` or `4a6n` -> `aaaannnnnn`: one class per position."""
    return "".join(cls * int(n) for n, cls in re.findall(r"(\d+)!?([anc])", structure))


def test_generator_registry_agrees_with_stdnums() -> None:
    # Two transcriptions of the SWIFT registry: the planted generator's (written out for this project) and the
    # one stdnum ships; the detector uses stdnum's, so a difference would plant IBANs the detector must reject.
    theirs = {cc: numdb.get("iban").info(cc)[0][1]["bban"] for cc in IBAN_REGISTRY}
    assert {cc: _expand(s) for cc, s in IBAN_REGISTRY.items()} == {cc: _expand(s) for cc, s in theirs.items()}
    assert len(IBAN_REGISTRY) == 89 and min(len(_expand(s)) for s in IBAN_REGISTRY.values()) == 11


@pytest.mark.parametrize("example", REGISTRY_EXAMPLES)
def test_registry_examples_are_ibans(example: str) -> None:
    compact = example.replace(" ", "")
    assert mod97_check_digits(compact[:2], compact[4:]) == compact[2:4]        # the generator's check digits
    assert scrub_pii(f"Pay to {example}, ref 7.") == ("Pay to <IBAN>, ref 7.", {"iban": 1})
    wrong = compact[:2] + f"{(int(compact[2:4]) + 1) % 100:02d}" + compact[4:]  # one check digit off
    assert scrub_pii(f"Pay to {wrong}.") == (f"Pay to {wrong}.", {})


@pytest.mark.parametrize("text, expected", [
    ("IBAN DE89370400440532013000.", "IBAN <IBAN>."),
    ("AT61 1904 3002 3457 3201 EUR 100", "<IBAN> EUR 100"),        # cut before the trailing token
    ("AT61 1904 3002 3457 3201 2024 ABCD", "<IBAN> 2024 ABCD"),
    ('{"iban": "GB82WEST12345698765432", "bic": "WESTGB2L"}', '{"iban": "<IBAN>", "bic": "WESTGB2L"}'),
    ("DE89 3704 0044 0532 0130 0", "DE89 3704 0044 0532 0130 0"),  # one short
    ("de89 3704 0044 0532 0130 00", "<IBAN>"),                     # lower case, grouped
    ("DE89-3704-0044-0532-0130-00, ok", "<IBAN>, ok"), ("DE89  3704  0044  0532  0130  00", "<IBAN>"),
    ("iban: de89370400440532013000", "iban: <IBAN>"),
    ("id de89370400440532013000", "id de89370400440532013000"),   # bare lower case without a cue: an id
    ("DE89 3704-0044 0532 0130 00", "DE89 3704-0044 0532 0130 00"),  # mixed separators: no IBAN layout
    ("de88 3704 0044 0532 0130 00", "de88 3704 0044 0532 0130 00"),  # check digit off
    ("XDE89370400440532013000", "XDE89370400440532013000"),         # inside a longer token
])
def test_iban_boundaries(text: str, expected: str) -> None:
    assert scrub_pii(text)[0] == expected


def _ssa_valid(area: int, group: int, serial: int) -> bool:
    """The SSA's rules, written here: no area 000, 666 or 900-999, no group 00, no serial 0000, no published."""
    return (0 < area < 900 and area != 666 and group > 0 and serial > 0
            and f"{area:03d}-{group:02d}-{serial:04d}" not in PUBLISHED_SSNS)


def test_ssn_validity_follows_ssa_rules() -> None:
    areas = (0, 1, 78, 219, 457, 665, 666, 667, 899, 900, 987, 999)
    groups, serials = (0, 1, 5, 9, 55, 99), (0, 1, 1120, 5462, 9999)
    checked = 0
    for area, group, serial in itertools.product(areas, groups, serials):
        for layout in ("{:03d}-{:02d}-{:04d}", "{:03d} {:02d} {:04d}", "SSN: {:03d}{:02d}{:04d}"):
            text = "record " + layout.format(area, group, serial) + " on file"
            counts = scrub_pii(text)[1]
            assert counts == ({"ssn": 1} if _ssa_valid(area, group, serial) else {}), text
            checked += 1
    assert checked == 12 * 6 * 5 * 3


@pytest.mark.parametrize("text, expected", [
    ("SSN 536-90-4399", "SSN <SSN>"), ("ssn: 536904399", "ssn: <SSN>"), ('"ssn": "536904399"', '"ssn": "<SSN>"'),
    ("Social Security No. 536904399", "Social Security No. <SSN>"), ("SS# 536904399", "SS# <SSN>"),
    ("customer_ssn=536904399", "customer_ssn=<SSN>"), ("her SSN is 536904399.", "her SSN is <SSN>."),
    ("Ann Lee,536-90-4399,1984", "Ann Lee,<SSN>,1984"),
    # no cue: a bare 9-digit run is an id; the cue must end right before it
    ("order 536904399", "order 536904399"), ("ssn_length = 536904399", "ssn_length = 536904399"),
    ("lessn 536904399", "lessn 536904399"),
])
def test_ssn_cases(text: str, expected: str) -> None:
    assert scrub_pii(text)[0] == expected


@pytest.mark.parametrize("text, counts", [
    ("Call 202-555-0143 or (202) 555-0143", {"phone": 2}), ("+1 415 555 0199", {"phone": 1}),
    ("020 7946 0958", {"phone": 1}), ("on 2024-01-15", {}), ("ZIP 12345-6789", {}), ("ISBN 978-3-16-148410-0", {}),
    ("078-05-1120", {}), ("000-12-3456 and 000 12 3456", {}),     # SSN-shaped but never issued: no phone either
])
def test_ssn_shapes_do_not_take_other_numbers(text: str, counts: dict[str, int]) -> None:
    assert scrub_pii(text)[1] == counts


@pytest.mark.parametrize("text, expected", [
    ("ann [at] example [dot] com", "<EMAIL>"), ("ann(at)example(dot)org", "<EMAIL>"),
    ("ann {at} mail {dot} example {dot} co {dot} uk", "<EMAIL>"), ("ann AT example DOT com", "<EMAIL>"),
    ("mail: ann.lee <at> uni-bonn <dot> de.", "mail: <EMAIL>."), ("ann [AT] example.com", "<EMAIL>"),
    ("ann@example[dot]com", "<EMAIL>"), ("ann [@] example [.] io", "<EMAIL>"),
    ("Kontakt: max.mustermann(at)firma(dot)de (Büro)", "Kontakt: <EMAIL> (Büro)"),
    # prose and code keep their words
    # lower-case words: after an email cue, or a local part no word has with the `dot` word
    ("email me at ann at example dot com.", "email me at <EMAIL>."), ("Email: jane at example dot com", "Email: <EMAIL>"),
    ("My email is john at gmail dot com", "My email is <EMAIL>"), ("jane.doe at gmail dot com", "<EMAIL>"),
    ("reach me: jsmith at company dot co dot uk", "reach me: <EMAIL>"), ("Email support at example.com", "Email <EMAIL>"),
    ("email me at jane dot doe at gmail dot com", "email me at <EMAIL>"), ("jane dot doe at gmail dot com", "<EMAIL>"),
    ("write to j dot r dot smith at uni dot ac dot uk please", "write to <EMAIL> please"),
    ("look at the dot com bubble", None), ("contact us at support dot example dot com", None),
    ("Connect the dot here at home dot com", None), ("We met at the plaza dot then left", None),
    ("Email us at the dot com address", None), ("E-mail is down, so meet bob at noon dot sharp", None),
    ("Download Python 3.12 at python.org", None), ("see os.path at docs.python.org", None),
    ("<EMAIL> and bob at mail dot example dot org", None),                  # a scrubbed address is no cue
    ("LOOK AT THE DOT COM BUBBLE", None), ("SELECT ts AT TIME ZONE 'UTC'", None), ("ann AT example.com", None),
    ("values[at] = data[dot]; f(at) + g(dot)", None), ("[at](https://x.org) @property", None),
])
def test_obfuscated_emails(text: str, expected: str | None) -> None:
    assert scrub_pii(text) == ((expected, {"email": 1}) if expected else (text, {}))


def test_look_alikes_of_the_new_kinds_are_untouched() -> None:
    lines = look_alike_lines(random.Random(3), variants=300)
    assert len(lines) == len(LOOK_ALIKES) + 300
    assert [(line, scrub_pii(line)) for line in lines if scrub_pii(line) != (line, {})] == []


def test_counts_by_kind_and_order() -> None:
    # Hand count: 2 IBANs (one bare), 2 SSNs (one cued), 2 emails (one obfuscated), 1 card, 1 phone.
    text = ("Ann (ann [at] example [dot] com, ann@example.org) pays from DE89 3704 0044 0532 0130 00 and "
            "NL91ABNA0417164300; SSN 536-90-4399, ssn=123456789; card 4111 1111 1111 1111; tel +44 20 7946 0958.")
    scrubbed, counts = scrub_pii(text)
    assert counts == {"credit_card": 1, "email": 2, "iban": 2, "phone": 1, "ssn": 2}
    assert scrubbed == ("Ann (<EMAIL>, <EMAIL>) pays from <IBAN> and <IBAN>; SSN <SSN>, ssn=<SSN>; "
                        "card <CREDIT_CARD>; tel <PHONE>.")
    # Without the new kinds the IBAN's digit groups are no card or phone, and the SSN no phone.
    assert scrub_pii("DE89 3704 0044 0532 0130 00 / 536-90-4399", ["credit_card", "phone"])[1] == {}


def test_scrubbing_is_idempotent_on_the_new_kinds() -> None:
    # IBANs, SSNs (also other countries'), obfuscated emails, secrets in every syntax, in config shapes and in shapes of
    # their own, phones in every international form and in national layouts, dates of birth and passports
    plants = [p for p in planted(seed=11, per_kind=60) if p.kind in ("iban", "ssn") or p.form]
    assert len(plants) == 660
    for plant in plants:
        once = scrub_pii(plant.text)
        assert scrub_pii(once[0]) == (once[0], {}) and sum(once[1].values()) == 1, plant
