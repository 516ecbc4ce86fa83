"""Phone numbers for `tasks.data.privacy.pii`: the two phone passes and their validators.

`PHONE_PASSES` has the shape of `pii`'s pass table: `(kind, pattern, validator(match), group to replace, cheap
test that the pass can match)`. `pii.scrub_pii` runs them last, after cards, IBANs, SSNs and IP addresses have
taken their digits.

- After a phone cue (`Phone:`, `tel.`, `cell #`, `call me at`, `"mobile": "`, `Telefon`, `tél`, `móvil`,
  `手机`, `電話`, ...), any run of digit groups is a phone: 7-15 digits (E.164's limit, counted after an exit
  code) bare or grouped by spaces, dots, dashes, a slash or parentheses (`Phone: 7439409910532`, `tel. 792 601
  815`, `Tel: (351) 968 301 661`, `Tel: (06 1) 234 5678`), 5-6 after a labelled phone word (`Tel: 40123`,
  small countries' numbers); 9 or more after a word that also means other things (`text`, `cell`, `SMS`); not a
  date, a dotted quad, a decimal or an SSN/ZIP+4 layout.
- Without a cue, a phone's layout: a `+` or `00` country code (or the exit codes `011`, Japan's `010` and
  Australia's `0011`; `+` and 7-9 bare digits only when they open with a calling code); US `(202) 555-0143`, `202-555-0143`,
  `202.555.0143` (any digits: test and fictional numbers are written that way), three bare groups with real
  NANP digits (`917 555 1234`); India's mobiles in their 5-5 layout
  (`98765 43210`, led by 6-9) and China's in 3-4-4 (`138 0013 8000`, `138-0013-8000`, led by 13-19);
  national numbers led by a trunk `0` with separators (`020 7946 0958`,
  `(0686)-815726`, `(03).6018.1590`, `0664/12345678`, `08-26 01 81`, an area code's own `030/4000 1234`,
  `011-2345 6789`, `0221 / 98 76 54`) or bare (`01154960930`, not digit runs like `0123456789`, zero-padded
  ids or ISBN-10s), but not a member of a row of pairs or fours (`pii_phonerows`: a hex dump, a lottery draw);
  a German direct-dial digit after one led by `+` or `0` (`(030) 901820-0`); Brazil's `(11) 91234-5678` and
  `69 0105-3118` (a real two-digit area code, not a page range like `45 1234-1240`); Japan's `24-7109-9987`.
  Bare digits without a cue or a trunk 0 (`2125550147`, `15526018159`) are left: they cannot be told from ids,
  counts, timestamps.
- Rejected whatever the layout: ISO 6709 coordinates (`+40.6894-074.0447`), fewer than 3 distinct digits, an
  SSN's `AAA-GG-SSSS`, a ZIP+4, digit groups inside an IBAN-shaped run.
"""

from __future__ import annotations

import re
from typing import Callable

from stdnum import isbn as stdnum_isbn

from tasks.data.privacy.pii_chain import Chained
from tasks.data.privacy.pii_cues import phone_cue_before
from tasks.data.privacy.pii_ids import in_iban_shaped_run
from tasks.data.privacy.pii_phonerows import in_number_row
from tasks.data.privacy.pii_vanity import VANITY_PASSES

