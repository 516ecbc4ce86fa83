"""Traditional and Simplified Chinese characters read alike by near dedup's shingles (`DedupSpec.fold_unicode`).

A Chinese text converted between the two scripts (OpenCC, a site's 繁/简 switch, a mirror in Taiwan or Hong
Kong) changes ~1 character in 6 of its own: most 5-character shingles then hold one, and the copy shared ~0.1 of
its shingles with its original (a probe of 203 man-page, tutor and prose documents through OpenCC's full phrase
converters s2t, s2tw, s2hk, s2twp and back: Jaccard median 0.07-0.14, none found). `simplify_han` reads each
Traditional character as its Simplified form (OpenCC's character dictionary, `t2s` with the Taiwan and Hong Kong
variant forms of `tw2s`/`hk2s`), in every text alike, as `casefold` reads capitals: `漢語` and `汉语` are then the
same two words. Characters that are Simplified already stay; a Traditional character with several Simplified
readings takes OpenCC's first (`乾` → `干`), the same in the original and its copy. Where OpenCC's phrase
converter writes a Traditional character that is a Simplified one too for a word (`了解` → `瞭解`, `回复` → `回覆`,
`借口` → `藉口`; `計畫` → `计划`: `PHRASE_FORMS`), the two are read as one, in every text. A converter's
choice of another word (`軟體` for `软件`, Taiwan's vocabulary: OpenCC's `s2twp`) is a different word and stays one.

The table (5,169 characters) is built once per process from the installed OpenCC's dictionaries (~0.15 s), so
shingles depend on the OpenCC version: it is pinned. Only text holding a character of a script written without
spaces pays anything (`segment.split_unspaced` applies it): the lookup is one numpy gather over the text's code
points (~15-30 µs a 600-character text; `str.translate` with the same table ~130 ns a character, ~75 µs).
"""

from __future__ import annotations

import re
from functools import lru_cache

import numpy as np

# Where a character OpenCC converts may be: CJK extension A, the unified ideographs, the compatibility ideographs
# (NFKC reads those first), the astral ideograph planes (extensions B-H)
IDEOGRAPH_RANGES = ((0x3400, 0x4DC0), (0x4E00, 0xA000), (0xF900, 0xFB00), (0x20000, 0x323B0))
_IDEOGRAPH = re.compile("[" + "".join(f"{chr(lo)}-{chr(hi - 1)}" for lo, hi in IDEOGRAPH_RANGES) + "]")
# OpenCC configurations read character by character: Traditional → Simplified, then the Taiwan and Hong Kong
# standard forms (`裡`, `著`, `衞`) the first leaves as they are
CONFIGS = ("t2s", "tw2s", "hk2s")
# (character, the one it is read as) pairs, back to back, where OpenCC 1.4.2's phrases write another character
# than its character dictionary for a word: the 30 that its `s2t` phrases (STPhrases) write for a Simplified one,
# which the dictionary keeps as they are (Simplified characters too): `瞭解` for `了解`, `回覆` for `回复`, `座標`
# for `坐标`, `想像` for `想象`; then the 8 that its `t2s` phrases (TSPhrases) write, read as the dictionary's form
# of the Traditional one: `计划` for `計畫` (`画`), `深沉` for `深沈`. Most phrases first. (Listed with the wheel's
# `opencc_dict -f ocd2 -t text`: the phrase dictionaries are not readable through the Python binding.)
PHRASE_FORMS = ("藉借覆复揹背瞭了伕夫甯宁薰熏甦苏座坐鎗枪哩里濬浚俱具拏拿像象燄焰瑯琅蘗檗澂澄彷仿荳豆待呆耡锄籐藤觔斤菓果"
                "唚吣耈耇隄堤斲斫" "沉沈链炼坯坏锺钟迳径钜巨划画\U0002bac7恶")


@lru_cache(maxsize=1)
def simplified_table() -> np.ndarray:
    """uint32 [0x323B0]: for each code point below the end of `IDEOGRAPH_RANGES` its Simplified form (itself when
    it has none or is no ideograph); read-only.

    Each ideograph is converted on a line of its own (so no phrase of OpenCC's spans two), all in one call per
    configuration, and compared as code points (~0.15 s with OpenCC's import; a Python loop over the characters
    doubled it); a form the first configuration gives wins over the variant configurations', and a form that
    converts again (`薴` → `苧` → `苎`) is followed to its end, so that the fold reads its own output as it is."""
    import opencc                       # the dictionaries ship in its wheel; imported only where Han text is

    codes = np.concatenate([np.arange(lo, hi, dtype=np.uint32) for lo, hi in IDEOGRAPH_RANGES])
    lines = np.full(2 * len(codes), ord("\n"), np.uint32)
    lines[0::2] = codes
    text = lines.tobytes().decode("utf-32-le")
    table = np.arange(IDEOGRAPH_RANGES[-1][1], dtype=np.uint32)
    for config in CONFIGS:
        converted = np.frombuffer(opencc.OpenCC(config).convert(text).encode("utf-32-le"), np.uint32)
        if len(converted) != len(lines) or (converted[1::2] != lines[1::2]).any():
            raise RuntimeError(f"OpenCC {config} converted an ideograph to several characters")
        forms = converted[0::2]
        new = (forms != codes) & (table[codes] == codes) & (forms < len(table))
        table[codes[new]] = forms[new]
    for char, read_as in zip(PHRASE_FORMS[::2], PHRASE_FORMS[1::2]):
        if table[ord(char)] == ord(char):
            table[ord(char)] = ord(read_as)
    for _ in range(8):                  # chains are 2 long at most; a cycle would never settle
        if np.array_equal(table[table], table):
            break
        table = table[table]
    else:
        raise RuntimeError("the Traditional → Simplified forms hold a cycle")
    table.flags.writeable = False
    return table


def has_ideograph(text: str) -> bool:
    """Whether `text` holds a CJK ideograph (`IDEOGRAPH_RANGES`)."""
    return _IDEOGRAPH.search(text) is not None


def simplify_han(text: str) -> str:
    """`text` with each Traditional Chinese character read as its Simplified form (`simplified_table`); `text`
    itself when it holds no ideograph or none that changes."""
    if not has_ideograph(text):
        return text
    codes = np.frombuffer(text.encode("utf-32-le", "surrogatepass"), np.uint32)
    folded = simplified_codes(codes)
    return text if np.array_equal(folded, codes) else folded.tobytes().decode("utf-32-le", "surrogatepass")


def simplified_codes(codes: np.ndarray) -> np.ndarray:
    """The code points `codes` (uint32 [n]) with each Traditional Chinese character's replaced by its Simplified
    form's (`simplified_table`), as a new array: one gather when no code point lies beyond the table (the planes
    above the ideographs'), whose own code points are kept."""
    table = simplified_table()
    if len(codes) == 0 or codes.max() < len(table):
        return table[codes]
    inside = codes < len(table)
    return np.where(inside, table[np.where(inside, codes, 0)], codes)
