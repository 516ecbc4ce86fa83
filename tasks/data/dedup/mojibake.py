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
"""

from __future__ import annotations

import re
import unicodedata

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
    out = text
    for _ in range(_ROUNDS):
        if _LEADS.search(out) is None:
            break
        repaired = _RUN.sub(_repaired, out)
        if repaired == out:
            break
        out = repaired
    return text if out == text else out

