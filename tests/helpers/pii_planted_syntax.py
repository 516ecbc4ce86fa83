"""Secrets and phone numbers planted in every syntax a value sits in, for `benchmarks/pii_recall.py` and the
property tests (`tests/test_pii_extent.py`).

A secret is replaced whole or not touched: where it ends is the syntax's business. Each `Syntax` names the
characters a value may hold there — an env/INI line's value runs to the end of its line, a YAML plain scalar
may not start with an indicator, a quoted string holds anything but its (unescaped) quote, a URL query value
ends at `&` or `#`, a shell word at a space or a metacharacter, an XML element's text at `<`, a header's value
at its line's end or its string's closing quote, a cookie's at `;`, a name/value pair's as a JSON string, a
YAML plain scalar or an XML attribute does — and the lines
that carry one after a credential name. `credential_like` is what a generated credential looks like (what the
scrubber promises to find: letters plus digits, not a template); values with spaces must not read as prose.
Phone numbers come in every international prefix form (`+CC`, `00CC`, `00 CC`, `011 CC`, `(+CC)`, a `(0)`
trunk) after every phone cue the scrubber knows (`PHONE_CUES`).
"""

from __future__ import annotations

import json
import random
import re
import string
from dataclasses import dataclass
from typing import Callable

PRINTABLE = "".join(c for c in string.printable if not c.isspace())          # 94 ASCII characters
SHELL_META = "\"'`;&|<>()\\$"


@dataclass(frozen=True)
class Syntax:
    name: str
    first: str                      # characters a value may start with
    rest: str                       # characters it may hold after the first
    spaces: bool                    # single spaces may separate its pieces
    templates: tuple[str, ...]      # `{name}` and `{value}` (the value as written, see `write`)
    names: tuple[str, ...]
    write: Callable[[str], str] = str       # the value as the line spells it (JSON escapes)


def _minus(chars: str, drop: str) -> str:
    return "".join(c for c in chars if c not in drop)


NAMES = ("password", "PASSWORD", "passwd", "db_password", "DB_PASSWORD", "secret", "client_secret", "SECRET_KEY",
         "api_key", "apiKey", "API_KEY", "access_token", "auth_token", "GITHUB_TOKEN", "passphrase", "pwd",
         "AccountKey", "mysql_root_password", "X-Api-Key")
FLAGS = ("password", "db-password", "api-key", "token", "secret", "client-secret", "access-token", "auth-token")
ELEMENTS = ("password", "apiKey", "secret", "clientSecret", "accessToken", "dbPassword", "api_key")
# HTTP headers that carry a credential by convention (`tasks.data.privacy.pii_keyed.is_credential_name`)
HEADER_NAMES = ("X-Api-Key", "x-api-key", "Api-Key", "Private-Token", "PRIVATE-TOKEN", "X-Auth-Token", "X-Access-Token",
                "X-Vault-Token", "X-Goog-Api-Key", "Ocp-Apim-Subscription-Key", "X-Amz-Security-Token", "X-Figma-Token",
                "X-Shopify-Access-Token", "Circle-Token", "DD-API-KEY")
COOKIE_NAMES = ("sessionid", "PHPSESSID", "JSESSIONID", "connect.sid", "_gitlab_session", "auth_token",
                "remember_user_token", "__Secure-next-auth.session-token", "SID")
COOKIE_OCTETS = _minus(PRINTABLE, "\",;\\'")
YAML_INDICATORS = "-?:,[]{}#&*!|>'\"%@`"
QUERY = string.ascii_letters + string.digits + "-._~!$*+,;=:@/?%()"

