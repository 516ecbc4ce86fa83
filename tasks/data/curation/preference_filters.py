"""Curation of preference pairs with the filter protocol (tasks/data/filtering/filters.py): per-pair filters, prompt dedup,
and the length-bias report.

Per pair, in order (the first drop names the reason): `empty` (a blank prompt or answer), `identical` (chosen
equals rejected once whitespace is folded: no preference to learn), `length` (prompt or answer over the caps),
`decontamination` (prompt or an answer shares word n-grams with an evaluate prompt or a benchmark item: the eval
would measure memory; the benchmark files' items are read by `benchmark_texts`, below). Then over all sources:
`exact_duplicate` and `near_duplicate` of the *prompt* (the same question twice with other answers would weigh it
twice; the first pair in source order stays).

Length bias: DPO is known to learn "longer is better" when chosen answers are longer (Park et al. 2024), so the
report gives, per source and rejected kind, the chosen/rejected word-count ratio of means, the median per-pair
ratio and the share of pairs whose chosen answer is the longer one.
"""

from __future__ import annotations

import json
import os
import stat
from collections import defaultdict
from dataclasses import dataclass
from pathlib import Path
from typing import Any, BinaryIO, Sequence

import numpy as np

from specs.clean import DedupSpec
from specs.prefer import PairFilterSpec
from tasks.data.dedup import minhash
from tasks.data.filtering.decontaminate import EvalIndex
from tasks.data.filtering.filters import Filter, Verdict
from tasks.data.formats.streams import MAX_JSON_VALUES, json_values_over, too_many_values
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


# ------------------------------------------------------------------------------------------ benchmark files
# The items of prefer_data's decontamination `benchmark_files` (the texts `DecontaminationFilter`'s index holds),
# read a line at a time with every refusal naming the file (and the line). A benchmark file is a user's path like
# any source's, and a hostile one used to stop the stage with a bare traceback naming no file: a line that is not
# JSON (JSONDecodeError), `[[[...` nested 200k deep (RecursionError), bytes that are not UTF-8
# (UnicodeDecodeError); a link to /dev/zero was read whole until MemoryError and a FIFO blocked the stage forever
# (the file was read with `read_text`). What an item is stays the clean stage's rule
# (tasks/data/filtering/decontaminate.py): `.jsonl` one JSON item a line (its `text` field, else every string in
# it, nested lists and objects too), `.txt` one item a non-blank line.
BENCHMARK_KNOB = "prefer_data.benchmark_files"
# Benchmark sets are small (MMLU's test split is ~8 MB of jsonl) and all of their text is held in the n-gram
# index anyway: a file past this is a mistake (a corpus named by accident, a device), refused before reading.
BENCHMARK_MAX_BYTES = 512 << 20
# One benchmark item is a question with its choices, kilobytes; a line past this is not one.
BENCHMARK_LINE_BYTES = 16 << 20


class BenchmarkFileError(ValueError):
    """A benchmark file that cannot be read as one (a ValueError: the stage runner reports it without a
    traceback)."""


def _all_strings(value: Any) -> list[str]:
    """Every string in `value`, depth first in order; a stack, not recursion, so no nesting depth can crash it."""
    out, stack = [], [value]
    while stack:
        v = stack.pop()
        if isinstance(v, str):
            out.append(v)
        elif isinstance(v, list):
            stack.extend(reversed(v))
        elif isinstance(v, dict):
            stack.extend(reversed(list(v.values())))
    return out


def _open_regular(path: Path, rel: str) -> BinaryIO:
    """`path` opened for reading if it is a regular file of at most BENCHMARK_MAX_BYTES. O_NONBLOCK: opening a
    FIFO for reading otherwise waits for a writer forever; the type is checked on the opened descriptor, so a file
    swapped after a check cannot slip through."""
    try:
        fd = os.open(path, os.O_RDONLY | getattr(os, "O_NONBLOCK", 0))
    except OSError as exc:
        raise BenchmarkFileError(f"{BENCHMARK_KNOB}: {rel}: cannot open it "
                                 f"({exc.strerror or type(exc).__name__})") from None
    info = os.fstat(fd)
    if not stat.S_ISREG(info.st_mode):
        os.close(fd)
        raise BenchmarkFileError(f"{BENCHMARK_KNOB}: {rel} is not a regular file (a device, FIFO, socket or "
                                 f"folder); name the benchmark's .jsonl or .txt file")
    if info.st_size > BENCHMARK_MAX_BYTES:
        os.close(fd)
        raise BenchmarkFileError(f"{BENCHMARK_KNOB}: {rel} holds {info.st_size:,} bytes, over the "
                                 f"{BENCHMARK_MAX_BYTES:,}-byte cap for a benchmark file; name the benchmark's "
                                 f"own file")
    os.set_blocking(fd, True)   # a regular file: blocking reads are the ordinary ones
    return os.fdopen(fd, "rb")


def _benchmark_item(raw: bytes, suffix: str, where: str) -> str | None:
    """The text of one line (None for a blank line), or a BenchmarkFileError naming `where` (file:line)."""
    try:
        line = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise BenchmarkFileError(f"{BENCHMARK_KNOB}: {where}: not UTF-8 ({exc.reason} at byte "
                                 f"{exc.start})") from None
    if not line.strip():
        return None
    if suffix == ".txt":
        return line
    if (values := json_values_over(raw, MAX_JSON_VALUES)) is not None:
        raise BenchmarkFileError(f"{BENCHMARK_KNOB}: {where}: {too_many_values(values)}")
    try:
        item = json.loads(line)
    except RecursionError:
        raise BenchmarkFileError(f"{BENCHMARK_KNOB}: {where}: invalid JSON (nested too deep)") from None
    except ValueError as exc:   # JSONDecodeError, and an integer over int_max_str_digits
        raise BenchmarkFileError(f"{BENCHMARK_KNOB}: {where}: invalid JSON ({exc})"[:500]) from None
    return item["text"] if isinstance(item, dict) and isinstance(item.get("text"), str) else \
        "\n".join(_all_strings(item))


def benchmark_texts(root: Path, rel: str) -> list[tuple[str, str]]:
    """(name `rel:line`, text) of each item of the benchmark file `rel` (relative to `root`, or absolute); a
    BenchmarkFileError naming the file, and the line where there is one, for anything that is not one."""
    path = root / rel
    if path.suffix not in (".jsonl", ".txt"):
        raise BenchmarkFileError(f"{BENCHMARK_KNOB}: {rel} is neither .jsonl nor .txt")
    out: list[tuple[str, str]] = []
    read = 0
    with _open_regular(path, rel) as fh:
        for number, raw in enumerate(iter(lambda: fh.readline(BENCHMARK_LINE_BYTES + 1), b""), start=1):
            read += len(raw)
            if read > BENCHMARK_MAX_BYTES:   # it grew after it was opened: still never read past the cap
                raise BenchmarkFileError(f"{BENCHMARK_KNOB}: {rel} grew past the {BENCHMARK_MAX_BYTES:,}-byte "
                                         f"cap while read")
            if len(raw) > BENCHMARK_LINE_BYTES and not raw.endswith(b"\n"):
                raise BenchmarkFileError(f"{BENCHMARK_KNOB}: {rel}:{number}: line over the "
                                         f"{BENCHMARK_LINE_BYTES:,}-byte cap for one benchmark item")
            text = _benchmark_item(raw.removesuffix(b"\n").removesuffix(b"\r"), path.suffix, f"{rel}:{number}")
            if text is not None:
                out.append((f"{rel}:{number}", text))
    return out
