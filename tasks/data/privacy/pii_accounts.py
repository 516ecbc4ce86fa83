"""Domestic bank account numbers after their label, where a bank's details are given: `Routing number: 021000021
Account number: 000123456789` (US), `Sort code: 20-00-00, Account No: 12345678` (UK), `Kontonummer: 1234567890`.

An IBAN carries its own check digits (`pii_ids`); a domestic account number has none that every bank shares, so it
is read only where its label names it and a word of bank details stands near (routing, sort code, bank, BIC,
SWIFT, ABA, wire, transfer, beneficiary, BLZ, within `_NEAR` characters): a customer's `Account number: 4412` in
a shop's ticket is the shop's id. The bank's own routing number or sort code identifies a branch, nobody's
account, and stays. The number goes as the `iban` kind, the kind of bank account numbers.
"""

from __future__ import annotations

import re

# (led by its first letter, a fast scan in C, and checked after it: no word character before that letter)
_ACCOUNT = re.compile(
    r"[AaBbKk](?<![\w][AaBbKk])(?i:(?:(?<=[Bb])ank[ ]account|(?<=[Aa])(?:ccount|cct|/c))[ ]?"
    r"(?:number|num|no\.?|nr\.?|\#)|(?<=[Kk])(?:onto(?:nummer|[ -]?nr\.?)|to\.?[ -]?nr\.?))"
    r"[ \t]*[:#]?[ \t]*(?P<v>\d(?:[ -]?\d){5,16})(?![\w,./-]|[.,]\d)")
_BANK_WORD = re.compile(r"(?i)routing|sort[ ]code|\bbank|\bbic\b|swift|\baba\b|\bwire|transfer|beneficiary|payee|"
                        r"\bblz\b|bankleitzahl|direct[ ]deposit|überweis")
_NEAR = 160


def _account(m: re.Match[str]) -> bool:
    digits = re.sub(r"\D", "", m.group("v"))
    if len(set(digits)) < 3:
        return False
    text = m.string
    return _BANK_WORD.search(text, max(0, m.start() - _NEAR), min(len(text), m.end() + _NEAR)) is not None


def _value_span(m: re.Match[str]) -> tuple[int, int]:
    return m.start("v") - m.start(), m.end("v") - m.start()


def _hint(text: str) -> bool:
    return "ccount" in text or "CCOUNT" in text or "onto" in text or "cct" in text or "a/c" in text or "A/C" in text


# (kind, pattern, validator, group, hint): `pii`'s pass table
ACCOUNT_PASSES = (("iban", _ACCOUNT, _account, _value_span, _hint),)
