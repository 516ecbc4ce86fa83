"""Credentials that their syntax names apart from the value: a name/value pair's fields, a header map's value
list, a call's positional password and PowerShell's `ConvertTo-SecureString`.

Three of `tasks.data.privacy.pii_secrets`' passes, each tried only where its literal occurs:
- `NameValuePairs`: a credential's name given as the value of a `name`/`key`/`header` field (also `Name`,
  `ParameterKey`, `OptionName`) and the secret in the sibling `value` field (`Value`, `ParameterValue`) of the
  same object — Kubernetes/Compose `env` lists and CloudFormation in YAML (block or flow style), Postman
  collections, HAR files, ECS task definitions in JSON, .NET `<add key="ApiKey" value="..."/>` and Spring
  `<property name="password" value="..."/>` attributes — in either order, up to three other scalar fields
  between them. The name is judged by `is_credential_name` (`DB_PASSWORD`, `X-Api-Key`; not `page_token`,
  `Content-Type`); an `Authorization` pair's value loses only its credential, not its scheme (`Bearer ...`).
  `valueFrom:`/`secretKeyRef` is a reference, no value; templates (`${DB_PASSWORD}`, `<your key>`,
  `{{token}}`, Spring's `#{...}`) and masks are placeholders. Two names hold a credential only where they sit
  (read from the containers around the pair, `pii_values.enclosing_labels`): a login cookie's name
  (`pii_headers.login_cookie`: `sessionid`, not `_ga` or `csrftoken`) in a cookie list or call (HAR's
  `"cookies": [...]`, Selenium's `add_cookie`, Playwright's `add_cookies`, Puppeteer's `setCookie`), and a
  Postman auth block's `token` (`"bearer": [...]`) or `value` (`"apikey": [...]`).
- `TABLE_CELLS`: a credential's name in one cell of a row and its value in the next: a Markdown table's
  `| api_key | ... |`, a CSV or TSV line `api_key,...` (a value with a digit, not a placeholder).
- `HEADER_MAPS`: a Go `http.Header{"X-Api-Key": {"..."}}` (or `[]string{"..."}`) map's literal value list.
- `POSITIONAL`: a string literal in the password's position of a call known to take one:
  `NetworkCredential("u", "...")`, `auth=("u", "...")`, `HTTPBasicAuth`/`HTTPDigestAuth`/`BasicAuth`/
  `DigestAuth`, `UsernamePasswordCredentials`, `PasswordAuthentication("u", "...".toCharArray())`,
  `DriverManager.getConnection(url, "u", "...")`, `.login("u", "...")`; and `ConvertTo-SecureString "..."
  -AsPlainText` (or piped into it). A variable in that position is code (`auth=(user, password)`).
A value is replaced whole (the inside of its quotes, or a plain scalar to its line's or flow's end) or not at all.
"""

from __future__ import annotations

import re
from typing import Callable, Iterator

from tasks.data.privacy.pii_headers import cookie_value_ok, login_cookie
from tasks.data.privacy.pii_keyed import is_credential_name
from tasks.data.privacy.pii_personal import gate_hits
from tasks.data.privacy.pii_values import (enclosing_labels, identifier_only, is_placeholder, quoted_value,
                                           replace_spans, value_ok)

_NAME_FIELD = r"(?:name|key|header|Name|Key|Header|ParameterKey|OptionName)"
_SCALAR = r"""(?:"(?:[^"\\\n]|\\.)*"|'[^'\n]*'|[\w.+-]+)"""
# Other scalar fields of the object between the two (`"type": "text"`, `"disabled": false`), at most three.
_OTHERS = rf"""(?:\s*,\s*["']?[A-Za-z_][\w-]{{0,40}}["']?[ \t]*[:=][ \t]*{_SCALAR}){{0,3}}"""
_NAME_VALUE = r"""(?P<nq>["']?)(?P<name>[A-Za-z0-9_.-]{2,80})(?P=nq)"""
# The name field before the value field (searched back from it, `$` at the value field's start) or after it.
_NAME_BEFORE = re.compile(rf"""(?<![\w-])["']?{_NAME_FIELD}["']?[ \t]*[:=][ \t]*{_NAME_VALUE}{_OTHERS}\s*,\s*$""")
_NAME_AFTER = re.compile(rf"""{_OTHERS}\s*,\s*["']?{_NAME_FIELD}["']?[ \t]*[:=][ \t]*{_NAME_VALUE}(?![\w.-])""")
# A value field: `"value": `, `value: `, `value = `, `value=` (XML); led by the literal (a fast scan).
_VALUE_FIELD = re.compile(r"""alue(?P<vq>["']?)[ \t]*(?P<sep>[:=])[ \t]*""")
_VALUE_FIELD_NAMES = ("ParameterValue", "value", "Value")
_YAML_FIELD = re.compile(r"([ \t]*)(-[ \t]+)?(\w+)[ \t]*:(?:[ \t]+(.*?))?[ \t]*\r?$")
_XML_TAG = re.compile(r"<[A-Za-z][\w:.-]*")
_XML_ATTRIBUTE = re.compile(r"""\s+([\w:.-]+)[ \t]*=[ \t]*(?:"([^"\n]*)"|'([^'\n]*)')""")
_AUTH_SCHEME = re.compile(r"(?i:basic|bearer|token|bot|apikey|sso-key|key)[ \t]+(?=\S)")
_FLOW_SCALAR, _LINE = re.compile(r"[^,\]}\n]*"), re.compile(r"[^\n]*")
_SPEL = re.compile(r"#\{.*\}")                  # Spring's `#{systemProperties['db.pw']}`: an expression


