"""PII scrubbing: replace emails, phone numbers, IP addresses, card numbers, IBANs, SSNs, secrets, dates of birth and
passport numbers by typed placeholders.

`scrub_pii(text, kinds, keep_addresses)` returns the scrubbed text and counts by kind (`email`, `phone`, `ipv4`,
`ipv6`, `credit_card`, `iban`, `ssn`, `secret`, `dob`, `passport`; only kinds that occurred, sorted). Passes run in
a fixed order: secrets (`tasks.data.privacy.pii_secrets`; a key or token may hold an `@` or digit groups), emails
(`tasks.data.privacy.pii_emails`), passports' machine-readable zones, passport numbers and dates of birth after
their cues (`tasks.data.privacy.pii_personal`; their digits would be read as phones or cards), obfuscated emails, IBANs,
SSNs (US, and the UK's and Canada's numbers, `tasks.data.privacy.pii_ids`; other countries' national identity
numbers, `tasks.data.privacy.pii_national`: their digit groups would be eaten by the card and phone passes; never
right after a phone cue, `tasks.data.privacy.pii_cues`), cards, IPv6, IPv4, phones, each on the previous pass's output.
Shapes of layout come first among them: grouped author addresses (`pii_authors`), values under a row of labels
(`pii_labelrows`), values wrapped onto the next line (`pii_wrapped`), bank account numbers after their label
(`pii_accounts`); credentials of their own shape (`pii_credentials`) before the other secrets, random tokens of
rows that name no column (`pii_rows`) after them, an AWS secret key right after its access key id
(`pii_pairs_aws`) before them; an SSN-shaped ticket or order number is no SSN (`pii_references`). A folded calendar
or mail header line (`pii_folded`) is scrubbed unfolded, and a value veiled by how it is written (`&nbsp;` or
LaTeX's `~` between a phone's groups, an HTML comment inside it, en dashes, a card's `/`, an IBAN's dots, an
address's `[.]` or `-at-`: `pii_veiled`) as a reader sees it. Regexes are compiled once and find *candidates*; a
callback validates each one (Luhn and issuer prefix, `ipaddress`, digit counts, entropy, placeholder and code
checks) and returns the match unchanged if no PII.

What is deliberately not PII, to keep code and ordinary prose intact:
- phones: see `tasks.data.privacy.pii_phones` (a cue word or a phone's layout; dates, years, times, prices, version
  numbers, ISBNs and bare integers without a cue do not match);
- IPv4 needs exactly four octets ≤ 255 without leading zeros, not inside a longer dotted run (`1.2.3.4.5`,
  OIDs) and not after `v`/`version`/`section`/`rfc`/`==`/`foo-` (versions); four octets all ≤ 31
  (`## 1.2.3.4`, `GCC 11.4.0.1`) need an address cue, a port, `/32` or a line of addresses; IPv6 needs a decimal digit or
  three groups (`dead::beef` is two hex words), three colons or a 4-digit group with a letter (`fe80::1`, but
  not the slices `x[1::2]`, `x[100::2]`), a group that is not a clock's (`10:00::11:00`), and must parse; a
  full stop after either ends the sentence. Netmasks and CIDR networks (`10.0.0.0/8`) are kept; `/32` and
  `/128` are single hosts and count. The address classes in `keep_addresses` (by default all of
  `ADDRESS_CLASSES`: loopback, private, link-local, unspecified, documentation, multicast) are kept as well —
  a machine's own, a LAN's, an example's or a group's address, nobody's personal data;
- cards: 12–19 digits, bare, in groups of 4 with a shorter last one (4-4-4 to 4-4-4-4-3; not one stretch of a
  longer row of 4-digit groups) or 4-6-5 / 4-6-4, a plausible issuer prefix and Luhn; digit groups inside an
  IBAN-shaped run (`PL46 4634 ...` with a wrong check digit) are neither cards nor phones;
- IBANs, SSNs and obfuscated emails: see `tasks.data.privacy.pii_ids` (registry length and mod-97; SSA rules; the `at`
  bracketed or an upper-case `AT` word, never lower-case prose such as `ann at example dot com`);
- secrets: see `tasks.data.privacy.pii_secrets` (placeholders such as `${TOKEN}` or `changeme` and code such as
  `key=lambda x: x` are left alone; so are headers that only name a credential header, `headers.get("X-Api-Key")`,
  and cookies that hold no login, `_ga`, `csrftoken`: `tasks.data.privacy.pii_headers`; a name/value pair whose
  `value` is a reference, `valueFrom:`, or whose name is none, `Content-Type`, and a call's password given as a
  variable, `auth=(user, password)`: `tasks.data.privacy.pii_pairs`).
Every syntactically valid email is PII, in any script (`jörg@müller.de`, `用户@例子.广告`), including author
addresses in source comments, a quoted local part (`"john doe"@example.com`) and an `@` written as an HTML
entity (`&#64;`) or, in quoted-printable text, as `=40`.
"""

