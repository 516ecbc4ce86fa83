"""Credentials in shapes the keyed passes (`tasks.data.privacy.pii_keyed`) pass over: Google app passwords,
Erlang cookies, Postgres role verifiers and a token inside a URL-encoded URL.

- A Google app password is 16 lower-case letters, shown as four groups of four (`abcd efgh ijkl mnop`): no digit,
  so the keyed passes, which want one in an unquoted value, keep it. After a password word it is one here when
  it reads as random letters (no common word inside: `mysecretpassword` stays; at most one group a common
  four-letter word, `COMMON4`: `must have more than` stays); unspaced, also few vowels. Google's own mail
  puts it on a line of its own a few lines below `app password`, with no `:` or `=` before it.
- ODBC's braced value (`Pwd={a;b}}c};`, `Password={ x=1}`): `}}` is a brace and `;`, `=` and blanks are the
  value's, up to the closing brace; `pii_values` reads one that opens with a blank or `=` as no value.
- An Erlang cookie (`erlangCookie:`, `RABBITMQ_ERLANG_COOKIE=`, `echo ... > .erlang.cookie`, `-setcookie`) is a
  login to every node of a cluster, commonly 20 capital letters: no credential word names it.
- Postgres stores a role's password as `md5` and 32 hex digits (`md5(password || rolname)`) or as a
  `SCRAM-SHA-256$<iterations>:<salt>$<key>:<key>` verifier; either logs in (md5) or is cracked offline.
- `redirect=https%3A%2F%2Fapp%2Fcb%3Faccess_token%3D...`: a URL passed as a parameter is percent-encoded, its
  `?`, `&` and `=` read `%3F`, `%26` and `%3D`, which no `?token=` pattern reads.
- A YAML line's password led by `#`, `!`, `&` or `*` (`db_password: #Qw9$z1Lm`): `pii_values` reads YAML's
  comment, tag, anchor or alias there; a generator's mix of cases and digits after the lead, alone on its line,
  is a password, unless the text uses it as an anchor or alias (`&pw1X` and `*pw1X`).
"""

from __future__ import annotations

import re
from urllib.parse import unquote

from tasks.data.privacy.pii_keyed import is_credential_name
from tasks.data.privacy.pii_values import code_like, identifier_only, is_placeholder, looks_random

_SEP = r"[\"']?[ \t]*(?:[:=]|=>)[ \t]*[\"']?"
# (led by a `P` of either case, which `re` scans for in C; a case-insensitive word is tried at every character)
_APP_PASSWORD = re.compile(r"[Pp](?i:ass(?:word|wd|phrase|wort)?|wd)[\w-]{0,20}" + _SEP +
                           r"(?P<v>[a-z]{4}[ ][a-z]{4}[ ][a-z]{4}[ ][a-z]{4}|[a-z]{16})(?![\w-])")