# Fields that hold a credential only in the block they sit in (Postman's auth blocks, `"bearer": [{"key": "token",
# "value": "..."}]`; an `apikey` block's `{"key": "value", "value": "..."}`, its `key` entry the header's name).
_AUTH_BLOCK_FIELDS = {"token": "bearer", "value": "apikey"}


def _in_context(name: str, text: str, at: int) -> str | None:
    """How a pair whose name is no credential's holds one where it sits (`at`: its value field): "cookie" for a
    login cookie's object in a cookie list or call (HAR's `"cookies": [...]`, Selenium's `add_cookie({...})`,
    Playwright's `add_cookies([...])`, Puppeteer's `setCookie({...})`: the classification of `Cookie:` headers,
    `pii_headers.login_cookie`), "credential" for a Postman auth block's secret field; None otherwise."""
    block = _AUTH_BLOCK_FIELDS.get(name)
    if block is None and not login_cookie(name):
        return None
    labels = [label.lower() for label in enclosing_labels(text, at)]
    if block is not None:
        return "credential" if block in labels else None
    return "cookie" if any("cookie" in label for label in labels) else None


def _secret_span(name: str, text: str, start: int, end: int, quoted: bool, yaml: bool,
                 context: str | None = None) -> tuple[int, int] | None:
    """The span of the credential in the value text[start:end] of a pair named `name`, or None; `context`: what
    `_in_context` made of a name that is no credential's."""
    value = text[start:end]
    if context == "cookie":
        return (start, end) if cookie_value_ok(value) else None
    if context == "credential":
        return (start, end) if value_ok(value, quoted=quoted) else None
    if name.lower() in ("authorization", "proxy-authorization"):       # a header's: the scheme stays
        scheme = _AUTH_SCHEME.match(value)
        credential = value[scheme.end():] if scheme else value
        ok = len(credential) >= 6 and not is_placeholder(credential, quoted=True) and " " not in credential and \
            (any(not c.isalpha() for c in credential) or any(c.isupper() for c in credential[1:]))
        return (end - len(credential), end) if ok else None
    if not is_credential_name(name) or _SPEL.fullmatch(value):
        return None
    # a plain flow scalar named like a variable is code (`{name: 'API_KEY', value: apiKey}` in JavaScript)
    ok = value_ok(value, quoted=quoted, yaml=yaml) and (quoted or yaml or not identifier_only(value))
    return (start, end) if ok else None


