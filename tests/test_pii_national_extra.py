"""Identity numbers after their own cue that were missed (`tasks.data.privacy.pii_national_extra`, counted as
`ssn`): Germany's Krankenversichertennummer, Greece's police identity card (ΑΔΤ) and AMKA under a dotted cue,
Mexico's clave de elector, Azerbaijan's FİN; and YAML passwords led by `#`, `!`, `&` or `*`
(`tasks.data.privacy.pii_credentials`). The same layouts without their cue, with a wrong check, date or state,
and YAML's own anchors, aliases, tags and comments stay."""

from __future__ import annotations

import re

import pytest

from tasks.data.privacy.pii import scrub_pii

# KVNR check digits by the GKV rule (letter as 01-26, weights 1,2,…, digit sums, mod 10): A123456780 is valid,
# A123456781 is not.
KVNR = ["Krankenversichertennummer: A123456780", "Ihre KVNR lautet T456789017.",
        "Versichertennummer X987654326, Krankenkasse AOK Bayern", "health insurance number: M012345673",
        "| Versichertennummer | A123456780 |", "<td>Versicherten-Nr.</td><td>T456789017</td>",
        "Patient: Max Müller, geb. 01.02.1980, KVNR X987654326", "kvnr=M012345673&kasse=tk"]
ADT = ["ΑΔΤ: ΑΚ 123456", "Α.Δ.Τ. ΧΚ763170", "Αριθμός Δελτίου Ταυτότητας: ΑΒ123456",
       "ο κάτοχος του δελτίου ταυτότητας με αριθμό ΑΗ 654321", "αριθμός ταυτότητας AK123456",
       "ΑΡΙΘΜΟΣ ΤΑΥΤΟΤΗΤΑΣ: ΡΤ908172", "Identity card no. AE 112233 (Greece)",
       "Όνομα: Γιάννης Παπαδόπουλος, ΑΔΤ: ΟΒ690743, ΑΦΜ: 123456789", "ΑΔΤ NO 966448",
       "Identity card no. NO966448 (Greece)"]
AMKA = ["Α.Μ.Κ.Α.: 01018012342", "ΑΜΚΑ ασφαλισμένου 15076523453", "α.μ.κ.α. 29020045679"]
ELECTOR = ["Clave de elector: GMVLMR80070501M100", "CLAVE DE ELECTOR GMVLMR80070501H100",
           "credencial para votar con clave de elector PXGNZQ64030918H667", "INE: LFPSSK61110632M118",
           "Clave de Elector | NBBSZQ56080211M120", "elector key: VWXTVN76011828M943"]
FIN = ["FİN kod: 5ZBPT1L", "FİN: 2DA4Q1A", "FIN kodu R0H86BA", "Fərdi identifikasiya nömrəsi: E41JSRY",
       "FIN code: U7NHQ2H", "Şəxsiyyət vəsiqəsi, FİN kodu: 6ZHZ4TN", "PİN kod: 94FMDDD"]
PASSWORDS = ["password: #Qw9$z1Lm", "db_password: #Qw9$z1Lm", "  password: !x7Kp2qL9A\n  user: app",
             "env:\n  DOCKER_PASSWORD: !PBpfot2A89Q2", "database:\n  password: #cLjzeS4Bh!Vf  # rotated 2024",
             "- name: db\n  password: !2i2jNkVryg8", "password: &Qy8jHPJQ", "password: *Sj5B8W7Z5x",
             "db_password: #$NxTSQq2", "password: !!lk3HCliy", "password: #&70GNewVp"]


def _value(text: str) -> str:
    """The planted value: the last whitespace-separated piece that holds a digit, less table and HTML dressing."""
    return [p for p in re.split(r"[\s|;,=&<>]+|\.$|/td", text) if any(c.isdigit() for c in p) and
            not p.startswith(("01.02.", "123456789", "2024", "(Greece"))][-1].rstrip(".")


@pytest.mark.parametrize("text", KVNR + ADT + AMKA + ELECTOR + FIN)
def test_a_national_number_after_its_own_cue_is_scrubbed(text):
    out, counts = scrub_pii(text)
    assert counts.get("ssn", 0) >= 1 and "<SSN>" in out and _value(text) not in out, (text, out, counts)


@pytest.mark.parametrize("text", PASSWORDS)
def test_a_yaml_password_led_by_yaml_syntax_is_scrubbed(text):
    out, counts = scrub_pii(text)
    value = re.search(r"(?i)password: (\S+)", text).group(1)
    assert counts.get("secret") == 1 and "<SECRET>" in out and value not in out, (text, out, counts)


