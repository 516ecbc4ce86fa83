"""A secret is replaced whole or not touched, never cut; phone numbers in every international prefix form after
every phone cue are found whole (issue #31). Values are drawn from the whole alphabet of the syntax they sit in
(`tests.helpers.pii_planted_syntax`); a run of 4 characters of the value left in the text counts as a leak."""

from __future__ import annotations

import pytest
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

from tasks.data.privacy.pii import scrub_pii
from tests.helpers.pii_planted_syntax import (COUNTRIES, PHONE_CUES, PHONE_LINES, PREFIXES, SYNTAXES, Syntax,
                                           credential_like, international_number, leaked_runs)

SETTINGS = settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.filter_too_much])


def values(syntax: Syntax, min_size: int = 8) -> st.SearchStrategy[str]:
    rest = st.text(alphabet=syntax.rest + (" " if syntax.spaces else ""), min_size=min_size - 1, max_size=40)
    return st.builds(lambda first, tail: first + tail, st.sampled_from(syntax.first), rest)


def line_of(data: st.DataObject, syntax: Syntax, value: str) -> str:
    written = syntax.write(value)
    name = data.draw(st.sampled_from(syntax.names))
    return data.draw(st.sampled_from(syntax.templates)).format(name=name, value=written), written


@pytest.mark.parametrize("syntax", SYNTAXES, ids=[s.name for s in SYNTAXES])
@SETTINGS
@given(data=st.data())
def test_a_credential_is_replaced_whole_in_its_syntax(syntax: Syntax, data: st.DataObject) -> None:
    value = data.draw(values(syntax).filter(credential_like))
    text, written = line_of(data, syntax, value)
    scrubbed, counts = scrub_pii(text)
    assert counts.get("secret") and written not in scrubbed, (text, scrubbed)
    assert leaked_runs(written, text, scrubbed) == [], (text, scrubbed)


@pytest.mark.parametrize("syntax", SYNTAXES, ids=[s.name for s in SYNTAXES])
@SETTINGS
@given(data=st.data())
def test_any_value_is_replaced_whole_or_left_alone(syntax: Syntax, data: st.DataObject) -> None:
    # Whatever the value (prose, code, a template, too short), the secret pass never cuts it.
    value = data.draw(values(syntax, min_size=1))
    assume(value.strip() == value)
    text, written = line_of(data, syntax, value)
    scrubbed, _ = scrub_pii(text, kinds=["secret"])
    assert written in scrubbed or leaked_runs(written, text, scrubbed) == [], (text, scrubbed)


@pytest.mark.parametrize("cue", PHONE_CUES)
@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.filter_too_much])
@given(data=st.data())
def test_international_numbers_after_every_cue(cue: str, data: st.DataObject) -> None:
    cc, groups = data.draw(st.sampled_from(COUNTRIES))
    prefix = data.draw(st.sampled_from([p for p in PREFIXES if cc != 1 or "(0)" not in p]))
    number = international_number(data.draw(st.randoms(use_true_random=False)), cc, groups, prefix)
    assume(len(set(number) & set("0123456789")) >= 3)       # `+1 100 000 0000` is no number anyone has
    text = data.draw(st.sampled_from(PHONE_LINES)).format(cue=cue, number=number)
    scrubbed, counts = scrub_pii(text)
    assert counts == {"phone": 1} and leaked_runs(number, text, scrubbed) == [], (text, scrubbed)


@pytest.mark.parametrize("text, kept", [
    ("passwd=p4ss&FFxP$9w", "passwd="),                        # `&` inside an env value (was cut at it)
    ("password=%abc12x!", "password="),                        # a leading `%` is no template
    ("DB_PASSWORD=!Xk29a#q", "DB_PASSWORD="),                  # nor a leading `!`
    ("secret: ab%scd12x", "secret: "),                         # `%s` inside is no format string
    ('"password": "ab\\"c12 x"', '"password": "'),            # an escaped quote inside JSON
    ("https://x.io/cb?u=u&passwd=ab1x9z&c2&next=1", "passwd="),  # a query value ends at `&`: `ab1x9z`
    ("tool --api-key !Qx9z.w run", "--api-key "),              # a flag's shell word
    ("<password>a>b 12&amp;c</password>", "<password>"),       # XML text with `>` and an entity
    ("client_secret=>'ab12cd'xyzw", "client_secret="),         # .env `=>`: `>'ab12cd'xyzw`, not a quoted 'ab12cd'
])
def test_values_issue_31_names(text: str, kept: str) -> None:
    scrubbed, counts = scrub_pii(text)
    assert counts == {"secret": 1} and scrubbed.startswith(text[:text.index(kept)] + kept + "<SECRET>"), scrubbed


def test_query_value_ends_at_its_ampersand() -> None:
    url = "https://x.io/cb?user=u&passwd=ab1c2d&next=1"
    assert scrub_pii(url)[0] == url.replace("ab1c2d", "<SECRET>")
    # outside a query the same `&` is the value's own
    assert scrub_pii("passwd=ab1c2d&next=1")[0] == "passwd=<SECRET>"


@pytest.mark.parametrize("text", ["https://api.example.com/v1/login?user=bob&api_key=aPW:00000A&next=%2F",
                                  "GET /auth?token=aPW:00000A HTTP/1.1"])
def test_a_name_inside_another_pairs_value_is_no_name(text: str) -> None:
    # hypothesis drew it: `aPW:` was read as a name of its own and only `00000A` replaced, leaving `aPW:`
    scrubbed, counts = scrub_pii(text)
    assert counts == {"secret": 1} and "aPW" not in scrubbed and "<SECRET>" in scrubbed, scrubbed


@pytest.mark.parametrize("text", [
    "password: !vault |", "password: *default_pw", "secret: &pw_anchor", "api_key='%s'", "password = %(db_pw)s",
    "password: str | None = None", "password = Optional[str] = None", "token = self.next_token()",
    "password = get_password(user, 'x')", "key=lambda x: x", "password_file=/etc/app/pw.txt",
    "'password': 'Enter your password'", "password: at least 8 characters", "ok = password==other2",
    "if password==x1y2z3!:", "export API_TOKEN=${TOKEN}", "PASSWORD=$(cat /run/secrets/pw)",
])
def test_templates_code_and_prose_stay(text: str) -> None:
    assert scrub_pii(text) == (text, {})
