"""Dates of birth and passport numbers after their cues (`tasks.data.privacy.pii_personal`), and numbers after a
phone cue read as phones, not SSNs (`tasks.data.privacy.pii_cues`). Expected outputs are written by hand; every
case here failed before (no `dob` or `passport` kind; `Tel: 372 12 3456` was an SSN)."""

from __future__ import annotations

import random

import pytest

from specs.clean import PII_KINDS, PIISpec
from tasks.data.privacy.pii import scrub_pii
from tasks.data.privacy.pii_personal import check_digit, mrz_line2_ok
from tests.helpers.pii_planted_personal import PERSONAL_LOOK_ALIKES, check_digit as icao_check_digit, mrz

ICAO_LINE1 = "P<UTOERIKSSON<<ANNA<MARIA<<<<<<<<<<<<<<<<<<<"       # ICAO 9303 part 4's specimen
ICAO_LINE2 = "L898902C36UTO7408122F1204159ZE184226B<<<<<10"


@pytest.mark.parametrize("text, expected", [
    ("Tel: 372 12 3456", "Tel: <PHONE>"),                       # Tajikistan: an SSN's spaced layout
    ("Phone: 372-12-3456", "Phone: <PHONE>"),
    ("call me at 219 44 7788 tonight", "call me at <PHONE> tonight"),
    ("电话：372 12 3456", "电话：<PHONE>"),
])
def test_a_number_after_a_phone_cue_is_a_phone(text: str, expected: str) -> None:
    assert scrub_pii(text) == (expected, {"phone": 1})


@pytest.mark.parametrize("text", ["SSN 372 12 3456", "ssn: 372-12-3456", "employee 372-12-3456 (payroll)"])
def test_an_ssn_without_a_phone_cue_stays_an_ssn(text: str) -> None:
    assert scrub_pii(text)[1] == {"ssn": 1}


@pytest.mark.parametrize("text, expected", [
    ("DOB: 1987-03-12", "DOB: <DOB>"),
    ("D.O.B. 12/03/1987", "D.O.B. <DOB>"),
    ('{"dob": "1987-03-12", "id": 7}', '{"dob": "<DOB>", "id": 7}'),
    ("Date of birth: 03/31/1987.", "Date of birth: <DOB>."),    # month/day/year: 31 is no month
    ("date of birth is 12.03.87", "date of birth is <DOB>"),
    ("She was born on 12 March 1987 in Leeds.", "She was born on <DOB> in Leeds."),
    ("Lincoln's son was born on March 12, 1987", "Lincoln's son was born on <DOB>"),
    ("Born: 12th of March, 1987", "Born: <DOB>"),
    ("birthdate=1987/03/12", "birthdate=<DOB>"),
    ("BIRTH DATE: 1 Jan 1950", "BIRTH DATE: <DOB>"),
    ("Geburtsdatum: 12. März 1987", "Geburtsdatum: <DOB>"),
    ("Fecha de nacimiento: 12 de marzo de 1987", "Fecha de nacimiento: <DOB>"),
    ("Date de naissance : 12 mars 1987", "Date de naissance : <DOB>"),
    ("<dob>1987-03-12</dob>", "<dob><DOB></dob>"),
    ("Birthday: 1985-03-14", "Birthday: <DOB>"), ("birthday is March 14, 1985", "birthday is <DOB>"),
    ("DOB: 14-Mar-1985", "DOB: <DOB>"), ("DOB: 14-MAR-1985", "DOB: <DOB>"), ("DOB: 19850314", "DOB: <DOB>"),
    ("Patient DOB: 1985-03-14T00:00:00", "Patient DOB: <DOB>"),       # a date column exported as a datetime
    ("date of birth (dd/mm/yyyy): 14/03/1985", "date of birth (dd/mm/yyyy): <DOB>"),
    # `born on` in French, German, Spanish; CJK and Korean labels and dates (no spaces around them)
    ("Elle est née le 14 mars 1985 à Lyon.", "Elle est née le <DOB> à Lyon."), ("geboren am 14.03.1985", "geboren am <DOB>"),
    ("nacida el 14 de marzo de 1985", "nacida el <DOB>"), ("生年月日：1985年3月14日", "生年月日：<DOB>"),
    ("我的生日是1985年3月14日，谢谢", "我的生日是<DOB>，谢谢"), ("出生日期：1985年03月14日", "出生日期：<DOB>"),
    ("生年月日は1985年3月14日です", "生年月日は<DOB>です"), ("생년월일: 1985년 3월 14일", "생년월일: <DOB>"),
    ("DOB 1985年3月14日", "DOB <DOB>"),
])
def test_dates_of_birth_after_a_cue(text: str, expected: str) -> None:
    assert scrub_pii(text) == (expected, {"dob": 1})


