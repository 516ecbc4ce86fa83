"""Credentials in the shapes of tool and config files that the scrubber missed: HAR cookie lists, Postman and
Insomnia auth blocks, `.npmrc` tokens, setter calls (`define('DB_PASSWORD', ...)`), Oracle logins, shared access
signatures, a password set for one command, a JDBC SQL Server URL (cut before), a URL's user read as a header,
and vendor token shapes. Expected outputs are written by hand; every case but the look-alikes failed before its
fix (the look-alikes, `None`, must stay untouched)."""

from __future__ import annotations

import pytest

from tasks.data.privacy.pii import scrub_pii
from tasks.data.privacy.pii_literals import literal_in, remembered_absence
from tasks.data.privacy.pii_values import enclosing_labels


def _case(text: str, expected: str | None) -> None:
    expected = text if expected is None else expected
    scrubbed, counts = scrub_pii(text)
    assert scrubbed == expected, (text, scrubbed)
    assert counts == ({"secret": expected.count("<SECRET>")} if "<SECRET>" in expected else {})


SID = "k3j4h5g6f7d8s9a0qwe"


@pytest.mark.parametrize("text, expected", [
    # HAR: the login cookie of a request's or response's list goes, analytics and anti-forgery cookies stay
    (f'"cookies": [{{"name": "sessionid", "value": "{SID}", "path": "/"}}, {{"name": "_ga", "value": "GA1.2.3"}}]',
     '"cookies": [{"name": "sessionid", "value": "<SECRET>", "path": "/"}, {"name": "_ga", "value": "GA1.2.3"}]'),
    ('"cookies": [\n  {\n    "name": "PHPSESSID",\n    "value": "9f8e7d6c5b4a3210abcd",\n    "expires": null\n  }\n]',
     '"cookies": [\n  {\n    "name": "PHPSESSID",\n    "value": "<SECRET>",\n    "expires": null\n  }\n]'),
    (f'"headers": [{{"name": "Cookie", "value": "sessionid={SID}; _ga=GA1.2.3"}}]',
     '"headers": [{"name": "Cookie", "value": "sessionid=<SECRET>; _ga=GA1.2.3"}]'),
    ('{"name": "set-cookie", "value": "PHPSESSID=9f8e7d6c5b4a3210abcd; path=/; HttpOnly"}',
     '{"name": "set-cookie", "value": "PHPSESSID=<SECRET>; path=/; HttpOnly"}'),
    # browser drivers and cookie jars
    (f'driver.add_cookie({{"name": "sessionid", "value": "{SID}"}})',
     'driver.add_cookie({"name": "sessionid", "value": "<SECRET>"})'),
    (f'await context.add_cookies([{{"name": "session", "value": "{SID}", "domain": "x.com"}}])',
     'await context.add_cookies([{"name": "session", "value": "<SECRET>", "domain": "x.com"}])'),
    ("await page.setCookie({name: 'connect.sid', value: 's%3Aabc123def456.ghi789', domain: 'localhost'});",
     "await page.setCookie({name: 'connect.sid', value: '<SECRET>', domain: 'localhost'});"),
    (f'requests.get(url, cookies={{"csrftoken": "aB3dE5fG7hJ9kL1m", "sessionid": "{SID}"}})',
     'requests.get(url, cookies={"csrftoken": "aB3dE5fG7hJ9kL1m", "sessionid": "<SECRET>"})'),
    # look-alikes: no login cookie, a login cookie's name outside a cookie list, a variable, a comprehension
    ('"cookies": [{"name": "_ga", "value": "GA1.2.1234567890.17"}, {"name": "csrftoken", "value": "aB3dE5fG7hJ9kL1m"}]',
     None),
    (f'{{"name": "sessionid", "value": "{SID}"}}', None),
    ('{"name": "Cookie", "value": "_ga=GA1.2.3; lang=en2"}', None),
    ('driver.add_cookie({"name": "sessionid", "value": session_id})', None),
    ("cookies = {k: v for k, v in jar.items()}", None), ('"cookies": {"theme": "dark2x", "lang": "en"}', None),
])
def test_cookie_lists_and_jars(text: str, expected: str | None) -> None:
    _case(text, expected)


