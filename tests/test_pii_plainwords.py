"""Letters-only and digits-only passwords after a password word, generated letters after a credential name, login
shorthand and Markdown password columns (`tasks.data.privacy.pii_plainwords`): each found case was kept before."""

from __future__ import annotations

import random
import string

import pytest

from tasks.data.privacy.pii import scrub_pii
from tasks.data.privacy.pii_plainwords import generated, plain_password, word_humps
from tests.helpers.pii_cases import assert_scrubbed

_TABLE = "| Site | Username | {} |\n|---|---|---|\n| gmail | jsmith | Tr0ub4dor&3x |"


@pytest.mark.parametrize("text, expected", [
    ("PASSWORD=letmein", "PASSWORD=<SECRET>"),
    ("DB_PASSWORD=hunterhunter", "DB_PASSWORD=<SECRET>"),
    ("export DB_PASSWORD=correcthorsebatterystaple", "export DB_PASSWORD=<SECRET>"),
    ("PASSWORD=letmein # prod", "PASSWORD=<SECRET> # prod"),
    ("PASSWORD='letmein'", "PASSWORD='<SECRET>'"),
    ("password: sunshine", "password: <SECRET>"),
    ("Password: letmein", "Password: <SECRET>"),
    ("db:\n  password: sunshine\n", "db:\n  password: <SECRET>\n"),
    ("**Password:** letmein", "**Password:** <SECRET>"),
    ('{"password": "KxTqWmZrLpVbNc"}', '{"password": "<SECRET>"}'),
    ('"password": "iloveyou"', '"password": "<SECRET>"'),
    ('password = "sunshine"', 'password = "<SECRET>"'),
    ("password: 123456", "password: <SECRET>"),
    ("Password: 12345678", "Password: <SECRET>"),
    ("the password is letmein", "the password is <SECRET>"),
    ("the password is 48291375.", "the password is <SECRET>."),
    ("user=bob password=sunshine", "user=bob password=<SECRET>"),
    ("passwort=letmein", "passwort=<SECRET>"),
    ("mot de passe: 48291375", "mot de passe: <SECRET>"),
    ('mot de passe: "letmein"', 'mot de passe: "<SECRET>"'),
])
def test_a_plain_value_after_a_password_word(text, expected):
    assert_scrubbed(text, expected)


@pytest.mark.parametrize("text, expected", [
    ("SECRET_KEY=KxTqWmZrLpVbNcQwErTyUiOpAsDfGhJk", "SECRET_KEY=<SECRET>"),
    ("api_key: KxTqWmZrLpVbNcQwEr", "api_key: <SECRET>"),
    ('auth_token = "QwErTyUiOpAsDfGhJkLz"', 'auth_token = "<SECRET>"'),
])
def test_generated_letters_after_a_credential_name(text, expected):
    assert_scrubbed(text, expected)


@pytest.mark.parametrize("text, expected", [
    ("host: db1 user: root pw: Tr0ub4dor&3x", "host: db1 user: root pw: <SECRET>"),
    ("ssh root@73.162.45.201 pw: Tr0ub4dor&3x", "ssh root@<IP_ADDRESS> pw: <SECRET>"),
    ("Wi-Fi: HomeNet / pass: sunflower2019", "Wi-Fi: HomeNet / pass: <SECRET>"),
    ("login root pwd Tr0ub4dor&3x", "login root pwd <SECRET>"),
    ("user jsmith / pass Tr0ub4dor&3x", "user jsmith / pass <SECRET>"),
    ("login: admin / Tr0ub4dor&3x", "login: admin / <SECRET>"),
    ("creds: admin:Tr0ub4dor&3x", "creds: admin:<SECRET>"),
    *((_TABLE.format(name), _TABLE.format(name).replace("Tr0ub4dor&3x", "<SECRET>"))
      for name in ("Password", "pass", "pwd")),
])
def test_login_shorthand_and_password_columns(text, expected):
    assert_scrubbed(text, expected)


@pytest.mark.parametrize("text", [
    "password: required", "Password: optional", "password: str", "password: SecretStr", "password = password",
    "password=None", "PASSWORD=changeme", "PASSWORD_HASHER=bcrypt", "AUTH_TYPE=password", "password: hidden",
    '"password": "Password"', '"password": "Passwort"', '"password": "Contraseña"', '"password": "Mot de passe"',
    "password: Kennwort", '"type": "password"', '<input type="password" name="password">', "pass the test",
    "pass: true", "pw: none", "token: bearer", "key: value", "secret: shared", "pass 123456 to the function",
    "the password is incorrect", "password: ********", "password: <your password>", "if password == confirm:",
    "def login(user, pw):", "user / pass",
    # code: a variable, a call's keyword, an object's property, a name used as code elsewhere
    "  password: hunter\n}", "def f(password=letmein):", "user=bob password=sunshine\nsunshine()",
    "password = getpass.getpass()", "password = newPassword", "x = {password: pwHash}", "password=passwd",
    "args.password = options.password", "assert password == 'secret'", 'LABEL_PASSWORD="Password"',
    # words about a password, settings and schemas
    "PASSWORD_MIN_LENGTH=12", "password: writeOnly", "password:\n  type: string", "password: encrypted",
    "password: nullable", "password: Optional", "user: root pw: required", "pass: through",
    "The password is case sensitive.", "the password is stored in vault", "Your password was changed.",
    "the password is correct.", "password is required", "login root with password", "password: ${DB_PASSWORD}",
    "parola: incorrecta", "contraseña incorrecta",
    # logins that are no secrets, names that are code's
    "login: Google / Facebook", "creds: admin:admin", "Last login: Mon Jan  1 10:00:00", "pwd: /home/user",
    "SECRET_KEY=PasswordResetTokenGenerator", "api_key: MyApplicationName", "token: AbstractBaseUser",
    "| Feature | Password | SSH key |\n|---|---|---|\n| Supported | Yes | No |",
    "| Field | Type | Description |\n|---|---|---|\n| password | string | user password |",
])
def test_words_labels_and_code_stay(text):
    assert_scrubbed(text, None)


def test_the_rules_on_their_own():
    assert plain_password("letmein", quoted=False) and plain_password("123456", quoted=False)
    assert not plain_password("Forgotten", quoted=True) and not plain_password("encrypted", quoted=False)
    assert word_humps("SecretStr") and word_humps("PasswordResetToken") and not word_humps("KxTqWmZrLpVbNc")
    assert not generated("PasswordResetToken") and not generated("abcdefghijklmnopqrst")


def test_most_random_letters_read_as_generated():
    rng = random.Random(7)
    values = ["".join(rng.choice(string.ascii_letters) for _ in range(24)) for _ in range(500)]
    assert sum(map(generated, values)) >= 0.8 * len(values)


def test_scrubbing_is_idempotent():
    text = "PASSWORD=letmein\nuser jsmith / pass Tr0ub4dor&3x\n" + _TABLE.format("Password")
    once = scrub_pii(text)[0]
    assert scrub_pii(once)[0] == once and once.count("<SECRET>") == 3
