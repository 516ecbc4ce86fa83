"""Stage `mix`: cleaned records -> tokenizer + weighted, shuffled, packed train/val token shards.

Streamed in passes over the clean shards, the per-shard ones on `run.executor` (a process pool or Dask), so no
pass holds more than one shard's text or tokens; what the stage keeps for the whole corpus is a few numbers per
document (tasks/data/mixing/mixplan.py):
1. scan: per document its source, characters and id hashes; split each source train/val by a hash of the id.
2. tokenizer: a byte-level BPE trained on a weighted sample of train text (`tokenizer.train_chars`, the only
   text held at once), or the checkpoint's own (`model.init.kind: hf`).
3. tokenize: every shard's documents into scratch token files (`.scratch.tmp-*` under the output, removed at
   the end); per document only its token count comes back.
4. plan from the counts: how many tokens each source contributes (token budget x weight, each source repeated
   at most `max_repetition` epochs); which whole documents meet that (a fresh hash-ordered pass per epoch, so
   1.73 epochs = one full pass + 73% of a second); the shuffle across sources.
5. pack: the chosen documents' tokens read back one by one from the scratch files, packed into fixed-length
   sequences written shard by shard (tasks/data/mixing/packing.py).

Outputs (data/mix/): tokenizer.json (+ the checkpoint's tokenizer_config.json with `model.init.kind: hf`),
train-NNNNN.bin / val-NNNNN.bin, train.idx.parquet / val.idx.parquet,
packing.json (layout for `tasks.data.mixing.packing.PackedDataset`), report.json.

Determinism: every choice is an order of 8-byte blake2b hashes of (purpose, seed, document id, epoch) --
no RNG state, no Python hash() -- so output bytes depend only on the records, the spec and run.seed (not on
the shard layout, the executor or its worker count), and adding documents never moves others between splits or
changes their relative order. The val split ignores the seed on purpose: val loss stays comparable across seeds.
"""

from __future__ import annotations

import logging
import shutil
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from specs.init import user_set
from specs.mix import MixJob, MixSpec
from specs.results import StageResult
from tasks.core.files import sha256_file, write_json_atomic, write_text_atomic
from tasks.core.runner import StagePaths
from tasks.core.shardmap import map_shards
from tasks.data.mixing.mixplan import hash_key, plan_tokens, split_val, take_documents, tokenizer_quota
from tasks.data.mixing.mixshards import TokenStore, sample_texts, scan_shard, shard_documents, tokenize_shard
from tasks.data.mixing.packing import PackWriter, write_layout
from tasks.data.mixing.tokenizer import checkpoint_tokenizer, fit_seq_len, save_tokenizer, train_tokenizer
from tasks.train.hf.hf_files import check_checkpoint_files
from tasks.train.hf.hf_generation import STATED, stated_generation

log = logging.getLogger("forgeline.mix")
TOTALS = ("documents", "train_documents", "val_documents", "tokens_available", "realized_tokens", "val_tokens")
SCRATCH = ".scratch.tmp-"


@dataclass
class Corpus:
    """Every document of the clean shards as rows of flat arrays ([n] each, in shard order), grouped by source.

    `shard`/`doc`: which shard and which of its documents; filled by the scan: `source` (index into `sources`),
    `chars`, `val_key`, `tok_key`; by tokenization: `ntok` (tokens, no end token), `tok_off` (first token in
    the shard's token file), `id_len`/`id_off` (the id's bytes in the shard's id file)."""

    shards: list[str]
    sources: list[str]
    arrays: dict[str, np.ndarray]
    train: dict[str, np.ndarray] = field(default_factory=dict)  # source -> row numbers, shard order
    val: dict[str, np.ndarray] = field(default_factory=dict)

    def __getattr__(self, name: str) -> np.ndarray:
        try:
            return self.__dict__["arrays"][name]
        except KeyError:
            raise AttributeError(name) from None

    def rows(self, s: str) -> np.ndarray:
        return np.flatnonzero(self.source == self.sources.index(s))


