"""Passwords the keyed passes leave for their shape: letters only or digits only (`letmein`, `123456`).

`pii_values.value_ok` wants letters plus a digit or punctuation, so that words (`password: required`) and code
(`f(password=pw)`) stay; people still write `PASSWORD=letmein`, `"password": "iloveyou"`, `pw: sunshine`. Here,
after a *password* word only (`PASSWORD_WORDS`: the last part of the name, `DB_PASSWORD`, `adminPassword`;
not `PASSWORD_HASHER`), a plain value of 6-64 ASCII letters or digits (`plain_password`) counts in these syntaxes:
- quoted (`"password": "iloveyou"`, `password = 'letmein'`): the inside of the quotes;
- opening its line (`PASSWORD=letmein`, `export DB_PASSWORD=...`, `password: sunshine`, an INI/YAML line): the rest
  of the line is the value, nothing else on it; unquoted after a quoted name is code's variable (JSON has none);
- mid-line after a pair or a login's separator (`host: db1 user: root pw: X`, `ssh root@host pw: X`, `Wi-Fi:
  HomeNet / pass: X`): one word, ending the line or followed by a separator or another pair; here any
  credential-shaped value counts too (`value_ok`), since the keyed pass reads a bare `pw` mid-line as code's;
- prose `the password is letmein` (ending the sentence); login shorthand with a user before it (`user jsmith /
  pass X`, `login root pwd X`), and after a login cue `login: admin / X`, `creds: admin:X` (only the password;
  a user name is no secret).
After any credential name (`SECRET_KEY=...`, `api_token: ...`), a letters-only value of 16-64 that looks
generated (`generated`: both cases strewn, no words) counts: `looks_random` wants two digits.
A Markdown table's password column is `pii_passwordtable`'s.
What stays: words that describe a password (`required`, `hidden`, `optional`: `_DESCRIPTIONS`, and lower-case
words with an English ending, `encrypted`, `nullable`), a Capitalised word (an i18n label: `"password":
"Passwort"`, `Forgotten`), a camelCase or CamelCase name (`SecretStr`, `newPassword`), a value holding a
password word (`mypassword`, `passwd`), one used as code elsewhere in the text (`letmein(`), and placeholders.
"""

from __future__ import annotations

import re
from typing import Callable, Iterator

from tasks.data.privacy.pii_foreign import FOREIGN_PASSWORD, value_span
from tasks.data.privacy.pii_keyed import is_credential_name, names_no_credential
from tasks.data.privacy.pii_personal import gate_hits
from tasks.data.privacy.pii_values import (is_placeholder, quoted_value, replace_spans, shannon_entropy, trim_end,
                                           value_ok)

PASSWORD_WORDS = frozenset({"password", "passwd", "passphrase", "passcode", "pass", "pwd", "pw", "passwort",
                            "kennwort", "kenncode", "wachtwoord", "senha"})
_GLUED = ("password", "passwd", "passphrase", "passcode", "passwort", "kennwort", "kenncode", "wachtwoord")
_GATES = ("pass", "pw", "kennwort", "kenncode", "wachtwoord", "senha")
# Words written where a password's value would go that say what it is, not what it is (schemas, docs, forms)
_DESCRIPTIONS = frozenset("""required optional hidden masked secrets string strings integer number numeric boolean
bytes varchar nullable field input value values undefined default random prompt automatic manual disabled enabled
enable disable plaintext cleartext encrypt bcrypt scrypt argon pbkdf digest sensitive confidential private public
unknown notset invalid incorrect correct wrong expired forgot mismatch mandatory needed missing strong medium weak
length minimum maximum characters chars letters digits secure insecure unsafe please example sample dummy testing
foobar unused inherit environment vault keyring keychain stdin blank nothing anything something shared static
dynamic current previous confirm repeat retype verify temporary unique simple complex obvious trivial never always
visible invisible readonly writeonly format pattern policy expiry expires rotate stored saved shown logged valid
success okay filtered scrubbed truncated censored blocked deleted different same supported allowed forbidden
output object array textarea widget column property attribute parameter argument variable constant option setting
settings config unset absent exists username userid account login logout signin signup anonymous credential
credentials unchanged empty generate forgotten through passthrough""".split())
# English endings of words that describe (`encrypted`, `existing`, `nullable`, `sensitive`, `optional`)
_ENGLISH_ENDING = re.compile(r"[a-z]{2,}(?:ed|ing|able|ible|ive|al|tion|sion|ment|ous|ful|less|ness|ity|ly|ence"
                             r"|ance|ent|ant|ise|ize)")
