"""A credential after its name — `password=...`, `"secret": "..."`, `DB_PASSWORD=...`, `**Password:** ...`,
`api_key: ...`, `?token=...`, `--password=...` — replaced whole, its extent read from the syntax around it
(`tasks.data.privacy.pii_values`).

`KeyedValues` is one of `tasks.data.privacy.pii_secrets`' passes, with `re.sub`'s shape (`sub(repl, text)`): it finds
each credential word followed by `=`, `:`, `:=` or `=>` (a fast literal search per word), checks the whole name
(`CREDENTIAL_NAME`: the word must end a part of it, `api_key`, `apiKey`, not `monkey`), reads the value as its
syntax says — a quoted string, an env/INI/YAML line, a URL query parameter, a command-line flag, or a token of
a log line, prose or code — and hands `repl` a match of exactly that value. The value need not end where a
regex would have stopped: a password holding `&`, `(` or `"` is replaced whole.

HTTP headers (`is_credential_name`: a credential name such as `X-Api-Key` or `Private-Token`, or an `X-` header
ending in Token/Key whose qualifier is none of `NOT_CREDENTIAL_QUALIFIERS`, such as csrf, websocket or
idempotency): a dashed name right before its colon is a header's, whose value is a literal, never code
(`Private-Token: ri.YPZq` is no attribute chain), running to its line's end, to the closing quote of the string
the header sits in (`curl -H "Private-Token: ..."`) or as one word elsewhere (HTTPie's `X-Api-Key:...`); a
quoted header name, a comma and a quoted string are a call's two arguments (`setRequestHeader("X-Api-Key",
"...")`), unless that string is another header's name (a list of names); so are a setter's (`define('DB_PASSWORD',
'...')`, `System.setProperty`, `os.Setenv`: `_SETTER`) for any credential name. A quoted name followed by code
(`{"X-Api-Key": key}`, `f"{key}"`) is code, as for any name.
"""

from __future__ import annotations

import re
import string
from typing import Callable

from tasks.data.privacy.pii_literals import literal_in
from tasks.data.privacy.pii_markup import EMPHASIS
from tasks.data.privacy.pii_values import (QUOTES, connection_value, enclosing_labels, identifier_only,
                                           in_connection_string, list_end, quoted_value, run_end,
                                           span_match, trim_end, value_ok)

# A name that holds a credential: it ends with password/secret/passphrase/passcode (or German, Dutch, Portuguese
# password words; a meeting's `Passcode`, Zoom's German `Kenncode`), or with key/token qualified by what
# kind (`api_key`, `accessToken`, `X-Api-Key`, a property's `fs.s3a.secret.key`; not `sort_key`, `next_token`), or
# is an all-caps `..._TOKEN`, `..._PAT` (a personal access token: R's `GITHUB_PAT`) or `..._SALT` (WordPress's
# `AUTH_SALT`, Flask-Security's `SECURITY_PASSWORD_SALT`; with them WordPress's `LOGGED_IN_KEY` and `NONCE_KEY`), or a Kubernetes registry Secret's `.dockerconfigjson` /
# `.dockercfg` (base64 of the registries' `user:password` logins).
CREDENTIAL_NAME = re.compile(
    r"(?:[A-Za-z0-9]+[_.-]|[A-Za-z][a-z0-9]*(?=[A-Z]))*?"
    r"(?:(?i:[a-z0-9]*pass(?:word|wd|phrase|wort|code)|pass|pwd|pw|secret|kennwort|kenncode|wachtwoord|senha)"
    r"|(?i:api|access|secret|private|auth|client|master|signing|encryption|license|account|app|consumer|"
    r"session|refresh|bearer|bot|service|admin|deploy|personal|webhook|hmac|jwt|oauth|storage|subscription|"
    r"security|application|github|gitlab|hf|npm|slack|discord|telegram|vault|consul|nomad|circle|figma)"
    r"[_.-]?(?i:key|token)"
    r"|(?i:apikey|api-key|dockerconfigjson|dockercfg)|[A-Z][A-Z0-9]*_(?:TOKEN|SALT|PAT)|(?:LOGGED_IN|NONCE)_KEY)"
)
# HTTP headers that carry a credential by convention: an `X-` header whose last word is Token or Key
# (`X-Vault-Token`, `X-Plex-Token`, `x-amz-server-side-encryption-customer-key`) unless the word before says it
# is no credential: an anti-forgery token bound to a session, a WebSocket nonce, an idempotency or cache key, a
# page or sync cursor, a public key, a captcha's one-time answer.
NOT_CREDENTIAL_QUALIFIERS = frozenset({
    "csrf", "xsrf", "websocket", "idempotency", "idempotence", "request", "cache", "page", "pagination", "next",
    "continuation", "sync", "routing", "sort", "partition", "public", "correlation", "dedup", "deduplication",
    "captcha", "recaptcha", "hcaptcha", "turnstile", "cancel", "event", "trace", "lock", "sequence", "socket"})


