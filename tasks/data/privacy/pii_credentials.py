"""Credentials in shapes the keyed passes (`tasks.data.privacy.pii_keyed`) pass over: Google app passwords,
Erlang cookies, Postgres role verifiers and a token inside a URL-encoded URL.

- A Google app password is 16 lower-case letters, shown as four groups of four (`abcd efgh ijkl mnop`): no digit,
  so the keyed passes, which want one in an unquoted value, keep it. After a password word it is one here when
  it reads as random letters (few vowels, no common word inside: `mysecretpassword` stays).
- An Erlang cookie (`erlangCookie:`, `RABBITMQ_ERLANG_COOKIE=`, `echo ... > .erlang.cookie`, `-setcookie`) is a
  login to every node of a cluster, commonly 20 capital letters: no credential word names it.
- Postgres stores a role's password as `md5` and 32 hex digits (`md5(password || rolname)`) or as a
  `SCRAM-SHA-256$<iterations>:<salt>$<key>:<key>` verifier; either logs in (md5) or is cracked offline.
- `redirect=https%3A%2F%2Fapp%2Fcb%3Faccess_token%3D...`: a URL passed as a parameter is percent-encoded, its
  `?`, `&` and `=` read `%3F`, `%26` and `%3D`, which no `?token=` pattern reads.
"""

from __future__ import annotations

import re
from urllib.parse import unquote

from tasks.data.privacy.pii_keyed import is_credential_name
from tasks.data.privacy.pii_values import is_placeholder, looks_random

_SEP = r"[\"']?[ \t]*(?:[:=]|=>)[ \t]*[\"']?"
# (led by a `P` of either case, which `re` scans for in C; a case-insensitive word is tried at every character)
_APP_PASSWORD = re.compile(r"[Pp](?i:ass(?:word|wd|phrase|wort)?|wd)[\w-]{0,20}" + _SEP +
                           r"(?P<v>[a-z]{4}[ ][a-z]{4}[ ][a-z]{4}[ ][a-z]{4}|[a-z]{16})(?![\w-])")
_VOWELS = frozenset("aeiou")
# Words a chosen (and documented) password is made of; an app password's 16 letters are drawn at random.
_WORDS = ("pass", "word", "secret", "admin", "user", "test", "demo", "change", "default", "example", "letmein",
          "qwerty", "dummy", "sample", "hello", "welcome", "abcd", "mail", "login", "root", "guest", "master")


def _app_password(m: re.Match[str]) -> bool:
    """Random letters: at most a third vowels (English runs near two fifths; 26 letters drawn at random, a fifth),
    four groups not all alike, and no common word inside."""
    letters = m.group("v").replace(" ", "")
    return sum(c in _VOWELS for c in letters) <= 5 and len(set(letters)) >= 8 and \
        not any(word in letters for word in _WORDS)


_COOKIE_VALUE = r"[\"']?(?P<v>[A-Za-z0-9]{16,255})[\"']?(?![\w-])"
_ERLANG_COOKIE = re.compile(
    r"(?i:erlang[_.-]?cookie)" + _SEP + r"(?P<v>[A-Za-z0-9]{16,255})(?![\w-])"
    r"|echo[ \t]+(?:-n[ \t]+)?" + _COOKIE_VALUE.replace("P<v>", "P<e>") + r"[ \t]*>{1,2}[ \t]*[^\s;|&]*\.erlang\.cookie"
    r"|-setcookie[ \t]+" + _COOKIE_VALUE.replace("P<v>", "P<s>"))


def _cookie_group(m: re.Match[str]) -> str:
    return next(name for name in ("v", "e", "s") if m.group(name) is not None)


def _cookie_span(m: re.Match[str]) -> tuple[int, int]:
    name = _cookie_group(m)
    return m.start(name) - m.start(), m.end(name) - m.start()


def _value_span(m: re.Match[str]) -> tuple[int, int]:
    return m.start("v") - m.start(), m.end("v") - m.start()


def _erlang_cookie(m: re.Match[str]) -> bool:
    value = m.group(_cookie_group(m))
    return not is_placeholder(value, quoted=True) and len(set(value)) >= 8 and \
        (any(c.isdigit() for c in value) or value.isupper())


_PG_VERIFIER = re.compile(r"(?<![\w$])md5[0-9a-f]{32}(?![0-9A-Za-z])"
                          r"|SCRAM-SHA-256\$\d{1,7}:[A-Za-z0-9+/]{8,}={0,2}\$[A-Za-z0-9+/]{16,}={0,2}:[A-Za-z0-9+/]{16,}={0,2}")


def _pg_verifier(m: re.Match[str]) -> bool:
    return len(set(m.group())) >= 10


# `%3F` or `%26`, a parameter name, `%3D`, the value: unreserved characters and escapes up to the next `%26`.
_ENCODED_PARAM = re.compile(r"%(?:3[Ff]|26)(?P<name>[A-Za-z][\w.-]{0,40})%3[Dd]"
                            r"(?P<v>(?:[A-Za-z0-9._~-]|%(?!26)[0-9A-Fa-f]{2}){8,400})")
_TOKEN_NAMES = frozenset({"token", "access_token", "id_token", "refresh_token", "auth", "sig", "signature",
                          "password", "pass", "key", "apikey", "api_key", "secret", "client_secret", "code"})


def _encoded_param(m: re.Match[str]) -> bool:
    name, value = m.group("name"), unquote(m.group("v"))
    if name.lower() not in _TOKEN_NAMES and not is_credential_name(name):
        return False
    if is_placeholder(value, quoted=True) or len(value) < 8:
        return False
    # a token's letters are drawn at random: mixed case with a digit, or `looks_random`'s shapes
    return looks_random(value) or len(value) >= 16 and any(c.isdigit() for c in value) and \
        value != value.lower() and value != value.upper() or name.lower() in ("password", "pass", "secret")


# (pattern, validator, group, hint): `tasks.data.privacy.pii_secrets.SECRET_PASSES`' shape; run before those
# passes, which would take a piece (`...%3D` up to the first `%`) or leave the value whole
CREDENTIAL_PASSES = (
    (_PG_VERIFIER, _pg_verifier, 0, lambda text: "md5" in text or "SCRAM-SHA-256$" in text),
    (_ERLANG_COOKIE, _erlang_cookie, _cookie_span,
     lambda text: "ookie" in text or "OOKIE" in text),
    (_APP_PASSWORD, _app_password, _value_span, lambda text: "ass" in text or "ASS" in text or "wd" in text or
     "WD" in text),
    (_ENCODED_PARAM, _encoded_param, _value_span, lambda text: "%3D" in text or "%3d" in text),
)
