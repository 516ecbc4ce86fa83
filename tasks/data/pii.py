"""PII scrubbing: replace emails, phone numbers, IP addresses, card numbers, IBANs, SSNs and secrets by typed
placeholders.

`scrub_pii(text, kinds, keep_addresses)` returns the scrubbed text and counts by kind (`email`, `phone`, `ipv4`,
`ipv6`, `credit_card`, `iban`, `ssn`, `secret`; only kinds that occurred, sorted). Passes run in a fixed order:
secrets (`tasks.data.pii_secrets`; a key or token may hold an `@` or digit groups), emails, obfuscated emails,
IBANs, SSNs (`tasks.data.pii_ids`: their digit groups would be eaten by the card and phone passes), cards, IPv6,
IPv4, phones, each on the previous pass's output. Regexes are compiled once and find *candidates*; a callback
validates each one (Luhn and issuer prefix, `ipaddress`, digit counts, entropy, placeholder and code checks) and
returns the match unchanged when it is not PII.

What is deliberately not PII, to keep code and ordinary prose intact:
- phones need a `+`, parentheses or separators: international (`+44 20 7946 0958`, `(+33) 1 23 45 67 89`,
  `+49 (0)30 1234567`, E.164 `+442079460958`), US `(202) 555-0143`, `202-555-0143`, `202.555.0143` (area
  code and exchange 2-9, one separator kind), or national groups led by a trunk `0` (`020 7946 0958`,
  `01 23 45 67 89`, 9–12 digits); so dates, years, times, prices, version numbers, ISBNs and bare integers do
  not match. Digit strings with fewer than 3 distinct digits (`00 00 00 00 00`) are rejected, and so are the
  SSN layout `AAA-GG-SSSS` and, for phones and cards, digit groups inside an IBAN-shaped run (`PL46 4634 ...`
  with a wrong check digit);
- IPv4 needs exactly four octets ≤ 255 without leading zeros, not inside a longer dotted run (`1.2.3.4.5`,
  OIDs) and not after `v`/`version`/`section`/`rfc`; IPv6 needs three colons or a 4-digit group with a letter
  (`fe80::1`, but not the slices `x[1::2]`, `x[100::2]`), a group that is not a clock's (`10:00::11:00`), and
  must parse; a full stop after either ends the sentence. Netmasks and CIDR networks (`10.0.0.0/8`) are kept;
  `/32` and `/128` are single hosts and count. The address classes in `keep_addresses` (by default all of
  `ADDRESS_CLASSES`: loopback, private, link-local, unspecified, documentation, multicast) are kept as well —
  a machine's own, a LAN's, an example's or a group's address, nobody's personal data;
- cards: 13–19 digits, bare or in 4-4-4-4(-3) / 4-6-5 / 4-6-4 groups, a plausible issuer prefix and Luhn;
- IBANs, SSNs and obfuscated emails: see `tasks.data.pii_ids` (registry length and mod-97; SSA rules; the `at`
  bracketed or an upper-case `AT` word, never lower-case prose such as `ann at example dot com`);
- secrets: see `tasks.data.pii_secrets` (placeholders such as `${TOKEN}` or `changeme` and code such as
  `key=lambda x: x` are left alone).
Every syntactically valid email is PII, including author addresses in source comments.
"""

from __future__ import annotations

import ipaddress
import re
from collections import Counter
from typing import Callable, Iterable

from stdnum import ean as stdnum_ean, isbn as stdnum_isbn, luhn as stdnum_luhn

from specs.clean import ADDRESS_CLASSES, PII_KINDS
from tasks.data.pii_ids import ID_PASSES, Anchored
from tasks.data.pii_ids import PLACEHOLDERS as ID_PLACEHOLDERS
from tasks.data.pii_secrets import SECRET_PASSES

