"""Instruction conversations: reading the sources, the format check and the per-conversation filters.

Sources (`read_source`) yield `Conversation` (raw turns, not yet checked) or `Rejected` (a line that could not
become one, with its line number). Everything is read in a fixed order and ids come from names, so equal
inputs give equal outputs on every machine:
- chatterbot: `chatterbot_corpus/data/english/*.yml` (chatterbot-corpus==1.3.3, located with `find_spec`,
  never imported). Each conversation is a chain of statements, each answering the previous one, so it becomes
  alternating user/assistant turns; a trailing statement nobody answers is left off (a chat ends on an answer).
- docstrings: public functions, classes and methods of the public stdlib modules, found by parsing the
  sources with `ast` (nothing is imported, so no module's import side effects run): "What does `json.dumps`
  do?" -> the docstring's leading paragraphs (up to ANSWER_CHARS).
- pydoc_topics: each section of the `pydoc_data.topics` help texts: "Explain the `assert` statement in
  Python." -> the section's leading paragraphs.
- files: jsonl lines holding a chat (`messages`: [{role, content}]) or a pair (`prompt`, `response`, optional
  `system`); bad lines are `Rejected` with `file:line` and the error, never raised.

`check_format` turns a conversation into `Turns` (or the reason it cannot); the per-conversation filters that
follow it are Filters in `tasks/data/curation/instruct_filters.py`.
"""

from __future__ import annotations

import ast
import importlib.util
import re
from collections.abc import Iterator
from dataclasses import dataclass, field
from functools import lru_cache
from pathlib import Path
from typing import Any

import yaml

from specs.instruct import EmbeddedInstructSource, FilesInstructSource, FilterSpec, InstructFieldMap
from tasks.data.curation.streaming import key_twice
from tasks.data.embedded import read_embedded
from tasks.data.formats.paths import expand_paths
from tasks.data.formats.json_lines import json_lines
from tasks.data.cleanup.normalize import normalize_text
from tasks.data.records import Doc, unicode_error, valid_unicode

ROLES = ("system", "user", "assistant")
ANSWER_CHARS = 1_200        # embedded answers keep whole leading paragraphs up to about this many characters
EXCERPT_CHARS = 300         # text shown per ledger row
PARSE_LABELS = {"invalid_utf8": "invalid UTF-8", "invalid_json": "invalid JSON"}   # json_lines' issues, as ledgered
CHATTERBOT_PIN = "chatterbot-corpus==1.3.3"

_ROLE = re.compile(r":[\w:.-]+:`~?([^`]+)`")           # reST roles such as :func:`json.dumps`
_HEADING_RULE = re.compile(r"^([*=\-~^])\1{2,}$")
_LINE_BREAK = re.compile(r"\n(?!\s*(?:[-*+•]|\d+[.)])\s)")    # a hard wrap, not the start of a list item


@dataclass
class Conversation:
    """One candidate conversation: `messages` as read (checked by `check_format`), id "<source>/<key>"."""

    id: str
    source: str
    messages: Any
    origin: str

    def excerpt(self) -> str:
        if isinstance(self.messages, list):
            text = " | ".join(f"{m.get('role')}: {m.get('content')}" if isinstance(m, dict) else repr(m)
                              for m in self.messages)
        else:
            text = repr(self.messages)
        return valid_unicode(text[:EXCERPT_CHARS])   # the ledger is Parquet: a lone surrogate is shown escaped


@dataclass
class Rejected:
    """Input that never became a conversation (unparseable line), ledgered under filter `parse`."""

    id: str
    source: str
    reason: str
    excerpt: str = ""


@dataclass
class Turns:
    """A conversation that passed `check_format`: normalized turns and the texts the filters read."""

    messages: list[dict[str, str]]
    prompt: str = field(init=False)      # user turns, joined
    response: str = field(init=False)    # assistant turns, joined

    def __post_init__(self) -> None:
        self.prompt = "\n".join(m["content"] for m in self.messages if m["role"] == "user")
        self.response = "\n".join(m["content"] for m in self.messages if m["role"] == "assistant")

    def exchanges(self) -> list[tuple[str, str]]:
        """(user turn, the assistant turn answering it) pairs."""
        body = [m for m in self.messages if m["role"] != "system"]
        return [(body[i]["content"], body[i + 1]["content"]) for i in range(0, len(body) - 1, 2)]


# --- sources ----------------------------------------------------------------------------------------------

