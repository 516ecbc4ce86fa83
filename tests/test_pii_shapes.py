"""Credentials recognised by their shape or file format (`tasks.data.privacy.pii_shapes`): password hashes,
`.pgpass` lines, kubeadm bootstrap tokens, `user:password` after a login's name and HTTPie's `-a`, presigned
URLs' signatures; and national layouts of phone numbers and SSNs that were missed. Expected outputs are written
by hand; every case but the look-alikes failed before its fix (the look-alikes, `None`, must stay untouched)."""

from __future__ import annotations

import pytest

from tasks.data.privacy.pii import scrub_pii


def _case(text: str, expected: str | None, kind: str = "secret") -> None:
    expected = text if expected is None else expected
    scrubbed, counts = scrub_pii(text)
    assert scrubbed == expected, (text, scrubbed)
    placeholder = {"secret": "<SECRET>", "phone": "<PHONE>", "ssn": "<SSN>"}[kind]
    assert counts == ({kind: expected.count(placeholder)} if placeholder in expected else {})


SHA512 = ("$6$rounds=5000$Qx7saltZ$AbFxa6Gr0zedjKJXF6xcafmuYaUNoBA3ayi8QyhH5i/t.iiXMwWfg9Cu.blXsATMUxaSrkWgzAsOWQqUw"
          "uNHu.")
BCRYPT = "$2b$12$Qx7saltZabcdefghijklmerOKWDPbnP5Wo.LNZETLEj9DOnvZiDvK"


@pytest.mark.parametrize("text, expected", [
    (f"root:{SHA512}:19000:0:99999:7:::", "root:<SECRET>:19000:0:99999:7:::"),        # /etc/shadow
    ("app:$5$Qx7saltZ$EhAwl7No8kOJsfNHbgMCv.hPX9qnm/m/WjSxg11S/l2:19000::", "app:<SECRET>:19000::"),
    ("hash = '$1$Qx7saltZ$5K6qOofPISDMJ3Ox1CIRg/'", "hash = '<SECRET>'"),
    (f"INSERT INTO users VALUES (1, 'ann', '{BCRYPT}');", "INSERT INTO users VALUES (1, 'ann', '<SECRET>');"),
    (f"  password_digest: {BCRYPT.replace('$2b$', '$2a$')}", "  password_digest: <SECRET>"),
    ("admin:$apr1$8Xq1.2Ab$JbQJ5Xr8Qb2Z1A7x9u0Yp.", "admin:<SECRET>"),                    # .htpasswd
    ("$argon2id$v=19$m=65536,t=3,p=4$c29tZXNhbHQ$RdescudvJCsgt3ub+b+dWRWJTmaaJObG", "<SECRET>"),
    ("pbkdf2_sha256$600000$Qx7saltZab12$Vv2f0Q8uWJk3LmN4oP5qR6sT7uV8wX9yZa1Bc2De3Fg=", "<SECRET>"),   # Django
    # look-alikes: the formats named in prose or a regex, a hash of a single repeated character, a price
    ("bcrypt hashes start with $2b$12$ and crypt's SHA-512 with $6$rounds=5000$", None),
    ("pattern = r'^\\$2[aby]\\$\\d\\d\\$[./A-Za-z0-9]{53}$'", None),
    ("$2b$12$" + "." * 53, None), ("it costs $1$ or $5$ a month", None),
])
def test_password_hashes(text: str, expected: str | None) -> None:
    _case(text, expected)


@pytest.mark.parametrize("text, expected", [
    ("db.example.com:5432:app:alice:S3cretPw9", "db.example.com:5432:app:alice:<SECRET>"),
    ("# ~/.pgpass\nlocalhost:5432:mydb:bob:pa55word\n*:*:*:postgres:hunter2X",
     "# ~/.pgpass\nlocalhost:5432:mydb:bob:<SECRET>\n*:*:*:postgres:<SECRET>"),
    # look-alikes: /etc/passwd and /etc/group lines, a wildcard line where no pgpass is named, a template,
    # times and a letters-only field
    ("root:x:0:0:root:/root:/bin/bash", None), ("sudo:x:27:alice", None), ("*:*:*:postgres:hunter2X", None),
    ("db:5432:app:alice:${PGPASSWORD}", None), ("PGPASSWORD=$PGPASS psql -h db\nhost:8080:GET:index:html", None), ("12:30:45:00:12", None), ("host:8080:GET:index:html", None),
])
def test_pgpass_lines(text: str, expected: str | None) -> None:
    _case(text, expected)


