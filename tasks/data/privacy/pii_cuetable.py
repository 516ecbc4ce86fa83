"""The cue mechanism of the national-id passes (`pii_national`, `pii_national_more`): a number counts only right
after a cue word that names its scheme, and is looked for only where a cue literal stands just before it.

Each pass keeps its own table (cue → schemes), number pattern and check; what they share is here:
- `named_cues` / `cue_index`: the cues as one alternation of named groups, and which one matched (so a match says
  which schemes to check it in without a second scan);
- `Gate`: the cheap test that a cue literal stands in the characters before a number (one scan in C of plain
  literals, then a word test in Python on the rare hit), which keeps text without cue words at one digit-led scan;
- `cued_at`: the cued pattern's match whose number starts exactly at a candidate token;
- `AnchorLed`: a pass's `sub`, trying `cued_at` only at the tokens its anchor pattern finds.
"""

from __future__ import annotations

import re
from typing import Callable, Iterable

BACK = 48  # how far before a number its cue (and the cue's gate literal) may stand


def named_cues(cues: Iterable[str]) -> str:
    """`(?P<c0>cue0)|(?P<c1>cue1)|…`: one alternation whose matched group names the cue."""
    return "|".join(f"(?P<c{i}>{cue})" for i, cue in enumerate(cues))


def cue_index(m: re.Match[str]) -> int:
    """The position in the `named_cues` list of the cue that `m` matched."""
    return next(int(name[1:]) for name, value in m.groupdict().items() if name[0] == "c" and value is not None)


class Gate:
    """Whether a cue literal stands in a lower-cased stretch of text: `words` as whole words (short acronyms that
    occur inside `public`, `final`, `span`), `starts` at a word's start, `anywhere` at any place (scripts written
    without spaces, and tables whose cues are all long enough)."""

    def __init__(self, words: Iterable[str] = (), starts: Iterable[str] = (), anywhere: Iterable[str] = ()):
        self.words, self.starts = frozenset(words), frozenset(starts)
        literals = sorted(self.words | self.starts | set(anywhere), key=len, reverse=True)
        # Plain literals: `re` skips in C to a literal's first letter, where a lookbehind in front of the
        # alternation would be tried at every position.
        self.scan = re.compile("|".join(map(re.escape, literals)))

    def __call__(self, before: str) -> bool:
        for hit in self.scan.finditer(before):
            lit, lo, hi = hit.group(), hit.start(), hit.end()
            if lit in self.words or lit in self.starts:
                if lo > 0 and before[lo - 1].isalnum() or lit in self.words and hi < len(before) and \
                        before[hi].isalnum():
                    continue
            return True
        return False


def cued_at(pattern: re.Pattern[str], gate: Gate, text: str, start: int, last: int) -> re.Match[str] | None:
    """`pattern`'s match (cue, then its `number` group) whose number starts at `start`, looked for only when
    `gate` finds a cue literal in the `BACK` characters before it (not before `last`, the end of the previous
    replacement); an earlier cue's number (`EGN: 1; CUIT: 2`) is skipped."""
    lo = max(last, start - BACK)
    if not gate(text[lo:start].lower()):
        return None
    end = min(len(text), start + 40)
    m = pattern.search(text, lo, end)
    while m is not None and m.start("number") < start:
        m = pattern.search(text, m.start() + 1, end)
    return m if m is not None and m.start("number") == start else None


class AnchorLed:
    """`sub(repl, text)` for a cued pattern, tried only at the tokens `anchor` finds (a number's digits), with a
    gate literal before them. `lead(text, at)` moves a token's start back over the letters that begin its number
    (`V-`, `AB `), which the anchor's cheap digit scan does not take; each pass has its own."""

    def __init__(self, anchor: re.Pattern[str], pattern: re.Pattern[str], gate: Gate,
                 lead: Callable[[str, int], int]):
        self.anchor, self.pattern, self.gate, self.lead = anchor, pattern, gate, lead

    def sub(self, repl: Callable[[re.Match[str]], str], text: str) -> str:
        out, last = [], 0
        for token in self.anchor.finditer(text):
            start = self.lead(text, token.start())
            if start < last:
                continue
            m = cued_at(self.pattern, self.gate, text, start, last)
            if m is None or (replaced := repl(m)) == m.group():
                continue
            out += (text[last:m.start()], replaced)
            last = m.end()
        return "".join(out) + text[last:] if out else text
