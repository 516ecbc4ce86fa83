"""Dates of birth and passport numbers for `tasks.data.privacy.pii`: cue-gated only.

`PERSONAL_PASSES` has the shape of `pii`'s pass table: `(kind, pattern, validator(match), group to replace, cheap
test that the pass can match)`. Both kinds are taken only right after their cue: a bare date or a bare 9-digit
number is anybody's (a log's timestamp, an order, a count).

- `dob`: a date from 1900 on right after `DOB`, `D.O.B.`, `date of birth`, `birth date`/`birthdate`, `birthday`, `born
  on`, `Born:`, `Geboren:`, `Geburtstag`, `Geburtsdatum`, `fecha de nacimiento`, `date de naissance`, `né le`,
  `geboren am`, `nacido el`, `生年月日`, `出生日期`, `生日`, `誕生日`, `생년월일` (a `:`, `=`, quotes, `is`/`was`/`是`/`は`, a format
  hint `(dd/mm/yyyy)` or a short qualifier `(DOB)` between), written ISO (`1987-03-12`, `1987/03/12`,
  `1987-03-12T00:00:00`), day/month/year or month/day/year (`12/03/1987`, `03.12.87`), bare (`19870312`), or with the
  month's name (`12 March 1987`, `12-Mar-1987`, `12th of March, 1987`, `March 12, 1987`, `12 de marzo de 1987`, `12.
  März 1987`, `12 mars 1987`, `14 Feb 86`, a form's or an airline's `12MAR1987`/`12MAR87`), or in CJK and Korean
  (`1987年3月12日`, `1987년 3월 12일`). Only the date is replaced (`DOB: <DOB>`). A year alone (`born in 1987`) is no date
  of birth: it names a cohort, not a person. `born` alone before a date in words is no cue: it opens an
  encyclopedia's public figure (`Andre Agassi (born April 29, 1970)`, five of the default run's embedded articles);
  `was born` is (`The patient was born February 14th, 1986`), as is `born` before a date in digits (`(born
  14/02/1986)`), and a date before 1900 is history (`Schopenhauer was born on 22 February 1788`). Also a date built
  in code after its cue (`dob=date(1986, 2, 14)`, `dob: date = ...`, `LocalDate.of(...)`, `<birthDate value="...">`)
  and an HL7 v2 `PID` segment's seventh field (`PID|1||...||DOE^JANE||19860214|F`), whose place is its cue.
- `passport`: 6-9 capitals and digits, at least one a digit (or a German serial's 9 letters), as issued (US 9 digits or a letter and 8, UK 9
  digits, Germany's `C01X00T47`, France's `12AB34567`; or in groups of 8-9 with a letter, `C01X 00T4 7`, `AB
  1234567`), right after `passport` (`passport no./number/#`), `Reisepass(nummer)`, `pasaporte`, `passeport`,
  `pasaport`, `旅券`; and the two lines of a passport's machine-readable zone (ICAO
  9303: `P<` and the name, then the number, nationality, birth date and expiry with their check digits), both
  replaced whole. `passport photo`, `passport office hours 9-17`, `passport 2.0` (a version) stay.
"""

from __future__ import annotations

import re
from datetime import date
from typing import Callable

from tasks.data.privacy.pii_cues import placeholder_led
from tasks.data.privacy.pii_literals import folded_in, literal_in
from tasks.data.privacy.pii_markup import CELL_BREAK, EMPHASIS

