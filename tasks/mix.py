"""Stage `mix`: cleaned records -> tokenizer + weighted, shuffled, packed train/val token shards.

Steps: split each source's documents into train/val by a stable hash of the id; train a byte-level BPE on a
weighted sample of train text; tokenize; choose how many tokens each source contributes (token budget x
weight, each source repeated at most `max_repetition` epochs); pick whole documents to meet that (a fresh
hash-ordered pass per epoch, so 1.73 epochs = one full pass + 73% of a second); shuffle all documents
across sources; pack into fixed-length sequences.

Outputs (data/mix/): tokenizer.json (+ the checkpoint's tokenizer_config.json with `model.init.kind: hf`),
train-NNNNN.bin / val-NNNNN.bin, train.idx.parquet / val.idx.parquet,
packing.json (layout for `tasks.data.packing.PackedDataset`), report.json.

Determinism: every choice is an order of 8-byte blake2b hashes of (purpose, seed, document id, epoch) --
no RNG state, no Python hash() -- so output bytes depend only on the records, the spec and run.seed, and
adding documents never moves others between splits or changes their relative order. The val split ignores the
seed on purpose: val loss stays comparable across seeds.
"""

from __future__ import annotations

import hashlib
import logging
from collections import defaultdict
from pathlib import Path
from typing import Any

from specs.mix import MixJob, MixSpec
from specs.results import StageResult
from tasks.core.files import sha256_file, write_json_atomic, write_text_atomic
from tasks.core.runner import StagePaths
from tasks.data.packing import pack_split, write_layout
from tasks.data.records import read_records
from tasks.data.tokenizer import checkpoint_tokenizer, encode_documents, save_tokenizer, train_tokenizer

log = logging.getLogger("forgeline.mix")
Docs = dict[str, list[tuple[str, str]]]  # source -> [(id, text)] sorted by id
TOTALS = ("documents", "train_documents", "val_documents", "tokens_available", "realized_tokens", "val_tokens")


def hash_unit(*parts: object) -> float:
    """A stable pseudo-random number in [0, 1) from `parts` (same on every machine and Python run)."""
    digest = hashlib.blake2b("\x1f".join(map(str, parts)).encode(), digest_size=8, person=b"forgeline-mix").digest()
    return int.from_bytes(digest, "big") / 2**64


def run(spec: MixSpec, paths: StagePaths) -> StageResult:
    """`spec` is a MixJob from params (a plain MixSpec, as tests pass, means `model.init.kind: random`)."""
    docs = read_corpus(paths.input("clean"))
    shares = target_shares(spec, docs)
    train, val = split_docs(docs, spec.val_fraction, spec.min_val_docs)
    for s, w in shares.items():
        if w > 0 and not train[s]:
            raise ValueError(f"mix: source {s!r} has weight {w:.3g} but no train documents ({len(val[s])} in val)")

    tok, special_ids, eos, tok_report = make_tokenizer(spec, train, shares, paths)
    dtype, eos_id = spec.token_dtype(tok.get_vocab_size()), special_ids[eos]
    tokens = {split: {s: encode_documents(tok, [t for _, t in d[s]], dtype, f"{split}/{s}") for s in d}
              for split, d in (("train", train), ("val", val))}

    lengths = {s: [len(a) + 1 for a in tokens["train"][s]] for s in train}  # +1: each document's end token
    avail = {s: sum(n) for s, n in lengths.items()}
    if not spec.weights:  # proportional to size: now measured in tokens, as the budget is
        shares = {s: avail[s] / sum(avail.values()) for s in avail}
    targets, planned, budget = plan_tokens(shares, avail, spec)
    picks: list[tuple[str, int, int]] = []  # (source, document index, epoch)
    for s in sorted(shares):
        taken = take_documents(s, [i for i, _ in train[s]], lengths[s], planned[s],
                               spec.max_repetition * avail[s], paths.seed)
        picks += [(s, j, e) for j, e in taken]
    realized = {s: sum(lengths[s][j] for src, j, _ in picks if src == s) for s in sorted(shares)}
    for s in realized:
        log.info("mix %s: %s tokens planned, %s realized (%.2f epochs)", s, f"{planned[s]:,.0f}",
                 f"{realized[s]:,}", realized[s] / avail[s] if avail[s] else 0.0)
    val_picks = [(s, j, 0) for s in sorted(val) for j in range(len(val[s]))]
    if spec.shuffle:  # a document copy's place depends only on (seed, id, epoch)
        picks.sort(key=lambda p: (hash_unit("order", paths.seed, train[p[0]][p[1]][0], p[2]), p))
        val_picks.sort(key=lambda p: (hash_unit("val-order", paths.seed, val[p[0]][p[1]][0]), p))

    layout = {}
    for split, d, chosen in (("train", train, picks), ("val", val, val_picks)):
        layout[split] = pack_split([tokens[split][s][j] for s, j, _ in chosen], [d[s][j][0] for s, j, _ in chosen],
                                   [s for s, _, _ in chosen], paths.out, split, spec.seq_len, eos_id, dtype,
                                   spec.shard_sequences)
    write_layout(paths.out, spec.seq_len, dtype, tok.get_vocab_size(), eos_id, special_ids, layout)

    sources = {s: _source_row(s, spec, docs, train, val, shares, avail, targets, planned, realized, tokens)
               for s in sorted(docs)}
    report = {
        "tokenizer": {"vocab_size": tok.get_vocab_size(), "special_ids": special_ids, "eos_token": eos,
                      **tok_report},
        "token_budget": budget, "realized_tokens": sum(realized.values()), "seq_len": spec.seq_len, "dtype": dtype,
        "seed": paths.seed, "max_repetition": spec.max_repetition, "on_shortfall": spec.on_shortfall,
        "sources": sources, "totals": {k: sum(v[k] for v in sources.values()) for k in TOTALS},
        "splits": {k: {x: v[x] for x in v if x != "shards"} for k, v in layout.items()},
    }
    write_json_atomic(paths.out / "report.json", report)
    return StageResult(stage="mix", counts=_counts(report), summary=_summary(report), table=_table(sources))


