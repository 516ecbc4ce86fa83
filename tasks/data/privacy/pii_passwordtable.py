"""A Markdown table whose header names a password column and a login's (`| Site | Username | Password |`), for
`tasks.data.privacy.pii`: the cells under the password column, while the rows keep the header's width.

A password manager's or a wiki's export (`pii_columns` and `pii_devfiles.PasswordColumn` read dates and CSV only).
A cell counts as `pii_plainwords` reads a value (`plain_password`, or a credential's shape, `value_ok`); a header
needs a login's column too, so a comparison's `| Feature | Password | SSH key |` is no export. Run with the plain
password passes, before them (`pii.py`).
"""

from __future__ import annotations

import re
from typing import Callable, Iterator

from tasks.data.privacy.pii_personal import gate_hits
from tasks.data.privacy.pii_plainwords import plain_password
from tasks.data.privacy.pii_values import replace_spans, value_ok

_TABLE_PASSWORDS = frozenset({"password", "passwd", "pwd", "pass", "pw", "passphrase", "passcode", "passwort",
                              "kennwort", "wachtwoord", "senha"})
# A login's other columns: a header needs one, so a comparison's `| Feature | Password | SSH key |` is no export
_TABLE_LOGINS = frozenset({"user", "username", "login", "email", "account", "site", "url", "host", "hostname",
                           "service", "name", "website", "title", "server", "system", "database", "db", "app",
                           "application", "ip", "machine", "wifi", "ssid", "network", "userid", "uid", "device"})
_ROW_START = re.compile(r"[ \t]*\|")
_RULE_LINE = re.compile(r"[ \t]*(?:\|[ \t]*)?:?-{3,}:?[ \t]*(?:\|[ \t]*:?-{3,}:?[ \t]*)+(?:\|[ \t]*)?\r?")  # (no n^2)


def _cells(text: str, start: int, end: int) -> list[tuple[int, int]] | None:
    """The cells of a Markdown row text[start:end] (spans without spaces and backticks), or None for no row."""
    line = text[start:end].rstrip("\r")
    body = line.strip()
    if not body.startswith("|") or not body.endswith("|") or body.count("|") < 3:
        return None
    spans, at = [], start + line.find("|") + 1
    stop = start + line.rfind("|")
    while at <= stop:
        nxt = text.find("|", at, stop + 1)
        a, b = at, nxt
        while a < b and text[a] in " \t`":
            a += 1
        while b > a and text[b - 1] in " \t`":
            b -= 1
        spans.append((a, b))
        at = nxt + 1
    return spans


class PasswordTable:
    """`sub(repl, text)`: the cells under a Markdown header's password column, while the rows keep its width."""

    def sub(self, repl: Callable[[re.Match[str]], str], text: str) -> str:
        spans = sorted(set(self._spans(text)))
        return replace_spans(text, spans, repl) if spans else text

    @staticmethod
    def _spans(text: str) -> Iterator[tuple[int, int]]:
        seen = set()
        for hit in gate_hits(text, ("pass", "pw", "wort", "woord", "senha"), ()):
            start = text.rfind("\n", max(0, hit - 1000), hit) + 1
            if start == 0 and hit > 1000 or start in seen or not _ROW_START.match(text, start):
                continue            # (bounded per word: a line of `pass` words is read once)
            seen.add(start)
            end = _line_end(text, start)
            header = _cells(text, start, end)
            if header is None or not _RULE_LINE.fullmatch(text, end + 1, _line_end(text, end + 1)):
                continue
            names = [re.sub(r"[\s_.*-]+", "", text[a:b]).lower() for a, b in header]
            column = next((k for k, name in enumerate(names) if name in _TABLE_PASSWORDS), None)
            if column is None or not _TABLE_LOGINS.intersection(names):
                continue
            at = _line_end(text, end + 1) + 1
            while at < len(text) and (row := _cells(text, at, _line_end(text, at))) and len(row) == len(header):
                if _RULE_LINE.fullmatch(text, _line_end(text, at) + 1, _line_end(text, _line_end(text, at) + 1)):
                    break           # another table's header: its rows are its own (read once, not per header)
                a, b = row[column]
                value = text[a:b]
                if value_ok(value, literal=True) or plain_password(value, quoted=True) or \
                        value.isalpha() and value.istitle() and plain_password(value.lower(), quoted=True):
                    yield a, b
                at = _line_end(text, at) + 1


def _line_end(text: str, start: int) -> int:
    end = text.find("\n", start)
    return len(text) if end < 0 else end



# (pattern, validator, group, hint): `tasks.data.privacy.pii_secrets.SECRET_PASSES`' shape; the table looks for its
# own gates (`gate_hits`), so the hint is `bool`
PASSWORD_TABLE_PASSES = ((PasswordTable(), None, 0, bool),)
