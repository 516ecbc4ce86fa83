"""RSS and Atom feed files read as their items' text before shingling (`normalize.shingle_text`'s markup step,
`DedupSpec.fold_markup`; never the kept text).

A crawl keeps a blog's post as its page and again as its feed: `<rss><channel><title>…<item><title>…</title>
<link>…</link><description>&lt;p&gt;The post…&lt;/description>…`. The item's body is its HTML escaped once more
(RSS 2.0, RDF, Atom's `type="html"`), or in a CDATA section. Read as one page, the feed's `<title>` and `<link>`
made it markup already, so the escaped body was never decoded before the page's text was read, and its `<p>` tags
came back as literal text, words of their own (`p`, `class`, `href`): a full feed of a post shared J 0.46-0.75
with the post (17 of 40 found) where its bare description, or the same feed in CDATA, shared ~0.99.

`feed_items` reads a document whose root element is `<rss>`, `<feed>` (Atom) or `<rdf:RDF>` (RSS 1.0), after an
optional XML declaration, stylesheet instructions, comments and a doctype (`is_feed`), as the title and the body
(`description`, `content:encoded`, `content`, `summary`) of each `<item>` or `<entry>`: a CDATA section as the
HTML it holds, escaped text decoded once (its entities then decode with the page's text), an Atom `type="xhtml"`
body (elements already) as written. The channel's own title, links, dates, ids and categories are no post's text
and are not read. Everything is found with `str.find` from each open tag (linear in the feed: a tag left open ends
the search for that kind).
"""

from __future__ import annotations

import html
import re

# the prolog a feed may start with, then its root element
_ROOT = re.compile(r"\ufeff?\s*(?:(?:<\?[^<>]{0,500}\?>|<!--(?:[^-]|-(?!->)){0,2000}-->|<!DOCTYPE[^<>]{0,500}>)\s*)"
                   r"{0,8}<(?:rss|feed|rdf:RDF)(?=[\s>/])", re.I)
_ITEM = re.compile(r"<(item|entry)(?=[\s>/])[^<>]{0,2000}>")
_FIELD = re.compile(r"<(title|description|content:encoded|content|summary)(?=[\s>/])([^<>]{0,2000})>")


def is_feed(text: str) -> bool:
    """Whether `text` is an RSS, RDF or Atom feed file (its root element, after the prolog)."""
    return text.startswith(("<", "\ufeff", " ", "\t", "\n")) and _ROOT.match(text) is not None


def _body(raw: str, xhtml: bool) -> str:
    """An element's content as HTML: CDATA sections as they hold it, escaped text decoded once, markup (Atom's
    `type="xhtml"`) as written. (Not by a `<` in the text: a placeholder clean writes there, `<EMAIL>`, kept the
    whole escaped body from being decoded.)"""
    parts, at = [], 0
    while True:
        start = raw.find("<![CDATA[", at)
        plain = raw[at:] if start < 0 else raw[at:start]
        parts.append(plain if xhtml else html.unescape(plain))
        if start < 0:
            return "".join(parts)
        stop = raw.find("]]>", start + 9)
        parts.append(raw[start + 9:] if stop < 0 else raw[start + 9:stop])
        if stop < 0:
            return "".join(parts)
        at = stop + 3


def _fields(text: str, lo: int, hi: int) -> list[str]:
    """The bodies of the title and content elements between lo and hi, in order."""
    out, closed = [], set()              # closed: the names with no closing tag left (not searched again)
    found = _FIELD.search(text, lo, hi)
    while found is not None:
        name, at = found.group(1), found.end()
        stop = -1 if name in closed or found.group(2).endswith("/") else text.find(f"</{name}", at, hi)
        if stop < 0:
            closed.add(name)
        else:
            out.append(_body(text[at:stop], "xhtml" in found.group(2)))
            at = stop
        found = _FIELD.search(text, at, hi)
    return out


def feed_items(text: str) -> str:
    """The items of the feed `text` (`is_feed`) as one HTML page, each title and body in a `<div>`; `text` itself
    when it holds no item with one."""
    parts, item = [], _ITEM.search(text)
    while item is not None:
        stop = text.find(f"</{item.group(1)}", item.end())
        if stop < 0:
            break
        parts += [f"<div>{field}</div>" for field in _fields(text, item.end(), stop)]
        item = _ITEM.search(text, stop)
    return "\n".join(parts) if parts else text
