"""Obfuscated addresses that the email passes do not read, as spots of `tasks.data.privacy.pii_veiled`'s view.

- A bracketed dot inside an address whose `at` is `@` or bracketed: in the local part (`jane[.]doe[at]example[.]com`)
  or after a domain that is valid without the rest (`svenh@yahoo.co[.]uk`, which the plain pass cut to
  `<EMAIL>[.]uk`). The bracketed dot is read as `.`; the email passes then take the address whole.
- The `-at-` word with blanks around it (`jane.doe -at- example.com`, `jane -at- example -dot- com`) and the glued
  `_at_` (`jane_at_example.com`), read as `@` (and `-dot-` as `.`) only before a domain people mail to: its last
  label a mail TLD (`_MAIL_TLDS`; file extensions such as `.py`, `.sh`, `.pl` are left out). A glued `-at-` is
  not read: `eat-at-joes.com` is a domain name. Nor `#` (`jane # example.com` is a comment, a channel, a list),
  nor the German word `ät` unbracketed (an umlaut word's letters; the bracketed `[ät]` is `pii_ids`').
- A glued `#` for the `@` right after an email label (`E-mail: ana.souza#gmail.com`, `Correo: ana#gmail.com`), before a
  mail TLD: the label says an address follows, so the `#` is no comment, channel or fragment there.
"""

from __future__ import annotations

import re

_PIECE = r"[A-Za-z0-9](?:[A-Za-z0-9_%+-]{0,62}[A-Za-z0-9])?"
_GLUED_DOT = r"(?:\.|\[\.\]|\(\.\)|\{\.\})"
# (a bracketed `dot` word too: `jane(.)doe(at)example(dot)org`, whose domain the obfuscated pass reads)
_DOT = rf"(?:{_GLUED_DOT}|[ \t]+-dot-[ \t]+|-dot-|[ \t]*[\[({{][ \t]*(?:dot|DOT|Dot)[ \t]*[\])}}][ \t]*)"
_LABEL = r"[A-Za-z0-9](?:[A-Za-z0-9-]{0,61}[A-Za-z0-9])?"
# A local part ending right before the `at` (searched in a window before it; it starts after no address character)
_LOCAL_BEFORE = re.compile(rf"(?<![\w.%+\]\)}}-])(?:{_PIECE})(?:{_GLUED_DOT}{_PIECE}){{0,8}}\Z", re.ASCII)
_DOMAIN = re.compile(rf"{_LABEL}(?:{_DOT}{_LABEL}){{1,6}}(?![\w@-]|\.\w|{_GLUED_DOT}\w)", re.ASCII)
_BRACKETED_DOT = re.compile(r"[\[({]\.[\])}](?<=\[\.\]|\(\.\)|\{\.\})")   # class-led: a fast scan
_DOT_WORD = re.compile(r"[ \t]+-dot-[ \t]+|-dot-")
# Where an address's `at` is: `@` or a bracketed `at` (only where a bracketed dot is in the text), the spaced `-at-`
# word, the glued `_at_`. Each is led by its own characters; the blanks around are taken by `_at_span` (led by
# blanks, a pattern would walk each run of blanks once per blank in it).
_BRACKETED_AT = re.compile(r"[@\[({](?:(?<=@)|[ \t]*(?:at|AT|At|@)[ \t]*[\])}])")
_WORD_AT = re.compile(r"-at-(?<=[ \t]-at-)(?=[ \t])|_at_")
_BLANKS = re.compile(r"[ \t]{0,8}")
_HASH_AT = re.compile(r"#(?<=[A-Za-z0-9]#)(?=[A-Za-z0-9])")
# An email label ending right before the local part (`E-mail: `, `"email": "`, `Correo: `)
_EMAIL_LABEL = re.compile(r"(?i:\be-?mail|\bcorreo|\bcourriel)[\"']?[ \t]*[:=][ \t]*[\"']?\Z")
# Mail TLDs: the generic ones people mail to and countries' codes that are no common file extension.
_MAIL_TLDS = frozenset("com org net edu gov mil info biz name de fr uk nl be ch at se no dk fi ie es it pt pl cz sk "
                       "hu ro gr ru ua jp cn kr tw hk sg in au nz ca us mx br ar cl za".split()) - {"pl"}
