"""Identity numbers written with letters or outside ASCII, after their own cue only, counted as `ssn`.

`EXTRA_NATIONAL_PASSES` has the shape of `pii_national_more.MORE_NATIONAL_PASSES` and runs as part of it. That
pass looks only at ASCII tokens led by at most 5 capitals; these numbers are led by 6 letters (Mexico), by Greek
letters (Greece) or have their letters anywhere (Azerbaijan), so they get their own token scan and cues (and
Germany's KVNR with them: `pii_national_more` is near its size limit):

- Germany's Krankenversichertennummer (`KVNR`, `Versichertennummer`, `health insurance number`): a letter and 9
  digits, the last a check digit (the GKV rule, `valid_de_kvnr`); written whole, the letter apart or the digits in
  threes (`A123456780`, `A 123456780`, `A123 456 780`), or in the 20- and 30-character forms of § 290 SGB V
  (`valid_de_kvnr_whole`). `is_kvnr` reads a table cell under a `KVNR` header (`pii_columns`).
- Greece's police identity card (`ΑΔΤ`, `Αριθμός Δελτίου Ταυτότητας`, `identity card no.`): two capitals, Greek or
  Latin, and 6 digits (`ΑΒ 123456`). No check digit: its layout, after its own cue.
- Mexico's clave de elector (`clave de elector`, `credencial para votar`, `INE`): 6 letters, a real YYMMDD birth
  date, a state 01-32, the sex H/M and 3 digits.
- Azerbaijan's FİN (`FİN`, `FIN kod`, its former name `PİN kod`, `fərdi identifikasiya nömrəsi`): 7 digits and
  English capitals but I and O (as the ID card's issuers describe it: `94FMDDD`). No check digit either; a digit
  is required, so a capitalised word after the cue (`FİN kod: YOXDUR`) is no number.

Every cue must stand right before the number (a number word, punctuation, a table cell's border or a verb such as
`lautet` between them); the same layouts without their cue, or with a wrong check, date or state, stay.
"""

from __future__ import annotations

import datetime
import re
from typing import Callable

from tasks.data.privacy.pii_cues import phone_cue_before
from tasks.data.privacy.pii_cuetable import AnchorLed, Gate, cue_index, named_cues


def valid_de_kvnr(number: str) -> bool:
    """Germany's Krankenversichertennummer (its unchangeable part): a letter and 8 digits, then a check digit.
    The letter as its place in the alphabet (01-26) and the 8 digits, weighted 1,2,1,2,…, each product's digit
    sum added: the total mod 10 is the check digit (GKV-Spitzenverband's rule for the KVNR)."""
    if not re.fullmatch(r"[A-Z]\d{9}", number):
        return False
    digits = f"{ord(number[0]) - 64:02d}" + number[1:9]
    total = sum(sum(divmod(int(d) * w, 10)) for d, w in zip(digits, (1, 2) * 5))
    return total % 10 == int(number[9])


def valid_gr_adt(number: str) -> bool:
    """Greece's police identity card number (ΑΔΤ): two capitals, Greek or Latin (a card's letters are written in
    either), and 6 digits; it carries no check."""
    return re.fullmatch(r"[A-ZΑ-ΡΣ-Ω]{2}\d{6}", number) is not None


def _real_yymmdd(yy: int, mm: int, dd: int) -> bool:
    """A real date in the 1900s or the 2000s (29 February needs a leap year in one of them)."""
    for century in (1900, 2000):
        try:
            datetime.date(century + yy, mm, dd)
            return True
        except ValueError:
            continue
    return False


def valid_mx_elector(number: str) -> bool:
    """Mexico's clave de elector (the INE's voter card): 6 letters from the holder's names, the birth date
    YYMMDD, the state of birth 01-32, the sex H or M and a 3-digit homonym code; it carries no check digit."""
    m = re.fullmatch(r"[A-Z]{6}(\d\d)(\d\d)(\d\d)(\d\d)[HM]\d{3}", number)
    return m is not None and 1 <= int(m[4]) <= 32 and _real_yymmdd(int(m[1]), int(m[2]), int(m[3]))


def valid_az_fin(number: str) -> bool:
    """Azerbaijan's FİN (fərdi identifikasiya nömrəsi): 7 digits and capitals without I and O, at least one a
    digit and one a letter, 4 of them distinct (`AAAAAAA`, `1111111` are masks)."""
    return re.fullmatch(r"[0-9A-HJ-NP-Z]{7}", number) is not None and any(c.isdigit() for c in number) and \
        any(c.isalpha() for c in number) and len(set(number)) >= 4