PLACEHOLDERS = {"email": "<EMAIL>", "phone": "<PHONE>", "ipv4": "<IP_ADDRESS>", "ipv6": "<IP_ADDRESS>",
                "credit_card": "<CREDIT_CARD>", **ID_PLACEHOLDERS, "secret": "<SECRET>"}

# Many patterns start with one consumed character and then check what precedes it with a two-character
# lookbehind (`[0-9](?<![\w.][0-9])`): a pattern that opens with a character class lets `re` skip
# non-candidate positions in C, which a leading lookbehind prevents (6x faster on digit-led patterns).

# --- emails, cards, addresses, phones ------------------------------------------------------------------------
# Tried only at each `@` (`Anchored`), from the local part's start: led by its local part, `re.sub` would try
# it at every word. The local part's characters are all in the lookbehind's class, so its start is unique.
_EMAIL = re.compile(r"(?<![\w.+%-])[A-Za-z0-9_](?:[A-Za-z0-9._%+-]{0,62}[A-Za-z0-9_%+-])?(?P<at>@)"
                    r"(?:[A-Za-z0-9](?:[A-Za-z0-9-]{0,61}[A-Za-z0-9])?\.)+[A-Za-z]{2,24}(?![^\W_]|-)")  # `_`: md italics
_CARD = re.compile(r"[0-9](?<![\w.,+-][0-9])"          # bare, 4-4-4-4(-3), Amex 4-6-5, Diners 4-6-4
                   r"(?:\d{11,18}|\d{3}([ -])\d{4}\1\d{4}\1\d{4}(?:\1\d{3})?|\d{3}([ -])\d{6}\2\d{4,5})"
                   r"(?!\w|[.,-]\d)", re.ASCII)
_IPV6 = re.compile(r"(?<![\w:.])(?:[0-9A-Fa-f]{0,4}:){2,7}(?:[0-9A-Fa-f]{1,4}|(?:\d{1,3}\.){3}\d{1,3})?(?![\w:]|\.\d)",
                   re.ASCII)
_IPV6_HINT = re.compile(r"::|:[0-9A-Fa-f]{1,4}:[0-9A-Fa-f]{1,4}:")
_IPV4 = re.compile(r"[0-9](?<![\w.][0-9])\d{0,2}(?:\.\d{1,3}){3}(?!\w|\.\w)", re.ASCII)
_PREFIX_AFTER = re.compile(r"/(\d{1,3})(?!\d)")
# Dotted quads after these words are versions or section numbers ("version 1.2.3.4", "sections 8.2.4.44").
# A product token's slash (`Firefox/1.9.2.20`) and a user agent's `rv:` lead versions too.
_NOT_AN_ADDRESS_BEFORE = re.compile(r"(?i)(?:\bv|\bver|version|versions|release|build|section|sections|§|rfc|\brv)"
                                    r"[\W_]{0,4}$|[A-Za-z]/$")
_PHONE = re.compile(r"""(?xa)
    [+(0-9](?<![\w+.-].)(?<!\d[ ./-].)     # first character; nothing word-like or number-like before it
    (?:
        (?<=\+)\d{1,3}(?:[ .-]?\(\d{1,4}\))?(?:[ .-]?\d{1,6}){0,5}[ .-]?\d{2,6}   # +44 20 7946 0958
      | (?<=\()\+\d{1,3}\)(?:[ .-]?\(0\))?(?:[ .-]?\d{1,6}){0,5}[ .-]?\d{2,6}   # (+44) 20 7946 0958
      | (?<=\()\d{3}\)[ ]?\d{3}[ .-]\d{4}                           # (202) 555-0143
      | (?<=1)[ .-]?\(\d{3}\)[ ]?\d{3}[ .-]\d{4}                    # 1 (202) 555-0143
      | (?<=1)([.-])\d{3}\1\d{3}\1\d{4}                            # 1-202-555-0143
      | (?<=\d)\d\d([.-])\d{3}\2\d{4}                              # 202-555-0143, 202.555.0143
      | (?<=\d)\d\d[ ]\d{3}[ ]\d{4}(?![ ]\d)                        # 212 555 0147 (NANP digits only)
      | (?<=\()0\d{1,4}\)[ ]?\d{2,8}(?:[ ]\d{2,8}){0,3}            # (020) 7946 0958
      | (?<=0)\d{1,4}([ .-])\d{2,8}(?:\3\d{2,8}){0,4}              # 020 7946 0958, 01 23 45 67 89
      | (?<=\d)\d{9,10}                                           # 2125550147 after a cue; 01154960930
    )(?:[ ]?(?:x|ext\.?|extn\.?|extension)[ ]?\d{1,6})?           # an extension: x157, ext. 5
    (?!\w|[.-]?\d)""")
