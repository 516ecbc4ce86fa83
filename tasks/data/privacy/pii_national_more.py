"""More countries' identity numbers for `tasks.data.privacy.pii`, after a cue only, counted as `ssn`.

`MORE_NATIONAL_PASSES` has the shape of `pii_national.NATIONAL_PASSES` and runs right after it. Each number must
stand right after a cue word that names its scheme, in the country's language(s) or English (`СНИЛС`, `NRIC`,
`NIK`, `Emirates ID`, `CNIC`, `NIF`, `cédula`, `PAN`, `TFN`, `IRD`, `EMŠO`, `HKID`, `身分證`, `บัตรประชาชน`, `TAJ`,
`ΑΦΜ`, `CCCD`, `الرقم القومي`), and
pass its scheme's check (`python-stdnum`'s where it has one; Russia's SNILS, Singapore's NRIC/FIN, the UAE's
Emirates ID, Saudi Arabia's national ID, Hong Kong's HKID, Taiwan's national ID, Uruguay's cédula and Hungary's
TAJ and adóazonosító jel by their published rules here; Vietnam's CCCD and Egypt's national ID, which have no
published check, by their structure: region code, century and birth date). A generic cue (`national ID`)
accepts only the schemes whose check is strong (a check letter, an embedded date, a fixed prefix): a 9-digit
number passes a mod-11 check one time in 11.

The pass is tried only at a token that starts with a digit or with 1-5 capitals and a digit, and only when a
cue literal stands in the 48 characters before it: text without cue words costs one digit-led scan.
"""

from __future__ import annotations

import datetime
import re
from typing import Callable

from stdnum import luhn as stdnum_luhn

from tasks.data.privacy.pii_cues import phone_cue_before
from tasks.data.privacy.pii_cuetable import AnchorLed, Gate, cue_index, named_cues
from tasks.data.privacy.pii_national import SOCIAL_CUES, us_layout, valid_as
from tasks.data.privacy.pii_national_extra import EXTRA_NATIONAL_PASSES


def valid_snils(number: str) -> bool:
    """Russia's СНИЛС: 9 digits and a 2-digit check, the digits weighted 9..1, summed, taken mod 101 (100 → 00).
    Numbers up to 001-001-998 were issued before the check existed, so they are no evidence either way."""
    if not re.fullmatch(r"\d{11}", number) or int(number[:9]) <= 1001998:
        return False
    total = sum(int(d) * w for d, w in zip(number, range(9, 0, -1))) % 101
    return number[9:] == f"{total % 100:02d}"


_NRIC_LETTERS = {"ST": "JZIHGFEDCBA", "FG": "XWUTRQPNMLK"}


def valid_nric(number: str) -> bool:
    """Singapore's NRIC/FIN: S/T (citizens) or F/G (foreigners), 7 digits weighted 2,7,6,5,4,3,2, 4 more for a
    T or G (born 2000 on), mod 11 naming the check letter in the series' table."""
    if not re.fullmatch(r"[STFG]\d{7}[A-Z]", number):
        return False
    total = sum(int(d) * w for d, w in zip(number[1:8], (2, 7, 6, 5, 4, 3, 2))) + (4 if number[0] in "TG" else 0)
    table = next(letters for series, letters in _NRIC_LETTERS.items() if number[0] in series)
    return table[total % 11] == number[8]


def valid_emirates(number: str) -> bool:
    """The UAE's Emirates ID: `784` (the country), a birth year, 7 digits and a Luhn check digit."""
    return re.fullmatch(r"784(?:19|20)\d{10}", number) is not None and stdnum_luhn.is_valid(number)


def valid_saudi(number: str) -> bool:
    """Saudi Arabia's national ID (1…) or iqama (2…): 10 digits with a Luhn check digit."""
    return re.fullmatch(r"[12]\d{9}", number) is not None and stdnum_luhn.is_valid(number)


