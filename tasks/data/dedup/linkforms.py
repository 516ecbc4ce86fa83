"""Links of lightweight markups and of text-mode browser dumps, read as their text before shingling
(`DedupSpec.fold_markup`, as a markdown link is read in `textmarks.fold_markdown_links`; never the kept text).

The same page exported from reStructuredText, AsciiDoc or Org source, or dumped by lynx or w3m, writes each link's
target beside its text; `\\w+` reads a URL as ~6 words (`https`, `docs`, `python`, `org`, …) the rendered or plain
copy lacks, and a copy with a link every 30 words shared few 5-grams with its original. Each form reads as what
the rendered page shows, its text:

- reStructuredText: `` `text <https://…>`_ `` (and the anonymous `` `text <…>`__ ``) → `text`; the hyperlink
  targets `.. _label: https://…` (a line of their own: the rendered page shows none) are not read, and
  `` `label`_ `` (and `label_`) reads as `label` where such a target defines it, in a text with a `` `_ ``;
- Sphinx roles: `` :ref:`text <target>` `` → `text`, `` :py:func:`os.path.join` `` and `` :doc:`target` `` → their
  content (`~a.b.c` → `c`, a leading `!` dropped, as Sphinx renders them): the role's name is no word the rendered
  page shows, and a docstring with a role every 20 words shared few 5-grams with its rendered copy;
- AsciiDoc: `https://…[text]`, `link:url[text]`, `mailto:addr[text]`, `xref:target[text]` → `text` (a trailing
  `^`, the new-window mark, and `,key=value` attributes dropped); an empty `[]` shows the URL, and is left as
  written; a cross reference `<<id,text>>` → `text` (a bare `<<id>>` shows the section's title, and is left);
- Org: `[[target][text]]` → `text` (a bare `[[target]]` shows its target, and is left);
- lynx/w3m dumps: a `References` list at the text's end (`   12. https://…`, `[12] https://…`, under
  `Visible links`/`Hidden links` too) is not read, and the inline markers `[12]` of the numbers it lists read as
  nothing (`[12]text` → `text`). A `[12]` whose number no such list holds (code's `a[12]`, a citation) stays;
- a URL written after its link's text (`inline_urls`): an absolute URL in parentheses or angle brackets right
  after a word, on its line or the next (`the Seine (https://…)`, `Ann <https://…>`), as print stylesheets
  (`a[href]::after`), plain-text mail and `html2text`-like extractors write each link, reads as nothing (a copy
  with one every ~15 words: J 0.83 median, 58 of 80 found). Only where the text holds `WORDS_PER_URL` words for
  each such URL: a list of links (`Homepage (https://…)` per line) is its URLs, and two lists of other links are
  other texts. A URL anywhere else (bare, after punctuation, an autolink starting a line) is left as written.

Each rule needs its form whole (backticks and `>`_`, a role's `:name:` before its backticks, a scheme right before
`[`, `][` inside `[[ ]]`, a list of URLs ending the text), so prose and code without them read as before;
`textforms.format_docs` finds the texts a rule may change (a byte scan: a `` `_ ``, a `` :` ``, a `[[`, a `>>`, a
`References`, a `[` after `://`, `link:`, `mailto:` or `xref:` and no blank, a `(http`, `<http`, `(ftp:`, `<ftp:`)
and only those are read here.

LaTeX source (`read_latex`): a paper or a lecture note crawled as its `.tex` source and as its rendered (PDF, HTML)
text share the words, but `\\w+` reads every command name as a word the rendered copy lacks (`\\emph{word}` →
`emph`, `word`), and citation and cross-reference keys (`\\cite{knuth84}`, `\\label{sec:intro}`) as more: a source
with a command every 20 words and a citation in every fifth sentence shared 0.6-0.7 of its 5-grams with its text
(none of 20 found). In a text that is LaTeX (`latex_text`: it holds `\\documentclass` or `\\begin{document}`, or 3
or more of the commands prose is typeset with, `\\section{`, `\\emph{`, `\\cite{`, …), the arguments no reader sees
(keys of `\\cite`, `\\ref`, `\\label`, a package's or class's name, an environment's name, `\\href`'s URL) and `%`
comments read as nothing, and every other command as its arguments (`\\textbf{word}` → `{word}`; braces are no
words). Code that writes regexes (`\\d{4}`) or Windows paths holds none of these commands and is left alone.
"""

