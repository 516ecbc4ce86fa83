"""National ids under the field names an English form gives them whatever the country (`SSN`, `Social security
number`, `ID card`), the UK's number under them and Faker's reserved `ZZ … T` form, US ITINs after their own cue,
and ids with a layout but no published check after their own cue (the Philippines' SSS/GSIS/Pag-IBIG/PhilHealth/
UMID/PhilSys, Nigeria's and Algeria's NIN, Bangladesh's NID, Italy's CIE, Venezuela's cédula, Argentina's DNI) or
with a check (Germany's Rentenversicherungsnummer). Values come from Faker, a generator this project did not write
(`python benchmarks/pii_faker_locales.py` runs every locale's id methods under five cues: after `SSN` 0.439 → 0.586
of 8,400 values, under the method's own name 0.449 → 0.879)."""

from __future__ import annotations

import pytest

from tasks.data.privacy.pii import scrub_pii
from tasks.data.privacy.pii_national import valid_as

faker = pytest.importorskip("faker")


def _values(locale: str, method: str, n: int = 12, scheme: str | None = None) -> list[str]:
    fake = faker.Faker(locale)
    fake.seed_instance(5)
    values = [str(getattr(fake, method)()) for _ in range(n * 4)]
    return [v for v in values if scheme is None or valid_as(scheme, v)][:n]


def _scrubbed(text: str, value: str) -> bool:
    out, counts = scrub_pii(text)
    return value not in out and counts.get("ssn", 0) >= 1


# Valid in their scheme (Faker's values filtered by python-stdnum), missed after `SSN` before.
SOCIAL = [("fr_FR", "ssn", "fr.nir"), ("et_EE", "ssn", "ee.ik"), ("ro_RO", "ssn", "ro.cnp"),
          ("tr_TR", "ssn", "tr.tckimlik"), ("uk_UA", "ssn", "ua.rntrc"), ("de_AT", "ssn", "at.vnr"),
          ("es_AR", "cuil", "ar.cuit"), ("en_CA", "ssn", "ca.sin")]


@pytest.mark.parametrize("cue", ["SSN: {v}", "Social security number: {v}", "social insurance no. {v}",
                                 "ID card: {v}", "| SSN | {v} |"])
@pytest.mark.parametrize("locale,method,scheme", SOCIAL)
def test_a_valid_national_id_after_an_english_field_name_is_scrubbed(locale, method, scheme, cue):
    values = _values(locale, method, 6, scheme)
    assert values, (locale, method)
    missed = [v for v in values if not _scrubbed(cue.format(v=v), v)]
    assert missed == []


@pytest.mark.parametrize("text", ["SSN 666-19-6688 is not issued", "ssn: 493-00-0590 (invalid)",
                                  "SSN: 000123456", "SSN 981-71-3267 is not issued",
                                  "social security no. 666554444."])
def test_control_an_invalid_us_ssn_after_ssn_is_not_read_as_another_country_s_id(text):
    """A US layout after `SSN` is the SSA's to judge: 666-19-6688 is a valid Canadian SIN by Luhn and 981-71-3267
    a valid ITIN, and both are SSN look-alikes here."""
    assert scrub_pii(text) == (text, {})


@pytest.mark.parametrize("text,value", [("NI number: ZZ877893T", "ZZ877893T"), ("SSN: ZZ 87 78 93 T", "ZZ 87 78 93 T"),
                                        ("National Insurance number ZZ 877893 T", "ZZ 877893 T"),
                                        ("Social security number: ZZ123456T", "ZZ123456T")])
def test_a_reserved_uk_national_insurance_number_after_a_cue_is_scrubbed(text, value):
    """Faker's en_GB ssn is `ZZ ## ## ## T` (a prefix and suffix HMRC never issues): after a cue it is the field's
    value all the same."""
    assert _scrubbed(text, value)


def test_faker_en_gb_ssn_after_a_cue_is_scrubbed():
    values = _values("en_GB", "ssn", 20)
    assert [v for v in values if not _scrubbed(f"National Insurance No: {v}", v)] == []


