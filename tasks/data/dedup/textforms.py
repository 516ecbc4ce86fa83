"""Copies of a text in another container format, read as the text before shingling (`DedupSpec.fold_formats`;
never the kept text), and the chain of folds read before `normalize.shingle_text` (`prefold`).

- quoted-printable (`read_quoted_printable`): a mail body encodes each `=` as `=3D`, non-ASCII characters as
  their UTF-8 bytes (`=E2=80=99` for `’`, `=C3=A9` for `é`), and breaks lines longer than 76 characters with a
  soft break, `=` at a line's end, often inside a word (`informa=\\ntion`). `\\w+` read `3D`, `E2`, `80` as words
  and split the broken words: a QP copy of a prose document shared few 5-grams with it. A text is read as QP
  only where every `=` in it starts an escape (`=` and two hex digits) or a soft break, as an encoder writes
  them, and it holds an `=3D`, a UTF-8 sequence (`=C3=A9`, or in lower case `=c3=a9`, as some mailers write the
  hex) or a soft break after 60 characters or more: code's `a = b`, `x=10` or `==`, a config's `key=` line, is
  left as it is (and so is a lone `=3d`: lower case, it is no sign). A run of escapes reads as UTF-8, or as
  cp1252 where it is none (a Latin-1 body).
- subtitles (`read_subtitles`): an SRT or WebVTT file of a talk holds its transcript's words between cue numbers
  and timing lines (`00:00:01,000 --> 00:00:04,000`, `00:01.000 --> 00:04.000 align:start`): a number and ~8
  digit words every ~10 words, and no copy met its transcript. In a text with a timing line, the timing lines,
  the cue number (or, in WebVTT, the cue identifier) right above each, WebVTT's header and `NOTE`/`STYLE`/
  `REGION` blocks and the cue text's tags (`<i>`, `<v Ann>`, `<00:00:01.500>`, `{\\an8}`) are not read.
  Rolling captions (YouTube's automatic ones: each cue shows the last cue's line again above its new words, and a
  10 ms cue between repeats it once more) read each line once (`_unrolled`): read as written, every word stood
  two or three times in a row and the file shared few 5-grams with its transcript.

- mojibake (`mojibake.read_mojibake`): UTF-8 read as cp1252 (`FranÃ§ais`, `Ð¿Ñ€Ð¸Ð²ÐµÑ‚`) read back as UTF-8,
  after the QP escapes (a body of UTF-8 bytes decoded as cp1252 and encoded again decodes to mojibake).

These are read first, before the links (`linkforms`, `fold_markup`), URL parameters, line prefixes and hyphenation
(a QP body's soft breaks join the words a wrapper split, `=3D` in its URLs is their `=`). `format_docs` finds the
texts a rule may change in one compiled byte scan of the batch; only those are read in Python.
"""

from __future__ import annotations

import re

import numpy as np
from numba import njit

from specs.clean import DedupSpec
from tasks.data.dedup import hashloops  # noqa: F401  (sets numba's cache folder before the `@njit` below)
from tasks.data.dedup.copyforms import PERCENT_MIN, read_copyforms, read_edits
from tasks.data.dedup.jsonescapes import JSON_LOOK, read_json_escapes
from tasks.data.dedup.lineprefix import column_docs, read_columns, strip_line_prefixes, strip_tracking
from tasks.data.dedup.linkforms import latex_docs, read_latex, read_links
from tasks.data.dedup.marks import join_hyphenated
from tasks.data.dedup.mojibake import mojibake_docs, read_mojibake

# --- quoted-printable -----------------------------------------------------------------------------------------
# what only an encoder writes: `=3D`, a UTF-8 sequence, or a soft break ending a long line (it breaks lines of more
# than 76 characters: a short `key=` line ending a config's entry is no soft break). The hex of a UTF-8 sequence may
# be lower case (`=c3=a9`: mailers differ); a lone `=3d` is not taken for a sign, it is too like code's `x=3d`
_QP_SIGN = re.compile(r"=(?:3D|[C-Fc-f][0-9A-Fa-f]=[89ABab][0-9A-Fa-f])|^[^\n]{60,}=\r?\n", re.M)
_QP_VALID = re.compile(r"=(?:[0-9A-Fa-f]{2}|\r?\n|\Z)")
_SOFT_BREAK = re.compile(r"=(?:\r?\n|\Z)")
_ESCAPES = re.compile(r"(?:=[0-9A-Fa-f]{2})+")