from __future__ import annotations

import re

import numpy as np

# `` `text <target>`_ ``: the text may wrap onto a second line (not past a blank one), the target holds no blank
_RST_LINK = re.compile(r"`((?:[^`<>\n]|\n(?![ \t]*\n)){1,500}?)[ \t\n]*<[^<>`\s]{1,2000}>`__?")
# `.. _label: target` on a line of its own, the target a URL or path
_URLISH = r"(?:[a-z][a-z0-9+.-]{1,15}:\S|www\.|\.{0,2}/|#)"
_RST_TARGET = re.compile(rf"^[ \t]*\.\. _([^:\n`]{{1,100}}|`[^`\n]{{1,100}}`):[ \t]+{_URLISH}\S*[ \t]*(?:\n|\Z)",
                         re.M | re.I)
_RST_REF = re.compile(r"`([^`\n]{1,100})`_(?!_)|(?<![\w`])(\w{1,100})_(?!\w)")
# AsciiDoc: a URL (no blank, bracket, parenthesis or angle bracket: a markdown target `(https://…)` ends at its
# `)`) or a `link:`/`mailto:` target right before `[text]`. `_ADOC_HEAD` finds each `://`, `link:`, `mailto:` (a
# literal, which `re` finds by a fast search: a pattern opening with the scheme's class tried every position);
# `_ADOC_REST` reads on from it, `_SCHEME` back to the scheme's start
_ADOC_HEAD = re.compile(r"://|link:|mailto:|xref:")
_ADOC_REST = re.compile(r"(?:\+\+[^\s+]{1,2000}\+\+|[^\s\[\]()<>\"]{1,2000})\[([^\[\]\n]{1,500})\]")
_SCHEME = re.compile(r"[A-Za-z][A-Za-z0-9+.-]{1,15}\Z")
_NOT_BEFORE = frozenset("(<[/:.+-")        # a markdown or autolink target, or a longer scheme-like word
_ADOC_ATTRS = re.compile(r"\^$|,\s*\w+=.*$")
# `<<id,text>>`: an id (no blank) after no word character or `<`, then its text (C++'s `a << b, c >> d` has blanks)
_ADOC_XREF = re.compile(r"(?<![\w<])<<([A-Za-z_][\w:./#-]{0,200}),[ \t]*([^<>\n]{1,500}?)>>(?!>)")
# a Sphinx role `:name:` or `:domain:name:` (after no word character, backtick or colon) and its content, which may
# wrap onto a second line (not past a blank one); not `` `…`_ ``, a reST link
_ROLE = re.compile(r"(?<![\w`:]):(?:[A-Za-z][\w+-]{0,30}:){1,2}`((?:[^`\n]|\n(?![ \t]*\n)){1,500}?)`(?!_)")
_ROLE_TARGET = re.compile(r"(.*?\S)\s*<[^<>]{1,2000}>", re.S)
_ORG_LINK = re.compile(r"\[\[(?<!\w\[\[)([^\[\]\n]{1,2000})\]\[([^\[\]\n]{1,500})\]\]")
# a dump's reference list: `References` (w3m: `References:`), blank lines, then only numbered URLs (lynx
# `   1. https://…`, w3m `[1] https://…`), `Visible links`/`Hidden links` headings and blank lines to the end
_REF_LINE = r"[ \t]*(?:\d{1,5}\.|\[\d{1,5}\])[ \t]+[A-Za-z][A-Za-z0-9+.-]{1,15}:\S*[ \t]*"
_REFERENCES = re.compile(rf"(?:^|\n)[ \t]*References:?[ \t]*\n((?:[ \t]*\n|[ \t]*(?:Visible|Hidden) links:?[ \t]*\n"
                         rf"|{_REF_LINE}(?:\n|\Z))*{_REF_LINE})\s*\Z")
