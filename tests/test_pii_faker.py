"""PII scrubbing against a generator this project did not write: Faker's seeded fake emails, phones, cards,
IBANs, SSNs and addresses in several locales, and its non-PII values that look like them (barcodes, ZIP+4,
hashes, dates, user agents). The planted set in `tests/helpers/pii_planted.py` was written beside the detector;
these values were not, so a layout the detector never heard of shows up here (Faker's en_US phones with `x157`
extensions and the `001` prefix were found 29 % of the time before this test existed).

Faker's values change between its releases, hence the pin in pyproject's test extra and thresholds with a
little room rather than exact counts. Carriers are plain prose lines; "after a cue" means the line names what
follows (`Phone: ...`), the way records and forms write it.
"""

from __future__ import annotations

import ipaddress

import pytest

from tasks.data.privacy.pii import scrub_pii

faker = pytest.importorskip("faker")

N = 200


def fake(locale: str, seed: int = 7):
    f = faker.Faker(locale)
    f.seed_instance(seed)
    return f


def recall(values: list[str], carrier: str, kinds: tuple[str, ...] | None = None) -> tuple[float, list[str]]:
    """Share of values whose every character run is gone after scrubbing `carrier` around each."""
    missed = []
    for v in values:
        text, counts = scrub_pii(carrier.format(v))
        if v in text or (kinds is not None and not set(counts) & set(kinds)):
            missed.append(v)
    return 1 - len(missed) / len(values), missed[:5]


PHONE_LOCALES = ["en_US", "en_GB", "de_DE", "fr_FR", "es_ES", "it_IT", "pt_BR", "nl_NL", "ja_JP", "hi_IN", "zh_CN",
                 "en_IN"]


@pytest.mark.parametrize("locale", PHONE_LOCALES)
def test_phones_after_a_cue(locale):
    # Measured 1.000 in every locale (before the cued pass: it_IT 0.85, pt_BR 0.51, nl_NL 0.84, ja_JP 0.76).
    f = fake(locale)
    values = [f.phone_number() for _ in range(N)]
    for carrier in ("Phone: {}", "Call me at {}.", '{{"mobile": "{}"}}'):
        share, missed = recall(values, carrier, ("phone",))
        assert share >= 0.97, (locale, carrier, share, missed)


# Without a cue, measured: en_US 0.925 (bare 10 digits left), en_GB 1.0, de_DE 0.96, fr_FR 0.985, es_ES 1.0,
# it_IT 0.745 (bare 9-10 digit numbers left), pt_BR 0.995 (was 0.51), nl_NL 0.955 (was 0.84), ja_JP 1.0 (was 0.76),
# hi_IN 0.98. zh_CN's and en_IN's bare 10-11 digit mobiles are left without a cue: they read as ids or counts.
NO_CUE_FLOORS = {"en_US": 0.9, "en_GB": 0.97, "de_DE": 0.93, "fr_FR": 0.96, "es_ES": 0.97, "it_IT": 0.7,
                 "pt_BR": 0.97, "nl_NL": 0.93, "ja_JP": 0.97, "hi_IN": 0.95}


@pytest.mark.parametrize("locale", sorted(NO_CUE_FLOORS))
def test_phones_without_a_cue(locale):
    f = fake(locale)
    values = [f.phone_number() for _ in range(N)]
    for carrier in ("She wrote {} on the envelope.", "- {}", "Ann Lee, {}, Berlin"):
        share, missed = recall(values, carrier, ("phone",))
        assert share >= NO_CUE_FLOORS[locale], (locale, carrier, share, missed)


@pytest.mark.parametrize("locale", ["en_US", "de_DE", "pt_BR", "ja_JP", "zh_CN"])
def test_msisdns_after_a_cue(locale):
    # 13 bare digits; a few are Luhn-valid with a card's prefix and go as cards (gone all the same). Was 0.
    f = fake(locale)
    values = [f.msisdn() for _ in range(N)]
    for carrier in ("Phone: {}", '{{"msisdn": "{}"}}', "tel. {}"):
        share, missed = recall(values, carrier, ("phone", "credit_card"))
        assert share >= 0.97, (locale, carrier, share, missed)


