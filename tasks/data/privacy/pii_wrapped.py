"""Values wrapped onto the next line: an IBAN, a card number or a phone number that a PDF's text extraction or a
fixed-width layout broke between two digit groups (`IBAN DE34 1425 9415` / `    6060 3072 89`, `Card number:
4828 9580` / `    2752 5410`, `call us on (212)` / `727-1720`).

Either half alone is too short to be the value, so the passes that read one line keep both (a probe of 10
statements kept all 30 such values, or replaced a half as something else). At each line break between two digit groups
the group run ending the line and the one opening the next (after its indentation) are read as one value and
replaced, line break included, when the whole validates and the first half alone does not:
- an IBAN by its mod-97 check (`stdnum.iban`), led by its country code;
- a card by Luhn and a card network's first digit, with a card word before it on its line (`card`, `Karte`,
  `carte`, `tarjeta`): a table's rows of 4-digit groups pass Luhn one time in ten;
- a phone of 10 to 15 digits after a phone cue (`pii_cues`), or opening with `+` or a bracketed area code.

An e-mail address hyphenated at a line break (`john.smith-` / `example@corp.com`, `john.smith@exam-` /
`ple.com`) is replaced whole, break included (`WRAPPED_EMAIL_PASSES`, run before `pii_emails`', which took the
second line's part alone and left the first line's name, or nothing at all).
"""

from __future__ import annotations

import re

from stdnum import iban as stdnum_iban, luhn as stdnum_luhn

from tasks.data.privacy.pii_cells import LabelledValues, last_text_memo
from tasks.data.privacy.pii_cues import phone_cue_before

_BREAK = re.compile(r"\n[ \t]*[0-9A-Z(]")       # led by the newline, a fast scan; the line before is checked
_ENDS_A_VALUE = re.compile(r"[0-9A-Z)][ \t\r]*$")
_HEAD = {
    "iban": re.compile(r"(?<![A-Za-z0-9])[A-Z]{2}\d{2}(?:[ ]?[A-Z0-9]{1,4}){0,7}[ \t]*$"),
    "credit_card": re.compile(r"(?<![\w.-])\d{4}(?:[ -]\d{4}){0,3}[ \t]*$"),
    "phone": re.compile(r"(?<![\w.+-])(?:\+\d{1,3}[ .-]?)?(?:\(\d{2,5}\)|\d{1,5})(?:[ .-]\d{1,5}){0,3}[ \t]*$"),
}
_TAIL = {
    # grouped, or the rest of an unspaced IBAN in one run (`NL44RABO` / `0123456789`)
    "iban": re.compile(r"[ \t]*([A-Z0-9]{1,4}(?:[ ][A-Z0-9]{1,4}){0,7}|[A-Z0-9]{5,30})(?![A-Za-z0-9])"),
    "credit_card": re.compile(r"[ \t]*(\d{1,4}(?:[ -]\d{1,4}){0,3})(?![\w-]|[.,]\d)"),
    "phone": re.compile(r"[ \t]*(\d{1,8}(?:[ .-]\d{1,8}){0,3})(?![\w-]|[.,]\d)"),
}
# (Scandinavian `kort`/`kortnummer`, Polish/Czech `karta`/`karty`, Finnish `kortti` too)
_CARD_WORD = re.compile(r"(?i)card|karte|carte|tarjeta|kaart|cart[aã]o|kort|kart[ay]")
_LOOK_BACK = 48         # the longest head: an IBAN's 8 groups


def _digits(value: str) -> str:
    return re.sub(r"\D", "", value)


def _valid(kind: str, head: re.Match[str], tail: str) -> bool:
    """Whether head + tail (a break between them) is a value of the kind, and the head alone none."""
    first = re.sub(r"\s", "", head.group())
    whole = first + re.sub(r"\s", "", tail)
    if kind == "iban":
        return stdnum_iban.is_valid(whole) and not stdnum_iban.is_valid(first)
    digits = _digits(whole)
    if kind == "credit_card":
        line_start = head.string.rfind("\n", 0, head.start()) + 1
        # (Mastercard's 2-series, 2221-2720, too)
        return 13 <= len(digits) <= 19 and (digits[0] in "3456" or 2221 <= int(digits[:4]) <= 2720) and \
            len(set(digits)) > 2 and \
            stdnum_luhn.is_valid(digits) and _CARD_WORD.search(head.string, line_start, head.start()) is not None
    if not 10 <= len(digits) <= 15 or len(_digits(first)) >= 10:
        return False
    return first[0] in "+(" or phone_cue_before(head, 40) is not None


def _tails(kind: str, text: str, at: int) -> list[tuple[int, str]]:
    """(end, text) of the tail's candidates at `at`: its groups, longest first."""
    m = _TAIL[kind].match(text, at)
    if m is None:
        return []
    groups = list(re.finditer(r"[A-Z0-9]+" if kind == "iban" else r"\d+", m.group(1)))
    base = m.start(1)
    return [(base + g.end(), text[at:base + g.end()]) for g in reversed(groups)]