from __future__ import annotations

import ipaddress
import re
from collections import Counter
from typing import Callable, Iterable

from specs.clean import ADDRESS_CLASSES, PII_KINDS
from tasks.data.privacy.pii_cards import card_ok, luhn_ok  # noqa: F401 — luhn_ok is part of this module's API
from tasks.data.privacy.pii_chain import Chained
from tasks.data.privacy.pii_accounts import ACCOUNT_PASSES
from tasks.data.privacy.pii_authors import AUTHOR_PASSES
from tasks.data.privacy.pii_emails import EMAIL_PASSES
from tasks.data.privacy.pii_encoded import ENCODED_EMAIL_PASSES
from tasks.data.privacy.pii_folded import fold_view, unfold_restore
from tasks.data.privacy.pii_ids import ID_PASSES as CUED_ID_PASSES
from tasks.data.privacy.pii_ids import PLACEHOLDERS as ID_PLACEHOLDERS
from tasks.data.privacy.pii_width import restore, width_view
from tasks.data.privacy.pii_literals import remembered_absence
from tasks.data.privacy.pii_labelrows import LABEL_ROW_PASSES
from tasks.data.privacy.pii_national import NATIONAL_PASSES
from tasks.data.privacy.pii_national_more import MORE_NATIONAL_PASSES
from tasks.data.privacy.pii_cells import CELL_PASSES
from tasks.data.privacy.pii_columns import COLUMN_PASSES
from tasks.data.privacy.pii_credentials import CREDENTIAL_PASSES
from tasks.data.privacy.pii_devfiles import DEVFILE_PASSES
from tasks.data.privacy.pii_keyfiles import KEY_FILE_PASSES
from tasks.data.privacy.pii_passwordtable import PASSWORD_TABLE_PASSES
from tasks.data.privacy.pii_personal import PERSONAL_PASSES
from tasks.data.privacy.pii_phones import PHONE_PASSES
from tasks.data.privacy.pii_plainwords import PLAINWORD_PASSES
from tasks.data.privacy.pii_rows import ROW_PASSES
from tasks.data.privacy.pii_secrets import SECRET_PASSES
from tasks.data.privacy.pii_sql import SQL_PASSES
from tasks.data.privacy.pii_pairs_aws import AWS_PAIR_PASSES
from tasks.data.privacy.pii_references import without_references
from tasks.data.privacy.pii_tags import tag_restore, tag_view
from tasks.data.privacy.pii_veiled import veiled_restore, veiled_view
from tasks.data.privacy.pii_wrapped import WRAPPED_EMAIL_PASSES, WRAPPED_PASSES

ID_PASSES = without_references(CUED_ID_PASSES)     # an SSN-shaped ticket or order number is no SSN
PLACEHOLDERS = {"email": "<EMAIL>", "phone": "<PHONE>", "ipv4": "<IP_ADDRESS>", "ipv6": "<IP_ADDRESS>",
                "credit_card": "<CREDIT_CARD>", **ID_PLACEHOLDERS, "secret": "<SECRET>", "dob": "<DOB>",
                "passport": "<PASSPORT>"}

