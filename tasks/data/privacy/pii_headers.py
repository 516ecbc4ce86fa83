"""Credentials in HTTP headers that `name: value` does not spell: a server's header directive and a cookie.

Two of `tasks.data.privacy.pii_secrets`' passes (a header written `Name: value`, `"Name": "value"` or
`setRequestHeader("Name", "value")` is `tasks.data.privacy.pii_keyed`'s, its name judged by `is_credential_name`):
- `HEADER_DIRECTIVES`: a web server's or proxy's directive that sets a header from a literal value, name and
  value apart (nginx `proxy_set_header X-Api-Key "...";`/`add_header`, Apache `RequestHeader set Private-Token
  ...`/`Header set`, HAProxy `http-request set-header X-Auth-Token ...`); a variable (`$http_x_api_key`,
  Apache's `%{KEY}e`) is none.
- `CookieValues`: in a `Cookie:`/`Set-Cookie:` header (curl's `-b`/`--cookie`, `document.cookie = "..."`, a HAR
  header's `{"name": "Cookie", "value": "..."}`) or a cookie jar written as a dict (`cookies={"sessionid": ...}`), the
  values of the cookies that hold a login: a session id (`sessionid`, `PHPSESSID`, `JSESSIONID`, `connect.sid`,
  `_app_session`, Google's `SID`/`__Secure-1PSID`), an auth or access token, a JWT, a remember-me or logged-in
  cookie. A cookie is a bearer credential: whoever holds the value is logged in. Every other cookie stays:
  preferences, analytics ids (`_ga`), consent, load-balancer stickiness and anti-forgery tokens (`csrftoken`,
  `XSRF-TOKEN`, bound to a session and worthless without it); so do attributes (`Path=/`, `Expires=...`).
A value is replaced whole, to the end its syntax gives it (a quote, a `;`, a space), or not at all.
"""

from __future__ import annotations

import re
from typing import Callable, Iterator

from tasks.data.privacy.pii_keyed import is_credential_name
from tasks.data.privacy.pii_values import is_placeholder, replace_spans, run_end, value_ok

# Led by the directive's literal (a fast scan), then the header's name and its value: a quoted string or a bare
# word that ends at a space or `;` (nginx's end of statement), never before another character.
_VALUE = r"""(?:"(?P<dq>(?:[^"\\\n]|\\.){1,200})"|'(?P<sq>[^'\n]{1,200})'|(?P<bare>[^\s"'`;{}]{1,200})(?=[\s;]|$))"""
_NAME = r"[ \t]+(?P<name>[A-Za-z0-9][A-Za-z0-9_-]{1,60})[ \t]+"
_APACHE_ACTION = r"[ \t]+(?:always[ \t]+|onsuccess[ \t]+)?(?:set|append|add|merge|setifempty)"
# One pattern per shared literal (three scans, not seven): nginx's `proxy_set_header`, `grpc_set_header` and
# `add_header`; Apache's `RequestHeader` and `Header`; HAProxy's `set-header` and `add-header`.
_DIRECTIVE_PATTERNS = (
    ("_header", r"_header(?:(?<=proxy_set_header)(?<![\w-]proxy_set_header)|(?<=grpc_set_header)"
                r"(?<![\w-]grpc_set_header)|(?<=add_header)(?<![\w-]add_header))" + _NAME + _VALUE),
    ("Header", r"Header(?:(?<=RequestHeader)(?<![\w-]RequestHeader)|(?<![\w-]Header))" + _APACHE_ACTION
               + _NAME + _VALUE),
    ("-header", r"-header(?<=(?:set|add)-header)(?<![\w-]...-header)" + _NAME + _VALUE),
)
_APACHE_VARIABLE = re.compile(r"%\{[\w:-]+\}[es]?")


class Directives:
    """`sub(repl, text)`: each directive's match, for `repl` to check and replace its value group."""

    patterns = [(gate, re.compile(pattern)) for gate, pattern in _DIRECTIVE_PATTERNS]

    def sub(self, repl: Callable[[re.Match[str]], str], text: str) -> str:
        for gate, pattern in self.patterns:
            if gate in text:
                text = pattern.sub(repl, text)
        return text


def directive_credential(m: re.Match[str]) -> bool:
    """A literal value (no variable) of a header that carries a credential. A quoted one is a string, never an
    environment variable's name: `"B_123456"` is the key (a fuzz run drew it), bare `YOUR_API_KEY` a placeholder."""
    start, end = directive_span(m)
    value = m.group()[start:end]
    return is_credential_name(m.group("name")) and not _APACHE_VARIABLE.search(value) and \
        value_ok(value, quoted=m.group("bare") is None, literal=True)


def directive_span(m: re.Match[str]) -> tuple[int, int]:
    """The value's span within the match (inside its quotes)."""
    group = "dq" if m.group("dq") is not None else "sq" if m.group("sq") is not None else "bare"
    return m.start(group) - m.start(), m.end(group) - m.start()


HEADER_DIRECTIVES = Directives()