def run(spec: MixSpec, paths: StagePaths) -> StageResult:
    """`spec` is a MixJob from params (a plain MixSpec, as tests pass, means `model.init.kind: random`)."""
    for stale in paths.out.glob(f"{SCRATCH}*"):  # a killed run's scratch tokens
        shutil.rmtree(stale, ignore_errors=True)
    spec = fit_checkpoint(spec, paths)
    scratch = Path(tempfile.mkdtemp(prefix=SCRATCH, dir=paths.out))
    try:
        return _run(spec, paths, scratch)
    finally:
        shutil.rmtree(scratch, ignore_errors=True)


def checkpoint_folder(spec: MixSpec, paths: StagePaths) -> Path | None:
    """The checkpoint folder of `model.init.kind: hf` (relative paths from the project root), else None."""
    init = spec.model_init if isinstance(spec, MixJob) else None
    if init is None or init.kind != "hf":
        return None
    folder = Path(init.path)
    folder = folder if folder.is_absolute() else paths.root / folder
    check_checkpoint_files(folder)  # links out of the folder, oversized or malformed JSON: refused before any read
    return folder


def fit_checkpoint(spec: MixSpec, paths: StagePaths) -> MixSpec:
    """`spec` with a default seq_len cut to the checkpoint's max_position_embeddings; a chosen longer one is an
    error naming both (specs/init.py's rule)."""
    folder = checkpoint_folder(spec, paths)
    if folder is None:
        return spec
    seq_len = fit_seq_len(spec.seq_len, folder, "mix.seq_len", "seq_len" in user_set(spec))
    return spec if seq_len == spec.seq_len else spec.model_copy(update={"seq_len": seq_len})


def _run(spec: MixSpec, paths: StagePaths, scratch: Path) -> StageResult:
    corpus = scan_corpus(paths.input("clean"), paths)
    chars = {s: int(corpus.chars[corpus.rows(s)].sum()) for s in corpus.sources}
    shares = target_shares(spec, chars)
    split_corpus(corpus, spec.val_fraction, spec.min_val_docs)
    for s, w in shares.items():
        if w > 0 and not len(corpus.train[s]):
            raise ValueError(f"mix: source {s!r} has weight {w:.3g} but no train documents "
                             f"({len(corpus.val[s])} in val)")

    tok, special_ids, eos, tok_report = make_tokenizer(spec, corpus, shares, paths)
    dtype, eos_id = spec.token_dtype(tok.get_vocab_size()), special_ids[eos]
    tokenize_corpus(corpus, paths, dtype, scratch)
    store = TokenStore(scratch, dtype)
    try:
        lengths = corpus.ntok + 1  # [n] +1: each document's end token
        avail = {s: int(lengths[corpus.train[s]].sum()) for s in corpus.sources}
        if not spec.weights:  # proportional to size: now measured in tokens, as the budget is
            shares = {s: avail[s] / sum(avail.values()) for s in avail}
        targets, planned, budget = plan_tokens(shares, avail, spec.token_budget, spec.max_repetition,
                                               spec.on_shortfall)
        picks, realized = choose_documents(corpus, store, shares, planned, spec, paths.seed, lengths)
        val_picks = order_val(corpus, store, spec.shuffle, paths.seed)
        layout = {}
        for split, chosen in (("train", picks), ("val", val_picks)):
            with PackWriter(paths.out, split, spec.seq_len, eos_id, dtype, spec.shard_sequences) as writer:
                for g in chosen:
                    k = int(corpus.shard[g])
                    writer.add(store.tokens(k, int(corpus.tok_off[g]), int(corpus.ntok[g])),
                               store.doc_id(k, int(corpus.id_off[g]), int(corpus.id_len[g])),
                               corpus.sources[corpus.source[g]])
            layout[split] = writer.layout
    finally:
        store.close()
    write_layout(paths.out, spec.seq_len, dtype, tok.get_vocab_size(), eos_id, special_ids, layout)

    val_tokens = {s: int(lengths[corpus.val[s]].sum()) for s in corpus.sources}
    sources = {s: _source_row(s, spec, corpus, shares, avail, targets, planned, realized, val_tokens)
               for s in corpus.sources}
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