SYNTAXES = (
    Syntax("env/INI line", _minus(PRINTABLE, "\"'`"), PRINTABLE, False,
           ("{name}={value}", "export {name}={value}", "{name} = {value}", "  {name}={value}",
            "{name}={value}\nDEBUG=false", "# settings\n{name}={value}\nPORT=5432"), NAMES),
    Syntax("YAML plain scalar", _minus(PRINTABLE, YAML_INDICATORS), PRINTABLE, False,
           ("{name}: {value}", "  {name}: {value}", "- {name}: {value}", "{name}: {value}  # rotated"), NAMES),
    Syntax("double-quoted string / JSON", PRINTABLE, PRINTABLE, True,
           ('"{name}": {value}', "{name} = {value}", "conn = connect(host=h, {name}={value})",
            '{{"{name}": {value}, "id": 7}}', "  {name}: {value}"), NAMES, json.dumps),
    Syntax("single-quoted string", _minus(PRINTABLE, "'\\"), _minus(PRINTABLE, "'\\"), True,
           ("{name}='{value}'", "'{name}' => '{value}',", "set {name} := '{value}'", "  {name}: '{value}'"), NAMES),
    Syntax("URL query parameter", QUERY, QUERY, False,
           ("https://api.example.com/v1/login?user=bob&{name}={value}&next=%2F", "GET /auth?{name}={value} HTTP/1.1",
            "curl 'https://x.example.org/cb?{name}={value}'", "see https://h.example.net/?a=1&{name}={value}#top"),
           ("password", "passwd", "api_key", "apikey", "access_token", "token", "secret", "client_secret")),
    Syntax("command-line flag", _minus(PRINTABLE, SHELL_META + "-#~"), _minus(PRINTABLE, SHELL_META), False,
           ("mysqldump --{name} {value} shop", "tool --{name} {value} --verbose", "app --{name}={value} run",
            "deploy.sh --{name}={value}"), FLAGS),
    Syntax("XML/plist element", _minus(PRINTABLE, "<&"), _minus(PRINTABLE, "<&"), True,
           ("<{name}>{value}</{name}>", "<config><{name} type=\"string\">{value}</{name}></config>",
            "  <{name}>{value}</{name}>"), ELEMENTS),
    # A header's line of a raw request runs to its end (a YAML indicator or a quote does not open it: the
    # line reads as YAML too); inside a shell's single quotes (`curl -H`, HTTPie) it runs to the closing quote;
    # a call's second argument and a server directive's value are double-quoted strings.
    Syntax("HTTP header line", _minus(PRINTABLE, YAML_INDICATORS), PRINTABLE, False,
           ("{name}: {value}", "GET /v1/items HTTP/1.1\nHost: api.example.com\n{name}: {value}\nAccept: */*",
            "POST /v1/items HTTP/1.1\r\n{name}: {value}\r\nContent-Length: 0\r\n"), HEADER_NAMES),
    Syntax("header in a shell word", _minus(PRINTABLE, "'"), _minus(PRINTABLE, "'"), True,
           ("curl -H '{name}: {value}' https://api.example.com/v1/items", "curl -sS --header '{name}:{value}' -X POST",
            "http GET api.example.com/v1 '{name}:{value}'"), HEADER_NAMES),
    Syntax("header call or directive", PRINTABLE, PRINTABLE, True,
           ('xhr.setRequestHeader("{name}", {value});', 'req.Header.Set("{name}", {value})',
            "proxy_set_header {name} {value};", "RequestHeader set {name} {value}",
            "http-request set-header {name} {value} if api"), HEADER_NAMES, json.dumps),
    # A credential's name in a `name`/`key` field, its value in the sibling `value` field (either order): a JSON
    # object (HAR, Postman, ECS) or an HCL one, a YAML block mapping (a Kubernetes env list), XML attributes.
    Syntax("name/value pair (JSON)", PRINTABLE, PRINTABLE, True,
           ('{{"name": "{name}", "value": {value}}}', '{{"key": "{name}", "value": {value}, "type": "text"}}',
            '{{"value": {value}, "disabled": false, "key": "{name}"}}',
            '"environment": [\n  {{\n    "name": "{name}",\n    "value": {value}\n  }}\n]',
            '{{ name = "{name}", value = {value} }}'), NAMES, json.dumps),
    Syntax("name/value pair (YAML)", _minus(PRINTABLE, YAML_INDICATORS), PRINTABLE, False,
           ("- name: {name}\n  value: {value}", "env:\n  - name: {name}\n    value: {value}\n  - name: PORT\n    value: '80'",
            "- value: {value}\n  name: {name}", "- key: {name}\n  value: {value}  # rotated\n  type: text"), NAMES),
    Syntax("name/value pair (XML)", _minus(PRINTABLE, "\"<&"), _minus(PRINTABLE, "\"<&"), True,
           ('<add key="{name}" value="{value}" />', '  <property name="{name}" value="{value}"/>',
            '<add value="{value}"\n     key="{name}" />'), NAMES),
    # A cookie's value: RFC 6265's cookie-octets (no space, `"`, `,`, `;` or `\\`), no `'` in a shell's quotes.
    Syntax("login cookie", COOKIE_OCTETS, COOKIE_OCTETS, False,
           ("Cookie: {name}={value}; theme=dark", "Cookie: _ga=GA1.2.3.4; {name}={value}",
            "Set-Cookie: {name}={value}; Path=/; HttpOnly", "curl -b '{name}={value}' https://example.com/app",
            'document.cookie = "{name}={value}; path=/";'), COOKIE_NAMES),
)