_VOWELS = frozenset("aeiou")
# The commonest English words of four letters (from general English word frequency, not from any probe's
# phrases): a group of four random letters is one about once in a thousand draws, a phrase's groups are them
COMMON4 = frozenset("""
able also area away baby back ball band bank base bear beat been beer bell belt best bike bill bird blow blue boat
body bone book boot born boss both bowl burn busy cake call calm came camp card care case cash cast cell chat chip
city club coal coat code cold come cook cool copy core cost crew crop dark data date dawn days dead deal dear debt
deep deny desk diet dirt disk does done door down draw drew drop drug dual duck duty each earn ease east easy
edge else even ever evil exam exit face fact fail fair fall fame farm fast fate fear feed feel feet fell felt file
fill film find fine fire firm fish five flag flat flew flow food foot form fort four free from fuel full fund gain
game gate gave gear gift girl give glad goal goes gold golf gone good gray grew grey grow hair half hall hand hang
hard harm hate have head hear heat held hell help here hero hide high hill hint hire hold hole holy home hope host
hour huge hung hunt hurt idea inch into iron item join joke jump jury just keen keep kept kick kids kill kind king
kiss knee knew know lack lady laid lake land lane last late lead left lend less life lift like line link list live
load loan lock logo long look lord lose loss lost loud love luck made mail main make male many mark mass mate meal
mean meat meet menu mere mild mile milk mind mine miss mode mood moon more most move much must name navy near neck
need news next nice nine none nose note once only onto open over pace pack page paid pain pair palm park part pass
past path peak pick pile pink pipe plan play plot plus poem poet pole poll pool poor port pose post pull pure push
quit race rain rank rare rate read real rear rely rent rest rice rich ride ring rise risk road rock role roll roof
room root rose rule rush safe said sake sale salt same sand save seat seed seek seem seen self sell send sent ship
shop shot show shut sick side sign site size skin slip slow snow soft soil sold sole some song soon sort soul spot
star stay step stop such suit sure take tale talk tall tank tape task team tell tend term test text than that them
then they thin this thus tide till time tiny told tone took tool tour town tree trip true tune turn twin type unit
upon used user vast very view vote wage wait wake walk wall want warm warn wash wave ways weak wear week well went
were west what when whom wide wife wild will wind wine wing wire wise wish with wood word wore work worn wrap yard
yeah year your zero zone
""".split())
# Words a chosen (and documented) password is made of; an app password's 16 letters are drawn at random.
_WORDS = ("pass", "word", "secret", "admin", "user", "test", "demo", "change", "default", "example", "letmein",
          "qwerty", "dummy", "sample", "hello", "welcome", "abcd", "mail", "login", "root", "guest", "master")


# `app password` with the password on a line of its own below it (Google's mail: the cue, a blank line, the
# four groups indented), or the 16 letters run together
_APP_PASSWORD_LINE = re.compile(r"[Aa]pp[ -]?[Pp]assword[^\n]{0,60}\n(?:[ \t]*\n){0,2}[ \t]*"
                                r"(?P<v>[a-z]{4}[ ][a-z]{4}[ ][a-z]{4}[ ][a-z]{4}|[a-z]{16})[ \t]*(?=\n|$)")


def _app_password(m: re.Match[str]) -> bool:
    """Random letters: four groups not all alike, no common word inside and at most one group a common
    four-letter word (a group of four random letters is one about once in a thousand; a phrase's are all
    words). Unspaced, the groups are no word boundaries, so at most a third vowels too (English runs near two
    fifths; 26 letters drawn at random, a fifth), unless `app password` names it on its line."""
    value = m.group("v")
    letters = value.replace(" ", "")
    if len(set(letters)) < 8 or any(word in letters for word in _WORDS):
        return False
    if sum(letters[k:k + 4] in COMMON4 for k in range(0, 16, 4)) > 1:
        return False
    if " " in value or sum(c in _VOWELS for c in letters) <= 5:
        return True
    text = m.string
    line = text[text.rfind("\n", 0, m.start()) + 1:text.find("\n", m.end()) % (len(text) + 1)]
    return _APP_CUE.search(line) is not None or _APP_CUE.match(m.group()) is not None


_APP_CUE = re.compile(r"(?i)app[ _-]?password")


# ODBC's braced value after a password keyword: `}}` inside is a brace, the first lone `}` closes it (led by a
# `P` of either case, as `_APP_PASSWORD` is: `={` is common in code, so the pattern runs on much of it). At most
# 128 characters: unbounded, a line of `;Password={` without a `}` was read to its end from each.
_BRACED = re.compile(r"[Pp](?<![\w-][Pp])(?i:wd|assword)[ \t]*=[ \t]*\{(?P<v>(?:[^}\n]|\}\}){1,128})\}(?!\})")


def _braced(m: re.Match[str]) -> bool:
    """A value, not an interpolation (`{pw}`, `{0}`, `{config['pw']}`) or a template. The braces quote it, so
    blanks and `=` are its own (`value_ok` reads a blank as prose)."""
    inside = m.group("v").strip()
    return len(inside) >= 4 and not inside.isdigit() and not is_placeholder(inside, quoted=True) and \
        not identifier_only(inside) and not code_like(inside)


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