_NAME_PARTS = re.compile(r"[A-Z]?[a-z0-9]+|[A-Z0-9]+(?![a-z])")


def is_credential_name(name: str) -> bool:
    """A name that holds a credential: `CREDENTIAL_NAME`, or an `X-` header named by convention (see
    `NOT_CREDENTIAL_QUALIFIERS` for the `X-...-Token`/`-Key` headers that are not)."""
    if CREDENTIAL_NAME.fullmatch(name):
        return True
    parts = name.lower().split("-")
    return len(parts) >= 2 and parts[0] == "x" and parts[-1] in ("token", "key") and \
        all(p.isalnum() for p in parts) and not names_no_credential(name)


def names_no_credential(name: str) -> bool:
    """A `...token`/`...key` name that says it holds no credential (`X-CSRF-Token`, `csrftoken`,
    `Sec-WebSocket-Key`, `X-Idempotency-Key`): its word before token/key is a `NOT_CREDENTIAL_QUALIFIERS`'."""
    parts = [p.lower() for p in _NAME_PARTS.findall(name)]
    if parts and parts[-1] not in ("token", "key"):
        for suffix in ("token", "key"):         # one word, `csrftoken`, `xsrfkey`
            if parts[-1].endswith(suffix) and len(parts[-1]) > len(suffix):
                parts[-1:] = [parts[-1][:-len(suffix)], suffix]
                break
    return len(parts) >= 2 and parts[-1] in ("token", "key") and parts[-2] in NOT_CREDENTIAL_QUALIFIERS
_NAME_CHARS = frozenset(string.ascii_letters + string.digits + "_.-")
WORDS = tuple(word for base in ("password", "passwd", "passphrase", "passcode", "pass", "pwd", "pw", "secret", "key",
                                "token", "passwort", "kennwort", "kenncode", "wachtwoord", "senha", "dockerconfigjson",
                                "dockercfg")
              for word in (base, base.capitalize(), base.upper())) + ("SALT", "PAT")
# The last word of a credential name, an optional closing quote or bracket (`"password":`, `['password']=`) and
# markdown bold (`**Password:**`), then `=>`, `:=`, `:` or `=` (not `==`), or the comma between a call's two
# string arguments (`setRequestHeader("X-Api-Key", "...")`, a header's only), then spaces: the value starts there.
# A form's label may qualify its name in parentheses before a colon (`Password (temporary): ...`; a space before
# the parenthesis and words in it, so a call `password(user):` stays code).
_QUALIFIER = r"(?:[ \t]+\([A-Za-z][\w .,/-]{0,23}\)(?=[ \t]*:(?!=)))?"
_ANCHORS = [(word, re.compile(re.escape(word) + _QUALIFIER +
                              r"[\"']?\]?" + EMPHASIS + r"?[ \t]*(?P<sep>=>|:=|[:=]|(?<=[\"']),)"
                              r"(?:(?<=:)" + EMPHASIS + r")?[ \t]*")) for word in WORDS]   # (markdown after `:` only)
