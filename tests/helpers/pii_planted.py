"""A seeded planted-PII set and a look-alike set, to measure `tasks.data.privacy.pii.scrub_pii` (tests and benchmark).

`planted(seed, per_kind)` returns `Plant`s: one fake value of a kind (email, also obfuscated, phone, ipv4, ipv6,
credit_card, iban, ssn, secret) in a carrier line (prose, code, config, JSON, a log line, an HTTP request), with
the parts that must disappear. Values are built from their formats, not from the detector: card numbers by Luhn and
issuer ranges, addresses checked public with `ipaddress.is_global`, tokens by each vendor's documented shape,
phones in the national layouts of a dozen countries, IBANs, SSNs and obfuscated emails as
`tests.helpers.pii_planted_ids` builds them. `look_alikes(seed)` returns lines that hold no PII but look like some:
versions, dates, UUIDs, hashes, slices, ISBNs, prices, coordinates, placeholders, ordinary code, kept addresses,
and the near misses of `pii_planted_ids` (bad IBANs, never-issued SSNs, ZIP+4, lower-case "at ... dot" prose).
Human passwords start with a letter or digit (a leading `!`, `*`, `&` or `#` reads as a YAML tag, alias or
anchor, or a comment, and is left alone by design).
"""

from __future__ import annotations

import ipaddress
import random
import string
from dataclasses import dataclass

from tests.helpers import pii_planted_config as config
from tests.helpers import pii_planted_shapes as shaped
from tests.helpers import pii_planted_ids as ids
from tests.helpers import pii_planted_personal as personal
from tests.helpers import pii_planted_syntax as syntax
from tests.helpers.pii_planted_secrets import SECRET_GENERATORS

ALNUM = string.ascii_letters + string.digits
HEX = "0123456789abcdef"


@dataclass(frozen=True)
class Plant:
    kind: str
    text: str                        # the carrier line with the value in it
    parts: tuple[str, ...]           # substrings that must be gone after scrubbing
    form: str = ""                   # a variant measured on its own (`obfuscated` emails)


PROSE = ["Please contact {} before Friday.", "The report mentions {} twice, which is odd.",
         "According to the ticket, {} was used last week.", "She wrote {} on the back of the envelope.",
         "Our notes say: {}; nobody has checked it since.", "({}) was in the footer.", "Reach me at {}, thanks!",
         "Value: {}.", "- {}", "  * {} (old)"]
LOGS = ["2024-03-01T12:00:07Z INFO request from {} took 35 ms", "[WARN] 17:42:03 retry 3/5 for {}",
        "Jan 12 08:15:22 host sshd[4211]: accepted for {} port 22", "level=info msg=\"login\" who={} status=200"]


def _rand(rng: random.Random, n: int, alphabet: str = ALNUM) -> str:
    while True:   # generated credentials carry digits and letters; retry the rare draw without
        value = "".join(rng.choice(alphabet) for _ in range(n))
        if alphabet == string.ascii_letters or (any(c.isdigit() for c in value) and any(c.isalpha() for c in value)):
            return value


def _digits(rng: random.Random, n: int) -> str:
    while True:
        value = "".join(rng.choice(string.digits) for _ in range(n))
        if len(set(value)) >= 3 or n < 3:
            return value


def _carrier(rng: random.Random, value: str, extra: list[str] = ()) -> str:
    return rng.choice(PROSE + LOGS + list(extra)).format(value)


def emails(rng: random.Random, n: int) -> list[Plant]:
    locals_ = ["john.doe", "a.b.c", "mary_smith", "x", "dev+ci", "first.last+news", "oneil", "USER99", "j-k",
               "info", "bob.o-brien", "z9", "sales.team+q3"]
    domains = ["example.com", "mail.example.org", "sub.domain.co.uk", "uni.edu", "startup.io", "x-y.museum",
               "eu.mail.corp.example.net", "gmail.com", "T-Online.DE", "dept.cs.uni-bonn.de", "a.technology"]
    code = ['EMAIL = "{}"', "send(to='{}')", '{{"email": "{}", "id": 7}}', "From: Ann Lee <{}>",
            "mailto:{}", "author: {}", "# Maintainer: {}", "cc={},other"]
    out = []
    for _ in range(n):
        address = f"{rng.choice(locals_)}{rng.choice(['', str(rng.randint(0, 999))])}@{rng.choice(domains)}"
        out.append(Plant("email", _carrier(rng, address, code), (address,)))
    return out


