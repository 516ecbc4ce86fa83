"""Planted PII from sources this project did not write (`benchmarks/pii_recall.py`'s last groups,
`tests/test_pii_published.py`): each generator returns (carrier text, parts that must vanish, variant).

- `phone/libphonenumber`: Google's libphonenumber (`phonenumbers`) example number of every region, mobile and fixed
  line, formatted E.164 and INTERNATIONAL (with or without a cue), NATIONAL (after a phone cue: a national number
  alone is anybody's digits), RFC 3966 (`tel:+1-...`) and as dialled from abroad (the US's `011`, Japan's `010`,
  Australia's `0011`, Europe's `00`).
- `credit_card/published`: the test card numbers that payment processors publish (Stripe, Braintree, Adyen,
  PayPal, Worldpay docs) for every brand and length, in the groupings people write (bare, 4-4-4-4 with spaces or
  dashes, Amex 4-6-5, Diners 4-6-4).
- `iban/schwifty`: a valid IBAN (national check digits included) for every country of `schwifty`'s registry,
  compact and in groups of 4, upper and lower case (lower case after an `IBAN` cue, as a form would write it).
- `secret/detect_secrets`: values in the shapes that detect-secrets' plugins look for, in the carriers its plugin
  tests use (`X-JFrog-Art-Api:`, `//registry.npmjs.org/:_authToken=`, `AccountKey=`, Cloudant URLs, ...).
- `email/forms`: addresses in forms the email pass did not read before: percent-encoded `%40`, quoted-printable
  `=40`, HTML entities, IDN domains, `mailto:` with parameters, plus-tags, quoted local parts, apostrophes.

`phonenumbers` and `schwifty` are test-extra dependencies (pyproject); without them their groups are empty.
"""

from __future__ import annotations

import random
import string

from tests.helpers.pii_planted import Plant
from tests.helpers.pii_planted_national import national_ids
from tests.helpers.pii_planted_secrets import ALNUM, B64, HEX, URLSAFE, rand

FORMS = ("E164", "INTERNATIONAL", "NATIONAL", "RFC3966", "OUT_OF_COUNTRY")
CALLERS = ("US", "JP", "AU", "DE", "GB")    # dialled from: exit codes 011, 010, 0011, 00
PHONE_CARRIERS = {
    "E164": ("Reach me at {} any time.", '{{"phone": "{}"}}', "Mobile: {}", "WhatsApp {} (evenings)",
             "The report mentions {} twice."),
    "INTERNATIONAL": ("Our office: {} (mornings).", "Tel. {}", "phone = \"{}\"", "Call {} for support.",
                      "According to the ticket, {} was used."),
    "NATIONAL": ("Tel: {}", "call me at {}.", "Phone: {} (office)", "Telefon: {}", "Mobile: {}"),
    "RFC3966": ('<a href="{}">call us</a>', "[Call]({})", "contact: {}"),
    "OUT_OF_COUNTRY": ("From abroad dial {}.", "Tel: {}", "Our partner office, {}, opens at nine."),
}


def libphonenumber_examples() -> list[tuple[str, str, str, str]]:
    """(region, type, format, number) for every region's example mobile and fixed-line number in each format."""
    try:
        import phonenumbers
    except ImportError:
        return []
    kinds = {"MOBILE": phonenumbers.PhoneNumberType.MOBILE, "FIXED_LINE": phonenumbers.PhoneNumberType.FIXED_LINE}
    out = []
    for region in sorted(phonenumbers.SUPPORTED_REGIONS):
        for kind, number_type in kinds.items():
            number = phonenumbers.example_number_for_type(region, number_type)
            if number is None:
                continue
            for form in FORMS:
                if form == "OUT_OF_COUNTRY":
                    caller = CALLERS[len(out) % len(CALLERS)]
                    value = phonenumbers.format_out_of_country_calling_number(number, caller)
                else:
                    value = phonenumbers.format_number(number, getattr(phonenumbers.PhoneNumberFormat, form))
                out.append((region, kind, form, value))
    return out


def phone_plant(rng: random.Random, form: str, number: str) -> tuple[str, tuple[str, ...]]:
    text = rng.choice(PHONE_CARRIERS[form]).format(number)
    return text, (number.removeprefix("tel:"),)