# The first character is consumed, then a two-character lookbehind checks what precedes it: a pattern opening
# with a character class lets `re` skip non-candidates in C (see pii.py). Backreferences are named: the
# layout markers (`br`, `jp`, `ru`, `se`, `in`, `cn`) are named groups too and would shift numbered ones.
_PHONE = re.compile(r"""(?xa)
    [+(0-9](?<![\w+.-].)(?<!\d[ ./-].)     # first character; nothing word-like or number-like before it
    (?:
        (?<=\+)\d{1,3}(?:[ .-]?\(\d{1,4}\))?(?:(?:[ .-]|[ ]?/[ ]?)?\d{1,6}){0,5}[ .-]?\d{2,6}   # +44 20 7946 0958
      | (?<=\()\+\d{1,3}\)(?:[ .-]?\(0\))?(?:[ .-]?\d{1,6}){0,5}[ .-]?\d{2,6}   # (+44) 20 7946 0958
      | (?<=\+)\(\d{1,3}\)(?:[ .-]?\d{1,6}){0,5}[ .-]?\d{2,6}                  # +(370) 42323221
      | (?<=\()\d{3}\)[ ]?\d{3}[ .-]\d{4}                           # (202) 555-0143
      | (?<=\()(?P<br_area>[1-9])[1-9]\)[ ]?9?\d{4}-\d{4}         # (11) 91234-5678 (Brazil)
      | (?<=1)[ .-]?\(\d{3}\)[ ]?\d{3}[ .-]\d{4}                    # 1 (202) 555-0143
      | (?<=1)(?P<s1>[.-])\d{3}(?P=s1)\d{3}(?P=s1)\d{4}           # 1-202-555-0143
      | (?<=\d)\d\d(?P<s2>[.-])\d{3}(?P=s2)\d{4}                  # 202-555-0143, 202.555.0143
      | (?<=\d)\d\d[ ]\d{3}[ ]\d{4}(?![ ]\d)                        # 212 555 0147 (NANP digits only)
      | (?<=[1-9])(?P<br>[1-9])[ ]9?\d{4}-\d{4}                   # 11 91234-5678 (Brazil)
      | (?<=\d)(?P<jp>\d)-\d{4}-\d{4}                             # 24-7109-9987 (Japan)
      | (?<=8)(?P<ru>[ ])(?:\(\d{3}\)|\d{3})[ ]\d{3}               # 8 (495) 123-45-67 (Russia)
        (?:[ -]\d{4}|(?P<s4>[ -])\d\d(?P=s4)\d\d)
      | (?<=0)0[ ]?[1-9]\d{0,2}(?:[ .-]?\(0\)[ ]?\d{1,6})?       # 0033 6 12 34 56 78, 0049 (0) 89 / 12 34 56
        (?:(?:[ .-]|[ ]?/[ ]?)\d{1,9}){0,5}[ .-]\d{2,9}
      | (?<=0)(?:11|10|011)[ .-]\d{1,3}(?:[ .-]\d{1,9}){0,5}[ .-]\d{2,9}   # 011 33 1 23 45 67 89 (from the US,
                                                                      # 010 from Japan, 0011 from Australia)
      | (?<=\()0\d{1,4}\)[ .-]?\d{2,8}(?:[ .-]\d{2,8}){0,3}       # (020) 7946 0958, (0686)-815726
      | (?<=0)(?P<se>\d{1,3})-\d{2,3}(?:[ ]\d{2,3}){1,3}          # 08-26 01 81 (Sweden)
      | (?<=0)\d{1,4}[ ]?[/-][ ]?\d{2,8}(?:[ ]\d{2,8}){1,4}        # 030/4000 1234, 011-2345 6789, 010 - 123 45 67
      | (?<=0)(?P<de>\d{1,4})[ ]\d{3,8}-\d{2,5}                 # 089 4140-2217 (a German extension)
      | (?<=0)\d{1,4}(?P<s3>[ .-])\d{2,8}(?:(?P=s3)\d{2,8}){0,4}  # 020 7946 0958, 01 23 45 67 89
      | (?<=0)\d{1,4}/\d{5,9}                                     # 0664/12345678 (Austria, Germany)
      | (?<=[6-9])(?P<in>\d{4})[ ]\d{5}(?![ ]\d)                     # 98765 43210 (India's mobiles)
      | (?<=1)(?P<cn>[3-9])\d(?P<s5>[ -])\d{4}(?P=s5)\d{4}(?![ -]\d)   # 138 0013 8000 (China's mobiles)
      | (?<=\d)\d{9,10}                                           # 01154960930
    # an extension: x157, ext. 5, Ext: 2204, int. 231 (Swiss, Italian), Germany's -0
    )(?:[ ]?(?:x|[Ee]xt(?:n|ension)?[.:]?|EXT[.:]?|[Ii]nt\.|interno)[ ]?\d{1,6}|-\d)?
    (?!\w|[.-]?\d|[\u2010-\u2015\u2212\ufe58\ufe63]\d)          # (a dash then digits: the number goes on)""")
