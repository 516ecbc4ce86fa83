"""Planted secrets for `tests.helpers.pii_planted`: each generator returns (carrier line, parts that must vanish).

Shapes follow the vendors' documented formats (and the detect-secrets plugins' regexes): private-key blocks,
JWTs, cloud and SaaS API keys, HTTP auth headers, `name=value` credentials with punctuation or short values,
dotted tokens and credentials inside connection URLs.
"""

from __future__ import annotations

import base64
import json
import random
import string
from typing import Callable

ALNUM = string.ascii_letters + string.digits
UPPER = string.ascii_uppercase + string.digits
LOWER = string.ascii_lowercase + string.digits
HEX = "0123456789abcdef"
B64 = ALNUM + "+/"
URLSAFE = ALNUM + "-_"
WORDS = ["hunter", "dragon", "sunshine", "monkey", "tiger", "shadow", "summer", "winter", "coffee", "lemon",
         "pass", "secret", "admin", "orange", "falcon", "rocket"]
SYMBOLS = "!@#$%^*-_.:+=?~"


def rand(rng: random.Random, n: int, alphabet: str = ALNUM) -> str:
    """A generated credential: letters and at least two digits (what real generators yield almost always)."""
    while True:
        value = "".join(rng.choice(alphabet) for _ in range(n))
        if sum(c.isdigit() for c in value) >= 2 and any(c.isalpha() for c in value):
            return value


def human_password(rng: random.Random) -> str:
    """6-15 characters as people choose them: a word with digits and symbols, leetspeak, or random."""
    style = rng.randint(0, 2)
    if style == 0:
        value = rng.choice(WORDS) + str(rng.randint(0, 99)) + rng.choice(SYMBOLS) + rng.choice("xyzqk")
    elif style == 1:
        value = rng.choice(WORDS).replace("a", "@").replace("o", "0").replace("e", "3").replace("s", "$")
        value = value[0].upper() + value[1:] + rng.choice(SYMBOLS) + str(rng.randint(1, 9))
    else:
        value = rng.choice(ALNUM) + "".join(rng.choice(ALNUM + SYMBOLS) for _ in range(rng.randint(5, 14)))
    value = value[:13]
    if not any(c.isalpha() for c in value) or all(c.isalnum() for c in value):
        value += "a!"
    return value


def _b64url(data: dict) -> str:
    return base64.urlsafe_b64encode(json.dumps(data).encode()).decode().rstrip("=")


def jwt(rng: random.Random) -> str:
    header = {"alg": rng.choice(["HS256", "RS256", "ES256"]), "typ": "JWT"}
    payload = {"sub": rand(rng, 10, LOWER), "iat": rng.randint(1_600_000_000, 1_800_000_000), "role": "user"}
    return f"{_b64url(header)}.{_b64url(payload)}.{rand(rng, 43, URLSAFE)}"


def pem(rng: random.Random) -> tuple[str, tuple[str, ...]]:
    label = rng.choice(["RSA PRIVATE KEY", "EC PRIVATE KEY", "OPENSSH PRIVATE KEY", "ENCRYPTED PRIVATE KEY",
                        "PRIVATE KEY", "DSA PRIVATE KEY", "PGP PRIVATE KEY BLOCK"])
    lines = [base64.b64encode(rng.randbytes(48)).decode() for _ in range(rng.randint(3, 8))]
    lines.append(base64.b64encode(rng.randbytes(rng.randint(4, 40))).decode())
    headers = ["Proc-Type: 4,ENCRYPTED", f"DEK-Info: AES-128-CBC,{rand(rng, 32, HEX.upper())}", ""] \
        if label == "RSA PRIVATE KEY" and rng.random() < 0.3 else []
    style = rng.randint(0, 3)
    body = "\n".join(headers + lines)
    block = f"-----BEGIN {label}-----\n{body}\n-----END {label}-----"
    if style == 0:
        text = f"Here is the key:\n{block}\nDo not share it."
    elif style == 1:      # a service-account JSON holds the block with `\n` escapes
        text = json.dumps({"type": "service_account", "private_key_id": rand(rng, 40, HEX),
                           "private_key": block + "\n"}, separators=(",", ":"))
    elif style == 2:      # pasted without the END line
        text = f"key:\n-----BEGIN {label}-----\n{body}\n\nthe rest was cut off."
    else:
        text = f"    {block}".replace("\n", "\n    ")
    parts = tuple(line for line in lines if len(line) >= 8)
    return text, parts + ((headers[1],) if headers else ())