@pytest.mark.parametrize("text, expected", [
    ("Passport No. 123456789", "Passport No. <PASSPORT>"),               # US, UK: 9 digits
    ("passport number: A12345678", "passport number: <PASSPORT>"),       # US: a letter and 8
    ("Reisepass: C01X00T47", "Reisepass: <PASSPORT>"),                   # Germany
    ("Reisepassnummer C01X00T47", "Reisepassnummer <PASSPORT>"),
    ("Reisepass: CTRRYWLKP", "Reisepass: <PASSPORT>"),                   # a German serial of letters only
    ("Passeport n° 12AB34567", "Passeport n° <PASSPORT>"),               # France
    ("Número de pasaporte: XDA123456", "Número de pasaporte: <PASSPORT>"),
    ('"passport_no": "123456789"', '"passport_no": "<PASSPORT>"'),
    (f"MRZ:\n{ICAO_LINE1}\n{ICAO_LINE2}\nend", "MRZ:\n<PASSPORT>\nend"),
    (f"scan\n{ICAO_LINE2}", "scan\n<PASSPORT>"),                          # line 2 alone: its check digits
])
def test_passports_after_a_cue_and_mrz_lines(text: str, expected: str) -> None:
    assert scrub_pii(text) == (expected, {"passport": 1})


@pytest.mark.parametrize("text", [
    *PERSONAL_LOOK_ALIKES,
    "DOB: 31/02/1987", "born 1987-13-45", "Date of birth: 2024-01-15T10:30:00",   # no date; a timestamp
    "DOB: 19851314", "DOB: 18990101", "DOB: 14-Foo-1985", "Birthday party on 2024-05-02",   # no month; 1899; no cue
    "2024-01-15 10:30:45 INFO job started; 12/03/1987 in the ledger", "born in 1987",
    "Napoléon, né le 15 août 1769", "生日快乐！", "生日：2024年13月2日", "生日派对在2024年5月2日", "the 1985年3月14日 meeting",
    ICAO_LINE2[:-1] + "1",                                                         # a wrong composite check
])
def test_look_alikes_stay(text: str) -> None:
    assert scrub_pii(text) == (text, {})


def test_check_digits_agree_with_an_independent_implementation() -> None:
    rng = random.Random(5)
    for _ in range(200):
        line1, line2 = mrz(rng)
        assert len(line1) == len(line2) == 44 and mrz_line2_ok(line2)
        assert check_digit(line2[:9]) == icao_check_digit(line2[:9]) == line2[9]
    assert check_digit("L898902C3") == "6" and check_digit("740812") == "2"      # ICAO 9303's worked example


def test_the_new_kinds_are_default_and_can_be_left_out() -> None:
    assert {"dob", "passport"} <= set(PII_KINDS) and {"dob", "passport"} <= set(PIISpec().kinds)
    text = "DOB: 1987-03-12, passport 123456789"
    assert scrub_pii(text) == ("DOB: <DOB>, passport <PASSPORT>", {"dob": 1, "passport": 1})
    assert scrub_pii(text, ["dob"]) == ("DOB: <DOB>, passport 123456789", {"dob": 1})
    assert scrub_pii(text, ["email", "phone", "ssn"]) == (text, {})


def test_scrubbing_is_idempotent() -> None:
    text = f"DOB: 1987-03-12\nPassport #A12345678\n{ICAO_LINE1}\n{ICAO_LINE2}\nTel: 372 12 3456"
    once = scrub_pii(text)
    assert once[1] == {"dob": 1, "passport": 2, "phone": 1}
    assert scrub_pii(once[0]) == (once[0], {})