@pytest.mark.parametrize("text", ["Seat ZZ 12 34 56 T", "ref ZZ123456T", "order QQ 12 34 56 X"])
def test_control_an_unissued_national_insurance_shape_without_a_cue_stays(text):
    assert scrub_pii(text) == (text, {})


def test_a_us_itin_after_its_cue_is_scrubbed_and_not_bare():
    values = _values("en_US", "itin", 20, "us.itin")
    assert values
    assert [v for v in values if not _scrubbed(f"ITIN: {v}", v)] == []
    assert [v for v in values if not _scrubbed(f"Individual Taxpayer Identification Number {v}", v)] == []
    bare = f"Invoice {values[0]} paid"
    assert scrub_pii(bare) == (bare, {})


CUED = [("en_PH", "sss", "SSS No.: {v}"), ("en_PH", "gsis", "GSIS BP: {v}"), ("en_PH", "pagibig", "Pag-IBIG MID: {v}"),
        ("en_PH", "philhealth", "PhilHealth: {v}"), ("en_PH", "umid", "UMID: {v}"), ("ar_DZ", "ssn", "NIN: {v}"),
        ("it_IT", "cie", "Carta d'identità: {v}"), ("es_VE", "cedula", "Cédula: {v}"), ("es_AR", "dni", "DNI {v}"),
        ("de_DE", "rvnr", "Rentenversicherungsnummer: {v}"), ("de_DE", "rvnr", "SV-Nummer {v}")]


@pytest.mark.parametrize("locale,method,cue", CUED)
def test_an_id_after_its_own_cue_is_scrubbed(locale, method, cue):
    values = _values(locale, method, 12)
    assert [v for v in values if not _scrubbed(cue.format(v=v), v)] == []


@pytest.mark.parametrize("text,value", [("NIN: 12345678901", "12345678901"), ("NID: 910 273 4646", "910 273 4646"),
                                        ("PhilSys PSN 1234-5678-9012-3456", "1234-5678-9012-3456")])
def test_an_id_with_a_layout_only_after_its_own_cue_is_scrubbed(text, value):
    assert _scrubbed(text, value)


@pytest.mark.parametrize("locale,method,_", CUED)
def test_control_the_same_values_without_a_cue_stay(locale, method, _):
    for v in _values(locale, method, 4):
        text = f"Tracking {v} shipped"
        assert scrub_pii(text) == (text, {}), text


@pytest.mark.parametrize("number", ["82200783P598", "19160805I075"])
def test_control_a_rentenversicherungsnummer_with_a_wrong_check_digit_stays(number):
    wrong = number[:-1] + str((int(number[-1]) + 1) % 10)
    text = f"Rentenversicherungsnummer: {wrong}"
    assert scrub_pii(text) == (text, {})
    assert _scrubbed(f"Rentenversicherungsnummer: {number}", number)


@pytest.mark.parametrize("text,value", [("Medicare number: 2123 45670 1", "2123 45670 1"),
                                        ("Medicare card 2123456702", "2123456702"),
                                        ("MBI: 1EG4-TE5-MK73", "1EG4-TE5-MK73"), ("Medicare: 1EG4TE5MK73", "1EG4TE5MK73")])
def test_medicare_numbers_after_their_cue_are_scrubbed(text, value):
    """Australia's Medicare card number (its check digit) and the US Medicare Beneficiary Identifier (its layout)."""
    assert _scrubbed(text, value)


@pytest.mark.parametrize("text", ["Medicare No. 2123456711", "MBI 1EG4-TE5-MK7S", "Medicare covered 2123456701 claims",
                                  "order 1EG4-TE5-MK73 shipped"])
def test_control_a_medicare_look_alike_stays(text):
    """A wrong check digit, an S where MBI allows no S, a cue that is not the field's, no cue."""
    assert scrub_pii(text) == (text, {})