def quoted_printable(text: str) -> bool:
    """Whether `text` reads as a quoted-printable body: every `=` an escape or a soft break, and one of them an
    `=3D`, a UTF-8 sequence or a soft break ending a long line."""
    return _QP_SIGN.search(text) is not None and len(_QP_VALID.findall(text)) == text.count("=")


def _decoded(m: re.Match[str]) -> str:
    raw = bytes.fromhex(m.group().replace("=", ""))
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError:
        return raw.decode("cp1252", "replace")


def read_quoted_printable(text: str) -> str:
    """`text` decoded from quoted-printable (soft breaks joined, escapes read); `text` itself when it is no QP."""
    if "=" not in text or not quoted_printable(text):
        return text
    return _ESCAPES.sub(_decoded, _SOFT_BREAK.sub("", text))


# --- subtitles ------------------------------------------------------------------------------------------------
_STAMP = r"(?:\d{1,3}:)?\d{1,2}:\d{2}[,.]\d{1,3}"
_TIMING = re.compile(rf"[ \t]*{_STAMP}[ \t]+-->[ \t]+{_STAMP}(?:[ \t][^\n]*)?\r?")
_CUE_NUMBER = re.compile(r"[ \t]*\d{1,7}[ \t]*\r?")
_VTT_BLOCK = re.compile(r"(?:NOTE|STYLE|REGION)(?:[ \t]|\r?$)")
_CUE_TAG = re.compile(r"</?(?:[ibu]|v|c|lang|ruby|rt|font)(?:[ .][^<>\n]{0,200})?>|<\d{1,3}(?::\d{2}){1,2}\.\d{3}>"
                      r"|\{\\[^{}\n]{1,50}\}", re.I)


def read_subtitles(text: str) -> str:
    """`text` without its cue numbers, timing lines, WebVTT header and blocks and cue tags, where it holds a timing
    line; else `text` itself."""
    if "-->" not in text:
        return text
    lines = text.split("\n")
    timing = [i for i, line in enumerate(lines) if "-->" in line and _TIMING.fullmatch(line)]
    if not timing:
        return text
    vtt = lines[0].lstrip("\ufeff \t").startswith("WEBVTT")
    drop = set(timing) | (_vtt_blocks(lines) if vtt else set())
    # the line right above a timing line names its cue: SRT's number, WebVTT's optional identifier
    drop |= {i - 1 for i in timing if i and lines[i - 1].strip() and (vtt or _CUE_NUMBER.fullmatch(lines[i - 1]))}
    return _unrolled(_CUE_TAG.sub("", "\n".join(line for i, line in enumerate(lines) if i not in drop)))


def _unrolled(text: str) -> str:
    """The cue text of rolling captions with each line read once: a line equal to the last one read is dropped, and
    one that starts with it (a roll-up cue growing word by word) reads as its new words. Only where a third or more
    of the lines repeat or extend the one before (two at least): a chorus or a `No!` said twice in ordinary
    subtitles stays as written."""
    said = [" ".join(line.split()) for line in text.split("\n")]
    said = [line for line in said if line]
    repeats = sum(b == a or b.startswith(a + " ") for a, b in zip(said, said[1:]))
    if repeats < 2 or 3 * repeats < len(said):
        return text
    out, last = [], ""
    for line in said:
        if line != last:
            out.append(line[len(last) + 1:] if last and line.startswith(last + " ") else line)
        last = line
    return "\n".join(out)


def _vtt_blocks(lines: list[str]) -> set[int]:
    """The lines of a WebVTT file's header (its first block) and of its `NOTE`, `STYLE` and `REGION` blocks."""
    drop, inside = set(), True
    for i, line in enumerate(lines):
        if not line.strip():
            inside = False
        elif inside or (not lines[i - 1].strip() and _VTT_BLOCK.match(line)):
            inside = True
            drop.add(i)
    return drop