def _token_shapes(rng: random.Random) -> list[str]:
    return [
        "AKIA" + rand(rng, 16, UPPER), "ASIA" + rand(rng, 16, UPPER), "AIza" + rand(rng, 35, URLSAFE),
        "GOCSPX-" + rand(rng, 28, URLSAFE), "ya29." + rand(rng, 60, URLSAFE),
        rand(rng, 3, ALNUM) + str(rng.randint(0, 9)) + "Q~" + rand(rng, 34, ALNUM + "_~.-"),
        "ghp_" + rand(rng, 36), "gho_" + rand(rng, 36), "ghs_" + rand(rng, 36),
        "github_pat_" + rand(rng, 22) + "_" + rand(rng, 59), "glpat-" + rand(rng, 20, URLSAFE),
        f"xoxb-{rng.randint(10**11, 10**12 - 1)}-{rng.randint(10**11, 10**12 - 1)}-{rand(rng, 24)}",
        f"xoxp-{rng.randint(10**10, 10**11 - 1)}-{rng.randint(10**10, 10**11 - 1)}-{rand(rng, 32, LOWER)}",
        f"https://hooks.slack.com/services/T{rand(rng, 8, UPPER)}/B{rand(rng, 8, UPPER)}/{rand(rng, 24)}",
        "sk_live_" + rand(rng, 24), "rk_live_" + rand(rng, 24), "sk_test_" + rand(rng, 99), "whsec_" + rand(rng, 32),
        "SK" + rand(rng, 32, HEX), "AC" + rand(rng, 32, HEX),
        f"SG.{rand(rng, 22, URLSAFE)}.{rand(rng, 43, URLSAFE)}",
        "sk-" + rand(rng, 48), "sk-proj-" + rand(rng, 120, URLSAFE), "sk-ant-api03-" + rand(rng, 93, URLSAFE) + "AA",
        "hf_" + "".join(rng.choice(string.ascii_letters) for _ in range(34)), "npm_" + rand(rng, 36),
        "pypi-AgEIcHlwaS5vcmc" + rand(rng, 70, URLSAFE), "shpat_" + rand(rng, 32, HEX),
        "dop_v1_" + rand(rng, 64, HEX), f"{rng.randint(10**8, 10**9)}:AA{rand(rng, 33, URLSAFE)}",
        rand(rng, 32, HEX) + "-us" + str(rng.randint(1, 21)), jwt(rng),
        f"M{rand(rng, 23, URLSAFE)}.{rand(rng, 6, URLSAFE)}.{rand(rng, 27, URLSAFE)}",
    ]


TOKEN_CARRIERS = ["export TOKEN={}", 'api_key = "{}"', "token: {}", "{}", "Use {} for the CI job.",
                  '{{"credentials": "{}"}}', "curl -H 'Authorization: Bearer {}' https://api.example.com",
                  "SECRET={}  # rotate monthly", "key `{}` was leaked"]


def token(rng: random.Random) -> tuple[str, tuple[str, ...]]:
    value = rng.choice(_token_shapes(rng))
    return rng.choice(TOKEN_CARRIERS).format(value), (value,)


