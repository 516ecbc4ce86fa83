"""Brute-force references for the quality rules' signals (tests/test_quality_rules.py, tests/test_clean_batch.py)."""

from __future__ import annotations

from collections import Counter


def brute_ngrams(text: str) -> dict[str, float]:
    """Top 2–4-gram and duplicate 5–10-gram character fractions by plain loops (the reference)."""
    ws = text.lower().split()
    total = sum(map(len, ws))
    out = {}
    for n in (2, 3, 4):
        grams = Counter(tuple(ws[i:i + n]) for i in range(len(ws) - n + 1))
        best = max(grams.items(), key=lambda kv: (kv[1], sum(map(len, kv[0]))), default=(None, 0))
        out[f"top_{n}gram"] = best[1] * sum(map(len, best[0])) / total if best[1] > 1 else 0.0
    for n in range(5, 11):
        seen, covered = set(), set()
        for i in range(len(ws) - n + 1):
            g = tuple(ws[i:i + n])
            if g in seen:
                covered.update(range(i, i + n))
            seen.add(g)
        out[f"dup_{n}gram"] = sum(len(ws[i]) for i in covered) / total
    return out