# --- the chain and the scan -----------------------------------------------------------------------------------
def read_formats(text: str, formats: bool = True, markup: bool = True, escapes: bool = True) -> str:
    """`text` with its `\\uXXXX` escapes decoded (`escapes`, first: they may spell mojibake or markup), read as QP,
    subtitles, repaired mojibake, a two-column page's columns and `copyforms`' URL escapes and re-flowed
    hyphenation (`formats`; a QP body may decode to mojibake) and
    its lightweight-markup links and LaTeX commands (`markup`, `linkforms`); `text` itself when none applies."""
    text = read_json_escapes(text) if escapes else text
    if formats:
        # (a two-column page is read column by column before the hyphenated words are joined: a cut word's
        # halves are on two lines of one column)
        text = read_columns(read_mojibake(read_subtitles(read_quoted_printable(text))))
        # (URL escapes and re-flowed hyphenation a copy writes otherwise, `copyforms`: after the columns, whose
        # lines they may join)
        text = read_copyforms(text)
    return read_latex(read_links(text)) if markup else text


def prefold(text: str, spec: DedupSpec, formats: bool = True) -> str:
    """`text` as the folds before `shingle_text` read it, as the spec says: container formats and markup links
    (`read_formats`; `formats` False: `format_and_edit_docs` found none but its edits), URLs without their
    tracking parameters, lines without their number or timestamp prefixes, words hyphenated at line breaks joined
    (`lineprefix`, `marks`): before the folds, which may join lines; `text` itself if unchanged."""
    if formats:
        text = read_formats(text, spec.fold_formats, spec.fold_markup, spec.fold_escapes)
    elif spec.fold_formats and read_edits(text) is not text:
        text = read_formats(text, True, spec.fold_markup, spec.fold_escapes)
    text = strip_tracking(text) if spec.fold_urls else text
    text = strip_line_prefixes(text) if spec.fold_line_prefixes else text
    return join_hyphenated(text) if spec.fold_hyphenation else text


