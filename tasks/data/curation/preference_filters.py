"""Curation of preference pairs with the filter protocol (tasks/data/filtering/filters.py): per-pair filters, prompt dedup,
and the length-bias report.

Per pair, in order (the first drop names the reason): `empty` (a blank prompt or answer), `identical` (chosen
equals rejected once whitespace is folded: no preference to learn), `length` (prompt or answer over the caps),
`decontamination` (prompt or an answer shares word n-grams with an evaluate prompt or a benchmark item: the eval
would measure memory). Then over all sources: `exact_duplicate` and `near_duplicate` of the *prompt* (the same
question twice with other answers would weigh it twice; the first pair in source order stays).

Length bias: DPO is known to learn "longer is better" when chosen answers are longer (Park et al. 2024), so the
report gives, per source and rejected kind, the chosen/rejected word-count ratio of means, the median per-pair
ratio and the share of pairs whose chosen answer is the longer one.
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass
from typing import Any, Sequence

import numpy as np

from specs.clean import DedupSpec
from specs.prefer import PairFilterSpec
from tasks.data.dedup import minhash
from tasks.data.filtering.decontaminate import EvalIndex
from tasks.data.filtering.filters import Filter, Verdict
from tasks.data.cleanup.normalize import exact_key
from tasks.data.curation.preference import Pair


def prompt_text(pair: Pair) -> str:
    return "\n".join(m["content"] for m in pair.prompt)


@dataclass(frozen=True)
class EmptyFilter:
    min_chars: int
    name: str = "empty"

    def __call__(self, pair: Pair) -> Verdict:
        for what, text in (("prompt", prompt_text(pair)), ("chosen", pair.chosen), ("rejected", pair.rejected)):
            if len(text.strip()) < self.min_chars:
                return Verdict(False, f"{what} is empty (fewer than {self.min_chars} non-blank characters)")
        return Verdict(True)


@dataclass(frozen=True)
class IdenticalFilter:
    name: str = "identical"

    def __call__(self, pair: Pair) -> Verdict:
        same = " ".join(pair.chosen.split()) == " ".join(pair.rejected.split())
        return Verdict(not same, "chosen equals rejected (no preference to learn)" if same else None)


@dataclass(frozen=True)
class LengthFilter:
    spec: PairFilterSpec
    name: str = "length"

    def __call__(self, pair: Pair) -> Verdict:
        n = len(prompt_text(pair))
        if n > self.spec.max_prompt_chars:
            return Verdict(False, f"prompt of {n} characters > {self.spec.max_prompt_chars}", {"chars": n})
        for what, text in (("chosen", pair.chosen), ("rejected", pair.rejected)):
            if len(text) > self.spec.max_answer_chars:
                return Verdict(False, f"{what} of {len(text)} characters > {self.spec.max_answer_chars}",
                               {"chars": len(text)})
        return Verdict(True)


@dataclass(frozen=True)
class DecontaminationFilter:
    index: EvalIndex
    name: str = "decontamination"

    def __call__(self, pair: Pair) -> Verdict:
        for what, text in (("prompt", prompt_text(pair)), ("chosen", pair.chosen), ("rejected", pair.rejected)):
            if hit := self.index.check(text):
                return Verdict(False, self.index.describe(what, hit), {"shared": float(hit.shared)})
        return Verdict(True)


def pair_filters(spec: PairFilterSpec, index: EvalIndex | None) -> list[Filter]:
    filters: list[Filter] = [EmptyFilter(spec.min_chars), IdenticalFilter(), LengthFilter(spec)]
    return filters + ([DecontaminationFilter(index)] if index is not None else [])


def dedup_prompts(pairs: list[Pair], spec: DedupSpec, seed: int) -> tuple[list[Pair], list[tuple[Pair, str, str]],
                                                                        dict[str, Any]]:
    """(kept, [(dropped pair, step, reason)], report): exact then near duplicates of the prompt text; the earlier
    pair (source order) stays."""
    dropped: list[tuple[Pair, str, str]] = []
    report: dict[str, Any] = {"exact_dropped": 0, "near_dropped": 0}
    if spec.exact:
        first: dict[str, Pair] = {}
        for p in pairs:
            key = exact_key(prompt_text(p))
            if key in first:
                dropped.append((p, "exact_duplicate", f"prompt asked before by {first[key].id}"))
            else:
                first[key] = p
        report["exact_dropped"] = len(dropped)
        pairs = list(first.values())
    if spec.near and len(pairs) >= 2:
        texts = [prompt_text(p) for p in pairs]
        ids = [f"{k:09d}" for k in range(len(pairs))]  # position ids: the earlier pair wins a tie of scores
        sigs = minhash.signatures(texts, spec, seed)                               # [n, num_perm]
        sets = (lambda batch: minhash.shingle_sets([texts[int(i)] for i in batch], spec)) if spec.verify else None
        result = minhash.near_duplicates(ids, sigs, [0.0] * len(pairs), spec, shingle_sets_fn=sets)
        gone = {int(d): (int(k), sim) for d, k, sim in result.dropped}
        for d, (k, sim) in sorted(gone.items()):
            dropped.append((pairs[d], "near_duplicate",
                            f"prompt near duplicate of {pairs[k].id}'s (Jaccard {sim:.3f} ≥ {spec.threshold})"))
        report["near_dropped"] = len(gone)
        pairs = [p for k, p in enumerate(pairs) if k not in gone]
    return pairs, dropped, report


def _bias(pairs: Sequence[Pair]) -> dict[str, Any]:
    c = np.array([len(p.chosen.split()) for p in pairs], dtype=np.float64)
    r = np.array([len(p.rejected.split()) for p in pairs], dtype=np.float64)
    return {"pairs": len(pairs), "chosen_words_mean": round(float(c.mean()), 3),
            "rejected_words_mean": round(float(r.mean()), 3),
            "ratio_of_means": round(float(c.mean() / max(r.mean(), 1e-9)), 4),
            "median_ratio": round(float(np.median(c / np.maximum(r, 1))), 4),
            "chosen_longer_share": round(float((c > r).mean()), 4)}


def length_bias(pairs: Sequence[Pair]) -> dict[str, Any]:
    """The length-bias report: overall, per source and per rejected kind (module docstring)."""
    if not pairs:
        return {"pairs": 0}
    groups: dict[str, dict[str, list[Pair]]] = {"by_source": defaultdict(list), "by_kind": defaultdict(list)}
    for p in pairs:
        groups["by_source"][p.source].append(p)
        groups["by_kind"][p.kind].append(p)
    return {**_bias(pairs), **{g: {k: _bias(v) for k, v in sorted(members.items())}
                               for g, members in groups.items()}}
