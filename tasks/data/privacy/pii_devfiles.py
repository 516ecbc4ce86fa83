"""Credentials in developer artifacts that the keyed passes (`tasks.data.privacy.pii_keyed`) read past.

- A JSON string holding JSON or code, its quotes escaped: a HAR's `postData.text` (`{\\"password\\":\\"...\\"}`),
  a notebook's source (`os.environ[\\"API_TOKEN\\"] = \\"...\\"`): the name's and the value's quotes are `\\"`.
- An environment line inside a string (a notebook's `!env` output `"DB_PASSWORD=...\\n"`, `docker inspect`'s
  `"Env": ["DB_PASSWORD=..."]`): the quote opens before the name, not the value.
- A form body's or a query's `password=` (`--data-raw 'user=a&password=...'`, a JDBC URL's `&password=`): the
  value runs to `&`, a quote, a space or a backslash (an escaped `\\n`), `#`, `;` and `!` included (a
  password's punctuation, no URL fragment). Only after `?`, `&` or a quote: `f(user=u, password=pw)` is code.
- A connection string's `;Password=...;` (ADO.NET, ODBC), its value up to the next `;`.
- `echo "..." | docker login --password-stdin`: the piped word is the password.
- A CSV with a `password` column (a browser's exported passwords: `name,url,username,password`; a password
  manager's `username,password`): that cell of each row below the header with as many cells.
"""

from __future__ import annotations

import re
from typing import Callable, Iterator

from tasks.data.privacy.pii_keyed import is_credential_name
from tasks.data.privacy.pii_values import is_placeholder, value_ok

_ESCAPED_PAIR = re.compile(r'\\"(?P<name>[A-Za-z_][\w.-]{1,60})\\"\]?[ \t]*[:=][ \t]*\\"'
                           r'(?P<v>(?:[^"\\\n]|\\[^"\n]){1,200}?)\\"')
_ENV_IN_STRING = re.compile(r'"(?P<name>[A-Za-z_][A-Za-z0-9_]{1,60})=(?P<v>[^"\\\s]{1,200})(?=(?:\\r)?(?:\\n)?")')
# `=` first (a fast scan), then the name before it and `?`, `&` or a quote: not `--password=`, `db_password=`
_FORM_PASSWORD = re.compile(r"=(?:" + "|".join(rf"(?<=[?&'\"]{name}=)" for name in ("password", "passwd", "pwd",
                                                                                         "Password", "PASSWORD"))
                            + r")(?P<v>[^&\s'\"<>\\]{1,200})")
# a connection string's `;Password=...;` (ADO.NET, ODBC): its pairs end at `;` (a space is the value's), a value in
# `{...}` may hold one
_PAIR_PASSWORD = re.compile(r"=(?:" + "|".join(rf"(?<=;{name}=)" for name in ("password", "Password", "PASSWORD",
                                                                             "pwd", "Pwd", "PWD"))
                            + r")(?!\{)(?P<v>[^;\r\n'\"<>\\]{1,200}(?<! ))")
_PASSWORD_STDIN = re.compile(r"echo[ \t]+(?:-n[ \t]+)?(?:\"(?P<dq>[^\"$`\\\n]{4,200})\"|'(?P<sq>[^'\n]{4,200})'"
                             r"|(?P<bare>[^\s\"'$`|;&]{4,200}))[ \t]*\|[ \t]*[^\n|;&]{0,120}?--password-stdin\b")


def _span(name: str) -> Callable[[re.Match[str]], tuple[int, int]]:
    return lambda m: (m.start(name) - m.start(), m.end(name) - m.start())


def _named_value(m: re.Match[str]) -> bool:
    """A credential's name and a value as people write one (not a placeholder, a path or prose)."""
    return is_credential_name(m.group("name")) and value_ok(m.group("v"), quoted=True)


def _form_password(m: re.Match[str]) -> bool:
    # a parameter's value is literal text, never code; `password=<SECRET>` is already done
    return not m.group("v").startswith("<") and value_ok(m.group("v"), literal=True)


def _stdin_group(m: re.Match[str]) -> str:
    return next(name for name in ("dq", "sq", "bare") if m.group(name) is not None)


def _stdin_password(m: re.Match[str]) -> bool:
    return value_ok(m.group(_stdin_group(m)), quoted=True)


def _stdin_span(m: re.Match[str]) -> tuple[int, int]:
    return _span(_stdin_group(m))(m)


# --- CSV with a password column ------------------------------------------------------------------------------
# A header line, tried whole (`fullmatch`) on the lines holding a needle: a case-insensitive search of every line
# start would cost a sixth of the scrubbing time of source code
_PASSWORD_HEADER = re.compile(r"(?i)[ \t]*(?:\"?[\w .-]{1,40}\"?,){0,15}\"?(?:login_)?(?:password|passwd|pwd)\"?"
                              r"(?:,\"?[\w .-]{1,40}\"?){0,15}[ \t]*\r?")
