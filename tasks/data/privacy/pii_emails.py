"""Plain emails for `tasks.data.privacy.pii`: the pass that finds them at each `@` and its validator.

`EMAIL_PASSES` has the shape of `pii`'s pass table: `(kind, pattern, validator(match), group to replace, cheap test
that the pass can match)`; `pii.scrub_pii` runs it right after secrets (a key or token may hold an `@`).
Obfuscated emails (`ann [at] example [dot] com`) are `tasks.data.privacy.pii_ids`'.
"""

from __future__ import annotations

import bisect
import re
from typing import Callable

from tasks.data.privacy.pii_ids import Anchored

# Tried only at each `@` (`Anchored`), from the local part's start: led by its local part, `re.sub` would try
# it at every word. `Anchored(unicode=True)` finds the local part's start, so the pattern has no lookbehind.
# Any script's letters and digits (`jörg@müller.de`, `用户@例子.广告`; a punycode TLD `xn--p1ai`), the
# full-width `＠` that Japanese and Chinese pages write to dodge harvesters, and a URL's `%40`
# (`mailto:ann%40example.com`).
# A dot and a TLD stay required (`user@localhost`, `@mentions` are no address).
# An HTML page's `&#64;`/`&#x40;`/`&commat;` (the `@` as an entity, to dodge harvesters; its dots then
# may be `&#46;` too) and a quoted-printable
# mail's `=40` (only where the text is quoted-printable: `_email`) are `@` too, and so are a JSON or JavaScript
# string's escapes `\u0040` and `\x40`; an apostrophe may be inside the
# local part (`o'brien@`), so may a `=` in a VERP or SRS bounce address (`bounces+ann=example.org@lists.example.com`,
# whose local part is the recipient's address: `Anchored` walks back over it only then, not over `?email=`).
# An ASCII TLD ends before a letter of another script: Chinese, Japanese and Korean glue the next word to it
# (`请联系zhang.wei@qq.com获取资料`, `kim.minsu@naver.com입니다`); a Latin letter would continue the TLD itself.
_DOMAIN = (r"(?:[^\W_](?:(?:[^\W_]|-){0,61}[^\W_])?(?:\.|&\#(?:46|x2[Ee]);))+"
           r"(?:[A-Za-z]{2,24}(?![A-Za-z0-9\u00c0-\u024f-])|(?:[^\W\d_]{2,24}|xn--[A-Za-z0-9-]{1,59})(?![^\W_]|-))")
_EMAIL = re.compile(r"[^\W](?:[\w.%+'=-]{0,62}[\w%+=-])?(?P<at>[@\uff20]|%40|&\#(?:64|x40);|&commat;|=40|\\u0040|\\x40)"
                    + _DOMAIN)  # `_` after it: markdown italics
_AT_FORMS = ("@", "\uff20", "%40", "&#64;", "&#x40;", "&commat;", "=40", "\\u0040", "\\x40")
# Quoted-printable around a `=40`: an encoded word's `?Q?` or another escape on its line, or the header.
_QP_LINE = re.compile(r"\?[Qq]\?|=[0-9A-F]{2}(?![0-9A-Za-z])|=$")
_QP_HEADER = re.compile(r"(?i)content-transfer-encoding:[ \t]*quoted-printable")


# Look-alikes of an address that are nobody's: git's scp-like remote (`git clone git@github.com:octocat/repo.git`,
# `root@server.local:~$`: a `:` and a path after the host; an address before `: `, at a sentence's end or before a
# combo list's `:hunter2`, no path, stays one) and an `ssh://` URL's login (`git+ssh://git@github.com/org/repo`).
_SCP_PATH = re.compile(r":(?:[~/]|[\w.-]+/|[\w.-]+\.git\b)")
# Code: a call (`q@k.transpose(-2, -1)`, Python's matrix product), a camelCase member (no TLD is camelCase) and an
# attribute of `self`/`this` (`X@self.weights`) unless the TLD is a common one (`ann@self.io` is a domain). Kotlin's
# labelled `this`/`super` (`this@MainActivity.context`, `super@Outer.draw`) names a class, capitalised as no domain
# is written, or a member no common TLD names; `this@kotlinmail.com` is an address.
_CAMEL_CASE = re.compile(r"[a-z][A-Z]")
# A mail's id headers hold `<local@host>` ids a mail server made, nobody's address (cut at a `=` before); so does
# a calendar's `UID:` property (`UID:0173ae3f-...@cal.acme.io`, RFC 5545 recommends the `@host` form).
_ID_HEADER = re.compile(r"(?i:message-id|in-reply-to|references|content-id|x-message-id|resent-message-id)[ \t]*:"
                        r"|UID[:;]")


