"""Stage `instruct`: curate instruction conversations for SFT.

Funnel, per conversation, first failure wins: `parse` (unreadable line) -> `format` (roles/turns) -> `length`
-> `echo` -> `symbols` -> `language` -> `decontamination` (n-gram overlap with the evaluate stage's prompts)
-> then over all sources together: `exact_duplicate` (normalized prompt + response) -> `near_duplicate`
(MinHash-LSH, verified by exact shingle Jaccard; the best-scored conversation of a cluster stays) ->
`min_score`. The survivors are split: a seeded held-out slice (stratified by source) and the training
candidates, which are ranked by the quality score (`quality_score` in tasks/data/curation/instruct_filters.py) and capped at
`max_train_pairs`; the rest are ledgered as `quality_cap`. Since dedup ran over the whole pool first, no
held-out conversation duplicates (exactly or nearly) a training one.

Outputs (data/instruct/): `train.jsonl` (ranked best first) and `heldout.jsonl` (by id), one conversation per
line `{"id", "source", "messages", "score"}`; `dropped.parquet` (id, source, filter, reason, excerpt);
`report.json` (funnel per source and filter, dedup and decontamination details). Every read conversation is
in exactly one of them (checked before returning). All choices are orders of blake2b hashes of
(purpose, seed, id), so reruns are byte-identical.
"""

from __future__ import annotations

import hashlib
import json
import logging
from collections import Counter, defaultdict
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pyarrow as pa

from specs.instruct import EmbeddedInstructSource, FilesInstructSource, InstructJob, InstructSpec
from specs.results import StageResult
from tasks.core.files import atomic_path, write_json_atomic, write_text_atomic
from tasks.core.runner import StagePaths
from tasks.data.dedup import minhash
from tasks.data.filtering.decontaminate import EvalIndex
from tasks.data.filtering.filters import first_drop, run_filters
from tasks.data.curation.instruct_filters import (FILTER_NAMES, SCORE_WEIGHTS, ScoreFilter, instruct_filters,
                                         quality_score)
from tasks.data.curation.streaming import LowestN
from tasks.data.curation.instructions import EXCERPT_CHARS, Conversation, Rejected, Turns, check_format, read_source
from tasks.data.cleanup.normalize import exact_key
from tasks.data.records import write_table

log = logging.getLogger("forgeline.instruct")
STEPS = ("parse", "format", *FILTER_NAMES, "decontamination", "exact_duplicate",
         "near_duplicate", "min_score", "heldout", "quality_cap")
Drop = Callable[[str, str, str, str, str], None]     # (id, source, filter, reason, text) -> ledger row
LEDGER_SCHEMA = pa.schema([("id", pa.string()), ("source", pa.string()), ("filter", pa.string()),
                           ("reason", pa.string()), ("excerpt", pa.string())])


@dataclass
class Item:
    """A conversation that passed the per-conversation filters."""

    id: str
    source: str
    turns: Turns
    score: float

    def text(self) -> str:
        return self.turns.prompt + "\n" + self.turns.response

    def record(self) -> dict[str, Any]:
        return {"id": self.id, "source": self.source, "messages": self.turns.messages, "score": self.score}


def hash_unit(*parts: object) -> float:
    """A stable pseudo-random number in [0, 1) from `parts` (same on every machine and Python run)."""
    digest = hashlib.blake2b("\x1f".join(map(str, parts)).encode(), digest_size=8, person=b"forgeline-inst").digest()
    return int.from_bytes(digest, "big") / 2**64