def scan_corpus(folder: Path, paths: StagePaths) -> Corpus:
    """Pass 1: every clean shard's documents as numbers (source, characters, id hashes); refuses duplicate ids."""
    shards = [str(p) for p in sorted((folder / "shards").glob("*.parquet"))]
    results = [r["result"] for r in map_shards(scan_shard, [(p,) for p in shards], [Path(p).stem for p in shards],
                                               paths.executor, "mix scan")]
    names = sorted({s for r in results for s in r["sources"]})
    if not names:
        raise ValueError(f"mix: no documents under {folder}/shards")
    parts: dict[str, list[np.ndarray]] = {k: [] for k in ("shard", "doc", "source", "chars", "val_key", "tok_key")}
    for k, r in enumerate(results):
        n = len(r["chars"])
        parts["shard"].append(np.full(n, k, np.int32))
        parts["doc"].append(np.arange(n, dtype=np.int64))
        parts["source"].append(np.asarray([names.index(s) for s in r["sources"]], np.int32)[r["source"]]
                               if n else np.zeros(0, np.int32))
        for key in ("chars", "val_key", "tok_key"):
            parts[key].append(r[key])
    corpus = Corpus(shards, names, {k: np.concatenate(v) for k, v in parts.items()})
    check_unique_ids(corpus)
    log.info("mix: read %d documents from %d sources in %d shards", len(corpus.chars), len(names), len(shards))
    return corpus


def check_unique_ids(corpus: Corpus) -> None:
    """Ids name documents in the index and the val split; they must be unique. Equal ids have equal val hashes,
    so only the documents of a repeated hash are read back to name them (and to rule out a hash collision)."""
    keys = np.sort(corpus.val_key)
    clash = np.unique(keys[1:][keys[1:] == keys[:-1]])
    if not len(clash):
        return
    rows = np.flatnonzero(np.isin(corpus.val_key, clash))
    ids: list[str] = []
    for k in np.unique(corpus.shard[rows]):
        shard_ids = shard_documents(corpus.shards[k], ["id"])["id"]
        ids += [shard_ids[int(d)] for d in corpus.doc[rows[corpus.shard[rows] == k]]]
    ids.sort()
    dupes = sorted({a for a, b in zip(ids, ids[1:]) if a == b})
    if dupes:
        raise ValueError(f"mix: duplicate document ids in the cleaned data, e.g. {', '.join(dupes[:3])}")


def split_corpus(corpus: Corpus, val_fraction: float, min_val_docs: int) -> None:
    """Per source: train and val row numbers (tasks.data.mixing.mixplan.split_val)."""
    for s in corpus.sources:
        rows = corpus.rows(s)
        in_val = split_val(corpus.val_key[rows], val_fraction, min_val_docs)
        corpus.train[s], corpus.val[s] = rows[~in_val], rows[in_val]
        log.info("split %s: %d train, %d val documents", s, len(corpus.train[s]), len(corpus.val[s]))


def tokenizer_sample(corpus: Corpus, shares: dict[str, float], train_chars: int | None,
                     paths: StagePaths) -> list[str]:
    """Train text for the tokenizer: per source, train_chars x share characters, documents in hash order, read
    from the shards that hold them (the sample is the only text the stage holds at once)."""
    chosen, limits = [], []
    for s in sorted(corpus.train):
        if shares[s] <= 0:
            continue
        rows = corpus.train[s]
        quota = float("inf") if train_chars is None else train_chars * shares[s]
        pos, lim = tokenizer_quota(corpus.chars[rows], corpus.tok_key[rows], quota)
        chosen.append(rows[pos])
        limits.append(lim)
    chosen_rows, limit = np.concatenate(chosen), np.concatenate(limits)  # in sample order
    shards = np.unique(corpus.shard[chosen_rows])
    slots = [np.flatnonzero(corpus.shard[chosen_rows] == k) for k in shards]
    args = [(corpus.shards[k], corpus.doc[chosen_rows[sl]], limit[sl]) for k, sl in zip(shards, slots)]
    results = map_shards(sample_texts, args, [Path(corpus.shards[k]).stem for k in shards], paths.executor,
                         "mix tokenizer sample")
    sample = [""] * len(chosen_rows)
    for sl, r in zip(slots, results):
        for slot, text in zip(sl, r["result"]):
            sample[slot] = text
    return sample


