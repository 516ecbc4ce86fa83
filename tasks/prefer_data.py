"""Stage `prefer_data`: curate the preference pairs DPO trains on (after `review_sft` approved the SFT model).

Sources (`prefer_data.sources`): downloaded sets (jsonl/parquet in TRL's or open-instruct's shape, tasks/data/
preference.py) and the embedded default built from instruct's conversations, whose rejected answers are the SFT
model's own greedy answers (or another prompt's answer, or a truncated one). Funnel, first failure wins: `parse`
-> `empty` -> `identical` -> `length` -> `decontamination` (evaluate's prompts and `benchmark_files`), then over all
sources `exact_duplicate` / `near_duplicate` of the prompt, then the held-out slice (sources with `split: auto`;
the embedded source's held-out pairs are instruct's held-out conversations, which SFT never saw).

Outputs (data/prefer_data/): `train.jsonl`, `heldout.jsonl` (`{id, source, prompt, chosen, rejected, kind}`),
`dropped.parquet` (id, source, filter, reason, excerpt: every dropped pair), `report.json` (funnel per source,
dedup, decontamination hits, the length-bias report). Every read pair is in exactly one of them (checked).
Byte-identical on rerun (seeded hashes; greedy decoding on one thread).
"""

from __future__ import annotations

import json
import logging
import time
from collections import Counter
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pyarrow as pa
import torch

from specs.evaluate import SamplingSpec
from specs.prefer import EmbeddedPreferenceSource, FilesPreferenceSource, PreferDataJob
from specs.results import StageResult
from tasks.core.files import atomic_path, write_json_atomic, write_text_atomic
from tasks.core.runner import StagePaths
from tasks.data.filtering.decontaminate import EvalIndex
from tasks.data.filtering.filters import Filter, first_drop, run_filters
from tasks.data.curation.preference import Messages, Pair, Unread, embedded_pairs, file_pairs, seeded_unit
from tasks.data.curation.streaming import LowestN
from tasks.data.curation.preference_filters import (DecontaminationFilter, benchmark_texts, dedup_prompts,
                                                    length_bias, pair_filters)
from tasks.data.records import write_table
from tasks.eval.approval import require_approval
from tasks.eval.generate import generate_batch, torch_threads
from tasks.train.inputs.chat import render
from specs.architecture import ModelConfig
from tasks.train.inputs.pref_data import sft_chat
from tasks.train.checkpointing.weights import load_weights, model_from_state

log = logging.getLogger("forgeline.prefer_data")
STEPS = ("parse", "empty", "identical", "length", "decontamination", "exact_duplicate", "near_duplicate")
LEDGER_SCHEMA = pa.schema([("id", pa.string()), ("source", pa.string()), ("filter", pa.string()),
                           ("reason", pa.string()), ("excerpt", pa.string())])
GREEDY = SamplingSpec(temperature=0.0, top_k=None, top_p=1.0)


def greedy_answers(sft_dir: Path, batch: int, max_new_tokens: int):
    """A callable: prompts -> the SFT model's greedy answers (decoded, stripped), `batch` prompts at a time."""
    def generate(prompts: list[Messages]) -> list[str]:
        tok, chat, _pad = sft_chat(sft_dir)
        cfg = ModelConfig.from_dict({**json.loads((sft_dir / "config.json").read_text())["model"], "dropout": 0.0})
        stops = chat.stop_ids() if chat is not None else tok.token_to_id("<|end|>")
        ids = [list((chat.render(p, add_generation_prompt=True) if chat is not None
                     else render(p, tok, add_generation_prompt=True))[0]) for p in prompts]
        sampling = GREEDY.model_copy(update={"max_new_tokens": max_new_tokens})
        out: list[str] = []
        with torch_threads(1), torch.no_grad():  # one thread: the same argmax on every machine
            model = model_from_state(cfg, load_weights(sft_dir))
            for lo in range(0, len(ids), batch):
                chunk = ids[lo:lo + batch]
                gens = generate_batch(model, chunk, sampling, [torch.Generator() for _ in chunk], stops)
                out += [tok.decode(new, skip_special_tokens=True).strip() for new, _ in gens]
        return out
    return generate