def valid_hkid(number: str) -> bool:
    """Hong Kong's HKID: 1-2 letters, 6 digits, a check digit or `A` (10), usually in brackets (`A123456(3)`):
    the letters (A=10…, a missing first one 36) and digits weighted 9..2, plus the check, are 0 mod 11."""
    m = re.fullmatch(r"([A-Z]{1,2})(\d{6})\(?([0-9A])\)?", number)
    if m is None:
        return False
    letters, digits, check = m.groups()
    values = [36] * (2 - len(letters)) + [ord(c) - 55 for c in letters] + [int(d) for d in digits]
    total = sum(v * w for v, w in zip(values, range(9, 1, -1))) + (10 if check == "A" else int(check))
    return total % 11 == 0


# Taiwan's region letters as numbers: A-H 10-17, then J-N 18-22, P-V 23-29, X Y 30 31, W Z I O 32-35.
_TW_CODES = {c: 10 + i for i, c in enumerate("ABCDEFGHJKLMNPQRSTUVXYWZIO")}


def valid_taiwan(number: str) -> bool:
    """Taiwan's national ID (身分證字號): a region letter, 1 or 2 (sex), 8 digits; the letter's two digits weighted
    1 and 9, the next 8 digits 8..1, plus the check digit, are 0 mod 10."""
    if not re.fullmatch(r"[A-Z][12]\d{8}", number):
        return False
    code = _TW_CODES[number[0]]
    total = code // 10 + code % 10 * 9 + sum(int(d) * w for d, w in zip(number[1:9], range(8, 0, -1)))
    return (total + int(number[9])) % 10 == 0


def valid_uy_ci(number: str) -> bool:
    """Uruguay's cédula de identidad: 6-7 digits weighted 2,9,8,7,6,3,4 (right-aligned) and a mod-10 check."""
    if not re.fullmatch(r"\d{7,8}", number):
        return False
    body = number[:-1].rjust(7, "0")
    total = sum(int(d) * w for d, w in zip(body, (2, 9, 8, 7, 6, 3, 4)))
    return (10 - total % 10) % 10 == int(number[-1])


def valid_pt_cc(number: str) -> bool:
    """Portugal's Cartão de Cidadão whole: 9 digits, the 2 version letters, a check digit (`stdnum` accepts the
    8-digit civil number alone, which has no check of its own, and digits for letters: a card number after `cc=`
    passes one time in 10)."""
    return re.fullmatch(r"\d{9}[A-Z]{2}\d", number) is not None and valid_as("pt.cc", number)


def valid_hu_taj(number: str) -> bool:
    """Hungary's TAJ szám (social security): 8 digits weighted 3,7,3,7… and a mod-10 check digit."""
    return re.fullmatch(r"\d{9}", number) is not None and \
        sum(int(d) * (3 if i % 2 == 0 else 7) for i, d in enumerate(number[:8])) % 10 == int(number[8])


def valid_hu_tax(number: str) -> bool:
    """Hungary's adóazonosító jel: 8, the birth date as days since 1867-01-01, 3 digits, then the digits
    weighted 1..9 mod 11 (never 10)."""
    if not re.fullmatch(r"8\d{9}", number):
        return False
    born = datetime.date(1867, 1, 1) + datetime.timedelta(days=int(number[1:6]))
    return born.year <= datetime.date.today().year and \
        sum(int(d) * w for d, w in zip(number, range(1, 10))) % 11 == int(number[9])


# Vietnam's province codes (the first 3 digits of a CCCD, the province of birth registration).
_VN_PROVINCES = frozenset(int(c) for c in (
    "001 002 004 006 008 010 011 012 014 015 017 019 020 022 024 025 026 027 030 031 033 034 035 036 037 038 040 "
    "042 044 045 046 048 049 051 052 054 056 058 060 062 064 066 067 068 070 072 074 075 077 079 080 082 083 084 "
    "086 087 089 091 092 093 094 095 096").split())


def valid_vn_cccd(number: str) -> bool:
    """Vietnam's CCCD (căn cước công dân), no check digit, so its structure: a province code, a sex-and-century
    digit (0-1: born 1900-1999, 2-3: 2000-2099), two digits of the birth year (not ahead of today) and 6 digits."""
    if not re.fullmatch(r"\d{12}", number) or int(number[:3]) not in _VN_PROVINCES or number[3] not in "0123":
        return False
    return (1900 if number[3] in "01" else 2000) + int(number[4:6]) <= datetime.date.today().year