# The same shape right after a phone and one space: a space-separated list of numbers, whose members the
# "nothing number-like before it" look-behind would otherwise let through one per round (16 rounds: 16 phones).
_PHONE_NEXT = re.compile(_PHONE.pattern.replace(r"(?<!\d[ ./-].)", "", 1))
_EXTENSION = re.compile(r"[ ]?(?:x|[Ee]xt(?:n|ension)?[.:]?|EXT[.:]?|[Ii]nt\.|interno)[ ]?\d{1,6}$")

# A number never ends before a dash that is no ASCII hyphen and a digit (`(318) 397–2146`, an en dash): the part
# before it would be replaced and the rest, with any extension, left as it was. (The hyphens that mean `-` are read
# as `-`, `pii_width`; this keeps a number written with another dash whole.)
# A run of digit groups for the cued pass. Atomic: every group is taken whole and never given back, so a long
# row of digits or separators costs one linear scan (the validator decides). The lookahead (four more digits,
# a few separators apart) drops, in C, the short numbers code is full of.
_CUED = re.compile(r"""(?xa)
    [+(0-9](?<![\w+.-].)
    (?=(?:[ ()./-]{0,3}\d){4})
    (?>
        # a `)` closes only its own `(`: in `(tel:+4930886)` or `[Call](tel:+4930886)` it is the link's
        (?:(?<=\()\+?\d{1,4}(?:[ -]\d{1,4})?\) | (?<=\+)(?:\(\d+\)|\d+) | (?<=\d)\d*)   # (06 1), (0-612), +(370)
        # between groups: a dash, a dot (`. `: a full stop), one or two spaces, a slash (`030 / 1234 5678`, German)
        (?:(?:[ ]?-[ ]?|\.|[ ]{1,2}|[ ]?/[ ]?)?\(\d{1,5}\) | (?:[ ]?-[ ]?|\.|[ ]{1,2}|[ ]?/[ ]?)\d+ | (?<=\))\d+)*
        (?:[ ]?(?:x|[Ee]xt(?:n|ension)?[.:]?|EXT[.:]?|[Ii]nt\.|interno)[ ]?\d{1,6})?
    )
    (?!\w|[\u2010-\u2015\u2212\ufe58\ufe63]\d)""")
_NANP = re.compile(r"(?:\+?1\D*)?\(?[2-9]\d\d\D*[2-9]\d\d\D*\d{4}", re.ASCII)
_ISBN_BEFORE = re.compile(r"(?i)isbn(?:-10)?[\s:#]*$")
# `AAA-GG-SSSS` is an SSN's layout, no phone's: valid SSNs are gone by now (`pii_ids`), invalid ones
# (`000-12-3456`, the advertised fake 078-05-1120) are nobody's number and stay; after a phone cue it is a phone
# (Tajikistan's `372 12 3456`), which the SSN pass left alone.
_SSN_SHAPED = re.compile(r"\d{3}([ -])\d\d\1\d{4}")
_ZIP4 = re.compile(r"\d{5}-\d{4}")           # a US ZIP+4 code (`02171-2110`), not a trunk-0 phone
# What a cue may precede that is no phone: dates, years (`contact 2019-2022`), a dotted quad (a private address
# the IP pass kept), a decimal (but `1234.5678` is Australia's layout).
_NOT_CUED = re.compile(r"\d{4}([-./])\d\d?\1\d\d?|\d\d?([-./])\d\d?\2\d{4}|\d{1,3}(?:\.\d{1,3}){3}"
                       r"|(?:19|20)\d\d[ ]?[-/][ ]?(?:19|20)\d\d|(?!\d{4}\.\d{4}$)\d+\.\d+")