_REF_NUMBER = re.compile(r"^[ \t]*\[?(\d{1,5})", re.M)
_MARKER = re.compile(r"\[(\d{1,5})\]")
# an absolute URL in parentheses (one level of them inside, `/wiki/Mercury_(planet)`) or angle brackets; the word
# before it is looked for by `_after_word` (a pattern opening with blanks was tried at each blank of a run)
_INLINE_URL = re.compile(r"\((?:https?|ftp)://(?:[^\s()<>]|\([^\s()<>]{0,200}\)){1,2000}\)"
                         r"|<(?:https?|ftp)://[^\s<>]{1,2000}>", re.I)
WORDS_PER_URL = 6           # a text with fewer words for each such URL is a list of links: its URLs are content
_GAP = 40                   # blanks looked back over for the word before a URL


def read_links(text: str) -> str:
    """`text` with its reStructuredText, AsciiDoc, Org and lynx/w3m links read as their text (see the module
    docstring); `text` itself when it has none."""
    out = _ROLE.sub(_role_text, text) if ":`" in text else text
    out = _read_rst(out) if "`_" in out else out
    if "[" in out and ("://" in out or "link:" in out or "mailto:" in out or "xref:" in out):
        out = _read_adoc(out)
    if "<<" in out and ">>" in out:
        out = _ADOC_XREF.sub(r"\2", out)
    if "[[" in out and "][" in out:
        out = _ORG_LINK.sub(r"\2", out)
    out = _read_dump(out) if "References" in out else out
    out = inline_urls(out) if "://" in out else out
    return text if out == text else out


def _after_word(text: str, at: int) -> bool:
    """Whether a letter or digit ends the text before `at`, after spaces or tabs and at most one line break."""
    j, breaks, stop = at - 1, 0, max(0, at - _GAP)
    while j >= stop and text[j] in " \t\n":
        breaks += text[j] == "\n"
        j -= 1
    return j >= stop and breaks <= 1 and text[j].isalnum()


def inline_urls(text: str) -> str:
    """`text` without the URLs in parentheses or angle brackets right after a word (see the module docstring),
    where it holds `WORDS_PER_URL` words for each; `text` itself otherwise."""
    found = [m for m in _INLINE_URL.finditer(text) if _after_word(text, m.start())] if "://" in text else []
    if not found:
        return text
    parts, last = [], 0
    for m in found:
        parts.append(text[last:m.start()])
        last = m.end()
    out = "".join(parts) + text[last:]
    return out if len(out.split()) >= WORDS_PER_URL * len(found) else text


def _role_text(m: re.Match[str]) -> str:
    """A Sphinx role's content as Sphinx renders it: `text <target>` as its text, `~a.b.c` as `c`, `!x` as `x`."""
    content = m.group(1)
    titled = _ROLE_TARGET.fullmatch(content)
    if titled:
        return titled.group(1)
    content = content[1:] if content.startswith("!") else content
    return content[1:].rsplit(".", 1)[-1] if content.startswith("~") else content


def _read_rst(text: str) -> str:
    labels = {m.group(1).strip("`").lower() for m in _RST_TARGET.finditer(text)} if ".. _" in text else set()
    out = _RST_LINK.sub(r"\1", text) if ">`_" in text else text
    if labels:
        out = _RST_TARGET.sub("\n", out)
        out = _RST_REF.sub(lambda m: (m.group(1) or m.group(2)) if (m.group(1) or m.group(2)).lower() in labels
                           else m.group(), out)
    return out


