"""Dates of birth, passport numbers, German KVNRs and bare phone numbers in a table's column that only its header row
names.

The cued passes (`pii_personal`, `pii_national_extra`) take a date or a number right after its label. In a CSV/TSV
export, a Markdown table or a pipe-separated dump the label stands once, in the header, and each row's value sits
under it (`customer_id,email,date_of_birth` / `10001,a@b.fr,14/02/1986`): a probe of whole documents found 15 of
its 24 dates of birth that way, all kept. Here a header line naming such a column (`date_of_birth`, `DOB`, `Birth
date`, `Geburtsdatum`, `fecha_nacimiento`, `passport_no`, `KVNR`, `Versichertennummer`, ...; case, spaces, `_`,
`-`, `.` ignored) is followed down its rows — lines split by the header's separator into as many fields — and the
field under that column is replaced when it reads as the kind's value (`pii_personal.is_birth_date`: a real date
from 1900 on; `is_passport_number`; `pii_national_extra.is_kvnr`: its GKV check digit, counted as `ssn`; under
`phone`, `telefon`, `mobile`, `handy`, ...: 7-15 bare digits, which no phone pass takes without a cue; under a
national id's name, `ssn`, `pesel`, `bsn`, `cpf`, ... (`NATIONAL_COLUMNS`): a number valid in its scheme). The rows
end at a blank line or at a line of another shape. A header of one column, or a column's name in running prose, is
no table.
"""

from __future__ import annotations

import bisect
import functools
import re
from typing import Callable, Iterator

from tasks.data.privacy.pii_national import valid_as
from tasks.data.privacy.pii_national_extra import is_kvnr
from tasks.data.privacy.pii_personal import gate_hits, is_birth_date, is_passport_number
from tasks.data.privacy.pii_values import span_match

# A national id's column (`name,ssn` / `John Carter,536904399`; `imie,nazwisko,pesel`; `naam;bsn`) → the `stdnum`
# schemes its value must be valid in (`pii_national.valid_as`: check digits, the SSA's area rules), as the cued
# pass (`pii_national`) reads the same number after its label
NATIONAL_COLUMNS: dict[str, tuple[str, ...]] = {
    **dict.fromkeys(("ssn", "socialsecuritynumber", "socialsecurityno", "socialsecurity", "ssnumber"), ("us.ssn",)),
    **dict.fromkeys(("pesel", "numerpesel"), ("pl.pesel",)),
    **dict.fromkeys(("bsn", "burgerservicenummer", "sofinummer"), ("nl.bsn",)),
    "cpf": ("br.cpf",), "nir": ("fr.nir",), "numerosecu": ("fr.nir",), "numerodesecuritesociale": ("fr.nir",),
    "personnummer": ("se.personnummer", "no.fodselsnummer"), "fodselsnummer": ("no.fodselsnummer",),
    "fødselsnummer": ("no.fodselsnummer",), "cpr": ("dk.cpr",), "cprnr": ("dk.cpr",), "cnp": ("ro.cnp",),
    "oib": ("hr.oib",), "isikukood": ("ee.ik",), "amka": ("gr.amka",), "tckn": ("tr.tckimlik",),
    "tckimlikno": ("tr.tckimlik",), "steuerid": ("de.idnr",), "ahv": ("ch.ssn",), "ahvnr": ("ch.ssn",),
    "ppsn": ("ie.pps",), "pps": ("ie.pps",), "aadhaar": ("in_.aadhaar",), "aadhar": ("in_.aadhaar",),
}
# Column names, folded (lower case, without spaces, `_`, `-`, `.`), per kind
_NAMES = {
    "dob": frozenset(
        "dob dateofbirth birthdate birthday birth bday dobddmmyyyy geburtsdatum gebdatum geburtstag "
        "fechadenacimiento fechanacimiento fechanac datedenaissance datenaissance datadinascita datanascita "
        "geboortedatum dataurodzenia datadenascimento datanascimento fodselsdato fødselsdato födelsedatum "
        "syntymäaika dogumtarihi doğumtarihi датарождения 生年月日 出生日期 생년월일".split()),
    "passport": frozenset(
        "passport passportno passportnumber passportnum passportid passportnr reisepass reisepassnummer "
        "passnummer pasaporte numeropasaporte passeport numeropasseport passaporto passaporte paspoort "
        "paspoortnummer paszport numerpaszportu".split()),
    # Germany's Krankenversichertennummer (its cues in `pii_national_extra`) and the national ids of
    # `NATIONAL_COLUMNS`: `ssn`
    "ssn": frozenset(
        "kvnr versichertennummer versichertennr krankenversichertennummer krankenversichertennr "
        "healthinsurancenumber healthinsuranceno healthinsuranceid".split()) | frozenset(NATIONAL_COLUMNS),
    # a phone column's bare digits (`name,phone` / `John Carter,4155552671`): no layout, no cue before them
    "phone": frozenset(
        "phone phonenumber phoneno phonenr telephone telephonenumber tel telno telnr telnumber telefon telefonnummer "
        "telefonnr telefono numerotelefono numerodetelefono teléfono téléphone telefone mobile mobilephone "
        "mobilenumber mobileno mobil mobilnummer mobiltelefon handy handynummer cell cellphone cellular celular "
        "móvil movil tlf".split()),
}
_PHONE_DIGITS = re.compile(r"\+?\d{7,15}")


