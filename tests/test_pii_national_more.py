"""More countries' identity numbers after a cue in the country's language or English
(`tasks.data.privacy.pii_national_more`, counted as `ssn`).

Every value is built by its scheme's own rule here (check digits computed, seeded), many per scheme, and
checked valid by `python-stdnum` where it has the scheme; the tests do not import the module under test, so
they run unchanged on the code before it. `test_found_after_a_cue` failed for every scheme before; the
negative tests (a wrong check, no cue, look-alikes near the cue words) are controls that passed before too.
"""

from __future__ import annotations

import random
import string

import pytest
from stdnum import luhn
from stdnum.cl import rut as cl_rut
from stdnum.co import nit
from stdnum.ec import ci as ec_ci
from stdnum.in_ import pan
from stdnum.ke import pin as ke_pin
from stdnum.mx import rfc
from stdnum.my import nric as my_nric
from stdnum.nz import ird
from stdnum.pk import cnic
from stdnum.pt import cc as pt_cc, nif
from stdnum.ru import inn
from stdnum.si import emso
from stdnum.th import pin as th_pin
from stdnum.gr import vat as gr_vat
from stdnum.id import nik
from stdnum.au import tfn

from tasks.data.privacy.pii import scrub_pii

N = 15
DIGITS = string.digits


def _digits(rng: random.Random, n: int) -> str:
    return "".join(rng.choice(DIGITS) for _ in range(n))


def _date(rng: random.Random) -> tuple[int, int, int]:
    return rng.randint(1940, 2005), rng.randint(1, 12), rng.randint(1, 28)


def snils(rng):
    body = str(rng.randint(1001999, 999999999)).zfill(9)
    total = sum(int(d) * w for d, w in zip(body, range(9, 0, -1))) % 101 % 100
    return f"{body[:3]}-{body[3:6]}-{body[6:]} {total:02d}"


def inn_personal(rng):
    body = _digits(rng, 10)
    return body + inn.calc_personal_check_digits(body)


def inn_company(rng):
    body = _digits(rng, 9)
    return body + inn.calc_company_check_digit(body)


def sg_nric(rng):
    prefix, digits = rng.choice("STFG"), _digits(rng, 7)
    total = sum(int(d) * w for d, w in zip(digits, (2, 7, 6, 5, 4, 3, 2))) + (4 if prefix in "TG" else 0)
    table = "JZIHGFEDCBA" if prefix in "ST" else "XWUTRQPNMLK"
    return prefix + digits + table[total % 11]


def mykad(rng):
    year, month, day = _date(rng)
    return f"{year % 100:02d}{month:02d}{day:02d}-{rng.randint(1, 16):02d}-{_digits(rng, 4)}"


def indonesia_nik(rng):
    while True:
        year, month, day = _date(rng)
        district, day = rng.randint(1, 9), day + rng.choice((0, 40))        # women's day of birth + 40
        value = f"3171{district:02d}{day:02d}{month:02d}{year % 100:02d}{rng.randint(1, 999):04d}"
        if nik.is_valid(value):
            return value


def emirates(rng):
    body = f"784{rng.randint(1950, 2005)}{_digits(rng, 7)}"
    return f"{body[:3]}-{body[3:7]}-{body[7:]}-{luhn.calc_check_digit(body)}"


def saudi(rng):
    body = rng.choice("12") + _digits(rng, 8)
    return body + luhn.calc_check_digit(body)


def pakistan_cnic(rng):
    while True:
        value = f"{rng.randint(1, 7)}{_digits(rng, 4)}-{_digits(rng, 7)}-{rng.randint(1, 9)}"
        if cnic.is_valid(value):
            return value


def portugal_nif(rng):
    body = rng.choice("123") + _digits(rng, 7)
    return body + nif.calc_check_digit(body)


def portugal_cc(rng):
    body = _digits(rng, 9) + rng.choice(string.ascii_uppercase) + rng.choice(string.ascii_uppercase)
    value = body + pt_cc.calc_check_digit(body)
    return f"{value[:8]} {value[8]} {value[9:]}"


def ecuador_ci(rng):
    while True:
        value = f"{rng.randint(1, 24):02d}{rng.randint(0, 5)}{_digits(rng, 7)}"
        if ec_ci.is_valid(value):
            return value


