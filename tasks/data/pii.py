"""PII scrubbing: replace emails, phone numbers, IP addresses, card numbers and secrets by typed placeholders.

`scrub_pii(text, kinds)` returns the scrubbed text and counts by kind (`email`, `phone`, `ipv4`, `ipv6`,
`credit_card`, `secret`; only kinds that occurred, sorted). Passes run in a fixed order: secrets (a key or token
may hold an `@` or digit groups), emails, cards, IPv6, IPv4, phones, each on the previous pass's output. Regexes
are compiled once and find *candidates*; a callback validates each one (Luhn and issuer prefix, `ipaddress`,
digit counts, Shannon entropy) and returns the match unchanged when it is not PII.

What is deliberately not PII, to keep code and ordinary prose intact:
- phones need a `+`, parentheses or separators: US `(202) 555-0143`, `202-555-0143`, `202.555.0143` (area
  code and exchange 2-9, one separator kind), or national groups led by a trunk `0` (`020 7946 0958`,
  `01 23 45 67 89`, 9–12 digits); so dates, years, times, prices, version numbers, ISBNs and bare integers do
  not match. Digit strings with fewer than 3 distinct digits (`00 00 00 00 00`) are rejected;
- IPv4 needs exactly four octets ≤ 255 without leading zeros, not inside a longer dotted run (`1.2.3.4.5`,
  OIDs) and not after `v`/`version`/`section`/`rfc`; IPv6 needs three colons or a 4-digit group with a letter
  (`fe80::1`, but not the slices `x[1::2]`, `x[100::2]`) and must parse. Kept as they are: loopback,
  unspecified, netmasks, CIDR networks (`10.0.0.0/8`) and the documentation ranges (192.0.2.0/24,
  198.51.100.0/24, 203.0.113.0/24, 2001:db8::/32) — configuration and examples, nobody's address;
- cards: 13–19 digits, bare or in 4-4-4-4(-3) / 4-6-5 / 4-6-4 groups, a plausible issuer prefix and Luhn;
- a value after `key=`/`token:`/`password=`… counts only when it looks random (≥ 16 characters from a token
  alphabet, ≥ 2 digits, entropy ≥ 3 bits/char, mixed case or all-hex or long lower/upper+digits, not a dotted
  name), so `key=lambda x: x`, `RegEnumKey = win32api.RegEnumKey` and git SHAs in prose are left alone.
Every syntactically valid email is PII, including author addresses in source comments.
"""

from __future__ import annotations

import ipaddress
import math
import re
from collections import Counter
from typing import Callable, Iterable

from specs.clean import PII_KINDS

PLACEHOLDERS = {"email": "<EMAIL>", "phone": "<PHONE>", "ipv4": "<IP_ADDRESS>", "ipv6": "<IP_ADDRESS>",
                "credit_card": "<CREDIT_CARD>", "secret": "<SECRET>"}

# Many patterns start with one consumed character and then check what precedes it with a two-character
# lookbehind (`[0-9](?<![\w.][0-9])`): a pattern that opens with a character class lets `re` skip
# non-candidate positions in C, which a leading lookbehind prevents (6x faster on digit-led patterns).

# --- secrets -------------------------------------------------------------------------------------------------
_PEM = re.compile(r"-----BEGIN (?:[A-Z0-9]+ )*PRIVATE KEY(?: BLOCK)?-----.*?-----END (?:[A-Z0-9]+ )*PRIVATE KEY"
                  r"(?: BLOCK)?-----", re.DOTALL)
_TOKEN_SHAPES = re.compile(r"""(?<![\w-])(?:
      (?:AKIA|ASIA)[0-9A-Z]{16}                          # AWS access key id
    | gh[pousr]_[A-Za-z0-9]{36}                          # GitHub tokens
    | github_pat_[A-Za-z0-9_]{22,255}                    # GitHub fine-grained token
    | xox[baprs]-[A-Za-z0-9-]{10,}                       # Slack
    | [spr]k_(?:live|test)_[A-Za-z0-9]{16,}              # Stripe
    | AIza[0-9A-Za-z_-]{35}                              # Google API key
    | sk-(?:proj-|svcacct-|admin-)?[A-Za-z0-9_-]{20,}    # OpenAI-style
    | eyJ[A-Za-z0-9_-]{5,}\.eyJ[A-Za-z0-9_-]{5,}\.[A-Za-z0-9_-]{8,}   # JWT (header.payload.signature)
    )(?![\w-])""", re.VERBOSE)