# Many patterns start with one consumed character and then check what precedes it with a two-character
# lookbehind (`[0-9](?<![\w.][0-9])`): a pattern that opens with a character class lets `re` skip
# non-candidate positions in C, which a leading lookbehind prevents (6x faster on digit-led patterns).

# --- cards, addresses, phones ----------------------------------------------------------------------------
# Bare; in groups of 4 (spaced, dashed or dotted) with a shorter last group (12-19 digits: Maestro 4-4-4,
# Visa 4-4-4-1, Diners 4-4-4-2, Amex 4-4-4-3, 4-4-4-4, 4-4-4-4-3); Amex 4-6-5, Diners 4-6-4. A comma around it
# is a CSV field's unless it reads as a number's (`1,4111...`, `...1111,50`; not `...1111,04,2026` or
# `...1111,04/26`: an expiry's fields).
_CARD = re.compile(r"[0-9](?<![\w.+-][0-9])(?<![0-9],[0-9])"
                   r"(?:\d{11,18}|\d{3}(?P<s>[ .-])\d{4}(?P=s)\d{4}(?:(?P=s)\d{4}(?:(?P=s)\d{3}(?!\d))?|(?P=s)\d{1,3})?"
                   r"|\d{3}([ -])\d{6}\2\d{4,5})"
                   r"(?!\w|[.-]\d|,\d{1,2}(?![\d,/]))", re.ASCII)
_IPV6 = re.compile(r"(?<![\w:.])(?:[0-9A-Fa-f]{0,4}:){2,7}(?:[0-9A-Fa-f]{1,4}|(?:\d{1,3}\.){3}\d{1,3})?(?![\w:]|\.\d)",
                   re.ASCII)
_IPV6_HINT = re.compile(r"::|:[0-9A-Fa-f]{1,4}:[0-9A-Fa-f]{1,4}:")
_HEX_OR_COLON = frozenset("0123456789abcdefABCDEF:")
_HEX_RUN = re.compile("[0-9A-Fa-f:]*")


class ColonLed:
    """`sub(repl, text)` like `_IPV6`'s, tried only at the run of hex digits and colons around each `_IPV6_HINT`
    (every valid address has `::` or seven colons). `_IPV6` opens with a lookbehind, so run as a plain `re.sub`
    it is tried at every character of the text (45 ms of ~200 per round on 1.3 MB of code). The lookbehind
    forbids a start after a hex digit or a colon, so the run's first character is the only possible start: a
    run is tried once (`:::...` or `1:1:1:...` would otherwise walk back 45 characters at each of its hints)."""

    def sub(self, repl: Callable[[re.Match[str]], str], text: str) -> str:
        out, last, tried = [], 0, 0
        for hint in _IPV6_HINT.finditer(text):
            start = hint.start()
            if start < max(last, tried):
                continue
            floor = max(last, start - 45)         # 45: the longest address, IPv4-mapped
            while start > floor and text[start - 1] in _HEX_OR_COLON:
                start -= 1
            if (m := _IPV6.match(text, start)) is None:
                tried = _HEX_RUN.match(text, hint.start()).end()
                continue
            out += (text[last:start], repl(m))
            last = m.end()
        return "".join(out) + text[last:] if out else text

