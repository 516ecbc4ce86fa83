"""Defects a third blind probe found: a `)` that closes a `tel:` link taken into the phone, a placeholder read as the
cue of the next value (a date after `<SSN>`, a second date after `<DOB>`), a date taken for an SSN, a LaTeX `\\_`
or an HTML entity in an address's local part left before the placeholder, URL-encoded phones missed and a query's
`email%3D` taken into the address. The probe's examples and variations of them; each failed before the fix."""

from __future__ import annotations

import pytest

from tests.helpers.pii_cases import assert_scrubbed


@pytest.mark.parametrize("text, expected", [
    ("[Call us](tel:+49308867494) — we answer 24/7", "[Call us](tel:<PHONE>) — we answer 24/7"),
    ("(tel: +14155550132)", "(tel: <PHONE>)"),
    ("See [our hotline](tel:+4420794609581).", "See [our hotline](tel:<PHONE>)."),
    ("(Tel. +4930886749)", "(Tel. <PHONE>)"),
    # unchanged: a parenthesised country code and an HTML link
    ("Tel: +(370) 42323221", "Tel: <PHONE>"),
    ('<a href="tel:+49308867494">call</a>', '<a href="tel:<PHONE>">call</a>'),
])
def test_a_link_keeps_its_closing_parenthesis(text: str, expected: str) -> None:
    assert_scrubbed(text, expected)


@pytest.mark.parametrize("text, expected", [
    ("INSERT INTO employees VALUES (17, 'Lee', 'Ann', '155-66-9755', '1985-03-12');",
     "INSERT INTO employees VALUES (17, 'Lee', 'Ann', '<SSN>', '1985-03-12');"),
    ("17,Lee,Ann,155-66-9755,2019-04-01", "17,Lee,Ann,<SSN>,2019-04-01"),
    ("| 17 | Lee | 155-66-9755 | 2019-04-01 |", "| 17 | Lee | <SSN> | 2019-04-01 |"),
    ("42;Kim;219-57-4232;20190401", "42;Kim;<SSN>;20190401"),
    ("SSN: 2019-04-01", None), ("SSN (2019-04-01)", None), ("National ID: 1985-03-12", None),
    ("DOB: 1985-03-12 2019-04-01 admitted", "DOB: <DOB> 2019-04-01 admitted"),
    ("DOB 12/03/1985 12/04/2024", "DOB <DOB> 12/04/2024"),
    ("Date of birth: 1990-07-04, visit 2024-01-05", "Date of birth: <DOB>, visit 2024-01-05"),
    ("Passport No. A4641825 B2210247", "Passport No. <PASSPORT> B2210247"),
    # lists of real values stay whole; an element's tag still names its value
    ("SSN: 123-45-6789, 234-56-7890", "SSN: <SSN>, <SSN>"),
    ("<DOB>1985-03-12</DOB>", "<DOB><DOB></DOB>"),
    ("| DOB | 1985-03-14 |", "| DOB | <DOB> |"),
])
def test_a_placeholder_cues_no_value_of_another_shape(text: str, expected: str | None) -> None:
    assert_scrubbed(text, expected)


@pytest.mark.parametrize("text, expected", [
    (r"\email{kenji\_garcia@outlook.com}", r"\email{<EMAIL>}"),
    (r"\texttt{kenji\_garcia@outlook.com}", r"\texttt{<EMAIL>}"),
    (r"Contact: \href{mailto:a\_b\_lee@uni-bonn.de}{a\_b\_lee@uni-bonn.de}.",
     r"Contact: \href{mailto:<EMAIL>}{<EMAIL>}."),
])
def test_a_latex_escaped_underscore_is_part_of_the_address(text: str, expected: str) -> None:
    assert_scrubbed(text, expected)


@pytest.mark.parametrize("text, expected", [
    ("<p>Kontakt: anna&#46;hassan&#64;web&#46;de</p>", "<p>Kontakt: <EMAIL></p>"),
    ("<p>Kontakt: olga&#46;sharma&#64;yahoo&#46;co&#46;uk</p>", "<p>Kontakt: <EMAIL></p>"),
    ("mail: j&#x2e;doe&#x40;mail&#x2e;org.", "mail: <EMAIL>."),
    ('<a href="mailto:&#115;&#118;&#101;&#110;&#110;&#64;&#109;&#97;&#105;&#108;&#46;&#114;&#117;">'
     "&#115;&#118;&#101;&#110;&#110;&#64;&#109;&#97;&#105;&#108;&#46;&#114;&#117;</a>",
     '<a href="mailto:<EMAIL>"><EMAIL></a>'),
    # unchanged: an `@` entity alone, and entities that spell no address
    ("john&#64;example.com", "<EMAIL>"), ("a &amp; b &#64; c", None), ("foo&#46;bar&#64;baz", None),
])
def test_an_entity_encoded_address_goes_whole(text: str, expected: str | None) -> None:
    assert_scrubbed(text, expected)


@pytest.mark.parametrize("text, expected", [
    ('"GET /callback?phone=%2B1%20415%20231%205414&ok=1 HTTP/1.1" 200',
     '"GET /callback?phone=<PHONE>&ok=1 HTTP/1.1" 200'),
    ('"GET /search?q=call+%2B1+415+231+5414 HTTP/1.1" 200', '"GET /search?q=call+<PHONE> HTTP/1.1" 200'),
    ("?tel=%2B49%2030%201234567", "?tel=<PHONE>"),
    ('"GET /api/users?filter=email%3Dpriyat%40gmail.com HTTP/1.1"', '"GET /api/users?filter=email%3D<EMAIL> HTTP/1.1"'),
    ("/u?filter=email%3Dkenji%2Bnews%40mail.ru", "/u?filter=email%3D<EMAIL>"),
    # unchanged: too few digits for a phone
    ("?q=%2B1+2+3", None), ("?id=%2B1234", None),
])
def test_url_encoded_values(text: str, expected: str | None) -> None:
    assert_scrubbed(text, expected)