def tokenize_corpus(corpus: Corpus, paths: StagePaths, dtype: str, scratch: Path) -> None:
    """Pass 3: every shard's documents into scratch token files, on the executor; the counts come back."""
    tokenizer = str(paths.out / "tokenizer.json")
    args = [(p, tokenizer, dtype, str(scratch), k) for k, p in enumerate(corpus.shards)]

    def done(i: int, timed: dict[str, Any]) -> None:
        log.info("mix tokenize: shard %d/%d (%s) in %.1fs", i + 1, len(args), Path(corpus.shards[i]).stem,
                 timed["seconds"])

    results = [r["result"] for r in map_shards(tokenize_shard, args, [Path(p).stem for p in corpus.shards],
                                               paths.executor, "mix tokenize", done)]
    for key, name in (("tokens", "ntok"), ("id_bytes", "id_len")):
        counts = [r[key] for r in results]
        if [len(c) for c in counts] != np.bincount(corpus.shard, minlength=len(results)).tolist():
            raise RuntimeError("mix: a shard changed between the scan and tokenization (document counts differ)")
        corpus.arrays[name] = np.concatenate(counts)
        offsets = [np.cumsum(c) - c for c in counts]  # first token / byte of each document
        corpus.arrays["tok_off" if key == "tokens" else "id_off"] = np.concatenate(offsets)


def doc_ids(corpus: Corpus, store: TokenStore, rows: np.ndarray):
    """The ids of `rows`, read back one by one from the scratch id files (never all in memory at once)."""
    for g in rows:
        yield store.doc_id(int(corpus.shard[g]), int(corpus.id_off[g]), int(corpus.id_len[g]))


def choose_documents(corpus: Corpus, store: TokenStore, shares: dict[str, float], planned: dict[str, float],
                     spec: MixSpec, seed: int, lengths: np.ndarray) -> tuple[np.ndarray, dict[str, int]]:
    """Train picks (row numbers, one per document copy, in pack order) and the tokens realized per source."""
    rows, epochs, realized = [], [], {}
    for s in sorted(shares):
        train = corpus.train[s]

        def epoch_keys(e: int, s: str = s, train: np.ndarray = train) -> np.ndarray:
            return np.fromiter((hash_key("epoch", seed, s, e, i) for i in doc_ids(corpus, store, train)),
                               np.uint64, len(train))

        taken = take_documents(lengths[train], epoch_keys, planned[s], spec.max_repetition *
                               int(lengths[train].sum()), need_order=not spec.shuffle)
        rows += [train[pos] for pos, _ in taken]
        epochs += [np.full(len(pos), e, np.int32) for pos, e in taken]
        realized[s] = int(sum(lengths[train[pos]].sum() for pos, _ in taken))
        avail = int(lengths[train].sum())
        log.info("mix %s: %s tokens planned, %s realized (%.2f epochs)", s, f"{planned[s]:,.0f}",
                 f"{realized[s]:,}", realized[s] / avail if avail else 0.0)
    picks = np.concatenate(rows) if rows else np.zeros(0, np.int64)
    epoch = np.concatenate(epochs) if epochs else np.zeros(0, np.int32)
    if spec.shuffle:  # a document copy's place depends only on (seed, id, epoch)
        keys = np.fromiter((hash_key("order", seed, i, int(e)) for i, e in zip(doc_ids(corpus, store, picks), epoch)),
                           np.uint64, len(picks))
        picks = picks[np.lexsort((epoch, picks, keys))]
    return picks, realized