_MONTHS = {name: i + 1 for names in (
    "january february march april may june july august september october november december",
    "jan feb mar apr may jun jul aug sep oct nov dec",
    "januar februar märz april mai juni juli august september oktober november dezember",
    "enero febrero marzo abril mayo junio julio agosto septiembre octubre noviembre diciembre",
    "janvier février mars avril mai juin juillet août septembre octobre novembre décembre",
    "gennaio febbraio marzo aprile maggio giugno luglio agosto settembre ottobre novembre dicembre",
    "janeiro fevereiro março abril maio junho julho agosto setembro outubro novembro dezembro",
    "januari februari maart april mei juni juli augustus september oktober november december",
    "stycznia lutego marca kwietnia maja czerwca lipca sierpnia września października listopada grudnia",
    "ocak şubat mart nisan mayıs haziran temmuz ağustos eylül ekim kasım aralık",
    "ledna února března dubna května června července srpna září října listopadu prosince",       # Czech
    "januar februar marts april maj juni juli august september oktober november december",     # Danish
    "január február március április május június július augusztus szeptember október november december",
    "ianuarie februarie martie aprilie mai iunie iulie august septembrie octombrie noiembrie decembrie",
    "januari februari maret april mei juni juli agustus september oktober november desember")  # Indonesian
    for i, name in enumerate(names.split())} | {"sept": 9, "setiembre": 9, "maerz": 3, "fevrier": 2, "aout": 8}

# The cue, then what may stand between it and the date (`DOB: `, `"dob": "`, `date of birth is `, `born on `,
# `Birthday: `), a form's format hint or a short word in parentheses included (`date of birth (dd/mm/yyyy): `,
# `Date of birth (DOB): `, `Birthday (optional): `): only a date may follow either.
# (The date may open the next line: a form's label above its field, a PDF's text.)
# The label may be Markdown bold (`- **DOB**: `, `**Date of birth:** `, `**birthdate=** `, `**生年月日：**: `) or a
# table cell, the date in the next (`| DOB | 1985-03-14 |`, `<td>Born</td><td>14.03.1985</td>`): `pii_markup`'s
# fragments, as the credential names read them (a cue may follow the underscores of `__DOB__`, not a name's:
# `next_birthday`). `Born` is a label only so: before a `:`/`=` or a cell's end.
_LABEL_END = "(?:" + EMPHASIS + "?[ \t]*[:=]|" + CELL_BREAK + ")"
# `born on` in French, German and Spanish too (`né le`, `geboren am`, `nacida el`), and the CJK and Korean labels
# (`生年月日`, `出生日期`, `生日`, `誕生日`, `생년월일`), which need no word boundary: CJK text has no spaces.
_DOB_CUE = (r"(?:(?i:(?:\b|(?<=(?<!\w)_)|(?<=(?<!\w)__))(?:d\.?o\.?b\.?|date[ _-]?of[ _-]?birth|birth[ _-]?date|birthday"
            r"|born(?:[ ]on(?:[ ]the)?\b|(?=" + _LABEL_END + "))|geboren(?=" + _LABEL_END + ")|geburtstag"
            # `was born` before the date (a person's record: `The patient was born February 14th, 1986`), or
            # `born` before a date in digits: an encyclopedia writes `(born April 29, 1970)` in words
            r"|(?<=\bwas[ ])born(?=[ ]\w)|born(?=[ ]\d\d?[-/.]\d\d?[-/.]\d)"
            r"|geburtsdatum|geb\.?-?datum|geb\.(?:[ ]am(?=[ ]))?|fecha[ _](?:de[ _])?nac(?:imiento|\.)|date[ _]de[ _]naissance"
            r"|n[ée](?:e|\(e\))?[ ]le|geboren[ ]a[mn]|geboren[ ]op|nacid[oa][ ]el|data[ _]di[ _]nascita|nat[oa][ ]il"
            r"|geboortedatum|data[ _]urodzenia|urodzon[ya]|data[ _]de[ _]nascimento|nascid[oa][ ]em|bday"
            r"|f[øo]dselsdato|f[öo]delsedatum|syntym[äa]aika|do[ğg]um[ _]tarihi"
            # Czech, Slovak, Croatian/Serbian, Slovenian, Danish/Norwegian/Swedish, Hungarian, Romanian,
            # Indonesian (`lahir di Bandung, 14 Februari 1986`: the birthplace first), Vietnamese, Swahili
            r"|datum[ _]narozen[íi]|d[áa]tum[ _]narodenia|narozen[áa]?|datum[ _]ro(?:đ|dj)enja|datum[ _]rojstva"
            r"|f[øö]dt|f[öo]dd|sz[üu]let[ée]si[ _](?:id[őo]|d[áa]tum)|sz[üu]letett|data[ _]na[șşs]terii"
            r"|(?:tanggal|tgl\.?)[ _]lahir|lahir(?:[ ]di[ ][^\W\d_]{2,20}(?:[ ][^\W\d_]{2,20})?,)?"
            r"|ng[àa]y[ _]sinh|tarehe[ _]ya[ _]kuzaliwa))"
            r"|(?i:дата[ _](?:рождения|народження)|ημερομηνία[ _]γέννησης|ημ\.?[ _]γέννησης)"
            r"|تاريخ[ _]الميلاد|जन्म[ _]?तिथि|出生年月日|出生日期|生年月日|誕生日|生日|생년월일|생일)"
            r"(?:[ \t]*\((?i:[dmy]{1,4}[-/.][dmy]{1,4}[-/.][dmy]{1,4}|[^\W\d][\w .,/-]{0,23})\))?(?:[ \t]*" + EMPHASIS
            + r")?[\"']?(?:[ \t]*:[ \t]*(?:date|datetime|str|Date|LocalDate)(?=[ \t]*=)|[ \t]+value(?=[ \t]*=))?"
            r"[ \t]*(?:[:=#>：]|is|was|\(|-|是|为|為|は|은|는)?(?:(?<=[:：=])" + EMPHASIS + r"[:：]?)?"
            r"(?:" + CELL_BREAK + r")?[ \t]*(?:\r?\n[ \t]*)?[\"']?")