_EG_GOVERNORATES = frozenset((1, 2, 3, 4, 11, 12, 13, 14, 15, 16, 17, 18, 19, 21, 22, 23, 24, 25, 26, 27, 28, 29,
                              31, 32, 33, 34, 35, 88))


def valid_eg_nid(number: str) -> bool:
    """Egypt's national ID (الرقم القومي), whose check digit is unpublished, so its structure: the century
    (2: 1900s, 3: 2000s), a real YYMMDD birth date, a governorate code, a 4-digit serial and the check digit."""
    if not re.fullmatch(r"[23]\d{13}", number) or int(number[7:9]) not in _EG_GOVERNORATES:
        return False
    try:
        year = (1900 if number[0] == "2" else 2000) + int(number[1:3])
        born = datetime.date(year, int(number[3:5]), int(number[5:7]))
    except ValueError:
        return False
    return born <= datetime.date.today()


def valid_de_rvnr(number: str) -> bool:
    """Germany's Rentenversicherungsnummer (the Sozialversicherungsnummer): a 2-digit area, the birth date DDMMYY
    (day + 50 for a second number), the birth name's initial, a 2-digit serial and a check digit: the 12 digits
    (the letter as its place in the alphabet, 01-26) weighted 2,1,2,5,7,1,2,1,2,1,2,1, each product's digit sum
    added, mod 10."""
    m = re.fullmatch(r"(\d{2})(\d\d)(\d\d)\d\d([A-Z])(\d{2})(\d)", number)
    if m is None or not 1 <= int(m[2]) % 50 <= 31 or not 1 <= int(m[3]) <= 12:
        return False
    digits = number[:8] + f"{ord(m[4]) - 64:02d}" + m[5]
    total = sum(sum(divmod(int(d) * w, 10)) for d, w in zip(digits, (2, 1, 2, 5, 7, 1, 2, 1, 2, 1, 2, 1)))
    return total % 10 == int(m[6])


def valid_au_medicare(number: str) -> bool:
    """Australia's Medicare card number: a first digit 2-6, 7 digits and a check digit (the 8 digits weighted
    1,3,7,9,1,3,7,9, mod 10), then the card's issue number and, optionally, the person's position on the card."""
    if not re.fullmatch(r"[2-6]\d{8,10}", number):
        return False
    return sum(int(d) * w for d, w in zip(number, (1, 3, 7, 9, 1, 3, 7, 9))) % 10 == int(number[8])


def valid_es_nss(number: str) -> bool:
    """Spain's número de afiliación a la Seguridad Social: a province 01-53 (66 for others), 8 digits and 2 check
    digits, the province and the number read as one (the number without its leading zeros when under 10^7) mod 97."""
    m = re.fullmatch(r"(\d\d)(\d{8})(\d\d)", number)
    if m is None or not (1 <= int(m[1]) <= 53 or m[1] == "66"):
        return False
    body = int(m[1]) * (10 ** 7 if int(m[2]) < 10 ** 7 else 10 ** 8) + int(m[2])
    return body % 97 == int(m[3])


# Schemes with no published check, known by their length or layout only (separators removed): taken after
# their own cue, never a generic one.
_LAYOUTS = {
    "ph.sss": r"\d{10}", "ph.gsis": r"\d{11}", "ph.pagibig": r"\d{12}", "ph.philhealth": r"\d{12}",
    "ph.umid": r"\d{12}", "ph.psn": r"\d{12}|\d{16}", "ng.nin": r"\d{11}", "dz.nin": r"\d{18}",
    "bd.nid": r"\d{10}|\d{13}|\d{17}", "ve.ci": r"[VE]\d{6,9}", "ar.dni": r"\d{7,8}",
    # The US Medicare Beneficiary Identifier: 11 places, each a digit, a letter (never S, L, O, I, B, Z) or either.
    "us.mbi": r"[1-9][AC-HJKMNP-RT-Y][AC-HJKMNP-RT-Y0-9]\d[AC-HJKMNP-RT-Y][AC-HJKMNP-RT-Y0-9]\d[AC-HJKMNP-RT-Y]{2}\d\d", "it.cie": r"[A-Z]{2}\d{5}[A-Z]{2}|[A-Z]{2}\d{7}",
}