def _header_start(text: str, at: int) -> int:
    """Where the mail header holding `at` starts: its line's, or a folded header's first line's (a continuation
    line opens with a space or a tab; at most 20 lines up)."""
    line = text.rfind("\n", 0, at) + 1
    for _ in range(20):
        if line == 0 or text[line:line + 1] not in (" ", "\t"):
            break
        line = text.rfind("\n", 0, line - 1) + 1
    return line
_USERINFO_AFTER = re.compile(r":(?:<SECRET>|[^\s@/'\"<>]{1,128})@(?=[\w\[])")
_COMMON_TLDS = frozenset("com org net edu gov mil int io co uk de fr info biz me us ca au jp cn ru".split())
# File suffixes that are no top-level domain (IANA's list holds none of them): a retina image (`logo@2x.png`,
# `nav-bg@3x.jpg` in HTML and CSS), a systemd template unit (`wg-quick@wg0.service`, `getty@tty1.service`), a
# versioned file (`report@final.pdf`, `model@best.ckpt`). `.zip`, `.mov`, `.py`, `.md`, `.sh` are domains.
_FILE_SUFFIXES = frozenset(
    "png jpg jpeg gif svg webp bmp ico tif tiff avif heic pdf csv tsv txt json jsonl yaml yml toml xml html htm "
    "css scss js mjs cjs ts tsx jsx vue ipynb pth ckpt safetensors onnx pkl npy npz parquet gz tgz tar rar whl "
    "wav ogg webm mkv avi doc docx xls xlsx ppt pptx odt service socket timer mount automount slice swap "
    "lock log bak tmp swp dll exe jar".split())


def _not_an_address(m: re.Match[str]) -> bool:
    text, start, end = m.string, m.start(), m.end()
    if _SCP_PATH.match(text, end) or text[max(0, start - 6):start].lower() == "ssh://":
        return True
    if _ID_HEADER.match(text, _header_start(text, start)):     # `Message-ID: <CAF7x2=9Kq@mail.gmail.com>`: an id
        return True
    # a URL's user (`https://<key>@o1.ingest.sentry.io/2`): the URL passes' (a key there is a secret), not an
    # address; unless a password and the host follow it: then the user is an address (`ftp://ops@acme.io:...@`)
    if text[max(0, start - 3):start] == "://" and not _USERINFO_AFTER.match(text, end):
        return True
    labels = re.sub(r"&#(?:46|x2[Ee]);", ".", text[m.end("at"):end]).split(".")
    if labels[-1].lower() in _FILE_SUFFIXES:
        return True
    uncommon = labels[-1].lower() not in _COMMON_TLDS     # `ann@example.com(preferred)` is still an address
    if text[start:m.start("at")] in ("this", "super") and (uncommon or labels[0] != labels[0].lower()):
        return True                                        # Kotlin's `this@Label.member`
    return _CAMEL_CASE.search(labels[-1]) is not None or \
        uncommon and (text.startswith("(", end) or labels[0] in ("self", "this"))


def _email(m: re.Match[str]) -> bool:
    """Not a look-alike (`_not_an_address`). An `=40` address only in quoted-printable text: another escape on its
    line (the line without the address: `_QP_LINE` on its text before, a space and its text after), or the header
    in the 20,000 characters before."""
    if _not_an_address(m):
        return False
    if m.group("at") != "=40":
        return True
    text, start, end = m.string, m.start(), m.end()
    line_start, line_end = text.rfind("\n", 0, start) + 1, text.find("\n", end)
    line_end = len(text) if line_end < 0 else line_end
    lines, headers = _qp_marks(text)
    # (read from the text's escapes and headers, found once: a long line of `=40` addresses searched its whole
    # line, and 20,000 characters for the header, once per address)
    return _QP_CUT_ESCAPE.fullmatch(text, max(line_start, start - 3), start) is not None or \
        _any_within(lines, line_start, start) or _any_within(lines, end, line_end) or \
        (line_end > end and text[line_end - 1] == "=") or _any_within(headers, max(0, start - 20000), start)


_QP_CUT_ESCAPE = re.compile(r"=[0-9A-F]{2}")    # right before the address: a space follows it in the line read
_QP_MARKS: list[tuple[str, list[tuple[int, int]], list[tuple[int, int]]]] = []


def _qp_marks(text: str) -> tuple[list[tuple[int, int]], list[tuple[int, int]]]:
    """The (start, end) of every `_QP_LINE` escape (`=$` aside) and `_QP_HEADER` in `text`, for the last text."""
    seen = _QP_MARKS[0] if _QP_MARKS else None      # (read once: another thread may replace it)
    if seen is None or seen[0] is not text:
        seen = (text, [m.span() for m in _QP_LINE.finditer(text) if m.group() != "="],
                [m.span() for m in _QP_HEADER.finditer(text)])
        _QP_MARKS[:] = [seen]
    return seen[1], seen[2]


