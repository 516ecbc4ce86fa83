"""Identifier PII for `tasks.data.privacy.pii`: IBANs, social security numbers (US, UK, Canada) and obfuscated emails.

`ID_PASSES` has the same shape as `pii`'s pass table: `(kind, pattern, validator(match), group to replace,
cheap test that the pass can match)`; `pii.scrub_pii` runs them after plain emails and before cards, phones
and addresses, whose digit passes would otherwise eat an IBAN's or an SSN's digit groups.

- `iban`: a country code, 2 check digits and the BBAN, bare (`DE89370400440532013000`) or in groups of 4
  separated by one kind of separator, a space, two spaces or a dash (`GB82 WEST 1234 5698 7654 32`,
  `DE89-3704-0044-0532-0130-00`), in either case (`de89 3704 0044 0532 0130 00`; a bare lower-case one only
  after an `iban` cue: unseparated lower case is also how hashes and ids look). A candidate is an IBAN when
  `stdnum.iban` accepts it: a country of the SWIFT IBAN registry, that country's length and BBAN structure
  (digits/letters per position), ISO 7064 mod-97 == 1 (or, for the 38 countries outside SWIFT's registry that
  schwifty's lists, their layout in `_OTHER_IBANS` and mod-97). National check digits inside the BBAN are not checked
  (mod-97 already rejects 96 of 97 random strings). A grouped IBAN followed by another short token
  (`AT61 1904 3002 3457 3201 EUR`) is cut at the longest valid prefix of whole groups.
- `ssn`: `AAA-GG-SSSS` or `AAA GG SSSS` (one separator kind), or 9 bare digits or `AAA.GG.SSSS` right after a
  cue (`SSN`, `SS#`, `social security number/no`), valid by the SSA's rules as `stdnum.us.ssn` applies them: area not
  000, 666 or 900-999, group not 00, serial not 0000, and not a well-known fake (078-05-1120, 219-09-9999,
  457-55-5462), and not right after a phone cue (`pii_cues`: a number there is a phone). Phones (3-3-4), dates (4-2-2), ZIP+4 (5-4), longer dashed or dotted runs (`ABC-123-45-6789`,
  `1.123-45-6789`) and digit groups inside longer space-separated digit runs are not SSN-shaped.
- `ssn` also holds the UK's National Insurance number (`AB 12 34 56 C`; bare `AB123456C` after a cue such as
  `NINO`, `NI number`, `National Insurance number`) and Canada's Social Insurance Number after a cue (`SIN`,
  `Social Insurance Number`, `NAS`; Luhn): other countries' social security numbers.
- `email` (obfuscated): `ann [at] example [dot] com`, `ann(at)example(dot)org`, `ann {at} mail {dot} co {dot}
  uk`, `ann <at> x <dot> io`, `ann [@] x [.] com`, `ann AT example DOT com`. The rule, from the look-alikes
  in `tests.helpers.pii_planted_ids`: the `at` must be bracketed (any bracket, any case, `@` inside too) or the
  upper-case word `AT`; each dot is bracketed, the upper-case word `DOT` or a literal `.`, and at least one
  dot is obfuscated unless the `at` is bracketed (`ann [at] example.com`); the `AT`-word form needs a `DOT`
  word and a local part with a lower-case letter or a digit (`LOOK AT THE DOT COM BUBBLE` is shouting, not an
  address). Lower-case words (`ann at example dot com`) are English too: see `_EMAIL_CUE` for when they count.
"""

from __future__ import annotations

import heapq
import re
import string
from functools import lru_cache
from typing import Callable

from stdnum import iban as stdnum_iban
from stdnum.ca import sin as stdnum_sin
from stdnum.iso7064 import mod_97_10 as stdnum_mod_97_10
from stdnum.us import ssn as stdnum_ssn

from tasks.data.privacy.pii_cues import phone_cue_before
from tasks.data.privacy.pii_markup import CELL_BREAK, EMPHASIS

PLACEHOLDERS = {"iban": "<IBAN>", "ssn": "<SSN>"}