@pytest.mark.parametrize("text, expected", [
    ('"auth": {"type": "bearer", "bearer": [{"key": "token", "value": "abc123def456ghi789", "type": "string"}]}',
     '"auth": {"type": "bearer", "bearer": [{"key": "token", "value": "<SECRET>", "type": "string"}]}'),
    ('"bearer": [\n {\n  "key": "token",\n  "value": "abc123def456ghi789",\n  "type": "string"\n }\n]',
     '"bearer": [\n {\n  "key": "token",\n  "value": "<SECRET>",\n  "type": "string"\n }\n]'),
    ('"apikey": [{"key": "value", "value": "a1b2c3d4e5f6g7h8"}, {"key": "key", "value": "X-API-Key"}]',
     '"apikey": [{"key": "value", "value": "<SECRET>"}, {"key": "key", "value": "X-API-Key"}]'),
    ('"auth": {"type": "bearer", "bearer": {"token": "abc123def456ghi789"}}',          # collection v2.0
     '"auth": {"type": "bearer", "bearer": {"token": "<SECRET>"}}'),
    ('"authentication": {"type": "bearer", "token": "Tok3n!value", "prefix": ""}',       # Insomnia
     '"authentication": {"type": "bearer", "token": "<SECRET>", "prefix": ""}'),
    # look-alikes: a template, the apikey block's other fields, a tokenizer's `token` fields
    ('"bearer": [{"key": "token", "value": "{{access_token}}", "type": "string"}]', None),
    ('"apikey": [{"key": "key", "value": "X-API-Key"}, {"key": "in", "value": "header"}]', None),
    ('{"token": "hello2", "id": 5}', None), ('"tokens": [{"key": "token", "value": "world2x"}]', None),
    ('{"type": "bearer"}, {"token": "abc123def"}', None),
])
def test_postman_and_insomnia_auth_blocks(text: str, expected: str | None) -> None:
    _case(text, expected)


@pytest.mark.parametrize("text, expected", [
    ("//registry.npmjs.org/:_authToken=a1b2c3d4-e5f6-7890-abcd-ef1234567890",
     "//registry.npmjs.org/:_authToken=<SECRET>"),
    ("//registry.example.com/:_password=cGFzc3dvcmQxMjM=", "//registry.example.com/:_password=<SECRET>"),
    ("define('DB_PASSWORD', 'wp_Pa55word!');", "define('DB_PASSWORD', '<SECRET>');"),
    ("define('SECURE_AUTH_SALT', 'Jk8#mQ2!pZ7@wX4$vB1^');", "define('SECURE_AUTH_SALT', '<SECRET>');"),
    ('System.setProperty("javax.net.ssl.keyStorePassword", "ch4ngedIt!");',
     'System.setProperty("javax.net.ssl.keyStorePassword", "<SECRET>");'),
    ('conf.set("fs.s3a.secret.key", "aB3dE5fG7hJ9kL1mN3pQ")', 'conf.set("fs.s3a.secret.key", "<SECRET>")'),
    ('os.environ.setdefault("SECRET_KEY", "dj4ngo-s3cret")', 'os.environ.setdefault("SECRET_KEY", "<SECRET>")'),
    ('os.Setenv("API_TOKEN", "tok3n-V4lue")', 'os.Setenv("API_TOKEN", "<SECRET>")'),
    ("PGPASSWORD=pgPa55 psql -h db -U app", "PGPASSWORD=<SECRET> psql -h db -U app"),
    ("export MYSQL_PWD=my5ql!Pw mysqldump shop", "export MYSQL_PWD=<SECRET> mysqldump shop"),
    # look-alikes: templates, variables, a getter's default, calls that are no setters, prose, a private field
    ("//npm.pkg.github.com/:_authToken=${NPM_TOKEN}", None), ("self._password = password", None),
    ("define('DB_PASSWORD', getenv('DB_PASSWORD'));", None),
    ("define( 'AUTH_KEY', 'put your unique phrase here' );", None),
    ('value = d.get("api_key", "abc123x!")', None), ('reset("password", "abc123x!")', None),
    ('undefine("DB_PASSWORD", "x1y2z3w4")', None), ('conf.set("spark.password", pw)', None),
    ("PGPASSWORD=$PGPASS psql -h db", None), ("PASSWORD=my pass 12", None),
])
def test_npmrc_setters_and_one_command_environment(text: str, expected: str | None) -> None:
    _case(text, expected)