def order_val(corpus: Corpus, store: TokenStore, shuffle: bool, seed: int) -> np.ndarray:
    """Val rows in pack order: shuffled by (seed, id), or by source then id."""
    rows = np.concatenate([corpus.val[s] for s in sorted(corpus.val)])
    if shuffle:
        keys = np.fromiter((hash_key("val-order", seed, i) for i in doc_ids(corpus, store, rows)), np.uint64,
                           len(rows))
        return rows[np.lexsort((rows, keys))]
    ranked = sorted(zip(corpus.source[rows], doc_ids(corpus, store, rows), rows))
    return np.asarray([g for _, _, g in ranked], dtype=np.int64)


def make_tokenizer(spec: MixSpec, corpus: Corpus, shares: dict[str, float],
                   paths: StagePaths) -> tuple[Any, dict[str, int], str, dict[str, Any]]:
    """(tokenizer, special ids, end token, report facts), written to `tokenizer.json`: trained here on a
    weighted sample of train text, or — with `model.init.kind: hf` — the checkpoint's own, copied byte for byte
    (a model must see the ids it was trained with; nothing is trained)."""
    folder = checkpoint_folder(spec, paths)
    if folder is not None:
        tok, special_ids, eos = checkpoint_tokenizer(folder)
        # tokenizer_config.json (special tokens, chat template) and a separate chat_template.jinja travel along:
        # sft renders conversations with the checkpoint's template and export writes them back out.
        for name in ("tokenizer.json", "tokenizer_config.json", "chat_template.jinja"):
            if (folder / name).is_file():
                write_text_atomic(paths.out / name, (folder / name).read_text(encoding="utf-8"))
        write_json_atomic(paths.out / STATED, stated_generation(folder))  # its end ids, for export to keep
        log.info("tokenizer: the checkpoint's (%s, %d tokens); none trained", folder, tok.get_vocab_size())
        return tok, special_ids, eos, {"source": "checkpoint", "trained": False,
                                       "checkpoint": spec.model_init.path,  # type: ignore[attr-defined]
                                       "sha256": sha256_file(folder / "tokenizer.json")}
    specials = spec.tokenizer.all_special_tokens()
    sample = tokenizer_sample(corpus, shares, spec.tokenizer.train_chars, paths)
    tok = train_tokenizer(sample, spec.tokenizer.vocab_size, spec.tokenizer.min_frequency, specials)
    save_tokenizer(tok, paths.out / "tokenizer.json")
    return tok, {t: tok.token_to_id(t) for t in specials}, specials[0], {
        "source": "trained", "trained": True, "vocab_size_requested": spec.tokenizer.vocab_size,
        "train_texts": len(sample), "train_chars": sum(map(len, sample))}


def _source_row(s, spec, corpus, shares, avail, targets, planned, realized, val_tokens) -> dict[str, Any]:
    """One source's line of report.json."""
    total = sum(realized.values())
    # Capped: the target (or, when redistributing, the plan) asked for more than max_repetition epochs.
    capped = shares[s] > 0 and max(targets[s], planned[s]) >= spec.max_repetition * avail[s]
    train, val = len(corpus.train[s]), len(corpus.val[s])
    return {
        "documents": train + val, "train_documents": train, "val_documents": val,
        "tokens_available": avail[s], "target_share": _r(shares[s]), "target_tokens": round(targets[s]),
        "realized_tokens": realized[s], "realized_share": _r(realized[s] / total if total else 0.0),
        "epochs": _r(realized[s] / avail[s] if avail[s] else 0.0), "capped": capped,
        "shortfall_tokens": max(0, round(targets[s]) - realized[s]) if capped else 0,
        "val_tokens": val_tokens[s],
    }


def target_shares(spec: MixSpec, chars: dict[str, int]) -> dict[str, float]:
    """Normalized weight per source in the data; a weights/data mismatch is an error that names the sources."""
    have = sorted(chars)
    if not spec.weights:  # proportional to size; in characters until tokens are known (run() redoes it)
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