# --- IBAN ------------------------------------------------------------------------------------------------
# Matched only at the starts `CountryLed` finds (two letters, two digits, nothing word-like before them).
# BBANs are 11-30 characters (Norway's 15-character IBAN to Russia's 33); grouped, an IBAN has 2-7 groups of 4
# and a last group of 1-4 (a 4-character group after a whole IBAN is cut off by `_iban_prefix`), the same
# separator throughout (a backreference: no backtracking over mixed separators).
_IBAN = re.compile(r"[A-Za-z](?<![\w][A-Za-z])[A-Za-z]\d\d(?:[A-Za-z0-9]{11,30}"
                   r"|(?P<sep>[ ]{1,2}|-)[A-Za-z0-9]{4}(?:(?P=sep)[A-Za-z0-9]{4}){1,6}(?:(?P=sep)[A-Za-z0-9]{1,4})?)"
                   r"(?!\w)", re.ASCII)
_IBAN_CUE = re.compile(r"(?i)\biban\b[^\n\w]{0,6}$")


class CountryLed:
    """`sub(repl, text)` like `_IBAN`'s, tried only where a token starts with two letters and two digits, found
    by a digit-led scan (`re` skips non-digits in C). Led by a letter class, `_IBAN` itself would be tried at
    every letter of the text: 4x slower on code once lower case counts."""

    _ANCHOR = re.compile(r"[0-9](?<=[A-Za-z]{2}[0-9])(?<![\w][A-Za-z]{2}[0-9])[0-9]", re.ASCII)

    def sub(self, repl: Callable[[re.Match[str]], str], text: str) -> str:
        out, last = [], 0
        for anchor in self._ANCHOR.finditer(text):
            start = anchor.start() - 2
            if start < last or (m := _IBAN.match(text, start)) is None:
                continue
            out += (text[last:start], repl(m))
            last = m.end()
        return "".join(out) + text[last:] if out else text


# Countries whose IBANs `stdnum` (SWIFT's registry) does not know: the French overseas territories (France's
# layout), the Crown dependencies (the UK's), Åland (Finland's), and the IBANs of African and other banks that
# the national registries publish (schwifty's registry; Nordea's list). BBAN layout by country; mod-97 as for the others.
_FR, _FOUR_N, _TWO_C = r"\d{10}[A-Z0-9]{11}\d\d", r"\d{23}", r"[A-Z0-9]{2}\d{22}"
_OTHER_IBANS = {cc: re.compile(bban) for ccs, bban in (
    ("BL GF GP MF MQ NC PF PM RE TF WF YT", _FR), ("GG IM JE", r"[A-Z]{4}\d{14}"), ("AX", r"\d{14}"),
    ("CF CG CM GA GQ KM MG TD", _FOUR_N), ("BF BJ CI ML NE SN TG", _TWO_C), ("AO CV MZ", r"\d{21}"),
    ("DZ IR", r"\d{22}"), ("MA", r"\d{24}"), ("GW", r"[A-Z0-9]{2}\d{19}")) for cc in ccs.split()}


def valid_iban(compact: str) -> bool:
    """A valid IBAN without separators (any case): `stdnum`'s registry, or `_OTHER_IBANS`' layout, and mod-97."""
    compact = compact.upper()
    if (layout := _OTHER_IBANS.get(compact[:2])) is None:
        return stdnum_iban.is_valid(compact, check_country=False)
    return layout.fullmatch(compact[4:]) is not None and stdnum_mod_97_10.is_valid(compact[4:] + compact[:4])


@lru_cache(maxsize=4096)
def _iban_prefix(candidate: str, sep: str) -> int:
    """Length of the longest prefix of whole groups of `candidate` (separated by `sep`) that is a valid IBAN, or 0."""
    if not 2 <= int(candidate[2:4]) <= 98:  # ISO 13616 issues 02-98 (00, 01 and 99 pass mod-97 as 97, 98, 02)
        return 0
    if not sep:
        return len(candidate) if valid_iban(candidate) else 0
    end = len(candidate)
    while end > 4 and len(candidate[:end].replace(sep, "")) >= 12:   # `CC99 1234 5678`: the shortest tried
        if valid_iban(candidate[:end].replace(sep, "")):
            return end
        end = candidate.rfind(sep, 0, end)
    return 0


def _iban_end(m: re.Match[str]) -> int:
    candidate, sep = m.group(), m.group("sep") or ""
    # Lower case without separators is how hashes and ids are written too: there, only after an `iban` cue.
    if not sep and not candidate.isupper() and \
            _IBAN_CUE.search(m.string, max(0, m.start() - 12), m.start()) is None:
        return 0
    return _iban_prefix(candidate, sep)