def _any_within(spans: list[tuple[int, int]], lo: int, hi: int) -> bool:
    """Whether one of the sorted, non-overlapping `spans` lies within [lo, hi)."""
    k = bisect.bisect_left(spans, (lo, -1))
    return k < len(spans) and spans[k][1] <= hi


# A quoted local part (`"john doe"@example.com`, `"\\"ann\\" lee"@x.io`, RFC 5322); not a shell's or a template's
# variable (`"$USER"@host`, `"{user}"@x.io`).
_QUOTED_LOCAL = re.compile(r'"(?P<local>(?:[^"\\\n$%{]|\\[^\n]){1,64})"(?P<at>@)' + _DOMAIN)


def quoted_local(text: str, at: int, floor: int) -> re.Match[str] | None:
    """The address whose quoted local part closes right before the `@` at `at`: read from the furthest `"` at
    most 64 characters back (and not before `floor`) from which the quoted string, escapes included, closes
    there."""
    start = text.find('"', max(floor, at - 66), at - 1)
    while start >= 0:
        m = _QUOTED_LOCAL.match(text, start)
        if m is not None and m.end("local") == at - 1:
            return m if any(c.isalpha() for c in m.group("local")) else None
        start = text.find('"', start + 1, at - 1)
    return None

# Mailing-list archives (Mailman's pipermail, MHonArc) write `user at example.org` to dodge harvesters: in a
# `From:` line, inside `<...>`, or before `wrote:` in a reply's attribution. Elsewhere `x at y.z` is prose as often
# as not (`the tool at github.com`), so only those places count.
_MAILMAN_ADDRESS = re.compile(r"[A-Za-z0-9][\w.+-]{0,63} at (?:[A-Za-z0-9](?:[A-Za-z0-9-]{0,61}[A-Za-z0-9])?\.)+"
                              r"[A-Za-z]{2,24}(?![\w-])")
_FROM_LINE = re.compile(r"From:[ \t]{1,2}")
_WROTE = re.compile(r"[ \t]+wrote:")


class MailmanAddresses:
    """`sub(repl, text)`: each `user at domain.tld` handed to `repl` (`archive_place` tells the archive's). Found
    from each ` at ` (a literal search; one regex led by lookbehinds for those places cost 130 ms on 1.3 MB of
    code), its local part read back from there."""

    def sub(self, repl: Callable[[re.Match[str]], str], text: str) -> str:
        out, last, at = [], 0, text.find(" at ")
        while at >= 0:
            start = at
            while start > last and at - start < 64 and (text[start - 1].isalnum() or text[start - 1] in "._+-"):
                start -= 1
            m = _MAILMAN_ADDRESS.match(text, start)
            if m is not None and m.end() > at + 4:
                out += (text[last:start], repl(m))
                last = m.end()
            at = text.find(" at ", max(at + 4, last))
        return "".join(out) + text[last:] if out else text


def archive_place(m: re.Match[str]) -> bool:
    """The address stands where an archive writes one (see `_MAILMAN_ADDRESS`'s comment)."""
    text, start, end = m.string, m.start(), m.end()
    if text[start - 1:start] == "<":
        return text[end:end + 1] == ">"
    line_start = text.rfind("\n", 0, start) + 1
    return _FROM_LINE.fullmatch(text, line_start, start) is not None or _WROTE.match(text, end) is not None


# A URL-encoded `=`, `&`, `?` or `:` inside the local part read back from an encoded `%40` is the query's, before
# the address (`?filter=email%3Dpriyat%40gmail.com`): the address starts after the last one.
_ENCODED_QUERY_MARK = re.compile(r"(?i)%(?:3D|26|3F|3A)")


def _email_span(m: re.Match[str]) -> int | tuple[int, int]:
    marks = list(_ENCODED_QUERY_MARK.finditer(m.string, m.start(), m.start("at")))
    if not marks or marks[-1].end() >= m.start("at"):
        return 0
    return marks[-1].end() - m.start(), m.end() - m.start()


# (kind, pattern, validator, group, hint)
EMAIL_PASSES = (
    ("email", Anchored(tuple(re.compile(re.escape(at)) for at in _AT_FORMS), _EMAIL, spaces=False, unicode=True,
                       quoted=quoted_local), _email, _email_span, lambda text: any(at in text for at in _AT_FORMS)),
    ("email", MailmanAddresses(), archive_place, 0, lambda text: " at " in text),
)