# A YAML line's password led by `#`, `!`, `&` or `*` (`db_password: #Qw9$z1Lm`, `DOCKER_PASSWORD: !PBpfot2A89Q2`,
# `password: &Qy8jHPJQ`): YAML would read a comment, a tag, an anchor or an alias there, so `pii_values` keeps
# such a value, but config dumps and generated passwords start with them. Only a value alone on its line (a
# comment may follow). Led by the colon (a `P`-led name was tried at every `p` of code, 7 ms a MB); the name
# before it is read from the line's start by `_yaml_led`.
_YAML_LED = re.compile(r":[ \t]+(?P<v>[#!&*][^\s\"']{7,100})(?=[ \t]+#|[ \t]*(?:\r?\n|$))")
# How YAML's own names look after `!` (a tag: `!GetAtt`, `!Base64`, `!ImportValue`) or `#` (a word): capitalised
# words and a number, never a generator's mix of cases and digits
# (`(?:[A-Z]?[a-z]+)+` backtracked 2^n; this is the same language, unambiguous. No possessive quantifiers here or
# below: CPython 3.11.2's engine gives wrong results for a possessive repeat of alternatives, fixed later in 3.11)
_WORDS_AND_NUMBER = re.compile(r"[A-Z]?[a-z]+(?:[A-Z][a-z]+)*\d*|[A-Z]+\d*")
_LINE_HEAD = re.compile(r"[ \t]*(?:-[ \t]+)?([\"']?)(?P<name>[\w.-]{1,60})\1[ \t]*")
_PASSWORD_WORD = re.compile(r"(?i)pass|pwd")


def _yaml_led(m: re.Match[str]) -> bool:
    """A generated password: the line opens with a password's name (`db_password`, not `password_hash`: a
    credential's, `is_credential_name`); after the lead lower case, upper case and a digit, not words and a
    number, no placeholder (`{{`, `${`, `changeme`), and no anchor or alias that the text uses as one (`&pw1X`
    with a `*pw1X`)."""
    text = m.string
    line_start = text.rfind("\n", 0, m.start()) + 1
    head = _LINE_HEAD.match(text, line_start, m.start())
    if head is None or head.end() != m.start():
        return False
    name = head.group("name")
    value = m.group("v")
    rest, core = value[1:], value.lstrip("#!&*")    # (`!!str` is a tag, `!!lk3HCliy` a password)
    if not (_PASSWORD_WORD.search(name) and is_credential_name(name)) or len(core) < 6 or \
            _WORDS_AND_NUMBER.fullmatch(core):
        return False
    if value[0] in "&*" and re.search(r"(?<![\w&*])[&*]" + re.escape(rest) + r"(?![\w-])",
                                      text[:m.start("v")] + text[m.end("v"):]):
        return False
    return any(c.islower() for c in core) and any(c.isupper() for c in core) and \
        any(c.isdigit() for c in core) and not is_placeholder(value, quoted=True)


# (pattern, validator, group, hint): `tasks.data.privacy.pii_secrets.SECRET_PASSES`' shape; run before those
# passes, which would take a piece (`...%3D` up to the first `%`) or leave the value whole
CREDENTIAL_PASSES = (
    (_PG_VERIFIER, _pg_verifier, 0, lambda text: "md5" in text or "SCRAM-SHA-256$" in text),
    (_ERLANG_COOKIE, _erlang_cookie, _cookie_span,
     lambda text: "ookie" in text or "OOKIE" in text),
    (_APP_PASSWORD, _app_password, _value_span, lambda text: "ass" in text or "ASS" in text or "wd" in text or
     "WD" in text),
    (_APP_PASSWORD_LINE, _app_password, _value_span, lambda text: "pp password" in text or "pp Password" in text or
     "ppPassword" in text or "pp-password" in text),
    (_BRACED, _braced, _value_span, lambda text: ("={" in text or "= {" in text) and
     ("wd" in text or "WD" in text or "ord" in text or "ORD" in text)),
    (_ENCODED_PARAM, _encoded_param, _value_span, lambda text: "%3D" in text or "%3d" in text),
    (_YAML_LED, _yaml_led, _value_span, lambda text: ": " in text or ":\t" in text),
)
