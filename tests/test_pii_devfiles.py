"""A sixth PII probe (124 developer artifacts: HAR files, browser-copied curl commands, dotfiles, kubeconfigs,
notebooks, framework settings, connection strings, CI files, exported password CSVs) kept 345 of 387 credentials
and hit 16 of 277 look-alikes. These cover the shapes it missed and the look-alikes it took."""

from __future__ import annotations

import pytest

from tests.helpers.pii_cases import assert_scrubbed


@pytest.mark.parametrize("text, expected", [
    # a HAR's postData.text: JSON inside a JSON string, its quotes escaped
    ('"postData": {"text": "{\\"login\\":\\"rhea\\",\\"password\\":\\"Vt7*qLm2!zzP\\"}"}',
     '"postData": {"text": "{\\"login\\":\\"rhea\\",\\"password\\":\\"<SECRET>\\"}"}'),
    # a notebook cell's source
    ('"source": ["os.environ[\\"GITLAB_TOKEN\\"] = \\"Qh3kP9wZr2Lx8VbN5mTc\\"\\n"]',
     '"source": ["os.environ[\\"GITLAB_TOKEN\\"] = \\"<SECRET>\\"\\n"]'),
])
def test_an_escaped_json_pair_is_read(text, expected):
    assert_scrubbed(text, expected)


@pytest.mark.parametrize("text, expected", [
    # (one digit: the keyed passes read a value in its own quotes; here the quote opens before the name)
    ('"text": ["SMTP_PASSWORD=bTqrwKsLenx4\\n", "LANG=C\\n"]', '"text": ["SMTP_PASSWORD=<SECRET>\\n", "LANG=C\\n"]'),
    ('"Env": ["PATH=/usr/bin", "REDIS_PASSWORD=kVnarQpLws7"]', '"Env": ["PATH=/usr/bin", "REDIS_PASSWORD=<SECRET>"]'),
])
def test_an_environment_line_inside_a_string_is_read(text, expected):
    assert_scrubbed(text, expected)


@pytest.mark.parametrize("text, expected", [
    ("curl https://acme.test/login --data-raw 'user=kai&password=#Rq8!vLz#2mW' --compressed",
     "curl https://acme.test/login --data-raw 'user=kai&password=<SECRET>' --compressed"),
    ("url: jdbc:mysql://db.lan:3306/shop?user=kai&password=Hz3#pqW9ta",
     "url: jdbc:mysql://db.lan:3306/shop?user=kai&password=<SECRET>"),
])
def test_a_form_password_keeps_its_punctuation(text, expected):
    assert_scrubbed(text, expected)


def test_a_connection_string_password_with_one_digit():
    assert_scrubbed("Server=10.1.2.3;Database=app;User Id=kai;Password=tqmWbcxLpRz4;",
                    "Server=10.1.2.3;Database=app;User Id=kai;Password=<SECRET>;")


def test_a_password_piped_to_a_registry_login():
    assert_scrubbed('- run: echo "Pq4rWz8LmT2v" | docker login -u kai --password-stdin ghcr.io',
                    '- run: echo "<SECRET>" | docker login -u kai --password-stdin ghcr.io')


@pytest.mark.parametrize("text, expected", [
    ("name,url,username,password\nforum,https://forum.test/login,kai,Mj7wq2Lx9!\nbank,https://bank.test,kai,P0o9i8u7Y\n",
     "name,url,username,password\nforum,https://forum.test/login,kai,<SECRET>\nbank,https://bank.test,kai,<SECRET>\n"),
    ('"url","username","password","httpRealm"\n"https://mail.test","kai","zR5tq8Wm1x",""\n',
     '"url","username","password","httpRealm"\n"https://mail.test","kai","<SECRET>",""\n'),
])
def test_a_password_column_of_an_exported_csv(text, expected):
    assert_scrubbed(text, expected)


def test_a_wildcard_pgpass_line_under_its_documented_header():
    assert_scrubbed("# hostname:port:database:username:password\n*:*:*:report:Ty6pWq2LzR\n",
                    "# hostname:port:database:username:password\n*:*:*:report:<SECRET>\n")


@pytest.mark.parametrize("text", [
    '"auth": "SGVsbG8gd29ybGQsIHRoaXMgaXMganVzdCB0ZXh0"',     # base64 of prose, no `user:password`
    "curl -u user:pass https://example.com/api",               # documentation's stand-in
])
def test_look_alikes_the_probe_hit_stay(text):
    assert_scrubbed(text, None)


@pytest.mark.parametrize("text", [
    '"postData": {"text": "{\\"password\\":\\"<password>\\"}"}',
    "curl --data-raw 'user=kai&password=${PASSWORD}'",
    'echo "$CR_PAT" | docker login ghcr.io -u kai --password-stdin',
    "name,url,username,password\nforum,https://forum.test,kai,********\n",
])
def test_placeholders_stay_control(text):
    """Controls (pass on the old code too): placeholders in the shapes above are no credentials."""
    assert_scrubbed(text, None)


def test_a_docker_auth_login_is_still_scrubbed_control():
    """Control: base64 of `user:password` after `auth` is a login (the prose check spares only text)."""
    assert_scrubbed('{"auths": {"ghcr.io": {"auth": "a2FpOlB3N3FSdDJ6THg5bQ=="}}}',
                    '{"auths": {"ghcr.io": {"auth": "<SECRET>"}}}')