def _phone_digits(value: str) -> bool:
    """7-15 digits (E.164's limit), a `+` before them at most, three distinct digits or more."""
    return _PHONE_DIGITS.fullmatch(value) is not None and len(set(value.lstrip("+"))) >= 3


def _national_id(schemes: tuple[str, ...]) -> Callable[[str], bool]:
    # three distinct digits at least: `111.111.111-11` passes CPF's checks and is nobody's number
    # (its digits and letters: `.` and `-` are no digits)
    return lambda value: len({c for c in value if c.isalnum()}) >= 3 and any(valid_as(scheme, value)
                                                                       for scheme in schemes)


_VALID: dict[str, Callable[[str], bool]] = {"dob": is_birth_date, "passport": is_passport_number, "ssn": is_kvnr,
                                            "phone": _phone_digits}
_NATIONAL_VALID = {name: _national_id(schemes) for name, schemes in NATIONAL_COLUMNS.items()}
# A word of any header that names one, as the cued passes gate theirs (`gate_hits`: the same literals, so an absent
# one costs nothing more): ASCII ones in any case, the others as written
_GATES = ("dob", "birth", "bday", "geburtsdatum", "nacimiento", "naissance", "nasc", "geboortedatum", "urodz",
          "passport", "reisepass", "pasaporte", "passeport", "passapor", "paspoort", "paszport", "kvnr",
          "versicherten", "insurance",
          # a phone column's: `tel` (telefon, teléfono, telephone), `phone` (téléphone), ...; each gate is a scan of
          # the text, so few (`tel` in `hotel`, `cell` in `cancelled` cost a header check of their line)
          "phone", "tel", "mobil", "handy", "cell",
          # a national id's (`NATIONAL_COLUMNS`): most are `pii_national`'s own gates, looked for already
          "ssn", "social", "pesel", "bsn", "burgerservice", "sofi", "cpf", "nir", "secu", "personn", "dselsn", "cpr",
          "cnp", "oib", "isikukood", "amka", "tckn", "kimlik", "steuer", "ahv", "ppsn", "aadha")
_WRITTEN = ("fødselsdato", "Fødselsdato", "födelsedatum", "Födelsedatum", "syntymäaika", "doğum", "Doğum",
            "рождения", "Рождения", "生年月日", "出生日期", "생년월일")
_SEPARATORS = (",", ";", "\t", "|")
_FIELD_CHARS = re.compile(r"[\s_.\-\"'`*]+")


def _fold(name: str) -> str:
    return _FIELD_CHARS.sub("", name).lower()


def column_kind(name: str) -> str | None:
    """The kind (`dob`, `passport`) a column or a label of that name holds, or None."""
    folded = _fold(name).rstrip(":：")
    return next((kind for kind, names in _NAMES.items() if folded in names), None)


def validator(kind: str, name: str = "") -> Callable[[str], bool]:
    """What a value of `kind` under a column or label `name` must read as (`dob`: a real date from 1900 on;
    `passport`: a passport number; `ssn`: the national id its name says, else a KVNR)."""
    return _NATIONAL_VALID.get(_fold(name).rstrip(":："), _VALID[kind]) if kind == "ssn" else _VALID[kind]


def valid_value(kind: str, value: str, name: str = "") -> bool:
    """`value` reads as a value of `kind` under a column or label `name` (`validator`)."""
    return validator(kind, name)(value)


def _fields(line: str, sep: str) -> list[tuple[int, int]]:
    """(start, end) of each field of `line` split at `sep` (a CSV field in double quotes may hold `sep`; a
    Markdown row's outer pipes open and close it), each without its spaces and quotes."""
    spans, at, n = [], 0, len(line)
    if sep == "|":
        body = line.strip()
        at = line.find("|") + 1 if body.startswith("|") else 0
        n = line.rfind("|") if body.endswith("|") and line.count("|") > 1 else n
    while at <= n:
        end = at
        if line[at:at + 1] == '"':                            # a quoted field: to its closing quote
            close = line.find('"', at + 1)
            end = close + 1 if close >= 0 else n
        end = line.find(sep, end, n)
        end = n if end < 0 else end
        start, stop = at, end
        while start < stop and line[start] in " \t\r\"'`":
            start += 1
        while stop > start and line[stop - 1] in " \t\r\"'`":
            stop -= 1
        spans.append((start, stop))
        at = end + 1
    return spans