class NameValuePairs:
    """`sub(repl, text)`: each pair's credential (see the module's docstring) replaced by `repl(match of it)`."""

    def sub(self, repl: Callable[[re.Match[str]], str], text: str) -> str:
        if "alue" not in text:
            return text
        return replace_spans(text, self._spans(text), repl)

    def _spans(self, text: str) -> Iterator[tuple[int, int]]:
        for m in _VALUE_FIELD.finditer(text):
            field = next((f for f in _VALUE_FIELD_NAMES if text.startswith(f, m.start() + 4 - len(f))), None)
            if field is None:
                continue
            field_start = m.start() + 4 - len(field)
            if field_start and (text[field_start - 1].isalnum() or text[field_start - 1] in "_-."):
                continue                                    # `defaultValue:`, `max_value=`, `x.value = `
            quote = m.group("vq")
            opening = field_start - len(quote)
            span = self._xml(text, m, opening) if m.group("sep") == "=" and not quote else None
            span = span or self._flow(text, m, opening)
            if span is None and m.group("sep") == ":":
                span = self._yaml_block(text, m, field_start)
            if span is not None:
                yield span

    @staticmethod
    def _value(text: str, at: int, flow: bool) -> tuple[int, int, bool] | None:
        """The value at `at`: a quoted string's inside, or a plain scalar to its line's end (before ` #`) or, in
        a flow (`flow`), to its `,`, `}` or `]`."""
        if at >= len(text) or text[at] in "\r\n":
            return None
        if text[at] in "\"'":
            inside = quoted_value(text, at)
            return None if inside is None else (*inside, True)
        end = (_FLOW_SCALAR if flow else _LINE).match(text, at).end()
        comment = text.find(" #", at, end)
        end = comment if comment >= 0 else end
        while end > at and text[end - 1] in " \t\r":
            end -= 1
        return (at, end, False) if end > at else None

    def _flow(self, text: str, m: re.Match[str], opening: int) -> tuple[int, int] | None:
        """A JSON/flow object's pair: `{"key": "X-Api-Key", "value": "..."}`, `{name: X, value: Y}`."""
        found = self._value(text, m.end(), flow=True)
        if found is None:
            return None
        start, end, quoted = found
        # (the name field before it ends in a comma right before this one: a cheap test before the search)
        comma = text[max(0, opening - 40):opening].rstrip().endswith(",")
        before = _NAME_BEFORE.search(text, max(0, opening - 240), opening) if comma else None
        after = None if before else _NAME_AFTER.match(text, end + quoted)
        named = before or after
        if named is None:
            return None
        name = named.group("name")
        context = None if is_credential_name(name) else _in_context(name, text, opening)
        return _secret_span(name, text, start, end, quoted, yaml=False, context=context)

    @staticmethod
    def _xml(text: str, m: re.Match[str], field_start: int) -> tuple[int, int] | None:
        """An XML element's attributes: `<add key="ApiKey" value="..."/>`, `<property name="password" .../>`."""
        tag_start = text.rfind("<", max(0, field_start - 300), field_start)
        tag = _XML_TAG.match(text, tag_start) if tag_start >= 0 else None
        if tag is None or text[m.end():m.end() + 1] not in ("'", '"'):
            return None
        attributes, at = {}, tag.end()          # read one after another: a `>` inside a value is the value's
        while len(attributes) < 30 and (attribute := _XML_ATTRIBUTE.match(text, at)) is not None:
            attributes[attribute.group(1)] = attribute
            at = attribute.end()
        value = attributes.get(text[field_start:m.start() + 4])
        named = next((attributes[f] for f in ("name", "key", "header", "Name", "Key") if f in attributes), None)
        if value is None or named is None or value.start(1) != field_start:
            return None
        group = 2 if value.group(2) is not None else 3
        name = named.group(2) if named.group(2) is not None else named.group(3)
        return _secret_span(name, text, value.start(group), value.end(group), quoted=True, yaml=False)

    def _yaml_block(self, text: str, m: re.Match[str], field_start: int) -> tuple[int, int] | None:
        """A YAML block mapping's pair: `- name: DB_PASSWORD` and `value: ...` at the same column."""
        line_start = text.rfind("\n", 0, field_start) + 1
        lead = re.fullmatch(r"([ \t]*)(-[ \t]+)?", text[line_start:field_start])
        if lead is None:
            return None
        found = self._value(text, m.end(), flow=False)
        if found is None:
            return None
        name = self._yaml_sibling_name(text, line_start, field_start - line_start, bool(lead.group(2)))
        return None if name is None else _secret_span(name, text, found[0], found[1], found[2], yaml=not found[2])

    @staticmethod
    def _yaml_sibling_name(text: str, line_start: int, column: int, item_start: bool) -> str | None:
        """The value of a name field among the keys at `column` of the mapping the line at `line_start` is in
        (the lines above it up to its list item's `- `, the lines below it up to the next item or a shallower
        line; deeper lines are the keys' children). At most 20 lines each way."""
        lines_up = [] if item_start else text[max(0, line_start - 2000):max(0, line_start - 1)].split("\n")[::-1]
        line_end = text.find("\n", line_start)
        lines_down = [] if line_end < 0 else text[line_end + 1:line_end + 2000].split("\n")
        for lines, upward in ((lines_up[:20], True), (lines_down[:20], False)):
            for line in lines:
                field = _YAML_FIELD.fullmatch(line)
                if field is None:
                    if line.strip() and not line.lstrip().startswith("#") and \
                            len(line) - len(line.lstrip()) <= column:
                        break                                   # a line that is no key of this mapping
                    continue
                at = len(field.group(1)) + len(field.group(2) or "")
                if at > column:
                    continue                                    # a child of a key
                if at < column or (field.group(2) and not upward):
                    break                                       # a shallower line, or the next item
                if re.fullmatch(_NAME_FIELD, field.group(3)) and field.group(4):
                    name = field.group(4).split(" #")[0].strip().strip("\"'")
                    return name if re.fullmatch(r"[A-Za-z0-9_.-]{2,80}", name) else None
                if field.group(2):
                    break                                       # this item's first key
        return None