def read_source(src: EmbeddedInstructSource | FilesInstructSource, root: Path) -> Iterator[Conversation | Rejected]:
    if isinstance(src, FilesInstructSource):
        return _files(src, root)
    readers = {"chatterbot": _chatterbot, "docstrings": _docstrings, "pydoc_topics": _pydoc_topics}
    return readers[src.corpus](src.name)


def _pair(source: str, key: str, prompt: str, answer: str, origin: str) -> Conversation:
    return Conversation(f"{source}/{key}", source, [{"role": "user", "content": prompt},
                                                     {"role": "assistant", "content": answer}], origin)


def chatterbot_dir() -> Path:
    try:
        spec = importlib.util.find_spec("chatterbot_corpus")  # finds the package without importing it
    except (ImportError, ValueError):
        spec = None
    if spec is None or not spec.submodule_search_locations:
        raise RuntimeError(f"instruct source `chatterbot` needs {CHATTERBOT_PIN}: "
                           f"`pip install --no-deps {CHATTERBOT_PIN}`")
    return Path(next(iter(spec.submodule_search_locations))) / "data" / "english"


def _chatterbot(source: str) -> Iterator[Conversation | Rejected]:
    for path in sorted(chatterbot_dir().glob("*.yml")):
        # libyaml's loader when present: ~10× faster than the pure-Python one, same result for safe YAML.
        data = yaml.load(path.read_text(encoding="utf-8"), Loader=getattr(yaml, "CSafeLoader", yaml.SafeLoader))
        data = data if isinstance(data, dict) else {}
        for n, chain in enumerate(data.get("conversations") or [], start=1):
            key, origin = f"{path.stem}-{n:04d}", f"chatterbot_corpus:english/{path.name}#{n}"
            if not isinstance(chain, list):
                yield Rejected(f"{source}/{key}", source, f"{origin}: conversation is not a list", repr(chain)[:300])
                continue
            # YAML may type "42" as an int: scalars become text; anything else is left for check_format.
            turns = [str(s) if isinstance(s, (int, float)) and not isinstance(s, bool) else s for s in chain]
            turns = turns[: len(turns) - len(turns) % 2]            # a chat ends on an answer
            messages = [{"role": ("user", "assistant")[i % 2], "content": t} for i, t in enumerate(turns)]
            yield Conversation(f"{source}/{key}", source, messages, origin)


def fence_code(text: str) -> str:
    """Docstring/reST text to chat Markdown: paragraphs whose lines are all indented, that start a doctest
    (`>>>`) or draw a table (`+--`, `|`) become ``` fenced blocks; other paragraphs are unwrapped (hard line
    breaks become spaces) except before list items."""
    out = []
    for para in re.split(r"\n\s*\n", text.strip("\n")):
        lines = para.split("\n")
        first = lines[0].lstrip()
        if first.startswith((">>>", "+-", "|")) or all(line.startswith("   ") for line in lines):
            indent = min(len(line) - len(line.lstrip()) for line in lines)
            out.append("```\n" + "\n".join(line[indent:] for line in lines) + "\n```")
        else:
            out.append(_LINE_BREAK.sub(" ", "\n".join(line.strip() for line in lines)))
    return "\n\n".join(out)


def _lead(text: str, budget: int = ANSWER_CHARS) -> str:
    """Whole leading paragraphs up to `budget` characters (always at least the first one)."""
    paras = [p for p in fence_code(text).split("\n\n") if p.strip()]
    taken: list[str] = []
    for p in paras:
        if taken and sum(map(len, taken)) + len(p) > budget:
            break
        taken.append(p)
    return "\n\n".join(taken)


@lru_cache(maxsize=1)
def _stdlib_docstrings() -> tuple[tuple[str, str, str, str], ...]:
    """(qualified name, kind, docstring, origin) of public stdlib definitions; parsed once per process."""
    found = []
    for doc in read_embedded("code"):
        module = doc.meta["module"] if isinstance(doc, Doc) else ""
        if not module or any(part.startswith("_") for part in module.split(".")):
            continue
        try:
            tree = ast.parse(doc.text)
        except (SyntaxError, ValueError):
            continue  # a stdlib file for another Python version; not instruction material
        for node in tree.body:
            public = not getattr(node, "name", "_").startswith("_")
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)) and public:
                kind = "class" if isinstance(node, ast.ClassDef) else "function"
                found.append((f"{module}.{node.name}", kind, ast.get_docstring(node) or "", doc.origin))
                for sub in node.body if kind == "class" else ():
                    if isinstance(sub, (ast.FunctionDef, ast.AsyncFunctionDef)) and not sub.name.startswith("_"):
                        found.append((f"{module}.{node.name}.{sub.name}", "method", ast.get_docstring(sub) or "",
                                      doc.origin))
    # A name defined twice (e.g. a fallback `def` after a try/except import) keeps its last definition:
    # that is the one the module exports.
    return tuple({name: (name, *rest) for name, *rest in found}.values())


