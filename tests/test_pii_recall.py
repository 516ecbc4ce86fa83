"""PII scrubbing on a broad planted set (recall per kind), on look-alikes (no false hits) and the address policy.

The planted set and the look-alikes come from `tests.helpers.pii_planted` (seeded; the benchmark
`benchmarks/pii_recall.py` uses the same generator with more plants). Expected outputs of the single-line
cases below are written by hand.
"""

from __future__ import annotations

import ipaddress
import random
from collections import Counter
from pathlib import Path

import pytest
from pydantic import ValidationError

from specs.clean import ADDRESS_CLASSES, CleanSpec, PIISpec
from tasks.data.cleanup.cleaning import clean_record
from tasks.data.privacy.pii import PLACEHOLDERS, scrub_pii
from tests.helpers.pii_planted import look_alikes, luhn_check_digit, planted
from tests.helpers.pii_planted_ids import IBAN_REGISTRY
from tests.helpers.pii_planted_secrets import SECRET_GENERATORS

PER_KIND = 500
PLANTS = planted(seed=2024, per_kind=PER_KIND)


def test_planted_set_is_broad() -> None:
    by_kind = Counter(p.kind for p in PLANTS)
    # + obfuscated emails, secrets in every syntax, in config shapes and shapes of their own, phones in every
    # international form and in national layouts, other countries' social security numbers; dates of birth and
    # passports only after a cue
    extra = {"email": 2, "secret": 4, "phone": 3, "ssn": 2}
    assert by_kind == {kind: PER_KIND * extra.get(kind, 1) for kind in PLACEHOLDERS}
    forms = Counter(p.form for p in PLANTS)
    assert forms["obfuscated"] == forms["syntax"] == forms["international"] == forms["config"] == PER_KIND
    assert forms["shapes"] == forms["national"] / 2 == forms["cued"] / 2 == PER_KIND
    texts = {kind: "\n".join(p.text for p in PLANTS if p.kind == kind) for kind in by_kind}
    for needle in ("(+44)", "+49 (0)30", "(+33) 1", "+91 98", "+81-3-", "+1 (", "+4420"):
        assert needle in texts["phone"], needle
    for needle in ("-----BEGIN OPENSSH PRIVATE KEY-----", "ENCRYPTED PRIVATE KEY", "\\n", "eyJ", "AKIA",
                   "AIza", "Q~", "ghp_", "glpat-", "xoxb-", "sk_live_", "SG.", "sk-ant-", "hf_", "Authorization: Basic",
                   "X-Api-Key", "postgres://", "password", "PGPASSWORD"):
        assert needle in texts["secret"], needle
    assert "[" in texts["ipv6"] and "/32" in texts["ipv4"] and "/128" in texts["ipv6"]
    assert sum(len(p.parts) for p in PLANTS) > len(PLANTS)      # PEM blocks: every body line must go
    ibans = [p.parts[0] for p in PLANTS if p.kind == "iban"]
    assert {value[:2] for value in ibans} == set(IBAN_REGISTRY)                   # every registry country
    assert any(" " in v for v in ibans) and any(" " not in v for v in ibans)
    ssns = [p.parts[0] for p in PLANTS if p.kind == "ssn"]
    assert {"-" in v for v in ssns} == {True, False} and any(v.isdigit() for v in ssns)
    for needle in ("[at]", "(at)", "{at}", "<at>", " AT ", " DOT ", "@", "[dot]", "(dot)"):
        assert needle in texts["email"], needle


def test_recall_per_kind() -> None:
    found: Counter[str] = Counter()
    missed = []
    for plant in PLANTS:
        scrubbed, counts = scrub_pii(plant.text)
        # Found: every part gone, replaced by this kind's placeholder, and nothing else counted.
        if set(counts) == {plant.kind} and not any(part in scrubbed for part in plant.parts) \
                and PLACEHOLDERS[plant.kind] in scrubbed:
            found[plant.kind + plant.form] += 1
        else:
            missed.append((plant.kind, plant.text, scrubbed))
    recall = {kind: found[kind] / PER_KIND
              for kind in [*(k for k in PLACEHOLDERS if k not in ("dob", "passport")), "emailobfuscated",
                           "secretsyntax", "phoneinternational", "secretconfig", "secretshapes", "ssnnational",
                           "phonenational", "dobcued", "passportcued"]}
    assert all(r >= 0.99 for r in recall.values()), (recall, missed[:10])   # measured: 1.0 for each kind