def make_tokenizer(spec: MixSpec, train: Docs, shares: dict[str, float],
                   paths: StagePaths) -> tuple[Any, dict[str, int], str, dict[str, Any]]:
    """(tokenizer, special ids, end token, report facts), written to `tokenizer.json`: trained here on a
    weighted sample of train text, or — with `model.init.kind: hf` — the checkpoint's own, copied byte for byte
    (a model must see the ids it was trained with; nothing is trained)."""
    init = spec.model_init if isinstance(spec, MixJob) else None
    if init is not None and init.kind == "hf":
        folder = Path(init.path)
        folder = folder if folder.is_absolute() else paths.root / folder
        tok, special_ids, eos = checkpoint_tokenizer(folder)
        # tokenizer_config.json (special tokens, chat template) and a separate chat_template.jinja travel along:
        # sft renders conversations with the checkpoint's template and export writes them back out.
        for name in ("tokenizer.json", "tokenizer_config.json", "chat_template.jinja"):
            if (folder / name).is_file():
                write_text_atomic(paths.out / name, (folder / name).read_text(encoding="utf-8"))
        log.info("tokenizer: the checkpoint's (%s, %d tokens); none trained", folder, tok.get_vocab_size())
        return tok, special_ids, eos, {"source": "checkpoint", "trained": False, "checkpoint": init.path,
                                       "sha256": sha256_file(folder / "tokenizer.json")}
    specials = spec.tokenizer.all_special_tokens()
    sample = tokenizer_sample(train, shares, spec.tokenizer.train_chars)
    tok = train_tokenizer(sample, spec.tokenizer.vocab_size, spec.tokenizer.min_frequency, specials)
    save_tokenizer(tok, paths.out / "tokenizer.json")
    return tok, {t: tok.token_to_id(t) for t in specials}, specials[0], {
        "source": "trained", "trained": True, "vocab_size_requested": spec.tokenizer.vocab_size,
        "train_texts": len(sample), "train_chars": sum(map(len, sample))}


