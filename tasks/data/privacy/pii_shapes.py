"""Credentials recognised by their own shape or file format, for `tasks.data.privacy.pii_secrets`' pass table.
`PEM_PASS` (a private key's PEM block, with the prefix its lines may carry in a diff or a quoted mail) runs first.

`SHAPE_PASSES` has the shape of `SECRET_PASSES`: `(pattern, validator(match) or None, group to replace, cheap
test that the pass can match)`; each pattern is led by a literal (a fast scan) and runs only when its gate
literal occurs in the text (`pii_values.literal_in`). What they find:
- password hashes: bcrypt (`$2b$12$` + 53 characters), crypt's SHA-256/512, MD5 and yescrypt (`$6$salt$hash`,
  `$apr1$salt$hash` of `htpasswd`, `$y$j9T$...`), Argon2 (`$argon2id$v=19$m=...$salt$hash`), scrypt, passlib's
  and Django's PBKDF2 (`pbkdf2_sha256$600000$salt$hash=`): whoever has one can guess the password offline;
- a `.pgpass` line (`host:port:database:user:PASSWORD`, a line of exactly five fields with a numeric port, or
  `*` where the text names `pgpass`): only the password;
- a kubeadm bootstrap token (`abcdef.0123456789abcdef`) after `token`;
- `user:PASSWORD` after a name that holds both (`credentials: u:p`, `basic_auth: "u:p"`, `http_auth=`,
  `--basic-auth u:p`) and HTTPie's `http -a u:p`/`--auth u:p`: only the password;
- the signature of a presigned URL: AWS SigV4's `X-Amz-Signature=` (and its `Authorization` header's
  `Signature=`) and session `X-Amz-Security-Token=`, Google Cloud Storage's `X-Goog-Signature=`, and a plain
  `Signature=` in the same URL as S3's `AWSAccessKeyId=`, GCS's `GoogleAccessId=` or CloudFront's `Key-Pair-Id=`:
  whoever holds the URL has the access it grants.
What stays: a hash's format named in prose (`$2b$` alone, `$6$rounds=5000$` without a hash), `/etc/passwd` and
`/etc/group` lines (seven and four fields), `host:port` pairs, a token that is not the bootstrap shape,
`user:group` after `--user` (only HTTPie's `-a` and names that hold a login are read as `user:password`),
placeholders (`${PGPASS}`, `<password>`), URLs without a signature parameter.
"""

from __future__ import annotations

import base64
import binascii
import re
from typing import Callable

from tasks.data.privacy.pii_literals import literal_in
from tasks.data.privacy.pii_values import is_placeholder, prose_like, shannon_entropy, value_ok

_B64 = r"[./A-Za-z0-9]"
_STD64 = r"[A-Za-z0-9+/]"
# (gate literal, pattern): the hash whole, group `hash` its last field (checked for randomness)
_HASH_SHAPES = [
    ("$2", rf"\$2[abxy]?\$\d\d\$(?P<hash>{_B64}{{53}})(?!{_B64})"),                                   # bcrypt
    ("$6$", rf"\$6\$(?:rounds=\d{{1,9}}\$)?{_B64}{{1,16}}\$(?P<hash>{_B64}{{86}})(?!{_B64})"),       # SHA-512 crypt
    ("$5$", rf"\$5\$(?:rounds=\d{{1,9}}\$)?{_B64}{{1,16}}\$(?P<hash>{_B64}{{43}})(?!{_B64})"),       # SHA-256 crypt
    ("$1$", rf"\$1\${_B64}{{1,8}}\$(?P<hash>{_B64}{{22}})(?!{_B64})"),                                 # MD5 crypt
    ("$apr1$", rf"\$apr1\${_B64}{{1,8}}\$(?P<hash>{_B64}{{22}})(?!{_B64})"),                           # htpasswd MD5
    ("$y$", rf"\$y\${_B64}{{3,8}}\${_B64}{{1,86}}\$(?P<hash>{_B64}{{43}})(?!{_B64})"),                 # yescrypt
    ("$argon2", rf"\$argon2(?:id|i|d)\$(?:v=\d+\$)?m=\d+,t=\d+,p=\d+\${_STD64}{{8,}}\$"
                rf"(?P<hash>{_STD64}{{16,}})(?![A-Za-z0-9+/=])"),
    ("$scrypt$", rf"\$scrypt\$ln=\d+,r=\d+,p=\d+\${_STD64}{{8,}}\$(?P<hash>{_STD64}{{16,}})(?![A-Za-z0-9+/=])"),
    ("$pbkdf2", rf"\$pbkdf2(?:-sha\d+)?\$\d+\${_B64}{{8,}}\$(?P<hash>{_B64}{{16,}})(?!{_B64})"),      # passlib
    ("pbkdf2_sha", rf"pbkdf2_sha(?<![\w]pbkdf2_sha)(?:1|256|512)\$\d{{3,}}\$[A-Za-z0-9]{{6,}}\$"
                   rf"(?P<hash>{_STD64}{{20,}}=*)(?![A-Za-z0-9+/=])"),                                  # Django
]