_YAML_TAG = re.compile(r"!!?[\w/.-]*[ \t]+(?=\S)")        # `password: !!str s3cr3t`: the value follows the tag
# CloudFormation's intrinsic functions and config loaders' env tags name a value held elsewhere (`!Ref DbPass`,
# `!ImportValue SharedDbPassword2`, `!ENV DB_PASS`): what follows is a name, not the secret
_REFERENCE_TAGS = frozenset({"!ref", "!importvalue", "!getatt", "!findinmap", "!select", "!split", "!join", "!sub",
                             "!if", "!getazs", "!cidr", "!env", "!env_var"})
_LINE_START = re.compile(r"[ \t]*(?:export[ \t]+|set[ \t]+|-[ \t]+)?")
_LIST_AFTER = re.compile(r"\s[\w.-]+=")                  # `password=a1b2c3 user=bob`: a log line's pairs
_COMMENT = re.compile(r"[ \t]#")
SHELL_STOPS = "\"'`;&|<>()"
# A command after a shell word (`PGPASSWORD=x1 psql ...`, `MYSQL_PWD=x1 mysqldump ...`): the clients that read
# their password from the environment, and commands that are run so in documentation.
_COMMAND_AFTER = re.compile(r"[ \t]+(?:sudo[ \t]+)?(?:psql|pg_dump|pg_dumpall|pg_restore|createdb|dropdb|mysql|"
                            r"mysqldump|mysqladmin|aws|curl|wget|python3?|node|npm|npx|yarn|docker|git|gh|"
                            r"terraform|bash|sh|make|java|go|cargo|heroku|vault|kubectl|helm|az|gcloud|"
                            r"ansible-playbook|redis-cli|mongosh|\./[\w.-]+)(?=[ \t]|$)")
_FLAG_OF_PAIRS = re.compile(r"(?:^|[ \t\"'])--(?:from-literal|literal|build-arg|set|set-string|env|var|"
                            r"extra-vars|config|conf|property|define|param|parameter)=$")
_HEADER_NAME = re.compile(r"[A-Za-z]+(?:-[A-Za-z]+)+[\"']")     # `"X-Auth-Token"`: a list of names goes on


class KeyedValues:
    """`sub(repl, text)`: each credential value after its name replaced by `repl(match of the value)`."""

    def sub(self, repl: Callable[[re.Match[str]], str], text: str) -> str:
        for word, anchor in _ANCHORS:
            if literal_in(word, text):
                text = self._sub_word(anchor, repl, text)
        return text

    @staticmethod
    def _sub_word(anchor: re.Pattern[str], repl: Callable[[re.Match[str]], str], text: str) -> str:
        out, last, read = [], 0, 0
        for m in anchor.finditer(text):
            if m.start() < read:          # inside a value already read (`password=password=...`: one, not many)
                continue
            found = read_value(m)
            if found is None:
                continue
            start, read, credential = found
            if credential:
                out += (text[last:start], repl(span_match(text, start, read)))
                last = read
        return "".join(out) + text[last:] if out else text


