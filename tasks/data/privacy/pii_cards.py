"""Credit-card numbers: which candidates of the `credit_card` pass are cards (issuer prefix and length, Luhn,
and the look-alikes that pass Luhn by chance: barcodes the text names, rows of 4-digit groups, IBANs)."""

from __future__ import annotations

import re

from stdnum import ean as stdnum_ean, luhn as stdnum_luhn

from tasks.data.privacy.pii_ids import in_iban_shaped_run


def luhn_ok(digits: str) -> bool:
    return stdnum_luhn.is_valid(digits)


def issuer_ok(d: str) -> bool:
    """A plausible issuer prefix for the length: Visa, Mastercard, Amex, Mir, UnionPay (62, 81), Discover, JCB,
    Maestro, Diners."""
    n, p2, p3, p4 = len(d), int(d[:2]), int(d[:3]), int(d[:4])
    if d[0] == "4":
        return n in (13, 16, 19)
    if 51 <= p2 <= 55 or 2221 <= p4 <= 2720:
        return n == 16
    if p2 in (34, 37):
        return n == 15
    if 2200 <= p4 <= 2204:                  # Mir
        return n == 16
    if 8100 <= p4 <= 8171:                  # UnionPay's 81 range (Stripe's and Adyen's test cards)
        return 16 <= n <= 19
    if p4 in (1800, 2131):                  # JCB's 15-digit cards
        return n == 15
    if p4 == 6011 or 644 <= p3 <= 649 or p2 in (62, 65) or p2 == 35:   # Discover, UnionPay, JCB (35xx)
        return 16 <= n <= 19
    if p2 == 50 or 56 <= p2 <= 69:          # Maestro (6x prefixes not claimed above)
        return 12 <= n <= 19
    return (300 <= p3 <= 305 or p2 in (36, 38, 39)) and 14 <= n <= 19


BARCODE_BEFORE = re.compile(r"(?i)\b(?:ean(?:-?13)?|upc(?:-?a)?|gtin(?:-?1[23])?|barcode|bar code|isbn(?:-?13)?)\b"
                             r"[^\n\d]{0,12}$")


# A snowflake id (Discord's, Twitter's: 17-19 digits, a timestamp and counters) after its label or in a status
# URL: one in ten passes Luhn and an 18/19-digit id may start like a Maestro, Discover or Visa number. Cards of
# that length are rare, and none is written after an `id` label; 16-digit ids are no snowflakes and are not read.
SNOWFLAKE_BEFORE = re.compile(r"(?i)(?:\b(?:(?:user|guild|channel|message|msg|server|role|author|account|tweet|"
                              r"status|emoji|webhook|application|app|thread)[ _-]?)?ids?|\btweets?|\bsnowflake"
                              r"|/status(?:es)?/)[\"']?[ \t]*[:=#]?[ \t]*[\"']?$")


def card_ok(m: re.Match[str]) -> bool:
    """A credit-card candidate (`m` with a separator group `s`) that is a card: not part of an IBAN-shaped run or
    a row of 4-digit groups, not a named barcode, a known issuer's length, Luhn-valid."""
    if in_iban_shaped_run(m):
        return False
    digits = re.sub(r"\D", "", m.group())
    if m.group("s") and in_number_row(m, len(digits)):
        return False
    # A bare 12/13-digit barcode (UPC-A, EAN-13) that Luhn also passes by chance, where the text names it: a
    # GS1 check alone would also drop a tenth of real 13-digit Visa and 12-digit Maestro numbers.
    if len(digits) in (12, 13) and m.group().isdigit() and stdnum_ean.is_valid(digits) and \
            BARCODE_BEFORE.search(m.string, max(0, m.start() - 24), m.start()):
        return False
    if len(digits) >= 17 and m.group().isdigit() and \
            SNOWFLAKE_BEFORE.search(m.string, max(0, m.start() - 24), m.start()):
        return False
    return len(set(digits)) > 1 and issuer_ok(digits) and luhn_ok(digits)


def in_number_row(m: re.Match[str], digits: int) -> bool:
    """Groups of 4 inside a row of 4-digit groups (a table's numbers): a 4-digit group right before or after the
    match; two for a 16-digit one (`4111 1111 1111 1111 2025` is a card and a year)."""
    groups = 1 if digits < 16 else 2
    sep = re.escape(m.group("s"))
    after = re.match(rf"(?:{sep}\d{{4}}(?!\d)){{{groups}}}", m.string[m.end():m.end() + 11])
    before = re.search(rf"(?<![\d.,])(?:\d{{4}}{sep}){{{groups}}}$", m.string[max(0, m.start() - 11):m.start()])
    return after is not None or before is not None
