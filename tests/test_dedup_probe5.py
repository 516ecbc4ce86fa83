"""Near dedup of the copies a fifth blind probe left over: a whole RSS/Atom feed file whose item body is escaped HTML
(`feeds`), link targets written after their text (`the river (https://…)`, `Ann <https://…>`: print stylesheets,
plain-text mail; `linkforms.inline_urls`), markdown backslash escapes (`prompt\\_toolkit`) and JSON's `\\uXXXX`
escapes (`ensure_ascii`: `don\\u2019t`, `caf\\u00e9`; `wordhash.read_escapes`, `jsonescapes`), and a full-width
markdown link (`［text］（ｈｔｔｐｓ：…）`). Each copy below was J < 0.8 with its original before and is found now, by
clean's in-memory and real paths; distinct documents in the same forms stay apart (texts sharing long URLs, lists
of other links, other feeds, code full of backslashes, other JSON texts), and the compiled path equals the
definition on text made of these pieces."""

from __future__ import annotations

import html
import json
import re
import time

import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

from tasks.data.cleanup.normalize import shingle_text
from tasks.data.dedup import linkforms
from tasks.data.dedup.textforms import format_flags, read_formats
from tasks.data.dedup.wordhash import read_escapes
from tests.helpers.shingle_definition import assert_compiled_path_is_the_definition
from tests.test_dedup_folds import assert_copies_removed, assert_near_copy, jaccard
from tests.test_dedup_markup import PAGE, linked
from tests.test_dedup_probe4 import FR

# invented prose: a blog post in paragraphs, a README naming its API, a review with typographic quotes
POST = ("Last spring our team moved the whole build farm from rented servers to a cluster we run ourselves. The "
        "decision was not an easy one, because the old contract still had a year to go and nobody on the team had "
        "operated hardware at this scale before.\n\n"
        "We started small, with four machines in a shared rack, and ran the nightly jobs on them for a month while "
        "the old farm kept doing the real work. Most problems we hit were boring ones: a switch that dropped "
        "packets under load, a power supply that failed twice, and disks that filled up because nobody rotated "
        "the logs.\n\n"
        "By the summer the new cluster ran every job, builds were about forty percent faster, and the monthly bill "
        "had dropped by more than half. The hidden cost is time: one engineer now spends a day a week on the "
        "machines, which we had not planned for.\n\n"
        "Would we do it again? Yes, but we would budget for the people first and the hardware second, and we would "
        "keep the old contract running a little longer than we thought we needed.")
README = ("Install the package with pip, then call open_session with the path of your config_file. The session "
          "object keeps a pool of connections; read_timeout and max_retry_count set how long each request may "
          "take and how often it is tried again. Results come back as plain dictionaries, and the helper "
          "to_data_frame turns a list of them into a table.\n\n"
          "For large exports use stream_rows, which yields one row at a time instead of loading the whole result "
          "into memory. The flag keep_alive decides whether the pool keeps its connections open between calls; "
          "set it to false in short scripts. Errors are raised as subclasses of client_error, and log_level "
          "controls how much the library writes to the log while it works.")
REVIEW = ("“It’s the best café in town,” my neighbour said, and for once she wasn’t exaggerating. The coffee is "
          "roasted on site, the pastries come from a bakery two streets away, and the staff don’t rush you even "
          "when every table is taken. I’d skip the sandwiches — they’re fine but overpriced — and go for the "
          "lemon cake, which sells out before noon on weekends. It’s small, it’s loud, and it’s worth it.")

NOTE = ("Don't worry if the first build fails: it's usually the cache. We'll rebuild it tonight, and you'll see the "
        "new timings tomorrow. If they're still slow, I'd check the runner's disk first; we've seen it fill up "
        "twice this month. Ann's script cleans it, but it isn't scheduled yet, so you can't rely on it. They'd "
        "like a fix before Friday, and I'm sure we can't wait for the vendor's patch that long.")