def _iban(m: re.Match[str]) -> bool:
    return _iban_end(m) > 0


def _iban_span(m: re.Match[str]) -> int | tuple[int, int]:
    end = _iban_end(m)
    return 0 if end == len(m.group()) else (0, end)


# A country code, 2 check digits and whole groups before a match: inside an IBAN-shaped run that the IBAN pass
# rejected (a wrong check digit); its digit groups (`SC84 IVMU 5900 6195 9676 7696 ...`) may pass Luhn or
# read as a trunk-0 phone by chance.
_IBAN_RUN_BEFORE = re.compile(r"(?<!\w)[A-Za-z]{2}\d\d(?:(?:[ ]{1,2}|-)[A-Za-z0-9]{4}){0,7}(?:[ ]{1,2}|-)$", re.ASCII)


def in_iban_shaped_run(m: re.Match[str]) -> bool:
    return _IBAN_RUN_BEFORE.search(m.string, max(0, m.start() - 48), m.start()) is not None


# --- SSN -------------------------------------------------------------------------------------------------
# One scan for the three layouts (a scan stops at every digit of the text; two would cost twice): dashed,
# spaced (not one group of a longer run of space-separated numbers, a table row), or 9 bare or dotted digits,
# which count only after a cue (`_ssn`).
_SSN = re.compile(r"[0-9](?<![\w.+/-][0-9])\d\d(?:-\d\d-\d{4}(?![\w-]|[./:]\d)"
                  r"|(?<![0-9][ ][0-9]{3})[ ]\d\d[ ]\d{4}(?![\w-]|[./:,]\d|[ ]\d)"
                  r"|(?P<bare>\d{6})(?![\w-]|[./:,]\d)"
                  r"|(?P<dotted>\.\d\d\.\d{4})(?![\w-]|[./:,]\d))", re.ASCII)
# A cue right before the bare digits: `SSN: `, `ssn=`, `SS# `, `Social Security Number is `, `**SSN**: `, `| SSN | `.
_SSN_CUE = re.compile(r"(?i)(?<![a-z])(?:ssn|ss\#|social[ _-]security)(?:[ _-]?(?:number|num|no\.?|\#))?[\"']?"
                      + EMPHASIS + r"?[ \t]*(?:[:=#]|is|was)?(?:(?<=:)" + EMPHASIS + ")?(?:" + CELL_BREAK
                      + r")?[ \t]*[\"']?$", re.ASCII)


def _ssn(m: re.Match[str]) -> bool:
    # After a phone cue a number is a phone (`Tel: 372 12 3456`, Tajikistan's layout), left to the phone pass.
    if phone_cue_before(m, 32) is not None:
        return False
    if (m.group("bare") or m.group("dotted")) and _SSN_CUE.search(m.string, max(0, m.start() - 80), m.start()) is None:
        return False
    return stdnum_ssn.is_valid(re.sub(r"[ .-]", "", m.group()))


# --- other countries' social security numbers -------------------------------------------------------------
# The UK's National Insurance number (`AB 12 34 56 C`: HMRC's prefix letters, never D, F, I, Q, U, V, nor O second;
# not the unissued BG, GB, KN, NK, NT, TN, ZZ; suffix A-D): spaced in pairs anywhere, bare (`AB123456C`) or HMRC's
# specimen `QQ` (a form filled in with it) only after a cue. Canada's Social Insurance Number (`046 454 286`, Luhn,
# first digit 1-7 or 9 by `stdnum.ca.sin`) only after a cue: nine digits alone are anybody's. Both count as `ssn`.
_NINO = re.compile(r"(?:[A-CEGHJ-PR-TW-Z](?<![\w][A-Z])[A-CEGHJ-NPR-TW-Z]|Q(?<![\w]Q)Q)"
                   r"(?:(?P<sp>[ ]?)\d\d(?P=sp)\d\d(?P=sp)\d\d(?P=sp)|[ ]\d{6}[ ])[A-Z](?![\w-])", re.ASCII)
_NINO_PREFIX = "(?:[A-CEGHJ-PR-TW-Z][A-CEGHJ-NPR-TW-Z]|QQ)"
# Its first digit after the prefix letters (and a space): a digit-led scan, as `CountryLed`'s (led by a capital,
# `_NINO` would be tried at every capital of the text).
_NINO_DIGIT = re.compile(rf"[0-9](?:(?<={_NINO_PREFIX}[0-9])|(?<={_NINO_PREFIX} [0-9]))[0-9]", re.ASCII)


