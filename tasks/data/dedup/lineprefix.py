"""Line-number and timestamp prefixes (`DedupSpec.fold_line_prefixes`) and URL tracking parameters
(`DedupSpec.fold_urls`) that near dedup's shingles do not see: both are dropped before the folds.

A code listing copied with its line numbers (`  12  return x`), or a log whose lines carry other timestamps
(`2024-03-01 12:00:01,234 INFO …` logged again another day), puts a different token at the start of every line:
with lines of 5-10 words nearly every word 5-gram spans one, and no such copy was found
(`benchmarks/dedup_scripts.py`). In a text where most lines start with such a prefix — `MIN_LINES` non-blank
lines at least, `SHARE` of them prefixed, the first among them (so that a batch is searched by reading each
text's start only) — the prefixes are dropped before shingling. A text with a few numbered lines (a list, a
table with a year column) is left alone; so is every text of fewer lines.

The prefixes must also read as a listing's or a log's, not as the text's content (`_is_listing_or_log`): bare
numbers count the lines (each `SHARE` of the time the previous one + 1: `118`, `119`, `120`), and clock times
without a date look logged (a fraction of a second, brackets, or seconds that are not all `:00`). A timetable's
departures (`0612 Central Station`, `06:12:00 Central Station`) are its content: read as prefixes, every
timetable of one line's stops shingled alike (J 1.0), and a probe's 24 timetables of other trips were merged
into one (23 removed). A log's timestamps, or times at the minute with a date (`2024-03-01 06:12`), still go.

URLs (`strip_tracking`, `url_docs`): a crawl holds the same page many times with other click ids and sessions in its
URLs: `?utm_source=…&utm_medium=…`, `?fbclid=…`, `?gclid=…`, and on sites that rewrite every link of a page per
visitor, `;jsessionid=…` or `&sid=…` after each of them. `\\w+` reads each parameter as words (`utm_source`,
`twitter`, a 32-character id), so a short page whose link list carries a session id (`References 1.
https://…;jsessionid=…`, as lynx and other text dumps write links) shared ~0.6-0.75 of its shingles with the same
page fetched in another session, and a web probe found none of 40 such pairs (`tests/test_dedup_web.py`). Here, in
the text shingled only, each URL (`scheme://…`) loses its `;key=value` path parameters of a session key and its
query parameters of a tracking or session key (`TRACKING`, `utm_*`: the keys of ClearURLs and of browsers' query
stripping, plus the session names servers write); a parameter that names content (`?id=42`, `?q=…`, `?page=2`)
stays, and so does a fragment (`#os.walk`). A bare `www.…` is left as written (a page rarely writes a query after
one, and a second byte search for it doubled the cost). Text without `://` is not read (a byte search over the
batch).

A page of two text columns laid side by side (`pdftotext -layout`, a scanned journal page's OCR) reads column by
column (`read_columns`, `DedupSpec.fold_formats`, called from `textforms.read_formats`): every line joined the
ends of two unrelated sentences, and a two-column copy of a 300-2,000-word text shared 0.2-0.3 of its 5-grams
with its plain text (none of 20 found).
"""

from __future__ import annotations

import bisect
import re
from collections import Counter

import numpy as np
from numba import njit

from tasks.data.dedup import hashloops  # noqa: F401  (sets numba's cache folder before the `@njit` below)

MIN_LINES = 3
SHARE = 0.8
LOOK = 16                   # bytes read at a text's start for its first non-blank one (all blank: a candidate)
_DATE_TIME = r"\[?\d{4}-\d{2}-\d{2}[T ]\d{2}:\d{2}(?::\d{2})?(?:[.,]\d+)?(?:Z|[+-]\d{2}:?\d{2})?\]?"
_TIME = r"\[?\d{2}:\d{2}:\d{2}(?:[.,]\d+)?\]?"
_LINE_NUMBER = r"\d{1,6}[:.|)]?"
# a prefix ends at a space, a tab or the line's end (`12:30 pm`, `3.14` or `10x` start no prefix); group 1 a
# clock time without a date, group 2 a bare number
_PREFIX = re.compile(rf"^[ \t]*(?:{_DATE_TIME}|({_TIME})|({_LINE_NUMBER}))(?=[ \t]|$)", re.M)
_DIGITS = re.compile(r"\d+")


def strip_line_prefixes(text: str) -> str:
    """`text` without the line numbers or timestamps starting its lines, when its first non-blank line starts with
    one, at least `SHARE` of its `MIN_LINES` or more non-blank lines do, and they read as a listing's line numbers
    or a log's timestamps (`_is_listing_or_log`); else `text` itself."""
    if _PREFIX.match(text.lstrip()) is None:
        return text
    lines = sum(1 for line in text.split("\n") if line.strip())
    if lines < MIN_LINES:
        return text
    found = list(_PREFIX.finditer(text))
    if len(found) < SHARE * lines or not _is_listing_or_log(found):
        return text
    return _PREFIX.sub("", text)


