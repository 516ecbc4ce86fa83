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
"""

from __future__ import annotations

import bisect
import re

import numpy as np

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