def run(spec: InstructJob, paths: StagePaths) -> StageResult:
    cfg = spec.instruct
    paths.out.mkdir(parents=True, exist_ok=True)
    ledger: list[dict[str, Any]] = []
    stats: dict[str, Counter] = {s.name: Counter() for s in cfg.sources}

    def drop(cid: str, source: str, step: str, reason: str, excerpt: str) -> None:
        ledger.append({"id": cid, "source": source, "filter": step, "reason": reason,
                       "excerpt": excerpt[:EXCERPT_CHARS]})
        stats[source][step] += 1

    eval_hits: Counter[int] = Counter()    # eval prompt index -> conversations dropped for overlapping it
    pool = _read_and_filter(cfg, spec.eval_prompts, paths, stats, drop, eval_hits)
    pool, dedup = _deduplicate(pool, cfg, paths.seed, drop)
    floor = ScoreFilter(cfg.min_score)
    low = {i.id: v for i in pool if not (v := floor(i.turns)).keep}
    for item in pool:
        if item.id in low:
            drop(item.id, item.source, floor.name, low[item.id].reason, item.text())
    pool = [i for i in pool if i.id not in low]
    heldout, candidates = _split_heldout(pool, cfg, paths.seed)
    train = sorted(candidates, key=lambda i: (-i.score, i.id))
    cap = len(train) if cfg.max_train_pairs is None else cfg.max_train_pairs
    cutoff = train[cap - 1].score if 0 < cap <= len(train) else None
    for rank, item in enumerate(train[cap:], start=cap + 1):
        drop(item.id, item.source, "quality_cap", f"below quality cap: score {item.score:.3f} ranks {rank} of "
             f"{len(train)}; max_train_pairs = {cap} (last kept scores {cutoff:.3f})", item.text())
    train = train[:cap]
    for item in heldout:
        stats[item.source]["heldout_kept"] += 1
    for item in train:
        stats[item.source]["train"] += 1

    _write_jsonl(paths.out / "train.jsonl", train)
    _write_jsonl(paths.out / "heldout.jsonl", heldout)
    order = {s: k for k, s in enumerate(STEPS)}
    ledger.sort(key=lambda r: (order[r["filter"]], r["source"], r["id"]))
    with atomic_path(paths.out / "dropped.parquet") as tmp:
        write_table(ledger, LEDGER_SCHEMA, tmp)

    funnels, counts = _funnels(cfg, stats), _counts(cfg, stats, len(ledger))
    decontam = {"eval_prompts": len(spec.eval_prompts), "dropped": sum(eval_hits.values()),
                "dropped_by_eval_prompt": {str(k): v for k, v in sorted(eval_hits.items())}}
    report = {**counts, "funnel": funnels, "dedup": dedup, "decontamination": decontam,
              "quality": {"weights": SCORE_WEIGHTS, "cutoff_score": cutoff,
                          "train_mean_score": _mean([i.score for i in train]),
                          "heldout_mean_score": _mean([i.score for i in heldout])}}
    write_json_atomic(paths.out / "report.json", report)
    log.info("instruct: %d read, %d train, %d held out, %d dropped", counts["read"], counts["train"],
             counts["heldout"], counts["dropped"])
    return StageResult(stage="instruct", counts=counts, summary=_summary(counts, funnels),
                       table=_table(counts, funnels))


def _read_and_filter(cfg: InstructSpec, eval_prompts: list[str], paths: StagePaths,
                     stats: dict[str, Counter], drop: Drop, eval_hits: Counter) -> list[Item]:
    """Read every source (capped at max_pairs by a seeded hash order) and apply the per-conversation filters as
    the conversations stream in: only the pool (what passed) is held, never every conversation read."""
    index = EvalIndex(eval_prompts, cfg.decontamination)
    checks = instruct_filters(cfg.filters)
    pool: list[Item] = []
    for src in cfg.sources:
        for conv in _taken(src, paths, stats[src.name], drop):
            turns = check_format(conv.messages, cfg.filters)
            if isinstance(turns, str):
                drop(conv.id, conv.source, "format", turns, conv.excerpt())
                continue
            dropped = first_drop(run_filters(checks, turns))
            reason = (dropped[0], dropped[1].reason) if dropped else None
            if reason is None and cfg.decontamination.enabled:
                for what, text in (("prompt", turns.prompt), ("response", turns.response)):
                    if hit := index.check(text):
                        reason = ("decontamination", index.describe(what, hit))
                        eval_hits[hit.eval_index] += 1
                        break
            if reason is not None:  # not scored: a 50 MB answer dropped for `length` took 19 s to score
                drop(conv.id, conv.source, reason[0], reason[1], _excerpt(turns))
            else:
                pool.append(Item(conv.id, conv.source, turns, quality_score(turns)))
    return pool