def _nanp(rng: random.Random) -> tuple[str, str, str]:
    return str(rng.randint(2, 9)) + _digits(rng, 2), str(rng.randint(2, 9)) + _digits(rng, 2), _digits(rng, 4)


def _phone(rng: random.Random) -> str:
    a, b, c = _nanp(rng)
    d = lambda k: _digits(rng, k)  # noqa: E731 - a short local helper keeps the table readable
    shapes = [
        f"({a}) {b}-{c}", f"{a}-{b}-{c}", f"{a}.{b}.{c}", f"+1 {a} {b} {c}", f"+1-{a}-{b}-{c}", f"1-{a}-{b}-{c}",
        f"+1 ({a}) {b}-{c}", f"(+1) {a}-{b}-{c}", f"+1.{a}.{b}.{c}", f"+1{a}{b}{c}",
        f"+44 20 7{d(3)} {d(4)}", f"+44 7700 9{d(5)}", f"(+44) 20 7{d(3)} {d(4)}", f"+44 (0)20 7{d(3)} {d(4)}",
        f"+4420{d(8)}", f"020 7{d(3)} {d(4)}", f"07700 9{d(5)}", f"(020) 7{d(3)} {d(4)}",
        f"+33 1 {d(2)} {d(2)} {d(2)} {d(2)}", f"(+33) 1 {d(2)} {d(2)} {d(2)} {d(2)}",
        f"+33 6 {d(2)} {d(2)} {d(2)} {d(2)}",
        f"01 {d(2)} {d(2)} {d(2)} {d(2)}", f"+49 (0)30 {d(7)}", f"+49 30 {d(7)}", f"+49 151 {d(8)}", f"030 {d(7)}",
        f"+91 98{d(3)} {d(5)}", f"+91-98{d(3)}-{d(5)}", f"+81-3-{d(4)}-{d(4)}", f"+81 90-{d(4)}-{d(4)}",
        f"+61 2 9{d(3)} {d(4)}", f"+61 4{d(2)} {d(3)} {d(3)}", f"+86 138 {d(4)} {d(4)}", f"+55 11 9{d(4)}-{d(4)}",
        f"+34 91{d(1)} {d(3)} {d(3)}", f"+39 06 {d(4)} {d(4)}", f"+7 495 {d(3)}-{d(2)}-{d(2)}",
        f"+353 1 {d(3)} {d(4)}", f"+27 21 {d(3)} {d(4)}", f"+31 6 1{d(7)}", f"+4915{d(9)}",
    ]
    return rng.choice(shapes)


def phones(rng: random.Random, n: int) -> list[Plant]:
    code = ['"phone": "{}",', "tel: {}", "PHONE={}", "<a href=\"tel:{}\">call</a>", "Tel.: {} (office)",
            "Fax {}; mobile on request"]
    out = []
    for _ in range(n):
        number = _phone(rng)
        out.append(Plant("phone", _carrier(rng, number, code), (number,)))
    return out


def _public(rng: random.Random, version: int) -> ipaddress.IPv4Address | ipaddress.IPv6Address:
    while True:
        if version == 4:
            address = ipaddress.IPv4Address(rng.getrandbits(32))
        else:
            address = ipaddress.IPv6Address((0x2 << 125) | rng.getrandbits(125))     # 2000::/3, global unicast
        if address.is_global and not address.is_multicast:
            return address


def ipv4s(rng: random.Random, n: int) -> list[Plant]:
    code = ["host = '{}'", "server {}:8080;", "curl http://{}/status", "X-Forwarded-For: {}, 10.0.0.1",
            "allow {}/32;", '{{"ip": "{}"}}', "ping {}.", "(from {})", "nameserver {}"]
    out = []
    for _ in range(n):
        address = str(_public(rng, 4))
        out.append(Plant("ipv4", _carrier(rng, address, code), (address,)))
    return out