def test_recall_holds_for_other_seeds() -> None:
    for seed in (1, 2):
        for plant in planted(seed=seed, per_kind=40):
            scrubbed, counts = scrub_pii(plant.text)
            assert set(counts) == {plant.kind} and not any(part in scrubbed for part in plant.parts), plant


def test_no_false_hits_on_look_alikes() -> None:
    lines = look_alikes(seed=2024)
    assert len(lines) > 200
    hits = [(line, scrub_pii(line)) for line in lines]
    assert [(line, out) for line, out in hits if out != (line, {})] == []
    document = "\n".join(lines)
    assert scrub_pii(document) == (document, {})


@pytest.mark.parametrize("text, expected", [
    # HTTP auth headers
    ("Authorization: Basic dXNlcjpodW50ZXIyIXg=", "Authorization: Basic <SECRET>"),
    ("Authorization: token 0123456789abcdef0123456789abcdef01234567", "Authorization: token <SECRET>"),
    ("-H 'Proxy-Authorization: Bearer abc.DEF123'", "-H 'Proxy-Authorization: Bearer <SECRET>'"),
    ("X-Api-Key: abcd1234XY", "X-Api-Key: <SECRET>"),
    # short or punctuated key=value secrets
    ("password=hunter2!x", "password=<SECRET>"),
    ('"secret": "p@ss:w0rd"', '"secret": "<SECRET>"'),
    ("DB_PASSWORD='Tr0ub4dor&3'", "DB_PASSWORD='<SECRET>'"),
    ("session_token = Ab3dE.fG5hI.jK7lM", "session_token = <SECRET>"),
    ("PGPASSWORD=s3cr3t", "PGPASSWORD=<SECRET>"),
    # AWS secret access keys, the documentation's own example included (the generic rule reads EXAMPLE as a
    # placeholder)
    ("aws_secret_access_key = wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY",
     "aws_secret_access_key = <SECRET>"),
    ('"SecretAccessKey": "je7MtGbClwBF/2Zp9Utk/h3yCo8nvbEXAMPLEKEY"', '"SecretAccessKey": "<SECRET>"'),
    ("AWS_SECRET_KEY=wJalrXUtnFEMI/K7MDENG+bPxRfiCYzKQ8aTb4sQ", "AWS_SECRET_KEY=<SECRET>"),
    # credentials inside URLs
    ("postgres://app:pa55-w0rd@db.example.com:5432/app", "postgres://app:<SECRET>@db.example.com:5432/app"),
    ("git clone https://bob:tok3n_x9@github.com/a/r.git", "git clone https://bob:<SECRET>@github.com/a/r.git"),
    ("REDIS_URL=redis://:s3cretRedis99@cache:6379/0", "REDIS_URL=redis://:<SECRET>@cache:6379/0"),  # no user
    # markdown italics around an address (`_` is a word character: both ends blocked the match before)
    ("write to _jane.doe@example.org_ today", "write to <EMAIL>_ today"),
    # a list of numbers separated by single spaces: all of them (before, 16 — one per round — then the rest leaked)
    (" ".join(f"202-555-01{i:02d}" for i in range(40)), " ".join(["<PHONE>"] * 40)),
    ("+44 20 7946 0958 +44 20 7946 0959 +33 1 23 45 67 89", "<PHONE> <PHONE> <PHONE>"),
    # phones with a country code in parentheses
    ("Call (+44) 20 7946 0958.", "Call <PHONE>."), ("(+33) 1 23 45 67 89", "<PHONE>"),
    ("+1 (555) 234-5678", "<PHONE>"), ("+49 (0)30 1234567", "<PHONE>"), ("+91 98765 43210", "<PHONE>"),
    ("+81-3-1234-5678", "<PHONE>"),
    # US layouts with test/fictional digits (the exchange led by 0 or 1 is no real NANP number, still a phone)
    ("Call me at 555-123-4567.", "Call me at <PHONE>."), ("Phone: (555) 123-4567", "Phone: <PHONE>"),
    ("fax 555.012.3456", "fax <PHONE>"), ("1-555-123-4567", "<PHONE>"),
    # three bare groups with NANP digits; ten bare digits after a phone cue
    ("my cell 917 555 1234", "my cell <PHONE>"), ("ph: 5551234567", "ph: <PHONE>"),
    ('{"phone": "2125550147"}', '{"phone": "<PHONE>"}'), ("Tel. 0211234567", "Tel. <PHONE>"),
    ('"phone_number": "2125550147",', '"phone_number": "<PHONE>",'), ("(tel) 2125550147", "(tel) <PHONE>"),
    ("☎ 2125550147", "☎ <PHONE>"), ("mobile-no: 9175551234", "mobile-no: <PHONE>"),
    # extensions, the 00 international prefix, national numbers without separators (Faker's en_US/en_GB/fr_FR)
    ("Call 854-275-2772x0405.", "Call <PHONE>."), ("+1-545-880-7302x157", "<PHONE>"),
    ("(212) 555-0147 ext. 12", "<PHONE>"), ("001-612-799-7220x03322", "<PHONE>"),
    ("at 01154960930 or", "at <PHONE> or"), ("Contact details: 0164613589.", "Contact details: <PHONE>."),
    # JCB's 15-digit 1800/2131 cards, a 12-digit Maestro (Luhn-valid)
    ("card 180068737859982", "card <CREDIT_CARD>"), ("card 213102296667345", "card <CREDIT_CARD>"),
    ("card 586870218912", "card <CREDIT_CARD>"),
    # IPv6 before a full stop, with a port; a /32 host
    ("Connect to 2a01:4f8:c0c:1234::2.", "Connect to <IP_ADDRESS>."),
    ("listen [2a01:4f8::1]:443;", "listen [<IP_ADDRESS>]:443;"),
    ("allow 81.2.69.160/32; deny 81.2.69.0/24;", "allow <IP_ADDRESS>/32; deny 81.2.69.0/24;"),
    ("route 2a01:4f8::7/128 and 2a01:4f8::/64", "route <IP_ADDRESS>/128 and 2a01:4f8::/64"),
])
def test_known_misses_are_found(text: str, expected: str) -> None:
    scrubbed, counts = scrub_pii(text)
    assert scrubbed == expected and sum(counts.values()) == expected.count("<")