def _taken(src: EmbeddedInstructSource | FilesInstructSource, paths: StagePaths, c: Counter,
           drop: Drop) -> Iterator[Conversation]:
    """The conversations of `src` that enter the funnel, unreadable lines and repeated ids ledgered as `parse`.
    Without `max_pairs` each is yielded as read; with it the `max_pairs` of lowest hash_unit("take", seed, id)
    (then id), held in a heap of that size while reading (the others are `not_taken`), yielded by id (in read
    order when the source holds no more than `max_pairs`, as before)."""
    seen: set[str] = set()
    sample: LowestN[Conversation] | None = None if src.max_pairs is None else LowestN(src.max_pairs)
    for x in read_source(src, paths.root):
        if isinstance(x, Conversation) and x.id in seen:  # ids key every later decision: never ambiguous
            x = Rejected(x.id, x.source, f"{x.origin}: duplicate id {x.id!r}", x.excerpt())
        if isinstance(x, Rejected):
            c["read"] += 1
            drop(x.id, x.source, "parse", x.reason, x.excerpt)
            continue
        seen.add(x.id)
        c["available"] += 1
        if sample is None:
            c["read"] += 1
            yield x
        else:
            sample.offer((hash_unit("take", paths.seed, x.id), x.id), x)
    if sample is not None:
        taken = sample.taken()
        c["not_taken"], c["read"] = sample.dropped, c["read"] + len(taken)
        yield from sorted(taken, key=lambda conv: conv.id) if sample.dropped else taken


def _excerpt(turns: Turns) -> str:
    """The start of prompt + "\n" + response (the ledger keeps EXCERPT_CHARS), without joining two huge texts."""
    return (turns.prompt[:EXCERPT_CHARS] + "\n" + turns.response[:EXCERPT_CHARS])[:EXCERPT_CHARS]


def _deduplicate(pool: list[Item], cfg: InstructSpec, seed: int, drop: Drop) -> tuple[list[Item], dict[str, Any]]:
    """Exact, then near duplicates over all sources; the best score (then smallest id) of each group stays."""
    best = lambda i: (-i.score, i.id)
    report: dict[str, Any] = {"exact_dropped": 0, "near_dropped": 0}
    if cfg.dedup.exact:
        groups: dict[str, list[Item]] = defaultdict(list)
        for item in pool:
            groups[exact_key(item.text())].append(item)
        gone: set[str] = set()
        for members in groups.values():
            keeper, *rest = sorted(members, key=best)
            for item in rest:
                drop(item.id, item.source, "exact_duplicate",
                     f"exact duplicate of {keeper.id} (normalized prompt + response)", item.text())
                gone.add(item.id)
        report["exact_dropped"] = len(gone)
        pool = [i for i in pool if i.id not in gone]
    if cfg.dedup.near and len(pool) >= 2:
        text_of = {i.id: i.text() for i in pool}
        ids = [i.id for i in pool]
        sigs = minhash.signatures([text_of[i] for i in ids], cfg.dedup, seed)    # [n, num_perm]
        exact_sets = (lambda batch: minhash.shingle_sets([text_of[i] for i in batch], cfg.dedup))
        result = minhash.near_duplicates(ids, sigs, [i.score for i in pool], cfg.dedup,
                                         shingle_sets_fn=exact_sets if cfg.dedup.verify else None)
        by_id = {i.id: i for i in pool}
        for dropped_id, kept_id, sim in result.dropped:
            item = by_id[dropped_id]
            drop(item.id, item.source, "near_duplicate",
                 f"near duplicate of {kept_id} (Jaccard {sim:.3f}, threshold {cfg.dedup.threshold})", item.text())
        gone = {d for d, _, _ in result.dropped}
        pool = [i for i in pool if i.id not in gone]
        report.update({"near_dropped": len(gone), "bands": result.bands, "rows": result.rows,
                       "candidate_pairs": result.candidate_pairs, "verified_pairs": result.verified_pairs,
                       "clusters": result.clusters})
    return pool, report


def _split_heldout(pool: list[Item], cfg: InstructSpec, seed: int) -> tuple[list[Item], list[Item]]:
    """A seeded held-out slice, its size split over sources by largest remainder (each source's share of the
    pool), each source's picks being its lowest hash_unit("heldout", seed, id). Returns (heldout, rest)."""
    total = cfg.heldout_count if cfg.heldout_count is not None else round(cfg.heldout_fraction * len(pool))
    total = min(total, len(pool))
    by_source: dict[str, list[Item]] = defaultdict(list)
    for item in pool:
        by_source[item.source].append(item)
    quota = {s: total * len(items) / len(pool) for s, items in by_source.items()} if pool else {}
    take = {s: int(q) for s, q in quota.items()}
    for s in sorted(quota, key=lambda s: (-(quota[s] - take[s]), s))[: total - sum(take.values())]:
        take[s] += 1
    held: set[str] = set()
    for s, items in by_source.items():
        ranked = sorted(items, key=lambda i: (hash_unit("heldout", seed, i.id), i.id))
        held.update(i.id for i in ranked[: take[s]])
    heldout = sorted((i for i in pool if i.id in held), key=lambda i: i.id)
    return heldout, [i for i in pool if i.id not in held]


