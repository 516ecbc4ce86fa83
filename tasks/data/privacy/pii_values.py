"""Where a credential's value ends, and whether it is one: the syntax around it decides (`tasks.data.privacy.pii_secrets`).

A secret is replaced whole or not touched, never cut: a value's extent is read from the syntax it sits in,
for any character that syntax allows in it —
- a quoted string (`"..."` with backslash escapes, `'...'` also with YAML's `''`): everything up to the
  closing quote, spaces included;
- an env/INI/YAML line (`NAME=value`, `name: value` opening the line): the rest of the line, spaces included,
  up to a ` #` comment (unless the line goes on as a list of `key=value` pairs);
- a URL query parameter (`?password=...`, `&token=...`): up to `&`, `#`, a space or a quote;
- a command-line flag (`--password=...`): a shell word, up to a space or a metacharacter (`;&|<>()`);
- a connection string's pair (`Server=db;User ID=sa;Password=...`: a `;keyword=` of ADO.NET/ODBC/Azure after it,
  or one before it and a `;` right before the name): up to its `;`, the line's end or the quote closing the
  string it sits in, spaces included; `{...}` braces (ODBC's quoting, `Pwd={a;b}`) to the closing brace;
- anywhere else (logs, prose, code): up to a space or the next `,key=`/`;key=`/`&key=` of
  a list, without a closing bracket or quote it does not open and a sentence's last `.`, `,`, `;` or `:` (at
  most 3 characters: a value that ends in them loses no run of 4).
`is_placeholder` tells templates and masks (whole-value forms: `${X}`, `$(cmd)`, `%s`, `%(pw)s`, `<key>`,
`{{ x }}`, `********`; example words) from values that merely start with `%`, `!`, `&`, `*` or `#`, which
generated passwords do: those count as YAML syntax (tag, anchor, alias, comment) only after a colon and in
YAML's own shapes. `value_ok` is the shape of a credential people write: letters plus digits or punctuation,
6-200 characters, spaces only where the pieces are not prose (two words of letters side by side).
"""

from __future__ import annotations

import math
import re
from collections import Counter
from functools import lru_cache
from typing import Callable, Iterable

QUOTES = "\"'"
_WHOLE = re.compile(r"(?s).+")  # a match of exactly a span: what the passes' `repl` callbacks take
_CLOSERS = {")": "(", "]": "[", "}": "{", ">": "<"}
# How code names things: snake_case, camelCase or UPPER_CASE words, digits only at the end (`api_key2`).
IDENTIFIER = r"[A-Za-z_]+\d*"    # (was `[A-Za-z_][a-z_]*(?:[A-Z]+[a-z_]*)*\d*`: the same strings, 2^n backtracking)
# Code rather than a value: an attribute chain of identifiers, digits only in the last part (`tokens.refresh_v2`,
# not `dragon78.y`); a call or an index (`get_pw(user)`, `request.form['pw']`, `str = ""` in a signature).
_CODE_CHAIN = re.compile(r"[A-Za-z_][A-Za-z_]*(?:\.[A-Za-z_][A-Za-z_]*)*\.[A-Za-z_][A-Za-z_]*\d*")
_CODE_IDENTIFIER = re.compile(IDENTIFIER)
_CODE_START = re.compile(r"[A-Za-z_][\w.]*(?:(?:[(\[][\w.,'\" =:-]*[)\]](?:\.\w+)*)+$"
                         r"| (?:=|==|!=|\+|-|or|and|if|else|\|\||&&)(?: |$))")
CODE_WORDS = frozenset({"none", "null", "nil", "true", "false", "undefined", "lambda", "self", "this", "required",
                        "optional", "string", "str", "bytes", "secret", "password", "token", "changeme", "test",
                        "admin", "hidden", "masked", "redacted", "notset", "empty", "default", "basic", "bearer",
                        "bot", "apikey", "sso-key", "key", "pass"})