_HUMPS = re.compile(r"[A-Z]{2,}(?=[A-Z][a-z]|$)|[A-Z]?[a-z]+|[A-Z]+")
_VARIABLE_PARTS = frozenset({"pw", "pwd", "pass", "password", "passwd", "hash", "hashed", "secret", "token", "key",
                             "salt", "cred", "input", "field", "value", "str", "string", "new", "old", "user",
                             "confirm", "get", "set", "is", "my", "db"})


def word_humps(value: str) -> bool:
    """Named the way code names things, of words (`SecretStr`, `newPassword`, `TestMultiDiGraph`): two humps or
    more, seven tenths of the letters in words of 3 letters or more (acronyms left out: a generator's capitals run
    together as often). A generated value's humps are mostly one or two letters."""
    humps = _HUMPS.findall(value)
    in_words = sum(len(h) for h in humps if len(h) >= 3 and not h.isupper())
    return len(humps) >= 2 and in_words >= 0.7 * len(value)


def plain_password(value: str, quoted: bool) -> bool:
    """A letters-only or digits-only value that reads as a password, not as a word about one, a label or a name."""
    if not 6 <= len(value) <= 64 or not (value.isascii() and (value.isalpha() or value.isdigit())):
        return False
    if is_placeholder(value, quoted=quoted):
        return False
    if value.isdigit():
        return True
    low = value.lower()
    if low in _DESCRIPTIONS or "pass" in low or "pwd" in low:
        return False
    if re.fullmatch("[A-Z][a-z]+", value):       # a label (`Passwort`, `Forgotten`) or a sentence's word
        return False
    if value.islower():
        return _ENGLISH_ENDING.fullmatch(value) is None
    humps = [h.lower() for h in _HUMPS.findall(value)]
    return not word_humps(value) and not _VARIABLE_PARTS.intersection(humps)


def generated(value: str) -> bool:
    """Letters a generator drew (`KxTqWmZrLpVbNcQw`): 16 or more, both cases a quarter each at least, the case
    switching at a third of the letters or more, not words run together (`PasswordResetToken`)."""
    n = len(value)
    if n < 16 or not value.isascii() or not value.isalpha():
        return False
    upper = sum(c.isupper() for c in value)
    switches = sum(a.isupper() != b.isupper() for a, b in zip(value, value[1:]))
    return min(upper, n - upper) >= n / 4 and switches >= (n - 1) / 3 and not word_humps(value) and \
        shannon_entropy(value) >= 3.3


def password_name(name: str) -> bool:
    """The name's last part is a password word (`DB_PASSWORD`, `adminPassword`, `dbpassword`; not `PASSWORD_HASHER`,
    `bypass`)."""
    parts = re.findall(r"[A-Z]?[a-z0-9]+|[A-Z0-9]+(?![a-z])", name)
    last = parts[-1].lower() if parts else ""
    return last in PASSWORD_WORDS or last.endswith(_GLUED)


_CODE_NAMES = re.compile(r"(?<![\w.])([A-Za-z]{6,64})[ \t]*(?:[(.\[]|=(?!=))"
                         r"|\b(?:def|class|let|const|var|import|function|return)[ \t]+([A-Za-z]{6,64})\b")
# The last text's names used as code, as one (text, names) pair swapped whole: found once a text, not once a value
# (searched per value, a text of 20,000 `password: sunshine` lines took quadratic time)
_LAST: list[tuple[str | None, frozenset[str]]] = [(None, frozenset())]


def used_as_code(text: str, value: str) -> bool:
    """The word is code's name elsewhere in the text: called, assigned, declared or an object's (`letmein(`)."""
    cached = _LAST[0]
    if cached[0] is not text:
        cached = (text, frozenset(a or b for a, b in _CODE_NAMES.findall(text)))
        _LAST[0] = cached
    return value in cached[1]