def _write_jsonl(path: Path, items: list[Item]) -> None:
    write_text_atomic(path, "".join(json.dumps(i.record(), ensure_ascii=False) + "\n" for i in items))


def _mean(values: list[float]) -> float | None:
    return round(sum(values) / len(values), 6) if values else None


def _funnels(cfg: InstructSpec, stats: dict[str, Counter]) -> dict[str, list[dict[str, Any]]]:
    """Per source, in step order: how many left at each step (dropped, or moved to held-out) and how many
    remain after it. Checks the conservation law: what remains at the end is exactly the training set."""
    funnels = {}
    for src in cfg.sources:
        c, rows = stats[src.name], []
        remaining = c["read"]
        for step in STEPS:
            moved = c["heldout_kept"] if step == "heldout" else c[step]
            remaining -= moved
            rows.append({"step": step, "left": moved, "remaining": remaining})
        if remaining != c["train"]:  # read = train + heldout + dropped
            raise AssertionError(f"instruct: source {src.name} lost conversations: {remaining} != {c['train']}")
        funnels[src.name] = rows
    return funnels


def _counts(cfg: InstructSpec, stats: dict[str, Counter], ledger_rows: int) -> dict[str, Any]:
    """Totals and per-source counts (flat numbers and dicts only: they become the DVC metrics file)."""
    by_source: dict[str, Any] = {}
    totals: Counter = Counter()
    for src in cfg.sources:
        c = stats[src.name]
        dropped_by = {s: c[s] for s in STEPS if s != "heldout" and c[s]}
        by_source[src.name] = {"available": c["available"], "not_taken": c["not_taken"], "read": c["read"],
                               "train": c["train"], "heldout": c["heldout_kept"],
                               "dropped": sum(dropped_by.values()), "dropped_by_filter": dropped_by}
        totals.update(c)
    dropped_by = {s: totals[s] for s in STEPS if s != "heldout" and totals[s]}
    counts = {"read": totals["read"], "train": totals["train"], "heldout": totals["heldout_kept"],
              "dropped": sum(dropped_by.values()), "not_taken": totals["not_taken"],
              "dropped_by_filter": dropped_by, "by_source": by_source}
    if counts["dropped"] != ledger_rows:
        raise AssertionError(f"instruct: ledger has {ledger_rows} rows but {counts['dropped']} drops were counted")
    return counts


def _table(counts: dict[str, Any], funnels: dict[str, list[dict[str, Any]]]) -> list[dict[str, Any]]:
    """One row per source: read, what each step took, train."""
    return [{"source": name, "read": counts["by_source"][name]["read"],
             **{f["step"]: f["left"] for f in funnel}, "train": counts["by_source"][name]["train"]}
            for name, funnel in funnels.items()]


def _summary(counts: dict[str, Any], funnels: dict[str, list[dict[str, Any]]]) -> str:
    """A markdown funnel: one row per step, one column per source, each cell `−left → remaining`."""
    names = list(funnels)
    lines = ["| step | " + " | ".join(names) + " |", "|---" * (len(names) + 1) + "|",
             "| read | " + " | ".join(f"{counts['by_source'][n]['read']:,}" for n in names) + " |"]
    for k, step in enumerate(STEPS):
        cells = [f"−{f['left']:,} → {f['remaining']:,}" if f["left"] else f"{f['remaining']:,}"
                 for f in (funnels[n][k] for n in names)]
        lines.append(f"| {step} | " + " | ".join(cells) + " |")
    head = (f"**instruct**: {counts['read']:,} conversations read, {counts['train']:,} kept for training, "
            f"{counts['heldout']:,} held out, {counts['dropped']:,} dropped (ledger: dropped.parquet).")
    return head + "\n\n" + "\n".join(lines)
