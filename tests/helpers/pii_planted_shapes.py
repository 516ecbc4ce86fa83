"""Planted PII in shapes of its own (`tests.helpers.pii_planted`'s `secret/shapes`, `ssn/national` and
`phone/national` groups): each generator returns (carrier text, parts that must vanish).

`secret/shapes`: password hashes (bcrypt, crypt's SHA-512/SHA-256/MD5, htpasswd's apr1, Argon2, Django's
PBKDF2), `.pgpass` lines, kubeadm bootstrap tokens, `user:password` after `credentials`/`basic_auth`/`http_auth`
and HTTPie's `-a`, presigned URLs' signatures (AWS SigV4, GCS, CloudFront, S3's v2). `ssn/national`: the UK's
National Insurance number, Canada's SIN, a dotted US SSN, after their cues (a spaced NINO also bare).
`phone/national`: India's `98765 43210` and China's `138 0013 8000` layouts, with and without a cue.
`SHAPES_LOOK_ALIKES` are lines of the same kinds that hold none.
"""

from __future__ import annotations

import random
import string

from tests.helpers.pii_planted_secrets import ALNUM, HEX, URLSAFE, human_password, rand

CRYPT64 = "./" + string.ascii_letters + string.digits
B64 = string.ascii_letters + string.digits + "+/"


def _hash(rng: random.Random) -> str:
    salt = rand(rng, rng.randint(8, 16), CRYPT64)
    return rng.choice([
        f"$2{rng.choice('aby')}${rng.randint(4, 14):02d}${rand(rng, 53, CRYPT64)}",
        f"$6${salt}${rand(rng, 86, CRYPT64)}", f"$6$rounds=656000${salt}${rand(rng, 86, CRYPT64)}",
        f"$5${salt}${rand(rng, 43, CRYPT64)}", f"$1${salt[:8]}${rand(rng, 22, CRYPT64)}",
        f"$apr1${salt[:8]}${rand(rng, 22, CRYPT64)}",
        f"$argon2id$v=19$m=65536,t=3,p=4${rand(rng, 22, B64)}${rand(rng, 43, B64)}",
        f"pbkdf2_sha256$600000${rand(rng, 22, ALNUM)}${rand(rng, 43, B64)}=",
    ])


def password_hashes(rng: random.Random) -> tuple[str, tuple[str, ...]]:
    """A hash in a shadow file, an htpasswd file, SQL, YAML or code."""
    value = _hash(rng)
    carrier = rng.choice(["root:{}:19700:0:99999:7:::", "admin:{}", "INSERT INTO users VALUES (7, 'ann', '{}');",
                          "  password_digest: {}", 'user.password = "{}"', "hash {} in the dump"])
    return carrier.format(value), (value,)


def pgpass_lines(rng: random.Random) -> tuple[str, tuple[str, ...]]:
    """A `.pgpass` line alone or under a comment that names the file (wildcards only there)."""
    value = "".join(c for c in human_password(rng) if c not in ":\\") + rand(rng, 3)
    host = rng.choice(["db.example.com", "localhost", "pg-prod-1.internal", "10.20.30.40"])
    port, db = rng.choice(["5432", "6432", "5433"]), rng.choice(["app", "analytics", "postgres"])
    line = f"{host}:{port}:{db}:{rng.choice(['app', 'bob', 'replicator'])}:{value}"
    if rng.random() < 0.5:
        line = rng.choice(["# ~/.pgpass\n", "$ cat ~/.pgpass\n"]) + rng.choice([line, f"*:*:*:postgres:{value}"])
    return line, (value,)


def tokens_and_logins(rng: random.Random) -> tuple[str, tuple[str, ...]]:
    """A kubeadm bootstrap token; `user:password` after a name that holds a login or HTTPie's `-a`."""
    alnum = string.ascii_lowercase + string.digits
    if rng.random() < 0.3:
        token = f"{rand(rng, 6, alnum)}.{rand(rng, 15, alnum)}{rng.choice(string.digits)}"
        return rng.choice([f"token: {token}", f'- token: "{token}"',
                           f"kubeadm join 10.0.0.5:6443 --token {token} --discovery-token-ca-cert-hash sha256:ab"]), \
            (token,)
    value = "".join(c for c in human_password(rng) if c not in "'\"") + rand(rng, 3)
    user = rng.choice(["alice", "elastic", "ci-bot", "admin"])
    text = rng.choice([f"credentials: {user}:{value}", f'basic_auth: "{user}:{value}"',
                       f'es = Elasticsearch(hosts, http_auth="{user}:{value}")', f"http -a {user}:{value} GET x.io/api",
                       f"https --auth={user}:{value} example.org", f"proxy_auth = '{user}:{value}'"])
    return text, (value,)


