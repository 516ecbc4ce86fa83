"""Secrets in key files, Wi-Fi settings and webhook URLs that no `name = value` pass reads (`tasks.data.privacy.pii`).

- A PuTTY private key (`.ppk`): the base64 lines under `Private-Lines: N` (the key itself: `Encryption: none`
  leaves it in the clear) and the `Private-MAC:` (a keyed hash of the file: with a passphrase, an offline guess
  test). The `Public-Lines` are the public key and stay.
- wpa_supplicant's `psk="..."` (the network's passphrase) or `psk=<64 hex>` (the key derived from it).
- A Wi-Fi QR code's `WIFI:S:<ssid>;T:WPA;P:<password>;;` (`\\;` escapes a `;`): the `P:` field.
- A Microsoft Teams incoming webhook (`https://<tenant>.webhook.office.com/webhookb2/<uuid>@<uuid>/IncomingWebhook/
  <32 hex>/<uuid>`, the older `outlook.office.com/webhook/`): whoever has the path can post to the channel; the
  host stays.
Each pattern is led by its literal (`LiteralGated`: run only where that occurs, found by `re`'s literal search).
"""

from __future__ import annotations

import re

from tasks.data.privacy.pii_shapes import LiteralGated
from tasks.data.privacy.pii_values import is_placeholder

_B64_LINE = r"[A-Za-z0-9+/=]{1,200}"
_UUID = r"[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}"
_KEY_FILES = LiteralGated([
    # the lines end at a line break, which no base64 line holds: each line is read once
    ("Private-Lines:", r"Private-Lines:[ \t]*\d{1,4}[ \t]*\r?\n"
                       rf"(?P<bare>(?:{_B64_LINE}\r?\n){{0,99}}{_B64_LINE})(?![^\r\n])"),
    ("Private-MAC:", r"Private-MAC:[ \t]*(?P<bare>[0-9a-fA-F]{40,128})(?![0-9A-Za-z])"),
    ("psk", r"psk(?<![\w-]psk)[ \t]*=[ \t]*(?:\"(?P<quoted>[^\"\n]{8,63})\"|(?P<bare>[0-9a-fA-F]{64})(?![\w-]))"),
    # the fields before `P:` hold no `;` but an escaped one
    ("WIFI:", r"WIFI:(?:[A-Za-z]{1,3}:(?:\\.|[^;\\\n]){0,64};){0,8}?P:(?P<bare>(?:\\.|[^;\\\n]){1,63});"),
    ("office", r"(?:\.webhook\.office\.com/webhookb2|outlook\.office(?:365)?\.com/webhook)/"
               rf"(?P<bare>{_UUID}@{_UUID}/IncomingWebhook/[0-9a-fA-F]{{32}}/{_UUID}(?:/[A-Za-z0-9_-]{{1,100}})?)"
               r"(?![\w-])"),
])


def _value(m: re.Match[str]) -> str:
    return m.group("quoted") if "quoted" in m.re.groupindex and m.group("quoted") is not None else m.group("bare")


def _key_file_secret(m: re.Match[str]) -> bool:
    value = _value(m)
    return len(set(value)) >= 6 and not is_placeholder(value, quoted=True)


def _value_span(m: re.Match[str]) -> tuple[int, int]:
    group = "quoted" if "quoted" in m.re.groupindex and m.group("quoted") is not None else "bare"
    return m.start(group) - m.start(), m.end(group) - m.start()


# (pattern, validator, group, hint): `pii_secrets.SECRET_PASSES`' shape
KEY_FILE_PASSES = (
    (_KEY_FILES, _key_file_secret, _value_span, lambda text: True),
)