def phones(rng: random.Random, n: int) -> list[tuple[str, tuple[str, ...], str]]:
    examples = libphonenumber_examples()
    # Every example once n reaches their number; fewer are spread over all regions and formats.
    picked = [examples[i % len(examples) if n >= len(examples) else i * len(examples) // n] for i in range(n)] \
        if examples else []
    return [(*phone_plant(rng, form, number), form) for _, _, form, number in picked]


# Published test numbers (brand, number): Stripe's, Braintree's, Adyen's, PayPal's and Worldpay's test cards.
TEST_CARDS = (
    ("visa", "4111111111111111"), ("visa", "4012888888881881"), ("visa", "4242424242424242"),
    ("visa", "4000056655665556"), ("visa", "4222222222222"), ("visa", "4007000000027"), ("visa", "4012888818888"),
    ("visa", "4917610000000000003"), ("visa", "4000000000000000006"),
    ("mastercard", "5555555555554444"), ("mastercard", "5105105105105100"), ("mastercard", "5200828282828210"),
    ("mastercard", "2223003122003222"), ("mastercard", "2223000048400011"), ("mastercard", "5454545454545454"),
    ("amex", "378282246310005"), ("amex", "371449635398431"), ("amex", "378734493671000"),
    ("amex", "340000000000009"), ("amex", "370000000000002"),
    ("diners", "30569309025904"), ("diners", "38520000023237"), ("diners", "36227206271667"),
    ("diners", "3056930009020004"), ("diners", "36006666333344"), ("diners", "36259600000004"),
    ("discover", "6011111111111117"), ("discover", "6011000990139424"), ("discover", "6011981111111113"),
    ("discover", "6445644564456445"), ("discover", "6500000000000002"), ("discover", "6011000000000004"),
    ("jcb", "3530111333300000"), ("jcb", "3566002020360505"), ("jcb", "3566111111111113"),
    ("jcb", "3569990010095841"), ("jcb", "3528000700000000"),
    ("unionpay", "6200000000000005"), ("unionpay", "6205500000000000004"), ("unionpay", "6250941006528599"),
    ("unionpay", "6222821234560017"), ("unionpay", "6243030000000001"), ("unionpay", "8171999927660000"),
    ("unionpay", "8171999900000000021"),
    ("maestro", "6759649826438453"), ("maestro", "6799990100000000019"), ("maestro", "5018000000000009"),
    ("maestro", "6304000000000000"), ("maestro", "6331101999990016"), ("maestro", "501800000009"),
    ("maestro", "6759000000005"), ("maestro", "5000550000000029"), ("maestro", "6771798021000008"),
)
CARD_CARRIERS = ("Card: {} exp 12/29", "Pay with {} please.", '"card_number": "{}"', "cc={}&cvv=123",
                 "Kartennummer {} gültig bis 03/28", "<input name=\"pan\" value=\"{}\">")


def card_groupings(digits: str) -> list[str]:
    """The ways people write a card number: bare, in 4s (spaces or dashes), Amex 4-6-5 and Diners 4-6-4."""
    fours = [digits[i:i + 4] for i in range(0, len(digits), 4)]
    out = [digits, " ".join(fours), "-".join(fours)]
    if len(digits) in (14, 15):
        out += [f"{digits[:4]} {digits[4:10]} {digits[10:]}", f"{digits[:4]}-{digits[4:10]}-{digits[10:]}"]
    return out


def cards(rng: random.Random, n: int) -> list[tuple[str, tuple[str, ...], str]]:
    values = [(brand, grouped) for brand, digits in TEST_CARDS for grouped in card_groupings(digits)]
    out = []
    for i in range(n):
        brand, value = values[i % len(values)]
        out.append((rng.choice(CARD_CARRIERS).format(value), (value,), brand))
    return out


IBAN_CARRIERS = ("IBAN: {}", "Please transfer the deposit to {} by Friday.", '"iban": "{}"', "Konto {} (Girokonto)",
                 "Bank account {}; BIC on request.")


def iban_countries() -> list[str]:
    try:
        from schwifty.registry import _default_registry   # noqa: PLC2701  (the registry has no public listing)
    except ImportError:
        return []
    return sorted(_default_registry._get("iban"))


def iban(rng: random.Random, country: str) -> str:
    """A valid IBAN of `country` from schwifty's registry. Brazil's bank code is 8 digits and its account type a
    letter in SWIFT's registry (schwifty draws any character there, a layout no Brazilian IBAN has)."""
    from schwifty import IBAN
    values = {"bank_code": "".join(rng.choice(string.digits) for _ in range(8)),
              "account_type": rng.choice(string.ascii_uppercase)} if country == "BR" else {}
    return IBAN.random(country_code=country, random=rng, use_registry=False, **values).compact


def ibans(rng: random.Random, n: int) -> list[tuple[str, tuple[str, ...], str]]:
    countries = iban_countries()
    out = []
    for i in range(n if countries else 0):
        compact = iban(rng, countries[i % len(countries)])
        grouped = " ".join(compact[j:j + 4] for j in range(0, len(compact), 4))
        variant = ("compact", "grouped", "lower", "lower_grouped")[(i // len(countries)) % 4]
        value = {"compact": compact, "grouped": grouped, "lower": compact.lower(),
                 "lower_grouped": grouped.lower()}[variant]
        carrier = "IBAN {}" if variant.startswith("lower") else rng.choice(IBAN_CARRIERS)
        out.append((carrier.format(value), (value,), variant))
    return out


def _jwt_part(rng: random.Random, n: int) -> str:
    return "eyJ" + rand(rng, n, URLSAFE)


# detect-secrets' plugins, each a (value maker, carriers of its plugin tests); values drawn in the plugin's shape.
DETECT_SECRETS = {
    "artifactory": (lambda r: "AKCp8" + rand(r, 68, ALNUM),
                    ("X-JFrog-Art-Api: {}", "artif-key:{}", "artifactoryx:_password={}", '"{}"', "={}")),
    "aws": (lambda r: r.choice(["AKIA", "ASIA", "ABIA", "ACCA"]) + rand(r, 16, string.ascii_uppercase + string.digits),
            ("aws_access_key_id = {}", "AWS_ACCESS_KEY_ID={}", '"AccessKeyId": "{}"', "key: {}")),
    "aws_secret": (lambda r: rand(r, 40, ALNUM + "/+"),
                   ('aws_secret_access_key = "{}"', 'AWS_SECRET_ACCESS_KEY="{}"')),
    "azure_storage": (lambda r: rand(r, 86, B64) + "==",
                      ("DefaultEndpointsProtocol=https;AccountName=acct;AccountKey={};EndpointSuffix=core.windows.net",
                       "AccountKey={}")),
    "basic_auth": (lambda r: rand(r, 12, ALNUM), ("https://username:{}@example.com", "ftp://ann:{}@files.example.org/x")),
    "cloudant": (lambda r: rand(r, 64, HEX), ("https://acct:{}@acct.cloudant.com", 'cloudant_password = "{}"')),
    "discord": (lambda r: r.choice("MNO") + rand(r, 23, URLSAFE) + "." + rand(r, 6, URLSAFE) + "." + rand(r, 27, URLSAFE),
                ("DISCORD_TOKEN={}", 'client.run("{}")', "token: {}")),
    "github": (lambda r: r.choice(["ghp_", "gho_", "ghu_", "ghs_", "ghr_"]) + rand(r, 36, ALNUM),
               ("GITHUB_TOKEN={}", "git clone https://{}@github.com/o/r", "{}")),
    "gitlab": (lambda r: r.choice(["glpat-", "gldt-", "glrt-", "glsoat-", "glft-"]) + rand(r, 20, URLSAFE),
               ("GITLAB_TOKEN={}", "token: {}", "{}")),
    "ibm_cloud_iam": (lambda r: rand(r, 44, URLSAFE), ('ibm_cloud_iam_api_key = "{}"', "IAM_API_KEY={}", "ibm-apikey: {}")),
    "ibm_cos_hmac": (lambda r: rand(r, 48, HEX), ('secret_access_key = "{}"', "cos_hmac_secret_key: {}")),
    "jwt": (lambda r: _jwt_part(r, 33) + "." + _jwt_part(r, 60) + "." + rand(r, 43, URLSAFE),
            ("Authorization: Bearer {}", "token={}", "{}")),
    "jwt_unsigned": (lambda r: _jwt_part(r, 33) + "." + _jwt_part(r, 60) + r.choice(["", "."]),
                     ("id_token={}", '"jwt": "{}"', "{}")),
    "mailchimp": (lambda r: rand(r, 32, HEX) + "-us" + str(r.randint(1, 20)), ("MAILCHIMP_KEY={}", "apikey: {}", "{}")),
    "npm": (lambda r: "npm_" + rand(r, 36, ALNUM), ("//registry.npmjs.org/:_authToken={}", "NPM_TOKEN={}", "{}")),
    "openai": (lambda r: "sk-" + rand(r, 20, ALNUM) + "T3BlbkFJ" + rand(r, 20, ALNUM), ("OPENAI_API_KEY={}", "{}")),
    "pypi": (lambda r: "pypi-AgEIcHlwaS5vcmc" + rand(r, 80, URLSAFE), ("password = {}", "TWINE_PASSWORD={}", "{}")),
    "sendgrid": (lambda r: "SG." + rand(r, 22, URLSAFE) + "." + rand(r, 43, URLSAFE), ("SENDGRID_API_KEY={}", "{}")),
    "slack": (lambda r: r.choice(["xoxb-", "xoxp-", "xoxa-"]) + f"{r.randint(10**10, 10**11)}-{r.randint(10**10, 10**11)}-"
              + rand(r, 24, string.ascii_lowercase + string.digits), ("SLACK_TOKEN={}", "{}")),
    "slack_webhook": (lambda r: "https://hooks.slack.com/services/T" + rand(r, 8, ALNUM) + "/B" + rand(r, 8, ALNUM)
                      + "/" + rand(r, 24, ALNUM), ("webhook_url: {}", "{}")),
    "softlayer": (lambda r: rand(r, 64, string.ascii_lowercase + string.digits),
                  ('softlayer_api_key = "{}"', "https://api.softlayer.com/soap/v3/{}")),
    "square": (lambda r: "sq0csp-" + rand(r, 43, URLSAFE), ("SQUARE_SECRET={}", "{}")),
    "stripe": (lambda r: r.choice(["sk_live_", "rk_live_"]) + rand(r, 24, ALNUM), ("STRIPE_KEY={}", "{}")),
    "telegram": (lambda r: f"{r.randint(10**8, 10**10)}:AA" + rand(r, 33, URLSAFE), ("TELEGRAM_TOKEN={}", "https://api.telegram.org/bot{}/getMe")),
    "twilio": (lambda r: r.choice(["AC", "SK"]) + rand(r, 32, HEX), ("TWILIO_SID={}", "{}")),
}


def detect_secrets(rng: random.Random, n: int) -> list[tuple[str, tuple[str, ...], str]]:
    plugins = sorted(DETECT_SECRETS)
    out = []
    for i in range(n):
        plugin = plugins[i % len(plugins)]
        make, carriers = DETECT_SECRETS[plugin]
        value = make(rng)
        out.append((rng.choice(carriers).format(value), (value,), plugin))
    return out


def _local(rng: random.Random) -> str:
    return rng.choice(["ann", "j.doe", "maria_lopez", "k.tanaka", "zoe", "li.wei"]) + str(rng.randint(1, 99))


# (form, maker(local, domain) -> text with the address, the parts that must vanish)
EMAIL_FORMS = {
    "percent": lambda r, l, d: (f'<a href="mailto:{l}%40{d}">write</a>', (f"{l}%40{d}",)),
    "percent_query": lambda r, l, d: (f"https://x.example.net/unsubscribe?email={l}%40{d}&list=7", (f"{l}%40{d}",)),
    "quoted_printable": lambda r, l, d: (f"From: =?utf-8?Q?{l}=40{d}?=", (f"{l}=40{d}",)),
    "qp_body": lambda r, l, d: (f"Content-Transfer-Encoding: quoted-printable\n\nWrite to {l}=40{d} soon=2E",
                                (f"{l}=40{d}",)),
    "html_entity": lambda r, l, d: (f"<p>Mail: {l}{r.choice(['&#64;', '&#x40;', '&commat;'])}{d}</p>", (l + "&", d)),
    "idn": lambda r, l, d: (f"Kontakt: {r.choice(['jörg', 'zoë', 'françois', 'søren'])}@{r.choice(['bücher.de', 'café.fr', 'xn--bcher-kva.de', '例え.jp'])}",
                            ()),
    "mailto_params": lambda r, l, d: (f"[mail](mailto:{l}@{d}?subject=Hello%20there&cc=boss@{d})", (f"{l}@{d}",)),
    "plus_tag": lambda r, l, d: (f"Signed up as {l}+{r.choice(['news', 'github', 'tag-1', 'a.b'])}@{d}.", (f"{l}+",)),
    "quoted_local": lambda r, l, d: (f'Reply to "{l.replace(".", " ")} jr"@{d} or not.', (f'{l.replace(".", " ")} jr"@{d}',)),
    "apostrophe": lambda r, l, d: (f"Contact o'{l}@{d} today.", (f"o'{l}",)),
}
EMAIL_DOMAINS = ("example.com", "mail.example.org", "uni-example.ac.uk", "example.co.jp", "firma.example.de")


def email_forms(rng: random.Random, n: int) -> list[tuple[str, tuple[str, ...], str]]:
    forms = sorted(EMAIL_FORMS)
    out = []
    for i in range(n):
        form = forms[i % len(forms)]
        text, parts = EMAIL_FORMS[form](rng, _local(rng), rng.choice(EMAIL_DOMAINS))
        if not parts:                              # IDN: the whole address
            parts = (text.split(" ", 1)[1],)
        out.append((text, parts, form))
    return out


# (kind, Plant form, generator): the benchmark's groups from published sources, in this order.
SOURCES = (("phone", "libphonenumber", phones), ("credit_card", "published", cards), ("iban", "schwifty", ibans),
           ("secret", "detect_secrets", detect_secrets), ("email", "forms", email_forms),
           ("ssn", "faker_national", national_ids))


def published(seed: int = 1234, per_kind: int = 500) -> list[tuple[Plant, str]]:
    """`per_kind` plants of every source (none of a source whose library is not installed), each with its
    variant (a phone's format, a card's brand, an IBAN's case and grouping, a secret's plugin, an email's form)."""
    rng = random.Random(seed)
    return [(Plant(kind, text, parts, form), variant)
            for kind, form, generate in SOURCES for text, parts, variant in generate(rng, per_kind)]