_CODE_GOES_ON = re.compile(r"-[^\W\d_]")
# A code's label right before an uncued number (`SKU 161-320-6005`, `NDC 08902-228-42`, `Order #054-3372900`,
# `Meeting ID: 188 7720 8045`, `Numero d'ordine: 054-3372900`, `注文番号：001-5766949`): product, order, ticket and
# meeting numbers are printed in phones' layouts, one or a list (`Items 0123 4567 8901`).
_CODE_LABEL = re.compile(
    r"(?i)(?:\b(?:sku|ndc|upc|ean|gtin|asin|mpn|part|item|article|art|order|invoice|ticket|case|ref|reference"
    r"|tracking|serial|model|meeting|webinar|booking|reservation|confirmation|transaction|txn|batch|lot"
    r"|bestell|auftrags|rechnungs|artikel|commande|facture|pedido|ordine|ordem|orden|factura|fattura)s?"
    r"(?:[ .-]*(?:id|no|nr|number|num|code|nummer|numero|número|n[°º]))?"
    r"|\b(?:n[uú]mero|nummer)[ ]d(?:[eo]l?[ ]|')?(?:la[ ])?(?:pedido|ordine|ordem|orden|commande|factura|fattura)"
    r"|注文番号|订单号|訂單號|订单编号|주문번호|商品番号|品番|型番)"
    r"\.?[ \t]*[:#：]?[ \t]*#?$")
# ISO 6709's latitude and longitude in decimal degrees (`+40.6894-074.0447`, the Statue of Liberty): signed
# decimals, two digits then three before their points, no `+CC` phone's groups.
_ISO6709 = re.compile(r"\+\d\d\.\d+[+-]\d{3}\.\d+")
_DIRECT_DIAL = re.compile(r"\d-\d$")
_DE_EXTENSION_YEARS = re.compile(r"(?:19|20)\d\d-(?:19|20)?\d\d$")
_YYYYMMDD = re.compile(r"(?:19|20)\d\d(?:0[1-9]|1[0-2])(?:0[1-9]|[12]\d|3[01])")


def _no_phone_layout(m: re.Match[str], text: str, digits: str, cued: bool = False) -> bool:
    """Too few distinct digits, a ZIP+4, an IBAN-shaped run's groups, or (without a cue: after one, the SSN pass
    left it as a phone) an SSN's layout."""
    return len(set(digits)) < 3 or not cued and _SSN_SHAPED.fullmatch(text) is not None \
        or _ZIP4.fullmatch(text) is not None or in_iban_shaped_run(m)


def _cued_phone(m: re.Match[str]) -> bool:
    """A run of digit groups right after a phone cue: 8-15 digits, or 7 as `555-0143`; 9 or more after a cue
    word that also names other things (`text`, `cell`, `SMS`, `pH`, ...) unless a `:`, `#` or `no` makes it a
    label; never a list of quantities (`number_list`)."""
    cue = phone_cue_before(m, 32)           # first: most numbers have no cue, and this test is the cheapest
    if cue is None:
        return False
    text = _EXTENSION.sub("", m.group())
    digits = _without_exit_code(text, re.sub(r"\D", "", text))
    if not 5 <= len(digits) <= 15 or _no_phone_layout(m, text, digits, cued=True) \
            or _NOT_CUED.fullmatch(text) \
            or _YYYYMMDD.fullmatch(text) or number_list(text):
        return False
    if _WEAK_CUE.search(cue) is not None:
        return len(digits) >= 9
    # Small countries' and territories' numbers have 5-7 digits (libphonenumber's examples: the Falklands'
    # `51234`, Andorra's `312 345`, Cape Verde's `991 12 34`): after a phone word and a label's mark, or a
    # `call me at`; not after `Text:`, `SMS:`, `Contact:` (a short code, a ticket).
    return len(digits) >= 7 or _LABELLED_CUE.search(cue) is not None and _NOT_A_LINE.search(cue) is None