_IPV4 = re.compile(r"[0-9](?<![\w.][0-9])\d{0,2}(?:\.\d{1,3}){3}(?!\w|\.\w)", re.ASCII)
# A prefix length is a whole number on its own: the `/8` of `8.8.8.8/8.8.8.8/` or the `/2` of `::1/2a00:...` starts
# the next address. Read as a prefix, the first address was kept until the next became a placeholder, one a round
# from the end backwards (MAX_ROUNDS left most of a long run); now it is decided the same in every round.
_PREFIX_AFTER = re.compile(r"/(\d{1,3})(?!\w|\.\d)")
# Dotted quads after these words are versions or section numbers ("version 1.2.3.4", "sections 8.2.4.44").
# A product token's slash (`Firefox/1.9.2.20`), a user agent's `rv:`, a requirement's comparison
# (`foo==1.2.3.4`, `>=`, `~=`) and a package name's dash (`foo-1.2.3.4`) lead versions too.
_NOT_AN_ADDRESS_BEFORE = re.compile(r"(?i)(?:\bv|\bver|version|versions|release|build|firmware|kernel|patch|"
                                    r"section|sections|§|rfc|\brv)[\W_]{0,4}$|[A-Za-z]/$|[=<>~!]=[ ]*$|[A-Za-z]-$")
# Four octets all <= 31 are how versions and section numbers look (`## 1.2.3.4 (2020-01-01)`, `GCC 11.4.0.1`,
# `clause 4.2.1.3`), and a person's address rarely does ((32/256)^4, 0.02%): such a quad is an address only
# after an address cue (`client 1.2.3.4`, `ssh root@8.8.8.8`, `http://1.2.3.4/`, `IP address is 1.2.3.4`),
# before a port, `/32` or a log line's ` - - [`, or in a list of addresses, one or more alone on their line
# (a blocklist's `8.8.8.8`, `8.8.8.8, 8.8.4.4`).
_ADDRESS_CUE = re.compile(r"(?i)(?:\bip(?:v4)?|address(?:es)?|\baddr|\bhosts?|server|\bfrom|client|remote|gateway|"
                          r"\bdns|\bping|connect(?:ed|ing)?[ \t]+to|forwarded[-_ ]for|://|@)"
                          r"(?:[ \t]+(?:is|was|at|of))?[^\w\n]{0,4}$")
_VERSION_WORD = re.compile(r"(?i)\b(?:regress\w*|upgrad\w*|downgrad\w*|migrat\w*|updat\w*|bump\w*|versions?|"
                           r"releases?|changed|changes|moved)\b[^\n]{0,30}$")
# A dashed suffix with a letter makes a version (`5.15.0.105-generic`, `115.0.2.1-1ubuntu1`; not `1.2.3.4-1.2.3.9`)
_VERSION_SUFFIX = re.compile(r"-[0-9A-Za-z.+~]*[A-Za-z]")
_ADDRESS_AFTER = re.compile(r":\d{1,5}(?!\d)|/32(?!\d)|[ ]-[ ]\S{1,32}[ ]\[")
_QUAD = r"(?:\d{1,3}(?:\.\d{1,3}){3}|<IP_ADDRESS>)"
_ADDRESS_LINE = re.compile(rf"[ \t]*{_QUAD}(?:[ \t]*[,;/]?[ \t]*{_QUAD})*[ \t]*[,;/]?[ \t]*")
_LIST_LINE_MAX = 400    # (bounded: a line is read once per quad in it)


def _ipv4(m: re.Match[str], keep: frozenset[str]) -> bool:
    try:
        address = ipaddress.IPv4Address(m.group())
    except ValueError:                      # an octet over 255 or with a leading zero
        return False
    if _is_mask(int(address), 32) or not _is_host(m, 32) or address_class(address) in keep:
        return False
    # `+34.100.100.100` is Spain's `+CC.` phone layout: with a `+` and 10 or more digits the phone pass takes it
    if m.string[m.start() - 1:m.start()] == "+" and sum(c.isdigit() for c in m.group()) >= 10:
        return False
    text, start = m.string, m.start()
    if _NOT_AN_ADDRESS_BEFORE.search(text, max(0, start - 12), start) or _VERSION_SUFFIX.match(text, m.end()):
        return False
    return max(address.packed) > 31 or _address_cued(m)