LOOK_ALIKES = [
    # KVNR layout without its cue, or with a wrong check digit
    "Bestellnummer: A123456780", "Rechnungsnummer T456789017", "KVNR: A123456781",
    "Krankenversichertennummer: X987654320", "Artikelnummer M012345673 (Lager 3)", "A123456780",
    "Versichertennummer: 12 Monate gültig", "Datum: 01.02.2024, Versichertennummer: siehe Karte",
    # ΑΔΤ layout without its cue, or the wrong count of digits
    "Αρ. Παραγγελίας: ΑΒ 123456", "κωδικός προϊόντος AK123456", "ΑΔΤ: 123456", "ΑΔΤ: ΑΒ 1234567",
    "Order no. ΧΚ763170", "δελτίο ταυτότητας νέου τύπου (2024)", "identity card no 123456",
    # clave de elector layout without its cue, or with state 33, sex X, month 13
    "Folio: GMVLMR80070501M100", "Número de pedido GMVLMR80070501M100", "Clave de elector: GMVLMR80070533M100",
    "Clave de elector: GMVLMR80070501X100", "Clave de elector: GMVLMR80130501M100", "ENGINE: GMVLMR80070501M100",
    "LINE GMVLMR80070501M100", "Factura GMVLMR80070501M100", "INE: 1234567890123",
    # FIN: no digit, 8 characters, I and O, a mask, no cue, a date
    "FİN kod: ABCDEFG", "FİN kod: 12345678", "FİN kod: 1AB2CIO", "FİN kod: AAAAAA1", "Sifariş nömrəsi: 5ZBPT1L",
    "FIN: 5ZBPT1L", "FIN-5ZBPT1L", "FİN: 2024-01-01", "PIN kod: 94FMDDD", "PİN kod: 1234",
]
YAML_CONTROLS = [
    "password: *default_pw", "password: &default_pw", "password: !vault |\n  $ANSIBLE_VAULT;1.1;AES256",
    'password: "{{ vault_pw }}"', "password: ${DB_PASSWORD}", "password: '#'", "password:  # set below",
    "password: !secret db_password", "password: !Ref DbPassword", "password: !GetAtt Database.Password",
    "password: #TODO", "password: #changeme", "password: !ENV ${PW}", "password: !Base64", "password: #Password1",
    "password: # Password123 is the default", "password: #FFAA00", "password: !!str", "db_password: *db_pass",
    "base: &Db2Prod\n  host: db\nprod:\n  password: *Db2Prod", "password: &pw1X9kQ\nother: *pw1X9kQ",
    "password_hash: #Qw9z1Lm8x", "color: #A1b2C3", "id: !x7Kp2qL9A", "comment: #Qw9z1Lm8x",
    "password: #Qw9z1Lm8x more words here", "password: !!binary", "password: ## TODO2 Fix",
]


@pytest.mark.parametrize("text", LOOK_ALIKES + YAML_CONTROLS)
def test_control_look_alikes_stay(text):
    assert scrub_pii(text) == (text, {})


# A KVNR as it is written: the letter apart, the digits in threes (as the card prints them), the 20-character form
# (KVNR, the insurer's IK, a check digit) and the 30-character one (a family member's: the member's KVNR too).
KVNR_WRITTEN = {
    "KVNR A 123456780": "A 123456780", "KVNR: A123 456 780": "A123 456 780",
    "Versichertennummer: A 123456780, Kasse TK": "A 123456780",
    "Krankenversichertennummer A123 456 780": "A123 456 780", "health insurance number: T 456789017": "T 456789017",
    "Ihre KVNR lautet X 987 654 326.": "X 987 654 326", "<td>KVNR</td><td>M 012 345 673</td>": "M 012 345 673",
    "KVNR: A1234567801095009690": "A1234567801095009690", "Krankenversichertennummer H9825979119074833780":
    "H9825979119074833780", "KVNR T456789017109500969X9876543261": "T456789017109500969X9876543261",
}


@pytest.mark.parametrize("text", KVNR_WRITTEN)
def test_a_kvnr_written_spaced_grouped_or_whole_is_scrubbed(text):
    value = KVNR_WRITTEN[text]
    out, counts = scrub_pii(text)
    assert counts == {"ssn": 1} and "<SSN>" in out and not any(part in out for part in value.split()), (out, counts)