_TOKEN_HINTS = ("AKIA", "ASIA", "ghp_", "gho_", "ghu_", "ghs_", "ghr_", "github_pat_", "xox", "k_live_",
                "k_test_", "AIza", "sk-", "eyJ")
# A long value after `:` or `=`; the name before it must contain key/token/secret/password... (checked by
# `_KEY_BEFORE` in the validator). Only the value is replaced, so `api_key=<SECRET>` stays readable.
# `=` only as base64 padding at the end: `say: AWS_KEY=...` must not swallow the next `name=value` as one value.
_KEYED = re.compile(r"[:=][ \t]*[\"']?([A-Za-z0-9+/_.~-]{16,}={0,3})(?![A-Za-z0-9+/_.~=-])")
_KEY_BEFORE = re.compile(r"(?i)(?:key|token|secret|password|passwd|pwd|passphrase|credentials?|auth)"
                         r"(?:[_-][a-z0-9]+)*[\"']?[ \t]*$")
_DOTTED_NAME = re.compile(r"[A-Za-z_]\w*(?:\.[A-Za-z_]\w*)+")     # win32api.RegEnumKey: code, not a secret
_BEARER = re.compile(r"Bearer[ \t]+([A-Za-z0-9+/_.~-]{16,}=*)(?![\w.~+/=-])")

# --- emails, cards, addresses, phones ------------------------------------------------------------------------
_EMAIL = re.compile(r"(?<![\w.+%-])[A-Za-z0-9](?:[A-Za-z0-9._%+-]{0,62}[A-Za-z0-9_%+-])?@"
                    r"(?:[A-Za-z0-9](?:[A-Za-z0-9-]{0,61}[A-Za-z0-9])?\.)+[A-Za-z]{2,24}(?![\w-])")
_CARD = re.compile(r"[0-9](?<![\w.,+-][0-9])"          # bare, 4-4-4-4(-3), Amex 4-6-5, Diners 4-6-4
                   r"(?:\d{12,18}|\d{3}([ -])\d{4}\1\d{4}\1\d{4}(?:\1\d{3})?|\d{3}([ -])\d{6}\2\d{4,5})"
                   r"(?!\w|[.,-]\d)", re.ASCII)
_IPV6 = re.compile(r"(?<![\w:.])(?:[0-9A-Fa-f]{0,4}:){2,7}(?:[0-9A-Fa-f]{1,4}|(?:\d{1,3}\.){3}\d{1,3})?(?![\w:.])",
                   re.ASCII)
_IPV6_HINT = re.compile(r"::|:[0-9A-Fa-f]{1,4}:[0-9A-Fa-f]{1,4}:")
_IPV4 = re.compile(r"[0-9](?<![\w.][0-9])\d{0,2}(?:\.\d{1,3}){3}(?!\w|\.\w)", re.ASCII)
_CIDR_AFTER = re.compile(r"/\d")
# Dotted quads after these words are versions or section numbers ("version 1.2.3.4", "sections 8.2.4.44").
_NOT_AN_ADDRESS_BEFORE = re.compile(r"(?i)(?:\bv|\bver|version|versions|release|build|section|sections|§|rfc)"
                                    r"[\W_]{0,4}$")
_PHONE = re.compile(r"""(?xa)
    [+(0-9](?<![\w+.-].)(?<!\d[ ./-].)     # first character; nothing word-like or number-like before it
    (?:
        (?<=\+)\d{1,3}(?:[ .-]?\(\d{1,4}\))?(?:[ .-]?\d{1,6}){0,5}[ .-]?\d{2,6}   # +44 20 7946 0958
      | (?<=\()\d{3}\)[ ]?\d{3}[ .-]\d{4}                           # (202) 555-0143
      | (?<=1)[ .-]?\(\d{3}\)[ ]?\d{3}[ .-]\d{4}                    # 1 (202) 555-0143
      | (?<=1)([.-])\d{3}\1\d{3}\1\d{4}                            # 1-202-555-0143
      | (?<=\d)\d\d([.-])\d{3}\2\d{4}                              # 202-555-0143, 202.555.0143
      | (?<=\()0\d{1,4}\)[ ]?\d{2,8}(?:[ ]\d{2,8}){0,3}            # (020) 7946 0958
      | (?<=0)\d{1,4}([ .-])\d{2,8}(?:\3\d{2,8}){0,4}              # 020 7946 0958, 01 23 45 67 89
    )(?!\w|[.-]?\d)""")
