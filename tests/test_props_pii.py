"""Invariants of `scrub_pii` on any text: idempotent, placeholders never cut or nested, text without any kind's
trigger character untouched, no exception on any str, and time linear in the text's length (no regex or line
scan that goes quadratic on a long line of cue words). Failing draws of the fuzz campaign are explicit cases."""

from __future__ import annotations

import re
import time

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tasks.data.privacy.pii import PLACEHOLDERS, scrub_pii

SETTINGS = settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])

# Pieces that make the passes fire, half-fire or meet each other: values of every kind, their cue words and
# separators, placeholders, and the characters that break scanners (controls, RTL marks, surrogates, NUL).
PIECES = [
    "ann@example.com", "jörg@müller.de", '"john doe"@example.com', "a&#64;b.io", "x%40y.org", "=40", "@", "＠",
    "+1 (478) 952-2092", "tel: ", "phone: 030 1234567", "4111 1111 1111 1111", "4111111111111111", "8.8.8.8",
    "2a00:1450:4001::1", "::", "fe80::1", "DE89 3704 0044 0532 0130 00", "078-05-1120", "password=", "password: ",
    "password=Xk29a#q1", "api_key: 'aPW00000Aqq'", "?token=abc123XYZ&", "&passwd=", "--password ", "secret=x",
    "AKIAIOSFODNN7EXAMPLE", "Authorization: Bearer ", "eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOjF9.c2lnbmF0dXJlMTI",
    "Server=db;User ID=sa;Password=", ";", "=", ":", "://", "https://u:p4ss@x.io/", "&", "%", "'", '"', "`", "(", ")",
    "<", ">", "<EMAIL>", "<SECRET>", "<PHONE>", "<IP_ADDRESS>", "<CREDIT_CARD>", " ", "\t", "\n", "\r\n", "\x00",
    "\u200f", "\u202e", "\u200b", "\ud800", "\udcff", "1", "0", "-", ".", ",", "a", "Z", "é", "日本", "😀",
]
texts = st.lists(st.one_of(st.sampled_from(PIECES), st.text(max_size=6)), max_size=14).map("".join)
any_str = st.text(alphabet=st.characters(blacklist_categories=()), max_size=60)    # surrogates included
PLACEHOLDER = re.compile("|".join(re.escape(p) for p in sorted(set(PLACEHOLDERS.values()))))


def check_idempotent(text: str) -> None:
    once, _ = scrub_pii(text)
    again, counts = scrub_pii(once)
    assert (again, counts) == (once, {}), (text, once, again)


@SETTINGS
@given(texts)
def test_scrubbing_is_idempotent(text):
    check_idempotent(text)


@pytest.mark.parametrize("text", [
    "+1 (478) 952-2092" * 40, "+44 20 7946 0958" * 40, "(202) 555-0143" * 40,     # a round per glued phone:
    "Tel: +1 (478) 952-2092" + "+1 (478) 952-2092" * 30,                        # MAX_ROUNDS left 9 of 40
    "4111111111111111," * 40, "4111 1111 1111 1111;" * 40,  # a card between commas: a CSV row's field
    "+1 (478) 952-2092/" * 40, "0176 12345678/" * 40,        # until its neighbour is a placeholder
])
def test_scrubbing_is_idempotent_on_drawn_cases(text):
    check_idempotent(text)
    assert not any(c.isdigit() for c in scrub_pii(text)[0]), text


@pytest.mark.parametrize(("text", "kind"), [("8.8.8.8/" * 40, "ipv4"), ("2a00:1450:4001::1/" * 40, "ipv6")])
def test_scrubbing_is_idempotent_on_separated_runs(text, kind):
    """`/8` before `.8.8.8` (`/2` before `a00:`) was read as a prefix length until the address after it was a
    placeholder: one address a round from the end backwards, 16 of 40 when MAX_ROUNDS stopped."""
    check_idempotent(text)
    assert scrub_pii(text) == ("<IP_ADDRESS>/" * 40, {kind: 40})


@pytest.mark.parametrize("text", ["10.0.0.0/8", "10.0.0.0/8.", "route 8.8.8.0/24: via", "2a00:1450::/32,"])
def test_a_network_before_punctuation_is_still_kept(text):
    assert scrub_pii(text) == (text, {})


def check_placeholders_whole(text: str) -> None:
    # In text without `<` or `>`, every such character of the output belongs to a whole placeholder: none cut,
    # none inside another.
    scrubbed, counts = scrub_pii(text)
    assert not re.search("[<>]", PLACEHOLDER.sub("", scrubbed)), (text, scrubbed)
    # (fewer placeholders than counts where a value swallowed one an earlier pass wrote: `Bearer
    # https://u:<SECRET>@x.io/` is one secret, counted twice)
    assert len(PLACEHOLDER.findall(scrubbed)) <= sum(counts.values()), (text, scrubbed, counts)


@SETTINGS
@given(texts.map(lambda t: t.replace("<", "").replace(">", "")))
def test_placeholders_are_whole_and_counted(text):
    check_placeholders_whole(text)


@pytest.mark.parametrize("text", ["Authorization: Bearer https://u:p4ss@x.io/"])
def test_placeholders_are_whole_on_drawn_cases(text):
    check_placeholders_whole(text)