_PLACEHOLDER_WORDS = ("your", "example", "changeme", "change_me", "change-me", "replace-me", "replace_me", "replaceme",
                      "placeholder", "redacted", "dummy", "xxxx", "****", "....", "getenv", "environ")
# Whole-value templates: `$VAR`, `${VAR}`, `$(cmd)`, `` `cmd` ``, `%s`, `%(pw)s`, `%PW%`, `%{pw}`, `<your-key>`,
# `{token}`, `{{ vault }}`, `[REDACTED]`, `(hidden)`; and values holding an interpolation (`pre-${ENV}-x`).
_TEMPLATE = re.compile(r"\$" + IDENTIFIER + r"|\$\{[^}]*\}|\$\(.*\)|`[^`]*`|%[sdifr]|%\(\w+\)[sdifr]|%[A-Za-z_]\w*%"
                       r"|%\{\w+\}|<[^<>]*>|\{\{?[^{}]*\}?\}|\[[^\[\]]*\]|\([^()]*\)")
_INTERPOLATION = re.compile(r"\$\{[A-Za-z_][\w.]{2,}\}|\{\{.*?\}\}|%\([A-Za-z_]\w*\)[sd]|#\{[A-Za-z_]\w{2,}\}")
_YAML_SYNTAX = re.compile(r"[&*][A-Za-z_][\w-]*|![\w!/.-]*|[|>][+-]?\d*|#.*")      # after a colon, unquoted
# A word and one mark that is syntax or prose, not a password's symbol: a TypeScript field's type or a JavaScript
# object's variable (`password: string;`, `password: userPassword,`), GraphQL's non-null scalar (`password:
# String!`), a form's question (`Password: Forgotten?`); letters only (`Tr0ub4dor;` stays a value)
_WORD_AND_MARK = re.compile(r"[A-Za-z]+[;,?]|(?:String|Int|Float|Boolean|ID)!")
_WORDY = re.compile(r"(?=(?:\D*[^\W\d_]){2})\D+")            # two letters or more, no digit
_OPENS_CODE = re.compile(r"[A-Za-z_]\w*(?:\.[A-Za-z_]\w*)*[(\[]|[(\[{`]")
# A generator's password: both cases, a digit, a symbol not right after a bracket (`f(*args`, `md5($Salt1` are code)
_GENERATED = re.compile(r"(?=.*[a-z])(?=.*[A-Z])(?=.*\d)(?=.*(?<![(\[{])[!@#%^&*~+=?$])[^'\"`\s]{8,}")
_PATH = re.compile(r"(?:~|\.{1,2})?(?:/[\w.-]+)+/?|[A-Za-z]:\\[\w.\\ -]*")
_RANDOM_PART = re.compile(r"^(?=.*\d)(?=.*[A-Z])")
LIST_KEY = re.compile(r"[,;&][A-Za-z_][\w.-]{0,40}=")      # the next pair of a `k=v,k=v` / `k=v;k=v` list
# The keywords of ADO.NET, ODBC, JDBC-style and Azure connection strings (case-insensitive; `User ID` with its
# space): after a `;`, one of them opens the next pair, so a value before it ends at that `;`.
_CONNECTION_KEYWORDS = (r"(?i:server|data[ ]?source|address|addr|network[ ]address|host(?:name)?|port|database|"
                        r"initial[ ]catalog|user(?:[ ]?id|[ ]?name)?|uid|integrated[ ]security|trusted_connection|"
                        r"persist[ ]security[ ]info|encrypt|trust[ ]?server[ ]?certificate|driver|dsn|provider|"
                        r"connect(?:ion)?[ ]?timeout|timeout|pooling|m(?:in|ax)[ ]pool[ ]size|application[ ]?name|"
                        r"multipleactiveresultsets|ssl[ ]?mode|charset|account(?:name|key)|"
                        r"defaultendpointsprotocol|endpointsuffix|endpoint|sharedaccesskey(?:name)?|entitypath)")