_MONTH_WORD = r"[^\W\d_]{3,12}\.?"
# A date of birth has no time of day: a datetime at midnight is a date column exported (`1985-03-14T00:00:00`),
# another time an event's timestamp (`Date of birth: 2024-01-15T10:30:00` is a form's log line).
_MIDNIGHT = r"(?:T00:00(?::00(?:\.0+)?)?(?:Z|[+-]00:?00)?)?"
_DATE = (r"(?P<date>"
                  r"(?P<y1>\d{4})(?P<s1>[-/.])(?P<m1>\d\d?)(?P=s1)(?P<d1>\d\d?)" + _MIDNIGHT +      # 1987-03-12
                  r"|(?P<a2>\d\d?)(?P<s2>[-/.])(?P<b2>\d\d?)(?P=s2)(?P<y2>\d{4}|\d\d)"          # 12/03/1987
                  r"|(?P<d3>\d\d?)(?:st|nd|rd|th|\.)?[ ](?:of[ ]|de[ ])?(?P<m3>" + _MONTH_WORD +
                  r")(?:[ ]de)?,?[ ](?P<y3>\d{4}|\d\d)"                                # 12 March 1987, 12 Mar 87
                  r"|(?P<m4>" + _MONTH_WORD + r")[ ](?P<d4>\d\d?)(?:st|nd|rd|th)?,?[ ](?P<y4>\d{4})"  # March 12, 1987
                  r"|(?P<d5>\d\d?)(?P<s5>[-/])(?P<m5>[^\W\d_]{3,9})(?P=s5)(?P<y5>\d{4})"             # 12-Mar-1987
                  r"|(?P<y6>(?:19|20)\d\d)(?P<m6>[01]\d)(?P<d6>[0-3]\d)"                           # 19870312
                  r"|(?P<y7>\d{4})[ ]?[年년][ ]?(?P<m7>\d\d?)[ ]?[月월][ ]?(?P<d7>\d\d?)[ ]?[日일]"        # 1987年3月12日
                  r"|(?P<d8>\d\d)(?P<m8>[A-Za-z]{3})(?P<y8>(?:19|20)?\d\d)"                            # 12MAR1987
                  r"|(?P<d10>\d\d?)\.[ ](?P<m10>\d\d?)\.[ ]?(?P<y10>\d{4})"          # 14. 2. 1986 (Czech, Croatian)
                  # 1986. február 14. (Hungarian)
                  r"|(?P<y11>\d{4})\.[ ](?P<m11>" + _MONTH_WORD + r")[ ](?P<d11>\d\d?)\.?"
                  r"|(?:(?:datetime|dt)\.)?(?:date|datetime|LocalDate\.of|DateTime)"     # date(1987, 3, 12)
                  r"\((?P<y9>\d{4}),[ ]?(?P<m9>\d\d?),[ ]?(?P<d9>\d\d?)\)"
                  r")")
