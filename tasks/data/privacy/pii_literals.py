"""Literal tests that a scrubbing's passes make again and again, answered from memory once a literal was found
absent (`tasks.data.privacy.pii` opens `remembered_absence` around each `scrub_pii` call).

A scrubbing only replaces spans by placeholders, so a literal absent from a text stays absent from every later
pass's and round's text, unless it can overlap a placeholder; the passes test ~100 literals a round, each a scan of
the whole text (~0.6 ms per MB), so remembering the absent ones saves most of them.
"""

from __future__ import annotations

from contextlib import contextmanager
from contextvars import ContextVar
from functools import lru_cache
from typing import Callable, Iterable, Iterator

# (literals found absent, placeholders) of the `scrub_pii` call under way, or None outside one.
_ABSENT: ContextVar[tuple[set[str], tuple[str, ...]] | None] = ContextVar("pii_absent_literals", default=None)


@contextmanager
def remembered_absence(placeholders: Iterable[str]) -> Iterator[None]:
    """Within it, `literal_in` remembers the literals it found absent. A scrubbing only replaces spans by
    `placeholders`, so a literal absent from a text stays absent from every later pass's and round's text,
    unless it can overlap a placeholder (holds `<`/`>` or lies inside one, `SECRET`): those are not remembered.
    The passes test ~100 literals per round, each a scan of the whole text (~0.6 ms per MB)."""
    token = _ABSENT.set((set(), tuple(placeholders)))
    try:
        yield
    finally:
        _ABSENT.reset(token)


def literal_in(literal: str, text: str) -> bool:
    """`literal in text`, answered from memory for a literal found absent earlier in the same scrubbing."""
    memo = _ABSENT.get()
    if memo is None:
        return literal in text
    absent, placeholders = memo
    if literal in absent:
        return False
    if literal in text:
        return True
    if _rememberable(literal, placeholders, False):
        absent.add(literal)
    return False


def folded_in(gate: str, folded: Callable[[], bytes]) -> bool:
    """`gate` (lower-case ASCII) in `folded()` (a text's bytes with ASCII lowered: any case), remembered like
    `literal_in` when absent; a gate that a placeholder holds in any case (`dob` in `<DOB>`) is not remembered."""
    memo = _ABSENT.get()
    if memo is not None and "\0folded " + gate in memo[0]:
        return False
    if gate.encode("ascii") in folded():
        return True
    if memo is not None and _rememberable(gate, memo[1], True):
        memo[0].add("\0folded " + gate)
    return False


@lru_cache(maxsize=4096)
def _rememberable(literal: str, placeholders: tuple[str, ...], any_case: bool) -> bool:
    """Whether a literal absent from a text stays absent once placeholders are written into it. Asked ~240 times
    a scrubbing with the same few hundred literals: answered once each (the test made 0.3 ms of a short text's
    0.6 ms)."""
    if "<" in literal or ">" in literal:
        return False
    return not any(literal in (p.lower() if any_case else p) for p in placeholders)
