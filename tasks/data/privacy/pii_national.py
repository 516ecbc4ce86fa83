"""Other countries' national identity numbers for `tasks.data.privacy.pii`, counted as `ssn`.

`NATIONAL_PASSES` has the shape of `pii`'s pass table: `(kind, pattern, validator(match), group to replace, cheap
test that the pass can match)`; `pii.scrub_pii` runs them with the US, UK and Canadian numbers (`pii_ids`), before
cards and phones, whose digit passes would take their digits. Every candidate must pass its scheme's published
check as `python-stdnum` implements it (check digits, an embedded birth date, a region or century code), so a
random digit run is not taken for one.

- Anywhere: the layouts that carry letters or a scheme's own separators: Italy's codice fiscale
  (`RSSMRA85T10A562S`), Mexico's CURP, Spain's DNI (`12345678Z`) and NIE (`X1234567L`), Finland's henkilötunnus
  (`131052-308T`), Sweden's personnummer (`811228-9874`, `19811228-9874`), Latvia's personas kods (`161175-19997`),
  Korea's resident registration number (`971013-9019902`), Brazil's CPF (`123.456.789-09`), Chile's RUT
  (`12.345.678-5`), Switzerland's AHV number (`756.1234.5678.97`), Thailand's ID (`1-2345-67890-12-1`), France's
  NIR spaced (`1 85 05 78 006 084 36`), China's resident ID when it ends in `X`.
- After a cue only: bare digit runs (`PESEL: 44051401359`; 9-18 digits alone are anybody's: ids, counts,
  timestamps): the cue names the scheme (`PESEL`, `BSN`, `CPF`, `NIR`/`sécurité sociale`, `Aadhaar`,
  `personnummer`, `fødselsnummer`, `CPR`, `CNP`, `OIB`, `isikukood`, `AMKA`, `TC kimlik`, `Steuer-ID`,
  `Sozialversicherungsnummer`, `rijksregisternummer`, `NHS`, `身份证`, `주민등록번호`, `マイナンバー`, `ת.ז`, `РНОКПП`), and
  a generic one (`national ID`, `personal ID number`) accepts any scheme's valid number.
"""

from __future__ import annotations

import importlib
import re
from functools import lru_cache
from typing import Callable

from stdnum.cn import ric as stdnum_ric

from tasks.data.privacy.pii_cues import phone_cue_before, placeholder_led
from tasks.data.privacy.pii_cuetable import Gate, cue_index, cued_at, named_cues
from tasks.data.privacy.pii_personal import is_birth_date

_END = r"(?![\w-]|[./:,]\d)"
# Layouts that are an identity number's own (letters in fixed places, or the scheme's separators), by the
# `stdnum` module that validates them. A match is checked in every scheme whose layout it has (`811228-9874` is
# Sweden's layout and Finland's).
_SHAPES = {
    "it.codicefiscale": r"[A-Z]{6}[0-9LMNP-V]{2}[A-EHLMPR-T][0-9LMNP-V]{2}[A-Z][0-9LMNP-V]{3}[A-Z]",
    "mx.curp": r"[A-Z]{4}\d{6}[HMX][A-Z]{5}[0-9A-Z]\d",
    "es.nie": r"[XYZ]-?\d{7}-?[A-Z]",
    "es.dni": r"\d{8}-?[A-Z]",
    "fi.hetu": r"\d{6}[-+A-FU-Y]\d{3}[0-9A-Y]",
    "se.personnummer": r"(?:\d\d)?\d{6}[-+]\d{4}",
    "lv.pvn": r"\d{6}-\d{5}",
    "kr.rrn": r"\d{6}-\d{7}",
    "br.cpf": r"\d{3}\.\d{3}\.\d{3}-\d\d",
    "cl.rut": r"\d{1,2}\.\d{3}\.\d{3}-[\dkK]",
    "ch.ssn": r"756\.\d{4}\.\d{4}\.\d\d",
    "th.pin": r"\d-\d{4}-\d{5}-\d\d-\d",
    "fr.nir": r"[12][ ]\d\d[ ]\d\d[ ](?:\d\d|2[AB])[ ]\d{3}[ ]\d{3}[ ]\d\d",
    "cn.ric": r"[1-8]\d{16}[X]",
}
_SHAPED = re.compile("(?:" + "|".join(_SHAPES.values()) + ")" + _END, re.ASCII)
_EACH_SHAPE = {name: re.compile(shape, re.ASCII) for name, shape in _SHAPES.items()}
# Where a shape may start: a digit at a token's start, or one after 1, 4 or 6 capitals at a token's start (the
# NIE's, CURP's, codice fiscale's letters). A digit-led scan: `re` skips the rest in C, where a letter-led
# pattern would be tried at every capital of the text.
_ANCHOR = re.compile(r"[0-9](?=[0-9A-Z.+ /-]{6})(?:(?<![\w.+/-][0-9])|(?<=\b[XYZ][0-9])|(?<=\b[XYZ]-[0-9])|(?<=\b[A-Z]{4}[0-9])"
                     r"|(?<=\b[A-Z]{6}[0-9]))", re.ASCII)