def p_html(text: str) -> str:
    return "".join(f"<p>{html.escape(p)}</p>" for p in text.split("\n\n"))


def rss(text: str, title: str = "Moving our build farm") -> str:
    """A whole RSS 2.0 file: the channel's title and link, one item whose description is the post's HTML escaped."""
    return ('<?xml version="1.0" encoding="UTF-8"?>\n<rss version="2.0"><channel><title>Ops Notes</title>'
            "<link>https://blog.example.org/</link><description>Notes from the ops team</description>"
            f"<item><title>{html.escape(title)}</title><link>https://blog.example.org/2024/build-farm</link>"
            f"<guid>https://blog.example.org/?p=4121</guid><pubDate>Sun, 03 Mar 2024 10:00:00 GMT</pubDate>"
            f"<description>{html.escape(p_html(text))}</description></item></channel></rss>")


def rdf(text: str) -> str:
    return ('<?xml version="1.0"?>\n<rdf:RDF xmlns:rdf="http://www.w3.org/1999/02/22-rdf-syntax-ns#" '
            'xmlns="http://purl.org/rss/1.0/"><channel rdf:about="https://blog.example.org/"><title>Ops Notes</title>'
            "<link>https://blog.example.org/</link></channel><item rdf:about=\"https://blog.example.org/p/1\">"
            "<title>Moving our build farm</title><link>https://blog.example.org/p/1</link>"
            f"<description>{html.escape(p_html(text))}</description></item></rdf:RDF>")


def atom(text: str) -> str:
    return ('<?xml version="1.0" encoding="utf-8"?>\n<feed xmlns="http://www.w3.org/2005/Atom"><title>Ops Notes</title>'
            '<link href="https://blog.example.org/"/><updated>2024-03-03T10:00:00Z</updated><entry>'
            '<title type="html">Moving our build farm</title><link href="https://blog.example.org/p/1"/>'
            f'<id>urn:uuid:60a76c80</id><content type="html">{html.escape(p_html(text))}</content></entry></feed>')


def turndown(text: str) -> str:
    """Markdown as Turndown and html2text write it: every `_`, `*` and backtick escaped."""
    return re.sub(r"([_*`])", r"\\\1", text)


def fullwidth(text: str) -> str:
    return "".join(chr(ord(c) + 0xFEE0) if "!" <= c <= "~" else "\u3000" if c == " " else c for c in text)


def js_literal(text: str) -> str:
    """A JavaScript string literal in single quotes: `'` and `"` escaped (`don\\'t`)."""
    return "'" + text.replace("\\", "\\\\").replace("'", "\\'").replace('"', '\\"').replace("\n", "\\n") + "'"


GO_JSON = json.dumps({"body": p_html(POST)}).replace("<", "\\u003c").replace(">", "\\u003e").replace("&", "\\u0026")
COPIES = {
    "RSS 2.0 feed, escaped description": (POST, rss(POST)),
    "RSS 1.0 (RDF) feed": (POST, rdf(POST)),
    "Atom feed, escaped content": (POST, atom(POST)),
    "print stylesheet: text (URL)": (PAGE, linked(PAGE, "{text} ({url})")),
    "plain-text mail: text <URL>": (PAGE, linked(PAGE, "{text} <{url}>")),
    "URL on the next line": (PAGE, linked(PAGE, "{text}\n({url})")),
    "Turndown escapes (`open\\_session`)": (README, turndown(README)),
    "JavaScript literal (`don\\'t`)": (NOTE, js_literal(NOTE)),
    "JSON ensure_ascii, typographic quotes": (REVIEW, json.dumps({"text": REVIEW})),
    "JSON ensure_ascii, French": (FR, json.dumps({"text": FR})),
    "JSON ensure_ascii, emoji (surrogate pairs)": (
        POST, json.dumps({"text": re.sub(r"\.(\s)", lambda m: ". \U0001F680\U0001F4BE" + m.group(1), POST)})),
    "Go JSON (`\\u003cp\\u003e`)": (POST, GO_JSON),
    "full-width markdown links": (PAGE, fullwidth(linked(PAGE, "[{text}]({url})"))),
}


