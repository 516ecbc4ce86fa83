"""One hand-written PII case: `text` scrubs to `expected` (None: kept as it is), and the counts name exactly the
placeholders that appeared."""

from __future__ import annotations

from tasks.data.privacy.pii import scrub_pii


def assert_scrubbed(text: str, expected: str | None) -> None:
    expected = text if expected is None else expected
    scrubbed, counts = scrub_pii(text)
    assert scrubbed == expected, (text, scrubbed)
    assert sum(counts.values()) == expected.count("<") - text.count("<")