CONNECTION_KEY = re.compile(r";[ \t]*" + _CONNECTION_KEYWORDS + r"[ \t]*=(?!=)")
_CONNECTION_FIRST = re.compile(r"(?<![\w.-])" + _CONNECTION_KEYWORDS + r"[ \t]*=(?!=)")


def quoted_value(text: str, at: int) -> tuple[int, int] | None:
    """The inside of the quoted string opening at text[at] (backslash escapes; `''` inside single quotes), on
    one line and at most 400 characters; None when it does not close."""
    quote, k, stop = text[at], at + 1, min(len(text), at + 402)
    while k < stop:
        c = text[k]
        if c == "\n":
            return None
        if c == "\\":
            k += 2
            continue
        if c == quote:
            if quote == "'" and text[k + 1:k + 2] == "'":
                k += 2
                continue
            return at + 1, k
        k += 1
    return None


def run_end(text: str, at: int, stops: str = "", limit: int = 400) -> int:
    """The end of the run of non-space characters (none of `stops`) starting at text[at], at most `limit` long."""
    return _run_of(stops).match(text, at, min(len(text), at + limit)).end()


@lru_cache(maxsize=4)
def _connection_run(quote: str) -> re.Pattern[str]:
    return re.compile(f"[^;\\n{quote}]*")


@lru_cache(maxsize=16)
def _run_of(stops: str) -> re.Pattern[str]:
    # A `\n`/`\t`/`\r` ends the run: the escape of the string the value sits in (a JSON log's message, an
    # iCalendar TEXT line), not the value's; `\\` is one escaped backslash and goes on.
    return re.compile(f"(?:[^\\s\\\\{re.escape(stops)}]|\\\\\\\\|\\\\(?![ntr]))*")


def trim_end(text: str, start: int, end: int) -> int:
    """`end` moved back over at most 4 things the value does not own: a closing bracket or quote it does not
    open (`f(password=pw1)`, `msg="password=pw1"`), an escape `\\n`/`\\t`/`\\r` of the string it sits in and, once,
    a sentence's last `.`, `,`, `;` or `:` — or a `!` or `?` after such a closer (`` `PASSWORD=x1`! ``; a password
    may end with `!`). Closers before the sentence's mark are trimmed too: `` Run `PASSWORD=x1`. `` took the
    Markdown's closing backtick."""
    sentence = False
    for _ in range(4):
        value, last = text[start:end], text[end - 1:end]
        if last in _CLOSERS and value.count(last) > value.count(_CLOSERS[last]) or \
                last and last in QUOTES + "`" and value.count(last) % 2:
            end -= 1
        elif last and last in "nrt" and end - start > 3 and text[end - 2] == "\\" and text[end - 3] != "\\":
            end -= 2        # the escape of the string the value sits in (`"f(api_key=x1)\n"`), not the value's
        elif not sentence and last and last in ".,;:" and end - start > 1:
            end, sentence = end - 1, True
        elif not sentence and last and last in "!?" and end - start > 2 and trim_end(text, start, end - 1) < end - 1:
            end, sentence = end - 1, True
        else:
            break
    return end


def list_end(text: str, start: int, end: int) -> int:
    """`end`, or where the next `key=` of a list begins inside [start, end)."""
    found = LIST_KEY.search(text, start, end)
    return found.start() if found else end


def in_connection_string(text: str, name_start: int, at: int) -> bool:
    """Whether the pair whose name starts at `name_start` (its value at `at`) is one of a connection string's
    (`Server=db;User ID=sa;Password=...`): a `;keyword=` follows on its line, or a `;` leads the name and a
    keyword's pair comes before it on the line."""
    # Neither pattern spans a line break, so the first match in the rest of the text tells, and it is
    # remembered (`next_match`): searched anew per name, a long line of `password=` pairs took quadratic time.
    after = next_match(CONNECTION_KEY, text, at)
    if after is not None and text.find("\n", at, after.start()) < 0:
        return True
    line_start, k = text.rfind("\n", 0, name_start) + 1, name_start
    while k > line_start and text[k - 1] in " \t":
        k -= 1
    if k == line_start or text[k - 1] != ";":
        return False
    first = next_match(_CONNECTION_FIRST, text, line_start)     # (a keyword's pair ends with `=`, never at `;`)
    return first is not None and first.end() < k