_DOB = re.compile(_DOB_CUE + _DATE + r"(?:(?<=[日일])|(?![\w:]|[-/.]\d))")  # a CJK date may run on into its sentence
_DATE_ONLY = re.compile(_DATE)


def _valid(year: int, month: int, day: int) -> bool:
    """A calendar date of a year from 1900 on: whoever was born before is dead, and a date of birth in history (an
    encyclopedia's `born on 22 February 1788`) is nobody's personal data."""
    try:
        date(year, month, day)
    except ValueError:
        return False
    return year >= 1900


def _dob(m: re.Match[str]) -> bool:
    """A real calendar date (either reading of `a/b/y`), its year four digits or two."""
    if m.group("y1"):
        return _valid(int(m.group("y1")), int(m.group("m1")), int(m.group("d1")))
    if m.group("y2"):
        year = int(m.group("y2")) + (1900 if len(m.group("y2")) == 2 else 0)
        a, b = int(m.group("a2")), int(m.group("b2"))
        return _valid(year, b, a) or _valid(year, a, b)
    for k in (6, 7, 9, 10):
        if m.group(f"y{k}"):
            return _valid(int(m.group(f"y{k}")), int(m.group(f"m{k}")), int(m.group(f"d{k}")))
    month, day, year = next((m.group(f"m{k}"), m.group(f"d{k}"), m.group(f"y{k}")) for k in (3, 4, 5, 8, 11)
                            if m.group(f"y{k}"))
    number = _MONTHS.get(month.rstrip(".").lower())
    # a military/airline date's two-digit year (`12MAR78`) is 19xx, as `a/b/yy` is
    return number is not None and _valid(int(year) + (1900 if len(year) == 2 else 0), number, int(day))


# An HL7 v2 `PID` segment's seventh field is the patient's date (and time) of birth, `YYYYMMDD[HHMM[SS]]`
# (`PID|1||0048213^^^HOSP^MR||DOE^JANE||19860214|F|...`; segments end in `\r`): the segment's layout is its cue.
# Led by its literal (a fast scan), the line start checked after it; fields hold no `|`, so each `[^|\r\n]*` stops
# at its own bar (linear), and a long PID-3 or PID-5 needs no window.
_HL7_PID = re.compile(r"PID\|(?<![^\r\n]PID\|)(?:[^|\r\n]*\|){6}(?P<date>(?P<y>(?:19|20)\d\d)(?P<mo>[01]\d)(?P<d>[0-3]\d)"
                      r"(?:\d{4}(?:\d\d)?)?)(?=[|^~\r\n]|\Z)")


def _hl7_dob(m: re.Match[str]) -> bool:
    return _valid(int(m.group("y")), int(m.group("mo")), int(m.group("d")))


def _cued_dob(m: re.Match[str]) -> bool:
    """`_dob` after a label: only the first date after it is the birth date (`DOB <DOB> 2024-01-05 admitted`)."""
    return not placeholder_led(m, "<DOB>") and _dob(m)


def is_birth_date(value: str) -> bool:
    """`value` is a date as a date of birth is written (the cued pass's layouts), a real one from 1900 on."""
    m = _DATE_ONLY.fullmatch(value)
    return m is not None and _dob(m)


def is_passport_number(value: str) -> bool:
    """`value` is a passport number as the cued pass reads one (6-9 capitals and digits, see `_passport`)."""
    m = re.fullmatch(r"(?P<number>[A-Z0-9]{6,9})", value)
    return m is not None and _passport(m)


def _date_span(m: re.Match[str]) -> tuple[int, int]:
    return m.start("date") - m.start(), m.end("date") - m.start()