def credential_like(value: str) -> bool:
    """A generated credential the scrubber promises to find: 8+ characters, a letter and a digit, not a template
    (`$VAR`, `$(cmd)`, `${VAR}`, `#{var}`, `%s`, `{x}`, `<x>`), not opening like code (`name(`, `name[`, a bracket), no
    mask or example word, and with spaces not prose (no two neighbouring pieces with 2+ letters and no digit)."""
    if len(value) < 8 or not any(c.isalpha() for c in value) or not any(c.isdigit() for c in value):
        return False
    low = value.lower()
    # the scrubber's placeholder words (pii_values): a fuzz run drew `0CHANGE_ME`
    if any(w in low for w in ("your", "example", "changeme", "change_me", "change-me", "replace-me", "replace_me",
                              "replaceme", "placeholder", "redacted", "dummy", "xxxx", "****", "....", "getenv",
                              "environ")):
        return False
    # the interpolations pii_values reads as a template (Ruby's `#{name}` too)
    if re.match(r"\$(?:[({]|[A-Za-z_]\w*$)", value) or \
            re.search(r"\$\{[\w.]*\}|\{\{.*\}\}|%\(\w*\)[sd]|#\{[A-Za-z_]\w{2,}\}", value):
        return False
    if "://" in value:      # a URL, whose credentials the URL pass reads (`value_ok`); a fuzz run drew `0000A://`
        return False
    # (`%A00000%` too: a batch file's `%VAR%`, which a fuzz run drew as a query's value)
    if re.fullmatch(r"%\w?|%[A-Za-z_]\w*%|<[^<>]*>|\{[^{}]*\}|\[[^\[\]]*\]|\([^()]*\)", value) or \
            value.strip() != value:
        return False
    if re.match(r"[A-Za-z_][\w.]*[(\[]|[(\[{`]", value):          # opens like a call, an index, an expression
        return False
    if re.fullmatch(r"[A-Za-z_]+(?:\.[A-Za-z_]+)*\.[A-Za-z_]+\d*", value):     # an attribute chain: code
        return False
    if re.fullmatch(r"(?:/[\w.-]+)+/?", value) and all(      # a file path: each part 2+ letters, no digit + capital
            len(re.findall("[A-Za-z]", p)) >= 2 and not (re.search(r"\d", p) and re.search("[A-Z]", p))
            for p in value.split("/") if p):
        return False
    pieces = value.split(" ")
    wordy = [len(re.findall(r"[A-Za-z]", p)) >= 2 and not re.search(r"\d", p) for p in pieces]
    return "" not in pieces and not any(a and b for a, b in zip(wordy, wordy[1:]))


def draw_value(rng: random.Random, syntax: Syntax, size: tuple[int, int] = (8, 32)) -> str:
    while True:
        n = rng.randint(*size)
        chars = [rng.choice(syntax.first)] + [rng.choice(syntax.rest) for _ in range(n - 1)]
        if syntax.spaces:
            for k in range(2, n - 2, rng.randint(4, 12)):
                chars[k] = " " if rng.random() < 0.3 else chars[k]
        value = "".join(chars)
        if credential_like(value) and value[-1] != " ":
            return value


def plant(rng: random.Random, syntax: Syntax) -> tuple[str, tuple[str, ...]]:
    """(a line holding a drawn value after a credential name in `syntax`, the value as written)."""
    value = syntax.write(draw_value(rng, syntax))
    name = rng.choice(syntax.names)
    if syntax.name.startswith("XML") and rng.random() < 0.3:         # a property list's entry
        return f"<key>{name[0].upper() + name[1:]}</key>\n<string>{value}</string>", (value,)
    return rng.choice(syntax.templates).format(name=name, value=value), (value,)