_SECOND_LEVEL = frozenset("co com ac org net gov edu".split())
Spot = tuple[int, int, str]


def email_spots(text: str) -> list[Spot]:
    """The spots of the obfuscated addresses in `text`, in order."""
    spots: list[Spot] = []
    if "[.]" in text or "(.)" in text or "{.}" in text:      # (a substring test is faster than any scan)
        for at in _BRACKETED_AT.finditer(text):
            spots += _address_spots(text, _at_span(text, at, at.group() != "@"), form="@")
    if "-at-" in text or "_at_" in text:
        for at in _WORD_AT.finditer(text):
            spots += _address_spots(text, _at_span(text, at, at.group() == "-at-"), form=at.group())
    if "#" in text:
        for at in _HASH_AT.finditer(text):
            spots += _hash_spots(text, at.start())
    return sorted(spots)


def _hash_spots(text: str, at: int) -> list[Spot]:
    """The `#` read as `@` where an email label stands right before the local part and a mail TLD ends the domain."""
    window = text[max(0, at - 84):at].lower()       # a substring test first: a glued `#` is mostly a URL's fragment
    if "mail" not in window and "correo" not in window and "courriel" not in window:
        return []
    local = _LOCAL_BEFORE.search(text, max(0, at - 64), at)
    domain = _DOMAIN.match(text, at + 1)
    if local is None or domain is None or _EMAIL_LABEL.search(text, max(0, local.start() - 16), local.start()) is None:
        return []
    return [(at, at + 1, "@")] if re.split(rf"{_DOT}", domain.group())[-1].lower() in _MAIL_TLDS else []


def _at_span(text: str, at: re.Match[str], blanks: bool) -> tuple[int, int]:
    """The `at`'s span with the blanks around it (up to 8 each side) where they may stand."""
    start, end = at.start(), at.end()
    if blanks:
        while start > max(0, at.start() - 8) and text[start - 1] in " \t":
            start -= 1
        end = _BLANKS.match(text, end).end()
    return start, end


def _address_spots(text: str, at: tuple[int, int], form: str) -> list[Spot]:
    """The spots of the address around the `at` span, or none when the text around it is no address: a
    bracketed dot to read for an `@` or bracketed `at` (`form` "@"); the `at` and dot words too for a word `at`
    (`form` "-at-" or "_at_")."""
    local = _LOCAL_BEFORE.search(text, max(0, at[0] - 64), at[0])
    domain = _DOMAIN.match(text, at[1])
    if local is None or domain is None:
        return []
    labels = re.split(rf"{_DOT}", domain.group())
    tld, second = labels[-1].lower(), labels[-2].lower()
    if form == "@":
        if not tld.isalpha() or not 2 <= len(tld) <= 24:
            return []
        return [(m.start(), m.end(), ".") for span in (local, domain)
                for m in _BRACKETED_DOT.finditer(text, span.start(), span.end())]
    glued = form == "_at_"
    # the glued `_at_` joins identifiers too (`created_at_utc`, `obj.created_at_x.com`): a mail TLD, a local part
    # of one piece (no `_`, no `.`), and a two-letter country code only after a second level (`co.uk`)
    if tld not in _MAIL_TLDS or glued and (not local.group().isalnum() or
                                            len(tld) == 2 and second not in _SECOND_LEVEL):
        return []
    spots = [(at[0], at[1], "@")]
    for span in (local, domain):
        spots += [(m.start(), m.end(), ".") for m in _BRACKETED_DOT.finditer(text, span.start(), span.end())]
    spots += [(m.start(), m.end(), ".") for m in _DOT_WORD.finditer(text, domain.start(), domain.end())]
    return spots