@SETTINGS
@given(st.lists(st.one_of(texts.map(lambda t: t.replace("<", "")), st.sampled_from(sorted(set(PLACEHOLDERS.values())))), max_size=6).map(" \n".join))
def test_placeholders_in_the_input_stay_as_they_are(text):
    # (a placeholder inside a value, `secret=x<EMAIL>`, goes with the value: only whole lines are asked to stay)
    scrubbed, _ = scrub_pii(text)
    for p in set(PLACEHOLDERS.values()):
        assert scrubbed.count(p) >= text.count(p), (text, scrubbed)


# No digit (phones, cards, IDs, addresses), no `@`-form, no `:`/`=` (names' separators, URLs), no `%`/`&`
# (escapes), and lower case only (tokens' shapes need capitals or digits): no pass can fire.
QUIET = st.text(alphabet=st.sampled_from("abcdefghijklmnopqrstuvwxyz .,!?'\"()-\n\tçéßжλ日本\u200f"), max_size=200)


@SETTINGS
@given(QUIET)
def test_text_without_trigger_characters_is_unchanged(text):
    assert scrub_pii(text) == (text, {})


@SETTINGS
@given(any_str)
def test_any_str_is_scrubbed_without_error(text):
    scrubbed, counts = scrub_pii(text)
    assert isinstance(scrubbed, str) and all(v > 0 for v in counts.values())


@pytest.mark.parametrize("text", [
    "\x00" * 1000, "\ud800password=\udfff", "\u202epassword=Xk29a#q1\u202c", "a@\u200fb.com", "\u200f+1 478 952 2092",
    "password=" + "x" * 1_000_000, ("ann@example.com " * 70_000)[:1_000_000], "1" * 1_000_000,
])
def test_hostile_lines_are_scrubbed_without_error(text):
    scrubbed, _ = scrub_pii(text)
    assert scrub_pii(scrubbed)[1] == {}


N = 200_000
# Repeated cue words and separators: each a long single line, where a per-match scan of the rest of the line
# (or a backtracking regex) turns quadratic.
ADVERSARIAL = {
    "password= ": "password= ", "password=": "password=", "password:": "password:", "pw=pw ": "password=password ",
    "json": '"password": ', "@": "@", "a@": "a@", "a.a@": "a.a@", "quoted@": '"a"@', "%40": "a%40", "=40": "=40",
    "1-": "1-", "1 ": "1 ", "1234 ": "1234 ", "1.": "1.", "(1": "(1", "+1 ": "+1 ", ":": ":", "1:": "1:",
    "://": "://", "key=": "key=", "token ": "token ", "cookie": "Cookie: ", "connection": ";Server=x;Password=",
    "mixed": "a@b.c 1-2 :: password= ", "qp@": "a=40b.cc ", "qp@ escaped": "a=40b.cc =3D", "--password=": "--password=",
    "Pwd={": ";Password={", "quoted pw": 'password="', "glued phones": "+1 (478) 952-2092",
    "cards, CSV": "4111111111111111,",
}


def _seconds(text: str) -> float:
    best = float("inf")
    for _ in range(2):
        t0 = time.perf_counter()
        scrub_pii(text)
        best = min(best, time.perf_counter() - t0)
    return best


PLAIN = ("The mill by the river grinds grain all day long. " * (N // 49 + 1))[:N]


@pytest.mark.parametrize("name", list(ADVERSARIAL))
def test_adversarial_text_takes_linear_time(name):
    piece = ADVERSARIAL[name]
    quarter, whole = _seconds(piece * (N // 4 // len(piece))), _seconds(piece * (N // len(piece)))
    # Linear: 4x the text takes ~4x the time (quadratic: 16x), and no more than a bounded factor of plain
    # text's (the constant: scrubbing a text of matches costs a Python callback per match). 12x, not 8x: on a
    # loaded 2-core machine `password=password ` measured 7.4x (allocation of 4x the matches), so 8x would flake.
    assert whole < 12 * quarter + 0.05, (name, quarter, whole)
    # Plain text is timed beside each case, not once per module: under a load that changes between the two
    # (CI beside a `dvc repro`), `glued phones` measured 71x a plain time taken earlier in a quiet moment. A
    # second pair is timed only when the first is over the bound; a real constant-factor regression fails both.
    ratios = []
    for _ in range(2):
        plain = _seconds(PLAIN)
        ratios.append((whole - 0.05) / plain)
        if ratios[-1] < 60:
            break
        whole = _seconds(piece * (N // len(piece)))
    assert min(ratios) < 60, (name, ratios)


def test_a_windows_variable_in_a_query_is_a_template():
    # a fuzz draw: the syntax test's generator took `%A00000%` for a credential, the scrubber (rightly, as for
    # `%PASSWORD%`) for a batch file's `%VAR%`; the generator now skips it, and this keeps the scrubber's side
    text = "https://api.example.com/v1/login?user=bob&password=%A00000%&next=%2F"
    assert scrub_pii(text) == (text, {})


@pytest.mark.parametrize("text", ["password=0000A://", '"api_key": "0000://A"'])
def test_a_value_holding_a_url_mark_is_left_to_the_url_pass(text):
    # a fuzz draw: the syntax test's generator took `0000A://` for a credential; `value_ok` reads `://` as a URL's
    assert scrub_pii(text) == (text, {})