# A passport cue, then the number: 6-9 capitals and digits, not a version (`passport 0.6.0`) or a word.
_PASSPORT = re.compile(
    r"(?:(?i:\b(?:passport|reisepass|pasaporte?|passeport|passaporto|passaporte|paspoort|paszport(?:u)?|паспорт))"
    r"|パスポート|旅券|여권|护照|護照|جواز[ ]السفر|पासपोर्ट)"
    # (the number word may open a parenthesis: `the defendant's passport (No. 561298437) was surrendered`)
    r"(?i:(?:[ _-]|[ ]\()?(?:nummer|number|num|no\.?|nr\.?|n[°º]\.?|n\.|\#|n[uú]mero|num[eé]ro|id|номер))?"
    r"(?:[ ]?(?:番号|번호|号码|號碼|नंबर|संख्या))?"
    r"(?:[ \t]*\([^\W\d][\w .,/-]{0,23}\)(?=[ \t]*[:=#：]))?"      # a qualifier: `Passport (UK): `
    # the number one level down: `<Passport issuingCountry="USA"><Number>...`, `"passport": {"number": "..."`
    r"(?:(?:[ \t][\w:-]+=[\"'][^\"'<>\n]{0,40}[\"'])*>[ \t\r\n]*<[\w:]*(?i:number|no|num)>"
    r"|[\"']?[ \t]*(?:[:=#>：]|is|was)?[ \t]*[\"']?"
    r"(?:\{[ \t\r\n]*[\"'](?i:number|no|num|id)[\"'][ \t]*:[ \t]*[\"'])?)"
    # or a Russian series and number written after an English or other cue (`Passport No: 4856 280232`)
    # or nine digits in groups, as a form prints them (`Passport number: 925 076 473`, `92507 6473`)
    # or capitals and digits in groups, each after the first with a digit (`C01X 00T4 7`, `AB 1234567`, `12AB 34567`)
    r"(?P<number>\d{2}[ ]?\d{2}[ ]\d{6}|\d{3}(?P<grouped>[ -])\d{3}(?P=grouped)\d{3}|\d{5}[ ]\d{4}|[A-Z0-9]{6,9}"
    r"|[A-Z0-9]{1,5}(?:[ ](?=[A-Z]{0,6}\d)[A-Z0-9]{1,7}){1,2})"
    r"(?![\w-]|[.,/]\d)")
# Russia's and the CIS's passports: a series of 4 digits (often as 2 and 2) and a number of 6
# (`Паспорт: 45 06 123456`, `паспорт серия 4506 № 123456`), a foreign-travel one 2 and 7 (`загранпаспорт 72 1234567`).
_PASSPORT_RU = re.compile(
    r"(?i:(?:загран)?паспорт(?:а|у|е)?(?:[ ]рф)?(?:[ \t]*(?:серия|серии|номер|№|n)\.?)*)[ \t]*[:#]?[ \t]*"
    r"(?P<number>\d{2}[ ]?\d{2}[ ]?(?:(?i:№|номер|n)[ ]?)?\d{6}|\d{2}[ ]?\d{7})(?![\w-]|[.,/]\d)")
# ICAO 9303 TD3: line 1 `P`, a type letter or `<`, the issuing state, the name (`<<` between surname and given
# names); line 2 the number, its check digit, nationality, birth date, sex, expiry, optional data, check digits.
_LINE2 = r"[A-Z0-9<]{9}\d[A-Z<]{3}\d{7}[MFX<]\d{7}[A-Z0-9<]{14}[0-9<]\d(?![\w<])"
_MRZ = re.compile(r"(?<![\w<])(?:P[A-Z<][A-Z<]{3}(?=[A-Z<]{0,37}<<)[A-Z<]{39}(?![\w<])(?:\r?\n(?P<next>" + _LINE2 +
                  r"))?|(?<![^\n])(?P<line2>" + _LINE2 + "))")


# Germany's serial alphabet (no vowels, nor B, D, Q, S): 9 of its letters are no word in capitals.
_GERMAN_SERIAL = re.compile(r"[CFGHJK][CFGHJKLMNPRTVWXYZ0-9]{8}")