# A cue word that also means something else (`text 2019`, `cell 1024`, `SMS 160`, `pH 6`, `mobile 1080`, `GSM 850`)
# standing alone, without a label's `:`, `#` or `no` after it.
_NOT_A_LINE = re.compile(r"(?i)\b(?:text|sms|gsm|ph|dial|contact)\b")
_LABELLED_CUE = re.compile(r"(?i)[:：#=]|\b(?:at|on|no|nr|number|num|#)[\s.\"'=:>-]*$|[电電机機帯先式화폰☎📞]")
# `is`/`was` after a word that names no phone keeps it weak (`the text is 1234567 characters`); after one that
# does, it names the number (`My cell is 555-1234`).
_WEAK_CUE = re.compile(r"(?i)\b(?:(?:text|sms|gsm|ph|dial|contact)(?:\s+(?:is|was))?|handy|mob|mobile|cell|call|fax)"
                       r"[\s\"'=)\]>,-]*$")


def number_list(text: str) -> bool:
    """Digit groups that read as a list of quantities, not one number's parts: two or more years (`1987 1992
    2001`), three single digits (`1 2 3 4`), decimals (`3.1 3.2`), or groups split by `/` (`850/900/1800`,
    `1920/1080`) unless led by a trunk 0 (`0664/12345678`) or one area code before 6 digits or more (Hungary's
    `(42)/323-2218`, `65/651 5947`)."""
    groups = re.findall(r"\d+", text)
    if len(groups) < 2:
        return False
    if sum(len(g) == 4 and g[:2] in ("19", "20") for g in groups) >= 2 or sum(len(g) == 1 for g in groups) >= 3:
        return True
    if "/" in text and not text.lstrip("(+").startswith("0"):
        return text.count("/") > 1 or len(re.sub(r"\D", "", text.split("/")[1])) < 6
    return re.search(r"\d\.\d+[ ]+\d+\.\d", text) is not None


# The US's and Japan's international prefixes (`011`, `010`; Australia's `0011` reads as `00` + `11`).
_EXIT_CODE = re.compile(r"01[01][ .-]")


def _without_exit_code(text: str, digits: str) -> str:
    """The digits after an international prefix (`00`, or `011`/`010` before a separator and more than 7
    digits): E.164's 15-digit limit counts from the country code."""
    if text.startswith("00"):
        return digits[2:]
    return digits[3:] if _EXIT_CODE.match(text) and len(digits) > 10 else digits