def test_faker_de_kvnr_after_its_cue_is_scrubbed():
    """Faker's de_DE `kvnr()` writes the 20-character form (its first 10 pass the GKV check)."""
    faker = pytest.importorskip("faker")
    fake = faker.Faker("de_DE")
    fake.seed_instance(20)
    for value in (fake.kvnr() for _ in range(50)):
        out, counts = scrub_pii(f"Krankenversichertennummer: {value}")
        assert counts == {"ssn": 1} and value not in out and value[:10] not in out, (value, out)


# A KVNR in a table's column that only the header names (`pii_columns`): CSV, Markdown, TSV, `;`.
KVNR_TABLES = [
    ("Name,KVNR,Kasse\nMax Müller,A123456780,AOK\nEva Roth,T456789017,TK\n", ["A123456780", "T456789017"]),
    ("| Name | Versichertennummer |\n|---|---|\n| Max Müller | A123456780 |\n| Eva Roth | X987654326 |\n",
     ["A123456780", "X987654326"]),
    ("name\tkvnr\tkasse\nMax\tM012345673\tAOK\n", ["M012345673"]),
    ("Name;Krankenversichertennummer;Geburtsort\nMax;K260181594;Köln\nEva;B830166136;Bonn\n",
     ["K260181594", "B830166136"]),
    ("patient_id,health_insurance_number\n1001,C860913902\n1002,S960308245\n", ["C860913902", "S960308245"]),
    ("Name,KVNR\nMax,A 123 456 780\n", ["A 123 456 780"]),
]


@pytest.mark.parametrize(("text", "values"), KVNR_TABLES)
def test_a_kvnr_under_its_column_header_is_scrubbed(text, values):
    out, counts = scrub_pii(text)
    assert counts == {"ssn": len(values)} and not any(v in out for v in values), (out, counts)
    assert out.splitlines()[0] == text.splitlines()[0]          # the header stays


KVNR_LOOK_ALIKES = [
    # the spaced and grouped layouts without a cue, after another one, or with a wrong check digit
    "Bestellnummer: A 123456780", "Artikel A123 456 780", "Rechnung A 123 456 780", "product code A123456789",
    "KVNR: A 123456781", "KVNR: A123 456 781", "Versichertennummer X 987 654 320", "Order no. A 123456780",
    "SKU: B 830166136", "Section A 123 456 780 of the code", "Ticket A 1234567801", "KVNR A 12345678",
    # the 20 and 30 forms with a wrong first KVNR, or a wrong member's KVNR, or a digit too many
    "KVNR: A1234567811095009690", "KVNR T456789017109500969X9876543201", "KVNR: A12345678010950096901",
    "Tracking A1234567801095009690",
    # columns that are not a KVNR's, a KVNR column whose value fails or is no number, prose that names it
    "Order,Code\n1,A123456780\n", "Name,Code\nMax,A123456780\n", "Name,KVNR\nMax,A123456781\n",
    "Name,KVNR\nMax,siehe Karte\n", "| Artikel | Nummer |\n|---|---|\n| Schraube | A123456780 |\n",
    "KVNR,Anzahl\nA,12\nB,7\n", "Die KVNR steht auf der Karte, z. B. A123456781.",
    "sku\tprice\nA123456780\t12.99\n",
    # other look-alikes: ISBNs, dates, prices, hex ids in code, versions
    "ISBN 978-3-16-148410-0", "Datum 01.02.2024", "Preis: 1.234,56 €", "commit a1b2c3d4e5f6 0x1234567890",
    "id = 0xA123456780", "const KEY_A = 'A 123456780'.length", "v1.2.3 A 1.234.567.890",
]


@pytest.mark.parametrize("text", KVNR_LOOK_ALIKES)
def test_kvnr_look_alikes_stay(text):
    assert scrub_pii(text) == (text, {})


@pytest.mark.parametrize("text", ["AMKA 15076523450", "ΑΜΚΑ: 01018012343", "Α.Μ.Κ.Α. 29020045670"])
def test_an_amka_with_a_wrong_check_digit_is_no_national_id(text):
    """Like every cued scheme here, a wrong check digit is no AMKA (a number led by 0 may still read as a phone)."""
    assert "ssn" not in scrub_pii(text)[1]


@pytest.mark.parametrize("text", ["Tel: +49 30 123456780", "KVNR-Hotline: 0800 123 456 780", "Fax: 0221 123456780",
                                  "Rückruf unter 030 123 456 780, KVNR siehe Karte"])
def test_a_phone_near_a_kvnr_cue_is_no_kvnr(text):
    assert "ssn" not in scrub_pii(text)[1]