SIG = "Zm9vYmFyYmF6cXV4MTIzNDU2Nzg5MA%3D%3D"


@pytest.mark.parametrize("text, expected", [
    # the port and the pairs of a SQL Server URL were read as `user:password@` and cut at the password's `@`
    ("jdbc:sqlserver://host:1433;databaseName=app;user=sa;password=Str0ngP@ss;",
     "jdbc:sqlserver://host:1433;databaseName=app;user=sa;password=<SECRET>;"),
    # a URL's user was read as a header's name, and the host and path after the password went with it
    ("https://x-access-token:ghs_aBcDeFgHiJkLmNoPqRsTuVwXyZ0123456789@github.com/o/r.git",
     "https://x-access-token:<SECRET>@github.com/o/r.git"),
    ("jdbc:oracle:thin:scott/tiger123@//db.example.com:1521/ORCL",
     "jdbc:oracle:thin:scott/<SECRET>@//db.example.com:1521/ORCL"),
    ("sqlplus system/Manag3r!@orcl", "sqlplus system/<SECRET>@orcl"),
    ("sqlplus -s 'hr/hr_Pw9@db' @report.sql", "sqlplus -s 'hr/<SECRET>@db' @report.sql"),
    (f"https://acct.blob.core.windows.net/c?sv=2021-06-08&ss=bfqt&sig={SIG}&spr=https",
     "https://acct.blob.core.windows.net/c?sv=2021-06-08&ss=bfqt&sig=<SECRET>&spr=https"),
    (f"SharedAccessSignature=sv=2020-08-04&ss=b&srt=sco&sig={SIG}",
     "SharedAccessSignature=sv=2020-08-04&ss=b&srt=sco&sig=<SECRET>"),
    # look-alikes: Oracle without a password or with a variable, a `sig=` without a SAS version
    ("sqlplus / as sysdba", None), ("sqlplus scott/$ORACLE_PW@orcl", None),
    ("https://example.com/a?sig=abcdefghijklmnopqrstuvwxyz12", None),
    ("jdbc:sqlserver://host:1433;databaseName=app;integratedSecurity=true", None),
])
def test_connection_logins_and_signed_urls(text: str, expected: str | None) -> None:
    _case(text, expected)


@pytest.mark.parametrize("token", [
    "dckr_pat_" + "aB3dE5fG7hJ9kL1mN3pQ5rS7tU9", "gsk_" + "aB3dE5fG7hJ9kL1m" * 3 + "aB3d",
    "sk.eyJ" + "aB3dE5fG7h" * 6 + ".aB3dE5fG7hJ9kL1mN3pQ5", "ops_eyJ" + "aB3dE5fG7h" * 26,
    "HRKU-AA" + "aB3dE5fG7h" * 5 + "aB3dE5fG", "LTAI" + "aB3dE5fG7hJ9kL1mN3pQ", "xoxe-1-" + "AB3DE5FG7H" * 4,
    "https://discord.com/api/webhooks/123456789012345678/" + "aB3dE5fG7h" * 6 + "aB3dE5fG",
])
def test_vendor_token_shapes(token: str) -> None:
    _case(f"it leaked {token} in the log", "it leaked <SECRET> in the log")


@pytest.mark.parametrize("text", [
    "gsk_model = load('gsk_base'); dckr_pat_x", "ALTAIR LTAI5 and LTAI_name", "sk.eyJ and ops_eyJhb",
    "https://discord.com/api/webhooks/ is the endpoint", "HRKU-AA-token",
])
def test_vendor_prefix_look_alikes(text: str) -> None:
    _case(text, None)