def syntax_secrets(rng: random.Random, n: int) -> list[tuple[str, tuple[str, ...]]]:
    return [plant(rng, SYNTAXES[i % len(SYNTAXES)]) for i in range(n)]


# --- phones --------------------------------------------------------------------------------------------------
# Cue forms, one or more for each word of `pii_phones`' cue pattern (its last words, the CJK ones, the signs).
PHONE_CUES = ("Phone:", "phone", "Telephone:", "Tel.", "tel:", "Telefon:", "Telefono:", "Teléfono:", "Telefone:",
              "Téléphone :", "Tél. :", "tél", "Tlf:", "Tfn:", "Fon:", "Cell:", "cellphone", "Cellular:", "Celular:",
              "Cel:", "Mobile:", "Mobil:", "Mob:", "Móvil:", "Portable :", "Handy:", "Natel:", "GSM:", "Fax:",
              "Ph:", "WhatsApp:", "SMS:", "MSISDN:", "Text:", "dial", "call", "Call me at", "contact", "Contact:",
              "contact me at", "Contact us on", "reach me at", "reach us on", "Телефон:", "тел.", "Моб.:",
              "电话：", "電話：", "手机：", "手機：", "携帯：", "連絡先：", "联系方式：", "전화:", "휴대폰:", "☎", "📞",
              "Phone number:", "Tel. no.", "Mobile #", "phone no", "Telefon Nr.", "Telefonnummer:")
# (country code, national number groups) in each country's own layout
COUNTRIES = ((33, (1, 2, 2, 2, 2)), (44, (2, 4, 4)), (49, (2, 7)), (1, (3, 3, 4)), (39, (2, 4, 4)), (34, (3, 3, 3)),
             (31, (1, 8)), (41, (2, 3, 2, 2)), (32, (1, 3, 2, 2)), (61, (1, 4, 4)), (81, (1, 4, 4)),
             (86, (3, 4, 4)), (91, (5, 5)), (55, (2, 5, 4)), (7, (3, 3, 2, 2)), (353, (1, 3, 4)), (27, (2, 3, 4)))
PREFIXES = ("+{cc} {n}", "00{cc} {n}", "00 {cc} {n}", "011 {cc} {n}", "(+{cc}) {n}", "+{cc} (0){n}", "00{cc} (0){n}",
            "+{cc}{d}", "00{cc}{d}", "+{cc}-{dash}", "00{cc}-{dash}", "+{cc}.{dot}")
PHONE_LINES = ("{cue} {number}", "{cue} {number} (office)", "{cue} {number}.", "Our {cue} {number}, thanks.")


def international_number(rng: random.Random, cc: int, groups: tuple[int, ...], prefix: str) -> str:
    parts = ["".join(rng.choice(string.digits) for _ in range(g)) for g in groups]
    parts[0] = str(rng.randint(1, 9)) + parts[0][1:]              # no national number starts with its trunk 0
    return prefix.format(cc=cc, n=" ".join(parts), d="".join(parts), dash="-".join(parts), dot=".".join(parts))


def international_phones(rng: random.Random, n: int) -> list[tuple[str, tuple[str, ...]]]:
    out = []
    for i in range(n):
        cc, groups = COUNTRIES[i % len(COUNTRIES)]
        prefix = PREFIXES[(i // len(COUNTRIES)) % len(PREFIXES)]
        if cc == 1 and "(0)" in prefix:
            prefix = "+{cc} {n}"                                    # NANP has no trunk 0
        number = international_number(rng, cc, groups, prefix)
        cue = PHONE_CUES[rng.randrange(len(PHONE_CUES))]
        out.append((rng.choice(PHONE_LINES).format(cue=cue, number=number), (number,)))
    return out


def leaked_runs(part: str, text: str, scrubbed: str, width: int = 4) -> list[str]:
    """The `width`-character runs of `part` still in `scrubbed` that the rest of the carrier line does not hold
    anyway (a part left whole is one of them)."""
    carrier = text.replace(part, "\x00")
    left = re.sub(r"<[A-Z_]+>", "\x00", scrubbed)          # a placeholder's letters are none of the value's
    runs = {part[k:k + width] for k in range(max(len(part) - width + 1, 1))}
    return sorted(r for r in runs if r in left and r not in carrier and r.strip())