def uruguay_ci(rng):
    body = _digits(rng, 7)
    total = sum(int(d) * w for d, w in zip(body, (2, 9, 8, 7, 6, 3, 4)))
    return f"{body[0]}.{body[1:4]}.{body[4:]}-{(10 - total % 10) % 10}"


def colombia_nit(rng):
    body = str(rng.randint(10**8, 10**9 - 1))
    return f"{body[:3]}.{body[3:6]}.{body[6:]}-{nit.calc_check_digit(body)}"


def mexico_rfc(rng):
    while True:
        year, month, day = _date(rng)
        letters = "".join(rng.choice("ABCDEFGHJKLMNPRSTVZ") for _ in range(4))
        homoclave = "".join(rng.choice("ABCDEFGH123456789") for _ in range(2))
        body = f"{letters}{year % 100:02d}{month:02d}{day:02d}{homoclave}"
        value = body + rfc.calc_check_digit(body)
        if rfc.is_valid(value, validate_check_digits=True):
            return value


def india_pan(rng):
    letters = "".join(rng.choice(string.ascii_uppercase) for _ in range(3))
    surname, last = rng.choice(string.ascii_uppercase), rng.choice(string.ascii_uppercase)
    value = f"{letters}P{surname}{rng.randint(1, 9999):04d}{last}"        # P: a person
    assert pan.is_valid(value)
    return value


def australia_tfn(rng):
    while True:
        value = _digits(rng, 9)
        if tfn.is_valid(value) and len(set(value)) > 3:
            return f"{value[:3]} {value[3:6]} {value[6:]}"


def nz_ird(rng):
    while True:
        body = str(rng.randint(10_000_000, 99_999_999))
        check = ird.calc_check_digit(body)
        if check.isdigit() and ird.is_valid(body[1:] + check):
            value = body[1:] + check
            return f"{value[:2]}-{value[2:5]}-{value[5:]}"


def slovenia_emso(rng):
    year, month, day = _date(rng)
    body = f"{day:02d}{month:02d}{year % 1000:03d}50{rng.randint(0, 999):03d}"
    return body + emso.calc_check_digit(body)


def hkid(rng):
    letter, digits = rng.choice(string.ascii_uppercase), _digits(rng, 6)
    total = 36 * 9 + (ord(letter) - 55) * 8 + sum(int(d) * w for d, w in zip(digits, range(7, 1, -1)))
    check = -total % 11
    return f"{letter}{digits}({'A' if check == 10 else check})"


def taiwan(rng):
    codes = dict(zip("ABCDEFGHJKLMNPQRSTUVXYWZIO", range(10, 36)))
    letter, body = rng.choice(sorted(codes)), rng.choice("12") + _digits(rng, 7)
    total = codes[letter] // 10 + codes[letter] % 10 * 9 + sum(int(d) * w for d, w in zip(body, range(8, 0, -1)))
    return f"{letter}{body}{-total % 10}"


def thailand(rng):
    body = str(rng.randint(1, 8)) + _digits(rng, 11)
    return body + th_pin.calc_check_digit(body)


def hungary_taj(rng):
    body = _digits(rng, 8)
    check = sum(int(d) * (3 if i % 2 == 0 else 7) for i, d in enumerate(body)) % 10
    return f"{body[:3]} {body[3:6]} {body[6:]}{check}"


def hungary_tax(rng):
    while True:
        body = f"8{rng.randint(20000, 50000):05d}{_digits(rng, 3)}"
        check = sum(int(d) * w for d, w in zip(body, range(1, 10))) % 11
        if check < 10:
            return f"{body}{check}"


def greece_afm(rng):
    while True:
        body = _digits(rng, 8)
        value = body + str(sum(int(d) * 2 ** (8 - i) for i, d in enumerate(body)) % 11 % 10)
        if gr_vat.is_valid(value):
            return value


def vietnam_cccd(rng):
    province = rng.choice((1, 4, 31, 48, 79, 92))
    year = rng.randint(1950, 2012)
    century = (0 if year < 2000 else 2) + rng.randint(0, 1)
    return f"{province:03d}{century}{year % 100:02d}{_digits(rng, 6)}"