# --- header maps and positional credentials -------------------------------------------------------------------
_QUOTED = r"""(?:"(?:[^"\\\n]|\\.){1,200}"|'(?:[^'\\\n]|\\.){1,200}')"""
_ARG = rf"""(?:{_QUOTED}|[\w.]+)"""          # a string literal or a variable (`user`, `self.user`, `url`)
_SECURE_STRING = ("SecureString", "securestring")
# (gate: literals of which one occurs wherever the pattern matches, "" for a pattern led by its own literal (a
# scan as fast as a test for it); pattern with the password's string literal, quotes included, as group `pw`)
_POSITIONAL_PATTERNS = (
    ("Credential", rf"""NetworkCredential\([ \t]*{_ARG}[ \t]*,[ \t]*(?P<pw>{_QUOTED})[ \t]*[,)]"""),
    ("Credential", rf"""UsernamePasswordCredentials\([ \t]*{_ARG}[ \t]*,[ \t]*(?P<pw>{_QUOTED})[ \t]*\)"""),
    ("Auth", rf"""PasswordAuthentication\([ \t]*{_ARG}[ \t]*,[ \t]*(?P<pw>{_QUOTED})"""
                        r"""(?:\.toCharArray\(\))?[ \t]*\)"""),
    ("Auth", rf"""Auth\((?:(?<=BasicAuth\()|(?<=DigestAuth\()|(?<=HTTPProxyAuth\())"""
              rf"""[ \t]*{_ARG}[ \t]*,[ \t]*(?P<pw>{_QUOTED})[ \t]*[,)]"""),
    ("", rf"""auth(?<![\w.]auth)[ \t]*=[ \t]*\([ \t]*{_ARG}[ \t]*,[ \t]*(?P<pw>{_QUOTED})[ \t]*\)"""),
    ("", rf"""getConnection\([ \t]*{_ARG}[ \t]*,[ \t]*{_ARG}[ \t]*,[ \t]*(?P<pw>{_QUOTED})[ \t]*\)"""),
    ("", rf"""\.login\([ \t]*{_QUOTED}[ \t]*,[ \t]*(?P<pw>{_QUOTED})[ \t]*\)"""),
    # PHP: `new mysqli("host", "user", "...", "db")`, `mysqli_connect(...)`, `new PDO($dsn, "user", "...")`
    ("mysqli", rf"""(?:new[ \t]+mysqli|mysqli_connect|mysqli_real_connect)\([ \t]*(?:\$\w+[ \t]*,[ \t]*)?"""
               rf"""{_ARG}[ \t]*,[ \t]*{_ARG}[ \t]*,[ \t]*(?P<pw>{_QUOTED})[ \t]*[,)]"""),
    ("PDO", rf"""new[ \t]+PDO\([ \t]*(?:{_QUOTED}|\$\w+)[ \t]*,[ \t]*{_ARG}[ \t]*,[ \t]*(?P<pw>{_QUOTED})[ \t]*[,)]"""),
    # PowerShell (case-insensitive): `ConvertTo-SecureString "..." -AsPlainText`, `"..." | ConvertTo-SecureString`
    (_SECURE_STRING, r"""(?i:ConvertTo-SecureString)(?:[ \t]+(?i:-String))?[ \t]+(?P<pw>"[^"\n]{1,200}"|'[^'\n]{1,200}')"""
                     r"""(?=[^\n]*(?i:-AsPlainText))"""),
    (_SECURE_STRING, r"""(?P<pw>"[^"\n]{1,200}"|'[^'\n]{1,200}')[ \t]*\|[ \t]*(?i:ConvertTo-SecureString)"""
                     r"""(?=[^\n]*(?i:-AsPlainText))"""),
    # Go: `http.Header{"X-Api-Key": {"..."}}`, `map[string][]string{"X-Api-Key": []string{"..."}}` (led by a
    # quote, a slow scan: only under a header map's literal)
    (("Header{", "]string{"), r""""(?P<name>[A-Za-z0-9_-]{2,64})"[ \t]*:[ \t]*(?:\[\]string)?\{[ \t]*(?P<pw>"(?:[^"\\\n]|\\.){1,200}")"""
           r"""[ \t]*[,}]"""),
)


