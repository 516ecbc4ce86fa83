"""MinHash near-duplicate detection: shingles → signatures → LSH candidates → verified clusters.

- `shingles(text, spec)`: sorted distinct 32-bit hashes of word n-grams (lowercase `\\w+` words; each character
  in scripts written without spaces, `segment`; line-number and timestamp prefixes dropped, `lineprefix`; QP
  bodies, subtitles and markup links read as their text first, `textforms`) or
  char n-grams (lowercased, whitespace collapsed) of the text folded by `normalize.shingle_text` (entities
  decoded, format characters dropped, NFKC + casefold; each per `DedupSpec.fold_*`). A document shorter than
  n units is one shingle: its whole (folded) text.
  Hashes are stable across processes and machines (never Python's salted `hash()`): words get a multilinear
  hash of their UTF-8 bytes (`tasks.data.dedup.wordhash`), n-grams a fixed polynomial of their units, each finished
  by MurmurHash3's finalizer; the per-byte and per-shingle loops are compiled (`tasks.data.dedup.hashloops`) and run
  over a batch of documents at once (no per-word Python objects).
- `signatures(texts, spec, seed)`: uint32 [n, num_perm] MinHash signatures, bit-identical to datasketch 2.x
  `MinHash(num_perm, seed, scheme="affine32", hashfunc=<our shingle hash>)`: the same permutations
  h ↦ a·fmix32(h) + b mod 2^32 (a odd), all permutations of a shingle at once as SIMD lanes, instead of one
  `update()` per shingle. Rows can be wrapped as `LeanMinHash(seed=seed, hashvalues=row, scheme="affine32")`
  for datasketch's `MinHashLSH`. Work is chunked (CHUNK_DOCS documents), so memory stays bounded.
- `near_duplicates(ids, sigs, scores, spec)`: LSH banding (see `tasks.data.dedup.lsh`) → similarity of each candidate
  (exact Jaccard, or the signature estimate) → greedy best-first keepers: each removed document is within the
  threshold of the document kept for it. `tasks.data.dedup.dedup_audit` measures the decision's precision and recall.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from functools import lru_cache
from hashlib import blake2b

import numpy as np
from datasketch import MinHash

from specs.clean import DedupSpec
from tasks.data.dedup import hashloops
from tasks.data.cleanup import textbatch
from tasks.data.dedup.lineprefix import prefixed_docs, url_docs
from tasks.data.dedup.marks import drop_pointing, fold_spelling, hyphenated_docs, mark_words, spelling_docs
from tasks.data.dedup.textforms import format_and_edit_docs, prefold
from tasks.data.dedup.segment import simplify_unspaced, split_unspaced, unspaced_docs
from tasks.data.dedup.lsh import are_duplicates, candidate_pairs, greedy_keepers, s_curve, sorted_unique, spec_banding
from tasks.data.cleanup.lookalikes import fold_confusables
from tasks.data.cleanup.normalize import entity_in, fold_words, has_markup, invisible_chars, shingle_text
from tasks.data.cleanup.textmarks import FULLWIDTH_LINK, footnotes_in, marked_docs, markdown_links_in
from tasks.data.dedup.wordfolds import fold_plain, mark_joins
from tasks.data.dedup.wordhash import MUL, POW, WORD, fmix64, spell_words

__all__ = ["DedupResult", "distinct_runs", "estimated_jaccard", "exact_jaccard_pairs", "jaccard_of_runs",
           "near_duplicates", "s_curve", "sets_of",
           "shingle_sets", "shingles", "signatures", "signatures_and_shingles"]
ShingleSetsFn = Callable[[Sequence[str]], Sequence[np.ndarray]]   # ids -> their shingle sets

# Documents shingled at once: bounds the batch's bytes, words and shingle hashes (~8 MB at 512 docs of 2 KB, most
# of it the word loop's buffer). Each chunk costs ~20 Python steps: at 128 documents they were ~7 % of the
# signatures once the loops were fast (512: 0.57 -> 0.53 CPU s for 50k documents; 1,024 gained 1 % more).
CHUNK_DOCS = 512
PAIR_BATCH = 4096            # candidate pairs verified per compiled call (bounds its copy of the sets)
_KEY = b"forgeline-minhash-v1"
_CHAR_SALT = np.uint64(0x2545F4914F6CDD1D)


def _blake64(data: str) -> int:
    digest = blake2b(data.encode("utf-8", "surrogatepass"), digest_size=8, key=_KEY).digest()
    return int.from_bytes(digest, "little")


def _char_units(texts: Sequence[str]) -> tuple[np.ndarray, np.ndarray]:
    """Hashes of the characters of several lowercased, whitespace-collapsed documents (uint64 [T], int64 [m])."""
    norms = [" ".join(t.lower().split()) for t in texts]
    points = np.frombuffer("".join(norms).encode("utf-32-le", "surrogatepass"), dtype=np.uint32)   # [T]
    return fmix64(points.astype(np.uint64) + _CHAR_SALT), np.array([len(x) for x in norms], dtype=np.int64)


def _fold(text: str, spec: DedupSpec, folds: tuple[str, str] | None = None, marks: bool = True) -> str:
    """`shingle_text` as the spec says; `folds`: (NFKC, NFKC of its casefold) of `text` (`Encoded.folds_of`), which
    are its result for word shingles, with `fold_words` read on it, when no other fold applies (no markup, entity,
    format character, variation selector, footnote superscript or `´`: those are read before NFKC), and `marks`
    False: `text` holds no mark of `textmarks.fold_marks` (the caller's byte scan found none): the exact keys made
    them already (two NFKC checks and a casefold a text saved). Look-alike letters are read last, after pointing
    is dropped: a Cyrillic `о́` read as Latin `o` first keeps its accent, as `ó` does."""
    quotes = spec.fold_unicode and spec.shingle == "char"     # only char shingles see punctuation
    if folds is not None and not marks and spec.fold_unicode and not quotes and not (spec.fold_markup and (
            has_markup(text) or markdown_links_in(text) or footnotes_in(text))) \
            and not (spec.fold_entities and "&" in text and entity_in(text)) \
            and not (spec.fold_invisible and invisible_chars()[1].search(text)) and "\u00b4" not in text:
        folded = fold_words(folds[1], True, spec.fold_markup)
    else:
        folded = shingle_text(text, spec.fold_entities, spec.fold_invisible, spec.fold_unicode, quotes,
                              spec.fold_markup, confusables=False, marks=marks)
    folded = drop_pointing(folded) if spec.fold_pointing else folded
    return fold_confusables(folded) if spec.fold_confusables else folded


def _chunk_shingles(texts: Sequence[str], spec: DedupSpec,
                    encoded: textbatch.Encoded | None = None) -> tuple[np.ndarray, np.ndarray]:
    """Shingle hashes of several documents, concatenated: (uint32 [S], int64 offsets [m + 1]).

    Doc d owns hashes[offsets[d]:offsets[d + 1]] (≥ 1 each; repeats are kept, MinHash ignores them).
    `encoded`: these texts already encoded (`textbatch.Encoded`), for the word loop.
    """
    if spec.shingle == "word":
        units, lengths = _word_units(encoded or textbatch.Encoded.of(texts), spec)      # [T], [m]
    else:
        units, lengths = _char_units([simplify_unspaced(_fold(prefold(t, spec), spec), spec.fold_unicode)
                                      for t in texts])
    hashes, offsets = hashloops.ngram_hashes(units, lengths, spec.shingle_size, MUL)
    for d in np.flatnonzero(lengths == 0).tolist():                     # no units at all: hash the text itself
        hashes[offsets[d]] = _blake64(_fold(texts[d], spec)) >> 32
    return hashes, offsets


def _word_units(batch: textbatch.Encoded, spec: DedupSpec) -> tuple[np.ndarray, np.ndarray]:
    """Word hashes of the folded texts (`wordhash.word_hashes(split_unspaced(fold(textforms.prefold(t))) for t
    in texts)`, bit for bit: `_unit_text`, `segment`).

    A text the folds leave as it is up to ASCII case — no markup, no entity, NFKC already, every non-ASCII
    character simple (`normalize.simple_chars`: quotes, dashes, lower-case accented letters) — goes to the
    compiled word loop as its own UTF-8, its simple non-word characters blanked there: no fold, no regex split,
    no Python per word (what a text with one curly quote cost: ~370 µs of 3 KB, against ~15 for ASCII). The
    rest is folded; a folded text whose non-ASCII characters are then all simple (`É` cased, `…` NFKC'd, a page
    read as its text) goes the same way, and so do the others in lower case (`str.lower`, as the regex split
    reads them), every BMP character that is no `\\w` blanked (`wordfolds.word_breaks`); only a text with an astral
    character is split by the regex."""
    flags = np.array(batch.flags, np.uint8)
    # markup needs tags, an entity an `&` before a letter or `#` (the scan's hints), and a text of simple
    # characters is in NFKC: only the texts with a hint (or a character outside the simple ones) are asked
    hints = textbatch.NOT_SIMPLE | textbatch.MARKUP | textbatch.ENTITY
    fold = {k for k in np.flatnonzero(flags & hints).tolist() if _needs_fold(batch, k, spec)}
    # markdown links, list numbers, citation markers (byte scans; a keycap list is folded for its characters), and
    # spelling variants (`marks.SPELLING`) in the texts no other fold reads (Arabic letters are simple characters)
    lines = np.flatnonzero(batch.data == 10) if spec.fold_markup or spec.fold_hyphenation else None   # `\n`s
    marked = marked_docs(batch.texts, batch.data, batch.ends, lines) if spec.fold_markup else set()
    fold |= marked
    rest = np.array(sorted(set(np.flatnonzero(flags & textbatch.NON_ASCII).tolist()) - fold), np.int64)
    spelled = set(spelling_docs(batch.data, batch.ends, rest) if spec.fold_pointing else [])
    # a text of a script written without spaces is re-spelled with each of its characters a word (`segment`);
    # a text whose lines may start with line numbers or timestamps is checked for them (`lineprefix`)
    # (and one with a `-` before a line break for words hyphenated there, `marks`)
    maybe = set(prefixed_docs(batch.data, batch.ends) if spec.fold_line_prefixes else [])
    maybe |= set(hyphenated_docs(batch.data, batch.ends, lines) if spec.fold_hyphenation else [])
    maybe |= set(url_docs(batch.data, batch.ends) if spec.fold_urls else [])
    # (a QP body or a link read as its text may hold what any fold reads: these are folded whole, `textforms`)
    formats, edits = map(set, format_and_edit_docs(batch.data, batch.ends, spec))
    maybe |= edits                      # (a spaced hyphen, `copyforms`: read as line prefixes are)
    stripped = {k: lines for k in sorted(maybe | formats) if (lines := prefold(batch.texts[k], spec, k in formats))
                is not batch.texts[k]}
    fold |= formats & stripped.keys()
    todo = sorted(fold | stripped.keys() | spelled | set(unspaced_docs(
        batch.texts, batch.data, batch.ends, np.flatnonzero(flags & textbatch.NON_ASCII))))
    if todo:
        folded = [split_unspaced(_unit_text(batch, k, spec, (k in fold) + (k in marked), stripped.get(k)),
                                 spec.fold_unicode)
                  for k in todo]
        flags[todo] = textbatch.flags_of(*textbatch.joined(folded))
        new_data, new_ends = textbatch.joined([_lower_words(text, spec) if flag & textbatch.NOT_SIMPLE else text
                                               for text, flag in zip(folded, flags[todo].tolist())])
        data, ends = textbatch.splice(batch.data, batch.ends, todo, new_data, new_ends)
    else:
        data, ends = batch.data.copy(), batch.ends                                 # a writable copy
    # only text with non-ASCII bytes can hold a non-word character the loop would read as a word byte (ASCII text
    # is not scanned; for simple characters, `wordfolds.word_breaks` says what `simple_chars` does); the texts
    # not folded above read `fold_words`' folds in bytes (`wordfolds`: Latin letters, `ʼ`, `_emphasis_`, digraphs)
    plain = np.ones(len(ends), np.bool_)
    plain[todo] = False
    digraphs = fold_plain(data, ends, np.flatnonzero(flags & textbatch.NON_ASCII), plain, spec)
    if spec.fold_escapes or spec.join_contractions:    # (after the blanking: `’` is `'` then, `–` a space)
        mark_joins(data, spec.fold_escapes, spec.join_contractions)
    return hashloops.word_hashes(data, ends, POW, digraphs)


def _unit_text(batch: textbatch.Encoded, k: int, spec: DedupSpec, fold: int, stripped: str | None) -> str:
    """Text k of `batch` folded (when `fold`: 1, or 2 when it holds `textmarks` marks); `stripped`: the text
    without its line-number and timestamp prefixes (`lineprefix`; dropped before the folds, which may join
    lines), None when it has none. Of `_fold`, a text not folded (simple characters only) can change only in
    `fold_words`' folds, its spelling variants (`marks.SPELLING`) and the look-alikes these make (`ё` → `е`, read
    as `e`)."""
    if fold:    # (a keycap list, or a full-width link read in ASCII first, holds marks the byte scan misses)
        if stripped is None and fold == 1 and "\u20e3" not in batch.texts[k] and FULLWIDTH_LINK not in batch.texts[k]:
            return _fold(batch.texts[k], spec, batch.folds_of(k), marks=False)
        return _fold(batch.texts[k] if stripped is None else stripped, spec)
    text = fold_words(batch.texts[k] if stripped is None else stripped, spec.fold_unicode, spec.fold_markup)
    spelled = fold_spelling(text) if spec.fold_pointing else text
    return spelled if spelled is text or not spec.fold_confusables else fold_confusables(spelled)


_ASTRAL = re.compile("[\U00010000-\U0010ffff]")


def _lower_words(text: str, spec: DedupSpec) -> str:
    """A folded text with non-simple characters as the word loop reads the regex's words in it: in lower case, its
    non-word BMP characters then blanked by `blank_non_words`; one with an astral character (which that loop does
    not decode) re-spelled as its regex words (~90 µs a 4 KB text; the lower case alone ~5), escapes read and
    contractions joined there (`wordhash.spell_words`; one per line: `wordfolds.mark_joins` joins none again)."""
    low = text.lower()
    if _ASTRAL.search(low) is None:
        return low
    return spell_words(low, mark_words()[1] if spec.marks_in_words else WORD, spec.fold_escapes,
                       spec.join_contractions, "\n")


def _needs_fold(batch: textbatch.Encoded, k: int, spec: DedupSpec) -> bool:
    text, flag = batch.texts[k], batch.flags[k]
    if flag & textbatch.NOT_SIMPLE or (spec.fold_markup and has_markup(text)):
        return True
    if spec.fold_entities and "&" in text and entity_in(text):
        return True
    return spec.fold_unicode and not batch.nfkc(k)


def shingle_sets(texts: Sequence[str], spec: DedupSpec) -> list[np.ndarray]:
    """Per document, its sorted distinct uint32 shingle hashes (its shingle *set*), computed in batches."""
    sets: list[np.ndarray] = []
    for start in range(0, len(texts), CHUNK_DOCS):
        sets.extend(sets_of(*_chunk_shingles(texts[start: start + CHUNK_DOCS], spec)))
    return sets


def sets_of(hashes: np.ndarray, offsets: np.ndarray) -> list[np.ndarray]:
    """The sorted distinct values of each run hashes[offsets[d]:offsets[d + 1]], one array per run
    (`distinct_runs`: `hashes` is sorted and compacted in place)."""
    values, kept = distinct_runs(hashes, offsets)
    return np.split(values, kept[1:-1])


def distinct_runs(hashes: np.ndarray, offsets: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Each run hashes[offsets[d]:offsets[d + 1]] as its sorted distinct values, back to back: (values, a view of
    `hashes`, which is sorted and compacted in place; their offsets int64 [d + 1])."""
    # One small sort per document (numpy's SIMD sort of ~500 uint32) was measured 10× faster than one
    # sort of the whole batch keyed by (doc, hash) as uint64; numba's sort ~7× slower.
    bounds = offsets.tolist()
    for lo, hi in zip(bounds[:-1], bounds[1:]):
        hashes[lo:hi].sort()
    return hashloops.distinct_runs(hashes, np.asarray(offsets, np.int64))