def valid_de_kvnr_whole(number: str) -> bool:
    """A KVNR without separators: the 10 characters, or the whole number of § 290 SGB V as one field (gematik,
    GKV): the KVNR, the insurer's 9-digit Institutionskennzeichen and a check digit (20), or with the main insured
    member's KVNR before that check digit (30: a family member's). The last check digit's rule is not in those
    descriptions (Faker's de_DE `kvnr()` writes a Luhn-like one), so the KVNRs inside must pass theirs: the same
    evidence as a 10-character one after its cue."""
    if re.fullmatch(r"[A-Z]\d{19}", number):
        return valid_de_kvnr(number[:10])
    if re.fullmatch(r"[A-Z]\d{18}[A-Z]\d{10}", number):
        return valid_de_kvnr(number[:10]) and valid_de_kvnr(number[19:29])
    return valid_de_kvnr(number)


# A KVNR as people write it: whole, the letter apart (`A 123456780`), the digits in threes (`A123 456 780`, as the
# card prints it), or the 20- and 30-character forms. First in `_CUED`'s number: its other layouts would take `A123`.
_KVNR_WRITTEN = r"[A-Z](?:[ ]?\d{3}[ ]\d{3}[ ]\d{3}|[ ]?\d{9}|\d{18}(?:\d|[A-Z]\d{10}))"


def is_kvnr(value: str) -> bool:
    """`value` (a table cell) is a KVNR in one of its written layouts whose check digits hold."""
    return re.fullmatch(_KVNR_WRITTEN, value) is not None and valid_de_kvnr_whole(value.replace(" ", ""))


_VALID: dict[str, Callable[[str], bool]] = {"de.kvnr": valid_de_kvnr_whole, "gr.adt": valid_gr_adt,
                                            "mx.elector": valid_mx_elector, "az.fin": valid_az_fin}

# Cue → scheme. Matched whole and in any case but the acronyms that are words or other things in capitals only
# (`(?-i:…)`): `ine` ends `line` and `fin` is a word; `FIN` alone is Singapore's FIN (`pii_national_more`) or a
# finance column, so Azerbaijan's needs the dotted `İ` or `kod`; `PIN` is a card's, so `PİN kod` needs both.
_CUES: dict[str, str] = {
    r"(?:kranken)?versicherten-?(?:nummer|nr\.?)|kvnr|health[ ]insurance[ ](?:number|no\.?|id)": "de.kvnr",
    r"(?-i:ΑΔΤ|Α\.Δ\.Τ\.?)|(?:αριθμ(?:ός|ος|ό|ο|ού|ου)|αρ\.)[ ](?:δελτ(?:ίου|ιου)[ ])?ταυτ(?:ότητας|οτητας)"
    r"|δελτ(?:ίο|ιο|ίου|ιου)[ ]ταυτ(?:ότητας|οτητας)(?:[ ]με[ ](?:αριθμό|αριθμο|αρ\.))?"
    r"|identity[ ]card[ ](?:no\.?|number|nr\.?|\#)": "gr.adt",
    r"clave[ ](?:de[ ])?elector|credencial[ ](?:para[ ]votar|de[ ]elector)|(?-i:INE)|elector[ ](?:key|code)"
    r"|voter[ ](?:id|key|code)": "mx.elector",
    r"(?-i:FİN)(?:[ ]kodu?)?|(?-i:FIN)[ ](?:kodu?|code)|(?-i:PİN)[ ]kodu?|f[əƏ]rdi[ ][iİ]dentifikasiya[ ]n[öÖ]mr[əƏ]si": "az.fin",
}
_CUE_NAMES = list(_CUES)
# A number word after the cue never the letters of the number (`ΑΔΤ NO 966448`, `identity card no. NO966448`).
_CUED = re.compile(
    r"(?i:(?<![\w-])(?:" + named_cues(_CUE_NAMES) + r")(?![\w]))"
    r"(?i:[ _-]?(?:number|no\.?|nr\.?|n[°º]\.?|\#|n[uú]mero|nummer)(?!\w|[ ]\d{6}\b))?"
    r"\.?[\"'\s:=#>：|(),*;-]{0,6}(?:</t[dh]>\s*<t[dh]>)?[ \t]{0,30}"
    r"(?:(?i:lautet|ist|is|es|είναι)[\"'\s:=#>：|(]{1,4})?"
    r"(?P<number>" + _KVNR_WRITTEN + r"|[A-ZΑ-ΡΣ-Ω0-9]{2,18}(?:[ -]\d{6})?)(?![\w-]|[./:,]\d)")