QP, SUBTITLES, LINKS, MOJIBAKE, ESCAPES, PERCENT, SPACED = 1, 2, 4, 8, 16, 32, 64
# the bytes a rule's form ends or starts at, rare in prose and code (`.`, `-`, `:` as triggers cost ~1 ns a byte);
# 0xC3 starts `Ã` and the other lead characters of mojibake (and `é`, `ü`: a few tests more in Latin-script text);
# `(`, `<` and `\` are common in code, but each costs a test of the next byte or two (with them, the scan of
# `benchmarks/dedup_real.py`'s 20,000 texts took 0.050 CPU s where it took 0.037)
_TRIGGER = np.zeros(256, np.uint8)
_TRIGGER[list(b"=>`[R\xc3\\(<")] = 1
# `%` and `-` (`copyforms`: `%20`, a letter's `- ` before a letter): a test of the next byte each (in this scan, not
# one of their own: a pass over `benchmarks/dedup_real.py`'s 44 MB took ~0.045 s, ~3 % of the signatures)
_TRIGGER[list(b"%-")] = 1
_LETTER = np.zeros(256, np.bool_)          # an ASCII letter or a byte of a UTF-8 sequence (a non-ASCII letter)
_LETTER[list(b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz") + list(range(0x80, 0x100))] = True
_HEX = np.zeros(256, np.bool_)
_HEX[list(b"0123456789ABCDEFabcdef")] = True
_BLANK = np.zeros(256, np.bool_)
_BLANK[list(b" \t\n\r\x0b\x0c\x1c\x1d\x1e\x1f")] = True
_EFERENCES, _LINK, _MAILTO, _XREF, _HTTP, _FTP = (np.frombuffer(w, np.uint8) for w in (
    b"eferences", b"link", b"mailto", b"xref", b"http", b"ftp:"))


@njit(cache=True, inline="always")
def _follows(data, i, end, word):
    """Whether the bytes `word` (lower case) start at i, before `end`, in either case."""
    if i < 0 or i + len(word) > end:
        return False
    for k in range(len(word)):
        if data[i + k] | 0x20 != word[k]:
            return False
    return True


@njit(cache=True, inline="always")
def _after_word(data, i, lo):
    """Whether a letter, a digit or a non-ASCII byte ends the text before i, after up to 64 blanks (a superset of
    `linkforms.inline_urls`' word before a URL)."""
    j = i - 1
    while j >= lo and j > i - 64 and _BLANK[data[j]]:
        j -= 1
    return j >= lo and (data[j] >= 0x80 or 0x30 <= data[j] <= 0x39 or 0x61 <= data[j] | 0x20 <= 0x7A)


@njit(cache=True, inline="always")
def _json_start(data, lo, end):
    """Whether a `{`, `[` or `"` (not `\"\"\"`) is the text's first byte after its blanks, in its first `JSON_LOOK`
    bytes (`jsonescapes.json_text`)."""
    stop = min(end, lo + JSON_LOOK)
    while lo < stop and _BLANK[data[lo]]:
        lo += 1
    return lo < stop and (data[lo] == 123 or data[lo] == 91 or data[lo] == 34 and not (
        lo + 2 < end and data[lo + 1] == 34 and data[lo + 2] == 34))


@njit(cache=True, inline="always")
def _qp_escape(data, i, end):
    """(whether the `=` at i starts an escape or a soft break, as `_QP_VALID` reads it; whether it starts `_QP_SIGN`,
    or may: `=3D`, a UTF-8 lead and continuation byte, or any soft break)."""
    a = data[i + 1] if i + 1 < end else 10
    if a == 10 or (a == 13 and i + 2 < end and data[i + 2] == 10):
        return True, i + 1 < end
    if i + 2 >= end or not _HEX[a] or not _HEX[data[i + 2]]:
        return False, False
    # (`a | 0x20`: either case of C-F, A, B; `3D` in upper case only, as `_QP_SIGN`)
    sign = (a == 0x33 and data[i + 2] == 0x44) or (0x63 <= a | 0x20 <= 0x66 and i + 5 < end and data[i + 3] == 0x3D
                                                   and data[i + 4] | 0x20 in (0x38, 0x39, 0x61, 0x62)
                                                   and _HEX[data[i + 5]])
    return True, sign


@njit(cache=True, inline="always")
def _mojibake_at(data, i, end):
    """Whether the `C3` at i starts a lead character of mojibake (`Â`…`ô`, `C3 82`…`C3 B4`) and the next character
    may be a continuation (U+0080-U+00BF: `C2 xx`; cp1252's `€‚ƒ„…` and the others: `C5`, `C6`, `CB`, `E2`)."""
    if i + 3 >= end or not 0x82 <= data[i + 1] <= 0xB4:
        return False
    c = data[i + 2]
    return (c == 0xC2 and 0x80 <= data[i + 3] <= 0xBF) or c == 0xC5 or c == 0xC6 or c == 0xCB or c == 0xE2


@njit(cache=True, inline="always")
def _link_before(data, i, lo):
    """Whether the run of bytes before the `[` at i (back to a blank or a bracket) holds a `://`, `link:`, `xref:`
    or `mailto:`: the `[text]` of an AsciiDoc link (its target holds none; a `++…++` one's first `[` is found)."""
    j = i - 1
    while j >= lo and not _BLANK[data[j]] and data[j] != 91 and data[j] != 93:
        if data[j] == 58 and ((j + 2 < i and data[j + 1] == 47 and data[j + 2] == 47)
                              or _follows(data, j - 4, j, _LINK) or _follows(data, j - 4, j, _XREF)
                              or _follows(data, j - 6, j, _MAILTO)):
            return True
        j -= 1
    return False


@njit(cache=True, inline="always")
def _references(data, i, lo, end):
    """Whether the `R` at i starts a line `References` (blanks before, `:` and blanks after) whose next non-blank
    line starts with a digit, `[`, `V` or `H` (`   1. https://…`, `[1] …`, `Visible links`): a dump's list."""
    if not _follows(data, i + 1, end, _EFERENCES):
        return False
    j = i - 1
    while j >= lo and (data[j] == 32 or data[j] == 9):
        j -= 1
    if j >= lo and data[j] != 10:
        return False
    j = i + 10
    j += 1 if j < end and data[j] == 58 else 0
    while j < end and (data[j] == 32 or data[j] == 9):
        j += 1
    if j >= end or data[j] != 10:
        return False
    while j < end and (data[j] == 32 or data[j] == 9 or data[j] == 10):
        j += 1
    return j < end and (48 <= data[j] <= 57 or data[j] == 91 or data[j] == 86 or data[j] == 72)


@njit(cache=True)
def format_flags(data, ends):
    """uint8 [m]: which rules may change each text of a batch (UTF-8 `data`, a `\\n` after each text, at `ends`):
    QP every `=` an escape and one a sign of QP; SUBTITLES a `-->`; LINKS a `` `_ ``, a `` :` `` (a Sphinx role),
    a `[[`, a `>>`, a `References` line before a list (`_references`), or a `[` after `://`, `link:`, `xref:` or
    `mailto:` with no blank between, a `(` or `<` before `http` or `ftp:`; MOJIBAKE a lead character of mojibake
    before a continuation; ESCAPES a `\\u` before four hex digits in a text opening a JSON value. A superset
    of the texts `read_formats` changes: the exact test of the QP escapes, else the literals each rule needs."""
    out = np.zeros(len(ends), np.uint8)
    lo = 0
    for d in range(len(ends)):
        f, u, end, valid, percents = 0, np.uint64(lo), ends[d], True, 0
        stop = np.uint64(end)
        while u < stop:
            if _TRIGGER[data[u]] == 0:                 # most bytes: one table read (unsigned: no negative-index test)
                u += np.uint64(1)
                continue
            i = np.int64(u)
            c, nxt = data[i], data[i + 1] if i + 1 < end else 0
            if c == 61:
                escape, sign = _qp_escape(data, i, end)
                valid &= escape
                f |= QP if sign else 0
            elif c == 62:
                before = data[i - 1] if i > lo else 0
                f |= SUBTITLES if i - 2 >= lo and before == 45 and data[i - 2] == 45 else 0
                f |= LINKS if before == 62 else 0                   # `>>`, an AsciiDoc `<<id,text>>`'s end
            elif (c == 96 and (nxt == 95 or (i > lo and data[i - 1] == 58))) \
                    or (c == 91 and (nxt == 91 or _link_before(data, i, lo))):
                f |= LINKS
            elif c == 82:
                f |= LINKS if _references(data, i, lo, end) else 0
            elif c == 40 or c == 60:                  # `(http`, `<ftp:`: a URL written after its link's text
                f |= LINKS if _after_word(data, i, lo) and (_follows(data, i + 1, end, _HTTP)
                                                            or _follows(data, i + 1, end, _FTP)) else 0
            elif c == 92:                             # `\u` and four hex digits, in a JSON text
                f |= ESCAPES if nxt == 117 and f & ESCAPES == 0 and i + 5 < end and _HEX[data[i + 2]] \
                    and _HEX[data[i + 3]] and _HEX[data[i + 4]] and _HEX[data[i + 5]] and _json_start(data, lo, end) \
                    else 0
            elif c == 0xC3:
                f |= MOJIBAKE if _mojibake_at(data, i, end) else 0
            elif c == 37:
                percents += 1 if nxt == 50 and i + 2 < end and data[i + 2] == 48 else 0
                f |= PERCENT if percents >= PERCENT_MIN else 0
            elif c == 45 and nxt == 32:
                f |= SPACED if i > lo and i + 2 < end and _LETTER[data[i - 1]] and _LETTER[data[i + 2]] else 0
            u += np.uint64(1)
        out[d] = f if valid else f & ~QP
        lo = end + 1
    return out


def format_docs(data: np.ndarray, ends: np.ndarray, spec: DedupSpec) -> list[int]:
    """Which texts of a batch `read_formats` may change, as the spec turns its rules on (a superset)."""
    formats, edits = format_and_edit_docs(data, ends, spec)
    return sorted(set(formats) | set(edits)) if edits else formats


def format_and_edit_docs(data: np.ndarray, ends: np.ndarray, spec: DedupSpec) -> tuple[list[int], list[int]]:
    """`format_docs` in two: the texts a rule but `copyforms.read_edits` may change, and those it may (a letter's
    `- `; SPACED). Its edits only move characters and make no markup, so `minhash` asks `prefold` for a text only
    they change as it does for line prefixes, not for a full fold."""
    rules = (QP | SUBTITLES | MOJIBAKE | PERCENT if spec.fold_formats else 0) | (LINKS if spec.fold_markup else 0) \
        | (ESCAPES if spec.fold_escapes else 0)
    if not rules or len(ends) == 0:
        return [], []
    flags = format_flags(data, np.asarray(ends, np.int64))
    found = np.flatnonzero(flags & rules).tolist()
    # (the other code pages' mojibake spells letters of Cyrillic or Polish text, a two-column page is runs of spaces
    # as indented code is, and LaTeX's commands are words after a `\`, as code's escapes are: scans of their own)
    more = (mojibake_docs(data, ends) + column_docs(data, ends) if spec.fold_formats else []) \
        + (latex_docs(data, ends) if spec.fold_markup else [])
    edits = np.flatnonzero(flags & SPACED).tolist() if spec.fold_formats else []
    return (sorted(set(found) | set(more)) if more else found), edits