def ipv6s(rng: random.Random, n: int) -> list[Plant]:
    code = ["listen [{}]:443;", "curl http://[{}]:8080/", "addr={}", "route to {}/128 via fe80::1",
            "connected to {}.", "peer {}, ok", '"ip6": "{}"', "AAAA {}"]
    out = []
    for i in range(n):
        value = int(_public(rng, 6))
        if i % 3:       # a zero run to compress
            value &= ~(((1 << (16 * rng.randint(2, 5))) - 1) << (16 * rng.randint(0, 1)))
        address = ipaddress.IPv6Address(value)
        text = address.exploded if i % 5 == 0 else address.compressed
        text = text.upper() if i % 7 == 0 else text
        out.append(Plant("ipv6", _carrier(rng, text, code), (text,)))
    return out


CARD_ISSUERS = [("4", 16), ("4", 13), ("4", 19), ("51", 16), ("55", 16), ("2221", 16), ("2720", 16), ("34", 15),
                ("37", 15), ("6011", 16), ("65", 16), ("644", 16), ("3528", 16), ("3589", 16), ("36", 14),
                ("38", 14), ("300", 14), ("62", 16), ("62", 19), ("2200", 16), ("50", 16), ("6759", 19)]


def luhn_check_digit(body: str) -> str:
    """The digit that makes `body + digit` pass Luhn (written here, not imported, so the check is independent)."""
    doubled = [int(c) * (2 if i % 2 == 0 else 1) for i, c in enumerate(reversed(body))]
    return str(-sum(d - 9 if d > 9 else d for d in doubled) % 10)


def _luhn_complete(prefix: str, length: int, rng: random.Random) -> str:
    body = prefix + "".join(rng.choice(string.digits) for _ in range(length - len(prefix) - 1))
    return body + luhn_check_digit(body)


def cards(rng: random.Random, n: int) -> list[Plant]:
    code = ['"card": "{}"', "cc_number={}", "Paid with {} exp 12/27.", "card no. {}", "PAN {} (test)"]
    out = []
    for i in range(n):
        prefix, length = CARD_ISSUERS[i % len(CARD_ISSUERS)]
        number = _luhn_complete(prefix, length, rng)
        layout, sep = rng.randint(0, 2), rng.choice(" -")
        if layout and length in (16, 19):
            number = sep.join(number[k:k + 4] for k in range(0, length, 4))
        elif layout and length == 15:
            number = f"{number[:4]}{sep}{number[4:10]}{sep}{number[10:]}"
        elif layout and length == 14:
            number = f"{number[:4]}{sep}{number[4:10]}{sep}{number[10:]}"
        out.append(Plant("credit_card", _carrier(rng, number, code), (number,)))
    return out


def secrets(rng: random.Random, n: int) -> list[Plant]:
    out = []
    for i in range(n):
        text, parts = SECRET_GENERATORS[i % len(SECRET_GENERATORS)](rng)
        out.append(Plant("secret", text, parts))
    return out


def obfuscated_emails(rng: random.Random, n: int) -> list[Plant]:
    out = []
    for _ in range(n):
        value, parts = ids.obfuscated_email(rng)
        out.append(Plant("email", _carrier(rng, value, ids.EMAIL_CARRIERS), parts, "obfuscated"))
    return out


def ibans(rng: random.Random, n: int) -> list[Plant]:
    countries = sorted(ids.IBAN_REGISTRY)
    out = []
    for i in range(n):          # every registry country in turn, bare or grouped
        value = ids.iban_value(rng, countries[i % len(countries)], spaced=rng.random() < 0.6)
        out.append(Plant("iban", _carrier(rng, value, ids.IBAN_CARRIERS), (value,)))
    return out


# A number right after a phone cue is a phone (`pii_cues`), even in an SSN's layout: an SSN drawn into one of
# these carriers goes into a cue-free one instead.
_PHONE_CUED_CARRIERS = {"Please contact ": "Please check ", "Reach me at ": "Filed as "}