def _source_row(s, spec, docs, train, val, shares, avail, targets, planned, realized, tokens) -> dict[str, Any]:
    """One source's line of report.json."""
    total = sum(realized.values())
    # Capped: the target (or, when redistributing, the plan) asked for more than max_repetition epochs.
    capped = shares[s] > 0 and max(targets[s], planned[s]) >= spec.max_repetition * avail[s]
    return {
        "documents": len(docs[s]), "train_documents": len(train[s]), "val_documents": len(val[s]),
        "tokens_available": avail[s], "target_share": _r(shares[s]), "target_tokens": round(targets[s]),
        "realized_tokens": realized[s], "realized_share": _r(realized[s] / total if total else 0.0),
        "epochs": _r(realized[s] / avail[s] if avail[s] else 0.0), "capped": capped,
        "shortfall_tokens": max(0, round(targets[s]) - realized[s]) if capped else 0,
        "val_tokens": sum(len(a) + 1 for a in tokens["val"][s]),
    }


def read_corpus(folder: Path) -> Docs:
    """Every cleaned record as (id, text), grouped by source and sorted by id (shard layout does not matter)."""
    docs: Docs = defaultdict(list)
    for table in read_records(folder):
        for i, text, s in zip(*(table.column(c).to_pylist() for c in ("id", "text", "source"))):
            if text:
                docs[s].append((i, text))
    for s in docs:
        docs[s].sort()
    ids = sorted(i for items in docs.values() for i, _ in items)
    dupes = sorted({a for a, b in zip(ids, ids[1:]) if a == b})
    if dupes:  # ids name documents in the index and the val split; they must be unique
        raise ValueError(f"mix: duplicate document ids in the cleaned data, e.g. {', '.join(dupes[:3])}")
    if not docs:
        raise ValueError(f"mix: no documents under {folder}/shards")
    log.info("mix: read %d documents from %d sources", sum(map(len, docs.values())), len(docs))
    return dict(sorted(docs.items()))


def target_shares(spec: MixSpec, docs: Docs) -> dict[str, float]:
    """Normalized weight per source in the data; a weights/data mismatch is an error that names the sources."""
    have = sorted(docs)
    if not spec.weights:  # proportional to size; in characters until tokens are known (run() redoes it)
        chars = {s: sum(len(t) for _, t in docs[s]) for s in have}
        return {s: chars[s] / sum(chars.values()) for s in have}
    unknown = sorted(set(spec.weights) - set(have))
    if unknown:
        raise ValueError(f"mix.weights names source(s) not in the cleaned data: {', '.join(unknown)} "
                         f"(the data has: {', '.join(have)})")
    missing = sorted(set(have) - set(spec.weights))
    if missing:
        raise ValueError(f"mix.weights lacks source(s) present in the cleaned data: {', '.join(missing)} "
                         "(give each a weight, 0 to leave it out, or leave weights empty for proportional)")
    total = sum(spec.weights.values())
    return {s: spec.weights[s] / total for s in have}


