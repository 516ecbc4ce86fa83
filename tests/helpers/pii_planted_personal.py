"""Planted dates of birth and passport numbers (`tests.helpers.pii_planted`'s `dob/cued` and `passport/cued`
groups): each generator returns (carrier text, parts that must vanish).

`dob/cued`: a birth date after each cue (`DOB`, `date of birth`, `born on`, `birthdate`, `Geburtsdatum`, `fecha
de nacimiento`, `date de naissance`) in ISO, day/month/year, month/day/year, dotted, and with the month's name
(English, and German, Spanish or French after their cue). `passport/cued`: a number as issued (US 9 digits or a
letter and 8, UK 9 digits, Germany's `C` + 8, France's `12AB34567`) after each passport cue, and a passport's
two machine-readable-zone lines (ICAO 9303, with right check digits). `PERSONAL_LOOK_ALIKES` are lines of the
same words that hold none: dates without a cue, a year after `born`, an encyclopedia's `(born April 29, 1970)` and
dates before 1900, `passport photo`, versions, order numbers.
"""

from __future__ import annotations

import random
import string
from datetime import date, timedelta

MONTHS = ["January", "February", "March", "April", "May", "June", "July", "August", "September", "October",
          "November", "December"]
LOCAL_MONTHS = {"de": "Januar Februar März April Mai Juni Juli August September Oktober November Dezember".split(),
                "es": "enero febrero marzo abril mayo junio julio agosto septiembre octubre noviembre diciembre".split(),
                "fr": "janvier février mars avril mai juin juillet août septembre octobre novembre décembre".split()}
DOB_CUES = {"en": ["DOB: {}", "Date of birth: {}", '"dob": "{}"', "born on {}", "She was born on {} in Leeds.",
                   "birthdate={}", "| Ann Lee | D.O.B. {} |", "Her date of birth is {}.", "<dob>{}</dob>",
                   "Birth date: {}", "Born: {}"],
            "de": ["Geburtsdatum: {}"], "es": ["Fecha de nacimiento: {}"], "fr": ["Date de naissance : {}"]}


def _birth_date(rng: random.Random) -> date:
    return date(1930, 1, 1) + timedelta(days=rng.randint(0, 80 * 365))


def _written(rng: random.Random, d: date, language: str) -> str:
    if language != "en" and rng.random() < 0.5:
        month = LOCAL_MONTHS[language][d.month - 1]
        return {"de": f"{d.day}. {month} {d.year}", "es": f"{d.day} de {month} de {d.year}",
                "fr": f"{d.day} {month} {d.year}"}[language]
    return rng.choice([f"{d:%Y-%m-%d}", f"{d:%d/%m/%Y}", f"{d:%m/%d/%Y}", f"{d:%d.%m.%Y}", f"{d:%Y/%m/%d}",
                       f"{d.day} {MONTHS[d.month - 1]} {d.year}", f"{MONTHS[d.month - 1]} {d.day}, {d.year}",
                       f"{MONTHS[d.month - 1][:3]} {d.day}, {d.year}", f"{d:%d-%m-%y}"])


def dates_of_birth(rng: random.Random, n: int) -> list[tuple[str, tuple[str, ...]]]:
    """A birth date after a cue, every cue and format in turn."""
    out = []
    for i in range(n):
        language = ["en", "en", "en", "de", "es", "fr"][i % 6]
        value = _written(rng, _birth_date(rng), language)
        out.append((rng.choice(DOB_CUES[language]).format(value), (value,)))
    return out


PASSPORT_CUES = ["Passport No. {}", "passport number: {}", "Passport #{}", '"passport_no": "{}"', "passport {}",
                 "Reisepass: {}", "Reisepassnummer {}", "Pasaporte: {}", "Número de pasaporte: {}",
                 "Passeport n° {}", "| Ann Lee | passport {} | GBR |"]
DE_ALPHABET = "CFGHJKLMNPRTVWXYZ0123456789"


def _passport_number(rng: random.Random, i: int) -> str:
    digits = lambda k: "".join(rng.choice(string.digits) for _ in range(k))  # noqa: E731
    return [digits(9), rng.choice(string.ascii_uppercase) + digits(8), "C" + "".join(rng.choice(DE_ALPHABET)
            for _ in range(8)), digits(2) + rng.choice(string.ascii_uppercase) * 2 + digits(5)][i % 4]


def check_digit(field: str) -> str:
    """ICAO 9303's check digit (written here, not imported, so the check is independent)."""
    total = 0
    for i, c in enumerate(field):
        total += (int(c) if c.isdigit() else 0 if c == "<" else ord(c) - ord("A") + 10) * (7, 3, 1)[i % 3]
    return str(total % 10)


def mrz(rng: random.Random) -> tuple[str, str]:
    """The two lines of a passport's machine-readable zone (TD3, 44 characters each)."""
    surname = rng.choice(["ERIKSSON", "MUSTERMANN", "O<BRIEN", "GARCIA<LOPEZ", "NAKAMURA"])
    given = rng.choice(["ANNA<MARIA", "ERIKA", "SEAN", "LUCIA", "KENJI"])
    state = rng.choice(["UTO", "D<<", "GBR", "ESP", "JPN"])
    line1 = f"P<{state}{surname}<<{given}".ljust(44, "<")
    number = _passport_number(rng, rng.randint(0, 3))
    birth, expiry = _birth_date(rng), date(2026, 1, 1) + timedelta(days=rng.randint(0, 3650))
    born, expires = f"{birth:%y%m%d}", f"{expiry:%y%m%d}"
    body = f"{number}{check_digit(number)}{state}{born}{check_digit(born)}{rng.choice('MF')}{expires}" \
           f"{check_digit(expires)}" + "<" * 14 + "<"
    line2 = body + check_digit(body[0:10] + body[13:20] + body[21:43])
    return line1, line2


def passports(rng: random.Random, n: int) -> list[tuple[str, tuple[str, ...]]]:
    """A passport number after a cue; every fifth plant a whole MRZ."""
    out = []
    for i in range(n):
        if i % 5 == 4:
            line1, line2 = mrz(rng)
            out.append((rng.choice(["{}\n{}", "MRZ:\n{}\n{}", "scan:\n{}\n{}\nend"]).format(line1, line2),
                        (line1, line2)))
            continue
        value = _passport_number(rng, i)
        out.append((rng.choice(PASSPORT_CUES).format(value), (value,)))
    return out


PERSONAL_LOOK_ALIKES = [
    "Deployed 2024-01-15 10:30:45; invoice dated 12/03/1987; March 12, 1987 was a Thursday; 12 March 1987 too.",
    "She was born in 1987 and born in March 1987 in Leeds; firstborn 2019; reborn 2019-05-02; Unicorn 2.0.",
    "Andre Kirk Agassi (born April 29, 1970) is; Schopenhauer was born on 22 February 1788; DOB: 1899-12-31.",
    "The DOB column is YYYY-MM-DD; dob = parse(row['dob']); date of birth: unknown; DOB 1987 (year only).",
    "Bring a passport photo; passport office hours 9-17; passport renewal takes 10 weeks; PASSPORT OFFICE 2.",
    "npm install passport@0.6.0 passport-local; passport.use(strategy); Passport 2.0 released; passport v0.7.0.",
    "Order No. 12345678 and No. 987654321; version 1.2.3; passport number: ABCDEFGHI; passport No. 2024.",
    "x = a << b << 2; P<<<<< is a marker; std::cout << PASSPORT_OFFICE << 123456789;",
]