class Positional:
    """`sub(repl, text)`: each pattern's match, under its gate, for `repl` to check and replace its `pw`."""

    patterns = [((gate,) if isinstance(gate, str) else gate, re.compile(pattern)) for gate, pattern in _POSITIONAL_PATTERNS]

    def sub(self, repl: Callable[[re.Match[str]], str], text: str) -> str:
        present: dict[str, bool] = {}         # each literal looked for once (a scan of the whole text)
        for gate, pattern in self.patterns:
            if any(present.setdefault(literal, not literal or literal in text) for literal in gate):
                text = pattern.sub(repl, text)
        return text


def positional_credential(m: re.Match[str]) -> bool:
    """A literal password (in a header map: under a credential header's name) that is no placeholder."""
    start, end = m.start("pw") + 1 - m.start(), m.end("pw") - 1 - m.start()
    if "name" in m.re.groupindex:
        return _secret_span(m.group("name"), m.group(), start, end, quoted=True, yaml=False) is not None
    return value_ok(m.group()[start:end], quoted=True)


def positional_span(m: re.Match[str]) -> tuple[int, int]:
    """The password's span within the match, inside its quotes (an `Authorization` header's without its
    scheme)."""
    start, end = m.start("pw") + 1 - m.start(), m.end("pw") - 1 - m.start()
    if "name" in m.re.groupindex:
        found = _secret_span(m.group("name"), m.group(), start, end, quoted=True, yaml=False)
        start, end = found if found else (start, end)
    return start, end


NAME_VALUE_PAIRS = NameValuePairs()
POSITIONAL = Positional()


# A row of two cells, name then value: Markdown's `| DB_PASSWORD | ... |`, CSV's `api_key,...`, TSV's tab
# (the separator's blanks read once, atomic by a lookahead and its backreference: tried again per tab they took
# n^2 steps; `(?>…)` and possessive repeats give wrong results on CPython 3.11.2's engine)
_TABLE_ROW = re.compile(r"[ \t]*(?:\|[ \t]*)?`?(?P<name>[A-Za-z][\w.-]{1,60})`?"
                        r"(?=(?P<gap>[ \t]*(?P<sep>\||,|\t)[ \t]*))(?P=gap)"
                        r"`?(?P<value>[^\s|,`]{6,200})`?[ \t]*(?:\||,|\t|\r?$)", re.M)
# Every credential name holds one of these words (`is_credential_name`): a row is tried only where one, ending
# a name, is followed by a cell's separator, the words found in any case as the cued passes find their gates
# (`gate_hits`; the row pattern tried at every line start cost 13 ms a round on 400 kB of code)
_CELL_WORDS = ("pass", "pwd", "secret", "token", "key", "wort", "senha")
_CELL_SEPARATOR = re.compile(r"[\w.-]{3,22}`?[ \t]*[|,\t]")


class TableCells:
    """`sub(repl, text)`: the value cell of each row whose first cell names a credential (`table_credential`)."""

    def sub(self, repl: Callable[[re.Match[str]], str], text: str) -> str:
        # The hits come in order, so each stretch of text is searched for a line's start once (searching back
        # to the line's start for each word was quadratic in a long line of `password|key|token|...`)
        starts, start, seen = set(), 0, 0
        for at in gate_hits(text, _CELL_WORDS, ()):
            if _CELL_SEPARATOR.match(text, at):
                start = text.rfind("\n", seen, at) + 1 or start
                seen = at
                starts.add(start)
        spans = []
        for start in sorted(starts):
            m = _TABLE_ROW.match(text, start)
            if m is not None and table_credential(m):
                spans.append((m.start("value"), m.end("value")))
        return replace_spans(text, spans, repl) if spans else text


def table_credential(m: re.Match[str]) -> bool:
    value = m.group("value")
    return is_credential_name(m.group("name")) and any(c.isdigit() for c in value) and \
        value_ok(value, literal=True)


TABLE_CELLS = TableCells()