_OWN: dict[str, Callable[[str], bool]] = {
    **{scheme: re.compile(layout).fullmatch for scheme, layout in _LAYOUTS.items()}, "de.rvnr": valid_de_rvnr,
    "au.medicare": valid_au_medicare, "es.nss": valid_es_nss,
    "ru.snils": valid_snils, "sg.nric": valid_nric, "ae.eid": valid_emirates, "sa.nid": valid_saudi,
    "hk.hkid": valid_hkid, "tw.nid": valid_taiwan, "uy.ci": valid_uy_ci, "pt.cc": valid_pt_cc,
    "hu.taj": valid_hu_taj, "hu.tax": valid_hu_tax, "vn.cccd": valid_vn_cccd, "eg.nid": valid_eg_nid,
}


def valid_scheme(scheme: str, number: str) -> bool:
    """Whether `number` (separators and brackets kept) is valid in `scheme`: ours in `_OWN`, else `stdnum`'s."""
    if scheme in _OWN:
        return _OWN[scheme](re.sub(r"[ .()/-]", "", number))
    return valid_as(scheme, number)


# Cue → the schemes a number after it may be in; matched whole, in any case but the short acronyms that are words
# or other cues in some language (`(?-i:…)`: written in capitals): Swedish `Tfn:` is a phone's cue, `inn`, `pan`,
# `fin`, `nit` and `cc` are words or mail headers.
_CUES: dict[str, tuple[str, ...]] = {
    r"снилс|snils|страховой[ ]номер": ("ru.snils",),
    r"инн(?:[ ]организации)?|(?-i:INN)|идентификационный[ ]номер[ ]налогоплательщика": ("ru.inn",),
    r"nric|(?-i:FIN)|nric/fin": ("sg.nric", "my.nric"),
    r"mykad|kad[ ]pengenalan|no\.?[ ]?k/p|k/p|(?-i:I/C|IC)": ("my.nric", "sg.nric"),
    r"nik|nomor[ ]induk[ ]kependudukan|e?-?ktp": ("id.nik",),
    r"emirates[ ]id|eid|رقم[ ]الهوية|الهوية[ ]الإماراتية": ("ae.eid", "sa.nid"),
    r"iqama|إقامة|الهوية[ ]الوطنية|saudi[ ]id": ("sa.nid",),
    r"cnic|nicop|شناختی[ ]کارڈ": ("pk.cnic",),
    r"nif|n\.?[ ]?contribuinte|contribuinte": ("pt.nif",),
    r"cart[aã]o[ ]de[ ]cidad[aã]o|(?-i:CC)": ("pt.cc",),
    r"c[eé]dula(?:[ ]de[ ]identidad(?:[ ]civil)?|[ ]de[ ]ciudadan[ií]a)?|c\.[ ]?i\.?": ("ec.ci", "uy.ci", "ve.ci"),
    r"(?-i:DNI)|documento[ ]nacional[ ]de[ ]identidad": ("ar.dni",),
    # A US ITIN has the SSN's layout in the area the SSA never issues (9XX): after `SSN` it is an invalid SSN.
    r"itin|individual[ ]taxpayer(?:[ ]identification)?": ("us.itin",),
    r"medicare(?:[ ]card)?": ("au.medicare", "us.mbi"),
    r"(?-i:MBI)|medicare[ ]beneficiary[ ]identifier": ("us.mbi",),
    r"(?-i:NIT)": ("co.nit",),
    r"rfc": ("mx.rfc",),
    r"(?-i:PAN)(?:[ ]card)?|permanent[ ]account[ ]number|पैन": ("in_.pan",),
    r"(?-i:TFN)|tax[ ]file[ ]number": ("au.tfn",),
    r"(?-i:IRD)|inland[ ]revenue": ("nz.ird",),
    r"emšo|emso|jmbg|matična[ ]številka|матични[ ]број|матичен[ ]број": ("si.emso",),
    r"hkid|(?:香港)?身份證(?:號碼)?": ("hk.hkid",),
    r"身分證(?:字號|號碼)?|國民身分證": ("tw.nid",),
    r"(?:เลข)?(?:ประจำตัวประชาชน|บัตรประชาชน)": ("th.pin",),
    r"kra[ ]pin": ("ke.pin",),
    r"taj(?:[ ]sz[aá]m)?|társadalombiztosítási[ ]azonosító(?:[ ]jel)?": ("hu.taj",),
    r"ad[oó]azonos[ií]t[oó](?:[ ]jel)?": ("hu.tax",),
    r"αφμ|α\.φ\.μ\.?|afm": ("gr.vat",),
    r"cccd|c[aă]n[ ]c[uư][oớ]c(?:[ ]c[oô]ng[ ]d[aâ]n)?|s[oố][ ]đ[iị]nh[ ]danh(?:[ ]c[aá][ ]nh[aâ]n)?": ("vn.cccd",),
    r"الرقم[ ]القومي|رقم[ ]قومي|egyptian[ ]national[ ]id": ("eg.nid",),
    r"(?:renten|sozial)?versicherungsnummer|(?-i:RVNR|SVNR)|(?-i:RV|SV)-?(?:nummer|nr)": ("de.rvnr",),
    r"(?-i:SSS)|social[ ]security[ ]system": ("ph.sss",),
    r"(?-i:GSIS)(?:[ ]bp)?": ("ph.gsis",),
    r"pag-?ibig(?:[ ]mid)?|(?-i:HDMF)": ("ph.pagibig",),
    r"phil-?health|(?-i:PHIC)": ("ph.philhealth",),
    r"(?-i:UMID|CRN)": ("ph.umid",),
    r"phil-?sys|(?-i:PSN|PCN)": ("ph.psn",),
    r"(?-i:NIN)": ("ng.nin", "dz.nin"),
    r"(?-i:NID)|smart[ ]nid": ("bd.nid",),
    r"(?:n[uú]mero[ ]de[ ])?afiliaci[oó]n(?:[ ]a[ ]la)?[ ]seguridad[ ]social|(?-i:NUSS|NAF)": ("es.nss",),
    r"(?-i:CIE)|carta[ ]d['’]identit[àa](?:[ ]elettronica)?|carta[ ]di[ ]identit[àa]": ("it.cie",),
}
_STRONG = ("ru.snils", "sg.nric", "my.nric", "id.nik", "ae.eid", "pk.cnic", "pt.cc", "in_.pan", "si.emso",
           "hk.hkid", "tw.nid", "de.rvnr")