class PrefixLed:
    """`sub(repl, text)` like `_NINO`'s, tried only where two prefix letters stand right before a digit."""

    def sub(self, repl: Callable[[re.Match[str]], str], text: str) -> str:
        out, last = [], 0
        for anchor in _NINO_DIGIT.finditer(text):
            start = anchor.start() - (3 if text[anchor.start() - 1] == " " else 2)
            if start < last or (m := _NINO.match(text, start)) is None:
                continue
            out += (text[last:start], repl(m))
            last = m.end()
        return "".join(out) + text[last:] if out else text


_NINO_UNISSUED = frozenset({"BG", "GB", "KN", "NK", "NT", "TN", "ZZ"})
_NINO_CUE = re.compile(r"(?i)(?:\bnino|\bni[ ]?(?:no|number|\#)|(?:national[ _-]insurance|\bssn|social[ _-]security"
                       r"|national[ _-]id)(?:[ _-]?(?:number|no|\#))?)"
                       r"\.?[\"']?[ \t]*(?:[:=#]|is|was)?[ \t]*[\"']?$")
_SIN = re.compile(r"[0-9](?<![\w.+/-][0-9])\d\d(?P<sep>[ -]?)\d{3}(?P=sep)\d{3}(?![\w-]|[./:,]\d)", re.ASCII)
# A SIN cue, then what may stand between it and the number (`SIN #: `, `Social Insurance Number is `): one
# pattern per cue, each led by a literal (a fast scan; an alternation would be tried at every character).
_SIN_TAIL = r"(?i:[ _-]?(?:number|num|no\.?|\#))?[\"']?[ \t]*(?:[:=#]|is|was)?[ \t]*[\"']?"
_SIN_CUES = tuple((gate, re.compile(cue + _SIN_TAIL)) for gate, cue in (
    ("SIN", r"SIN(?<![\w]SIN)(?!\w)"), ("NAS", r"NAS(?<![\w]NAS)(?!\w)"), ("S.I.N.", r"S\.I\.N\.(?<![\w]S\.I\.N\.)"),
    ("nsurance", r"nsurance(?<=[Ss]ocial[ _-][Ii]nsurance)(?<![\w]social[ _-]insurance)(?<![\w]Social[ _-]Insurance)"),
    ("NSURANCE", r"NSURANCE(?<=SOCIAL[ _-]INSURANCE)(?<![\w]SOCIAL[ _-]INSURANCE)"),
    ("ssurance", r"ssurance(?<=[ ]d'assurance)(?=[ ]sociale)[ ]sociale")))


class CuedSin:
    """`sub(repl, text)` like `_SIN`'s, tried only right after each SIN cue: nine digits are everywhere, and a
    scan of every digit would cost as much as the SSN pass."""

    def sub(self, repl: Callable[[re.Match[str]], str], text: str) -> str:
        ends = sorted(cue.end() for gate, pattern in _SIN_CUES if gate in text for cue in pattern.finditer(text))
        out, last = [], 0
        for end in ends:
            if end < last or (m := _SIN.match(text, end)) is None:
                continue
            out += (text[last:m.start()], repl(m))
            last = m.end()
        return "".join(out) + text[last:] if out else text


def _nino(m: re.Match[str]) -> bool:
    # After a cue the field says what it is, even an unissued `ZZ … T` (Faker's); bare, only issuable spaced pairs.
    if _NINO_CUE.search(m.string, max(0, m.start() - 40), m.start()) is not None:
        return True
    return m.group()[:2] not in _NINO_UNISSUED | {"QQ"} and m.group()[-1] in "ABCD" and bool(m.group("sp"))


def _sin(m: re.Match[str]) -> bool:
    return stdnum_sin.is_valid(m.group())