_NEXT: dict[int, tuple[str, int, re.Match[str] | None]] = {}     # by the pattern's id (hashing one hashes its code)


def next_match(pattern: re.Pattern[str], text: str, pos: int) -> re.Match[str] | None:
    """`pattern.search(text, pos)`, remembered for the last text: a later `pos` before the match found reuses
    it, so names read left to right search each stretch of a long line once."""
    seen = _NEXT.get(id(pattern))
    if seen is not None and seen[0] is text and seen[1] <= pos and (seen[2] is None or seen[2].start() >= pos):
        return seen[2]
    found = pattern.search(text, pos)
    _NEXT[id(pattern)] = (text, pos, found)
    return found


def connection_value(text: str, name_start: int, at: int) -> tuple[int, int, bool]:
    """A connection string's value at `at` (`;`-separated pairs): a `{...}`-braced one (ODBC's quoting, `}}`
    inside) to its closing brace, else up to its `;`, the line's end or the quote that closes the string the
    connection string sits in (one left open before the name). A braced identifier or expression is an
    interpolation (`$"...Password={pw};"`), no value."""
    if text[at] == "{" and (close := next_match(_BRACE_CLOSE, text, at + 1)) is not None and close.group() != "\n":
        k = close.end() - 1
        inside = text[at + 1:k]
        return at + 1, k, value_ok(inside, quoted=True) and not identifier_only(inside) and not code_like(inside)
    line_start = text.rfind("\n", 0, name_start) + 1
    # (counted and searched with what earlier names on the line found: `_count_from`, `next_match`)
    quote = next((q for q in QUOTES if _count_from(text, q, line_start, name_start) % 2), "")
    end = _connection_run(quote).match(text, at, min(len(text), at + 200)).end()
    while end > at and text[end - 1] in " \t\r":
        end -= 1
    value = text[at:end]
    # inside a string, opening its line (`Password=ab12;Server=x`) or in a JDBC URL (`jdbc:sqlserver://h;password=`)
    # it is no variable's name
    url = next_match(_URL_MARK, text, line_start)
    return at, end, value_ok(value) and (quote != "" or _SPACES.match(text, line_start, name_start).end() == name_start
                                         or url is not None and url.end() <= name_start
                                         or not identifier_only(value))


# ODBC's closing brace: the last of a run of `}` of odd length (`}}` inside is an escaped brace); a line break
# first: none. Found with `next_match`, so a long line of `Pwd={` without one is searched once.
_BRACE_CLOSE = re.compile(r"\n|(?<!\})(?:\}\})*\}(?!\})")
_URL_MARK = re.compile("://")
_SPACES = re.compile(r"\s*")
_COUNTS: dict[str, tuple[str, int, int, int]] = {}


def _count_from(text: str, char: str, start: int, end: int) -> int:
    """`text.count(char, start, end)`, going on from the last count for the same text and start (names read left
    to right on one long line count each stretch once)."""
    seen = _COUNTS.get(char)
    if seen is not None and seen[0] is text and seen[1] == start and seen[2] <= end:
        n = seen[3] + text.count(char, seen[2], end)
    else:
        n = text.count(char, start, end)
    _COUNTS[char] = (text, start, end, n)
    return n


def shannon_entropy(value: str) -> float:
    n = len(value)
    return -sum(c / n * math.log2(c / n) for c in Counter(value).values()) if n else 0.0