def egypt_nid(rng):
    year, month, day = _date(rng)
    century = 2 if year < 2000 else 3
    governorate = rng.choice((1, 2, 21, 88))
    return f"{century}{year % 100:02d}{month:02d}{day:02d}{governorate:02d}{_digits(rng, 4)}{rng.randint(1, 9)}"


def kenya_pin(rng):
    return rng.choice("AP") + _digits(rng, 9) + rng.choice(string.ascii_uppercase)


# name → (generator, cues in the country's language(s) and English, stdnum validator or None)
SCHEMES = {
    "ru.snils": (snils, ["СНИЛС", "SNILS", "страховой номер"], None),
    "ru.inn12": (inn_personal, ["ИНН", "INN"], inn.is_valid),
    "ru.inn10": (inn_company, ["ИНН организации", "INN"], inn.is_valid),
    "sg.nric": (sg_nric, ["NRIC", "FIN", "NRIC/FIN"], None),
    "my.nric": (mykad, ["MyKad", "No. K/P", "IC No", "kad pengenalan"], my_nric.is_valid),
    "id.nik": (indonesia_nik, ["NIK", "Nomor Induk Kependudukan", "KTP"], nik.is_valid),
    "ae.eid": (emirates, ["Emirates ID", "رقم الهوية", "EID"], None),
    "sa.nid": (saudi, ["Iqama", "الهوية الوطنية", "Saudi ID"], None),
    "pk.cnic": (pakistan_cnic, ["CNIC", "NICOP"], cnic.is_valid),
    "pt.nif": (portugal_nif, ["NIF", "contribuinte", "N.º contribuinte"], nif.is_valid),
    "pt.cc": (portugal_cc, ["Cartão de Cidadão", "CC"], pt_cc.is_valid),
    "ec.ci": (ecuador_ci, ["cédula", "Cédula de identidad", "C.I."], ec_ci.is_valid),
    "uy.ci": (uruguay_ci, ["cédula de identidad", "C.I."], None),
    "co.nit": (colombia_nit, ["NIT"], nit.is_valid),
    "mx.rfc": (mexico_rfc, ["RFC"], rfc.is_valid),
    "in_.pan": (india_pan, ["PAN", "PAN card", "Permanent Account Number", "पैन"], pan.is_valid),
    "au.tfn": (australia_tfn, ["TFN", "Tax File Number"], tfn.is_valid),
    "nz.ird": (nz_ird, ["IRD", "IRD number", "Inland Revenue"], ird.is_valid),
    "si.emso": (slovenia_emso, ["EMŠO", "JMBG", "matična številka"], emso.is_valid),
    "hk.hkid": (hkid, ["HKID", "香港身份證", "身份證號碼"], None),
    "tw.nid": (taiwan, ["身分證字號", "國民身分證"], None),
    "hu.taj": (hungary_taj, ["TAJ szám", "TAJ", "társadalombiztosítási azonosító jel"], None),
    "hu.tax": (hungary_tax, ["adóazonosító jel", "adóazonosító"], None),
    "gr.afm": (greece_afm, ["ΑΦΜ", "Α.Φ.Μ.", "AFM"], gr_vat.is_valid),
    "vn.cccd": (vietnam_cccd, ["CCCD", "căn cước công dân", "số định danh cá nhân"], None),
    "eg.nid": (egypt_nid, ["الرقم القومي", "Egyptian national ID"], None),
    "ke.pin": (kenya_pin, ["KRA PIN", "KRA PIN no"], ke_pin.is_valid),
    "th.pin": (thailand, ["เลขประจำตัวประชาชน", "บัตรประชาชน"], th_pin.is_valid),
}
TEMPLATES = ["{cue}: {value}", "{cue} {value}", "Kunde Anna Nowak, {cue} = {value}; ok", "| {cue} | {value} |",
             "{cue} {value} (verified)", "<td>{cue}</td><td>{value}</td>"]


@pytest.fixture(scope="module", params=sorted(SCHEMES))
def scheme(request):
    generate, cues, validator = SCHEMES[request.param]
    rng = random.Random(f"more-{request.param}")
    values = [generate(rng) for _ in range(N)]
    if validator is not None:
        assert all(validator(v) for v in values), values
    return request.param, cues, values