def auth_header(rng: random.Random) -> tuple[str, tuple[str, ...]]:
    user, password = rng.choice(["admin", "bob", "svc-ci", "j.doe"]), human_password(rng)
    basic = base64.b64encode(f"{user}:{password}".encode()).decode()
    value = rng.choice([basic, rand(rng, rng.randint(20, 40), URLSAFE + "."), rand(rng, 40, HEX),
                        rand(rng, rng.randint(8, 15))])
    scheme = "Basic" if value == basic else rng.choice(["Bearer", "token", "Token", ""])
    header = rng.choice([f"Authorization: {scheme} {value}".replace("  ", " "),
                         f"X-Api-Key: {value}", f"x-api-key: {value}", f"Private-Token: {value}",
                         f"X-Auth-Token: {value}", f"Proxy-Authorization: {scheme} {value}".replace("  ", " "),
                         f"\"Authorization\": \"{scheme} {value}\"".replace("\" ", "\"")])
    carrier = rng.choice(["{}", "curl -H \"{}\" https://api.example.com/v1/items",
                          "GET /v1/items HTTP/1.1\nHost: api.example.com\n{}\nAccept: */*",
                          "headers = {{{}}}", "> {}"])
    if carrier.startswith("headers"):
        name, _, rest = header.partition(": ")
        header = f"\"{name.strip(chr(34))}\": \"{rest.strip(chr(34))}\""
    return carrier.format(header), (value,)


KEYED_NAMES = ["password", "PASSWORD", "passwd", "db_password", "DB_PASSWORD", "PGPASSWORD", "secret",
               "client_secret", "SECRET_KEY", "api_key", "apiKey", "API_KEY", "access_token", "auth_token",
               "clientSecret", "dbPassword", "GITHUB_TOKEN", "HF_TOKEN", "passphrase", "admin_pass", "pwd",
               "AccountKey", "aws_secret_access_key", "refresh_token", "mysql_root_password"]


def _keyed_value(rng: random.Random) -> str:
    style = rng.randint(0, 4)
    if style <= 2:
        return human_password(rng)
    if style == 3:          # a dotted token
        return ".".join(rand(rng, rng.randint(8, 24), URLSAFE) for _ in range(rng.randint(2, 3)))
    return rand(rng, rng.randint(6, 15), ALNUM + "-_.~")


def keyed(rng: random.Random) -> tuple[str, tuple[str, ...]]:
    name, value = rng.choice(KEYED_NAMES), _keyed_value(rng)
    shapes: list[Callable[[], str]] = [
        lambda: f"{name}={value}", lambda: f"{name}: {value}", lambda: f"{name} = \"{value}\"",
        lambda: f"{name}='{value}'", lambda: f"\"{name}\": \"{value}\"", lambda: f"export {name}={value}",
        lambda: f"  {name}: '{value}'", lambda: f"conn = connect(host=h, {name}=\"{value}\")",
        lambda: f"set {name} := '{value}'", lambda: f"'{name}' => '{value}',", lambda: f"{name}={value};",
    ]
    line = rng.choice(shapes)()
    carrier = rng.choice(["{}", "{}\nDEBUG=false", "# settings\n{}\nPORT=5432", "config: {} (prod)",
                          "The old line was `{}` before rotation."])
    return carrier.format(line), (value,)


def url_credentials(rng: random.Random) -> tuple[str, tuple[str, ...]]:
    password = "".join(c for c in human_password(rng) if c not in "@/:#?") + rand(rng, 3)
    scheme, host = rng.choice([("postgres", "db.internal.example.com:5432/app"), ("postgresql", "10.0.0.5/prod"),
                               ("mysql", "mysql.example.net/shop"), ("mongodb+srv", "cluster0.ab1cd.mongodb.net/x"),
                               ("redis", "cache.example.com:6379/0"), ("amqp", "rabbit.example.org:5672/vhost"),
                               ("https", "github.com/acme/repo.git"), ("ftp", "files.example.com/pub")])
    user = rng.choice(["bob", "admin", "x-access-token", "oauth2", "app_user", "u.name"])
    url = f"{scheme}://{user}:{password}@{host}"
    carrier = rng.choice(["DATABASE_URL={}", "git clone {}", "url: \"{}\"", "Connect with {} and retry.",
                          "engine = create_engine('{}')"])
    return carrier.format(url), (password,)


SECRET_GENERATORS = (pem, token, token, token, auth_header, keyed, keyed, url_credentials)