class LiteralGated:
    """`sub(repl, text)`: patterns led by a literal, each run only when its gate literal occurs in the text."""

    def __init__(self, entries: list[tuple[str, str]], flags: int = 0):
        self.entries = [(gate, re.compile(pattern, flags)) for gate, pattern in entries]

    def sub(self, repl: Callable[[re.Match[str]], str], text: str) -> str:
        for gate, pattern in self.entries:
            if literal_in(gate, text):
                text = pattern.sub(repl, text)
        return text


def _hash(m: re.Match[str]) -> bool:
    """A hash's last field is random: many distinct characters (not `$2b$12$` + a row of `x` or `.`)."""
    digest = m.group("hash")
    return len(set(digest)) >= 10 and shannon_entropy(digest) >= 3.5


# A `.pgpass` line: exactly five `:`-separated fields (`\:` escapes a colon inside one), the port numeric or
# `*`. Tried at line starts only where `_PGPASS_GATE` (led by a `:`, a fast scan) finds a line ending so.
_PGPASS = re.compile(r"(?m)^[ \t]*(?P<host>[A-Za-z0-9*\[][\w.*:\[\]-]*?|\*):(?P<port>\d{2,5}|\*):"
                     r"(?P<db>(?:\\.|[^\s:\\])+):(?P<user>(?:\\.|[^\s:\\])+):(?P<bare>(?:\\.|[^\s:\\])+)[ \t]*\r?$")
_PGPASS_GATE = re.compile(r":(?:\d{2,5}|\*):[^\s:]+:[^\s:]+:[^\s:]+[ \t]*\r?$", re.MULTILINE)


class PgpassLines:
    """`sub(repl, text)` like `_PGPASS`'s, run only when a line ends in a port and three more fields."""

    def sub(self, repl: Callable[[re.Match[str]], str], text: str) -> str:
        return _PGPASS.sub(repl, text) if _PGPASS_GATE.search(text) else text


# The file named just before the line (`# ~/.pgpass`, `cat .pgpass`, `pgpass.conf`) or its documented header
# comment (`# hostname:port:database:username:password`); not the variables
# `PGPASSWORD`, `$PGPASS`, `PGPASSFILE`.
_PGPASS_NAMED = re.compile(r"\bpgpass\b|hostname:port:database:username:password")
_IPV4_HOST = re.compile(r"\d{1,3}(?:\.\d{1,3}){3}")


def _pgpass(m: re.Match[str]) -> bool:
    password, host = m.group("bare"), m.group("host")
    if is_placeholder(password, quoted=True):
        return False
    named = _PGPASS_NAMED.search(m.string, max(0, m.start() - 300), m.start()) is not None
    if m.group("port") == "*" or host == "*":      # wildcards: a pgpass line only where the text names one
        return named and len(password) >= 4
    if not any(c.isalpha() for c in host) and not _IPV4_HOST.fullmatch(host):     # `12:30:45:00:12`: times
        return False
    return value_ok(password, quoted=True) or named and len(password) >= 4


# Names that hold a login as `user:password`, the value's user part, then the password (group `bare`).
_USER = r"(?P<user>[\w.+%-]{1,64})"     # a login's characters: no `=`, backtick or `?` of code (`a===`x`?`)
_USERPASS_VALUE = (r"""[ \t]*[:=](?!=)[ \t]*(?P<q>["']?)""" + _USER
                   + r""":(?P<bare>[^\s'"]{1,200}?)(?P=q)(?=[\s,;}\])]|$)""")
