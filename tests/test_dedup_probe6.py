"""Near dedup of the copies a sixth blind probe left over: UTF-8 read as another single-byte code page than cp1252
(Cyrillic as cp1251 `РїСЂРёРІРµС‚` or KOI8-R, Polish as cp1250, French as Mac Roman `caf√©`; `mojibake`), LaTeX
source against the text it typesets (`linkforms.read_latex`), and a PDF page of two columns side by side as
`pdftotext -layout` writes it (`lineprefix.read_columns`). Each copy below was J < 0.8 with its original before and
is found now, by clean's in-memory and real paths; distinct documents in the same forms stay apart (other mojibake
texts, texts written in those scripts, LaTeX papers sharing a preamble, tables and aligned code), and the compiled
path equals the definition on text made of these pieces."""

from __future__ import annotations

import codecs
import textwrap
import time

import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

from tasks.data.dedup.lineprefix import read_columns
from tasks.data.dedup.linkforms import read_latex
from tasks.data.dedup.mojibake import read_mojibake
from tasks.data.dedup.textforms import format_docs, read_formats
from specs.clean import DedupSpec
from tests.helpers.shingle_definition import (assert_compiled_path_is_the_definition,
                                              assert_scan_finds_every_changed_text)
from tests.test_dedup_folds import RU, assert_copies_removed, assert_near_copy, jaccard
from tests.test_dedup_probe4 import DE, FR
from tests.test_dedup_probe5 import OTHER, POST, REGEX_CODE

# a byte a page leaves undefined reads as its C1 control, as browsers (WHATWG's windows-125x) read it
codecs.register_error("probe6_c1", lambda e: (e.object[e.start:e.end].decode("latin-1"), e.end))

# invented prose: a news item in Polish, a second Russian text
PL = ("Rada miasta zdecydowała we wtorek wieczorem o remoncie biblioteki dzielnicowej, zamkniętej od zeszłego lata z "
      "powodu przeciekającego dachu. Prace rozpoczną się wiosną i potrwają około ośmiu miesięcy. W tym czasie "
      "czytelnicy będą mogli wypożyczać książki w ratuszu, gdzie urządzono salę z kilkoma regałami i kącikiem dla "
      "dzieci. Burmistrz zapewnił, że budżet nie przekroczy dwustu tysięcy złotych, z czego część pokryje "
      "województwo. Kilku mieszkańców żałowało, że w projekcie nie ma kawiarni, ale gmina obiecuje wrócić do tego "
      "pomysłu w przyszłym roku.")
RU2 = ("Городская библиотека переехала в новое здание на набережной, где раньше размещался речной вокзал. Читальный "
       "зал теперь вдвое больше прежнего, а в подвале устроили хранилище для старых газет и карт. Первые посетители "
       "жаловались на очереди у входа, но через неделю работу гардероба наладили, и к вечеру в залах снова тихо.")
UK = ("Січень видався холодним: річка замерзла вже в перші дні, і рибалки виходили на лід із самого ранку. Сільська "
      "школа працювала як завжди, а автобус до міста їздив двічі на день, попри снігові замети на дорозі.")
EL = ("Το δημοτικό συμβούλιο αποφάσισε την Τρίτη να ανακαινίσει τη βιβλιοθήκη της γειτονιάς, που είναι κλειστή από "
      "το περασμένο καλοκαίρι εξαιτίας μιας διαρροής στη στέγη.")


def misread(text: str, page: str) -> str:
    return text.encode("utf-8").decode(page, "probe6_c1")


def latex(text: str) -> str:
    """`text` as a LaTeX source: a document frame, a section, every eighth word emphasized, citations."""
    words = text.split(" ")
    words = [f"\\emph{{{w}}}" if k % 8 == 3 and w.isalpha() else w for k, w in enumerate(words)]
    body = " ".join(words).replace(". ", ".~\\cite{smith2020} ", 2).replace("\n\n", "\n\n% draft: check numbers\n")
    return ("\\documentclass[11pt]{article}\n\\usepackage[utf8]{inputenc}\n\\begin{document}\n"
            f"\\section{{Build farm}}\\label{{sec:farm}}\n{body}\n\\end{{document}}\n")


def two_columns(text: str, width: int = 45) -> str:
    """`text` wrapped at `width` and laid out as a page of two columns, the right one at a fixed margin."""
    lines = textwrap.wrap(" ".join(text.split()), width)
    half = (len(lines) + 1) // 2
    left, right = lines[:half], lines[half:]
    return "\n".join(f"{a:<{width}}    {right[k]}" if k < len(right) else a for k, a in enumerate(left))