@lru_cache(maxsize=None)
def _module(name: str):
    return importlib.import_module(f"stdnum.{name}")


def valid_ric(number: str) -> bool:
    """China's resident ID: a province digit, a real birth date and the ISO 7064 check character.
    `stdnum.cn.ric.is_valid` also looks the six-digit region up in its own table, which lacks 60% of the region
    codes that Faker's zh_CN numbers carry (districts renumbered since: an ID keeps its code for life)."""
    number = number.upper()
    if not re.fullmatch(r"[1-8][1-9]\d{15}[\dX]", number) or stdnum_ric.calc_check_digit(number) != number[17]:
        return False
    try:
        stdnum_ric.get_birth_date(number)
    except ValueError:
        return False
    return True


def valid_as(scheme: str, number: str) -> bool:
    """Whether `number` is valid in the `stdnum` module `scheme` (`pl.pesel`), China's by `valid_ric`."""
    if scheme == "cn.ric":
        return valid_ric(re.sub(r"[ .-]", "", number))
    try:
        return bool(_module(scheme).is_valid(number))
    except Exception:           # a validator's own bug on an odd input is no match
        return False


def _distinct(number: str) -> int:
    """Distinct digits and letters: `111.111.111-11` passes CPF's checks, and is nobody's number."""
    return len({c for c in number if c.isalnum()})


def _shaped(m: re.Match[str]) -> bool:
    # After a phone cue a number is a phone (`Tel: 811228-9874` is nobody's personnummer).
    if phone_cue_before(m, 32) is not None:
        return False
    number = m.group()
    named = _named_schemes(m)
    return _distinct(number) >= 3 and any(shape.fullmatch(number) is not None and valid_as(scheme, number)
                                        for scheme, shape in _EACH_SHAPE.items() if named is None or scheme in named)


def _named_schemes(m: re.Match[str]) -> tuple[str, ...] | None:
    """The schemes a country's cue right before the number names (None: no such cue, or a generic one). After
    `Personnummer:` a number in Sweden's layout that fails Sweden's check is no number, though Finland's
    henkilötunnus, written alike, may pass (Faker's Swedish numbers change with the day: one in a few hundred,
    its check digit changed, reads as a Finnish one); the cued pass then judges it by the cue's schemes."""
    cued = cued_at(_CUED, _GATE, m.string, m.start(), 0)
    if cued is None or cue_index(cued) >= len(_CUES):
        return None
    return _CUES[_CUE_NAMES[cue_index(cued)]]