# --- cookies -------------------------------------------------------------------------------------------------
# Where a cookie string starts: after a `Cookie`/`Set-Cookie` header or key (`Cookie: `, `"Cookie": "`,
# `headers['Cookie'] = '`, `document.cookie = "`, a HAR header's `{"name": "Cookie", "value": "`) or curl's
# `--cookie`, led by a literal (a fast scan); or after curl's `-b`.
_COOKIE_STARTS = (
    ("ookie", re.compile(r"ookie(?<=[Cc]ookie)(?<!\w[Cc]ookie)(?:[\"']?\]?[ \t]*[:=][ \t]*|(?<=--cookie)[ \t]+"
                         r"|[\"'][ \t]*,[ \t]*[\"']?value[\"']?[ \t]*:[ \t]*)(?P<quote>[\"']?)(?=[^\s\"'])")),
    ("OOKIE", re.compile(r"OOKIE(?<=COOKIE)(?<!\wCOOKIE)[\"']?\]?[ \t]*[:=][ \t]*(?P<quote>[\"']?)(?=[^\s\"'])")),
    ("-b", re.compile(r"-b(?<![\w-]-b)[ \t]+(?P<quote>[\"']?)(?=[^\s\"'])")),
)
# One `name=value` pair of a cookie string (between `;`s): a value ends where cookie syntax ends it, at `;`, a
# space or a double quote (none may be inside it), or at the single quote that opened the string.
_PAIR = re.compile(r"[ \t]*(?P<name>[^=;\s\"']{1,80})=(?P<value>[^;\s\"]*)")
# A cookie that holds a login; `csrf`/`xsrf` in the name rules it out first.
# A cookie jar written as a dict or an object (`cookies={"sessionid": "..."}`, `"cookies": {...}`, `cookies: {sid:
# '...'}`): its `name: value` pairs with string values, up to the brace that closes it.
_JAR_START = re.compile(r"ookies(?<=[Cc]ookies)(?<!\w[Cc]ookies)[\"']?[ \t]*[:=][ \t]*\{")
_JAR_PAIR = re.compile(r"""\s*(?P<q>["']?)(?P<name>[^"'\s:,{}=]{1,80})(?P=q)[ \t]*:[ \t]*"""
                       r"""(?P<vq>["'])(?P<value>[^"'\n]{0,400})(?P=vq)\s*,?""")
_LOGIN_COOKIE = re.compile(r"(?i)(?<![a-z])(?:[a-z]*sess(?:ion)?|o?auth|[a-z]*token|jwt|remember|logged[_-]?in)"
                           r"|sid(?![a-z])|aspxauth")
_NOT_LOGIN_COOKIE = re.compile(r"(?i)csrf|xsrf")


def login_cookie(name: str) -> bool:
    """A cookie name that holds a login (see the module's docstring)."""
    return _LOGIN_COOKIE.search(name) is not None and _NOT_LOGIN_COOKIE.search(name) is None


def cookie_value_ok(value: str) -> bool:
    """A session id or token as servers make them: 8+ characters with a letter and a digit, no placeholder."""
    return len(value) >= 8 and any(c.isalpha() for c in value) and any(c.isdigit() for c in value) and \
        not is_placeholder(value, quoted=True)


class CookieValues:
    """`sub(repl, text)`: each login cookie's value inside a cookie string replaced by `repl(match of the value)`.
    The string runs to its closing quote when it opens with one, else to the end of the line (a header's)."""

    def sub(self, repl: Callable[[re.Match[str]], str], text: str) -> str:
        for gate, pattern in _COOKIE_STARTS:
            if gate in text:
                text = self._sub_strings(pattern, repl, text)
        if "ookies" in text:
            text = replace_spans(text, self._jar_values(text), repl)
        return text

    @staticmethod
    def _jar_values(text: str) -> Iterator[tuple[int, int]]:
        """The login cookies' values of every cookie jar written as a dict or an object."""
        for start in _JAR_START.finditer(text):
            at = start.end()
            while (pair := _JAR_PAIR.match(text, at)) is not None:
                if login_cookie(pair.group("name")) and cookie_value_ok(pair.group("value")):
                    yield pair.span("value")
                at = pair.end()

    def _sub_strings(self, pattern: re.Pattern[str], repl: Callable[[re.Match[str]], str], text: str) -> str:
        return replace_spans(text, self._spans(pattern, text), repl)

    def _spans(self, pattern: re.Pattern[str], text: str) -> Iterator[tuple[int, int]]:
        """The login cookies' values of every cookie string `pattern` opens (one opened inside a value read
        already is not a cookie string)."""
        last = 0
        for start in pattern.finditer(text):
            if start.start() < last:
                continue
            for begin, end in self._values(text, start):
                yield begin, end
                last = end

    @staticmethod
    def _values(text: str, start: re.Match[str]) -> list[tuple[int, int]]:
        """The spans of the login cookies' values in the cookie string that `start` opens."""
        line_end = text.find("\n", start.end())
        line_end = len(text) if line_end < 0 else line_end
        quote = start.group("quote")
        if quote:
            closing = text.find(quote, start.end(), line_end)
            end = line_end if closing < 0 else closing
        elif start.group().startswith("-") or text[start.start() - 3:start.start()] == "--c":
            end = run_end(text, start.end())                # an unquoted flag's value: one shell word
        else:
            end = line_end                                  # a header's value: the rest of its line
        spans, at = [], start.end()
        while at < end:
            pair = _PAIR.match(text, at, end)
            if pair is not None:
                value = pair.group("value").split("'")[0] if quote == "'" else pair.group("value")
                if login_cookie(pair.group("name")) and cookie_value_ok(value):
                    spans.append((pair.start("value"), pair.start("value") + len(value)))
            semicolon = text.find(";", at, end)
            if semicolon < 0 or (pair is None and " " in text[at:semicolon].strip()):
                break                                   # no more pairs, or the string turned into prose
            at = semicolon + 1
        return spans