# The same shape right after a phone and one space: a space-separated list of numbers, whose members the
# "nothing number-like before it" look-behind would otherwise let through one per round (16 rounds: 16 phones).
_PHONE_NEXT = re.compile(_PHONE.pattern.replace(r"(?<!\d[ ./-].)", "", 1))
_EXTENSION = re.compile(r"[ ]?(?:x|ext\.?|extn\.?|extension)[ ]?\d{1,6}$")
_ISBN_BEFORE = re.compile(r"(?i)isbn(?:-10)?[\s:#]*$")
# A phone cue right before bare digits: `Phone: `, `tel. `, `cell #`, `call me at `, `"mobile": "`.
_PHONE_CUE = re.compile(r"(?i)(?:\b(?:phone|tel|telephone|telefon|cell|mobile|mob|handy|fax|ph|call(?:\s+me)?(?:\s+at)?"
                        r"|contact(?:\s+(?:me|us))?(?:\s+(?:at|on))?|reach\s+(?:me|us)\s+(?:at|on)|whatsapp|sms|text)"
                        r"(?:[\s_-]*(?:no|number|num|#|nr))?|[☎📞])\.?[\s\"':=#)\]>-]{0,4}$")
_NANP = re.compile(r"(?:\+?1\D*)?\(?[2-9]\d\d\D*[2-9]\d\d\D*\d{4}", re.ASCII)


def luhn_ok(digits: str) -> bool:
    return stdnum_luhn.is_valid(digits)


def _issuer_ok(d: str) -> bool:
    """A plausible issuer prefix for the length: Visa, Mastercard, Amex, Mir, Discover, JCB, UnionPay, Maestro,
    Diners."""
    n, p2, p3, p4 = len(d), int(d[:2]), int(d[:3]), int(d[:4])
    if d[0] == "4":
        return n in (13, 16, 19)
    if 51 <= p2 <= 55 or 2221 <= p4 <= 2720:
        return n == 16
    if p2 in (34, 37):
        return n == 15
    if 2200 <= p4 <= 2204:                  # Mir
        return n == 16
    if p4 in (1800, 2131):                  # JCB's 15-digit cards
        return n == 15
    if p4 == 6011 or 644 <= p3 <= 649 or p2 in (62, 65) or p2 == 35:   # Discover, UnionPay, JCB (35xx)
        return 16 <= n <= 19
    if p2 == 50 or 56 <= p2 <= 69:          # Maestro (6x prefixes not claimed above)
        return 12 <= n <= 19
    return (300 <= p3 <= 305 or p2 in (36, 38, 39)) and 14 <= n <= 19


# A country code, 2 check digits and whole groups before the match: inside an IBAN-shaped run that the IBAN
# pass rejected (a wrong check digit); its digit groups (`SC84 IVMU 5900 6195 9676 7696 ...`) may pass Luhn or
# read as a trunk-0 phone by chance.
_IBAN_RUN_BEFORE = re.compile(r"(?<!\w)[A-Z]{2}\d\d(?: [A-Z0-9]{4}){0,7} $", re.ASCII)


