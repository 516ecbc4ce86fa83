"""The `\\uXXXX` escapes of a JSON text's strings read as the characters they stand for before
shingling (`DedupSpec.fold_escapes`; never the kept text).

Python's `json.dumps` writes every non-ASCII character as an escape by default (`ensure_ascii`), and Go's encoder
writes `<`, `>` and `&` as `\\u003c`, `\\u003e`, `\\u0026`: a text kept as such a literal reads `don\\u2019t` as the
words `don` and `u2019t`, `caf\\u00e9` as `caf` and `u00e9`, and a copy of a prose text with typographic quotes
lost a word at every quote (a probe: 24 of 40 copies found). They are decoded here, with the container formats
(`textforms.read_formats`, first: the decoded text may be mojibake, or HTML), so that every later fold reads the
characters (NFKC, casefold, Latin letters without their diacritics, `’` as an apostrophe), in a text that is JSON
(`json_text`: a record, an array or a string literal; not in code, whose tables of code points hold them too). A
surrogate pair is one character (`\\ud83d\\ude00` → `😀`); a lone or reversed surrogate stays as written, and a
control character (`\\u001b`) reads as a space. `\\n`, `\\t`, `\\r` are read later, as spaces
(`wordhash.read_escapes`).
"""

from __future__ import annotations

import re

# Only a text that is JSON (a record, an array, a string: its first character after blanks `{`, `[` or `"`, not a
# docstring's `"""`) is read: code holds `\u` escapes too (the tables of code points of Python's codecs, `'\u2550'`,
# 111 of `benchmarks/dedup_real.py`'s 20,000 texts), and read there each cost a fold in Python for no copy found
JSON_LOOK = 64
_BLANKS = " \t\n\r\x0b\x0c\x1c\x1d\x1e\x1f"          # (the bytes `textforms`' scan skips)
# a pair of surrogates first (high then low), else any four hex digits
_ESCAPE = re.compile(r"\\u([dD][89abAB][0-9a-fA-F]{2})\\u([dD][c-fC-F][0-9a-fA-F]{2})|\\u([0-9a-fA-F]{4})")


def _decoded(m: re.Match[str]) -> str:
    if m.group(1):
        high, low = int(m.group(1), 16), int(m.group(2), 16)
        return chr(0x10000 + ((high - 0xD800) << 10) + (low - 0xDC00))
    code = int(m.group(3), 16)
    if 0xD800 <= code < 0xE000:
        return m.group()                   # a lone surrogate: no character (encoding it would fail later)
    return " " if code < 0x20 or 0x7F <= code < 0xA0 else chr(code)


def json_text(text: str) -> bool:
    """Whether `text` opens a JSON value that may hold strings: `{`, `[` or `"` its first character after blanks, in
    its first `JSON_LOOK` characters (not `\"\"\"`: a Python module's docstring)."""
    head = text[:JSON_LOOK].lstrip(_BLANKS)
    return head[:1] in ("{", "[", '"') and not head.startswith('"""')


def read_json_escapes(text: str) -> str:
    """`text` with its `\\uXXXX` escapes decoded, where it is a JSON text (`json_text`; see the module docstring);
    `text` itself otherwise, or when it has none."""
    if "\\u" not in text or not json_text(text):
        return text
    out = _ESCAPE.sub(_decoded, text)
    return text if out == text else out