def _address_cued(m: re.Match[str]) -> bool:
    """An address cue before the quad, a port or `/32` after it, or a list of addresses around it (`_ADDRESS_CUE`;
    `from` not after a word about versions: `Regression from 2.14.1.2`, `upgraded from 1.2.3.4`)."""
    text, start, end = m.string, m.start(), m.end()
    cue = _ADDRESS_CUE.search(text, max(0, start - 24), start)
    if cue and not (cue.group().lower().lstrip().startswith("from") and
                    _VERSION_WORD.search(text, max(0, cue.start() - 40), cue.start())):
        return True
    if _ADDRESS_AFTER.match(text, end):
        return True
    line_start = text.rfind("\n", max(0, start - _LIST_LINE_MAX), start) + 1
    line_end = text.find("\n", end, end + _LIST_LINE_MAX)
    line_end = len(text) if line_end < 0 and len(text) - end <= _LIST_LINE_MAX else line_end
    return (line_start > 0 or start <= _LIST_LINE_MAX) and line_end >= 0 and \
        _ADDRESS_LINE.fullmatch(text, line_start, line_end) is not None


def _ipv6(m: re.Match[str], keep: frozenset[str]) -> bool:
    candidate = m.group()
    # Two groups of hex letters are hex words or a C++ scope (`dead::beef`, `Abc::Def`), not an address.
    if not any(c.isdigit() for c in candidate) and len(re.findall("[0-9A-Fa-f]+", candidate)) < 3:
        return False
    # `x[1::2]` and `100::2` are slices: with only two colons, demand a 4-digit group with a letter (fe80::1).
    if candidate.count(":") < 3 and not re.search(r"(?<![0-9A-Fa-f])(?=[0-9]*[A-Fa-f])[0-9A-Fa-f]{4}", candidate):
        return False
    if not re.search(r"[0-9A-Fa-f]{3}|[A-Fa-f]", candidate):    # `10:00::11:00`: times, not an address
        return False
    # Eight groups of two hex digits are bytes (a key fingerprint, an EUI-64, `de:ad:be:ef:00:01:02:03`): an
    # address is written without leading zeros and with a `::` for its zero groups (RFC 5952)
    if re.fullmatch(r"[0-9A-Fa-f]{2}(?::[0-9A-Fa-f]{2}){7}", candidate):
        return False
    try:
        address = ipaddress.IPv6Address(candidate)
    except ValueError:
        return False
    return not _is_mask(int(address), 128) and _is_host(m, 128) and address_class(address) not in keep


def _is_host(m: re.Match[str], bits: int) -> bool:
    """No prefix length after the address, the full one (`203.0.113.7/32` is one host, `10.0.0.0/8` a network), or
    one that leaves host bits set: an interface's own address (`inet 81.169.145.92/24` in `ip addr`, a router's
    `ipv6 address 2a01:4f8::2/64`) is a host's, only a network's first address names the network."""
    prefix = _PREFIX_AFTER.match(m.string, m.end())
    if prefix is None or int(prefix.group(1)) == bits:
        return True
    try:
        interface = ipaddress.ip_interface(f"{m.group()}/{prefix.group(1)}")
    except ValueError:                      # a prefix longer than the address has bits
        return False
    return interface.ip != interface.network.network_address


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


def _hint(*needles: str) -> Callable[[str], bool]:
    return lambda text: any(needle in text for needle in needles)