def in_iban_shaped_run(m: re.Match[str]) -> bool:
    return _IBAN_RUN_BEFORE.search(m.string, max(0, m.start() - 40), m.start()) is not None


_BARCODE_BEFORE = re.compile(r"(?i)\b(?:ean(?:-?13)?|upc(?:-?a)?|gtin(?:-?1[23])?|barcode|bar code|isbn(?:-?13)?)\b"
                             r"[^\n\d]{0,12}$")


def _card(m: re.Match[str]) -> bool:
    if in_iban_shaped_run(m):
        return False
    digits = re.sub(r"\D", "", m.group())
    # A bare 12/13-digit barcode (UPC-A, EAN-13) that Luhn also passes by chance, where the text names it: a
    # GS1 check alone would also drop a tenth of real 13-digit Visa and 12-digit Maestro numbers.
    if len(digits) in (12, 13) and m.group().isdigit() and stdnum_ean.is_valid(digits) and \
            _BARCODE_BEFORE.search(m.string, max(0, m.start() - 24), m.start()):
        return False
    return len(set(digits)) > 1 and _issuer_ok(digits) and luhn_ok(digits)


def _ipv4(m: re.Match[str], keep: frozenset[str]) -> bool:
    try:
        address = ipaddress.IPv4Address(m.group())
    except ValueError:                      # an octet over 255 or with a leading zero
        return False
    if _is_mask(int(address), 32) or not _is_host(m, 32) or address_class(address) in keep:
        return False
    return _NOT_AN_ADDRESS_BEFORE.search(m.string, max(0, m.start() - 12), m.start()) is None


def _ipv6(m: re.Match[str], keep: frozenset[str]) -> bool:
    candidate = m.group()
    # `x[1::2]` and `100::2` are slices: with only two colons, demand a 4-digit group with a letter (fe80::1).
    if candidate.count(":") < 3 and not re.search(r"(?<![0-9A-Fa-f])(?=[0-9]*[A-Fa-f])[0-9A-Fa-f]{4}", candidate):
        return False
    if not re.search(r"[0-9A-Fa-f]{3}|[A-Fa-f]", candidate):    # `10:00::11:00`: times, not an address
        return False
    try:
        address = ipaddress.IPv6Address(candidate)
    except ValueError:
        return False
    return not _is_mask(int(address), 128) and _is_host(m, 128) and address_class(address) not in keep


def _is_host(m: re.Match[str], bits: int) -> bool:
    """No prefix length after the address, or the full one (`203.0.113.7/32` is one host, `10.0.0.0/8` a network)."""
    prefix = _PREFIX_AFTER.match(m.string, m.end())
    return prefix is None or int(prefix.group(1)) == bits


# Address classes of `PIISpec.keep_addresses` (RFC 1918/6598/4193 private, 3927/4291 link-local, 5737/3849
# documentation): a machine's own, a LAN's, an example's or a group's address, never a person's.
_CLASS_NETWORKS = {
    "loopback": ("127.0.0.0/8", "::1/128"),
    "private": ("10.0.0.0/8", "172.16.0.0/12", "192.168.0.0/16", "100.64.0.0/10", "fc00::/7"),
    "link_local": ("169.254.0.0/16", "fe80::/10"),
    "unspecified": ("0.0.0.0/8", "::/128"),
    "documentation": ("192.0.2.0/24", "198.51.100.0/24", "203.0.113.0/24", "2001:db8::/32"),
    "multicast": ("224.0.0.0/4", "ff00::/8"),
}
_NETWORKS = [(name, ipaddress.ip_network(n)) for name, nets in _CLASS_NETWORKS.items() for n in nets]
assert tuple(_CLASS_NETWORKS) == ADDRESS_CLASSES


def address_class(address: ipaddress.IPv4Address | ipaddress.IPv6Address) -> str | None:
    """The `ADDRESS_CLASSES` name of an address (IPv4-mapped IPv6 by its IPv4 part), or None for a public one."""
    if isinstance(address, ipaddress.IPv6Address) and address.ipv4_mapped is not None:
        address = address.ipv4_mapped
    return next((name for name, net in _NETWORKS if net.version == address.version and address in net), None)