def _passport(m: re.Match[str]) -> bool:
    """A digit, or a German serial of letters only: a cue then a word in capitals (`PASSPORT OFFICE`) is no
    number (6 characters or more: no year)."""
    number = m.group("number")
    if placeholder_led(m, "<PASSPORT>"):    # the label named the number before (`Passport No. <PASSPORT> B2210247`)
        return False
    if " " in number and not number.replace(" ", "").isdigit():
        # capitals and digits in groups: a whole number of 8-9 (`Passport: UK 2026` is a word and a year)
        compact = number.replace(" ", "")
        return 8 <= len(compact) <= 9 and any(c.isdigit() for c in compact) and any(c.isalpha() for c in compact)
    return any(c.isdigit() for c in number) or _GERMAN_SERIAL.fullmatch(number) is not None


def check_digit(field: str) -> str:
    """ICAO 9303's check digit: weights 7, 3, 1 over digits, letters as 10-35 and `<` as 0, modulo 10."""
    value = lambda c: int(c) if c.isdigit() else 0 if c == "<" else ord(c) - 55  # noqa: E731
    return str(sum(value(c) * (7, 3, 1)[i % 3] for i, c in enumerate(field)) % 10)


def mrz_line2_ok(line: str) -> bool:
    """The number's, birth date's and expiry's check digits and the composite one are right."""
    return check_digit(line[0:9]) == line[9] and check_digit(line[13:19]) == line[19] and \
        check_digit(line[21:27]) == line[27] and \
        check_digit(line[0:10] + line[13:20] + line[21:43]) == line[43]


def _mrz(m: re.Match[str]) -> bool:
    """Both lines, or a line 2 alone, with right check digits."""
    line2 = m.group("line2") or m.group("next")
    return line2 is None or mrz_line2_ok(line2)


class Gated:
    """`sub(repl, text)` like `pattern`'s, searched only in a window around each occurrence of one of `gates`
    (lower-case ASCII literals; with `fold`, in any case). A cue pattern led by a case-insensitive alternation
    (`(?i:\\bdob|...)`) is tried at every character: 73 ms on the 1.3 MB of standard-library code that the
    benchmark scrubs. Gates are looked for with `find` (C), with `fold` in the text's bytes with ASCII lowered
    (`_folded`: offsets stay the text's), ~0.6 ms a gate a MB; one found absent is remembered for the rest of the
    scrubbing (`pii_values.folded_in`). A window starts `back` characters before a gate (the cue's start) and
    ends `AHEAD` after it; a match that ends near the window's end is dropped, since its closing lookahead saw
    the window's end rather than the text."""

    AHEAD = 160

    def __init__(self, pattern: re.Pattern[str], gates: tuple[str, ...], back: int, fold: bool = True):
        self.pattern, self.gates, self.back, self.fold = pattern, gates, back, fold

    def hits(self, text: str) -> list[int]:
        """Where a gate occurs (in any case, with `fold`), in order."""
        return sorted(_gate_positions(text, self.gates, self.fold))

    def sub(self, repl: Callable[[re.Match[str]], str], text: str) -> str:
        out, last = [], 0
        for at in self.hits(text):
            if at < last:
                continue
            end = at + self.AHEAD
            m = self.pattern.search(text, max(last, at - self.back), end)
            if m is None or m.end() > end - 8:
                continue
            out += (text[last:m.start()], repl(m))
            last = m.end()
        return "".join(out) + text[last:] if out else text


def _folded(text: str) -> bytes:
    """The text's bytes with ASCII lowered, one byte a character: Latin-1 (a copy, 0.03 ms a MB), else ASCII with
    each other character one `?`."""
    try:
        return text.encode("latin-1").lower()
    except UnicodeEncodeError:
        return text.encode("ascii", "replace").lower()