@pytest.mark.parametrize("text", [
    "password=", "token = self.next_token()", "key=lambda x: x", "api_key = settings.API_KEY",
    "password: ${DB_PASSWORD}", "api_key='<your-key>'", "secret=********", "token: xxxxxxxx",
    "PASSWORD=changeme", "API_KEY=YOUR_API_KEY", 'eos_token = "</s>"', "authorization = self.headers.get('x')",
    "f(user=u, password=pw2)", "xs[::2] + a[1::3]", "version 1.2.3.4, v2.0.0.1", "10:00::11:00",
    # phone-like digits without a phone's layout or cue: a range, a bare id, a table row, non-NANP groups
    "id 5551234567", "order 123 456 7890 shipped", "rows 212 555 0147 12",
    "telemetry 2125550147", "call(5551234567)",
    # digit runs, zero-padded ids, ISBN-10s (by checksum or named), 12 digits failing Luhn
    'DIGITS = "0123456789"', "'9876543210'", "id 0000123456", "ISBN 0306406152", "see 0306406152 (the ISBN)",
    "isbn: 0198526636", "order 586870218913",
    # a ZIP+4 led by 0 (New England), versions in a user agent
    "Boston, MA 02171-2110", "EAN 4258634077028", "barcode: 6307161101541", "UPC-A 580155580591", "Mozilla/5.0 (Windows NT 5.2; rv:1.9.2.20) Gecko/20100101 Firefox/1.9.2.20",
    "aws_secret_access_key = os.environ['AWS_SECRET_ACCESS_KEY']", "secret_access_key: ${AWS_SECRET}",
    "AWS_SECRET_ACCESS_KEY=xxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxx",
])
def test_look_alike_lines_are_untouched(text: str) -> None:
    assert scrub_pii(text) == (text, {})