def _is_mask(value: int, bits: int) -> bool:
    """A netmask (ones then zeros, 255.255.255.0) is configuration, not an address."""
    inverted = ~value & ((1 << bits) - 1)
    return value >> (bits - 1) == 1 and inverted & (inverted + 1) == 0


# `AAA-GG-SSSS` is an SSN's layout, no phone's: valid SSNs are gone by now (`pii_ids`), invalid ones
# (`000-12-3456`, the advertised fake 078-05-1120) are nobody's number and stay.
_SSN_SHAPED = re.compile(r"\d{3}([ -])\d\d\1\d{4}")
_ZIP4 = re.compile(r"\d{5}-\d{4}")           # a US ZIP+4 code (`02171-2110`), not a trunk-0 phone


def _phone(m: re.Match[str]) -> bool:
    text = _EXTENSION.sub("", m.group())
    digits = re.sub(r"\D", "", text)
    if len(set(digits)) < 3 or not 7 <= len(digits) <= 15 or _SSN_SHAPED.fullmatch(text) or in_iban_shaped_run(m) \
            or _ZIP4.fullmatch(text):
        return False
    if text.startswith(("+", "(+")):
        separators = re.sub(r"[\d+]", "", text)
        if separators == ".":               # +3.140000 is a signed decimal
            return False
        return len(digits) >= 10 or separators != ""
    if text.isdigit():
        return _bare_phone(m, digits)
    if text.startswith("00"):               # 00 is the international prefix, like `+`: 001-612-799-7220
        return 9 <= len(digits) - 2 <= 15
    if text.startswith(("0", "(0")):
        return 9 <= len(digits) <= 12
    if " " in text and "(" not in text:     # `212 555 0147`: three bare groups, real NANP digits only
        return _NANP.fullmatch(text) is not None
    # Dashes, dots or a parenthesised area code are a phone's layout whatever the digits: test, fictional and
    # generated numbers (`555-123-4567`, `(123) 456-7890`, Faker's `120-405-6086 x569`) are written that way.
    return True


def _bare_phone(m: re.Match[str], digits: str) -> bool:
    """Ten or eleven bare digits: a phone after a phone cue (`Phone: 2125550147`), or a national number led by a
    single trunk 0 (`01154960930`, `0492807302`), unless it reads as a digit run (`0123456789`) or an ISBN-10."""
    if _PHONE_CUE.search(m.string, max(0, m.start() - 24), m.start()) is not None:
        return len(digits) == 10 or digits[0] in "01"
    if digits[0] != "0" or digits[1] == "0" or len(set(digits)) < 4 or digits in "01234567890" or \
            digits in "09876543210":
        return False
    if _ISBN_BEFORE.search(m.string, max(0, m.start() - 12), m.start()):
        return False
    return len(digits) == 11 or not stdnum_isbn.is_valid(digits)  # ten digits: not an ISBN-10


def _hint(*needles: str) -> Callable[[str], bool]:
    return lambda text: any(needle in text for needle in needles)


Validator = Callable[[re.Match[str], frozenset[str]], bool]
Group = int | Callable[[re.Match[str]], "int | tuple[int, int]"]
# (kind, pattern, validator(match, kept address classes) or None, group to replace (0 = whole match, or a
# function of the match giving a group or a (start, end) span within it), cheap test that the pass can match)
_PASSES: tuple[tuple[str, re.Pattern[str], Validator | None, Group, Callable[[str], bool]], ...] = (
    *(("secret", pattern, None if valid is None else (lambda m, keep, valid=valid: valid(m)), group, hint)
      for pattern, valid, group, hint in SECRET_PASSES),
    ("email", Anchored((re.compile("@"),), _EMAIL, spaces=False), None, 0, _hint("@")),
    *((kind, pattern, lambda m, keep, valid=valid: valid(m), group, hint)
      for kind, pattern, valid, group, hint in ID_PASSES),
    ("credit_card", _CARD, lambda m, keep: _card(m), 0, bool),
    ("ipv6", _IPV6, _ipv6, 0, lambda text: _IPV6_HINT.search(text) is not None),
    ("ipv4", _IPV4, _ipv4, 0, _hint(".")),
    ("phone", _PHONE, lambda m, keep: _phone(m), 0, bool),
)