def shingles(text: str, spec: DedupSpec) -> np.ndarray:
    """Sorted distinct uint32 shingle hashes of one document."""
    return shingle_sets([text], spec)[0]


@lru_cache(maxsize=8)
def permutations(num_perm: int, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """datasketch's affine32 permutation parameters (a odd, b), both uint32 [num_perm], read-only (made once per
    process: datasketch draws them from its generator, ~0.3 ms a shard)."""
    a, b = (p.astype(np.uint32) for p in MinHash(num_perm=num_perm, seed=seed, scheme="affine32").permutations)
    a.flags.writeable = b.flags.writeable = False
    return a, b


def signatures(texts: Sequence[str], spec: DedupSpec, seed: int = 1) -> np.ndarray:
    """MinHash signatures, uint32 [len(texts), num_perm]; row i equals datasketch's hashvalues for doc i."""
    sigs = np.empty((len(texts), spec.num_perm), dtype=np.uint32)     # [n, P]
    for _ in _signed_chunks(texts, spec, seed, sigs, None):
        pass
    return sigs


def signatures_and_shingles(texts: Sequence[str], spec: DedupSpec, seed: int = 1,
                            encoded: textbatch.Encoded | None = None) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """`signatures` and the shingle hashes they were made of: (uint32 [n, P], uint32 [S] as shingled, with
    repeats, int64 offsets [n + 1]); `sets_of(hashes, offsets)` gives the shingle sets without shingling again.
    `encoded`: the texts already encoded (`textbatch.Encoded.of(texts)`, as clean has them)."""
    sigs = np.empty((len(texts), spec.num_perm), dtype=np.uint32)     # [n, P]
    chunks = list(_signed_chunks(texts, spec, seed, sigs, encoded))
    if not chunks:
        return sigs, np.zeros(0, np.uint32), np.zeros(1, np.int64)
    bases = np.cumsum([0] + [len(h) for h, _ in chunks[:-1]])
    offsets = np.concatenate([[0]] + [o[1:] + base for (_, o), base in zip(chunks, bases)])
    return sigs, np.concatenate([h for h, _ in chunks]), offsets.astype(np.int64)


def _signed_chunks(texts: Sequence[str], spec: DedupSpec, seed: int, sigs: np.ndarray,
                   encoded: textbatch.Encoded | None):
    """Fill sigs chunk by chunk (CHUNK_DOCS documents: bounded memory), yielding each chunk's shingles."""
    a, b = permutations(spec.num_perm, seed)
    for start in range(0, len(texts), CHUNK_DOCS):
        stop = min(start + CHUNK_DOCS, len(texts))
        part = None if encoded is None else encoded.chunk(start, stop)
        hashes, offsets = _chunk_shingles(texts[start:stop], spec, part)            # [S], [m + 1]
        hashloops.minhash_rows(hashes, offsets, a, b, sigs[start:stop])
        yield hashes, offsets


@dataclass
class DedupResult:
    """Outcome of near-duplicate detection; every list is sorted, so equal inputs give equal results."""

    dropped: list[tuple[str, str, float]]     # (dropped id, id of the document kept for it, their similarity)
    clusters: int                             # keepers that removed ≥ 1 document
    candidate_pairs: int                      # distinct pairs sharing ≥ 1 LSH bucket
    verified_pairs: int                       # candidate pairs with similarity ≥ threshold (the links)
    bands: int
    rows: int
    pairs: list[tuple[str, str, float]] = field(default_factory=list)  # the links (id_a < id_b, sim)
    # [c, 2] candidate pairs as indices into `ids` (for the audit's sample of candidates); not part of equality
    candidate_index: np.ndarray = field(default_factory=lambda: np.zeros((0, 2), np.int64), compare=False,
                                        repr=False)


def near_duplicates(
    ids: Sequence[str],
    sigs: np.ndarray,
    scores: Sequence[float] | None,
    spec: DedupSpec,
    shingle_sets_fn: ShingleSetsFn | None = None,
) -> DedupResult:
    """Decide near duplicates: visit documents best-first (highest score, ties by smallest id); each one not yet
    removed is kept and removes the not-yet-decided documents linked to it (see `lsh.greedy_keepers`).

    A candidate pair is a link when its similarity is ≥ threshold: the fraction of equal signature slots (the
    MinHash Jaccard estimate) or, when `shingle_sets_fn(ids)` returns those documents' shingle sets (e.g.
    `lambda ids: shingle_sets([text_of[i] for i in ids], spec)`), their exact Jaccard; only documents in
    candidate pairs are asked for, in batches. So every dropped document is within the threshold of the
    document kept for it (no transitive chains). Exact verification is cheap (~10 % of the detection time)
    and removes the estimate's noise near the threshold.
    """
    if len(ids) != len(sigs) or (scores is not None and len(scores) != len(ids)):
        raise ValueError("ids, sigs and scores must have one entry per document")
    # Every candidate is now checked (exactly, or by the estimate) before it links anything, so the banding
    # leans to recall in both modes: a false candidate costs one comparison, a missed one is lost for good.
    bands, rows = spec_banding(spec)
    order = np.asarray(scores if scores is not None else np.zeros(len(ids)), dtype=np.float64)
    pairs = candidate_pairs(sigs, bands, rows,                          # [c, 2] int64, i < j, sorted
                            lambda group: min(group.tolist(), key=lambda i: (-order[i], ids[i])))
    similarity = _similarity_fn(ids, sigs, shingle_sets_fn)
    sims = similarity(pairs[:, 0], pairs[:, 1])                         # [c]
    keep = are_duplicates(sims, spec.threshold)
    linked, linked_sims = pairs[keep], sims[keep]                       # [e, 2], [e]

    involved = sorted_unique(linked.ravel()).tolist()                   # only linked documents need a rank
    rank = np.zeros(len(ids), dtype=np.int64)
    rank[sorted(involved, key=lambda i: (-order[i], ids[i]))] = np.arange(len(involved))
    removed, edge = greedy_keepers(linked, rank)                        # [d], [d]
    keeper = np.where(linked[edge, 0] == removed, linked[edge, 1], linked[edge, 0])
    return DedupResult(
        dropped=sorted((ids[i], ids[k], round(float(s), 6))
                       for i, k, s in zip(removed.tolist(), keeper.tolist(), linked_sims[edge].tolist())),
        clusters=len(set(keeper.tolist())),
        candidate_pairs=len(pairs),
        verified_pairs=len(linked),
        bands=bands,
        rows=rows,
        pairs=sorted((*sorted((ids[i], ids[j])), round(float(s), 6))
                     for (i, j), s in zip(linked.tolist(), linked_sims.tolist())),
        candidate_index=pairs,
    )


def estimated_jaccard(sigs_i: np.ndarray, sigs_j: np.ndarray) -> np.ndarray:
    """The MinHash estimate of each pair's Jaccard: share of equal slots of rows sigs_i[k], sigs_j[k] ([k, P])."""
    out = np.empty(len(sigs_i), dtype=np.float64)
    for s in range(0, len(sigs_i), 16_384):                             # bounded [batch, P] comparisons
        out[s: s + 16_384] = (sigs_i[s: s + 16_384] == sigs_j[s: s + 16_384]).mean(axis=1)
    return out


def exact_jaccard_pairs(sets: Mapping[int, np.ndarray], i: Sequence[int], j: Sequence[int]) -> np.ndarray:
    """Exact Jaccard of each pair (sets[i[k]], sets[j[k]]) of sorted, distinct, non-empty shingle sets."""
    i, j = np.asarray(i, dtype=np.int64), np.asarray(j, dtype=np.int64)
    out = np.empty(len(i), dtype=np.float64)
    # The compiled merge reads one concatenation of the sets involved: made per PAIR_BATCH pairs, so the copy
    # stays ≤ 2 × PAIR_BATCH sets whatever the caller holds (the out-of-core verification sizes its ranges by
    # its memory budget).
    for s in range(0, len(i), PAIR_BATCH):
        bi, bj = i[s: s + PAIR_BATCH], j[s: s + PAIR_BATCH]
        docs = sorted_unique(np.concatenate([bi, bj]))                  # [u] each set copied once
        keys = docs.tolist()
        lengths = np.fromiter((len(sets[d]) for d in keys), np.int64, len(keys))
        offsets = np.concatenate([[0], np.cumsum(lengths)])             # [u + 1]
        values = np.concatenate([sets[d] for d in keys])
        out[s: s + PAIR_BATCH] = jaccard_of_runs(values, offsets, np.searchsorted(docs, bi), np.searchsorted(docs, bj))
    return out


def jaccard_of_runs(values: np.ndarray, offsets: np.ndarray, pi: np.ndarray, pj: np.ndarray) -> np.ndarray:
    """float64 [k]: exact Jaccard of the sets pi[k] and pj[k], set d being the sorted distinct
    values[offsets[d]:offsets[d + 1]] (`distinct_runs`' layout; non-empty)."""
    sizes = np.diff(offsets)
    inter = hashloops.intersection_sizes(values, offsets, pi, pj)
    return inter / (sizes[pi] + sizes[pj] - inter)


def _similarity_fn(
    ids: Sequence[str], sigs: np.ndarray, shingle_sets_fn: ShingleSetsFn | None
) -> Callable[[np.ndarray, np.ndarray], np.ndarray]:
    """similarity(i [k], j [k]) -> float64 [k]: estimated (signatures) or exact (shingle sets) Jaccard."""
    if shingle_sets_fn is None:
        return lambda i, j: estimated_jaccard(sigs[i], sigs[j])

    sets: dict[int, np.ndarray] = {}    # only documents that appear in candidate pairs are shingled

    def exact(i: np.ndarray, j: np.ndarray) -> np.ndarray:
        missing = [d for d in sorted_unique(np.concatenate([i, j])).tolist() if d not in sets]
        for s in range(0, len(missing), CHUNK_DOCS):
            batch = missing[s: s + CHUNK_DOCS]
            sets.update(zip(batch, shingle_sets_fn([ids[d] for d in batch])))
        return exact_jaccard_pairs(sets, i.tolist(), j.tolist())
    return exact