_GENERIC = r"national[ _-]id(?:entity|entification)?(?:[ ]card)?|(?:identity|citizen)[ _-](?:card|id)" \
           r"|(?:national|citizen)[ _-](?:identity|identification)"
_CUE_NAMES = [*_CUES, _GENERIC, SOCIAL_CUES]
_CUED = re.compile(
    r"(?i:(?<![\w-])(?:" + named_cues(_CUE_NAMES) + r")(?![\w]))"
    r"(?i:[ _-]?(?:number|num|no\.?|nr\.?|n[°º]\.?|\#|n[uú]mero|num[eé]ro|nomor|номер|號碼))?"
    r"\.?[\"'\s:=#>：|(),*-]{0,6}(?:</t[dh]>\s*<t[dh]>)?[ \t]{0,30}(?:(?:is|es|é|adalah)[\"'\s:=#>：|(]{1,4})?"
    r"(?P<number>(?:[A-Z]-|[A-Z]{0,5})[0-9][0-9A-Z() ./-]{4,22})(?![\w-]|[./:,][0-9])")


def _schemes(m: re.Match[str]) -> tuple[str, ...]:
    named = cue_index(m)
    return _STRONG if named >= len(_CUES) else _CUES[_CUE_NAMES[named]]


def _cut_points(number: str) -> list[int]:
    """Where the number may end, longest first: its end or a space before a further group (`NIK
    3171011708450001 12`), less trailing punctuation. Never inside a group: `1.622.740-1` less its check digit
    would be another valid number."""
    ends = []
    for end in [len(number), *(i for i in range(len(number) - 1, 5, -1) if number[i] == " ")]:
        end = len(number[:end].rstrip(" .,/-("))
        if end > 5 and end not in ends:
            ends.append(end)
    return ends