def split_docs(docs: Docs, val_fraction: float, min_val_docs: int) -> tuple[Docs, Docs]:
    """Per source: val = documents whose id hashes below val_fraction, topped up to min_val_docs.

    Thresholding the hash (not ranking it) keeps the split stable: adding documents never moves old ones.
    The top-up takes the smallest hashes, so it too only changes when a new document hashes lower.
    """
    train: Docs = {}
    val: Docs = {}
    for s, items in docs.items():
        u = [hash_unit("val", i) for i, _ in items]
        in_val = {k for k, x in enumerate(u) if x < val_fraction}
        floor = min(min_val_docs, len(items) // 2)  # a top-up never takes more than half a source
        if len(in_val) < floor:
            in_val |= set(sorted(range(len(items)), key=lambda k: u[k])[:floor])
        val[s] = [d for k, d in enumerate(items) if k in in_val]
        train[s] = [d for k, d in enumerate(items) if k not in in_val]
        log.info("split %s: %d train, %d val documents", s, len(train[s]), len(val[s]))
    return train, val


def tokenizer_sample(train: Docs, shares: dict[str, float], train_chars: int | None) -> list[str]:
    """Train text for the tokenizer: per source, train_chars x share characters, documents in hash order."""
    sample = []
    for s in sorted(train):
        quota = float("inf") if train_chars is None else train_chars * shares[s]
        if shares[s] <= 0:
            continue
        for _, text in sorted(train[s], key=lambda d: (hash_unit("tokenizer", d[0]), d[0])):
            if quota <= 0:
                break
            sample.append(text[: int(min(len(text), quota))])
            quota -= len(sample[-1])
    return sample


def plan_tokens(shares: dict[str, float], avail: dict[str, int], spec: MixSpec):
    """Nominal target and planned tokens per source, and the budget used.

    The plan never exceeds max_repetition x available tokens. With on_shortfall=redistribute the tokens a
    capped source cannot give go to the uncapped ones by weight (water-filling, repeated as they cap too).
    """
    limit = {s: spec.max_repetition * avail[s] for s in shares}
    budget = spec.token_budget
    if budget is None:  # the largest mix at these weights that uses no source more than once
        budget = round(min(avail[s] / w for s, w in shares.items() if w > 0))
    targets = {s: w * budget for s, w in shares.items()}
    if spec.on_shortfall == "shrink":
        return targets, {s: min(targets[s], limit[s]) for s in shares}, budget
    planned = {s: 0.0 for s in shares}
    active, remaining = {s for s, w in shares.items() if w > 0}, float(budget)
    while active:
        wsum = sum(shares[s] for s in active)
        over = sorted(s for s in active if remaining * shares[s] / wsum > limit[s])
        if not over:
            planned.update({s: remaining * shares[s] / wsum for s in active})
            break
        for s in over:
            planned[s], remaining = limit[s], remaining - limit[s]
            active.discard(s)
    return targets, planned, budget


def take_documents(source: str, ids: list[str], lengths: list[int], target: float, cap: float,
                   seed: int) -> list[tuple[int, int]]:
    """Whole documents summing as close to `target` tokens as possible without exceeding `cap`.

    Epoch e walks the documents in a fresh hash order (so a partial epoch is a random subset); stop at the
    document boundary nearest the target. Returns (document index, epoch) pairs.
    """
    taken: list[tuple[int, int]] = []
    total, epoch = 0, 0
    while total < target and ids:
        order = sorted(range(len(ids)), key=lambda j: (hash_unit("epoch", seed, source, epoch, ids[j]), j))
        for j in order:
            if total + lengths[j] > cap or total + lengths[j] / 2 >= target:
                return taken  # taking it would break the cap, or land farther from the target than stopping
            taken.append((j, epoch))
            total += lengths[j]
        epoch += 1
    return taken


def _r(x: float) -> float:
    return round(x, 6)


def _counts(report: dict[str, Any]) -> dict[str, Any]:
    counts: dict[str, Any] = {"vocab_size": report["tokenizer"]["vocab_size"], "token_budget": report["token_budget"]}
    for split, info in report["splits"].items():
        counts[f"{split}_tokens"] = info["stream_tokens"]
        counts[f"{split}_sequences"] = info["sequences"]
        counts[f"{split}_documents_packed"] = info["documents_packed"]  # copies of repeated documents count
    counts["by_source"] = {s: {k: v[k] for k in ("target_share", "realized_share", "epochs", "capped",
                                                   "realized_tokens", "val_tokens")}
                           for s, v in report["sources"].items()}
    return counts


def _table(sources: dict[str, dict[str, Any]]) -> list[dict[str, Any]]:
    return [{"source": s, **v} for s, v in sources.items()]


def _summary(report: dict[str, Any]) -> str:
    sp = report["splits"]
    t = report["tokenizer"]
    origin = f"the checkpoint's tokenizer ({t['checkpoint']}, none trained)" if t["source"] == "checkpoint" else \
        "trained here"
    lines = [f"**mix**: vocab {t['vocab_size']:,} ({origin}); train {sp['train']['stream_tokens']:,} tokens "
             f"in {sp['train']['sequences']:,} sequences of {report['seq_len']}+1; val {sp['val']['stream_tokens']:,} "
             f"tokens in {sp['val']['sequences']:,} (budget {report['token_budget']:,}, max "
             f"{report['max_repetition']:g} epochs).", "",
             "| source | target share | realized share | epochs | capped | train tokens | val tokens |",
             "|---|---:|---:|---:|---|---:|---:|"]
    for s, v in report["sources"].items():
        capped = f"yes (short {v['shortfall_tokens']:,})" if v["capped"] else "no"
        lines.append(f"| {s} | {v['target_share']:.1%} | {v['realized_share']:.1%} | {v['epochs']:.2f} | {capped} "
                     f"| {v['realized_tokens']:,} | {v['val_tokens']:,} |")
    return "\n".join(lines)