def test_enclosing_labels() -> None:
    text = 'x = {"cookies": [{"name": "a"}, {"name": "b", "value": "v"'
    assert enclosing_labels(text, len(text)) == ["", "cookies"]
    assert enclosing_labels("driver.add_cookie({", 19) == ["add_cookie"]
    assert enclosing_labels("no container here", 17) == []


def test_absent_literals_are_remembered_only_where_no_placeholder_holds_them() -> None:
    with remembered_absence(["<SECRET>"]):
        assert not literal_in("gsk_", "no key here")
        assert not literal_in("gsk_", "gsk_ now")            # found absent before in the same scrubbing
        assert not literal_in("SECRET", "no key here")
        assert literal_in("SECRET", "x=<SECRET>")            # a placeholder holds it: never remembered
    assert literal_in("gsk_", "gsk_ now")                    # outside a scrubbing nothing is remembered


@pytest.mark.parametrize("text, expected", [
    # a property's dotted name now names a credential; its flag given empty is followed by the next flag
    ("jupyter lab --NotebookApp.token= --notebook-dir /srv", None),
    ("jupyter lab --NotebookApp.token=9f8e7d6c5b4a3210 --port 8888",
     "jupyter lab --NotebookApp.token=<SECRET> --port 8888"),
    ('_LAST_WRITE_TOKEN = b"L@stWr!t3T0k3n"', None),          # a leading `_` is code's, not .npmrc's
])
def test_flag_and_private_names(text: str, expected: str | None) -> None:
    _case(text, expected)


@pytest.mark.parametrize("text, expected", [
    ("docker login -u bob -p D0ckerPw! registry.example.com", "docker login -u bob -p <SECRET> registry.example.com"),
    ("az login --service-principal -u http://app -p S3cretSP!pw",
     "az login --service-principal -u http://app -p <SECRET>"),
    ("redis-cli -h cache -a R3disPw! ping", "redis-cli -h cache -a <SECRET> ping"),
    ('ldapsearch -x -D "cn=admin,dc=ex" -w Ld4pPw! -b dc=ex',
     'ldapsearch -x -D "cn=admin,dc=ex" -w <SECRET> -b dc=ex'),
    ("keytool -genkey -storepass St0rePw! -keypass K3yPw!x", "keytool -genkey -storepass <SECRET> -keypass <SECRET>"),
    ("htpasswd -b .htpasswd admin Adm1nPw!", "htpasswd -b .htpasswd admin <SECRET>"),
    ("htpasswd -nb admin Adm1nPw!", "htpasswd -nb admin <SECRET>"),
    ("smbclient //server/share -U bob%SmbPw123", "smbclient //server/share -U bob%<SECRET>"),
    ('{"user": "bob", "pw": "Pa55!word"}', '{"user": "bob", "pw": "<SECRET>"}'),
    ('user_pw = "Pa55!word"', 'user_pw = "<SECRET>"'),
    # look-alikes: a port, a prompt, variables, a keystore password read from the environment, code
    ("ssh login@host -p 2222", None), ("we login to the site -p 8080x", None),
    ("docker login -u bob -p $DOCKER_PW", None), ("htpasswd -c .htpasswd admin", None),
    ('redis-cli -a "$REDIS_PASSWORD" ping', None), ("ldapsearch -x -W -b dc=x", None),
    ("keytool -list -storepass:env STOREPW", None), ("pw = getpass()", None), ("pwd = os.getcwd()", None),
    ("var Pw=e=>{var t=e.point,n=e.childIndex}", None), ("reads DEBUG=pw:api,pw:channel; this", None),
])
def test_command_line_passwords_and_pw(text: str, expected: str | None) -> None:
    _case(text, expected)


def test_a_jdbc_urls_password_named_like_a_variable() -> None:
    _case("jdbc:sqlserver://db:1433;databaseName=app;user=sa;password=uu_YllklugHt21;encrypt=true",
          "jdbc:sqlserver://db:1433;databaseName=app;user=sa;password=<SECRET>;encrypt=true")
    _case("conn = f(server, database=db;password=db_password;x)", None)    # code: a variable's name stays