# Each pattern led by its gate literal (a fast scan); the word before it is checked by `_user_pass`.
_USER_PASS = LiteralGated([
    ("redentials", r"redentials(?<=[Cc]redentials)(?<![A-Za-z0-9-][Cc]redentials)[\"']?" + _USERPASS_VALUE),
    ("_auth", r"_auth[\"']?" + _USERPASS_VALUE), ("Auth", r"Auth[\"']?" + _USERPASS_VALUE),
    ("-auth", r"-auth(?:" + "|".join(rf"(?<=[ \t]--{kind}-auth)" for kind in ("basic", "http", "proxy", "digest")) + ")"
              r"(?:[ \t]+|=)(?P<q>[\"']?)" + _USER
              + r":(?P<bare>[^\s'\"]{1,200}?)(?P=q)(?=\s|$)"),
    # HTTPie (`http`/`https`/`xh` opening the command): `-a user:password`, `--auth user:password`, `--auth=...`
    (" -a", r" -a[ \t]+(?P<q>[\"']?)(?P<user>[\w.+%][\w.+%-]{0,63}):(?P<bare>[^\s'\"]{1,200}?)(?P=q)(?=\s|$)"),
    (" --auth", r" --auth(?:[ \t]+|=)(?P<q>[\"']?)(?P<user>[\w.+%][\w.+%-]{0,63}):(?P<bare>[^\s'\"]{1,200}?)"
                r"(?P=q)(?=\s|$)"),
])
_AUTH_QUALIFIER = re.compile(r"(?<![\w-])(?:basic|http|proxy|digest)$")
_HTTPIE = re.compile(r"(?<![\w-])(?:https?|xh)[ \t][^\n|;&]{0,200}$")


def _user_pass(m: re.Match[str]) -> bool:
    password, text, lead = m.group("bare"), m.string, m.group()[:2]
    if lead in ("_a", "Au") and _AUTH_QUALIFIER.search(text, max(0, m.start() - 8), m.start()) is None:
        return False                    # `basic_auth`, `httpAuth`; not `oauth`, `default_auth`
    if lead == " -" and \
            _HTTPIE.search(text, max(text.rfind("\n", 0, m.start()) + 1, m.start() - 220), m.start() + 1) is None:
        return False                    # `-a`/`--auth` of HTTPie's commands only
    # (the user's characters hold no template: `${USER}` does not match)
    return not password.startswith("//") and value_ok(password, quoted=True)


# A kubeadm bootstrap token (`[a-z0-9]{6}.[a-z0-9]{16}`) after `token` (`token: `, `--token `, `"token": "`).
_BOOTSTRAP = LiteralGated([(word, word + r"[\"']?(?:[ \t]*[:=][ \t]*|[ \t]+)[\"']?"
                                   r"(?P<bare>[a-z0-9]{6}\.(?=[a-z]*\d)(?=\d*[a-z])[a-z0-9]{16})(?![\w.-])")
                           for word in ("token", "Token", "TOKEN")])

# A presigned URL's signature (and an AWS session token in it).
_SIGNED_URL = LiteralGated([
    ("X-Amz-Signature=", r"[?&]X-Amz-Signature=(?P<bare>[0-9a-fA-F]{64})(?![0-9A-Za-z])"),
    ("X-Goog-Signature=", r"[?&]X-Goog-Signature=(?P<bare>[0-9a-fA-F]{64,1024})(?![0-9A-Za-z])"),
    ("X-Amz-Security-Token=", r"[?&]X-Amz-Security-Token=(?P<bare>[A-Za-z0-9%+/=_-]{40,4096})(?=[&#\"'\s<>)]|$)"),
    ("Signature=", r"[?&]Signature=(?P<bare>[A-Za-z0-9%+/=_~-]{20,1024})(?=[&#\"'\s<>)]|$)"),
    # an AWS SigV4 `Authorization` header's `, Signature=<64 hex>` (its `Credential=` key id is the key shapes')
    ("Signature=", r"Signature=(?<=[ ,]Signature=)(?P<bare>[0-9a-fA-F]{64})(?![0-9A-Za-z])"),
])
_SIGV4 = re.compile(r"AWS4-HMAC-SHA256[ \t]")
_SIGNER_IN_URL = re.compile(r"[?&](?:AWSAccessKeyId|GoogleAccessId|Key-Pair-Id)=")