# --- after a cue -----------------------------------------------------------------------------------------
# Cue → the schemes a number after it may be in. A cue word is matched whole, in any case.
_CUES: dict[str, tuple[str, ...]] = {
    r"pesel": ("pl.pesel",),
    r"bsn|burgerservicenummer|sofinummer|sofi-nummer": ("nl.bsn",),
    r"cpf": ("br.cpf",),
    r"nir|n[°º]?[ ]?(?:de[ ])?s[eé]cu|(?:num[eé]ro[ ]de[ ])?s[eé]curit[eé][ ]sociale|insee": ("fr.nir",),
    r"aadhaa?r(?:[ ]?(?:no|number|card|id))?|uidai|आधार(?:[ ]?(?:संख्या|नंबर|कार्ड))?": ("in_.aadhaar",),
    r"personnummer|person-?nr": ("se.personnummer", "no.fodselsnummer"),
    r"f[øo]dselsnummer|f[øo]dselsnr": ("no.fodselsnummer",),
    r"cpr(?:-?(?:nr|nummer))?": ("dk.cpr",),
    r"cnp|cod[ ]numeric[ ]personal": ("ro.cnp",),
    r"oib": ("hr.oib",),
    r"isikukood": ("ee.ik",),
    # (`Α.Μ.Κ.Α.` dotted as Greek forms write an acronym; `ΑΜΚΑ ασφαλισμένου`: "of the insured")
    r"(?:amka|αμκα|α\.μ\.κ\.α\.?)(?:[ ]ασφαλισμένου)?": ("gr.amka",),
    r"(?:t\.?c\.?[ ])?kimlik(?:[ ]no|[ ]numarası)?|tckn": ("tr.tckimlik",),
    # (a tax office's letter spells it out and groups it 2-3-3-3: `Steuerliche Identifikationsnummer: 86 095 742 719`)
    r"steuer-?id|steuer-?identifikationsnummer|(?:steuerliche[ ])?identifikationsnummer|idnr": ("de.idnr",),
    r"sozialversicherungsnummer|svnr|sv-nummer|versicherungsnummer": ("at.vnr",),
    r"rijksregisternummer|rijksregister|registre[ ]national|num[eé]ro[ ]national|insz|niss": ("be.nn",),
    r"personas[ ]kods": ("lv.pvn",),
    r"ahv(?:-?nr|-?nummer)?|avs": ("ch.ssn",),
    r"ת\.?ז\.?|תעודת[ ]זהות": ("il.idnr",),
    r"рнокпп|іпн|инн": ("ua.rntrc",),
    r"(?:居民)?身份证(?:号码|号)?|身分證(?:字號)?": ("cn.ric",),
    r"주민등록번호|주민번호": ("kr.rrn",),
    r"マイナンバー|個人番号": ("jp.in_",),
    r"my[ ]number": ("jp.in_",),
    r"rodn[eé][ ][cč][ií]slo|r\.[ ]?[cč]\.": ("cz.rc", "sk.rc"),
    r"egn|егн": ("bg.egn",),
    r"kennitala|kt\.": ("is_.kennitala",),
    r"cui[tl]": ("ar.cuit",),
    # South African forms label it `ID No.`/`ID number` (`ID No.: 750822 5100 085`): only a number with its birth
    # date, citizenship digit and Luhn check is taken after so plain a label
    r"(?:sa|south[ ]african)[ ]id|id(?=[ ]?(?:no\b|number\b))": ("za.idnr",),
    r"ppsn?|personal[ ]public[ ]service": ("ie.pps",),
    r"asmens[ ]kodas": ("lt.asmens",),
    r"nhs": ("gb.nhs",),          # England's NHS number (`NHS no. 943 476 5919`, mod 11): a patient's, in 3-3-4
}
# A generic cue takes a number valid in any scheme (and Canada's SIN, which `pii_ids` looks for after its own cues):
# what a form in English calls the field whatever the country (`SSN: 271085746352196` is a French NIR).
_ALL_SCHEMES = (*dict.fromkeys(s for schemes in _CUES.values() for s in schemes), "ca.sin")
SOCIAL_CUES = r"ssn|social[ _-](?:security|insurance)|identity[ _-]number|id[ _-]card"
_GENERIC = r"national[ _-]id(?:entity|entification)?|(?:personal|identity|citizen)[ _-]id|personal[ _-]number" \
           r"|(?:national|personal|citizen)[ _-](?:identity|identification)"
_CUE_NAMES = [*_CUES, _GENERIC, SOCIAL_CUES]
# The US SSN's layouts (9 digits, 3-2-4): after `SSN` such a number is judged by the SSA's rules (`pii_ids`) alone,
# so an invalid SSN (`SSN 666-19-6688 is not issued`) is not taken for a Dutch BSN or Canadian SIN.
_US_LAYOUT = re.compile(r"\d{3}([ -]?)\d\d\1\d{4}")


def us_layout(number: str) -> bool:
    return _US_LAYOUT.fullmatch(number) is not None
_CUED = re.compile(
    r"(?i:(?<![\w-])(?:" + named_cues(_CUE_NAMES) + r"))"
    r"(?i:[ _-]?(?:number|num|no\.?|nr\.?|n[°º]\.?|\#|n[uú]mero|num[eé]ro|numarası|nummer|번호|号码|番号))?"
    r"\.?[\"'\s:=#>：|(),-]{0,6}[ \t]{0,30}(?:(?:is|was|är|er|on|ist|est|es|è)[\"'\s:=#>：|(]{1,4})?"
    r"(?P<number>\d(?:[ .-]?[0-9AB]|(?<=\d{6})/(?=\d{3})){6,17}(?:[Xx]|(?<=\d{7})[A-W]{1,2})?)" + _END)


def _cued_schemes(m: re.Match[str]) -> tuple[str, ...]:
    named = cue_index(m)
    return _ALL_SCHEMES if named >= len(_CUES) else _CUES[_CUE_NAMES[named]]


