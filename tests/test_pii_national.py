"""Other countries' national identity numbers (`tasks.data.privacy.pii_national`, counted as `ssn`) on values
from Faker's locale providers (`tests.helpers.pii_planted_national`), none of which this project wrote; every
case failed before (none of these numbers was scrubbed, `python benchmarks/pii_recall.py`, `ssn/faker_national`).
"""

from __future__ import annotations

import random

import pytest

from tasks.data.privacy.pii import scrub_pii
from tasks.data.privacy.pii_national import valid_as
from tests.helpers import pii_planted_national as national

pytest.importorskip("faker")

N = 12
# Schemes whose layout is their own (letters or the scheme's separators): found without a cue too.
SHAPED = {"it.codicefiscale", "es.dni", "es.nie", "br.cpf", "se.personnummer", "ch.ssn", "fi.hetu", "kr.rrn",
          "mx.curp", "cl.rut", "th.pin", "lv.pvn"}
IDS = [f"{locale}/{method}" for locale, method, _, _ in national.SOURCES]


@pytest.fixture(scope="module", params=national.SOURCES, ids=IDS)
def source(request):
    locale, method, scheme, cues = request.param
    return scheme, cues, national.values(locale, method, scheme, 7, N)


def test_found_after_a_cue_in_the_countrys_language(source):
    scheme, cues, values = source
    assert len(values) == N
    for i, value in enumerate(values):
        text = national.CUED[i % len(national.CUED)].format(cue=cues[i % len(cues)], value=value)
        out, counts = scrub_pii(text)
        assert value not in out and counts == {"ssn": 1}, (text, out, counts)


def test_own_layouts_found_without_a_cue_and_bare_digits_left(source):
    scheme, _, values = source
    for value in values:
        out, counts = scrub_pii(f"Kunde {value} angelegt")
        if scheme in SHAPED and not value.isdigit():
            assert counts == {"ssn": 1} and value not in out, (value, out)
        elif value.isdigit():       # a bare digit run without a cue is anybody's (China's `X` ones aside)
            assert "ssn" not in counts, (value, out)


def test_a_wrong_check_digit_is_no_number(source):
    scheme, cues, values = source
    if scheme in ("dk.cpr", "at.vnr"):
        pytest.skip("no check digit in the last place")
    for value in values:
        last = value[-1]
        for other in "0123456789" if last.isdigit() else "ABCDEFGHJKLMNPQRSTVWXYZ":
            wrong = value[:-1] + other
            if other != last and not valid_as(scheme, wrong):
                break
        out, counts = scrub_pii(f"{cues[0]} {wrong}")
        assert "ssn" not in counts, (scheme, wrong, out)


@pytest.mark.parametrize("text", [
    "order 20240101-1234", "run 123456789 times", "The national debt 123456789012",
    "CPF inválido 111.111.111-11", "x = 00000000T", "ticket 850101-1234567", "sha 12345678-1234-1234-1234",
    "My number is 12", "National ID card required", "NIE 12345", "PESEL: 2024",
])
def test_look_alikes_stay(text):
    assert scrub_pii(text) == (text, {})


def test_random_digit_runs_after_a_cue_are_mostly_rejected():
    # A cue is not enough: the number must pass its scheme's check (about 1 in 10 or 11 random runs does).
    rng = random.Random(3)
    runs = ["".join(rng.choice("0123456789") for _ in range(11)) for _ in range(300)]
    hits = sum("ssn" in scrub_pii(f"PESEL: {run}")[1] for run in runs)     # (a 0-led one reads as a phone)
    assert hits == sum(valid_as("pl.pesel", run) for run in runs) and hits < 30
