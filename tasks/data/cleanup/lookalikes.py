"""Look-alike letters for near dedup's shingles (`DedupSpec.fold_confusables`): Cyrillic `а е о р с`, Greek
`ο ν`, … read as the ASCII letters they imitate, so a spam copy salted with them shares its original's shingles.

The fold applies to every text, whatever its script. It used to apply only to a text where some word mixed
look-alikes with ASCII letters, a decision per document: a Russian text and its copy with one Latin `o` in `сoрок`
(or `Pythonе` for `Python`) were folded one and not the other and shared no shingle (J 0.85 → 0.00). Folded
alike, two texts compare as their words do; distinct texts stay apart (their words differ in the letters that
do not fold, and a 5-gram of words would have to fold onto another's whole). Like every shingle fold it changes
what is compared, never the text kept.
"""

from __future__ import annotations

from functools import lru_cache

import numpy as np


@lru_cache(maxsize=1)
def confusable_letters() -> dict[int, str]:
    """Non-ASCII letters Unicode's confusables data (TR39, via `confusable_homoglyphs`) lists as look-alikes of
    an ASCII letter, as a `str.translate` table to that letter (of its own case where there is one)."""
    from confusable_homoglyphs.confusables import confusables_data

    table: dict[int, str] = {}
    for char, glyphs in confusables_data.items():
        if len(char) != 1 or char.isascii() or not char.isalpha():
            continue
        # the letter of the same case first: Cyrillic `Н` is `H`, while its lower case `н` imitates no letter
        ascii_letters = sorted({g["c"] for g in glyphs if len(g["c"]) == 1 and g["c"].isascii()
                                and g["c"].isalpha()}, key=lambda c: (c.isupper() != char.isupper(), c))
        if ascii_letters:
            table[ord(char)] = ascii_letters[0]
    return table


@lru_cache(maxsize=1)
def look_alike_table() -> dict[int, str]:
    """The fold's `str.translate` table: `confusable_letters()` closed under case, each letter to one lower-case
    ASCII letter, the one its case fold imitates, else its lower or upper case's (`н`, which imitates nothing,
    goes where `Н` does, `h`; Greek `Ν` and `ν` both to `v`, `Σ`, `σ` and final `ς` to `o`). Folded case by
    case instead, an upper-case copy of a Greek or Cyrillic text (a heading, a shouted line) would read
    differently from its original. (Built once per process over planes 0-1, where every look-alike is: ~0.1 s.)"""
    raw = confusable_letters()
    table: dict[int, str] = {}
    for code in range(0x80, 0x20000):
        char = chr(code)
        forms = (char.casefold(), char.lower(), char.upper(), char)
        target = next((raw[ord(c)] for c in forms if len(c) == 1 and ord(c) in raw), None)
        if target is not None:
            table[code] = target.lower()
    return table


@lru_cache(maxsize=1)
def look_alike_mask() -> np.ndarray:
    """`look_alike_table()`'s letters as a bool [0x110000] by code point (built once per process)."""
    mask = np.zeros(0x110000, dtype=np.bool_)
    mask[list(look_alike_table())] = True
    return mask


def has_look_alikes(text: str) -> bool:
    """Whether `text` holds a letter `fold_confusables` reads as another: over its code points at once (numpy,
    ~5 ns a character; a regex class of the ~1,100 look-alikes is tested by `re` as a list, ~3 µs a character)."""
    if text.isascii():
        return False
    points = np.frombuffer(text.encode("utf-32-le", "surrogatepass"), dtype=np.uint32)
    return bool(look_alike_mask()[points].any())


def fold_confusables(text: str) -> str:
    """`text` with every look-alike letter read as the ASCII letter it imitates (`look_alike_table`)."""
    return text.translate(look_alike_table()) if has_look_alikes(text) else text