def _phone(m: re.Match[str]) -> bool:
    # `SKU 555-123-4567-B`: a code in a phone's unspaced layout goes on with `-` and a letter (a leading `-` is
    # the pattern's look-behind); not asked of a spaced layout, whose last group a shorter match would then expose
    if " " not in m.group() and _CODE_GOES_ON.match(m.string, m.end()):
        return False
    if _CODE_LABEL.search(m.string, max(0, m.start() - 32), m.start()):
        return False
    text = _EXTENSION.sub("", m.group())
    digits = re.sub(r"\D", "", text)
    # A German direct-dial digit (`(030) 901820-0`, `+49 89 123456-0`): after a number led by `+` or a trunk 0
    # whose groups are no dashed layout's (`202-555-0143-1` is a code)
    if _DIRECT_DIAL.search(text) and ("-" in text[:-2] or not text.lstrip("(").startswith(("+", "0"))):
        return False
    # E.164's 15 digits count from the country code (`0011 971 50 123 4567` from Australia has 16)
    if not 7 <= len(_without_exit_code(text, digits)) <= 15 or _no_phone_layout(m, text, digits):
        return False
    if text.startswith(("+", "(+")):
        separators = re.sub(r"[\d+]", "", text)
        if separators == "." or _ISO6709.fullmatch(text):   # +3.140000 is a signed decimal
            return False
        return len(digits) >= 10 or separators != "" or _short_international(digits)
    if m.group("br") or m.group("br_area"):
        return not _page_range(text)
    if m.group("ru") or m.group("jp") or m.group("in") or m.group("cn"):
        return True
    if m.group("de"):                       # `01 2019-2020`: an issue and its years, not a switchboard
        return _DE_EXTENSION_YEARS.search(text) is None and 9 <= len(digits) <= 13 and not in_number_row(m, text)
    if m.group("se"):
        return 8 <= len(digits) <= 12
    if text.isdigit():
        return _bare_phone(m, digits)
    # International prefixes, like `+`: 001-612-799-7220 (no country code starts with 0: `0001 2345`); `011` with
    # seven digits after it is a trunk 0 and an area code (Ethiopia's, Saudi Arabia's `011 234 5678`).
    if text.startswith("00") or _EXIT_CODE.match(text) and len(digits) > 10:
        national = _without_exit_code(text, digits)
        return national[:1] != "0" and (8 <= len(national) <= 15 or _short_international(national))
    if text.startswith(("0", "(0")):
        return 9 <= len(digits) <= 13 and not in_number_row(m, text)
    if " " in text and "(" not in text:     # `212 555 0147`: three bare groups, real NANP digits only
        return _NANP.fullmatch(text) is not None
    # Dashes, dots or a parenthesised area code are a phone's layout whatever the digits: test, fictional and
    # generated numbers (`555-123-4567`, `(123) 456-7890`, Faker's `120-405-6086 x569`) are written that way.
    return True


# ITU-T E.164 country calling codes of two and three digits (libphonenumber's list; 1 and 7 lead 10-digit national
# numbers). They are a prefix code: no code starts another.
_CALLING_CODES = frozenset("""
20 211 212 213 216 218 220 221 222 223 224 225 226 227 228 229 230 231 232 233 234 235 236 237 238 239 240 241 242
243 244 245 246 247 248 249 250 251 252 253 254 255 256 257 258 260 261 262 263 264 265 266 267 268 269 27 290 291
297 298 299 30 31 32 33 34 350 351 352 353 354 355 356 357 358 359 36 370 371 372 373 374 375 376 377 378 380 381
382 383 385 386 387 389 39 40 41 420 421 423 43 44 45 46 47 48 49 500 501 502 503 504 505 506 507 508 509 51 52 53
54 55 56 57 58 590 591 592 593 594 595 596 597 598 599 60 61 62 63 64 65 66 670 672 673 674 675 676 677 678 679 680
681 682 683 685 686 687 688 689 690 691 692 800 808 81 82 84 850 852 853 855 856 86 870 878 880 881 882 883 886 888
90 91 92 93 94 95 960 961 962 963 964 965 966 967 968 970 971 972 973 974 975 976 977 979 98 992 993 994 995 996 998
""".split())


def _short_international(digits: str) -> bool:
    """`+` and 7-9 bare digits (or 7 after `00`): a small country's or territory's number in E.164 (`+24740123`
    Ascension, `+6837012` Niue, `+468123456` Sweden) when it opens with a calling code and its national part is
    no round figure (`+2500000` is a signed count)."""
    code = next((digits[:n] for n in (2, 3) if digits[:n] in _CALLING_CODES), None)
    return code is not None and len(set(digits[len(code):])) >= 3


def _page_range(text: str) -> bool:
    """`45 1234-1240`: a volume and its pages (or years) in a citation, not Brazil's `45 1234-5678`."""
    first, last = text[-9:].split("-") if text[-10:-9] == " " else ("", "")
    return first.isdigit() and 0 < int(last) - int(first) < 200


