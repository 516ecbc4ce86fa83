"""UTF-8 text that was read as cp1252 or Latin-1 (mojibake), read as the text it was before shingling
(`DedupSpec.fold_formats`, with the container formats of `textforms`; never the kept text).

A page or a mail saved as UTF-8 and opened as cp1252 writes each non-ASCII character as two to four others:
`FranÃ§ais` for `Français`, `Ã¼ber` for `über`, `Ð¿Ñ€Ð¸Ð²ÐµÑ‚` for `привет`, `donâ€™t` for `don’t`. `\\w+` reads
`Ã` as a letter (`fold_latin`: `a`) and `§` as a break, so every such word changed and a mojibake copy of a French,
German or Russian text shared few 5-grams with its original (ftfy, which NeMo Curator runs before its dedup,
repairs it; it is not a dependency here). `read_mojibake` re-encodes each sequence of characters that reads as the
cp1252 spelling of UTF-8 bytes (a lead character `Â`-`ô`, then as many continuation characters, U+0080-U+00BF or
cp1252's `€‚ƒ„…†‡ˆ‰Š‹ŒŽ‘’“”•–—˜™š›œžŸ`, as the lead byte asks for) and decodes it as UTF-8, strictly: a sequence that
is no valid UTF-8 stays, and so does one that decodes to a character written text meets by chance, not by encoding
(`_plausible`: a control or unassigned character, a Hebrew accent, IPA, Syriac, NKo: what `CAFÉ’S` or German
`Gruß“` would decode to). Text read as cp1252 twice (`FranÃƒÂ§ais`) is read back twice.

`textforms.format_flags` finds the texts that may hold such a sequence (a byte scan: `Ã` and `Â`…`ô` are `C3 82`…`C3 B4`
in UTF-8, then a continuation character's first byte); only those are read here.

UTF-8 read as another single-byte code page is read back too (`_other_pages`): Cyrillic as cp1251 (`РїСЂРёРІРµС‚`)
or KOI8-R (`п─я┬п╦п╡п╣я┌`), Central European as cp1250 (`mieszkaĹ„cy`), and Latin script as Mac Roman
(`caf√©`): no such copy of a 300-word text was found (0 of 80, J ≤ 0.1). Those pages spell ordinary letters
with the characters mojibake is made of (the cp1251 bytes of Ukrainian `Сі` are valid UTF-8), so a text is read in
one of them only as a whole: where its UTF-8 sequences (3 or more) cover 80 % of its characters from the page's
upper half, as mojibake does and a text written in the page's script never does (`mojibake_docs` picks the texts
holding a lead character of Cyrillic or Latin-with-diacritics mojibake in one of the pages: the others are
not read).
"""

from __future__ import annotations

import re
import unicodedata
from functools import lru_cache

import numpy as np

from tasks.data.dedup import hashloops

# cp1252's characters at 0x80-0x9F (0x81, 0x8D, 0x8F, 0x90 and 0x9D are unassigned: read as Latin-1 they are the C1
# controls U+0081…, which the continuation class holds already)
_CP1252_HIGH = "€‚ƒ„…†‡ˆ‰Š‹ŒŽ‘’“”•–—˜™š›œžŸ"
_BYTE_OF = {c: c.encode("cp1252")[0] for c in _CP1252_HIGH}
_CONT = "[\u0080-\u00bf" + _CP1252_HIGH + "]"
# one UTF-8 sequence spelled in cp1252: a lead of 2, 3 or 4 bytes and its continuations (each judged on its own:
# one implausible character keeps only its own sequence as written)
_RUN = re.compile(rf"[\u00c2-\u00df]{_CONT}|[\u00e0-\u00ef]{_CONT}{{2}}|[\u00f0-\u00f4]{_CONT}{{3}}")
_LEADS = re.compile("[\u00c2-\u00f4]")
_ROUNDS = 2


def _plausible(text: str) -> bool:
    """Whether each character of a decoded sequence is one mojibake stands for: assigned, no control or
    private-use character, no combining mark but the common diacritics (U+0300-U+036F), outside U+0234-U+02FF (rare
    Latin letters, IPA, modifiers) and U+0700-U+08FF: what an upper-case letter before a quote or a dash decodes to
    (`CAFÉ’S`: `É’` → `ɒ`; `Gruß“` → NKo, `Ö–` a Hebrew accent)."""
    return all(not (0x234 <= ord(c) <= 0x2FF or 0x700 <= ord(c) <= 0x8FF) and unicodedata.category(c)[0] != "C"
               and (unicodedata.category(c)[0] != "M" or 0x300 <= ord(c) <= 0x36F) for c in text)


def _repaired(m: re.Match[str]) -> str:
    run = m.group()
    # a no-break space after a symbol or a capital is written text (`2\xa0×\xa010`, Italian `È\xa0`), and the
    # mojibake of the few characters spelled so (`à`, itself, `Р`, `Š`) follows only these leads
    if len(run) == 2 and run[1] == "\xa0" and run[0] not in "ÃÂÐÅ":
        return run
    try:
        text = bytes(_BYTE_OF.get(c, ord(c)) for c in run).decode("utf-8")
    except UnicodeDecodeError:
        return run
    return text if _plausible(text) else run