def _cued_end(m: re.Match[str]) -> int:
    """The end of the longest valid prefix of the number in a scheme of its cue, or 0."""
    if phone_cue_before(m, 32) is not None:
        return 0
    number, schemes = m.group("number"), _schemes(m)
    social = cue_index(m) == len(_CUES) + 1    # after `SSN` a US layout is the SSA's to judge (pii_national)
    for end in _cut_points(number):
        part = number[:end]
        if len({c for c in part if c.isalnum()}) >= 3 and not (social and us_layout(part)) and \
                any(valid_scheme(s, part) for s in schemes):
            return end
    return 0


def _span(m: re.Match[str]) -> tuple[int, int]:
    start = m.start("number") - m.start()
    return start, start + _cued_end(m)


# A token that starts with a digit, or with 1-5 capitals and a digit (a digit-led scan: `re` skips the rest in C),
# with 4 more characters a number may have after the digit (a PAN has 4: `ABCPD1234F`), 6 when the token starts
# with the digit (every scheme has 7 digits or more): `Order 12345` is not looked at.
_ANCHOR = re.compile(r"[0-9](?=[0-9A-Z() ./-]{4})(?:(?<![\w.+/-][0-9])(?=[0-9A-Z() ./-]{6})"
                     r"|(?<=(?<![\w.+/-])[A-Z][0-9])|(?<=(?<![\w.+/-])[A-Z]{2}[0-9])|(?<=(?<![\w.+/-])[A-Z]{3}[0-9])"
                     r"|(?<=(?<![\w.+/-])[A-Z]{4}[0-9])|(?<=(?<![\w.+/-])[A-Z]{5}[0-9])|(?<=(?<![\w.+/-])[A-Z]-[0-9]))",
                     re.ASCII)
# A literal of each cue, lower case: one of them must stand in the 48 characters before the token. The short
# ones (`ic`, `fin`, `pan`) must stand as words, the others at a word's start: inside `public`, `final` or
# `span` they would send one token in ten on to `_CUED` (30-odd alternatives at every position: 0.1 ms a try).
_GATE = Gate(
    words=("ic", "i/c", "k/p", "cc", "fin", "nit", "rfc", "pan", "ird", "nif", "inn", "инн", "eid", "nik", "ktp",
           "taj", "afm", "kra", "emso", "emšo", "tfn", "cnic", "nric", "jmbg", "hkid", "cccd", "αφμ", "sss", "gsis",
           "hdmf", "phic", "umid", "crn", "psn", "pcn", "nin", "nid", "cie", "nuss", "naf", "rvnr", "svnr", "ssn", "dni", "itin", "mbi"),
    starts=("снилс", "snils", "страховой", "идентификацион", "mykad", "pengenalan", "induk", "e-ktp",
            "emirates", "iqama", "saudi", "nicop", "contribuinte", "cidad", "cédula", "cedula", "c.i", "c. i",
            "permanent", "tax file", "inland", "matična", "матичн", "társadalom", "adóazonos", "adoazonos",
            "α.φ.μ", "căn", "can c", "định", "egyptian", "national", "identity", "citizen", "rentenversicherung",
            "sozialversicherung", "versicherungsn", "rv-n", "rvn", "sv-n", "pag-ibig", "pagibig", "philhealth",
            "phil-health", "philsys", "phil-sys", "smart nid", "carta d", "social", "id card", "id-card", "id_card", "documento", "individual", "medicare",
            "afiliaci"),
    anywhere=("الهوية", "إقامة", "شناختی", "पैन", "身份證", "身分證", "ประชาชน", "القومي", "قومي"))


def _lead(text: str, at: int) -> int:
    """Where the number whose digits start at `at` begins: back over `V-` (Venezuela's cédula) and up to 5
    capitals (`AB` of an id led by letters)."""
    start = at
    if start >= 2 and text[start - 1] == "-" and "A" <= text[start - 2] <= "Z":
        start -= 2                                     # `V-12345678`: Venezuela's cédula
    while start > max(at - 5, 0) and text[start - 1] in "ABCDEFGHIJKLMNOPQRSTUVWXYZ":
        start -= 1
    return start


# `pii_national_extra`'s numbers (led by 6 letters or Greek ones, which `_ANCHOR` does not take) run right after.
MORE_NATIONAL_PASSES = (("ssn", AnchorLed(_ANCHOR, _CUED, _GATE, _lead), lambda m: _cued_end(m) > 0, _span, bool),
                        *EXTRA_NATIONAL_PASSES)