@pytest.mark.parametrize("name", list(COPIES))
def test_a_copy_is_a_near_duplicate(name):
    assert_near_copy(*COPIES[name])


def test_every_copy_is_removed_by_the_real_path(tmp_path):
    assert_copies_removed(COPIES, tmp_path)


def test_a_feed_reads_as_its_items():
    from tasks.data.dedup.feeds import feed_items, is_feed      # (here: the cases above also run on older code)
    items = feed_items(rss("one two", "A &amp; B"))
    assert items == "<div>A &amp; B</div>\n<div><p>one two</p></div>"       # (the HTML of its title)
    redacted = feed_items(rss("write to X today").replace("X", "<EMAIL>"))     # a placeholder clean wrote in it
    assert redacted.endswith("<div><p>write to <EMAIL> today</p></div>")
    cdata = rss("x").replace(html.escape("<p>x</p>"), "<![CDATA[<p>x &amp; y</p>]]>")
    assert feed_items(cdata).endswith("<div><p>x &amp; y</p></div>")
    assert is_feed('\ufeff<?xml version="1.0"?>\n<!-- generated -->\n<?xml-stylesheet href="a.xsl"?>\n<rss>')
    for text in ("<html><body><p>rss</p>", "see <rss> below", "<rssfeed>", "<feedback>x</feedback>"):
        assert not is_feed(text)
    assert feed_items("<rss><channel><title>only a channel</title></channel></rss>").startswith("<rss>")
    assert "Ops Notes" not in shingle_text(rss(POST)) and "pubDate" not in shingle_text(rss(POST))


def test_urls_after_text_read_as_nothing_only_there():
    assert linkforms.inline_urls("the river (https://x.org/wiki/Mercury_(planet)) and the sea <http://y.org> flow on "
                       "together for many more miles") == "the river  and the sea  flow on together for many more miles"
    for text in ("read this. (https://x.org/a) and then much more text follows here for sure",   # after `.`
                 "(https://x.org/a) starts the text, and many more words follow it in this line",
                 "<https://x.org/a>\nan autolink on its own line, and many more words after it here",
                 "a bare https://x.org/a and www.y.org stay as written in this text of many words",
                 "Homepage (https://a.org)\nDocumentation (https://a.org/docs)\nSource (https://git.a.org/a)"):
        assert linkforms.inline_urls(text) is text


def test_escapes_read_before_words():
    from tasks.data.dedup.jsonescapes import read_json_escapes
    assert read_escapes("prompt\\_toolkit don\\'t \\*bold\\* \\# \\[x\\] C:\\\\new \\\\n") == \
        "prompt_toolkit don't *bold* # [x] C:\\  ew \\  "          # (`\\\\` stays, `\\n` is read)
    assert read_json_escapes('"don\\u2019t caf\\u00e9 \\ud83d\\ude00 \\u003cp\\u003e"') == '"don’t café 😀 <p>"'
    for text in ('"\\ud800 lone"', '["\\udc00\\ud800 reversed"]', '"\\u00zz"', '"\\U00e9"', '"u2019"',
                 "TABLE = ['\\u2550', '\\u2551']", "x" * 64 + '{"a": "\\u00e9"}'):    # no JSON text: code's table
        assert read_json_escapes(text) is text
    assert read_json_escapes(' {"a": "a\\u0007b\\u009fc"}') == ' {"a": "a b c"}'    # controls read as spaces


