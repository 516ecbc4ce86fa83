"""Planted credentials in the shapes of tool and config files (`tests.helpers.pii_planted`'s `secret/config` group):
each generator returns (carrier text, parts that must vanish).

HAR cookie lists and `Cookie` header entries, cookie calls of browser drivers and cookie jars, Postman and
Insomnia auth blocks, `.npmrc` registry tokens, setter calls (`define('DB_PASSWORD', ...)`, `setProperty`,
`os.Setenv`), Oracle logins (`scott/tiger@db`), shared access signatures, a password in the environment of one
command (`PGPASSWORD=... psql`), a JDBC SQL Server URL's password and the vendor token shapes added with them.
`CONFIG_LOOK_ALIKES` are lines of the same files that hold no credential.
"""

from __future__ import annotations

import json
import random
import string

from tests.helpers.pii_planted_secrets import ALNUM, B64, HEX, URLSAFE, human_password, rand

LOGIN_COOKIES = ("sessionid", "PHPSESSID", "JSESSIONID", "connect.sid", "_gitlab_session", "auth_token",
                 "session", "laravel_session", "__Secure-next-auth.session-token", "remember_token", "SID")
OTHER_COOKIES = (("_ga", "GA1.2.1234567890.1700000000"), ("csrftoken", "aB3dE5fG7hJ9kL1mN3pQ5rS7tU9vW1xY"),
                 ("theme", "dark"), ("XSRF-TOKEN", "f0e1d2c3b4a5968778695a4b3c2d1e0f"))


def _cookie_value(rng: random.Random) -> str:
    return rng.choice([rand(rng, rng.randint(20, 40), ALNUM), rand(rng, 32, HEX),
                       f"s%3A{rand(rng, 24, URLSAFE)}.{rand(rng, 27, ALNUM)}"])


def har_cookies(rng: random.Random) -> tuple[str, tuple[str, ...]]:
    """A HAR entry's request or response cookie list: the login cookie's value goes, the others stay."""
    name, value = rng.choice(LOGIN_COOKIES), _cookie_value(rng)
    other, other_value = rng.choice(OTHER_COOKIES)
    cookies = [{"name": other, "value": other_value, "path": "/"},
               {"name": name, "value": value, "path": "/", "httpOnly": True, "secure": True}]
    rng.shuffle(cookies)
    side = rng.choice(["request", "response"])
    entry = {side: {"cookies": cookies, "headersSize": -1}}
    return json.dumps(entry, indent=rng.choice([None, 2])), (value,)


def cookie_strings(rng: random.Random) -> tuple[str, tuple[str, ...]]:
    """A HAR header entry holding a cookie string, a driver's cookie call, a cookie jar written as a dict."""
    name, value = rng.choice(LOGIN_COOKIES), _cookie_value(rng)
    other, other_value = rng.choice(OTHER_COOKIES)
    text = rng.choice([
        f'{{"name": "Cookie", "value": "{other}={other_value}; {name}={value}"}}',
        f'{{"name": "set-cookie", "value": "{name}={value}; Path=/; HttpOnly"}}',
        f'driver.add_cookie({{"name": "{name}", "value": "{value}"}})',
        f'await context.add_cookies([{{"name": "{name}", "value": "{value}", "domain": "app.example.com", '
        f'"path": "/"}}])',
        f"await page.setCookie({{name: '{name}', value: '{value}', domain: 'localhost'}});",
        f'r = requests.get(url, cookies={{"{other}": "{other_value}", "{name}": "{value}"}})',
    ])
    return text, (value,)


def auth_blocks(rng: random.Random) -> tuple[str, tuple[str, ...]]:
    """Postman's auth blocks (collection v2.1 arrays, v2.0 objects) and Insomnia's `authentication`."""
    value = rng.choice([rand(rng, rng.randint(20, 48), URLSAFE), human_password(rng) + rand(rng, 4)])
    text = rng.choice([
        f'"auth": {{"type": "bearer", "bearer": [{{"key": "token", "value": "{value}", "type": "string"}}]}}',
        f'"auth": {{\n  "type": "apikey",\n  "apikey": [\n'
        f'    {{"key": "value", "value": "{value}", "type": "string"}},\n'
        f'    {{"key": "key", "value": "X-API-Key", "type": "string"}}\n  ]\n}}',
        f'"auth": {{"type": "bearer", "bearer": {{"token": "{value}"}}}}',
        f'"authentication": {{"type": "bearer", "token": "{value}", "prefix": "", "disabled": false}}',
    ])
    return text, (value,)


def setters(rng: random.Random) -> tuple[str, tuple[str, ...]]:
    """A name and its value as a call's two string arguments, and `.npmrc`'s registry credentials."""
    value = human_password(rng) + rand(rng, 3)
    name = rng.choice(["DB_PASSWORD", "AUTH_KEY", "SECURE_AUTH_SALT", "NONCE_KEY", "SECRET_KEY", "API_TOKEN",
                       "javax.net.ssl.keyStorePassword", "fs.s3a.secret.key", "spring.datasource.password"])
    text = rng.choice([
        f"define('{name}', '{value}');", f'System.setProperty("{name}", "{value}");',
        f'conf.set("{name}", "{value}")', f'os.environ.setdefault("{name}", "{value}")',
        f'os.Setenv("{name}", "{value}")', f'props.put("{name}", "{value}");',
        f"//registry.npmjs.org/:_authToken={rand(rng, 8, HEX)}-{rand(rng, 4, HEX)}-{rand(rng, 4, HEX)}-"
        f"{rand(rng, 4, HEX)}-{value}",
        f"//npm.pkg.example.com/:_password={rand(rng, 24, B64)}{value}",
    ])
    return text, (value,)


