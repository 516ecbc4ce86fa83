"""A pass's `re.sub` that takes, after each value it replaced, the value right after it in the same pass
(`Chained`): as the next round would see it, after the placeholder.

Many passes skip a candidate that follows a digit or a comma (a longer number, a CSV row's field): in a run of
values glued or one separator apart (`+1 (478) 952-2092+1 (478) ...`, `4111111111111111,4111...`), each is taken
only once its neighbour became a placeholder, one a round, and `pii.MAX_ROUNDS` stopped with the rest of the run
left in the text (scrubbing again changed it). The next value is matched in a window of the output's last
`CONTEXT` characters (the placeholder last; more than any validator reads before a match) and `AHEAD` of the
text; one that reaches the window's end, or that `defer` says an earlier pass of the round would take, is left
to the next round, as before.
"""

from __future__ import annotations

import re
from typing import Callable

CONTEXT = 64        # more than a validator reads before a match (an IBAN-shaped run: 48; a phone cue: 40)
AHEAD = 80          # more than a value, its extension and the look-ahead after it


class Chained:
    """`sub(repl, text)` like `pattern`'s, where a value that was replaced also takes the one right after it
    (glued, or one of `separators` between), and that one the next; `defer(window, at)`: whether the value at
    `at` of a window belongs to an earlier pass of the round."""

    def __init__(self, pattern: re.Pattern[str], separators: str = "", defer: Callable[[str, int], bool] | None = None):
        self.pattern, self.separators, self.defer = pattern, separators, defer

    def sub(self, replace: Callable[[re.Match[str]], str], text: str) -> str:
        pieces: list[str] = []
        last, tail = 0, ""                      # tail: the output's last CONTEXT characters
        for m in self.pattern.finditer(text):
            if m.start() < last:
                continue                        # inside a value a chain took
            out = replace(m)
            pieces += [text[last:m.start()], out]
            tail = (tail + text[max(last, m.start() - CONTEXT):m.start()] + out)[-CONTEXT:]
            last = m.end()
            while out != m.group() and (found := self.next_value(text, last, tail)) is not None and \
                    (out := replace(found[0])) != found[0].group():
                n, offset = found
                gap = text[last:n.start() + offset]
                pieces += [gap, out]
                tail, last, m = (tail + gap + out)[-CONTEXT:], n.end() + offset, n
        pieces.append(text[last:])
        return "".join(pieces)

    def next_value(self, text: str, at: int, before: str) -> tuple[re.Match[str], int] | None:
        """The value right after `at` (a separator at most between), matched after `before`: the match in the
        window and the offset from its positions to the text's; None where the next round decides."""
        window = before + text[at:at + AHEAD]
        start = len(before) + (1 if text[at:at + 1] and text[at] in self.separators else 0)
        n = self.pattern.match(window, start)
        if n is None or n.end() + 2 >= len(window) and at + AHEAD < len(text):
            return None
        if self.defer is not None and self.defer(window, start):
            return None
        return n, at - len(before)