# distinct documents in these forms: a second post, two texts citing the same long URLs, lists of other links
OTHER = ("This autumn our team replaced the on-call rota with a follow-the-sun schedule shared with the office in "
         "Singapore. The change took three months of planning, because every alert had to be routed again and "
         "half of our runbooks assumed someone in Europe would answer.\n\n"
         "The first weeks were rough: handovers were missed, two incidents bounced between the offices, and the "
         "dashboards showed times in the wrong zone. We fixed the handovers with a short written note at the end "
         "of each shift and a call once a week.\n\n"
         "Nobody is woken at night any more, and incidents are closed faster than before. The cost is that both "
         "offices must keep their runbooks in the same shape, which takes an afternoon every month.")
CITED = [f"https://doi.example.org/10.5555/{k:04d}/long-article-title-number-{k}?version=final&format=full"
         for k in range(5)]


def cite(text: str) -> str:
    words = text.split(" ")
    step = len(words) // (len(CITED) + 1)
    for k, url in enumerate(CITED):
        words[step * (k + 1)] += f" ({url})"
    return " ".join(words)


REGEX_CODE = r'''import re
DATE = re.compile(r"(\d{4})-(\d{2})-(\d{2})T(\d{2}):(\d{2})")
PRICE = re.compile(r"\$\s*(\d+(?:\.\d{2})?)\s*(?:USD|\$)?")
WORD = re.compile(r"\b[\w'-]+\b")
def parse_price(text):
    m = PRICE.search(text)
    return float(m.group(1)) if m else None
def split_sentences(text):
    return re.split(r"(?<=[.!?])\s+(?=[A-Z\"'(\[])", text)
'''
OTHER_CODE = r'''import re
EMAIL = re.compile(r"[\w.+-]+@[\w-]+\.[\w.-]+")
PHONE = re.compile(r"\+?\d{1,3}[\s.-]?\(?\d{2,4}\)?[\s.-]?\d{3,4}[\s.-]?\d{3,4}")
TAG = re.compile(r"<\/?([a-z][a-z0-9]*)\b[^>]*>", re.I)
def emails(text):
    return [m.group() for m in EMAIL.finditer(text)]
def strip_tags(text):
    return TAG.sub("", text).replace("\*", "*").replace("\_", "_")
'''
BATCH = (r'@echo off' '\nset SRC=C:\\Users\\build\\_work\\src\nset OUT=D:\\artifacts\\nightly\\_out\n'
         r'xcopy "%SRC%\*.dll" "%OUT%\bin\" /Y /I' '\n' r'del /Q "%OUT%\logs\*.log"' '\n'
         r'call "%SRC%\tools\_sign.cmd" "%OUT%\bin\app.exe"' '\n')
OTHER_BATCH = (r'@echo off' '\nset HOME_DIR=C:\\ProgramData\\service\\_data\nset BACKUP=E:\\backups\\weekly\n'
               r'robocopy "%HOME_DIR%\db" "%BACKUP%\db" /MIR /R:2' '\n' r'if errorlevel 8 exit /b 1' '\n'
               r'sc stop "MyService" && sc start "MyService"' '\n')


def links_list(urls: list[str]) -> str:
    labels = ["Homepage", "Documentation", "Source code", "Issue tracker", "Changelog", "Download"]
    return "\n".join(f"{label} ({url})" for label, url in zip(labels, urls))


def test_distinct_documents_in_these_forms_stay_apart():
    assert jaccard(rss(POST), rss(OTHER)) < 0.3 and jaccard(atom(POST), rss(OTHER)) < 0.3
    two = rss(POST).replace("</item>", "</item><item><title>Rota</title><description>"
                            + html.escape(p_html(OTHER)) + "</description></item>")
    assert jaccard(rss(POST), two) < 0.6 and jaccard(rss(OTHER), two) < 0.6
    assert jaccard(cite(POST), cite(OTHER)) < 0.1                            # five long URLs in common
    ours = links_list([f"https://alpha.example.org/{page}" for page in ("", "docs", "src", "issues", "news", "get")])
    theirs = links_list([f"https://omega.example.net/{page}" for page in ("", "doc", "git", "bugs", "log", "dl")])
    assert jaccard(ours, theirs) < 0.8                                       # a list of links is its URLs
    assert jaccard(REGEX_CODE, OTHER_CODE) < 0.3 and jaccard(BATCH, OTHER_BATCH) < 0.3
    assert jaccard(json.dumps({"text": FR}), json.dumps({"text": FR.replace("bibliothèque", "piscine").replace(
        "livres", "maillots").replace("huit mois", "un an").replace("café", "sauna").replace("enfants", "bébés")
        .replace("deux cent mille", "trois cent mille")})) < 0.8
    assert jaccard(json.dumps({"text": REVIEW}), json.dumps({"text": OTHER})) < 0.1


