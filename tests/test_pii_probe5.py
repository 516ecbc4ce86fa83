"""Gaps a fifth blind probe found: rows of two- and four-digit numbers (a hex dump, lottery draws, a grid, zero-padded
fields) and ISO 6709 coordinates read as phones, a German mobile after `my number` read as Japan's My Number, a
German direct-dial `-0` cut off its number, trunk-0 numbers with an area code's own separator and new phone cues,
a meeting's passcode (also after a JSON/iCalendar `\\n` escape), a two-column password export, an address as a
URL's user, AWS SigV4's header, PuTTY keys, Wi-Fi passphrases, Teams webhooks, a phone column named by a CSV header,
passport numbers in digit groups and German date-of-birth labels. Each value case failed before the fix
(`tasks/data/privacy/pii_phones.py`, `pii_phonerows.py`, `pii_national.py`, `pii_cues.py`, `pii_plainwords.py`,
`pii_keyed.py`, `pii_devfiles.py`, `pii_secrets.py`, `pii_emails.py`, `pii_shapes.py`, `pii_keyfiles.py`,
`pii_columns.py`, `pii_personal.py`)."""

from __future__ import annotations

import pytest

from tasks.data.privacy.pii import scrub_pii
from tests.helpers.pii_cases import assert_scrubbed


@pytest.mark.parametrize("text, expected", [
    # a German switchboard's direct-dial digit goes with its number
    ("+49 (0)89 12 34 56-0", "<PHONE>"),
    ("Zentrale: +49 89 123456-0, Fax -99", "Zentrale: <PHONE>, Fax -99"),
    ("Sie erreichen uns unter (030) 901820-0.", "Sie erreichen uns unter <PHONE>."),
    ("Kanzlei Weber, 0221 / 98 76 54-3", "Kanzlei Weber, <PHONE>"),
    ("Hotline Mo-Fr: 0049 (0) 89 / 12 34 56-0", "Hotline Mo-Fr: <PHONE>"),
    # an area code with its own separator, the rest spaced
    ("Rufen Sie uns an: (030) 901820-0 oder 030/4000 1234.", "Rufen Sie uns an: <PHONE> oder <PHONE>."),
    ("WhatsApp: +91 98765 43210 | Landline: 011-2345 6789", "WhatsApp: <PHONE> | Landline: <PHONE>"),
    ("Bel ons: 010 - 123 45 67 (ma-vr 9-17 uur)", "Bel ons: <PHONE> (ma-vr 9-17 uur)"),
    # new cue words
    ("cellulare: 347 123 4567", "cellulare: <PHONE>"),
    ("Scrivimi o chiama il numero di cellulare 347 123 4567", "Scrivimi o chiama il numero di cellulare <PHONE>"),
    ("Teléfono de contacto: 91 123 45 67 (Madrid)", "Teléfono de contacto: <PHONE> (Madrid)"),
    ("Teléfono de contacto: 912 345 678", "Teléfono de contacto: <PHONE>"),
    ("Zadzwoń: 600 123 456", "Zadzwoń: <PHONE>"),
    # `my number` before a German mobile is a phone, not Japan's My Number
    ("my number 0176 12345678", "my number <PHONE>"),
    ("Hi, my number is 0176 12345678, text me", "Hi, my number is <PHONE>, text me"),
    # already handled before, kept as they were: a cued number, a French number standing alone
    ("Tel.: +49 (0) 89 / 12 34 56-0 (Empfang)", "Tel.: <PHONE> (Empfang)"),
    ("Hotline: 0800 123 4567", "Hotline: <PHONE>"),
    ("Appelez le 01 23 45 67 89 demain", "Appelez le <PHONE> demain"),
    ("06 12 34 56 78", "<PHONE>"),
    # a list of French numbers one per line is phones, not a row of numbers going on into the next line
    ("01 23 45 67 89\n06 12 34 56 78", "<PHONE>\n<PHONE>"),
    ("Contacts\n04 72 10 20 30\n06 12 34 56 78\n01 44 55 66 77", "Contacts\n<PHONE>\n<PHONE>\n<PHONE>"),
])
def test_a_phone_is_found_whole(text: str, expected: str) -> None:
    assert_scrubbed(text, expected)