# --- obfuscated emails -----------------------------------------------------------------------------------
_LOCAL = r"[A-Za-z0-9](?<![\w.+%-][A-Za-z0-9])(?:[A-Za-z0-9._%+-]{0,62}[A-Za-z0-9_%+-])?"
_LABEL = r"[A-Za-z0-9](?:[A-Za-z0-9-]{0,61}[A-Za-z0-9])?"
# The bracketed words in German, French, Spanish, Italian too (`[ät]`, `[arobase]`, `[arroba]`, `(chiocciola)`,
# `[punkt]`, `[point]`, `[punto]`), and German's `(a)` glued between the two parts (`max.mustermann(a)web.de`)
_AT_WORD = r"(?:[Aa][Tt]|@|[Ää][Tt]|(?i:arobase|arroba|chiocciola|klammeraffe))"
_AT_BRACKETED = rf"[ \t]*[\[({{<][ \t]*{_AT_WORD}[ \t]*[\])}}>][ \t]*|(?<=[A-Za-z0-9])\([Aa]\)(?=[A-Za-z0-9])"
_DOT_BRACKETED = r"[ \t]*[\[({<][ \t]*(?:[Dd][Oo][Tt]|\.|(?i:punkt|point|punto|kropka|ponto))[ \t]*[\])}>][ \t]*"
_EMAIL_OBFUSCATED = re.compile(
    rf"(?P<local>{_LOCAL})(?P<at>{_AT_BRACKETED}|[ \t]+AT[ \t]+|@)"
    rf"(?:{_LABEL}(?:{_DOT_BRACKETED}|[ \t]+DOT[ \t]+|\.))+[A-Za-z]{{2,24}}(?![\w-]|[ \t]*[\[({{<][ \t]*[Dd][Oo][Tt])",
    re.ASCII)
# A pass of its own, after the others: a rejected lower-case match (`Reach me at Ann.Lee`) would otherwise hold the
# span of an address in another form (`Ann.Lee AT example DOT com`)
_EMAIL_SPELLED = re.compile(rf"(?P<local>{_LOCAL}(?:[ \t]+dot[ \t]+{_LOCAL})*)(?P<at>[ \t]+at[ \t]+)"
                            rf"(?:{_LABEL}(?:[ \t]+dot[ \t]+|\.))+[A-Za-z]{{2,24}}(?![\w-]|[ \t]+at[ \t])",
                            re.ASCII)
# A spelled local part's piece and its `dot` right before where the walk back stopped (`jane dot ` of
# `jane dot doe at …`); an address never goes on with ` at ` (`me at jane dot doe at …` is no address: the one
# after it is)
_SPELLED_PIECE = re.compile(r"(?<![\w.+%-])[A-Za-z0-9][A-Za-z0-9._%+-]{0,30}[ \t]+dot[ \t]+$", re.ASCII)
_SPELLED_AT = (re.compile(r"at(?<= at)(?=[ \t])"),)
_DOT_WORD = re.compile(r"[ \t]DOT[ \t]")
_OBFUSCATED_DOT = re.compile(rf"{_DOT_BRACKETED}|[ \t]DOT[ \t]")
# The lower-case word form (`ann at example dot com`) is English too (`look at the dot com bubble`): an address
# only right after an email cue in its clause (`Email: `, `write to `, `e-mail me at `), or, without one, with the
# `dot` word and a local part no word has (`jane.doe`, `jsmith42`, `jane dot doe`) or a webmail provider's domain
# (`jsmith at gmail dot com`); never a pronoun or an article (`contact us at`, `at the dot com`). (`<EMAIL>`, a
# scrubbed address before, is no cue.)
_EMAIL_CUE = re.compile(r"(?i:(?<!<)\be-?mail|\bmail[ ]?(?:to|me)\b|\bwrite[ ]to|\breach[ ]me|\bcontact(?:[ ]me)?\b)"
                        r"[^\n.;!?]{0,40}$")
# Its last label, spelled out: a country's two letters or a generic TLD people write (`meet bob at noon dot sharp`
# has none)
_GLUED_TLDS = frozenset("com org net edu de at ch fr es it nl be pl eu info biz io co uk".split())
_SPELLED_TLDS = frozenset("com org net edu gov mil int io info biz name pro mobi app dev ai co".split())
_MAIL_PROVIDERS = frozenset("gmail googlemail yahoo ymail hotmail outlook live msn aol icloud proton protonmail gmx "
                            "posteo yandex qq naver hanmail fastmail zoho tutanota comcast btinternet libero".split())
