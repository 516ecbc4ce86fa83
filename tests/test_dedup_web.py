"""Near dedup on web-page copies whose URLs carry other tracking parameters and session ids (`DedupSpec.fold_urls`,
`tasks/data/dedup/lineprefix.py`). A short page (100-300 words of an embedded encyclopedia article in a site's
chrome) whose link list, as a text dump writes it, has a session id after every link shared J ~0.6-0.75 with the
same page fetched in another session, and a web probe found none of 40 such pairs; now J ≥ 0.8 and the copy is
removed, in memory and through clean's real path. Parameters that name content (`?id=`, `?q=`, `?page=`) and
fragments stay, and different articles, notices and product pages in one template stay apart (`test_control_*`)."""

from __future__ import annotations

import random

import pytest

from specs.clean import CleanSpec, DedupSpec
from tests.helpers import dedup_variants as dv
from tests.helpers.shingle_definition import assert_compiled_path_is_the_definition
from tests.test_dedup_folds import assert_copies_removed, assert_near_copy, jaccard, real_keepers

CLEAN = CleanSpec()


def off() -> DedupSpec:
    """The spec with URLs read as written (the reading before `fold_urls`)."""
    return DedupSpec(fold_urls=False)


HOST = "https://www.dailyledger.com"
SECTIONS = ["", "news/", "history/", "opinion/", "newsletters/", "account/login", "subscribe/"]


def leads(count: int, words: int = 150) -> list[tuple[str, str]]:
    """(title, the first ~`words` words) of embedded encyclopedia articles."""
    out = []
    for key, text in dv.docs_of("encyclopedia", count, 200, 10**6):
        body = " ".join(" ".join(p for p in text.split("\n") if len(p.split()) > 8).split()[:words])
        out.append((key.split("/", 1)[1].replace("_", " "), body))
    return out


def page(title: str, body: str, session: str = "", canonical: str = "", related: tuple[str, ...] = ()) -> str:
    """A short page as a text dump writes it: nav, title, byline, body, share line, numbered link list."""
    slug = "-".join(title.lower().split())
    links = [f"{HOST}/{s}{session}" for s in SECTIONS] + [f"{HOST}/history/2021/03/{slug}{canonical or session}"]
    links += [f"{HOST}/history/{'-'.join(r.lower().split())}{session}" for r in related]
    return "\n\n".join([
        "The Daily Ledger | Home | News | History | Opinion | Newsletters | Log in | Subscribe",
        title, "By Maria Lopez | Published March 3, 2021", body,
        "Share this article: Facebook | X | LinkedIn | WhatsApp | Email | Copy link",
        "References\n" + "\n".join(f"{k + 1}. {u}" for k, u in enumerate(links)),
        "© 2024 The Daily Ledger. All rights reserved. About us | Contact | Privacy Policy | Terms of Service"])


def _session(kind: str, rng: random.Random, n: int = 0) -> str:
    token, source = f"{rng.getrandbits(128):032x}", [("newsletter", "email"), ("twitter", "social")][n]
    return {"jsessionid": f";jsessionid={token.upper()}", "phpbb": f"?sid={token}", "php": f"?PHPSESSID={token}",
            "utm": f"?utm_source={source[0]}&utm_medium={source[1]}&utm_campaign=w{token[:6]}",
            "fbclid": f"?fbclid=IwAR{token}{token[:8]}", "gclid": f"?gclid=Cj0KCQjw{token}&ref=home"}[kind]


KINDS = ["jsessionid", "phpbb", "php", "utm", "fbclid", "gclid"]


def copies() -> dict[str, tuple[str, str]]:
    """Per kind: (the page in one session, the same page in another), each on its own article."""
    rng, related = random.Random(5), ("Alchemy", "Algeria", "Atlas Shrugged")
    out = {}
    for kind, (title, body) in zip(KINDS, leads(len(KINDS))):
        out[kind] = (page(title, body, _session(kind, rng, 0), related=related),
                     page(title, body, _session(kind, rng, 1), related=related))
    return out


COPIES = copies()


@pytest.mark.parametrize("kind", KINDS)
def test_a_page_in_another_session_is_a_near_duplicate(kind):
    original, copy = COPIES[kind]
    assert jaccard(original, copy, off()) < 0.8                 # the old reading: a new id after every link
    assert_near_copy(original, copy)


def test_every_session_copy_is_removed_by_the_real_path(tmp_path):
    assert_copies_removed(COPIES, tmp_path)