def _markdown_roles(text: str) -> str:
    """reST inline markup to Markdown: :func:`x` and ``x`` become `x`."""
    return _ROLE.sub(r"`\1`", text).replace("``", "`")


def _docstrings(source: str) -> Iterator[Conversation]:
    questions = {"function": "What does `{}` do?", "class": "What is the `{}` class for?",
                 "method": "What does the `{}` method do?"}
    for name, kind, docstring, origin in _stdlib_docstrings():
        if docstring.strip():  # an undocumented definition has no answer to give
            yield _pair(source, name, questions[kind].format(name), _lead(_markdown_roles(docstring)),
                        f"{origin}#{name}")


def topic_sections(text: str) -> list[tuple[list[str], str]]:
    """Split a pydoc topic into (heading path, body) sections; headings are underlined with * = - ~ ^."""
    lines = text.split("\n")
    levels: list[str] = []              # underline characters in order of first use: reST's level rule
    path: list[str] = []
    sections: list[tuple[list[str], list[str]]] = []
    i = 0
    while i < len(lines):
        nxt = lines[i + 1] if i + 1 < len(lines) else ""
        if lines[i].strip() and _HEADING_RULE.match(nxt) and len(nxt) >= len(lines[i].rstrip()):
            if nxt[0] not in levels:
                levels.append(nxt[0])
            depth = levels.index(nxt[0])
            path = path[:depth] + [lines[i].strip()]
            sections.append((list(path), []))
            i += 2
            continue
        if sections:
            sections[-1][1].append(lines[i])
        i += 1
    return [(p, "\n".join(body).strip("\n")) for p, body in sections]


def _pydoc_topics(source: str) -> Iterator[Conversation]:
    from pydoc_data.topics import topics  # the stdlib's own help texts

    def title(t: str) -> str:  # mid-sentence: "Basic customization" -> "basic customization"
        t = re.sub(r'"([^"]+)"', r"`\1`", t)
        return t[0].lower() + t[1:] if re.match(r"[A-Z][a-z]+\b", t) else t

    for topic in sorted(topics):
        for n, (headings, body) in enumerate(topic_sections(topics[topic]), start=1):
            if not body.strip():
                continue  # a heading directly followed by its subsections
            where = f" ({title(headings[0])})" if len(headings) > 1 else ""
            prompt = f"Explain {title(headings[-1])}{where} in Python."
            yield _pair(source, f"{topic}#{n}", prompt, _lead(body), f"stdlib:pydoc_data/topics.py#{topic}")


def _files(src: FilesInstructSource, root: Path) -> Iterator[Conversation | Rejected]:
    """Lines of the source's files, listed by ingest's path rules: a link found in a folder or glob that leads
    out of it is ledgered and never opened (its lines would reach the ledger's excerpts)."""
    seen: dict[str, str] = {}           # id -> where it was first seen (ids must be unique)
    for listed in expand_paths(src.paths, root, src.name):
        path = listed.path
        try:
            shown = path.relative_to(root.resolve()).as_posix()
        except ValueError:
            shown = path.as_posix()
        shown = valid_unicode(shown)  # a file name that is not UTF-8 (bytes as surrogates): `\xNN`, a writable id
        if listed.refused:
            yield Rejected(f"{src.name}/{shown}", src.name, f"{shown}: {listed.refused}")
            continue
        try:
            yield from _conversations(src, path, shown, seen)
        except OSError as exc:
            yield Rejected(f"{src.name}/{shown}", src.name, f"{shown}: unreadable file ({exc.strerror or exc})")