def read_mojibake(text: str) -> str:
    """`text` with each run of UTF-8 read as cp1252 (or Latin-1) read back as UTF-8 (see the module docstring);
    `text` itself when it holds none."""
    # (a whole text in another page first: cp1252's sequences also spell some of cp1250's, `Ä™` for `ę`)
    out = _other_pages(text)
    for _ in range(_ROUNDS):
        if _LEADS.search(out) is None:
            break
        repaired = _RUN.sub(_repaired, out)
        if repaired == out:
            break
        out = repaired
    return text if out == text else out


# the pages read whole (before cp1252, which `_RUN` reads sequence by sequence), each with the lead bytes it is asked
# for: those of UTF-8's Latin-1 and Latin Extended-A letters (C3-C5) and Cyrillic (D0, D1). Not Mac Roman's D0, D1
# and E2 (`–`, `—`, `‚`: an English text with a dash would be read in Python), nor cp1253: Greek's UTF-8 holds bytes
# cp1253 leaves undefined, and clean drops the C1 controls a browser reads them as, so no copy can be read back
_PAGES = {"cp1251": b"\xd0\xd1", "koi8_r": b"\xd0\xd1", "cp1250": b"\xc3\xc4\xc5", "mac_roman": b"\xc3\xc4\xc5"}
_COVER = 0.8
_MIN_RUNS = 3


@lru_cache(maxsize=None)
def _page(name: str) -> tuple[dict[str, int], re.Pattern[str], re.Pattern[str]]:
    """A page's upper half as (character -> byte; one UTF-8 sequence spelled in it; any upper-half character). A
    byte the page leaves undefined is its C1 control, as browsers (WHATWG's windows-125x) read it."""
    chars = []
    for b in range(0x80, 0x100):
        try:
            chars.append(bytes([b]).decode(name))
        except UnicodeDecodeError:
            chars.append(chr(b))
    byte_of = {c: 0x80 + k for k, c in enumerate(chars)}

    def cls(lo: int, hi: int) -> str:
        return "[" + "".join(re.escape(c) for c in chars[lo - 0x80: hi - 0x80 + 1]) + "]"
    cont = cls(0x80, 0xBF)
    run = re.compile(f"{cls(0xC2, 0xDF)}{cont}|{cls(0xE0, 0xEF)}{cont}{{2}}|{cls(0xF0, 0xF4)}{cont}{{3}}")
    return byte_of, run, re.compile(cls(0x80, 0xFF))


def _page_read(text: str, name: str) -> str | None:
    """`text` with its UTF-8 sequences spelled in page `name` read back, where they are its mojibake: those that
    decode to plausible characters and no combining mark (Mac Roman's `Ã©`, cp1252 mojibake, would decode to
    U+0329) cover `_COVER` of its upper-half characters, `_MIN_RUNS` or more; else None."""
    byte_of, run, upper = _page(name)
    found = run.findall(text)
    if len(found) < _MIN_RUNS:
        return None
    decoded = {}
    for seq in set(found):
        try:
            char = bytes(byte_of[c] for c in seq).decode("utf-8")
        except UnicodeDecodeError:
            continue
        if _plausible(char) and unicodedata.category(char)[0] != "M":
            decoded[seq] = char
    read = [seq for seq in found if seq in decoded]
    if len(read) < _MIN_RUNS or sum(map(len, read)) < _COVER * len(upper.findall(text)):
        return None
    return run.sub(lambda m: decoded.get(m.group(), m.group()), text)


def _other_pages(text: str) -> str:
    """`text` read back from the first page of `_PAGES` it is mojibake in, `text` itself when none."""
    if text.isascii() or _any_lead().search(text) is None:
        return text
    for name in _PAGES:
        read = _page_read(text, name)
        if read is not None:
            return read
    return text


@lru_cache(maxsize=1)
def _any_lead() -> re.Pattern[str]:
    """Any character a page of `_PAGES` spells one of its asked lead bytes with (most texts hold none: one search)."""
    return re.compile("[" + "".join(re.escape(chr(c)) for c in np.flatnonzero(_lead_table()).tolist()) + "]")


@lru_cache(maxsize=1)
def _lead_table() -> np.ndarray:
    """uint8 [65536]: 1 for each character a page of `_PAGES` spells one of its asked lead bytes with."""
    table = np.zeros(0x10000, np.uint8)
    for name, leads in _PAGES.items():
        byte_of = _page(name)[0]
        table[[ord(c) for c, b in byte_of.items() if bytes([b]) in leads]] = 1
    return table


def mojibake_docs(data: np.ndarray, ends: np.ndarray) -> list[int]:
    """Which texts of a batch (UTF-8 `data`, a `\\n` after each, at `ends`) hold a character that spells a lead byte
    of mojibake in a page of `_PAGES` (a superset of those `_other_pages` reads; a compiled scan of their non-ASCII
    bytes, `hashloops.docs_holding`: every Cyrillic text is asked, and a Latin one holding `Ä`, `Ă`, `√`, …;
    an ASCII one is not)."""
    if len(ends) == 0:
        return []
    starts = np.concatenate([[0], np.asarray(ends[:-1], np.int64) + 1])
    docs = np.flatnonzero(np.maximum.reduceat(data, starts) >= 0x80).astype(np.int64)
    if len(docs) == 0:
        return []
    return docs[hashloops.docs_holding(data, np.asarray(ends, np.int64), docs, _lead_table()) == 1].tolist()