_NAME_RUN = re.compile(r"[A-Za-z0-9_.-]{0,64}")
_SEP = re.compile(r"""(?P<close>["']?)\]?(?:\*\*|__)?[ \t]*(?P<sep>=>|:=|=(?!=)|:(?![:=/]))(?:\*\*|__)?[ \t]*""")
# (one word may name whose password a label's is: `Meeting passcode: 482913`, `Zoom Password: ...`)
_LINE_START = re.compile(r"[ \t]*(?:export[ \t]+|set[ \t]+|-[ \t]+)?(?:\*\*|__)?[\"']?")
_LABEL_START = re.compile(r"[ \t]*[A-Z][a-z]{1,15}[ \t]")
_PAIR = re.compile(r"[\w.-]+[:=][^\s(){}\[\]]+")
_HOST_LIKE = re.compile(r"[^\s(){}\[\]]*[\d@:/.][^\s(){}\[\]]*")
_LOGIN_WORDS = ("user", "username", "login", "usr")
_LOG_PAIR_BEFORE = re.compile(r"(?:^|[ \t])[\w.-]+=[^\s=]+[ \t]+$")     # `user=bob password=...`: a log line's
# After a mid-line value: its line's end, a separator or another pair (a trailing `,`/`;` is trimmed before)
_FOLLOW = re.compile(r"[,;]?[ \t]*(?:\r?\n|\Z|[/|,;][ \t]|[\w.-]+[ \t]*[:=][ \t]*\S)")
_PROSE = re.compile(r"[ \t]+(?:is|was)[ \t]+(?:\"(?P<dq>[A-Za-z0-9]{6,64})\"|'(?P<sq>[A-Za-z0-9]{6,64})'"
                    r"|(?P<bare>[A-Za-z]{6,64}|\d{6,64}))[.!,;)]?(?=[ \t]*(?:\r?\n|\Z|\\[nr])|(?<=[.!,;)])[ \t])")
_SHORTHAND_WORDS = frozenset({"pass", "pwd", "pw", "password", "passwd"})


class PlainPasswords:
    """`sub(repl, text)`: each value after a password word that the module's rules take, replaced by `repl`."""

    def sub(self, repl: Callable[[re.Match[str]], str], text: str) -> str:
        spans = sorted(set(self._spans(text)))
        return replace_spans(text, spans, repl) if spans else text

    def _spans(self, text: str) -> Iterator[tuple[int, int]]:
        done = -1
        for hit in gate_hits(text, _GATES, ()):
            start = hit
            while start > 0 and hit - start < 64 and (text[start - 1].isascii() and text[start - 1].isalnum()
                                                      or text[start - 1] in "_.-"):
                start -= 1
            while text[start] in ".-":
                start += 1
            # a JSON or iCalendar string's `\n` escape before the name (`Join Zoom\nPasscode: 482913`) ends a line
            escaped = start > 0 and text[start - 1] == "\\" and text[start] in "nrt"
            start += escaped
            end = _NAME_RUN.match(text, hit).end()
            if end <= done or not password_name(text[start:end]):
                continue
            done = end
            found = _after_name(text, start, end, escaped)
            if found is not None:
                yield found