_HEADER_NEEDLES = ("password", "Password", "PASSWORD", "passwd", "pwd", "Pwd", "PWD")
_CELL_BEFORE = ("", ",", '"', "\n", " ", "\t", "_")
_CELL_AFTER = ("", ",", '"', "\r", "\n", " ", "\t")
_PASSWORD_NAMES = ("password", "passwd", "pwd", "login_password")
# A login's other columns (Chrome's, Firefox's, Bitwarden's, KeePass's exports): a header needs one, so that
# `return user,password` over a two-cell line of code is no header
_LOGIN_NAMES = frozenset({"url", "username", "user", "login", "email", "login_uri", "login_username", "name", "title",
                          "website", "origin_url", "httprealm", "user name", "account"})
# The login columns a two-column export names beside its password (`username,password`, `email,password`)
_PAIR_LOGINS = frozenset({"username", "user", "login", "email", "account", "user name", "login_username"})
_CELL = re.compile(r'"(?:[^"\n]|"")*"|[^,\r\n]*')
_BARE = re.compile(r"[^\r\n]*")


def _cells(text: str, start: int, end: int) -> list[tuple[int, int]]:
    """The cells' spans of the CSV line text[start:end] (a quoted cell's without its quotes)."""
    spans, at = [], start
    while True:
        m = _CELL.match(text, at, end)
        s, e = m.span()
        spans.append((s + 1, e - 1) if m.group().startswith('"') and e - s >= 2 else (s, e))
        if e >= end or text[e] != ",":
            return spans
        at = e + 1


def _headers(text: str) -> list[re.Match[str]]:
    """The CSV header lines naming a password column, in text order."""
    found: dict[int, re.Match[str]] = {}
    for needle in _HEADER_NEEDLES:
        at = text.find(needle)
        while at >= 0:
            # (a header's cell is the whole word: `getpass`, `pwd.getpwnam` are skipped without reading their line)
            if text[at - 1:at] not in _CELL_BEFORE or text[at + len(needle):at + len(needle) + 1] not in _CELL_AFTER:
                at = text.find(needle, at + 1)
                continue
            start = text.rfind("\n", 0, at) + 1
            end = text.find("\n", at)
            end = len(text) if end < 0 else end
            if start not in found and "," in text[start:end]:
                header = _PASSWORD_HEADER.fullmatch(text, start, end)
                if header is not None:
                    found[start] = header
            at = text.find(needle, end)
    return [found[start] for start in sorted(found)]


class PasswordColumn:
    """`sub(repl, text)`: under a CSV header with a `password` column and a login's (two columns or more),
    that cell of each following row with as many cells, up to the first row without, replaced by `repl(match of
    the cell)`."""

    def sub(self, repl: Callable[[re.Match[str]], str], text: str) -> str:
        spans = sorted(set(self._cells(text)))       # (a header inside another's rows yields its rows twice)
        for start, end in reversed(spans):
            m = _BARE.match(text, start, end)
            text = text[:start] + repl(m) + text[end:]
        return text

    @staticmethod
    def _cells(text: str) -> Iterator[tuple[int, int]]:
        for header in _headers(text):
            names = [text[s:e].strip().lower() for s, e in _cells(text, header.start(), header.start() +
                                                                    len(header.group().rstrip()))]
            column = next((k for k, name in enumerate(names) if name in _PASSWORD_NAMES), None)
            # (`"password` with no closing quote reads as no name)
            if len(names) < 2 or column is None or not _LOGIN_NAMES.intersection(names):
                continue
            # two columns (a password manager's `username,password`): a login's name and the password alone on
            # the header line, and only cells that read as a password (`return user,password` is code's line)
            pair = len(names) == 2
            if pair and not _PAIR_LOGINS.intersection(names):
                continue
            at = header.end() + 1
            while at < len(text):
                end = text.find("\n", at)
                end = len(text) if end < 0 else end
                line_end = end - 1 if end > at and text[end - 1] == "\r" else end
                row = _cells(text, at, line_end)
                if len(row) != len(names):
                    break
                if not pair or value_ok(text[row[column][0]:row[column][1]].strip(), literal=True):
                    yield row[column]
                at = end + 1


def _cell_password(m: re.Match[str]) -> bool:
    value = m.group().strip()
    return len(value) >= 4 and not is_placeholder(value, quoted=True) and not value.startswith("<")


# (pattern, validator, group, hint): `tasks.data.privacy.pii_secrets.SECRET_PASSES`' shape; run before the other
# secret passes, which cut a form password at `#` and leave escaped or env-line strings whole
DEVFILE_PASSES = (
    (_ESCAPED_PAIR, _named_value, _span("v"), lambda text: '\\"' in text),
    (_ENV_IN_STRING, _named_value, _span("v"), lambda text: '"' in text and "=" in text),
    (_FORM_PASSWORD, _form_password, _span("v"), lambda text: "=" in text),
    (_PAIR_PASSWORD, _form_password, _span("v"), lambda text: ";" in text and "=" in text),
    (_PASSWORD_STDIN, _stdin_password, _stdin_span, lambda text: "--password-stdin" in text),
    (PasswordColumn(), _cell_password, 0, lambda text: "ass" in text or "ASS" in text or "wd" in text or "WD" in text),
)