def _is_listing_or_log(found: list[re.Match[str]]) -> bool:
    """Whether the prefixes `found` (`_PREFIX` matches, in line order) are line numbers or log timestamps rather
    than the text's own numbers: bare numbers count up by one (`SHARE` of the steps between them: a listing's
    lines, blank ones unnumbered now and then), and clock times without a date are not all at whole minutes
    (`06:12:00`, a timetable's, `[06:12:00]` or `06:12:00,5` a log's). A departure list (`0612`, `0615`, `0619`)
    or a schedule at the minute is content: its times are what tells one timetable from another."""
    numbers = [int(_DIGITS.match(m.group(2)).group()) for m in found if m.group(2)]
    if len(numbers) > 1 and sum(b - a == 1 for a, b in zip(numbers, numbers[1:])) < SHARE * (len(numbers) - 1):
        return False
    clocks = [m.group(1) for m in found if m.group(1)]
    return not clocks or any(c[0] == "[" or not c.endswith(":00") for c in clocks)


def prefixed_docs(data: np.ndarray, ends: np.ndarray) -> list[int]:
    """Which texts of a batch may qualify for `strip_line_prefixes` (a superset the caller checks): their bytes
    `data` (uint8, a `\\n` after each text, at `ends`) first non-blank byte is a digit or `[` (or lies past the
    first `LOOK` bytes). Only the texts' starts are read (a look at every line start cost ~0.26 CPU s a 50k-doc
    benchmark, half of its signatures)."""
    if len(ends) == 0:
        return []
    window = data[np.minimum(np.concatenate([[0], ends[:-1] + 1])[:, None] + np.arange(LOOK), len(data) - 1)]
    blank = (window == 32) | (window == 9) | (window == 10) | (window == 13)        # [n, LOOK]
    first = window[np.arange(len(ends)), np.argmax(~blank, axis=1)]
    return np.flatnonzero(blank.all(axis=1) | ((first >= 48) & (first <= 57)) | (first == 91)).tolist()


# --- URL tracking parameters (`DedupSpec.fold_urls`) ----------------------------------------------------------
# query keys that track a click or a visit, never the page shown (lower case; and every `utm_*` key)
TRACKING = frozenset("""
fbclid gclid gclsrc dclid gbraid wbraid msclkid yclid twclid ttclid li_fat_id igshid igsh mc_cid mc_eid _ga _gl
_hsenc _hsmi __hssc __hstc __hsfp hsctatracking mkt_tok oly_anon_id oly_enc_id vero_id vero_conv wickedid
rb_clickid s_cid cmpid spm scm ref ref_src ref_url referrer trk trkcampaign epik __s ncid sr_share
jsessionid phpsessid sessionid session_id sessid sid aspsessionid cfid cftoken zanpid
""".split())
_TAIL = re.compile(r"[^\s<>\"'\]\[)(]*")          # a URL's rest, after its `://`
_PARAM_SPLIT = re.compile(r"(&amp;|&|;)")


def _tracking(param: str) -> bool:
    key = param.split("=", 1)[0].lower()
    return key in TRACKING or key.startswith("utm_") or key.startswith("aspsessionid")


def _clean(written: str) -> str:
    url, hash_, fragment = written.partition("#")
    head, _, query = url.partition("?")
    path, *params = head.split(";")                          # `;jsessionid=…` path parameters
    kept = [p for p in params if not _tracking(p)]
    parts = _PARAM_SPLIT.split(query)[::2] if query else []
    found = [p for p in parts if p and not _tracking(p)]
    if len(kept) == len(params) and len(found) == len(parts):
        return written                                        # nothing to drop: the URL as written
    query = ("?" + "&".join(found) if found else "")
    return path + "".join(";" + p for p in kept) + query + hash_ + fragment


def strip_tracking(text: str) -> str:
    """`text` with the tracking and session parameters of its URLs dropped; `text` itself when it has none. URLs
    are found by `str.find` (a regex trying every position for a URL cost ~90 µs a 2 KB text)."""
    parts, last, at = [], 0, text.find("://")
    while at >= 0:
        end = _TAIL.match(text, at + 3).end()
        url = text[at:end]
        if "?" in url or ";" in url:
            clean = _clean(url)
            if clean is not url:
                parts += [text[last:at], clean]
                last = end
        at = text.find("://", end)
    return "".join(parts) + text[last:] if parts else text


def url_docs(data: np.ndarray, ends: np.ndarray) -> list[int]:
    """Which texts of a batch hold `://` (UTF-8 `data`, a `\\n` after each text, at `ends`): a superset of those
    `strip_tracking` changes, found by `bytes.find` (~1 ns a byte), one step a text that holds one: with the
    fold, 0.15 CPU s more for `benchmarks/dedup_real.py`'s 50,000 texts' signatures (1.72 -> 1.87)."""
    raw, stops, found = data.tobytes(), ends.tolist(), []
    at = raw.find(b"://")
    while at >= 0:
        found.append(bisect.bisect_left(stops, at))
        at = raw.find(b"://", stops[found[-1]] + 1) if found[-1] < len(stops) else -1
    return found