def _number(m: re.Match[str]) -> str:
    """The number with its one separator removed (`ΑΒ 123456`: an ΑΔΤ's letters and digits apart)."""
    return re.sub(r"[ -]", "", m.group("number"))


def _valid(m: re.Match[str]) -> bool:
    if phone_cue_before(m, 32) is not None:
        return False
    return _VALID[_CUES[_CUE_NAMES[cue_index(m)]]](_number(m))


def _span(m: re.Match[str]) -> tuple[int, int]:
    return m.start("number") - m.start(), m.end("number") - m.start()


_CAPS = frozenset("ABCDEFGHIJKLMNOPQRSTUVWXYZΑΒΓΔΕΖΗΘΙΚΛΜΝΞΟΠΡΣΤΥΦΧΨΩ")
_FIN = "[0-9A-HJ-NP-Z]"
# The first digit of a token in one of the layouts (a digit-led scan: `re` skips the rest in C, where a cue- or
# letter-led pattern was tried at every position: 95 ms a MB of code): a KVNR (whole, in threes, 20 or 30 long, or
# its letter apart), an ΑΔΤ (compact or spaced), a clave de elector, a FİN whose first digit is its 1st-7th
# character (the letters before it counted).
_KVNR_DIGITS = r"\d\d[ ]\d{3}[ ]\d{3}|\d{8}"
_ANCHOR = re.compile(
    r"[0-9](?<![0-9a-z_.+/][0-9])"         # (a token's first digit: one test rejects most digits of code)
    r"(?:(?<=(?<![\w.+/-])[A-Z][0-9])(?:" + _KVNR_DIGITS + r"|\d{17}(?:\d|[A-Z]\d{10}))(?![\w-])"
    r"|(?<=(?<![\w.+/-])[A-Z][ ][0-9])(?:" + _KVNR_DIGITS + r")(?![\w-])"
    r"|(?<=(?<![\w.+/-])[A-ZΑ-ΡΣ-Ω]{2}[0-9])\d{5}(?![\w-])"
    r"|(?<=(?<![\w.+/-])[A-ZΑ-ΡΣ-Ω]{2}[ -][0-9])\d{5}(?![\w-])"
    r"|(?<=(?<![\w.+/-])[A-Z]{6}[0-9])\d{7}[HM]\d{3}(?![\w-])"
    + "".join(f"|(?<=(?<![\\w.+/-])[A-HJ-NP-Z]{{{p}}}[0-9]){_FIN}{{{6 - p}}}(?![\\w-])" for p in range(7)) + ")")
# A literal of each cue, lower case, one of which must stand in the 48 characters before the token (`FİN`
# lower-cased is `fi̇n`, an `i` and a combining dot; `PİN` likewise).
_GATE = Gate(words=("kvnr", "ine", "fin", "fi̇n", "pi̇n"),
             starts=("versicherten", "krankenversicherten", "health insurance", "αδτ", "α.δ.τ", "αριθμ", "αρ.",
                     "δελτ", "identity card", "clave", "credencial", "elector", "voter", "fərdi"))


# A KVNR's digits after its letter and a space (`A 123456780`, `A 123 456 780`): only then is `A ` its letter.
_KVNR_SPACED = re.compile(r"\d(?:" + _KVNR_DIGITS + r")(?![\w-])")


def _lead(text: str, at: int) -> int:
    """Where the number whose digits start at `at` begins: back over up to 6 capitals (`ABCDEF` of a clave de
    elector, `F` of a KVNR), over `AB ` (the ΑΔΤ's letters and a space) or over `A ` (a KVNR's letter apart)."""
    start = at
    while start > max(at - 6, 0) and text[start - 1] in _CAPS:
        start -= 1
    if start == at and text[start - 1:start] in (" ", "-") and \
            text[start - 3:start - 1] and all(c in _CAPS for c in text[start - 3:start - 1]):
        start -= 3                                      # `ΑΒ 123456`: the ΑΔΤ's letters and a space
    elif start == at >= 2 and text[at - 1] == " " and "A" <= text[at - 2] <= "Z" and \
            (at == 2 or not text[at - 3].isalnum()) and _KVNR_SPACED.match(text, at):
        start -= 2                                      # `A 123456780`: a KVNR's letter and a space
    return start


EXTRA_NATIONAL_PASSES = (("ssn", AnchorLed(_ANCHOR, _CUED, _GATE, _lead), _valid, _span, bool),)