def _after_name(text: str, start: int, end: int, escaped: bool = False) -> tuple[int, int] | None:
    """The span of the password after the name text[start:end] (`escaped`: right after a `\\n` escape, where
    its line starts and the next escape ends it), or None."""
    line_start = start if escaped else text.rfind("\n", max(0, start - 400), start) + 1
    if line_start == 0 and start > 400:
        line_start = -1             # a line longer than that before the name: not its start (bounded per name)
    sep = _SEP.match(text, end)
    if sep is None:
        return _prose_or_shorthand(text, start, end, line_start)
    at = sep.end()
    if at >= len(text) or text[at] in "\r\n":
        return None
    if text[at] in "\"'":
        inside = quoted_value(text, at)
        return inside if inside and plain_password(text[inside[0]:inside[1]], quoted=True) else None
    quoted_name = sep.group("close") != ""
    if line_start >= 0 and (_LINE_START.fullmatch(text, line_start, start) or
                            ":" in sep.group("sep") and _LABEL_START.fullmatch(text, line_start, start)):
        line_end = text.find("\n", at)
        line_end = len(text) if line_end < 0 else line_end
        if escaped:
            line_end = _escape_at(text, at, line_end)
        comment = text.find(" #", at, line_end)
        stop = line_end if comment < 0 else comment
        while stop > at and text[stop - 1] in " \t\r":
            stop -= 1
        value = text[at:stop]
        if value.isdigit() or not quoted_name and not (":" in sep.group("sep") and _in_object(text, line_start,
                                                                                              line_end)):
            return (at, stop) if plain_password(value, quoted=False) and not _code_name(text, value) else None
        return None
    before = text[max(line_start, start - 120):start]
    if re.search(r"[({\[]", before) or not _mid_line_before(before.split(), before):
        return None
    stop = trim_end(text, at, _token_end(text, at))
    value = text[at:stop]
    if not _FOLLOW.match(text, stop):
        return None
    if value_ok(value) and not value.startswith("-"):    # (not `literal`: `user, pw = self.get(x)` is code)
        return at, stop
    log_line = sep.group("sep") == "=" and _LOG_PAIR_BEFORE.search(before)
    plain = plain_password(value, quoted=False) and not _code_name(text, value)
    return (at, stop) if plain and (":" in sep.group("sep") or log_line) else None


_LINE_ESCAPE = re.compile(r"\\[nr]")


def _escape_at(text: str, at: int, line_end: int) -> int:
    """Where a `\\n` or `\\r` escape ends the line in a string that escapes its line breaks, or `line_end`."""
    escape = _LINE_ESCAPE.search(text, at, line_end)
    return line_end if escape is None else escape.start()


def _prose_or_shorthand(text: str, start: int, end: int, line_start: int) -> tuple[int, int] | None:
    """`the password is letmein` (ending its sentence or line) or `user jsmith / pass X`, `login root pwd X`."""
    word = text[start:end].lower()
    prose = _PROSE.match(text, end)
    if prose is not None and word in ("password", "passphrase", "passcode", "passwd", "pwd", "pw"):
        group = next(g for g in ("dq", "sq", "bare") if prose.group(g) is not None)
        value = prose.group(group)
        ok = plain_password(value, quoted=group != "bare") and (group != "bare" or not _code_name(text, value))
        return prose.span(group) if ok else None
    if word not in _SHORTHAND_WORDS or text[end:end + 1] not in (" ", "\t"):
        return None
    if not _login_before(text[max(line_start, start - 100):start].split()):
        return None
    at = end
    while at < len(text) and text[at] in " \t":
        at += 1
    stop = trim_end(text, at, _token_end(text, at))
    value = text[at:stop]
    if stop == at or value.startswith("-") or not _FOLLOW.match(text, stop):
        return None
    return (at, stop) if value_ok(value, literal=True) or plain_password(value, quoted=False) else None


def _mid_line_before(tokens: list[str], before: str) -> bool:
    """What a mid-line name follows (read as words: a regex searched back from each name cost a line of names
    too much): a login's or a list's separator, another pair (`user: root `), a host's or an address's token
    (`root@73.162.45.201 `), or a user after a login word (`user jsmith `); never a word of prose."""
    if not tokens or not before[-1:].isspace():
        return False
    last = tokens[-1]
    if last in ("/", "|") or last[-1] in ",;|" or _PAIR.fullmatch(last) or _HOST_LIKE.fullmatch(last):
        return True
    return len(tokens) >= 2 and re.fullmatch(r"[\w.-]+[:=]", tokens[-2]) is not None or _login_before(tokens)


_LOGIN_TAIL = re.compile(r"(?i:user(?:name)?|login|usr)(?:[ ]?[:=][ ]?|[ ])[^\s/,;|:=]{1,64}(?:[ ]?[/,;|])?")


def _login_before(tokens: list[str]) -> bool:
    """The words before end in a login word and a user (`user jsmith`, `login: root /`, `user=jsmith,`)."""
    return any(_LOGIN_TAIL.fullmatch(" ".join(tokens[-k:])) for k in (1, 2, 3, 4) if len(tokens) >= k)