_NANP = re.compile(r"(?:\+?1\D*)?\(?[2-9]\d\d\D*[2-9]\d\d\D*\d{4}", re.ASCII)


def luhn_ok(digits: str) -> bool:
    total = 0
    for i, ch in enumerate(reversed(digits)):
        d = ord(ch) - 48
        if i % 2:
            d = d * 2 - 9 if d > 4 else d * 2
        total += d
    return total % 10 == 0


def _issuer_ok(d: str) -> bool:
    """A plausible issuer prefix for the number's length (Visa, Mastercard, Amex, Discover, JCB, Diners, UnionPay)."""
    n, p2, p3, p4 = len(d), int(d[:2]), int(d[:3]), int(d[:4])
    if d[0] == "4":
        return n in (13, 16, 19)
    if 51 <= p2 <= 55 or 2221 <= p4 <= 2720:
        return n == 16
    if p2 in (34, 37):
        return n == 15
    if p4 == 6011 or 644 <= p3 <= 649 or p2 in (62, 65) or 3528 <= p4 <= 3589:
        return 16 <= n <= 19
    return (300 <= p3 <= 305 or p2 in (36, 38, 39)) and 14 <= n <= 19


def shannon_entropy(value: str) -> float:
    n = len(value)
    return -sum(c / n * math.log2(c / n) for c in Counter(value).values()) if n else 0.0


def looks_random(value: str) -> bool:
    """Heuristic for a generated credential (not an identifier, a path or an English compound)."""
    if len(value) < 16 or sum(ch.isdigit() for ch in value) < 2 or shannon_entropy(value) < 3.0:
        return False
    if not any(ch.isalpha() for ch in value) or _DOTTED_NAME.fullmatch(value):
        return False
    mixed_case = any(ch.isupper() for ch in value) and any(ch.islower() for ch in value)
    hexish = re.fullmatch(r"[0-9a-f]+|[0-9A-F]+", value) is not None
    lower_or_upper = re.fullmatch(r"[0-9a-z]{20,}|[0-9A-Z]{20,}", value) is not None
    return mixed_case or hexish or lower_or_upper


def _keyed(m: re.Match[str]) -> bool:
    return looks_random(m.group(1)) and _KEY_BEFORE.search(m.string, max(0, m.start() - 64), m.start()) is not None


def _card(m: re.Match[str]) -> bool:
    digits = re.sub(r"\D", "", m.group())
    return len(set(digits)) > 1 and _issuer_ok(digits) and luhn_ok(digits)


def _ipv4(m: re.Match[str]) -> bool:
    try:
        address = ipaddress.IPv4Address(m.group())
    except ValueError:                      # an octet over 255 or with a leading zero
        return False
    if address.is_loopback or address.is_unspecified or _is_mask(int(address), 32) or _is_documentation(address):
        return False
    if _CIDR_AFTER.match(m.string, m.end()):                # a network (10.0.0.0/8), not a host
        return False
    return _NOT_AN_ADDRESS_BEFORE.search(m.string, max(0, m.start() - 12), m.start()) is None


def _ipv6(m: re.Match[str]) -> bool:
    candidate = m.group()
    # `x[1::2]` and `100::2` are slices: with only two colons, demand a 4-digit group with a letter (fe80::1).
    if candidate.count(":") < 3 and not re.search(r"(?<![0-9A-Fa-f])(?=[0-9]*[A-Fa-f])[0-9A-Fa-f]{4}", candidate):
        return False
    try:
        address = ipaddress.IPv6Address(candidate)
    except ValueError:
        return False
    if address.is_loopback or address.is_unspecified or _is_mask(int(address), 128) or _is_documentation(address):
        return False
    return not _CIDR_AFTER.match(m.string, m.end())


_DOCUMENTATION = [ipaddress.ip_network(n) for n in ("192.0.2.0/24", "198.51.100.0/24", "203.0.113.0/24",
                                                    "0.0.0.0/8", "2001:db8::/32")]