@pytest.mark.parametrize("text", [
    "00000010  01 02 03 04 05 06 07 08  09 10 11 12 13 14 15 16  |................|",
    "values 01 02 03 04 05 06 07",
    "Lottery 04 12 23 31 38 45",
    "Winning numbers 05 11 19 27 33 41, Powerball 12.",
    "Draw results: 04 12 23 31 38 45 and 02 09 17 25 33 49.",
    "Bingo card: 07 12 23 34 45 56 67 78",
    "board = '02 04 06 08 10 12 14 16'",
    "Week numbers 01 05 09 13 17 21 25",
    "Schedule: 07 14 21 28 35 minutes past",
    "rows:\n01 02 03 04 05\n06 07 08 09 10\n11 12 13 14 15",
    "bitrate = 0128 0256 0320",
    "Items 0123 4567 8901",
    "page 1234 5678 of the catalogue; items 0123 4567 8901",
    "position +40.6894-074.0447",
    "ISO 6709 position +48.8584+002.2945/ and +40.6894-074.0447/",
    # other rows of numbers: months, scores, a matrix, years, versions, addresses
    "months 01 02 03 04 05 06 07 08 09 10 11 12",
    "Final scores: 03 07 05 09 02 04",
    "matrix = [[01, 02, 03], [04, 05, 06]]\nbytes: 0a 0b 0c 0d 0e 0f 10 11",
    "Seasons 2019 2020 2021 2022 2023",
    "versions 01.02.03 and 04.05.06",
    "route 10.0.0.1 via 10.0.0.254",
    "Pins 05 10 15 20 25 30 35 40 45",
    "codes 0001 0002 0003 0004",
    "checksum 0f3a 0b2c 0d4e 09f1",
    "Dates: 2019-04-01 - 2019-04-05",
])
def test_rows_of_numbers_and_coordinates_are_no_phones(text: str) -> None:
    assert_scrubbed(text, None)