@pytest.mark.parametrize("card_type", ["amex", "diners", "discover", "jcb15", "jcb16", "mastercard", "visa13",
                                       "visa16", "visa19"])
def test_cards_of_every_issuer(card_type):
    f = fake("en_US")
    values = [f.credit_card_number(card_type=card_type) for _ in range(N)]
    share, missed = recall(values, "Card number {} (exp 04/29).", ("credit_card",))
    assert share == 1.0, (card_type, missed)


@pytest.mark.parametrize("card_type", ["amex", "diners", "discover", "jcb15", "jcb16", "mastercard", "visa13",
                                       "visa16", "visa19", "maestro"])
def test_cards_in_groups_of_four(card_type):
    # 12-19 digits as 4-4-4(-...) with a shorter last group (Amex 4-4-4-3, Visa13 4-4-4-1, Maestro 4-4-4): 0.0
    # before for all but the 16/19-digit types. Faker's Maestro numbers include a `0604` prefix that is no
    # Maestro range (8 % of them): measured 0.91 there, 1.0 elsewhere.
    f = fake("en_US")
    values = [f.credit_card_number(card_type=card_type) for _ in range(N)]
    for sep in (" ", "-"):
        grouped = [sep.join(v[i:i + 4] for i in range(0, len(v), 4)) for v in values]
        share, missed = recall(grouped, "Card {} (exp 04/29).", ("credit_card",))
        assert share >= (0.88 if card_type == "maestro" else 1.0), (card_type, sep, share, missed)


def test_ibans_in_lower_case_and_with_dashes():
    for locale in ("de_DE", "fr_FR", "en_GB", "nl_NL", "es_ES", "it_IT"):     # 0.0 before, 1.0 measured
        f = fake(locale)
        values = [f.iban() for _ in range(N)]
        for form in (lambda v: " ".join(v[i:i + 4] for i in range(0, len(v), 4)).lower(),
                     lambda v: "-".join(v[i:i + 4] for i in range(0, len(v), 4)),
                     lambda v: "  ".join(v[i:i + 4] for i in range(0, len(v), 4))):
            share, missed = recall([form(v) for v in values], "IBAN: {}", ("iban",))
            assert share >= 0.99, (locale, share, missed)


def test_emails_public_addresses_ssns_and_ibans():
    us = fake("en_US")
    assert recall([us.email() for _ in range(N)], "Write to {} today.", ("email",))[0] == 1.0
    assert recall([us.ssn() for _ in range(N)], "SSN {} on file.", ("ssn",))[0] == 1.0
    assert recall([us.ipv4_public() for _ in range(N)], "request from {} blocked", ("ipv4",))[0] == 1.0
    v6 = [a for a in (us.ipv6() for _ in range(N))                     # private, multicast...: kept by policy
          if ipaddress.ip_address(a).is_global and not ipaddress.ip_address(a).is_multicast]
    assert len(v6) > N / 2 and recall(v6, "peer {} connected", ("ipv6",)) == (1.0, [])
    for locale in ("de_DE", "fr_FR", "en_GB", "nl_NL", "es_ES", "it_IT"):
        f = fake(locale)                # one seeded instance: a fresh one per value repeated one IBAN N times
        share, missed = recall([f.iban() for _ in range(N)], "IBAN: {}", ("iban",))
        assert share >= 0.99, (locale, missed)


@pytest.mark.parametrize("name", ["isbn10", "isbn13", "ean8", "date", "time", "iso8601", "uuid4", "sha1", "md5",
                                  "zipcode_plus4", "ipv4_private", "pricetag", "unix_time", "postcode",
                                  "user_agent", "mac_address", "hex_color", "url", "file_path", "sentence"])
def test_look_alikes_are_left_alone(name):
    f = fake("en_US", seed=11)
    values = [str(getattr(f, name)()) for _ in range(N)]
    hits = [(v, scrub_pii(f"Value: {v} (see file).")[1]) for v in values]
    assert [h for h in hits if h[1]] == []


def test_barcodes_named_as_such_are_no_cards():
    f = fake("en_US", seed=11)
    values = [f.ean13() for _ in range(N)]
    assert [v for v in values if scrub_pii(f"EAN {v}")[1]] == []