# "my number" is also how anyone gives a phone (`my number 0176 12345678`, a German mobile whose twelve digits pass
# the My Number check one time in ten): after the English words only the My Number's own layout, 4-4-4 or bare.
_MY_NUMBER_CUE = _CUE_NAMES.index(r"my[ ]number")
_MY_NUMBER_LAYOUT = re.compile(r"\d{4}([ -]?)\d{4}\1\d{4}")


def _cued_end(m: re.Match[str]) -> int:
    """The end of the longest prefix of whole groups of the number that is valid in a scheme of its cue (a
    number followed by another group, `PESEL 44051401359 12`), or 0."""
    number, schemes = m.group("number"), _cued_schemes(m)
    if cue_index(m) == _MY_NUMBER_CUE and _MY_NUMBER_LAYOUT.fullmatch(number) is None:
        return 0
    social = cue_index(m) == len(_CUES) + 1
    # a date is no identity number (`SSN: 2019-04-01`; Israel's 8-9 digit check passes one in ten): written with
    # separators never, bare (`20190401`) not after a placeholder (`<SSN>,20190401`: the row's next field)
    listed = placeholder_led(m, "<SSN>")
    end = len(number)
    while end > 0:
        part = number[:end]
        if _distinct(part) >= 3 and not (social and us_layout(part)) and \
                not ((listed or not part.isdigit()) and is_birth_date(part)) and \
                any(valid_as(s, part) for s in schemes):
            return end
        end = max(number.rfind(" ", 0, end), 0)
    return 0


def _cued(m: re.Match[str]) -> bool:
    return _cued_end(m) > 0


def _cued_span(m: re.Match[str]) -> tuple[int, int]:
    start = m.start("number") - m.start()
    return start, start + _cued_end(m)


# A literal of each cue, lower case: one of them must stand in the 48 characters before a number.
_GATES = ("pesel", "bsn", "burgerservice", "sofi", "cpf", "nir", "secu", "sécu", "insee", "aadha", "person", "dselsn",
          "cpr", "cnp", "oib", "isikukood",
          "identifikationsn", "id no", "id number", "amka", "αμκα", "α.μ.κ.α",
          "kimlik", "tckn", "steuer", "idnr", "versicherungsn", "svnr",
          "sv-n", "rijksreg", "national", "insz", "niss", "ahv", "avs", "my number", "identity", "citizen", "ת", "рнокпп",
          "іпн", "инн", "身份", "身分", "주민", "マイナンバー", "個人番号", "आधार",
          "rodn", "r.č", "r. č", "egn", "егн", "kennitala", "kt.", "cuit", "cuil", "sa id", "african", "pps",
          "personal public", "asmens", "nhs", "ssn", "social", "id card", "id-card", "id_card")
_GATE = Gate(anywhere=_GATES)     # one scan in C, not 60 `in` tests per number


class TokenLed:
    """`sub(repl, text)` for both kinds of candidate, tried only at `_ANCHOR`'s digits (one digit-led scan for
    both: each costs 20 ms a round on the benchmark's 1.3 MB of code): a `_SHAPED` match from the token's start
    (the capitals before the digit, if any), else, at a digit-led token with a gate in the `_BACK` characters
    before it, a `_CUED` match whose number starts there (led by the 40-odd cue literals, as the passport pass
    is, the cued pass cost 41 ms a round)."""

    def sub(self, repl: Callable[[re.Match[str]], str], text: str) -> str:
        out, last = [], 0
        for anchor in _ANCHOR.finditer(text):
            start = anchor.start()
            while start > 0 and start > anchor.start() - 7 and text[start - 1] in "ABCDEFGHIJKLMNOPQRSTUVWXYZ-":
                start -= 1
            if start < last or start > 0 and (text[start - 1].isascii() and text[start - 1].isalnum() or
                                              text[start - 1] in "_.+/-"):
                continue
            m = _SHAPED.match(text, start)
            replaced = None if m is None else repl(m)
            if (m is None or replaced == m.group()) and start == anchor.start():
                m = cued_at(_CUED, _GATE, text, start, last)
                replaced = None if m is None else repl(m)
            if m is None or replaced == m.group():
                continue
            out += (text[last:m.start()], replaced)
            last = m.end()
        return "".join(out) + text[last:] if out else text


def _valid(m: re.Match[str]) -> bool:
    return _shaped(m) if m.re is _SHAPED else _cued(m)


def _span(m: re.Match[str]) -> int | tuple[int, int]:
    return 0 if m.re is _SHAPED else _cued_span(m)


NATIONAL_PASSES = (("ssn", TokenLed(), _valid, _span, bool),)