def name_start(m: re.Match[str]) -> int | None:
    """Where the credential name ending in the anchor's word starts, or None when it is no credential name. A
    bare `token` names one only as a URL query parameter or a flag (`?token=`, `--token=`): in code it is
    the parser's (`token = next_token()`)."""
    text, start = m.string, m.start()
    while start > 0 and m.start() - start < 64 and text[start - 1] in _NAME_CHARS:
        start -= 1
    # `--password=...`: a flag's dashes are no part of the name, nor is the underscore that leads .npmrc's
    # `//registry.npmjs.org/:_authToken=...` (elsewhere a leading `_` is code's: `_LAST_WRITE_TOKEN = b"..."`)
    while text[start] in "-.":
        start += 1
    if text[start] == "_" and text[start - 1:start] == ":":
        start += 1
    word_end = _word_end(m)
    # after `=` the "name" is another pair's value (`?api_key=aPW:00000A&`): that pair's pass reads it whole,
    # and reading `aPW` as a name here would replace only what follows its colon
    # (but a flag's value may be a pair of its own: kubectl's `--from-literal=password=...`, `--build-arg=`)
    if text[start - 1:start] == "=" and text[start - 2:start] != "==" and \
            _FLAG_OF_PAIRS.search(text, max(0, start - 40), start) is None:
        return None
    if text[start - 3:start] == "://":              # a URL's user (`https://x-access-token:...@`): the URL pass's
        return None
    if CREDENTIAL_NAME.fullmatch(text, start, word_end):
        # a bare `pw` names a password only quoted (`"pw": ...`) or opening its line (`PW=...`): elsewhere it is
        # code's short name (`var Pw=e=>{...}`) or a namespace (`DEBUG=pw:api`)
        bare_pw = word_end - start == 2 and text[start - 1:start] not in QUOTES and \
            not _LINE_START.fullmatch(text, text.rfind("\n", 0, start) + 1, start)
        return None if bare_pw else start
    bare_token = text[start:word_end].lower() in ("token", "auth-token", "auth_token")
    if bare_token and (text[start - 1:start] in ("?", "&") or text[start - 2:start] == "--"):
        return start
    return start if bare_token and text[start - 1:start] in QUOTES and _bearer_block(text, start) else None


# Calls whose two string arguments are a name and the value it is set to: PHP's `define('DB_PASSWORD', '...')`,
# `System.setProperty`/`props.put`/`conf.set` (Java, Spark, Hadoop), `os.environ.setdefault`, Go's `os.Setenv`,
# `setenv`, .NET's `SetEnvironmentVariable`, Android's `putString`, `localStorage.setItem`.
_SETTER = re.compile(r"(?:define|setProperty|put|set|setenv|Setenv|setdefault|SetEnvironmentVariable|putString|"
                     r"setItem)(?<![\w$]define)(?<![\w$]put)(?<![\w$]set)\([ \t]*$")


def _setter_call(m: re.Match[str], start: int) -> bool:
    """The anchor's name is a setter call's quoted first argument (see `_SETTER`)."""
    opening = m.string[start - 1:start]
    return bool(opening) and opening in QUOTES and m.string[_word_end(m):_word_end(m) + 1] == opening and \
        _SETTER.search(m.string, max(0, start - 40), start - 1) is not None


_BEARER_TYPE = re.compile(r"""["']type["'][ \t]*:[ \t]*["']bearer["'][^{}\[\]]{0,200}$""")


def _bearer_block(text: str, at: int) -> bool:
    """A `"token"` key at `at` in a bearer auth block: Postman's `"bearer": {"token": ...}`, Insomnia's
    `"authentication": {"type": "bearer", "token": ...}`."""
    return enclosing_labels(text, at, levels=1) == ["bearer"] or \
        _BEARER_TYPE.search(text, max(0, at - 240), at) is not None


def _word_end(m: re.Match[str]) -> int:
    """Where the anchor's credential word ends."""
    return m.start() + len(re.match(r"[A-Za-z]+", m.group()).group())


def header_field(m: re.Match[str], start: int) -> str | None:
    """How an anchor's credential name reads as an HTTP header's (a name with a dash, `X-Api-Key`,
    `Private-Token`): "in string" when it opens a string and a colon follows it (`curl -H "Private-Token: ..."`,
    PHP's `['X-Api-Key: ...']`), "bare" when a colon follows it elsewhere (a raw request's line, HTTPie's
    `X-Api-Key:...`), "quoted" when a comma after its closing quote leads a call's next argument; None otherwise
    (a quoted key of a dict or a JSON object, `'X-Api-Key': value`, holds code or a string like any other)."""
    text, sep, word_end = m.string, m.group("sep"), _word_end(m)
    opening = text[start - 1:start] if start and text[start - 1] in QUOTES else None
    if "-" not in text[start:word_end]:
        return None
    if sep == ",":
        return "quoted" if opening and text[word_end] == opening else None
    if sep not in (":", ":=") or text[word_end:m.start("sep")].strip(" \t"):
        return None                     # (`:=` after a header's name is its colon and a value's first `=`)
    return "in string" if opening else "bare"