Validator = Callable[[re.Match[str], frozenset[str]], bool]
Group = int | Callable[[re.Match[str]], "int | tuple[int, int]"]
# (kind, pattern, validator(match, kept address classes) or None, group to replace (0 = whole match, or a
# function of the match giving a group or a (start, end) span within it), cheap test that the pass can match)
_PASSES: tuple[tuple[str, re.Pattern[str], Validator | None, Group, Callable[[str], bool]], ...] = (
    *(("secret", pattern, None if valid is None else (lambda m, keep, valid=valid: valid(m)), group, hint)
      for pattern, valid, group, hint in AWS_PAIR_PASSES + DEVFILE_PASSES + KEY_FILE_PASSES + CREDENTIAL_PASSES +
                                       SECRET_PASSES + PASSWORD_TABLE_PASSES + PLAINWORD_PASSES + ROW_PASSES),
    *((kind, pattern, lambda m, keep, valid=valid: valid(m), group, hint)
      for kind, pattern, valid, group, hint in AUTHOR_PASSES + WRAPPED_EMAIL_PASSES + ENCODED_EMAIL_PASSES + EMAIL_PASSES +
      PERSONAL_PASSES +
      COLUMN_PASSES + CELL_PASSES + LABEL_ROW_PASSES + WRAPPED_PASSES + ACCOUNT_PASSES + SQL_PASSES + ID_PASSES +
      NATIONAL_PASSES + MORE_NATIONAL_PASSES),
    ("credit_card", Chained(_CARD, ",;/|"), lambda m, keep: card_ok(m), 0, bool),
    ("ipv6", ColonLed(), _ipv6, 0, _hint(":")),
    ("ipv4", _IPV4, _ipv4, 0, _hint(".")),
    *((kind, pattern, lambda m, keep, valid=valid: valid(m), group, hint)
      for kind, pattern, valid, group, hint in PHONE_PASSES),
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
    text, counts = _in_folded_view(text, wanted, keep)
    untagged = tag_view(text)       # a value split by inline HTML tags (`john<span>@</span>example.com`)
    if untagged is not None:
        scrubbed, more = _in_width_view(untagged[0], wanted, keep)
        restored = tag_restore(text, *untagged, scrubbed, PLACEHOLDERS.values()) if more else None
        if restored is not None:
            return restored, dict(sorted((Counter(counts) + Counter(more)).items()))
    return text, counts


def _in_folded_view(text: str, wanted: set[str], keep: frozenset[str]) -> tuple[str, dict[str, int]]:
    folded = fold_view(text)        # a folded calendar line or mail header read as the one line it means
    if folded is not None:
        scrubbed, counts = _in_veiled_view(folded[0], wanted, keep)
        restored = unfold_restore(text, *folded, scrubbed, PLACEHOLDERS.values()) if counts else text
        if restored is not None:
            return restored, counts
    return _in_veiled_view(text, wanted, keep)


def _in_veiled_view(text: str, wanted: set[str], keep: frozenset[str]) -> tuple[str, dict[str, int]]:
    """`_in_width_view` on the text as a reader sees it (`pii_veiled`: `&nbsp;` as a space, a comment inside a
    value dropped, ...), then on the result as written: the view reads values the text hides, and may hide one
    that the text shows (a comment dropped between a card and a digit), so the second reading takes that."""
    veiled = veiled_view(text)
    if veiled is None:
        return _in_width_view(text, wanted, keep)
    scrubbed, counts = _in_width_view(veiled[0], wanted, keep)
    restored = veiled_restore(text, *veiled, scrubbed, PLACEHOLDERS.values()) if counts else None
    text, more = _in_width_view(text if restored is None else restored, wanted, keep)
    return text, dict(sorted((Counter(counts if restored is not None else {}) + Counter(more)).items()))


def _in_width_view(text: str, wanted: set[str], keep: frozenset[str]) -> tuple[str, dict[str, int]]:
    """`_rounds` on the text with full-width forms read as ASCII, their own characters kept around placeholders."""
    view = width_view(text)         # full-width digits and letters (`０３－１２３４－５６７８`) read as ASCII
    if view is not None:
        scrubbed, counts = _rounds(view, wanted, keep)
        restored = restore(text, view, scrubbed, PLACEHOLDERS.values()) if counts else text
        if restored is not None:
            return restored, counts
    return _rounds(text, wanted, keep)


def _rounds(text: str, wanted: set[str], keep: frozenset[str]) -> tuple[str, dict[str, int]]:
    counts: Counter[str] = Counter()
    with remembered_absence(PLACEHOLDERS.values()):     # a literal absent in round 1 is absent in round 2
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

        text = pattern.sub(replace, text)
    return text