def _signed_url(m: re.Match[str]) -> bool:
    if m.group().startswith("Signature="):      # a header's: after its scheme (`Credential=` and `SignedHeaders=`)
        return _SIGV4.search(m.string, max(0, m.start() - 600), m.start()) is not None
    if not m.group().startswith(("?Signature=", "&Signature=")):
        return True
    text, floor, ceiling = m.string, max(0, m.start() - 2000), min(len(m.string), m.end() + 2000)
    url_start = max([floor - 1, *(text.rfind(c, floor, m.start()) for c in " \t\n\"'<>(")])
    url_end = min([ceiling, *(k for k in (text.find(c, m.end(), ceiling) for c in " \t\n\"'<>)") if k >= 0)])
    return _SIGNER_IN_URL.search(text, url_start + 1, url_end) is not None


def _bare_span(m: re.Match[str]) -> tuple[int, int]:
    """The span of the `bare` group (the password, the signature), relative to the match."""
    return m.start("bare") - m.start(), m.end("bare") - m.start()


def _always(text: str) -> bool:     # each pass checks its own gates
    return True


_NL = r"(?:\r?\n|\\n)"      # a newline, or a `\n` escape inside a JSON string (a service-account file)
_PEM = re.compile(
    # A block whose lines carry a prefix (a diff's `-`/`+`, a mail's `> `, a comment's `# `/`// `, indentation)
    # has it on every line: the body is read through it (else only the BEGIN line went, the key stayed).
    r"(?P<pre>(?<![^\n])[-+>#/;!* \t]{1,6}|)(?P<key>-----BEGIN (?:[A-Z0-9]+ )*PRIVATE KEY(?: BLOCK)?-----)"
    # `Proc-Type:`/`DEK-Info:` headers, then a blank line
    rf"(?:{_NL}(?P=pre)[ \t]*[A-Za-z-]+: [^\n\\]*)*(?:{_NL}(?P=pre)[ \t]*(?={_NL}))?"
    # Whole lines of base64; without an END line (a pasted fragment) the block ends at the first other line.
    rf"(?:{_NL}(?P=pre)[ \t]*[A-Za-z0-9+/=]+[ \t]*(?={_NL}|$))*"
    rf"(?:{_NL}(?P=pre)[ \t]*-----END (?:[A-Z0-9]+ )*PRIVATE KEY(?: BLOCK)?-----)?")


def _pem_span(m: re.Match[str]) -> tuple[int, int]:
    """From the BEGIN line on: the first line's prefix stays (a diff's line keeps its `-`)."""
    return m.start("key") - m.start(), m.end() - m.start()


# A private key's PEM block (a diff's, a mail's, a YAML value's), run before every other secret pass: a token shape
# inside its base64 would cut it
PEM_PASS = (_PEM, None, _pem_span, lambda text: "PRIVATE KEY" in text)

SHAPE_PASSES: tuple[tuple[object, Callable[[re.Match[str]], bool], int | Callable[[re.Match[str]], tuple[int, int]],
                          Callable[[str], bool]], ...] = (
    (LiteralGated(_HASH_SHAPES), _hash, 0, _always),
    (PgpassLines(), _pgpass, _bare_span, _always),
    (_USER_PASS, _user_pass, _bare_span, _always),
    (_BOOTSTRAP, lambda m: True, _bare_span, _always),
    (_SIGNED_URL, _signed_url, _bare_span, _always),
)


def plain_base64(value: str) -> bool:
    """Base64 of prose (`"auth": "SGVsbG8gd29ybGQ..."` decoding to `Hello world, ...`): no login, whose
    `user:password` has a colon and no run of words."""
    try:
        decoded = base64.b64decode(value, validate=True).decode("ascii")
    except (binascii.Error, ValueError):
        return False
    return decoded.isprintable() and ":" not in decoded and prose_like(decoded)