def _string_rest(text: str, at: int, quote: str) -> tuple[int, int] | None:
    """The rest of the string a header sits in, from `at` to its closing `quote` (spaces before it are not the
    value's); None when it does not close on the line or holds nothing."""
    k, end = at, text.find("\n", at)
    end = len(text) if end < 0 else end
    while k < end and text[k] != quote:
        k += 2 if text[k] == "\\" and quote == '"' else 1
    if k >= end:
        return None
    stop = k
    while stop > at and text[stop - 1] in " \t":
        stop -= 1
    return (at, stop) if stop > at else None


def read_value(m: re.Match[str]) -> tuple[int, int, bool] | None:
    """The value after a credential name's anchor, as the syntax around it bounds it, and whether it is a
    credential; None when the name is no credential's or nothing follows."""
    start = name_start(m)
    text, at, sep = m.string, m.end(), m.group("sep")
    if start is None or at >= len(text) or text[at] in "\n\r":
        return None
    header = header_field(m, start)
    if header and sep == ":=" and m.start("sep") == _word_end(m):     # `X-Api-Key:=x1` (not `set X-Api-Key := 'x'`)
        at, sep = m.start("sep") + 1, ":"
    if sep == "," and not ((header == "quoted" or _setter_call(m, start)) and text[at] in QUOTES) or \
            sep == "," and _HEADER_NAME.match(text, at + 1):
        return None     # `f("X-Api-Key", key)`, `d.get("api_key", None)`: code; `["X-Api-Key", "X-Auth-Token"]`
    if header == "in string" and (found := _string_rest(text, at, text[start - 1])) is not None:
        return (*found, value_ok(text[found[0]:found[1]], literal=True))
    line_start = text.rfind("\n", 0, start) + 1
    if sep == "=>" and m.start("sep") == _word_end(m) and _LINE_START.fullmatch(text, line_start, start):
        # `PW=>x1` in a .env file: the value is `>x1`, the rest of the line, quotes inside it included
        # (`PW=>'ab1'cd` is not a quoted 'ab1')
        return _line_value(text, m.start("sep") + 1, False, header is not None)
    yaml = ":" in sep and sep != ":="
    if yaml and (tag := _YAML_TAG.match(text, at)):
        if tag.group().split()[0].lower() in _REFERENCE_TAGS:
            return None
        at = tag.end()
    if text[at] in "fF" and text[at + 1:at + 2] in ("'", '"'):       # a Python f-string that interpolates
        inside = quoted_value(text, at + 1)                              # (`f"{key}"`): code, no value
        if inside is not None and re.search(r"\{[^{}]+\}", text[inside[0]:inside[1]]):
            return at, inside[1] + 1, False
    if text[at] in QUOTES:
        inside = quoted_value(text, at)
        return None if inside is None else (*inside, value_ok(text[inside[0]:inside[1]], quoted=True))
    if sep == "=" and text[at] != "=" and in_connection_string(text, start, at):
        return connection_value(text, start, at)        # `Password=x1;User ID=sa`: the value ends at its `;`
    # literal: a query's, a flag's or a header's value, no variable (a header's name is no identifier)
    before, literal = text[start - 1:start], header is not None
    # `==` is a comparison in code (`password==x`, `password == x`); a query's, a flag's or an env line's value
    # may start with `=` (`PW==x1`, `PW = =x1`)
    double = m.group("sep") == "=" and text[at] == "="
    if before and before in "?&":                                   # a URL query parameter
        end, literal = trim_end(text, at, run_end(text, at, "&#\"'`<>")), True
    elif text[start - 2:start] == "--" or before == "-" and text[start - 2:start - 1].isspace():   # a flag
        if at > m.end("sep") and text[at] == "-":
            return None                 # `--NotebookApp.token= --notebook-dir`: an empty value, then a flag
        end, literal = run_end(text, at, SHELL_STOPS), True
    elif _LINE_START.fullmatch(text, line_start, start):            # an env/INI/YAML line: the rest of it
        if double and text[at + 1:at + 2] in (" ", "\t", ""):
            return None
        return _inside_string(text, start, _word_end(m), _line_value(text, at, yaml, literal), yaml, literal)
    elif double:
        return None
    else:                                                           # logs, prose, code, connection strings
        end = trim_end(text, at, list_end(text, at, run_end(text, at)))
    at, end, _ = _inside_string(text, start, _word_end(m), (at, end, True), yaml, literal)
    value = text[at:end]
    # named like a variable (`f(password=pw2)`): a value only on its own line (.env), in a query or a flag
    return at, end, value_ok(value, yaml=yaml, literal=literal) and (literal or not identifier_only(value))