def flags(texts: list[str]) -> np.ndarray:
    raw = [t.encode() for t in texts]
    data = np.frombuffer(b"\n".join(raw) + b"\n", np.uint8)
    return format_flags(data, np.cumsum([len(r) + 1 for r in raw]) - 1)


def test_the_scan_picks_the_escapes_and_links():
    picked = [COPIES[name][1] for name in COPIES if "JSON" in name or "URL" in name or "mail" in name
              or "print" in name]
    assert (flags(picked) != 0).all()
    assert (flags([POST, README, REVIEW, PAGE, "f(x) < g(y) and (a, b)", "C:\\path\\u", "\\uzzzz"]) == 0).all()


@pytest.mark.parametrize("text", [
    "(https://" + "a" * 100_000, "(https://a" + "(b)" * 33_000, "a (https://x" * 9_000, "<https://" + "a" * 100_000,
    "a" + " " * 100_000 + "(https://x.org)", '"' + "\\u" * 50_000, '"' + "\\ud800" * 16_000,
    "[" + "\\ud83d\\u" * 12_000, " " * 100_000 + "\\u0041" * 100, "a" + " (http" * 20_000,
    "<rss>" + "<item>" * 16_000, "<rss><item>" + "<title>" * 14_000 + "</item>", "<!--" + "-" * 100_000,
    "<rss><item><description>" + "<![CDATA[" * 11_000 + "</description></item>", "\\_" * 50_000,
])
def test_the_new_rules_stay_linear_on_hostile_text(text):
    from tasks.data.dedup.feeds import feed_items, is_feed
    start = time.perf_counter()
    read_formats(text)
    shingle_text(text)
    read_escapes(text)
    feed_items(text) if is_feed(text) else None
    assert time.perf_counter() - start < 2.0


NEW_PIECES = ["\\", "\\_", "\\'", "\\*", "\\\\", "\\\\_", "\\n", "\\u2019", "\\u00e9", "\\u00C9", "\\ud83d\\ude00",
              "\\ud800", "\\u003cp\\u003e", "\\u0026amp;", "_", "'", "\u2019", "snake", "t", " ", "\n", "(", ")",
              "(https://x.org/a)", " (https://x.org/a_(b))", " <https://x.org/b>", "<", "word", "one two three four",
              "［a］（ｈｔｔｐｓ：／／ｘ．ｏｒｇ）", "］（", "１． item\n", "<rss>", "<item>", "</item>",
              "<title>T</title>", "<description>&lt;p&gt;x&lt;/p&gt;</description>", "<![CDATA[<p>y</p>]]>",
              "&lt;", "<p>", "é", "日本", "😀", '{"t": "', '["', '"', "\\u00e9t\\u00e9"]
texts = st.lists(st.sampled_from(NEW_PIECES), max_size=18).map("".join)


@settings(max_examples=300, deadline=None)
@given(st.lists(texts, min_size=1, max_size=8))
def test_word_shingles_equal_the_definition(raw):
    assert_compiled_path_is_the_definition(raw)


@settings(max_examples=300, deadline=None)
@given(st.lists(texts, min_size=1, max_size=8))
def test_the_scan_finds_every_text_the_rules_change(raw):
    for text, flag in zip(raw, flags(raw).tolist()):
        assert flag or read_formats(text) == text, text
