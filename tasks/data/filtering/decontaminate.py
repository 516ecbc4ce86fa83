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

The index holds any named texts: instruct indexes the evaluate stage's prompts (unnamed: `eval prompt #i`),
clean's `decontamination` filter indexes eval prompts, SFT's held-out conversations and benchmark files, each
named by where it came from (`names`), with its own spec (`specs.clean.DecontaminationSpec`: 13-grams).
"""

from __future__ import annotations

import json
import re
from collections import Counter, defaultdict
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

_WORD = re.compile(r"\w+")
Gram = tuple[str, ...]


def words(text: str) -> list[str]:
    return _WORD.findall(text.lower())


def ngrams(tokens: list[str], n: int) -> set[Gram]:
    return {tuple(tokens[i:i + n]) for i in range(len(tokens) - n + 1)}


class OverlapRule(Protocol):
    """What the index needs of a spec (instruct's and clean's DecontaminationSpec both have it)."""

    ngram: int
    mode: str
    threshold: float


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
    """The eval prompts' (or any named texts') n-grams, queried with `check(text)`."""

    def __init__(self, prompts: list[str], spec: OverlapRule, names: list[str] | None = None):
        if names is not None and len(names) != len(prompts):
            raise ValueError(f"{len(names)} names for {len(prompts)} texts")
        self.spec = spec
        self.prompts = prompts
        self.names = names
        self.grams: dict[Gram, list[int]] = defaultdict(list)    # n-gram -> eval prompts holding it
        self.sizes: dict[int, int] = {}                          # eval prompt -> its distinct n-gram count
        self.n_of: dict[int, int] = {}                           # eval prompt -> its n-gram length
        self.lengths: set[int] = set()                           # n-gram lengths in the index
        self.whole: dict[Gram, int] = {}                         # full word sequence -> first eval prompt
        self.vocab: set[str] = set()                             # every word of an indexed n-gram
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
            self.vocab.update(tokens)
        self.whole_lengths = {len(w) for w in self.whole}

    def may_share(self, tokens: list[str]) -> bool:
        """False only when `tokens` hold no indexed n-gram: an n-gram's words are consecutive indexed words, so
        without a run of min(n) of them there is none (a byte search over a mask instead of building every
        n-gram of the text, at each indexed length)."""
        mask = bytes(map(self.vocab.__contains__, tokens))
        return b"\x01" * min(self.lengths) in mask

    def check(self, text: str, tokens: list[str] | None = None) -> Hit | None:
        """The strongest overlap of `text` with an eval prompt that drops it, or None. `tokens`: `words(text)`
        when the caller has them."""
        if not self.sizes:
            return None
        tokens = words(text) if tokens is None else tokens
        if not tokens:
            return None
        if len(tokens) in self.whole_lengths and tuple(tokens) in self.whole:
            return Hit(self.whole[tuple(tokens)], 1, 1, equal=True)
        if not self.may_share(tokens):
            return None
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

    def name(self, hit: Hit) -> str:
        """Where the overlapped text came from: its name, else `eval prompt #i`."""
        return self.names[hit.eval_index] if self.names is not None else f"eval prompt #{hit.eval_index}"

    def describe(self, what: str, hit: Hit) -> str:
        prompt = self.prompts[hit.eval_index]
        shown = prompt if len(prompt) <= 80 else prompt[:77] + "..."
        n = self.n_of[hit.eval_index]
        if hit.equal:
            return f"{what} is {self.name(hit)} word for word: {shown!r}"
        if n < self.spec.ngram:  # a short eval prompt is one n-gram: its whole word sequence
            return f"{what} contains the whole of {self.name(hit)} ({n} words): {shown!r}"
        return (f"{what} shares {hit.shared}/{hit.of} word {n}-grams ({hit.share:.0%}) with "
                f"{self.name(hit)}: {shown!r}")


# --- clean's benchmark texts --------------------------------------------------------------------------------

def heldout_texts(path: Path) -> list[tuple[str, str]]:
    """(name, text) of each held-out conversation in instruct's `heldout.jsonl` (its messages' contents joined:
    a pretraining document quoting the prompt or the reference answer leaks the held-out item either way)."""
    out = []
    for line in path.read_text(encoding="utf-8").splitlines():
        if line.strip():
            item = json.loads(line)
            text = "\n".join(m["content"] for m in item["messages"])
            out.append((f"{path.name}:{item['id']}", text))
    return out


def _strings(value: Any) -> list[str]:
    if isinstance(value, str):
        return [value]
    if isinstance(value, list):
        return [s for v in value for s in _strings(v)]
    if isinstance(value, dict):
        return [s for k in value for s in _strings(value[k])]
    return []


def benchmark_file_texts(path: Path, rel: str) -> list[tuple[str, str]]:
    """(name `rel:line`, text) of each item of a benchmark task file: `.jsonl` one JSON item a line (its `text`
    field, else every string in it, nested lists and objects too: question, choices and answer alike), `.txt`
    one item a non-blank line."""
    if path.suffix not in (".jsonl", ".txt"):
        raise ValueError(f"clean.decontamination.benchmark_files: {rel} is neither .jsonl nor .txt")
    out = []
    for i, line in enumerate(path.read_text(encoding="utf-8").splitlines(), start=1):
        if not line.strip():
            continue
        if path.suffix == ".txt":
            out.append((f"{rel}:{i}", line))
            continue
        item = json.loads(line)
        text = item["text"] if isinstance(item, dict) and isinstance(item.get("text"), str) else \
            "\n".join(_strings(item))
        out.append((f"{rel}:{i}", text))
    return out


def keep_indexable(texts: list[tuple[str, str]], min_words: int) -> tuple[list[tuple[str, str]], int]:
    """The texts of at least `min_words` words, and how many were shorter. A short text is one n-gram (its
    whole word sequence), and across a whole pretraining corpus a 5-word prompt such as `class Stack: def
    __init__(self):` is common code, not a leak (GPT-3 set its n-gram floor at 8 words for the same reason)."""
    kept = [(name, text) for name, text in texts if len(words(text)) >= min_words]
    return kept, len(texts) - len(kept)