def _conversations(src: FilesInstructSource, path: Path, shown: str, seen: dict[str, str]
                   ) -> Iterator[Conversation | Rejected]:
    """One file's lines, streamed and parsed by `json_lines` (one line held at a time, a line over the source's
    `max_line_bytes` rejected unread, a damaged compressed file ended by one rejected line)."""
    for entry in json_lines(path, src.max_line_bytes, f"max_line_bytes of instruct source {src.name!r}"):
        lineno, obj, line = entry.number, entry.value, entry.text
        where = f"{shown}:{lineno}"
        if entry.issue is not None:
            label = PARSE_LABELS.get(entry.issue)
            yield Rejected(f"{src.name}/{where}", src.name, f"line {lineno} of {shown}: " + (
                f"{label} ({entry.detail})" if label else f"{entry.issue}: {entry.detail}"), line[:EXCERPT_CHARS])
            continue
        f = src.fields
        if isinstance(obj, dict) and (twice := key_twice(entry.data, (f.messages, f.prompt, f.response, f.system,
                                                                      f.id))):
            yield Rejected(f"{src.name}/{where}", src.name, f"line {lineno} of {shown}: invalid JSON (key "
                           f"{twice!r} appears more than once in the object)", line[:EXCERPT_CHARS])
            continue
        messages = _messages_of(obj, src.fields)
        if isinstance(messages, str):
            yield Rejected(f"{src.name}/{where}", src.name, f"line {lineno} of {shown}: {messages}",
                           line[:EXCERPT_CHARS])
            continue
        key = where
        if src.fields.id is not None:
            value = obj.get(src.fields.id)
            if not (isinstance(value, (str, int)) and not isinstance(value, bool) and str(value).strip()):
                yield Rejected(f"{src.name}/{where}", src.name, f"line {lineno} of {shown}: id field "
                               f"{src.fields.id!r} must be a non-empty string or integer, got {value!r}"[:300],
                               line[:EXCERPT_CHARS])
                continue
            key = str(value).strip()
            if (why := unicode_error(key)) is not None:   # {"uid": "\ud800"}: the id is hashed and written
                yield Rejected(f"{src.name}/{where}", src.name, f"line {lineno} of {shown}: id field "
                               f"{src.fields.id!r} is {why}", line[:EXCERPT_CHARS])
                continue
        if f"{src.name}/{key}" in seen:
            yield Rejected(f"{src.name}/{where}", src.name, f"line {lineno} of {shown}: duplicate id "
                           f"{key!r} (first at {seen[f'{src.name}/{key}']})", line[:EXCERPT_CHARS])
            continue
        seen[f"{src.name}/{key}"] = where
        yield Conversation(f"{src.name}/{key}", src.name, messages, where)


def _messages_of(obj: Any, fields: InstructFieldMap) -> list | str:
    """The turns of one jsonl object (a chat, or a pair made into one), or why there are none."""
    if not isinstance(obj, dict):
        return f"expected a JSON object, got {type(obj).__name__}"
    if fields.messages in obj:
        return obj[fields.messages] if isinstance(obj[fields.messages], list) else \
            f"field {fields.messages!r} must be a list of turns, got {type(obj[fields.messages]).__name__}"
    if fields.prompt in obj and fields.response in obj:
        system = obj.get(fields.system) if fields.system else None
        return ([{"role": "system", "content": system}] if system is not None else []) + [
            {"role": "user", "content": obj[fields.prompt]}, {"role": "assistant", "content": obj[fields.response]}]
    return f"needs {fields.messages!r} or both {fields.prompt!r} and {fields.response!r}"


# --- format -----------------------------------------------------------------------------------

def check_format(messages: Any, spec: FilterSpec) -> Turns | str:
    """Valid roles and turn order (optional leading system turn, then user/assistant alternating, ending on
    assistant), non-empty text content that UTF-8 can store; returns normalized turns, or the reason they are
    invalid."""
    if not isinstance(messages, list) or not messages:
        return "no turns"
    turns: list[dict[str, str]] = []
    for i, m in enumerate(messages, start=1):
        if not isinstance(m, dict) or not isinstance(m.get("role"), str) or "content" not in m:
            return f"turn {i} is not a {{role, content}} object"
        if m["role"] not in ROLES:
            return f"turn {i} has role {m['role']!r}; expected one of {', '.join(ROLES)}"
        if not isinstance(m["content"], str):
            return f"turn {i} content is {type(m['content']).__name__}, not text"
        if (why := unicode_error(m["content"])) is not None:   # a JSON "\ud800" escape: no UTF-8 holds it
            return f"turn {i} content is {why}"
        content = normalize_text(m["content"], "NFC")
        if not content.strip():
            return f"turn {i} ({m['role']}) is empty"
        turns.append({"role": m["role"], "content": content})
    body = turns[1:] if turns[0]["role"] == "system" else turns
    want = [("user", "assistant")[i % 2] for i in range(len(body))]
    if [t["role"] for t in body] != want:
        got = " → ".join(t["role"] for t in body)
        return f"turns must alternate user → assistant after an optional system turn, got {got}"
    if len(body) < 2 or len(body) % 2:
        return "a conversation needs a user turn answered by an assistant turn, and must end on the answer"
    if len(body) > spec.max_messages:
        return f"{len(body)} turns exceed max_messages = {spec.max_messages}"
    return Turns(turns)