@pytest.mark.parametrize("text, expected", [
    ("token: abcdef.0123456789abcdef", "token: <SECRET>"),
    ('bootstrapTokens:\n- token: "9a08jv.c0izixklcxtmnze7"', 'bootstrapTokens:\n- token: "<SECRET>"'),
    ("credentials: alice:S3cretPw9", "credentials: alice:<SECRET>"),
    ('basic_auth: "alice:S3cretPw9"', 'basic_auth: "alice:<SECRET>"'),
    ('es = Elasticsearch(hosts, http_auth="elastic:Ch4ngedPw!")',
     'es = Elasticsearch(hosts, http_auth="elastic:<SECRET>")'),
    ("http -a alice:S3cretPw9 POST example.org/api", "http -a alice:<SECRET> POST example.org/api"),
    ("https --auth=alice:S3cretPw9 example.org", "https --auth=alice:<SECRET> example.org"),
    # look-alikes: a tokenizer's token, a scope, user:group, templates, a URL
    ("token: hello.world", None), ("credentials: read:user", None), ("docker run --user 1000:1000 img", None),
    ('basic_auth: "${USER}:${PASS}"', None), ("credentials: https://vault.example.com/v1", None),
    ("http -a alice example.org", None),
])
def test_tokens_and_logins(text: str, expected: str | None) -> None:
    _case(text, expected)


AMZ_SIG = "fe5f80f77d5fa3beca038a248ff027d0445342fe2855ddc963176630326f1024"


@pytest.mark.parametrize("text, expected", [
    (f"https://b.s3.amazonaws.com/k?X-Amz-Algorithm=AWS4-HMAC-SHA256&X-Amz-Date=20240101T000000Z"
     f"&X-Amz-SignedHeaders=host&X-Amz-Signature={AMZ_SIG}",
     "https://b.s3.amazonaws.com/k?X-Amz-Algorithm=AWS4-HMAC-SHA256&X-Amz-Date=20240101T000000Z"
     "&X-Amz-SignedHeaders=host&X-Amz-Signature=<SECRET>"),
    (f"https://storage.googleapis.com/b/o?X-Goog-Algorithm=GOOG4-RSA-SHA256&X-Goog-Signature={AMZ_SIG * 2}",
     "https://storage.googleapis.com/b/o?X-Goog-Algorithm=GOOG4-RSA-SHA256&X-Goog-Signature=<SECRET>"),
    ("https://d1.cloudfront.net/a.jpg?Expires=1700000000&Signature=AbC1~dEf2-GhI3__xYz9&Key-Pair-Id=K2JCJMDEHXQW5F",
     "https://d1.cloudfront.net/a.jpg?Expires=1700000000&Signature=<SECRET>&Key-Pair-Id=K2JCJMDEHXQW5F"),
    ("https://s3.amazonaws.com/b/k?AWSAccessKeyId=AKIDEXAMPLE&Expires=1700000000"
     "&Signature=vjbyPxybdZaNmGa%2ByT272YEAiv4%3D",
     "https://s3.amazonaws.com/b/k?AWSAccessKeyId=AKIDEXAMPLE&Expires=1700000000&Signature=<SECRET>"),
    # look-alikes: a `Signature=` of some other URL, a signature parameter named in prose, a short value
    ("https://example.com/verify?Signature=AbC1dEf2GhI3xYz9AbC1dEf2", None),
    ("append X-Amz-Signature= to the query", None), (f"?X-Amz-Signature={AMZ_SIG[:40]}", None),
])
def test_presigned_urls(text: str, expected: str | None) -> None:
    _case(text, expected)


@pytest.mark.parametrize("text, expected, kind", [
    ("Priya: 98765 43210 (after six)", "Priya: <PHONE> (after six)", "phone"),           # India, 5-5
    ("联系 138 0013 8000 or 139-1234-5678", "联系 <PHONE> or <PHONE>", "phone"),     # China, 3-4-4
    ("SSN: 536.90.4399.", "SSN: <SSN>.", "ssn"),
    ("NINO: AB 12 34 56 C", "NINO: <SSN>", "ssn"),
    ("National Insurance number: JG103759A", "National Insurance number: <SSN>", "ssn"),
    ("his NI no. is AB123456C", "his NI no. is <SSN>", "ssn"),
    ("SIN: 123-456-782", "SIN: <SSN>", "ssn"),
    ("Social Insurance Number 123 456 782", "Social Insurance Number <SSN>", "ssn"),
    # look-alikes: unissued or malformed NINO prefixes, a bare one without a cue, a SIN failing Luhn, `sin(...)`
    ("GB 12 34 56 A", None, "ssn"), ("DA 12 34 56 C", None, "ssn"), ("part AB123456C", None, "ssn"),
    ("SIN: 123 456 789", None, "ssn"), ("y = np.sin(123456782)", None, "ssn"),
    # look-alikes: a row of numbers, a 5-5 pair led by 1-5, a dotted SSN layout without a cue, a version
    ("98765 43210 55555", None, "phone"), ("12345 67890", None, "phone"), ("see 536.90.4399", None, "ssn"),
    ("138 0013 8000 1234", None, "phone"),
])
def test_national_layouts(text: str, expected: str | None, kind: str) -> None:
    _case(text, expected, kind)