_NO_LOCAL = frozenset("me us you him her them it i we they the a an this that our my your his their its".split())
_SPELLED_DOT = re.compile(r"[ \t]dot[ \t]")
# An article or possessive right before the local part, or one word before it (`the form at`, `our web form at`)
_NOUN_PHRASE = re.compile(r"(?i)\b(?:the|a|an|our|your|my|this|that|their|its)[ \t]+(?:[a-z-]+[ \t]+)?$")
# Where an obfuscated address can be: its `at`, bracketed, an `AT` word, or `@` (`ann@example[dot]com`).
# Three patterns, not one alternation: each is found by a faster scan (a literal, or a first-character set);
# their alternation defeats both (20 ms on 1.3 MB of code against 8).
_AT_ANCHORS = tuple(re.compile(p) for p in (rf"[\[({{<][ \t]*{_AT_WORD}[ \t]*[\])}}>]", "@", r"AT(?<= AT)(?=[ \t])",
                                             r"\([Aa]\)(?<=[A-Za-z0-9]\([Aa]\))(?=[A-Za-z0-9])"))
LOCAL_CHARS = frozenset(string.ascii_letters + string.digits + "._%+-")


# Chinese, Japanese and Korean letters (ideographs, kana, Hangul): those scripts glue the word before an address to
# its local part (`请联系zhang.wei@qq.com`, `メールはtaro.yamada@example.co.jp`).
_UNSPACED = re.compile("[\u1100-\u11ff\u3040-\u30ff\u3130-\u318f\u3400-\u4dbf\u4e00-\u9fff\uac00-\ud7af"
                       "\uf900-\ufaff\uff66-\uff9f\U00020000-\U0003134f]")


def glued_to_latin(text: str, at: int) -> bool:
    """A CJK letter right before `at` and an ASCII character at `at`: where an unspaced word meets a local part."""
    return text[at].isascii() and not text[at - 1].isascii() and _UNSPACED.match(text, at - 1) is not None


class Anchored:
    """`sub(repl, text)` like a pattern's, for an address pattern led by its local part, tried only where its
    `anchors` (the `at`) occur: the pattern starts at the local part, found by walking back from the anchor over
    up to 64 local-part characters (and the spaces before a bracketed `at`). Run as a plain `re.sub`, a pattern
    led by the local part is tried at every word of the text (the plain email pass cost 50 ms of the 460 ms
    that `scrub_pii` takes on 1.3 MB of the standard library's code; anchored, a few).

    With `unicode`, the local part may hold any letter or digit (`jörg@`, `用户@`), and the walk itself finds
    its start: it stops at 64 characters (in unspaced CJK prose the "word" before `@` is the whole sentence)
    and at a CJK letter before an ASCII one (`glued_to_latin`: `请联系zhang.wei@`), and steps over leading `.+%-'`,
    which cannot open a local part (an apostrophe can be inside one, `o'brien@`, or quote it, `'ann@x.io'`); the
    pattern then has no lookbehind.

    `quoted(text, at, floor)`, when given, reads an address whose local part is quoted (`"john doe"@x.io`) at an
    anchor right after a `"`, not before `floor`: the same scan of anchors finds both."""

    def __init__(self, anchors: tuple[re.Pattern[str], ...], pattern: re.Pattern[str], spaces: bool,
                 unicode: bool = False, quoted: Callable[[str, int, int], re.Match[str] | None] | None = None,
                 spelled: bool = False):
        self.anchors, self.pattern, self.spaces, self.unicode = anchors, pattern, spaces, unicode
        self.quoted, self.spelled = quoted, spelled

    def sub(self, repl: Callable[[re.Match[str]], str], text: str) -> str:
        out, last = [], 0
        for anchor in heapq.merge(*(a.finditer(text) for a in self.anchors), key=lambda a: a.start()):
            start = anchor.start()
            if start < last:
                continue
            while self.spaces and start > last and text[start - 1] in " \t":
                start -= 1
            floor = max(last, start - 64)
            while start > floor and (text[start - 1] in LOCAL_CHARS or self.unicode and
                                     (text[start - 1].isalnum() or text[start - 1] == "'")):
                if self.unicode and start < anchor.start() and glued_to_latin(text, start):
                    break
                start -= 1
            while self.unicode and start < anchor.start() and text[start] in ".+%-'":
                start += 1
            if self.unicode and text[start - 1:start] == "=":
                start = _bounce_start(text, start, floor)
            if text[start - 1:start] == "\\" and (escape := _ESCAPE.match(text, start, anchor.start())):
                start = escape.end()        # the string's escape before the address (`"\njane@…"`, `\u003cjane@…`)
            while self.spelled and (before := _SPELLED_PIECE.search(text, max(last, start - 48), start)):
                start = before.start()          # `jane dot doe at …`: the local part's pieces before a `dot`
            if self.quoted is not None and text[start - 1:start] == '"' and start == anchor.start():
                m = self.quoted(text, start, last)
            else:
                m = self.pattern.match(text, start)
            if m is None or m.start("at") > anchor.start():
                continue
            out += (text[last:m.start()], repl(m))
            last = m.end()
        return "".join(out) + text[last:] if out else text