def ssns(rng: random.Random, n: int) -> list[Plant]:
    out = []
    for i in range(n):
        value = ids.ssn_value(rng)
        if i % 3 == 1:
            value = value.replace("-", " ")
        if i % 3 == 2:          # bare digits count only after a cue word
            value = value.replace("-", "")
            text = rng.choice(ids.SSN_CUED).format(value)
        else:
            text = _carrier(rng, value, ids.SSN_CARRIERS)
            for cued, neutral in _PHONE_CUED_CARRIERS.items():     # the same draws: other groups stay the same
                text = text.replace(cued, neutral)
        out.append(Plant("ssn", text, (value,)))
    return out


def syntax_secrets(rng: random.Random, n: int) -> list[Plant]:
    """Secrets drawn from the whole alphabet of the syntax they sit in (`pii_planted_syntax`)."""
    return [Plant("secret", text, parts, "syntax") for text, parts in syntax.syntax_secrets(rng, n)]


def config_secrets(rng: random.Random, n: int) -> list[Plant]:
    """Credentials in the shapes of tool and config files (`pii_planted_config`)."""
    return [Plant("secret", text, parts, "config") for text, parts in config.config_secrets(rng, n)]


def international_phones(rng: random.Random, n: int) -> list[Plant]:
    """Phone numbers in every international prefix form after every phone cue (`pii_planted_syntax`)."""
    return [Plant("phone", text, parts, "international") for text, parts in syntax.international_phones(rng, n)]


def shape_secrets(rng: random.Random, n: int) -> list[Plant]:
    """Password hashes, `.pgpass` lines, bootstrap tokens, logins, signed URLs (`pii_planted_shapes`)."""
    return [Plant("secret", text, parts, "shapes") for text, parts in shaped.shape_secrets(rng, n)]


def national_ids(rng: random.Random, n: int) -> list[Plant]:
    """UK NINOs, Canadian SINs and dotted US SSNs (`pii_planted_shapes`)."""
    return [Plant("ssn", text, parts, "national") for text, parts in shaped.national_ids(rng, n)]


def national_phones(rng: random.Random, n: int) -> list[Plant]:
    """India's and China's mobile layouts, with and without a cue (`pii_planted_shapes`)."""
    return [Plant("phone", text, parts, "national") for text, parts in shaped.national_phones(rng, n)]


def dates_of_birth(rng: random.Random, n: int) -> list[Plant]:
    """Birth dates after their cues, in every format (`pii_planted_personal`)."""
    return [Plant("dob", text, parts, "cued") for text, parts in personal.dates_of_birth(rng, n)]


def passports(rng: random.Random, n: int) -> list[Plant]:
    """Passport numbers after their cues and whole MRZs (`pii_planted_personal`)."""
    return [Plant("passport", text, parts, "cued") for text, parts in personal.passports(rng, n)]


# Measured groups (a kind, or a kind's variant); new ones go last, so that a seed's earlier plants stay the same.
GENERATORS = {"email": emails, "phone": phones, "ipv4": ipv4s, "ipv6": ipv6s, "credit_card": cards,
              "secret": secrets, "email_obfuscated": obfuscated_emails, "iban": ibans, "ssn": ssns,
              "secret_syntax": syntax_secrets, "phone_international": international_phones,
              "secret_config": config_secrets, "secret_shapes": shape_secrets, "ssn_national": national_ids,
              "phone_national": national_phones, "dob_cued": dates_of_birth, "passport_cued": passports}


def planted(seed: int = 1234, per_kind: int = 500) -> list[Plant]:
    """`per_kind` plants of every generator (emails twice: plain and obfuscated), in a fixed order for a seed."""
    rng = random.Random(seed)
    return [plant for kind in GENERATORS for plant in GENERATORS[kind](rng, per_kind)]