MAX_ROUNDS = 16     # a productive round replaces at least one more match, so this is only a safety net


def scrub_pii(text: str, kinds: Iterable[str] = PII_KINDS,
              keep_addresses: Iterable[str] = ADDRESS_CLASSES) -> tuple[str, dict[str, int]]:
    """Replace PII of the given kinds by placeholders; return the new text and counts by kind.

    IP addresses in a class of `keep_addresses` (see `specs.clean.ADDRESS_CLASSES`) are left as they are.

    The passes repeat until a round changes nothing (text without PII takes one round):
    a replacement changes what its neighbours see, e.g. in `...952-2092+1 (478) 952-2092` the second number
    follows a digit and is skipped until the first became `<PHONE>`. Repeating makes scrubbing idempotent.
    """
    wanted = set(kinds)
    unknown = wanted - set(PII_KINDS)
    if unknown:
        raise ValueError(f"unknown PII kinds {sorted(unknown)}; expected some of {', '.join(PII_KINDS)}")
    keep = frozenset(keep_addresses)
    if keep - set(ADDRESS_CLASSES):
        raise ValueError(f"unknown address classes {sorted(keep - set(ADDRESS_CLASSES))}; "
                         f"expected some of {', '.join(ADDRESS_CLASSES)}")
    counts: Counter[str] = Counter()
    for _ in range(MAX_ROUNDS):
        before = sum(counts.values())
        text = _round(text, wanted, keep, counts)
        if sum(counts.values()) == before:
            break
    return text, dict(sorted(counts.items()))


def _round(text: str, wanted: set[str], keep: frozenset[str], counts: Counter[str]) -> str:
    """Run every wanted pass once over `text`, counting replacements into `counts`."""
    for kind, pattern, valid, group, may_match in _PASSES:
        if kind not in wanted or not may_match(text):
            continue

        def replace(m: re.Match[str], kind: str = kind, valid=valid, group=group) -> str:
            if valid is not None and not valid(m, keep):
                return m.group()
            counts[kind] += 1
            group = group if isinstance(group, int) else group(m)
            if group == 0:
                return PLACEHOLDERS[kind]
            if isinstance(group, tuple):        # a span: an IBAN cut before a trailing token
                start, end = group
            else:
                start, end = m.start(group) - m.start(), m.end(group) - m.start()
            return m.group()[:start] + PLACEHOLDERS[kind] + m.group()[end:]

        text = _sub_listed(pattern, replace, text) if kind == "phone" else pattern.sub(replace, text)
    return text


def _sub_listed(pattern: re.Pattern[str], replace: Callable[[re.Match[str]], str], text: str) -> str:
    """`pattern.sub(replace, text)`, where a phone that was replaced also takes the number right after it (one
    space between, `_PHONE_NEXT`), and that one the next: a whole list in one round."""
    pieces: list[str] = []
    last = 0
    for m in pattern.finditer(text):
        if m.start() < last:
            continue  # inside a listed number already taken
        out = replace(m)
        pieces += [text[last:m.start()], out]
        last = m.end()
        while out != m.group() and text.startswith(" ", last) and (n := _PHONE_NEXT.match(text, last + 1)):
            out, m = replace(n), n
            pieces += [" ", out]
            last = n.end()
    pieces.append(text[last:])
    return "".join(pieces)