def signed_urls(rng: random.Random) -> tuple[str, tuple[str, ...]]:
    """A presigned S3 (SigV4 and v2), GCS or CloudFront URL; the signature (and a session token) go."""
    sig = rand(rng, 64, "0123456789abcdef")
    base = "https://bucket.s3.amazonaws.com/reports/q3.pdf?X-Amz-Algorithm=AWS4-HMAC-SHA256&X-Amz-Date=20240101T0"
    text, parts = rng.choice([
        (f"{base}00000Z&X-Amz-Expires=3600&X-Amz-SignedHeaders=host&X-Amz-Signature={sig}", (sig,)),
        (f"https://storage.googleapis.com/b/o.bin?X-Goog-Algorithm=GOOG4-RSA-SHA256&X-Goog-Expires=900"
         f"&X-Goog-SignedHeaders=host&X-Goog-Signature={sig * 4}", (sig * 4,)),
        (f"https://d111.cloudfront.net/a.jpg?Expires=1700000000&Signature={rand(rng, 40, URLSAFE + '~')}"
         f"&Key-Pair-Id=K2JCJMDEHXQW5F", None),
        (f"https://s3.amazonaws.com/b/k?AWSAccessKeyId=AKIDEXAMPLE&Expires=1700000000"
         f"&Signature={rand(rng, 27, ALNUM)}%3D", None),
    ])
    if parts is None:
        parts = (text.split("Signature=")[1].split("&")[0],)
    return rng.choice(["{}", "curl -o q3.pdf '{}'", "Download: {} (valid 1 h)"]).format(text), parts


SHAPE_GENERATORS = (password_hashes, pgpass_lines, tokens_and_logins, signed_urls)


def shape_secrets(rng: random.Random, n: int) -> list[tuple[str, tuple[str, ...]]]:
    """`n` credentials, the generators in turn."""
    return [SHAPE_GENERATORS[i % len(SHAPE_GENERATORS)](rng) for i in range(n)]


def _luhn_complete(digits: str) -> str:
    total = 0
    for i, c in enumerate(reversed(digits + "0")):
        d = int(c) * (2 if i % 2 else 1)
        total += d - 9 if d > 9 else d
    return digits + str((10 - total % 10) % 10)


def national_ids(rng: random.Random, n: int) -> list[tuple[str, tuple[str, ...]]]:
    """UK NINOs (spaced anywhere, bare after a cue), Canadian SINs and dotted US SSNs after a cue."""
    out = []
    for i in range(n):
        if i % 3 == 0:
            first, second = rng.choice("ABCEGHJKLMNOPRSTWXYZ"), rng.choice("ABCEGHJKLMNPRSTWXYZ")
            while first + second in ("BG", "GB", "KN", "NK", "NT", "TN", "ZZ"):
                second = rng.choice("ABCEGHJKLMNPRSTWXYZ")
            d = "".join(rng.choice(string.digits) for _ in range(6))
            suffix = rng.choice("ABCD")
            value = rng.choice([f"{first}{second} {d[:2]} {d[2:4]} {d[4:]} {suffix}", f"{first}{second}{d}{suffix}"])
            cue = rng.choice(["NINO: ", "National Insurance number: ", "NI number ", "Her NI no. is "])
            text = (cue if " " not in value or rng.random() < 0.5 else "ref ") + value
        elif i % 3 == 1:
            digits = _luhn_complete(rng.choice("1234567") + "".join(rng.choice(string.digits) for _ in range(7)))
            sep = rng.choice(["", " ", "-"])
            value = sep.join((digits[:3], digits[3:6], digits[6:]))
            text = rng.choice(["SIN: ", "Social Insurance Number ", "NAS : "]) + value
        else:
            value = f"{rng.randint(1, 665):03d}.{rng.randint(1, 99):02d}.{rng.randint(1, 9999):04d}"
            text = rng.choice(["SSN: ", "ssn ", "Social Security Number: "]) + value + rng.choice(["", "."])
        out.append((text, (value,)))
    return out


def national_phones(rng: random.Random, n: int) -> list[tuple[str, tuple[str, ...]]]:
    """India's 5-5 and China's 3-4-4 mobile layouts, half of them after a cue."""
    out = []
    for i in range(n):
        if i % 2:
            value = f"{rng.choice('6789')}{rng.randint(0, 9999):04d} {rng.randint(0, 99999):05d}"
        else:
            sep = rng.choice([" ", "-"])
            value = f"1{rng.choice('3456789')}{rng.randint(0, 9)}{sep}{rng.randint(0, 9999):04d}{sep}" \
                    f"{rng.randint(0, 9999):04d}"
        carrier = rng.choice(["{}", "Mobile: {}", "Call Priya on {} after six.", "手机：{}", "| Chen Wei | {} |"])
        out.append((carrier.format(value), (value,)))
    return out


SHAPES_LOOK_ALIKES = [
    "bcrypt hashes start with $2b$12$ and SHA-512 crypt with $6$rounds=5000$; $1$ costs $5$.",
    "root:x:0:0:root:/root:/bin/bash\nsudo:x:27:alice\nhost:8080:GET:index:html\n12:30:45:00:12",
    "token: hello.world\ncredentials: read:user\ndocker run --user 1000:1000 img\nhttp -a alice example.org",
    'basic_auth: "${USER}:${PASS}"\ncredentials: https://vault.example.com/v1\nt.credentials=e.crossOrigin',
    "https://example.com/verify?Signature=AbC1dEf2GhI3xYz9AbC1dEf2 and append X-Amz-Signature= to the query",
    "GB 12 34 56 A, DA 12 34 56 C, part AB123456C, SIN: 123 456 789, y = np.sin(123456782), see 536.90.4399",
    "12345 67890, 98765 43210 55555 and 138 0013 8000 1234 are rows of numbers",
]