def test_found_after_a_cue(scheme):
    name, cues, values = scheme
    for i, value in enumerate(values):
        text = TEMPLATES[i % len(TEMPLATES)].format(cue=cues[i % len(cues)], value=value)
        out, counts = scrub_pii(text)
        assert value not in out and counts.get("ssn") == 1, (name, text, out, counts)


def _wrong(value: str) -> str:
    """The value with its last digit or letter changed (a failed check for every scheme here)."""
    last = value.rstrip(")")[-1]
    pos = value.rindex(last)
    pool = DIGITS if last.isdigit() else "BCDEFGHJKLMNPQRSTUVWXYZ"
    return value[:pos] + pool[(pool.index(last) + 1) % len(pool) if last in pool else 0] + value[pos + 1:]


CHECKED = {"ru.snils", "ru.inn12", "ru.inn10", "sg.nric", "ae.eid", "sa.nid", "pt.nif", "pt.cc", "ec.ci", "uy.ci",
           "co.nit", "au.tfn", "nz.ird", "si.emso", "hk.hkid", "tw.nid", "th.pin", "hu.taj", "hu.tax", "gr.afm"}


def test_control_a_wrong_check_is_no_number(scheme):
    name, cues, values = scheme
    if name not in CHECKED:
        pytest.skip("no check digit: a date or region code is the check")
    for value in values:
        out, counts = scrub_pii(f"{cues[0]}: {_wrong(value)}")
        assert "ssn" not in counts, (name, value, out)


def test_control_no_cue_no_number(scheme):
    name, _, values = scheme
    for value in values:
        if cl_rut.is_valid(value):      # Chile's RUT layout (`1.234.567-8`) is found anywhere, by design
            continue
        for text in (f"Order {value} shipped", f"ref={value}&page=2"):
            out, counts = scrub_pii(text)
            assert "ssn" not in counts, (name, text, out)


LOOK_ALIKES = [
    "NIK order 12345678 shipped", "PAN: ISBN 978-3-16-148410-0", "TFN phone +61 2 9876 5432", "CNIC issued 2024-01-15",
    "NIF: 12/03/2024", "IRD number of pages: 123", "RFC 2616 section 14.9", "RFC: 7231", "INN: room 12, 3 nights",
    "СНИЛС: см. заказ № 123456789", "NRIC: S1234567A", "FIN 2023: revenue 12345678", "IC 555-1234", "CC: 12345678",
    "cédula: tel. 099 123 4567", "NIT: 123", "EMŠO datum 01.01.2000", "HKID: A123456(4)", "身分證字號：A123456788",
    "Emirates ID: 784-1990-1234567-0", "iqama 2000000000", "PAN card fees Rs 107", "KTP 1234 5678",
    "ИНН 1234567890", "NIF 123456780", "TAJ 123456789", "CCCD 099090012345", "ΑΦΜ 123456789",
    "الرقم القومي 29013011234567", "adóazonosító 1234567890", "TFN 123 456 789", "IRD 12-345-678", "C.I. 1.234.567-8",
]


@pytest.mark.parametrize("text", LOOK_ALIKES)
def test_control_look_alikes_near_cues_left(text):
    out, counts = scrub_pii(text)
    assert "ssn" not in counts, (text, out, counts)


@pytest.mark.parametrize("text, kind", [
    ("Tfn: 0032 1 304 00 00", "phone"),     # Swedish `Tfn` is a phone's cue, not Australia's TFN
    ("Tfn: +46 8 123 456 78", "phone"),
    ("Inn 0800123456 is open", "phone"),    # an English word: a 10-digit run there is no Russian INN
])
def test_short_acronym_cues_count_only_in_capitals(text, kind):
    """`TFN`, `INN`, `PAN`, `FIN`, `NIT`, `IRD`, `IC`, `CC` are ids' cues in capitals only: written otherwise they
    are words or other cues (a fuzz run drew `Tfn: 0032 1 304 00 00`, replaced as an SSN)."""
    _, counts = scrub_pii(text)
    assert counts.get("ssn") is None and counts.get(kind) == 1, (text, counts)