def looks_random(value: str) -> bool:
    """Heuristic for a generated credential (not an identifier, a path or an English compound)."""
    if len(value) < 16 or sum(ch.isdigit() for ch in value) < 2 or shannon_entropy(value) < 3.0:
        return False
    if not any(ch.isalpha() for ch in value) or re.fullmatch(r"[A-Za-z_]\w*(?:\.[A-Za-z_]\w*)+", value):
        return False
    mixed_case = any(ch.isupper() for ch in value) and any(ch.islower() for ch in value)
    hexish = re.fullmatch(r"[0-9a-f]+|[0-9A-F]+", value) is not None
    lower_or_upper = re.fullmatch(r"[0-9a-z]{20,}|[0-9A-Z]{20,}", value) is not None
    return mixed_case or hexish or lower_or_upper


def is_placeholder(value: str, quoted: bool = False, yaml: bool = False) -> bool:
    """A template, mask or example standing where a credential would go (`${TOKEN}`, `********`, `YOUR_KEY`);
    `yaml`: an unquoted value after a colon, where `&x`, `*x`, `!tag`, `|`, `>` and `#...` are YAML's syntax."""
    low = value.lower()
    if not value or low in CODE_WORDS or len(set(low)) == 1 or (yaml and _YAML_SYNTAX.fullmatch(value)):
        return True
    if _TEMPLATE.fullmatch(value) or value.startswith(("$(", "${")) or _INTERPOLATION.search(value):
        return True
    if not quoted and re.fullmatch(r"[A-Z]+(?:_[A-Z0-9]+)*", value):         # YOUR_API_KEY, an env var's name
        return True
    if masked_after_prefix(value):
        return True
    return any(part in low for part in _PLACEHOLDER_WORDS)


_MASKED_AFTER_PREFIX = re.compile(r"(?:[A-Za-z0-9]{1,12}[_-]){1,2}(?:\.{3,}|…|X{4,}|x{4,}|\*{4,}|#{4,})")
# A prefix run together with one character repeated to the end (`AKIAXXXXXXXXXXXXXXXX`, `ASIA0000000000000000`):
# a key shape's fixed length takes the mask whole, and no random key ends in eight equal characters.
_REPEATED_AFTER_PREFIX = re.compile(r"[A-Za-z0-9]{1,12}?[_.-]?(.)\1{7,}")


def masked_after_prefix(value: str, glued: bool = False) -> bool:
    """A vendor's prefix and a mask, as documentation writes a key: `sk-...`, `hf_…`, `sk_test_XXXXXXXX`; with
    `glued`, also a known key shape's prefix and one repeated character (`AKIAXXXXXXXXXXXXXXXX`)."""
    return _MASKED_AFTER_PREFIX.fullmatch(value) is not None or \
        glued and _REPEATED_AFTER_PREFIX.fullmatch(value) is not None


def prose_like(value: str) -> bool:
    """Two pieces side by side with two letters or more and no digit each (`at least 8 characters`, `The
    "pass" statement`): text, no secret."""
    pieces = value.split()
    return any(_WORDY.fullmatch(a) and _WORDY.fullmatch(b) for a, b in zip(pieces, pieces[1:]))


def code_like(value: str) -> bool:
    """An unquoted value that reads as code: an attribute chain, a call or an index (`getpass.getpass('Pass`: a
    value ends at a space, a call need not close in it), a bracket or backtick opening it, an assignment or an
    operator; not a generated password that has a bracket among its symbols (`r(5Dr)uO$3`, `B(6j$BNpeQ`)."""
    if _CODE_CHAIN.fullmatch(value) is not None or _CODE_START.match(value) is not None:
        return True
    return _OPENS_CODE.match(value) is not None and not _GENERATED.fullmatch(value)