def _inside_string(text: str, start: int, word_end: int, found: tuple[int, int, bool], yaml: bool,
                   literal: bool) -> tuple[int, int, bool]:
    """`found` (a value's start, end, verdict) ended at the string that holds the whole pair, when a quote opens
    right before the name and does not close right after it: Docker's `"Env": ["POSTGRES_PASSWORD=x1", ...]`, a
    notebook's source line `"password = \\"x1\\"\\n"` — the value read to the line's end took the closing quote
    and the JSON no longer parsed."""
    quote, (at, end, _) = text[start - 1:start], found
    if not quote or quote not in QUOTES or text[word_end:word_end + 1] == quote:
        return found
    close = at
    while (close := text.find(quote, close, end)) >= 0 and text[close - 1] == "\\":
        close += 1
    close = end if close < 0 else close
    inner = text.find("\\" + text[at + 1:at + 2], at + 2, close) if text[at:at + 1] == "\\" else -1
    if inner >= 0 and text[at + 1] in QUOTES:  # `"password = \"x1\"\n"`: the value is what the escaped quotes hold
        return at + 2, inner, value_ok(text[at + 2:inner], quoted=True)
    close = trim_end(text, at, close)   # (a notebook line's `\n` before the quote: the string's, not the value's)
    while close > at and text[close - 1] in " \t":
        close -= 1
    return at, close, value_ok(text[at:close], yaml=yaml, literal=literal)


def _line_value(text: str, at: int, yaml: bool, literal: bool = False) -> tuple[int, int, bool]:
    """The value of a line opened by the credential's name: to the end of the line (before a ` #` comment), with
    its spaces — unless more `key=` pairs follow (a log line), where it ends at the first space. `literal`: a
    header's line (`Private-Token: ri.Ab3`), whose value is never code."""
    end = text.find("\n", at)
    end = len(text) if end < 0 else end
    comment = _COMMENT.search(text, at, end)
    end = comment.start() if comment else end
    while end > at and text[end - 1] in " \t\r":
        end -= 1
    if end - at > 2 and text[end - 1] == "\\" and text[end - 2] in " \t":   # a shell/Dockerfile line's `\`: the
        end -= 1                                                              # next line goes on the command
        while end > at and text[end - 1] in " \t":
            end -= 1
    if _LIST_AFTER.search(text, at, end):
        end = trim_end(text, at, run_end(text, at))
    elif not yaml and text[at - 1:at] == "=" and _COMMAND_AFTER.match(text, word := run_end(text, at, SHELL_STOPS)):
        end, literal = word, True           # `PGPASSWORD=x1 psql -h db`: the variable set for one command
    return at, end, value_ok(text[at:end], yaml=yaml, literal=literal)