def _is_documentation(address: ipaddress.IPv4Address | ipaddress.IPv6Address) -> bool:
    """Example and "this network" ranges (RFC 5737, RFC 3849): they appear in manuals, never belong to anyone."""
    return any(address in network for network in _DOCUMENTATION if network.version == address.version)


def _is_mask(value: int, bits: int) -> bool:
    """A netmask (ones then zeros, 255.255.255.0) is configuration, not an address."""
    inverted = ~value & ((1 << bits) - 1)
    return value >> (bits - 1) == 1 and inverted & (inverted + 1) == 0


def _phone(m: re.Match[str]) -> bool:
    text = m.group()
    digits = re.sub(r"\D", "", text)
    if len(set(digits)) < 3 or not 7 <= len(digits) <= 15:
        return False
    if text.startswith("+"):
        separators = re.sub(r"[\d+]", "", text)
        if separators == ".":               # +3.140000 is a signed decimal
            return False
        return len(digits) >= 10 or separators != ""
    if text.startswith(("0", "(0")):
        return 9 <= len(digits) <= 12
    return _NANP.fullmatch(text) is not None   # NANP: area code and exchange start with 2-9


def _hint(*needles: str) -> Callable[[str], bool]:
    return lambda text: any(needle in text for needle in needles)


# (kind, pattern, validator or None, group to replace (0 = whole match), cheap test that the pass can match)
_PASSES: tuple[tuple[str, re.Pattern[str], Callable[[re.Match[str]], bool] | None, int, Callable[[str], bool]],
               ...] = (
    ("secret", _PEM, None, 0, _hint("PRIVATE KEY")),
    ("secret", _TOKEN_SHAPES, lambda m: not m.group().startswith("sk-") or looks_random(m.group()[3:]), 0,
     _hint(*_TOKEN_HINTS)),
    ("secret", _BEARER, lambda m: looks_random(m.group(1)), 1, _hint("Bearer")),
    ("secret", _KEYED, _keyed, 1, _hint(":", "=")),
    ("email", _EMAIL, None, 0, _hint("@")),
    ("credit_card", _CARD, _card, 0, bool),
    ("ipv6", _IPV6, _ipv6, 0, lambda text: _IPV6_HINT.search(text) is not None),
    ("ipv4", _IPV4, _ipv4, 0, _hint(".")),
    ("phone", _PHONE, _phone, 0, bool),
)

MAX_ROUNDS = 16     # a productive round replaces at least one more match, so this is only a safety net


def scrub_pii(text: str, kinds: Iterable[str] = PII_KINDS) -> tuple[str, dict[str, int]]:
    """Replace PII of the given kinds by placeholders; return the new text and counts by kind.

    The passes repeat until a round changes nothing (text without PII takes one round):
    a replacement changes what its neighbours see, e.g. in `...952-2092+1 (478) 952-2092` the second number
    follows a digit and is skipped until the first became `<PHONE>`. Repeating makes scrubbing idempotent.
    """
    wanted = set(kinds)
    unknown = wanted - set(PII_KINDS)
    if unknown:
        raise ValueError(f"unknown PII kinds {sorted(unknown)}; expected some of {', '.join(PII_KINDS)}")
    counts: Counter[str] = Counter()
    for _ in range(MAX_ROUNDS):
        before = sum(counts.values())
        text = _round(text, wanted, counts)
        if sum(counts.values()) == before:
            break
    return text, dict(sorted(counts.items()))


def _round(text: str, wanted: set[str], counts: Counter[str]) -> str:
    """Run every wanted pass once over `text`, counting replacements into `counts`."""
    for kind, pattern, valid, group, may_match in _PASSES:
        if kind not in wanted or not may_match(text):
            continue

        def replace(m: re.Match[str], kind: str = kind, valid=valid, group: int = group) -> str:
            if valid is not None and not valid(m):
                return m.group()
            counts[kind] += 1
            if group == 0:
                return PLACEHOLDERS[kind]
            start, end = m.start(group) - m.start(), m.end(group) - m.start()
            return m.group()[:start] + PLACEHOLDERS[kind] + m.group()[end:]

        text = pattern.sub(replace, text)
    return text