def _gate_positions(text: str, gates: tuple[str, ...], fold: bool) -> set[int]:
    """Where each of `gates` occurs in `text` (with `fold`, in any case: lower-case ASCII gates in `_folded`)."""
    found, memo = set(), []

    def folded() -> bytes:  # made once, and only when a gate is looked for in it
        if not memo:
            memo.append(_folded(text))
        return memo[0]

    for gate in gates:
        if fold and not folded_in(gate, folded) or not fold and not literal_in(gate, text):
            continue
        haystack, needle = (folded(), gate.encode("ascii")) if fold else (text, gate)
        at = haystack.find(needle)
        while at >= 0:
            found.add(at)
            at = haystack.find(needle, at + 1)
    return found


def gate_hits(text: str, gates: tuple[str, ...], written: tuple[str, ...]) -> list[int]:
    """Where one of `gates` (lower-case ASCII, in any case) or `written` (as written) occurs in `text`, in order.
    Absent gates are answered from the scrubbing's memory (`folded_in`, `literal_in`): the cued passes, which run
    first, have looked for the same ones."""
    return sorted(_gate_positions(text, gates, True) | _gate_positions(text, written, False))


def _number_span(m: re.Match[str]) -> tuple[int, int]:
    return m.start("number") - m.start(), m.end("number") - m.start()


_DOB_GATES = ("dob", "d.o.b", "birth", "born", "geburtsdatum", "geburtstag", "geb.", "nacimiento", "naissance",
              "geboren", "nacid", "fecha de nac", "fecha nac", "nasc", "nato il", "nata il", "geboortedatum", "urodz",
              "bday", "narozen", "narodenia", "rodjenja", "rojstva", "kuzaliwa", "nasterii", "lahir")
# Cues outside ASCII, found as written (`fold` reads a text with CJK letters as ASCII and `?`)
_DOB_WRITTEN_GATES = ("né le", "née le", "Né le", "Née le", "né(e) le", "Né(e) le", "出生", "生年月日", "生日", "誕生日", "생년월일", "생일",
                      "рождения", "Рождения", "РОЖДЕНИЯ", "الميلاد", "जन्म", "fødselsdato", "Fødselsdato",
                      "födelsedatum", "Födelsedatum", "syntymäaika", "Syntymäaika", "doğum tarihi", "Doğum tarihi",
                      "Doğum Tarihi", "rođenja", "Født", "født", "FØDT", "Född", "född", "Születési", "születési",
                      "Született", "született", "nașterii", "naşterii", "Ngày sinh", "ngày sinh", "NGÀY SINH",
                      "Дата народження", "дата народження", "γέννησης", "ΓΈΝΝΗΣΗΣ", "ΓΕΝΝΗΣΗΣ")
_PASSPORT_GATES = ("passport", "reisepass", "pasaport", "passeport", "passapor", "paspoort", "paszport")
_PASSPORT_WRITTEN_GATES = ("паспорт", "Паспорт", "ПАСПОРТ", "パスポート", "旅券", "여권", "护照", "護照", "جواز السفر",
                           "पासपोर्ट")

# (kind, pattern, validator, group (0 or a function of the match giving a span), hint); MRZ first: its line 2
# holds a birth date and a number that the cued passes must not cut. Every MRZ line 1 has a `<<` (between the
# surname and the given names), and a line 2 nearly always (its filler).
PERSONAL_PASSES = (
    ("passport", Gated(_MRZ, ("<<",), 44, fold=False), _mrz, 0, bool),
    ("passport", Gated(_PASSPORT, _PASSPORT_GATES, 2), _passport, _number_span, bool),
    ("passport", Gated(_PASSPORT, _PASSPORT_WRITTEN_GATES, 2, fold=False), _passport, _number_span, bool),
    ("passport", Gated(_PASSPORT_RU, ("паспорт", "Паспорт", "ПАСПОРТ"), 8, fold=False), bool, _number_span, bool),
    ("dob", Gated(_DOB, _DOB_GATES, 24), _cued_dob, _date_span, bool),
    ("dob", _HL7_PID, _hl7_dob, _date_span, bool),
    ("dob", Gated(_DOB, _DOB_WRITTEN_GATES, 24, fold=False), _cued_dob, _date_span, bool),
)