COPIES = {
    "Russian read as cp1251": (RU, misread(RU, "cp1251")),
    "Russian read as KOI8-R": (RU2, misread(RU2, "koi8_r")),
    "Polish read as cp1250": (PL, misread(PL, "cp1250")),
    "French read as Mac Roman": (FR, misread(FR, "mac_roman")),
    "German read as Mac Roman": (DE, misread(DE, "mac_roman")),
    "LaTeX source": (POST, latex(POST)),
    "two columns side by side": (POST, two_columns(POST)),
    "two columns, narrow": (OTHER, two_columns(OTHER, 38)),
}


@pytest.mark.parametrize("name", list(COPIES))
def test_a_copy_is_a_near_duplicate(name):
    assert_near_copy(*COPIES[name])


def test_every_copy_is_removed_by_the_real_path(tmp_path):
    assert_copies_removed(COPIES, tmp_path)


def test_text_written_in_those_pages_reads_as_it_is():
    for text in (RU, RU2, UK, EL, PL, FR, DE, "Сі ё пёс Ξ Ο", "√2 ≈ 1.41, ∞ ≠ π"):
        assert read_mojibake(text) == text
    # a page's mojibake needs 3 sequences covering 80 % of the upper-half characters: a few stay as written
    assert read_mojibake("Рё " + UK) == "Рё " + UK
    assert read_mojibake(misread("привет мир", "cp1251")) == "привет мир"


def test_distinct_documents_in_these_forms_stay_apart():
    assert jaccard(misread(RU, "cp1251"), misread(RU2, "cp1251")) < 0.1
    assert jaccard(misread(RU, "koi8_r"), misread(RU2, "cp1251")) < 0.1
    assert jaccard(latex(POST), latex(OTHER)) < 0.2                      # one preamble, other papers
    assert jaccard(two_columns(POST), two_columns(OTHER)) < 0.1
    left, right = textwrap.wrap(POST, 45), textwrap.wrap(OTHER, 45)          # a page of two articles
    page = "\n".join(f"{a:<45}    {b}" for a, b in zip(left, right))
    assert jaccard(page, POST) < 0.8 and jaccard(page, OTHER) < 0.8


def test_text_that_only_looks_like_a_form_reads_as_before():
    assert read_latex(REGEX_CODE) is REGEX_CODE                          # `\d{4}` is no LaTeX command
    assert read_latex("C:\\Users\\section{x} and \\emph{y}") == "C:\\Users\\section{x} and \\emph{y}"
    table = "\n".join(f"{name:<{8 + k % 5 * 4}}   {k * 7:>6}   ok" for k, name in enumerate(
        "alpha beta gamma delta epsilon zeta eta theta iota kappa lambda mu".split()))
    assert read_columns(table) == table                                  # cells start at many columns
    code = "\n".join(f"x{k} = {k}    # step {k}" for k in range(12))
    assert read_columns(code) is not None and jaccard(code, code + "\n") == 1.0


def test_the_scan_picks_the_new_forms():
    from tasks.data.cleanup import textbatch
    picked = [copy for _, copy in COPIES.values()]
    batch = textbatch.Encoded.of(picked + [POST, "plain ascii text", RU])
    found = format_docs(batch.data, batch.ends, DedupSpec())
    assert set(range(len(picked))) <= set(found) and len(picked) not in found and len(picked) + 1 not in found


@pytest.mark.parametrize("text", [
    "   a" * 30_000, ("a   b\n" * 20_000), "\\cite{" * 30_000, "\\begin{document}" + "\\cite[" * 20_000,
    "\\documentclass" + "%" * 100_000, "Р" * 100_000, "РЇ" * 50_000, "п─" * 50_000, "√" * 100_000,
    "\\section{" + "{" * 100_000, "\\emph\\emph\\emph" + "\\a" * 40_000,
])
def test_the_new_rules_stay_linear_on_hostile_text(text):
    start = time.perf_counter()
    read_formats(text)
    read_columns(text)
    read_latex(text)
    assert time.perf_counter() - start < 2.0


NEW_PIECES = ["РїСЂРёРІРµС‚ ", "п─я┬п╦ ", "mieszkaĹ„cy ", "caf√© ", "√", "Р", "\\emph{", "\\cite{k}", "}", "{",
              "\\documentclass{article}\n", "\\section{A}", "% note\n", "\\%", "   ", "    ", "\n", " ", "word",
              "one two three four", "ab cd ef          gh ij kl\n", "é", "ё", "Ξ", "Ο„", "\\d{4}"]
texts = st.lists(st.sampled_from(NEW_PIECES), max_size=30).map("".join)


@settings(max_examples=200, deadline=None)
@given(st.lists(texts, min_size=1, max_size=8))
def test_word_shingles_equal_the_definition(raw):
    assert_compiled_path_is_the_definition(raw)


@settings(max_examples=200, deadline=None)
@given(st.lists(texts, min_size=1, max_size=8))
def test_the_scan_finds_every_text_the_rules_change(raw):
    assert_scan_finds_every_changed_text(raw)