def test_tracking_parameters_are_read_as_absent():
    from tasks.data.dedup.lineprefix import strip_tracking

    text = (f"Read more: {HOST}/a/b?utm_source=x&utm_medium=y&id=5#top and www.x.org/p?fbclid=1&amp;q=lyon. "
            f"Also {HOST}/c;jsessionid=ABC?page=2&gclid=9 and {HOST}/d?MSCLKID=3&amp;q=lyon&amp;sid=a.")
    assert strip_tracking(text) == (f"Read more: {HOST}/a/b?id=5#top and www.x.org/p?fbclid=1&amp;q=lyon. "
                                    f"Also {HOST}/c?page=2 and {HOST}/d?q=lyon")
    plain = f"See {HOST}/a/b?id=5#top, a ? b; c"
    assert strip_tracking(plain) is plain
    listed = f"1. {HOST}/item?id=101&page=100#s\n2. {HOST}/search?q=paris&utm_source=nav"
    assert strip_tracking(listed) == f"1. {HOST}/item?id=101&page=100#s\n2. {HOST}/search?q=paris"


def test_the_compiled_path_is_the_definition_with_urls():
    original, copy = COPIES["jsessionid"]
    assert_compiled_path_is_the_definition([
        original, copy, COPIES["utm"][1], f"<p>Caf\u00e9 {HOST}/x?utm_source=a&amp;id=2</p><p>b</p><p>c</p>",
        "  1  url = 'https://x.org/?sid=1'\n  2  return url\n  3  pass", "Stra\u00dfe www.b.de/?fbclid=x;sid=2 fin"])


def test_the_switch_off_reads_urls_as_written():
    original, copy = COPIES["utm"]
    assert jaccard(original, copy, off()) < jaccard(original, copy) == 1.0


# --- controls: different pages stay apart ---------------------------------------------------------------------
def test_control_content_parameters_and_fragments_stay():
    lists = ["Results\n" + "\n".join(f"{k}. {HOST}/item?id={base + k}&page={base}#{'s' * (base % 3 + 1)}"
                                     for k in range(1, 13)) for base in (100, 200)]
    searches = [f"Search: {HOST}/search?q={q}&utm_source=nav {q} results 1 to 10 of 240" for q in ("paris", "lyon")]
    for a, b in (lists, searches):
        assert jaccard(a, b) < 0.8
        assert dv.groups({"a": a, "b": b}, CLEAN) == {"a": "a", "b": "b"}


def test_control_different_articles_in_one_template_with_one_session_stay_apart(tmp_path):
    rng, related = random.Random(9), ("Alchemy", "Algeria", "Atlas Shrugged")
    session = _session("jsessionid", rng)
    pages = [page(title, body, session, related=related) for title, body in leads(8, 110)]
    assert max(jaccard(a, b) for k, a in enumerate(pages) for b in pages[k + 1:]) < 0.8
    assert real_keepers(pages, tmp_path) == {}


def test_control_product_pages_and_notices_with_tracked_links_stay_apart(tmp_path):
    rng = random.Random(3)
    products = [(f"Lumina ProBook X{n} Laptop. Price: ${rng.randint(399, 2499)}.99. Memory: {m} GB RAM. Storage: "
                 f"{s} GB SSD. Display: {d} inch. Weight: {rng.uniform(1.1, 2.9):.2f} kg. Free shipping on orders "
                 f"over $50. 30-day returns. Buy now: {HOST}/shop/probook-x{n}?utm_source=feed&ref=list "
                 f"Reviews: {HOST}/shop/probook-x{n}/reviews?sid={rng.getrandbits(64):016x}")
                for n, m, s, d in [(10, 8, 256, 13.3), (20, 16, 512, 14), (30, 32, 1024, 15.6), (40, 64, 2048, 16)]]
    notices = [(f"Notice of public hearing. The {city} Planning Commission will hold a public hearing on {day} to "
                f"consider application No. {num} by {name} for a variance at {street}. All interested persons may "
                f"appear and be heard. Details: {HOST}/notices/{num}?utm_campaign=legal&fbclid={num}x")
               for city, day, num, name, street in [
                   ("Springfield", "May 3, 2024", "2024-118", "Ann Lee", "12 Oak Street"),
                   ("Riverton", "June 9, 2024", "2024-731", "Omar Haddad", "8 Mill Road"),
                   ("Lakeside", "July 1, 2023", "2023-044", "Peter Novak", "301 Shore Drive")]]
    texts = products + notices
    assert max(jaccard(a, b) for k, a in enumerate(texts) for b in texts[k + 1:]) < 0.8
    assert real_keepers(texts, tmp_path) == {}