# --- two-column pages ------------------------------------------------------------------------------------------
_COLUMN_GAP = re.compile("   +")
_COLUMN_LINES = 8
_COLUMN_SHARE = 0.6
_COLUMN_SLACK = 2
_COLUMN_FILLED = 0.7
_COLUMN_MARGIN = 30     # a column of prose holds 30 characters or more; aligned code's names are shorter


def read_columns(text: str) -> str:
    """`text` read column by column where it is a two-column page (see the module docstring); else `text`.

    Each line of such a page is a line of the left column, a run of spaces and the line of the right column at the
    same height. A text is read as two columns where 8 or more lines, and 60 % of its non-blank lines, hold a gap of
    3 or more spaces after text filling 70 % of the width up to it (30 characters or more), with 3 or more words
    starting at one column (±2, the right column's margin): the left parts in order, then the right parts (a line
    with no gap is the left column's where it ends before that margin, the right column's where it starts at it).
    A table, an option list (`-h, --help     show …`) or code with aligned comments (short cells, or cells starting
    at many columns) is no two-column page and is left alone."""
    if text.count("   ") < _COLUMN_LINES:
        return text
    lines = text.split("\n")
    # the lines with a run of spaces after a left column's text (`str.find`: indented code's runs start its lines)
    least = int(_COLUMN_FILLED * _COLUMN_MARGIN)
    asked = [k for k, line in enumerate(lines) if line.find("   ", least) >= 0]
    if len(asked) < _COLUMN_LINES:
        return text
    gaps = [(k, m.end()) for k in asked for m in _COLUMN_GAP.finditer(lines[k], least - 1)
            if lines[k][m.start() - 1] != " " and m.end() < len(lines[k])]
    if len(gaps) < _COLUMN_LINES:
        return text
    margin = Counter(column for _, column in gaps).most_common(1)[0][0]
    if margin < _COLUMN_MARGIN:
        return text
    split: list[int | None] = [None] * len(lines)
    for row, column in gaps:
        line = lines[row]
        # a column of prose is filled to near its margin: an option list's or a table's short cells are not
        if split[row] is None and abs(column - margin) <= _COLUMN_SLACK \
                and len(line[:column].rstrip()) >= _COLUMN_FILLED * margin and len(line[column:].split()) >= 3:
            split[row] = column
    filled = sum(1 for line in lines if line.strip())
    found = sum(s is not None for s in split)
    if found < _COLUMN_LINES or found < _COLUMN_SHARE * filled:
        return text
    left, right = [], []
    for line, at in zip(lines, split):
        if at is not None:
            left.append(line[:at].rstrip())
            right.append(line[at:])
        elif len(line) - len(line.lstrip(" ")) >= margin - _COLUMN_SLACK and line.strip():
            right.append(line.strip())
        else:
            left.append(line)
    return "\n".join(left + right)


@njit(cache=True)
def _gap_counts(data, ends, least):
    """int64 [m]: per text of a batch, its lines' gaps of 3 or more spaces before another byte, after `least` bytes
    of the line or more (a left column's text). Branches only at a space or a line break: most bytes are neither."""
    out = np.zeros(len(ends), np.int64)
    u = np.uint64(0)                                   # unsigned: no negative-index test per byte (~25 %)
    for d in range(len(ends)):
        stop, line, run = np.uint64(ends[d]), u, np.uint64(0)
        while u < stop:
            c = data[u]
            if c > 32:
                if run >= 3:
                    if u - run - line >= least:        # (a run lies within its line: no wrap-around)
                        out[d] += 1
                    run = np.uint64(0)
                elif run:
                    run = np.uint64(0)
            elif c == 32:
                run += np.uint64(1)
            elif c == 10:
                line, run = u + np.uint64(1), np.uint64(0)
            else:
                run = np.uint64(0)
            u += np.uint64(1)
        u = stop + np.uint64(1)
    return out


def column_docs(data: np.ndarray, ends: np.ndarray) -> list[int]:
    """Which texts of a batch (UTF-8 `data`, a `\\n` after each, at `ends`) `read_columns` changes: those with
    `_COLUMN_LINES` or more gaps after a left column's text (a compiled scan, ~2 ns a byte) are read. Code with
    aligned comments holds such gaps, and asking it here costs less than reading it with every other form
    (`textforms`)."""
    if len(ends) == 0:
        return []
    ends = np.asarray(ends, np.int64)
    docs = np.flatnonzero(_gap_counts(data, ends, int(_COLUMN_FILLED * _COLUMN_MARGIN)) >= _COLUMN_LINES).tolist()
    if not docs:
        return []
    starts, raw = np.concatenate([[0], ends[:-1] + 1]).tolist(), data.tobytes()
    return [d for d in docs if (text := raw[starts[d]:ends[d]].decode("utf-8", "surrogatepass")) is not read_columns(
        text)]