def _bare_phone(m: re.Match[str], digits: str) -> bool:
    """Ten or eleven bare digits: a national number led by a single trunk 0 (`01154960930`, `0492807302`), unless
    it reads as a digit run (`0123456789`) or an ISBN-10; after a phone cue, the cued pass has taken them."""
    if phone_cue_before(m, 24) is not None:
        return len(digits) == 10 or digits[0] in "01"
    if digits[0] != "0" or digits[1] == "0" or len(set(digits)) < 4 or digits in "01234567890" or \
            digits in "09876543210":
        return False
    if _ISBN_BEFORE.search(m.string, max(0, m.start() - 12), m.start()):
        return False
    return len(digits) == 11 or not stdnum_isbn.is_valid(digits)  # ten digits: not an ISBN-10


class Listed(Chained):
    """`sub(repl, text)` like `_PHONE`'s, where a phone that was replaced also takes the number right after it
    (one space between, `_PHONE_NEXT`), and that one the next: a whole list in one round; a phone glued or after
    a slash as `pii_chain.Chained` takes it (not after a comma: `...0143,378282246310005` is a card, for the
    round's card pass)."""

    def __init__(self) -> None:
        super().__init__(_PHONE, "/", _cued_first)

    def next_value(self, text: str, at: int, before: str) -> tuple[re.Match[str], int] | None:
        if text.startswith(" ", at) and (n := _PHONE_NEXT.match(text, at + 1)):
            return n, 0
        return super().next_value(text, at, before)


def _cued_first(window: str, at: int) -> bool:
    """A number the cued pass, which runs first in a round, takes (maybe longer than the layout pass would)."""
    cued = _CUED.match(window, at)
    return cued is not None and _cued_phone(cued)


# A number in a link: WhatsApp's `wa.me/5511987654321` and `api.whatsapp.com/send?phone=...` (E.164 without its
# `+`), a query parameter that names a phone (`?phone=`, `&tel=`, `&msisdn=`), and a `+` percent-encoded anywhere
# in a URL (`?to=%2B4915112345678`): the layouts above need the `+` or separators a URL never has. Its groups may
# be split by an encoded space, `%20` or a form's `+` (`?phone=%2B1%20415%20231%205414`, `q=call+%2B1+415+231+5414`).
_IN_LINK = re.compile(r"(?i)(?:(?<![\w.-])wa\.me/|api\.whatsapp\.com/send/?\?(?:[\w.%-]+=[^&\s]*&)*phone="
                      r"|[?&](?:phone|tel|mobile|msisdn|phone_?number)=)"
                      r"(?P<number>(?:%2B|\+)?[1-9]\d{0,14}(?:(?:%20|\+|-)\d{1,14}){0,6})(?![\w%])"
                      r"|(?P<encoded>%2B[1-9]\d{0,14}(?:(?:%20|\+)\d{1,14}){0,6})(?!\d|%20\d|\+\d)")
_URL_ENCODINGS = re.compile(r"(?i)%2B|%20")


def _link_number(m: re.Match[str]) -> bool:
    digits = re.sub(r"\D", "", _URL_ENCODINGS.sub("", m.group(m.lastgroup)))
    return 8 <= len(digits) <= 15 and len(set(digits)) >= 3


def _link_span(m: re.Match[str]) -> tuple[int, int]:
    return m.start(m.lastgroup) - m.start(), m.end(m.lastgroup) - m.start()


def _link_hint(text: str) -> bool:
    return any(k in text for k in ("wa.me/", "whatsapp.com/send", "%2B", "%2b", "phone=", "tel=", "msisdn=",
                                    "mobile=", "Phone=", "PHONE="))


# (kind, pattern, validator, group to replace, cheap test that the pass can match); the cued pass first, so
# that a cued number is taken whole before the layout pass sees a part of it.
PHONE_PASSES = (
    ("phone", _IN_LINK, _link_number, _link_span, _link_hint),
    *VANITY_PASSES,                         # letters for digits: before the digit passes take the area code
    ("phone", Chained(_CUED, "/"), _cued_phone, 0, bool),
    ("phone", Listed(), _phone, 0, bool),
)