def _read_adoc(text: str) -> str:
    """The text with each AsciiDoc link `target[text]` read as its text (`https://…[x]`, `link:…[x]`, `mailto:…[x]`,
    `xref:…[x]`, no word character or `(<[/:.+-` before it; an empty `[]` shows the URL and stays)."""
    parts, last, found = [], 0, _ADOC_HEAD.search(text)
    while found is not None:
        head, rest = found.start(), found.end()
        if found.group() == "://":
            scheme = _SCHEME.search(text, max(0, head - 16), head)
            head = scheme.start() if scheme else -1
        m = _ADOC_REST.match(text, rest) if head >= last else None
        if m and (head == 0 or not (text[head - 1].isalnum() or text[head - 1] in _NOT_BEFORE or
                                    text[head - 1] == "_")):
            label = _ADOC_ATTRS.sub("", m.group(1)).strip('"')
            if label and label[0] != "/":             # `[url]https://…[/url]` is BBCode's, `textmarks` reads it
                parts += [text[last:head], label]
                last = m.end()
        found = _ADOC_HEAD.search(text, max(rest, last))
    return "".join(parts) + text[last:] if parts else text


def _read_dump(text: str) -> str:
    """The text without a lynx/w3m reference list at its end and the `[N]` markers of the numbers it lists."""
    found = _REFERENCES.search(text)
    if found is None:
        return text
    listed = {m.group(1) for m in _REF_NUMBER.finditer(found.group(1))}
    body = text[:found.start()]
    return _MARKER.sub(lambda m: "" if m.group(1) in listed else m.group(), body)


# --- LaTeX --------------------------------------------------------------------------------------------------
# commands of typeset prose: 3 in a text (or the document's frame) make it LaTeX
_LATEX_SIGN = re.compile(r"\\(?:documentclass|begin\{document\})|\\(?:(?:sub)*section|chapter|paragraph|emph"
                         r"|textbf|textit|texttt|textsc|cite[tp]?|footnote|ref|label|href|item\b)")
_LATEX_FRAME = re.compile(r"\\(?:documentclass|begin\{document\})")
_LATEX_BYTES = re.compile(_LATEX_SIGN.pattern.encode())
# arguments the typeset text does not show: keys, names, a link's URL (an optional `[…]` argument before them)
_LATEX_HIDDEN = re.compile(r"\\(?:cite[tp]?|[cC]?ref|eqref|pageref|autoref|label|usepackage|documentclass|begin"
                           r"|end|href|bibliographystyle|bibliography|input|include)\*?"
                           r"(?:\[[^\]\n]{0,200}\]){0,3}\{[^{}\n]{0,200}\}")
_LATEX_COMMAND = re.compile(r"\\[A-Za-z]+\*?")
_LATEX_COMMENT = re.compile(r"(?<!\\)%[^\n]*")


def latex_text(text: str) -> bool:
    """Whether `text` reads as LaTeX source: a document's frame, or 3 or more commands of typeset prose."""
    if "\\" not in text:
        return False
    if _LATEX_FRAME.search(text):
        return True
    found = _LATEX_SIGN.finditer(text)
    return next(found, None) is not None and next(found, None) is not None and next(found, None) is not None


def read_latex(text: str) -> str:
    """`text` as its typeset words where it is LaTeX source (see the module docstring); `text` itself otherwise."""
    if not latex_text(text):
        return text
    return _LATEX_COMMAND.sub(" ", _LATEX_HIDDEN.sub(" ", _LATEX_COMMENT.sub("", text)))


def latex_docs(data: np.ndarray, ends: np.ndarray) -> list[int]:
    """Which texts of a batch (UTF-8 `data`, a `\\n` after each, at `ends`) hold a command `_LATEX_SIGN` names (a
    superset of those `read_latex` changes): one regex scan of the batch's bytes for `\\` and a command's name."""
    hits = [m.start() for m in _LATEX_BYTES.finditer(data.tobytes())] if 92 in data else []
    return sorted(set(np.searchsorted(np.asarray(ends), hits).tolist())) if hits else []