def decontamination_index(job: PreferDataJob, root: Path) -> EvalIndex | None:
    spec = job.data.decontamination
    if not spec.enabled:
        return None
    texts = [(f"eval prompt #{i}", t) for i, t in enumerate(job.eval_prompts)]
    for rel in job.data.benchmark_files:  # streamed and checked: a hostile file is refused naming file and line
        texts += benchmark_texts(root, rel)
    return EvalIndex([t for _, t in texts], spec, names=[n for n, _ in texts])


@dataclass(frozen=True)
class Dropped:
    """A pair a per-pair filter dropped as it was read: what its ledger row needs, not its (maybe 50 MB) text."""

    id: str
    source: str
    step: str
    reason: str
    excerpt: str


def screen(pair: Pair, filters: list[Filter]) -> Pair | Dropped:
    """`pair`, or its ledger row when one of `filters` drops it (the first drop names the reason)."""
    hit = first_drop(run_filters(filters, pair))
    return Dropped(pair.id, pair.source, hit[0], hit[1].reason or "", pair.excerpt()) if hit else pair


def file_entries(src: FilesPreferenceSource, paths: StagePaths, c: Counter, drop: Any,
                 early: list[Filter]) -> Iterator[Pair | Dropped]:
    """The pairs of a files source that are taken, each already screened by `early` (so an over-long pair is held
    as its ledger row only), unreadable records ledgered as `parse`. Without `max_pairs` each as read; with it the
    `max_pairs` of lowest seeded hash (then id), held in a heap of that size while reading, in read order."""
    sample: LowestN[Pair | Dropped] | None = None if src.max_pairs is None else LowestN(src.max_pairs)
    for item in file_pairs(src, paths.root):
        if isinstance(item, Unread):
            c["read"] += 1
            drop(item.id, item.source, "parse", item.reason, item.excerpt)
        elif sample is None:
            c["read"] += 1
            yield screen(item, early)
        else:
            sample.offer((seeded_unit("take", paths.seed, item.id), item.id), screen(item, early))
    if sample is not None:
        taken = sample.taken()
        c["read"] += len(taken)
        c["not_taken"] += sample.dropped
        yield from taken


def read_all(job: PreferDataJob, paths: StagePaths, stats: dict[str, Counter], drop: Any,
             filters: list[Filter]) -> list[Pair]:
    """Every source's pairs through the per-pair `filters` as they are read: only the kept pairs are held (every
    pair was held before filtering: 10 pairs of 50 MB took 1.6 GB). The cheap filters (empty, identical, length)
    run on each pair read; the rest (decontamination) only on the pairs a source's `max_pairs` takes."""
    early = [f for f in filters if not isinstance(f, DecontaminationFilter)]
    late = [f for f in filters if isinstance(f, DecontaminationFilter)]
    kept: list[Pair] = []
    for src in job.data.sources:
        if isinstance(src, EmbeddedPreferenceSource):
            gen = greedy_answers(paths.input("sft"), job.data.generate_batch, src.max_new_tokens)
            made, not_taken = embedded_pairs(src, paths.input("instruct"), paths.seed, gen)
            stats[src.name]["not_taken"] += not_taken
            stats[src.name]["read"] += len(made)
            entries: Iterable[Pair | Dropped] = (screen(p, early) for p in made)
        else:
            entries = file_entries(src, paths, stats[src.name], drop, early)
        for entry in entries:
            entry = screen(entry, late) if isinstance(entry, Pair) else entry
            if isinstance(entry, Dropped):
                drop(entry.id, entry.source, entry.step, entry.reason, entry.excerpt)
            else:
                kept.append(entry)
    return kept


def split_heldout(pairs: list[Pair], job: PreferDataJob, seed: int) -> tuple[list[Pair], list[Pair]]:
    """(train, heldout): fixed splits as the source says, the seeded slice of the `auto` ones."""
    auto = [p for p in pairs if p.split is None]
    n = job.data.heldout_count if job.data.heldout_count is not None else round(job.data.heldout_fraction * len(auto))
    held = {p.id for p in sorted(auto, key=lambda p: (seeded_unit("heldout", seed, p.id), p.id))[:n]}
    held |= {p.id for p in pairs if p.split == "heldout"}
    return [p for p in pairs if p.id not in held], [p for p in pairs if p.id in held]