def value_ok(value: str, quoted: bool = False, yaml: bool = False, literal: bool = False) -> bool:
    """A credential's value as people write them: 6-200 characters, letters plus digits or punctuation; spaces
    only between pieces that are not prose; not a placeholder, a path or a URL (URL credentials have their own
    pass), and unquoted not code (unless `literal`: a URL query's or a flag's value is no expression)."""
    if len(value) < 6 or len(value) > 200 or is_placeholder(value, quoted, yaml) or _WORD_AND_MARK.fullmatch(value):
        return False
    if any(c.isspace() for c in value) and (prose_like(value) or value != value.strip() or "\n" in value):
        return False
    if "://" in value or path_like(value):
        return False
    if not (quoted or literal) and (code_like(value) or " " in value and _unquoted_code(value.split()[0])):
        return False
    has_letter = any(c.isalpha() for c in value)
    return has_letter and any(c.isdigit() or not (c.isalnum() or c == "_") for c in value)


def _unquoted_code(first: str) -> bool:
    """The first piece of an unquoted value with spaces: a name or code (`str | None = None`, `Optional[str] =
    None`, `get(x) or y`) makes the whole an expression, not a passphrase."""
    return identifier_only(first) or code_like(first) or re.fullmatch(r"[A-Za-z_][\w.]*[(\[].*", first) is not None


def path_like(value: str) -> bool:
    """A file path (`/etc/app/pw.txt`, `~/.ssh/id_rsa`, `C:\\keys\\a.pem`): a pointer to a secret, not one.
    Every part has two letters or more and none mixes digits and capitals (`/Rfr9CH3i/9TJr` is a generated
    password that starts with `/`)."""
    if not _PATH.fullmatch(value):
        return False
    parts = [p for p in re.split(r"[/\\]", value)
             if p and p not in ("~", ".", "..") and not re.fullmatch("[A-Za-z]:", p)]      # (a drive: `C:`)
    return all(len(re.findall(r"[A-Za-z]", p)) >= 2 and not _RANDOM_PART.search(p) for p in parts)


def identifier_only(value: str) -> bool:
    """Named the way code names variables (`pw2`, `db_password`): a value only where it opens a line (.env)."""
    return _CODE_IDENTIFIER.fullmatch(value) is not None


def span_match(text: str, start: int, end: int) -> re.Match[str]:
    """A match object of exactly text[start:end] (non-empty), the argument a pass's `repl` callback takes."""
    match = _WHOLE.fullmatch(text, start, end)
    if match is None:
        raise ValueError(f"an empty span at {start}")
    return match


def replace_spans(text: str, spans: Iterable[tuple[int, int]], repl: Callable[[re.Match[str]], str]) -> str:
    """`text` with each (start, end) span, in ascending order, replaced by `repl(span_match(...))`; a span that
    starts inside one already replaced is left out."""
    out, last = [], 0
    for start, end in spans:
        if start >= last:
            out += (text[last:start], repl(span_match(text, start, end)))
            last = end
    return "".join(out) + text[last:] if out else text


_LABEL = re.compile(r"""(?:["']?([\w.-]{1,40})["']?[ \t]*(?:=>|[:=])|([\w.]{1,40})\()[ \t\r\n]*$""")


def enclosing_labels(text: str, at: int, levels: int = 2, limit: int = 1500) -> list[str]:
    """The labels of the `{`/`[` containers open at `at` (JSON or a script's literal), innermost first, at most
    `levels`: the key a container is the value of (`"cookies": [` → `cookies`) or the call it is the argument of
    (`add_cookie({` → `add_cookie`), "" for neither. Brackets inside strings are not told apart: a pair's context
    is a hint read at most `limit` characters back, never a parse."""
    labels, depth, k, floor = [], 0, at - 1, max(0, at - limit)
    while k >= floor and len(labels) < levels:
        c = text[k]
        if c in "}]":
            depth += 1
        elif c in "{[":
            if depth:
                depth -= 1
            else:
                label = _LABEL.search(text, max(0, k - 60), k)
                labels.append("" if label is None else (label.group(1) or label.group(2)).rsplit(".", 1)[-1])
        k -= 1
    return labels