LOOK_ALIKES = [
    # versions, dates, times, numbers
    "Upgraded to version 1.2.3.4 of the plugin; v2.0.0.1 is next, then release 10.4.2.1.",
    "Python 3.11.7 and 3.12.1; build 1.2.3.4.5; OID 1.3.6.1.4.1.343; sections 8.2.4.44 and §4.3.2.1.",
    "Meeting on 2024-01-15 at 10:30:45, minutes on 15/01/2024 (15.01.2024), next 2024-02-01T09:00:00+01:00.",
    "Timestamps 1700000000000 and 1712345678901234567 ms; counter 18446744073709551616; id 9007199254740993.",
    "Tickets $1,234.56, €99.99, £1 234 567, ¥120,000 and 1.234.567,89 EUR; order #12345678 shipped.",
    "Office hours 9:00-17:30, room 101, pages 123-456, years 1990-1995, ratio 3:2:1, scores +3.14, -2.5e-10.",
    "A sequence 1 2 3 4 5 6 7 8 9 10, call 911 or 112, extension x4021, PIN length 4.",
    "ISBN 978-0-306-40615-7, ISBN-10 0-306-40615-2, ISBN-13 9780306406157, ISSN 0317-8471.",
    "Coordinates 51.5074, -0.1278 and (40.7128, -74.0060); lat=48.8566 lon=2.3522.",
    "The Luhn-invalid 4111 1111 1111 1112, 1234567812345678, 5500 0000 0000 0005 and 0000 0000 0000 0000.",
    # identifiers and hashes
    "Request 550e8400-e29b-41d4-a716-446655440000 and {123e4567-e89b-12d3-a456-426614174000}.",
    "Commit da39a3ee5e6b4b0d3255bfef95601890afd80709 (short da39a3e) fixed it; see abc1234..def5678.",
    "sha256 e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855 of the empty file.",
    "image: python@sha256:9c1f4e5a7b3d2c8e6f0a1b2c3d4e5f60718293a4b5c6d7e8f9012345abcdef01",
    "The palette uses #ff8800 and #00c0ff; MAC 00:1A:2B:3C:4D:5E and 3c-22-fb-12-34-56.",
    # slices, operators, C++
    "xs[::2], a[1::3], x[1::2], m[100::2], b[::-1], arr[:, ::4], A @ B.T in NumPy.",
    "std::vector<int> v; boost::asio::ip::tcp; Foo::bar::baz(); ns::ABCD::EF;",
    "at 12:30:45.123, PT1H30M, 10:00::11:00 overlap; label::value; ::before and ::after pseudo-elements.",
    # addresses kept by the default policy, networks, masks, examples
    "Bind 127.0.0.1:8000, 0.0.0.0, ::1, [::1]:80, :: and 255.255.255.0; route 10.0.0.0/8 and 2001:db8::/32.",
    "LAN 192.168.1.20, 10.1.2.3, 172.16.5.4, 172.31.255.1, 100.64.0.7 and 169.254.169.254 (metadata).",
    "Link-local fe80::1ff:fe23:4567:890a%eth0, ULA fd12:3456:789a::1, fc00::5; multicast 224.0.0.251, ff02::1.",
    "Docs use 192.0.2.1, 198.51.100.7, 203.0.113.9 and 2001:db8:85a3::8a2e:370:7334; 81.2.69.0/24 is a network.",
    # placeholders
    "password=\ntoken=\napi_key: \"\"\nsecret: ''",
    "export API_TOKEN=${TOKEN}\nAPI_KEY=$API_KEY\npassword: \"${DB_PASSWORD}\"\nkey: {{ vault_key }}",
    "api_key = \"<your-key>\"\ntoken: <YOUR_TOKEN>\npassword: ********\nsecret=xxxxxxxx\nPASSWORD=changeme",
    "api_key = \"YOUR_API_KEY\"\nclient_secret: YOUR_CLIENT_SECRET\npassword: your_password_here",
    "Authorization: Bearer $TOKEN\nAuthorization: Bearer <token>\nAuthorization: Basic ${CREDS}",
    "curl -H \"X-Api-Key: $API_KEY\" -u \"$USER:$PASS\" https://api.example.com",
    "DATABASE_URL=postgres://user:${DB_PASS}@localhost/app and redis://:<password>@cache:6379/0",
    "password: !vault |\n  $ANSIBLE_VAULT;1.1;AES256\npassword: *default_pw\nsecret: &pw_anchor",
    "password = %(db_password)s\ntoken = {token}\nauth_token: '{{ auth_token }}'\napi_key='%s'",
    # ordinary code
    "sorted(items, key=lambda x: x)\ntoken = self.next_token()\nkey = keys[i]\npassword = getpass.getpass()",
    "secret_key = os.environ[\"SECRET_KEY\"]\napi_key = settings.API_KEY\nrefresh_token = tokens.refresh_v2",
    "access_token = response.json()[\"access_token\"]\nauth_token = get_token(user)\npassword: str | None = None",
    "def login(user, password=\"\"):\n    if not password:\n        password = input(\"Password: \")",
    "eos_token = \"</s>\"\npad_token = \"[PAD]\"\ntokenizer.pad_token = tokenizer.eos_token\nmax_tokens: 1024",
    "RegEnumKey = win32api.RegEnumKey\nself.password_hash = hash_password(password)\nsecret_santa = True",
    "connect(user=u, password=pw2)\nlogin(username, password=password)\nhotkey = \"ctrl+shift+s\"",
    "sort_key = \"name:asc\"\ncache_key = f\"user:{uid}\"\nprimary_key = \"id_2\"\nmonkey = \"b4n4n4!\"",
    "'password': 'Your password'\n\"password\": \"Enter your password\"\nlabel=\"Password\"",
    "PWD=/home/alice/src\npassword_file=/etc/app/pw.txt\nkey_path: ./keys/id_rsa.pub\ntoken_url: https://x.io/t",
    "The password: it must be long. Secret: the recipe. Token: 42. Pass: 2-1 win. Key: value pairs.",
    "Authorization: required for all endpoints. Authorization: Bearer tokens are described below.",
    "os.path.join, numpy.linalg.norm, torch.nn.functional.cross_entropy, java.util.concurrent.Future.",
    "Use e.g. i.e. etc. a.b.c.d, com.example.app.MainActivity and org.apache.commons.lang3.StringUtils.",
    "The AKIA prefix marks AWS ids; ghp_ marks GitHub; sk- OpenAI; hf_hub_download fetches a file.",
    "user@localhost and root@host (no domain); @decorator; a @ b; meet ann at noon dot sharp.",
]