def _inside(network: str, rng: random.Random) -> str:
    net = ipaddress.ip_network(network)
    return str(net[rng.randrange(1, net.num_addresses - 1)])


# Sample networks per class, taken from the RFCs (not from the module's table), with ipaddress's own verdict.
CLASS_SAMPLES = {
    "loopback": ["127.0.0.0/8"], "private": ["10.0.0.0/8", "172.16.0.0/12", "192.168.0.0/16", "fd00::/8"],
    "link_local": ["169.254.0.0/16", "fe80::/64"], "documentation": ["192.0.2.0/24", "2001:db8::/32"],
    "multicast": ["224.0.0.0/4", "ff02::/16"],
}


def test_default_policy_keeps_non_personal_addresses() -> None:
    assert PIISpec().keep_addresses == list(ADDRESS_CLASSES)
    rng = random.Random(5)
    for cls, networks in CLASS_SAMPLES.items():
        for network in networks:
            for _ in range(20):
                address = _inside(network, rng)
                assert not ipaddress.ip_address(address).is_global or cls == "multicast"
                text = f"host {address} is up"
                assert scrub_pii(text) == (text, {}), (cls, address)
                removed = [c for c in ADDRESS_CLASSES if c != cls]
                kind = "ipv4" if ":" not in address else "ipv6"
                assert scrub_pii(text, keep_addresses=removed) == ("host <IP_ADDRESS> is up", {kind: 1}), address
    text = "bind 0.0.0.0:80"
    assert scrub_pii(text) == (text, {})
    assert scrub_pii(text, keep_addresses=["loopback", "private"]) == ("bind <IP_ADDRESS>:80", {"ipv4": 1})


@pytest.mark.parametrize("address, public", [
    ("172.15.255.254", True), ("172.16.0.1", False), ("172.31.255.254", False), ("172.32.0.1", True),
    ("169.253.255.254", True), ("169.254.0.1", False), ("100.63.255.254", True), ("100.64.0.1", False),
    ("11.0.0.1", True), ("9.255.255.254", True), ("fdff::1", False), ("fbff::1", True), ("fe7f::1", True),
])
def test_class_boundaries(address: str, public: bool) -> None:
    assert ipaddress.ip_address(address).is_global == public
    found = scrub_pii(f"from {address} today")[1]
    assert bool(found) == public


def test_policy_rejects_unknown_classes() -> None:
    with pytest.raises(ValueError):
        scrub_pii("10.0.0.1", keep_addresses=["lan"])
    with pytest.raises(ValidationError):
        PIISpec(keep_addresses=["lan"])


def test_clean_record_passes_the_policy(tmp_path: Path) -> None:
    text = "The build server at 10.20.30.40 mailed ann@example.com from 81.2.69.160 about the release notes."
    record = {"id": "a", "source": "web", "text": text, "lang": "en", "meta": "{}"}  # as ingest writes it
    kept = clean_record(dict(record), CleanSpec(), tmp_path)
    redacted = clean_record(dict(record), CleanSpec(pii=PIISpec(keep_addresses=["loopback"])), tmp_path)
    assert "10.20.30.40" in kept["text"] and "81.2.69.160" not in kept["text"]
    assert "10.20.30.40" not in redacted["text"] and redacted["text"].count("<IP_ADDRESS>") == 2
    assert dict(zip(redacted["pii_kinds"], redacted["pii_counts"])) == {"email": 1, "ipv4": 2}


def test_generators_are_seeded_and_luhn_is_right() -> None:
    assert planted(seed=9, per_kind=20) == planted(seed=9, per_kind=20)
    assert planted(seed=9, per_kind=20) != planted(seed=10, per_kind=20)
    assert luhn_check_digit("7992739871") == "3"                        # the textbook example
    assert len({gen.__name__ for gen in SECRET_GENERATORS}) >= 5


def test_scrubbing_planted_text_is_idempotent() -> None:
    for plant in PLANTS[::5]:
        once, _ = scrub_pii(plant.text)
        assert scrub_pii(once) == (once, {}), plant