@pytest.mark.parametrize("text, expected", [
    # a `\n` escape of a JSON or iCalendar string ends a line where a password word follows it
    (r"DESCRIPTION:Join Zoom\nPasscode: 482913", r"DESCRIPTION:Join Zoom\nPasscode: <SECRET>"),
    (r"DESCRIPTION:Join Zoom\nPassword: 482913", r"DESCRIPTION:Join Zoom\nPassword: <SECRET>"),
    (r"DESCRIPTION:Join Zoom\nPasscode: 482913\nMeeting ID: 812",
     r"DESCRIPTION:Join Zoom\nPasscode: <SECRET>\nMeeting ID: 812"),
    (r'"body": "Hi,\nmy password is hunter22\nthanks"', r'"body": "Hi,\nmy password is <SECRET>\nthanks"'),
    ("Passcode: 4Xq9Zt7a", "Passcode: <SECRET>"),
    ("Meeting ID: 812 3456 7890\nPasscode: 4Xq9Zt", "Meeting ID: 812 3456 7890\nPasscode: <SECRET>"),
    ("Meeting passcode: 482913", "Meeting passcode: <SECRET>"),
    ("Besprechungs-ID: 812 3456 7890\nKenncode: 482913", "Besprechungs-ID: 812 3456 7890\nKenncode: <SECRET>"),
    # a password manager's two-column export
    ("username,password\nana_s,Sunshine2026", "username,password\nana_s,<SECRET>"),
    ("login,password\nana_s,Sunshine2026\nbob,Tr0ub4dor&3", "login,password\nana_s,<SECRET>\nbob,<SECRET>"),
    ("email,password\nana@souza.dev,Sunsh1ne!2026", "email,password\n<EMAIL>,<SECRET>"),
    # an address as a URL's user: the address an email, the password a secret, the host kept
    ("ftp://ops@acme.io:Sm7pPa55word@ftp.acme.io/", "ftp://<EMAIL>:<SECRET>@ftp.acme.io/"),
    ("MAIL_URL=smtps://ops%40acme.io:Sm7pPa55word@smtp.gmail.com:465",
     "MAIL_URL=smtps://<EMAIL>:<SECRET>@smtp.gmail.com:465"),
    ("Authorization: AWS4-HMAC-SHA256 Credential=AKIA4HX7Q2M3N5P6R8TZ/20261207/eu-west-1/s3/aws4_request, "
     "SignedHeaders=host, Signature=fe5f80f77d5fa3beca038a248ff027d0445342fe2855ddc963176630326f1024",
     "Authorization: AWS4-HMAC-SHA256 Credential=<SECRET>/20261207/eu-west-1/s3/aws4_request, "
     "SignedHeaders=host, Signature=<SECRET>"),
    # key files, Wi-Fi and webhooks
    ("Public-Lines: 1\nAAAAC3NzaC1lZDI1NTE5AAAAIHh5OVp3OFZ1\nPrivate-Lines: 1\n"
     "AAAAIGZvb2JhcmJhenF1eHh5OVp3OFZ1N1RzNlJxNVBvNE5tM0xrMkpoMQ==\n"
     "Private-MAC: 3f9b2c1d0e8a7b6c5d4e3f2a1b0c9d8e3f9b2c1d0e8a7b6c5d4e3f2a1b0c9d8e",
     "Public-Lines: 1\nAAAAC3NzaC1lZDI1NTE5AAAAIHh5OVp3OFZ1\nPrivate-Lines: 1\n<SECRET>\nPrivate-MAC: <SECRET>"),
    ('network={\n  ssid="FritzBox-7590"\n  psk="Wlan-Sch1uessel-2026"\n}',
     'network={\n  ssid="FritzBox-7590"\n  psk="<SECRET>"\n}'),
    ("WIFI:S:HomeNet;T:WPA;P:Xy9Zw8Vu7;;", "WIFI:S:HomeNet;T:WPA;P:<SECRET>;;"),
    ("WIFI:T:WPA;S:HomeNet;P:Wlan-Sch1uessel-2026;;", "WIFI:T:WPA;S:HomeNet;P:<SECRET>;;"),
    ("TEAMS_WEBHOOK=https://acme.webhook.office.com/webhookb2/3f9b2c1d-0e8a-4b6c-9d4e-3f2a1b0c9d8e"
     "@7c5d4e3f-2a1b-4c9d-8e3f-9b2c1d0e8a7b/IncomingWebhook/9f8e7d6c5b4a39281706f5e4d3c2b1a0/"
     "3f9b2c1d-0e8a-4b6c-9d4e-3f2a1b0c9d8e",
     "TEAMS_WEBHOOK=https://acme.webhook.office.com/webhookb2/<SECRET>"),
])
def test_a_secret_is_found(text: str, expected: str) -> None:
    assert_scrubbed(text, expected)


@pytest.mark.parametrize("text", [
    "user,password_policy\nana,strict",
    "name,password_policy\nana,min8chars2026",
    "user,password\nalice,bob",
    "username,password\n${USER},${PASS}",
    "def login():\n    return user,password\n",
    'print("Password: %s\\n" % pw)',
    'msg = "\\npassword is required\\n"',
    "Forgot password: required",
    "Set psk=\"<your passphrase>\" in the file",
    "WIFI:S:Cafe;T:nopass;P:;;",
    "https://git@github.com/org/repo.git and ssh://git@host:22/x",
    "Authorization: Required",
])
def test_secret_look_alikes_are_kept(text: str) -> None:
    assert_scrubbed(text, None)