def _wrapped(text: str) -> list[tuple[str, tuple[int, int]]]:
    """(kind, span) of each wrapped value of `text`."""
    found: list[tuple[str, tuple[int, int]]] = []
    last = 0
    for brk in _BREAK.finditer(text):
        newline = brk.start()
        line_start = text.rfind("\n", 0, newline) + 1
        if _ENDS_A_VALUE.search(text, max(line_start, newline - 8), newline) is None:
            continue
        for kind, head_pattern in _HEAD.items():
            head = head_pattern.search(text, max(line_start, newline - _LOOK_BACK, last), newline)
            if head is None:
                continue
            span = next(((head.start(), end) for end, tail in _tails(kind, text, newline + 1)
                         if _valid(kind, head, tail)), None)
            if span is not None:
                found.append((kind, span))
                last = span[1]
                break
    return found


def _has_break(text: str) -> bool:
    return "\n" in text


_FOUND = last_text_memo(_wrapped)
# (kind, pattern, validator, group, hint): `pii`'s pass table; before the one-line passes, which take a half
WRAPPED_PASSES = tuple((kind, LabelledValues(kind, _FOUND), lambda m: True, 0, _has_break)
                       for kind in ("iban", "credit_card", "phone"))


# An address broken after a hyphen: in its local part (the next line holds the `@`), or in its domain (the line
# holds the `@` and the next the rest of the domain and its TLD). A hyphenated word with no `@` after it, a
# package's `left-` / `pad@1.3.0` (no TLD) and a host name alone stay.
_LOCAL = r"[A-Za-z0-9._%+'-]"
_TLD = r"\.[A-Za-z]{2,24}(?![A-Za-z0-9-])"
_WRAPPED_EMAIL = re.compile(
    r"(?<![\w.%+'-])(?:" + _LOCAL + r"*[A-Za-z0-9]-\r?\n[ \t]*" + _LOCAL + r"*[A-Za-z0-9_%+-]@"
    r"(?:[A-Za-z0-9](?:[A-Za-z0-9-]{0,61}[A-Za-z0-9])?\.)*[A-Za-z0-9](?:[A-Za-z0-9-]{0,61}[A-Za-z0-9])?" + _TLD +
    r"|" + _LOCAL + r"*[A-Za-z0-9_%+-]@(?:[A-Za-z0-9-]+\.)*[A-Za-z0-9-]*[A-Za-z0-9]-\r?\n[ \t]*"
    r"[A-Za-z0-9-]*(?:\.[A-Za-z0-9-]+)*" + _TLD +
    # or broken right after its `@` (`anna.schmidt@` / `uni-heidelberg.de`)
    r"|" + _LOCAL + r"*[A-Za-z0-9_%+-]@\r?\n[ \t]*(?:[A-Za-z0-9](?:[A-Za-z0-9-]{0,61}[A-Za-z0-9])?\.)*"
    r"[A-Za-z0-9](?:[A-Za-z0-9-]{0,61}[A-Za-z0-9])?" + _TLD + r")")
_AFTER_REMOTE = re.compile(r":[\w~/]")        # git's `git@host:org/repo`: a host and a path, nobody's address
_ADDRESS_CHARS = frozenset("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789._%+'-@")
_LONGEST = 254          # an address's most characters: how far back from a break its start is looked for


def _wrapped_emails(text: str) -> list[tuple[str, tuple[int, int]]]:
    """(kind, span) of each address broken at a `-` or after its `@` and a line break. Found from each break
    (`str.find`, each needle's next place kept till passed): the pattern tried at every word of the text cost 3 %
    of scrubbing code."""
    found: list[tuple[str, tuple[int, int]]] = []
    nxt, last = {needle: text.find(needle) for needle in ("-\n", "-\r\n", "@\n", "@\r\n")}, 0
    while (breaks := [k for k in nxt.values() if k >= 0]):
        brk = min(breaks)
        start = brk
        while start > max(last, brk - _LONGEST) and text[start - 1] in _ADDRESS_CHARS:
            start -= 1
        m = _WRAPPED_EMAIL.match(text, start)
        if m is not None and m.end() > brk and _AFTER_REMOTE.match(text, m.end()) is None and \
                any(c.isalpha() for c in m.group().split("@")[0]):
            found.append(("email", m.span()))
            last = m.end()
        at = max(brk + 1, last)
        nxt = {needle: k if k < 0 or k >= at else text.find(needle, at) for needle, k in nxt.items()}
    return found


# (kind, pattern, validator, group, hint): `pii`'s pass table, before `pii_emails.EMAIL_PASSES`
WRAPPED_EMAIL_PASSES = (("email", LabelledValues("email", last_text_memo(_wrapped_emails)), lambda m: True, 0,
                         lambda text: "-\n" in text or "-\r\n" in text or "@\n" in text or "@\r\n" in text),)