def look_alikes(seed: int = 1234, variants: int = 200) -> list[str]:
    """The fixed look-alike lines plus seeded variants of the number-shaped ones (dates, versions, hashes)."""
    rng = random.Random(seed)
    out = list(LOOK_ALIKES)
    for _ in range(variants):       # the original variants first: a seed's earlier lines stay the same
        choice = rng.randint(0, 6)
        if choice == 0:
            out.append(f"version {rng.randint(1, 20)}.{rng.randint(0, 99)}.{rng.randint(0, 99)}.{rng.randint(0, 99)}")
        elif choice == 1:
            out.append(f"on {rng.randint(1990, 2030)}-{rng.randint(1, 12):02d}-{rng.randint(1, 28):02d} "
                       f"{rng.randint(0, 23):02d}:{rng.randint(0, 59):02d}:{rng.randint(0, 59):02d}")
        elif choice == 2:
            out.append(f"commit {''.join(rng.choice(HEX) for _ in range(40))} in prose")
        elif choice == 3:
            out.append(f"uuid {uuid_like(rng)} logged")
        elif choice == 4:
            out.append(f"slice a[{rng.randint(0, 999)}::{rng.randint(1, 9)}] and b[::{rng.randint(1, 9)}]")
        elif choice == 5:
            lat, lon = rng.uniform(-90, 90), rng.uniform(-180, 180)
            out.append(f"at ({lat:.4f}, {lon:.4f}) costs ${rng.randint(1, 9999)}.99")
        else:
            out.append(f"host 10.{rng.randint(0, 255)}.{rng.randint(0, 255)}.{rng.randint(1, 254)} and "
                       f"192.168.{rng.randint(0, 255)}.{rng.randint(1, 254)}")
    return out + ids.look_alike_lines(rng, variants) + config.CONFIG_LOOK_ALIKES + \
        shaped.SHAPES_LOOK_ALIKES + personal.PERSONAL_LOOK_ALIKES


def uuid_like(rng: random.Random) -> str:
    h = "".join(rng.choice(HEX) for _ in range(32))
    return f"{h[:8]}-{h[8:12]}-{h[12:16]}-{h[16:20]}-{h[20:]}"
