"""What a "word" of word shingles is in scripts written without spaces between words.

Word shingles read lowercase `\\w+` runs. Chinese, Japanese and Thai (also Lao, Khmer, Myanmar) put no space
between words, so there a run is a whole clause or sentence: a Chinese paragraph of 400 characters was ~10
"words", a copy with one character changed shared almost no word 5-gram with its original (Jaccard ~0.4 at best,
usually 0), and near dedup found none of the planted near copies (`benchmarks/dedup_scripts.py`). Here each
word character of those scripts is a unit of its own, as character-n-gram dedup pipelines treat CJK, so a
5-gram spans five characters; a run of other word characters (Latin, digits, Hangul, whose eojeol are spaced)
stays one unit. Combining marks (Thai vowel and tone marks) are no `\\w`: they drop out, as they did.
Text without any of these characters is left as it is: its shingles are unchanged.
Under `DedupSpec.fold_unicode`, Traditional Chinese characters are read as their Simplified forms first
(`hanfold`): a copy converted between the two scripts otherwise differed in ~1 character in 6.
"""

from __future__ import annotations

import re
from functools import lru_cache

import numpy as np

from tasks.data.dedup import hashloops
from tasks.data.dedup.hanfold import simplified_codes, simplify_han

# Thai, Lao, Myanmar, Khmer, Hiragana, Katakana, Bopomofo (+ extended), Katakana phonetic extensions, CJK
# extension A, CJK unified ideographs, compatibility ideographs, half-width katakana, the astral ideograph planes
SCRIPT_RANGES = ("\u0e00-\u0eff\u1000-\u109f\u1780-\u17ff\u3040-\u30ff\u3100-\u312f\u31a0-\u31ff\u3400-\u4dbf"
                 "\u4e00-\u9fff\uf900-\ufaff\uff66-\uff9f\U00020000-\U0003134f")
_SCRIPT_CHAR = re.compile(f"[{SCRIPT_RANGES}]")
ASTRAL_RANGE = (0x20000, 0x3134F)          # the astral part of `SCRIPT_RANGES`, as code points
_NONE = 0xFFFFFFFF                          # no code point: marks "no space here" in `split_unspaced`


def has_unspaced(text: str) -> bool:
    """Whether `text` holds a character of a script written without spaces (`SCRIPT_RANGES`)."""
    return _SCRIPT_CHAR.search(text) is not None


def split_unspaced(text: str, simplify: bool = True) -> str:
    """`text` with a space on each side of every character of `SCRIPT_RANGES`, so that a `\\w+` split reads
    each one as a word, its Traditional Chinese characters read as Simplified when `simplify`
    (`hanfold.simplify_han`); `text` itself when it holds none. The spaces are put in over the text's code points
    (numpy: ~35 µs a 600-character Chinese text, ~60 with the fold; `re.sub` with a replacement template ~200)."""
    if not has_unspaced(text):
        return text
    codes = np.frombuffer(text.encode("utf-32-le", "surrogatepass"), np.uint32)
    codes = simplified_codes(codes) if simplify else codes
    unit = (codes >= ASTRAL_RANGE[0]) & (codes <= ASTRAL_RANGE[1])
    bmp = codes < 0x10000
    unit[bmp] = script_table()[codes[bmp]] == 1
    spaced = np.full((len(codes), 3), _NONE, np.uint32)        # [n, 3]: space or none, the character, space or none
    spaced[:, 1] = codes
    spaced[unit, 0] = spaced[unit, 2] = 32
    spaced = spaced.ravel()
    return spaced[spaced != _NONE].tobytes().decode("utf-32-le", "surrogatepass")


def simplify_unspaced(text: str, simplify: bool = True) -> str:
    """`text` with its Traditional Chinese characters read as Simplified when `simplify` (char shingles, which
    are not split); `text` itself when it holds no character of `SCRIPT_RANGES`."""
    return simplify_han(text) if simplify and has_unspaced(text) else text


@lru_cache(maxsize=1)
def script_table() -> np.ndarray:
    """uint8 [65536]: 1 for each BMP character of `SCRIPT_RANGES` (built once per process, ~10 ms)."""
    table = np.zeros(0x10000, np.uint8)
    for m in _SCRIPT_CHAR.finditer("".join(map(chr, range(0xD800))) + "".join(map(chr, range(0xE000, 0x10000)))):
        code = ord(m.group())
        table[code] = 1
    return table


def unspaced_docs(texts: list[str], data: np.ndarray, ends: np.ndarray, docs: np.ndarray) -> list[int]:
    """Which of the texts `docs` (int64 [k]: those holding non-ASCII text; all `texts` as UTF-8 in `data`, a
    `\\n` after each, at `ends`) hold a character of `SCRIPT_RANGES`: a compiled scan of their non-ASCII
    characters (`hashloops.docs_holding`, ~0.5 ns a byte), confirmed by the regex for the few it finds (which
    reads astral ranges at ~20 ns a character: 0.09 CPU s on the 6,000 non-ASCII texts of
    `benchmarks/dedup_real.py`)."""
    if len(docs) == 0:
        return []
    found = docs[hashloops.docs_holding(data, ends, docs, script_table()) == 1].tolist()
    return [k for k in found if has_unspaced(texts[k])]