_ESCAPE = re.compile(r"u[0-9A-Fa-f]{4}|x[0-9A-Fa-f]{2}|[ntr]")
_BOUNCE_LOCAL = re.compile(r"[A-Za-z0-9][A-Za-z0-9._%+=-]*\+[A-Za-z0-9._%+=-]*=|SRS[01]=[A-Za-z0-9._%+=-]*=", re.I)


def _bounce_start(text: str, start: int, floor: int) -> int:
    """Where a local part holding `=` starts: a VERP or SRS bounce address's (`bounces+ann=example.org@`,
    `ticket+8841-ann=example.org@`, `SRS0=HHH=TT=example.org=ann@`), whose local part before the `=` has a `+`
    (or is SRS's); else `start` (`?email=ann@`, `user=ann@`: a pair's name is no part of the address)."""
    first = start - 1
    while first > floor and (text[first - 1] in LOCAL_CHARS or text[first - 1] == "="):
        first -= 1
    return first if _BOUNCE_LOCAL.fullmatch(text, first, start) else start


def _email_obfuscated(m: re.Match[str]) -> bool:
    at = m.group("at").strip(" \t")
    domain = m.string[m.end("at"):m.end()]
    if at == "AT":                      # the word form: a DOT word too, and not all-capitals shouting
        local = m.group("local")
        return _DOT_WORD.search(domain) is not None and (local.upper() != local or any(c.isdigit() for c in local))
    if at == "@":
        return _OBFUSCATED_DOT.search(domain) is not None
    if at in ("(a)", "(A)"):            # glued `(a)`: code calls look alike (`f(a)obj.method`), so a mail TLD only
        return re.split(r"[^A-Za-z]+", domain)[-1].lower() in _GLUED_TLDS
    return True                         # a bracketed `at` is never prose


def _spelled_out(m: re.Match[str]) -> bool:
    """The lower-case word form: see `_EMAIL_CUE`."""
    domain = m.string[m.end("at"):m.end()]
    local, first = m.group("local"), re.split(r"[ \t.]", domain.strip(" \t"), maxsplit=1)[0]
    tld = re.split(r"[ \t.]", domain)[-1].lower()
    pieces = re.split(r"[ \t]+dot[ \t]+", local.lower())       # `jane dot doe`: each piece a name, none `the`
    if any(piece in _NO_LOCAL for piece in pieces) or first.lower() in _NO_LOCAL or local.isdigit() or \
            not (len(tld) == 2 or tld in _SPELLED_TLDS):
        return False
    if _NOUN_PHRASE.search(m.string, max(0, m.start() - 32), m.start()):
        return False                    # `the contact form at example dot com`: a thing's name, not a local part
    if _EMAIL_CUE.search(m.string, max(0, m.start() - 48), m.start()):
        return True                     # (the pattern has the domain's `.` or `dot` already)
    return _SPELLED_DOT.search(domain) is not None and (first.lower() in _MAIL_PROVIDERS or
                                                         _SPELLED_DOT.search(local) is not None or re.fullmatch(
        r"[a-z]+(?:[._+-]?[a-z0-9]+)*", local) is not None and re.search(r"[._+-]|[a-z]\d", local) is not None)


# (kind, pattern, validator, group (0, an index, or a function of the match giving one or a span), hint)
ID_PASSES = (
    ("email", Anchored(_AT_ANCHORS, _EMAIL_OBFUSCATED, spaces=True), _email_obfuscated, 0, bool),
    ("email", Anchored(_SPELLED_AT, _EMAIL_SPELLED, spaces=True, spelled=True), _spelled_out, 0, bool),
    ("iban", CountryLed(), _iban, _iban_span, bool),
    ("ssn", _SSN, _ssn, 0, bool),
    ("ssn", PrefixLed(), _nino, 0, bool),
    ("ssn", CuedSin(), _sin, 0, bool),
)