def logins(rng: random.Random) -> tuple[str, tuple[str, ...]]:
    """Oracle's `user/password@db`, one command's environment, tools' password flags, a JDBC SQL Server URL,
    signed URLs."""
    value = "".join(c for c in human_password(rng) if c not in "@/;&\"'") + rand(rng, 3)
    host = rng.choice(["db.example.com", "10.20.30.40", "orcl-prod"])
    signature = rand(rng, 43, ALNUM + "%") + "%3D"
    text, part = rng.choice([
        (f"jdbc:oracle:thin:scott/{value}@//{host}:1521/ORCL", value),
        (f"sqlplus system/{value}@{host}/XEPDB1", value),
        (f"PGPASSWORD={value} psql -h {host} -U app", value), (f"MYSQL_PWD={value} mysqldump shop", value),
        (f"docker login -u ci -p {value} registry.example.com", value), (f"redis-cli -h {host} -a {value} ping", value),
        (f"keytool -importcert -keystore k.jks -storepass {value}", value),
        (f"htpasswd -b .htpasswd ann {value}", value),
        (f'ldapsearch -x -D "cn=admin,dc=example,dc=com" -w {value} -b dc=example', value),
        (f"jdbc:sqlserver://{host}:1433;databaseName=app;user=sa;password={value};encrypt=true", value),
        (f"https://acct.blob.core.windows.net/c/b.txt?sv=2022-11-02&ss=b&sp=r&se=2030-01-01&sig={signature}",
         signature),
        (f"SharedAccessSignature=sv=2021-06-08&ss=bfqt&srt=sco&sp=rwdlac&sig={signature}", signature),
    ])
    return text, (part,)


def vendor_tokens(rng: random.Random) -> tuple[str, tuple[str, ...]]:
    """The vendor shapes added with this group, in a config line."""
    value = rng.choice([
        "dckr_pat_" + rand(rng, 27, URLSAFE), "gsk_" + rand(rng, 52),
        f"sk.eyJ{rand(rng, 60, URLSAFE)}.{rand(rng, 22, URLSAFE)}",
        "ops_eyJ" + rand(rng, 260, B64), "HRKU-AA" + rand(rng, 58, URLSAFE), "LTAI" + rand(rng, 20),
        f"xoxe-1-{rand(rng, 40, string.ascii_uppercase + string.digits)}",
        f"https://discord.com/api/webhooks/{rng.randint(10**17, 10**18)}/{rand(rng, 68, URLSAFE)}",
    ])
    carrier = rng.choice(["TOKEN={}", "token: {}", '"value": "{}"', "Use {} for the CI job."])
    return carrier.format(value), (value,)


CONFIG_GENERATORS = (har_cookies, cookie_strings, auth_blocks, setters, logins, vendor_tokens)


def config_secrets(rng: random.Random, n: int) -> list[tuple[str, tuple[str, ...]]]:
    """`n` credentials, the generators in turn."""
    return [CONFIG_GENERATORS[i % len(CONFIG_GENERATORS)](rng) for i in range(n)]


CONFIG_LOOK_ALIKES = [
    # cookies that hold no login, and a login cookie's name outside any cookie list
    '"cookies": [{"name": "_ga", "value": "GA1.2.1234567890.1700000000"}, {"name": "csrftoken", "value": '
    '"aB3dE5fG7hJ9kL1mN3pQ5rS7tU9vW1xY"}, {"name": "theme", "value": "dark"}]',
    '{"name": "Cookie", "value": "_ga=GA1.2.1234567890.1700000000; lang=en-US"}',
    '{"name": "session", "value": "morning2", "type": "text"}',
    "cookies = {k: v for k, v in jar.items()}", 'driver.add_cookie({"name": "sessionid", "value": session_id})',
    # auth blocks holding a template or the header's name
    '"auth": {"type": "bearer", "bearer": [{"key": "token", "value": "{{access_token}}", "type": "string"}]}',
    '"apikey": [{"key": "key", "value": "X-API-Key"}, {"key": "in", "value": "header"}]',
    '{"token": "hello", "id": 5, "logprob": -0.25}', '{"tokens": [{"key": "token", "value": "world2"}]}',
    # setters with variables, a getter's default, `.npmrc` templates
    "define('DB_PASSWORD', getenv('DB_PASSWORD'));", "define( 'AUTH_KEY', 'put your unique phrase here' );",
    'value = d.get("api_key", "abc123x!")', 'reset("password", "abc123x!")', 'conf.set("spark.password", pw)',
    "//npm.pkg.github.com/:_authToken=${NPM_TOKEN}", "self._password = password",
    # Oracle without a password, signatures without a SAS version, commands after a template
    "sqlplus / as sysdba", "sqlplus scott/$ORACLE_PW@orcl", "https://example.com/a?sig=abcdefghijklmnopqrstuvwxyz12",
    "PGPASSWORD=$PGPASS psql -h db", "PASSWORD=my pass 12 psql",
    # look-alikes of the new prefixes
    "gsk_model = load('gsk_base'); ALTAIR LTAI5 and LTAI_name; sk.eyJ; HRKU-AA-token",
]
