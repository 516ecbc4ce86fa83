"""Decontamination: word n-gram overlap between training conversations and the evaluation prompts.

Words are lowercase `\\w+` runs, so punctuation and case never hide an overlap. Each eval prompt contributes its
distinct n-grams; one shorter than n words contributes its whole word sequence as a single n-gram (so a short
eval prompt that appears verbatim inside a response still counts). A text (a conversation's prompt or
response) is compared with every eval prompt:

- `mode: any` drops it when they share a single n-gram;
- `mode: fraction` drops it when the shared n-grams are ≥ `threshold` of the n-grams of the *smaller* of the
  two. Containment either way: a long answer that quotes a whole eval prompt is as contaminated as a
  paraphrase of it, and dividing by the text's own n-grams alone would let the first slip through.

A text shorter than n words has no n-grams; it is dropped only when it equals an eval prompt word for word.
The index maps each n-gram to the eval prompts holding it, so a check costs O(words of the text).
"""

from __future__ import annotations

import re
from collections import Counter, defaultdict
from dataclasses import dataclass

from specs.instruct import DecontaminationSpec

_WORD = re.compile(r"\w+")
Gram = tuple[str, ...]


def words(text: str) -> list[str]:
    return _WORD.findall(text.lower())


def ngrams(tokens: list[str], n: int) -> set[Gram]:
    return {tuple(tokens[i:i + n]) for i in range(len(tokens) - n + 1)}


@dataclass(frozen=True)
class Hit:
    """An overlap strong enough to drop: which eval prompt, how many n-grams shared out of how many."""

    eval_index: int
    shared: int
    of: int
    equal: bool = False      # the text is the eval prompt, word for word

    @property
    def share(self) -> float:
        return self.shared / self.of


class EvalIndex:
    """The eval prompts' n-grams, queried with `check(text)`."""

    def __init__(self, prompts: list[str], spec: DecontaminationSpec):
        self.spec = spec
        self.prompts = prompts
        self.grams: dict[Gram, list[int]] = defaultdict(list)    # n-gram -> eval prompts holding it
        self.sizes: dict[int, int] = {}                          # eval prompt -> its distinct n-gram count
        self.n_of: dict[int, int] = {}                           # eval prompt -> its n-gram length
        self.lengths: set[int] = set()                           # n-gram lengths in the index
        self.whole: dict[Gram, int] = {}                         # full word sequence -> first eval prompt
        for e, prompt in enumerate(prompts):
            tokens = words(prompt)
            if not tokens:
                continue  # an empty eval prompt cannot be leaked
            self.whole.setdefault(tuple(tokens), e)
            n = min(spec.ngram, len(tokens))
            grams = ngrams(tokens, n)
            self.lengths.add(n)
            self.n_of[e] = n
            self.sizes[e] = len(grams)
            for g in sorted(grams):
                self.grams[g].append(e)

    def check(self, text: str) -> Hit | None:
        """The strongest overlap of `text` with an eval prompt that drops it, or None."""
        tokens = words(text)
        if not tokens or not self.sizes:
            return None
        if tuple(tokens) in self.whole:
            return Hit(self.whole[tuple(tokens)], 1, 1, equal=True)
        shared: Counter[int] = Counter()
        own: dict[int, int] = {}                                  # text's n-gram count at each length
        for n in sorted(self.lengths):
            grams = ngrams(tokens, n)
            own[n] = len(grams)
            for g in grams:
                shared.update(self.grams.get(g, ()))
        best: Hit | None = None
        for e, count in sorted(shared.items()):
            hit = Hit(e, count, min(own[self.n_of[e]], self.sizes[e]))
            drops = self.spec.mode == "any" or hit.share >= self.spec.threshold
            if drops and (best is None or hit.share > best.share):
                best = hit
        return best

    def describe(self, what: str, hit: Hit) -> str:
        prompt = self.prompts[hit.eval_index]
        shown = prompt if len(prompt) <= 80 else prompt[:77] + "..."
        n = self.n_of[hit.eval_index]
        if hit.equal:
            return f"{what} is eval prompt #{hit.eval_index} word for word: {shown!r}"
        if n < self.spec.ngram:  # a short eval prompt is one n-gram: its whole word sequence
            return f"{what} contains the whole of eval prompt #{hit.eval_index} ({n} words): {shown!r}"
        return (f"{what} shares {hit.shared}/{hit.of} word {n}-grams ({hit.share:.0%}) with eval "
                f"prompt #{hit.eval_index}: {shown!r}")