def _token_end(text: str, at: int) -> int:
    end = at
    while end < len(text) and end - at < 200 and not text[end].isspace():
        end += 1
    return end


def _code_name(text: str, value: str) -> bool:
    return value.isalpha() and used_as_code(text, value)


def _in_object(text: str, line_start: int, line_end: int) -> bool:
    """The line is a property of a code object spanning lines (the line before ends with `{` or `,`, or the next
    starts with `}`): an unquoted word there is a variable, where a YAML line's is a value."""
    before = text[max(0, line_start - 200):max(0, line_start - 1)].rstrip()
    after = text[line_end + 1:line_end + 200].lstrip()
    return before.endswith(("{", ",")) or after.startswith("}")


# `login: admin / X`, `creds: admin:X`: a user, then the password after ` / ` or a glued `:` (only it replaced)
_LOGIN_CUE = re.compile(r"(?<![\w-])(?i:login|creds|credentials?)[ \t]*[:=][ \t]*[\w.@+-]{1,64}"
                        r"(?:[ \t]*/[ \t]*|:)(?P<pw>\S{1,200})")


class LoginCues:
    """`sub(repl, text)`: the password after a login cue's user (see `_LOGIN_CUE`), ending its line or a pair."""

    def sub(self, repl: Callable[[re.Match[str]], str], text: str) -> str:
        spans = []
        for hit in gate_hits(text, ("login", "cred"), ()):
            m = _LOGIN_CUE.match(text, hit)
            if m is None:
                continue
            at = m.start("pw")
            stop = trim_end(text, at, m.end("pw"))
            value = text[at:stop]
            if _FOLLOW.match(text, stop) and not value.startswith(("-", "/")) and \
                    (value_ok(value, literal=True) or plain_password(value, quoted=False)):
                spans.append((at, stop))
        return replace_spans(text, sorted(set(spans)), repl) if spans else text


# A letters-only value after `:` or `=` (`=` first: a fast scan), the credential name checked before it
_LETTERS_AFTER = re.compile(r"[:=](?<![=!<>:][:=])(?![=:])[ \t]*(?P<q>[\"']?)(?P<v>[A-Za-z]{16,64})(?P=q)"
                            r"(?=[\s\"'`,;)\]}>&#]|$)")
_NAME_BEFORE = re.compile(r"([A-Za-z0-9_.-]+)[\"']?\]?[ \t]*$")


def _generated_after_name(m: re.Match[str]) -> bool:
    if not generated(m.group("v")):
        return False
    name = _NAME_BEFORE.search(m.string, max(0, m.start() - 64), m.start())
    return name is not None and is_credential_name(name.group(1)) and not names_no_credential(name.group(1))


def _foreign_plain(m: re.Match[str]) -> bool:
    """A foreign cue's plain value: after `:`, `=` or `：` only (`contraseña incorrecta` is prose), ending its line
    unless quoted; letters only quoted or after `=` (`passwort=letmein`): the English endings and descriptions do not
    tell `parola: incorrecta` (a form's message, and `parola` is Italian for "word") from a password."""
    start, end = value_span(m)
    value, between = m.group()[start:end], m.group()[:start]
    quoted = m.group("bare") is None
    ends_line = re.match(r"[ \t]*(?:\r?\n|\Z)", m.string[m.end():]) is not None
    separator = re.search("[:=：]", between)
    return separator is not None and (quoted or ends_line) and plain_password(value, quoted) and \
        (value.isdigit() or quoted or separator.group() == "=")


# (pattern, validator, group, hint): `tasks.data.privacy.pii_secrets.SECRET_PASSES`' shape; run after those (and
# `pii_passwordtable`'s), so a value they took is a placeholder here; each looks for its own gates (`gate_hits`,
# `Gated`), so the hint is `bool`
PLAINWORD_PASSES = (
    (LoginCues(), None, 0, bool),
    (PlainPasswords(), None, 0, bool),
    *((gated, _foreign_plain, value_span, bool) for gated in FOREIGN_PASSWORD),
    (_LETTERS_AFTER, _generated_after_name, lambda m: (m.start("v") - m.start(), m.end("v") - m.start()),
     lambda text: ":" in text or "=" in text),
)