Header = tuple[str, tuple[tuple[str, int, str], ...], int]
_MEMO_LINE = 2000       # a longer line is read each time (the memo would hold it)


def _header(line: str) -> Header | None:
    """The separator of a header line, the (kind, index) of each column it names and its width; None when it names
    none. A header line is read once for the four kinds' passes and their rounds (files concatenated with their
    headers repeat it too): remembered."""
    return _remembered_header(line) if len(line) <= _MEMO_LINE else _read_header(line)


def _read_header(line: str) -> Header | None:
    for sep in _SEPARATORS:
        if line.count(sep) < 1:
            continue
        spans = _fields(line, sep)
        named = tuple((kind, i, _fold(line[a:b])) for i, (a, b) in enumerate(spans) for kind, names in _NAMES.items()
                      if _fold(line[a:b]) in names)
        if named and len(spans) >= 2:
            return sep, named, len(spans)
    return None


_remembered_header = functools.lru_cache(maxsize=256)(_read_header)


class HeaderColumns:
    """`sub(repl, text)`: each value of `kind` under a header that names its column replaced by `repl`."""

    def __init__(self, kind: str):
        self.kind = kind

    def sub(self, repl: Callable[[re.Match[str]], str], text: str) -> str:
        spans = sorted(set(self._values(text)))
        if not spans:
            return text
        out, last = [], 0
        for start, end in spans:
            out += (text[last:start], repl(span_match(text, start, end)))
            last = end
        return "".join(out) + text[last:]

    def _values(self, text: str) -> Iterator[tuple[int, int]]:
        starts, headers = _header_lines(text)
        for line_end, (sep, named, width) in headers:
            columns = [(i, validator(kind, name)) for kind, i, name in named if kind == self.kind]
            if columns:
                yield from self._rows(text, line_end, sep, width, columns, starts)

    def _rows(self, text: str, at: int, sep: str, width: int, columns: list[tuple[int, Callable[[str], bool]]],
              starts: list[int]) -> Iterator[tuple[int, int]]:
        """The values under `columns` (index, validator) in the rows after a header ending at `at` (a Markdown rule
        line skipped); `starts`: where the text's header lines start."""
        while at < len(text):
            start = at + 1
            end = _end_of_line(text, start)
            line = text[start:end]
            if not line.strip():
                return
            spans = _fields(line, sep)
            if len(spans) != width:
                return
            # another header starts another table (files concatenated with their headers): read by its own hit,
            # so a text of n header/row pairs is read once, not n²/2 rows (1,000 pairs: 18 s)
            k = bisect.bisect_left(starts, start)
            if k < len(starts) and starts[k] == start:
                return
            if not (sep == "|" and set(line.strip()) <= set("|-: ")):
                for i, valid in columns:
                    a, b = spans[i]
                    if b > a and valid(line[a:b]):
                        yield start + a, start + b
            at = end


# The last text's header lines (where each starts; its end and header), as one (text, lines) pair swapped whole
# (safe across threads): the four kinds' passes read the same text, and half of this pass's time was finding them.
# Found once a text, each line holding a gate word read once (`cell` in `cancelled`, `tel` in `hotel`: code has
# hundreds, and four passes each reading them cost 12 ms a round on the benchmark's 1.3 MB).
HeaderLines = tuple[list[int], list[tuple[int, Header]]]
_LAST: list[tuple[str | None, HeaderLines]] = [(None, ([], []))]


def _header_lines(text: str) -> HeaderLines:
    cached = _LAST[0]
    if cached[0] is text:
        return cached[1]
    starts: list[int] = []
    headers: list[tuple[int, Header]] = []
    line_end = -1
    for hit in gate_hits(text, _GATES, _WRITTEN):
        if hit <= line_end:
            continue
        line_start = text.rfind("\n", 0, hit) + 1
        line_end = _end_of_line(text, line_start)
        header = _header(text[line_start:line_end])
        if header is not None:
            starts.append(line_start)
            headers.append((line_end, header))
    _LAST[0] = (text, (starts, headers))
    return starts, headers


def _end_of_line(text: str, start: int) -> int:
    end = text.find("\n", start)
    return len(text) if end < 0 else end


COLUMN_PASSES = (
    ("dob", HeaderColumns("dob"), lambda m: True, 0, bool),
    ("passport", HeaderColumns("passport"), lambda m: True, 0, bool),
    ("ssn", HeaderColumns("ssn"), lambda m: True, 0, bool),
    ("phone", HeaderColumns("phone"), lambda m: True, 0, bool),
)