def run(job: PreferDataJob, paths: StagePaths) -> StageResult:
    if job.enabled:
        require_approval(paths.input("review_sft") / "decision.json", "prefer_data", "the SFT model", "review_sft")
    paths.out.mkdir(parents=True, exist_ok=True)
    ledger: list[dict[str, Any]] = []
    stats: dict[str, Counter] = {s.name: Counter() for s in job.data.sources}

    def drop(pid: str, source: str, step: str, reason: str, excerpt: str) -> None:
        ledger.append({"id": pid, "source": source, "filter": step, "reason": reason, "excerpt": excerpt[:300]})
        stats[source][step] += 1

    # the index first: a benchmark file that cannot be read stops the stage before any pair is read or generated
    filters = pair_filters(job.data.filters, decontamination_index(job, paths.root))
    t0 = time.perf_counter()
    kept = read_all(job, paths, stats, drop, filters) if job.enabled else []
    read_s = time.perf_counter() - t0
    kept, dups, dedup = dedup_prompts(kept, job.data.dedup, paths.seed)
    for p, step, reason in dups:
        drop(p.id, p.source, step, reason, p.excerpt())
    train, heldout = split_heldout(kept, job, paths.seed)
    for split, items in (("train", train), ("heldout", heldout)):
        write_text_atomic(paths.out / f"{split}.jsonl",
                          "".join(json.dumps(p.record(), ensure_ascii=False) + "\n" for p in items))
        for p in items:
            stats[p.source][split] += 1
    order = {s: k for k, s in enumerate(STEPS)}
    ledger.sort(key=lambda r: (order[r["filter"]], r["source"], r["id"]))
    with atomic_path(paths.out / "dropped.parquet") as tmp:
        write_table(ledger, LEDGER_SCHEMA, tmp)
    counts = _counts(job, stats, len(ledger))
    bias = length_bias(train + heldout)
    report = {**counts, "enabled": job.enabled, "dedup": dedup, "length_bias": bias}
    write_json_atomic(paths.out / "report.json", report)
    log.info("prefer_data: %d read, %d train, %d held out, %d dropped (%.1f s reading/generating)",
             counts["read"], counts["train"], counts["heldout"], counts["dropped"], read_s)
    counts["chosen_rejected_length_ratio"] = bias.get("ratio_of_means")
    return StageResult(stage="prefer_data", counts=counts, summary=_summary(job, counts, bias),
                       table=[{"source": k, **{s: v for s, v in c.items() if not isinstance(v, dict)}}
                              for k, c in counts["by_source"].items()])


def _counts(job: PreferDataJob, stats: dict[str, Counter], ledger_rows: int) -> dict[str, Any]:
    by_source, totals = {}, Counter()
    for src in job.data.sources:
        c = stats[src.name]
        dropped_by = {s: c[s] for s in STEPS if c[s]}
        if c["read"] != c["train"] + c["heldout"] + sum(dropped_by.values()):  # nothing is lost silently
            raise AssertionError(f"prefer_data: source {src.name} lost pairs: {dict(c)}")
        by_source[src.name] = {"read": c["read"], "not_taken": c["not_taken"], "train": c["train"],
                               "heldout": c["heldout"], "dropped": sum(dropped_by.values()),
                               "dropped_by_filter": dropped_by}
        totals.update(c)
    dropped_by = {s: totals[s] for s in STEPS if totals[s]}
    if sum(dropped_by.values()) != ledger_rows:
        raise AssertionError(f"prefer_data: ledger has {ledger_rows} rows, {sum(dropped_by.values())} drops counted")
    return {"read": totals["read"], "train": totals["train"], "heldout": totals["heldout"],
            "dropped": sum(dropped_by.values()), "not_taken": totals["not_taken"], "dropped_by_filter": dropped_by,
            "by_source": by_source}


def _summary(job: PreferDataJob, counts: dict[str, Any], bias: dict[str, Any]) -> str:
    if not job.enabled:
        return "**prefer_data**: preference tuning is off (`prefer.enabled: false`); no pairs."
    reasons = ", ".join(f"{k} {v}" for k, v in counts["dropped_by_filter"].items()) or "none"
    return (f"**prefer_data**: {counts['read']:,} pairs read, {counts['train']:,} train, {counts['heldout']:,} "
            f"held out, {counts['dropped']:,} dropped ({reasons}; ledger: dropped.parquet).\n\n"
            f"Length bias: chosen/rejected words {bias.get('ratio_of_means')} (ratio of means), chosen longer in "
            f"{bias.get('chosen_longer_share', 0):.0%} of pairs.")