@pytest.mark.parametrize("text, expected", [
    ("name,phone\nJohn Carter,4155552671\nMary Ellis,2125550198",
     "name,phone\nJohn Carter,<PHONE>\nMary Ellis,<PHONE>"),
    ("imie,nazwisko,telefon\nJan,Kowalski,600123456", "imie,nazwisko,telefon\nJan,Kowalski,<PHONE>"),
    ("Name;Telefon;Geburtsdatum\nLena Vogel;015123456789;14.02.1986",
     "Name;Telefon;Geburtsdatum\nLena Vogel;<PHONE>;<DOB>"),
    ("| Name | Mobile |\n|---|---|\n| Ana | 5511987654321 |", "| Name | Mobile |\n|---|---|\n| Ana | <PHONE> |"),
    # passports in digit groups after their cue
    ("Passport number: 925 076 473", "Passport number: <PASSPORT>"),
    ("Passport No. 925-076-473", "Passport No. <PASSPORT>"),
    ("passport: 92507 6473", "passport: <PASSPORT>"),
    ("Traveller: Olivia Brown, Passport: 925 076 473 (USA)", "Traveller: Olivia Brown, Passport: <PASSPORT> (USA)"),
    # German date-of-birth labels and a two-digit year after a month's name
    ("Geboren: 14.02.1986 in Köln", "Geboren: <DOB> in Köln"),
    ("Geburtstag: 14.02.1986", "Geburtstag: <DOB>"),
    ("Geburtstag: 14. Februar 1986", "Geburtstag: <DOB>"),
    ("DOB: 14 Feb 86", "DOB: <DOB>"),
])
def test_a_column_passport_or_birth_date_is_found(text: str, expected: str) -> None:
    assert_scrubbed(text, expected)


@pytest.mark.parametrize("text", [
    "id,phone_count\n1,4155552671",
    "hotel,rooms\nRitz,1234567",
    "name,phone\nAna,1234",
    "item,cell\nA1,0000000",
    "Passport photo 925 076 473 px",
    "passport office hours 9-17",
    "Geboren in Köln, 1986 gezogen",
    "Geburtstag: Samstag",
    "Das Team wurde geboren: eine Idee von 2019",
])
def test_column_passport_and_birth_look_alikes_are_kept(text: str) -> None:
    assert_scrubbed(text, None)


@pytest.mark.parametrize("text, expected", [
    # a national id under a header naming it, valid in its scheme (the cued pass needs its label before it)
    ("name,ssn\nJohn Carter,536904399", "name,ssn\nJohn Carter,<SSN>"),
    ("| Name | SSN |\n|---|---|\n| Ann | 536-90-4399 |", "| Name | SSN |\n|---|---|\n| Ann | <SSN> |"),
    ("x,social security number\na,536904399", "x,social security number\na,<SSN>"),
    ("imie,nazwisko,pesel\nJan,Kowalski,85031214567", "imie,nazwisko,pesel\nJan,Kowalski,<SSN>"),
    ("naam;bsn;stad\nJ. de Boer;111222333;Utrecht", "naam;bsn;stad\nJ. de Boer;<SSN>;Utrecht"),
    ("user,cpf\nana,390.533.447-05", "user,cpf\nana,<SSN>"),
    ("name,personnummer\nSven,811228-9874", "name,personnummer\nSven,<SSN>"),
])
def test_a_national_id_column_is_found(text: str, expected: str) -> None:
    assert_scrubbed(text, expected)


@pytest.mark.parametrize("text", [
    "name,ssn\nJohn,078051120",              # the SSA's advertised number: invalid by its rules
    "name,ssn\nA,111111111",                 # one digit repeated
    "user,cpf\nana,111.111.111-11",          # passes CPF's checks, one digit repeated (its separators no digits)
    "name,ssn\nA,12345",                     # too short for any
    "id,ssn_policy,count\n1,123456789,3",    # another column's name
    "naam;bsn\nJ. de Boer;123456789",        # fails the 11-test
    "imie,pesel\nJan,85031214568",           # wrong check digit
    "The ssn, the pesel and the bsn are national ids.\n1,2,3",
])
def test_national_id_column_look_alikes_are_kept(text: str) -> None:
    assert_scrubbed(text, None)


def test_a_my_number_in_its_own_layout_is_still_one() -> None:     # (as before)
    scrubbed, counts = scrub_pii("My Number: 1234 5678 9018")
    assert (scrubbed, counts) == ("My Number: <SSN>", {"ssn": 1})
