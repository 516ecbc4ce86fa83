"""MinHash near-dedup: datasketch compatibility, stable shingles, planted duplicates found, keep rule, determinism."""

from __future__ import annotations

import re
import subprocess
import sys
from itertools import pairwise
from pathlib import Path

import numpy as np
import pytest
from datasketch import LeanMinHash, MinHash, MinHashLSH

from specs.clean import DedupSpec
from tasks.data.dedup import minhash
from tasks.data.dedup.lsh import candidate_pairs, choose_banding
from tasks.data.dedup.minhash import near_duplicates, s_curve, shingle_sets, shingles, signatures
from tests.helpers.synthetic_corpus import cluster_pairs, exact_jaccard, make_corpus, pair_scores
from tasks.data.dedup.wordhash import word_hashes
from tasks.data.dedup.marks import fold_digraphs, fold_latin

REPO = Path(__file__).resolve().parents[1]
FOX = "The quick brown fox jumps over the lazy dog, again and again."


@pytest.fixture(scope="module")
def corpus():
    return make_corpus(3000, seed=11)


@pytest.fixture(scope="module")
def sigs(corpus):
    return signatures(corpus.texts, DedupSpec())


def exact_fn(corpus, spec):
    index = {doc_id: i for i, doc_id in enumerate(corpus.ids)}
    return lambda ids: shingle_sets([corpus.texts[index[d]] for d in ids], spec)


def predicted_clusters(corpus, result) -> list[list[int]]:
    index = {doc_id: i for i, doc_id in enumerate(corpus.ids)}
    groups: dict[str, list[int]] = {}
    for dropped, kept, _ in result.dropped:
        groups.setdefault(kept, [index[kept]]).append(index[dropped])
    return list(groups.values())


def f1_against_truth(corpus, result, threshold=0.8) -> tuple[float, float, float]:
    predicted = cluster_pairs(predicted_clusters(corpus, result))
    extra = {p for p in predicted - corpus.pair_jaccard.keys()
             if exact_jaccard(corpus.texts[p[0]], corpus.texts[p[1]]) >= threshold}
    return pair_scores(predicted, corpus.true_pairs(threshold) | extra)


def test_shingles_are_stable_and_normalized():
    # Golden values: the same on every machine, process and Python hash seed.
    assert shingles(FOX, DedupSpec()).tolist() == [
        113988696, 191647464, 788065952, 1493546701, 1652040582, 2170549824, 3468372547, 3546938170]
    assert shingles(FOX, DedupSpec(shingle="char", shingle_size=4))[:3].tolist() == [617847, 50779075, 60085756]
    code = ("from specs.clean import DedupSpec; from tasks.data.dedup.minhash import shingles; "
            f"print(shingles({FOX!r}, DedupSpec()).tolist())")
    other = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True,
                           env={"PYTHONHASHSEED": "123", "PYTHONPATH": str(REPO)}, cwd=REPO)
    assert other.stdout.strip() == str(shingles(FOX, DedupSpec()).tolist())
    # lowercase `\w+` words: case, punctuation and spacing do not matter; non-ASCII words are words
    assert np.array_equal(shingles("Hello, WORLD!  this is—fine", DedupSpec(shingle_size=2)),
                          shingles("hello world this is fine", DedupSpec(shingle_size=2)))
    assert len(shingles("Über straße — “quoted” text here now", DedupSpec(shingle_size=2))) == 5  # 6 words
    # shorter than n units: one shingle of the whole text; empty and punctuation-only texts still get one
    for text in ("two words", "", "!!!"):
        assert len(shingles(text, DedupSpec())) == 1
    assert not np.array_equal(shingles("two words", DedupSpec()), shingles("other words", DedupSpec()))


@pytest.mark.parametrize("num_perm", [64, 100])    # 100: a last permutation tile shorter than the others
def test_signatures_equal_datasketch_minhash(num_perm):
    spec = DedupSpec(num_perm=num_perm)
    texts = [FOX, "short", "", "Ünïcode wörds “quoted” here and there again", FOX.upper()]
    rows = signatures(texts, spec, seed=7)
    assert rows.shape == (5, num_perm) and rows.dtype == np.uint32
    for text, row in zip(texts, rows):
        m = MinHash(num_perm=num_perm, seed=7, hashfunc=int)  # our shingle hashes are the datasketch input hashes
        m.update_batch(shingles(text, spec).tolist())
        assert np.array_equal(m.hashvalues, row)
    assert np.array_equal(rows[0], rows[4])
    assert signatures([], spec).shape == (0, num_perm)


def test_chunking_does_not_change_signatures(monkeypatch, corpus):
    texts = corpus.texts[:300] + ["word " * 3000]  # one document longer than a whole chunk of others
    expected = signatures(texts, DedupSpec())
    monkeypatch.setattr(minhash, "CHUNK_DOCS", 7)
    assert np.array_equal(signatures(texts, DedupSpec()), expected)


M64 = 2**64 - 1


def fmix64_int(h: int) -> int:
    h ^= h >> 33
    h = (h * 0xFF51AFD7ED558CCD) & M64
    h ^= h >> 33
    h = (h * 0xC4CEB9FE1A85EC53) & M64
    return h ^ (h >> 33)


def fmix32_int(h: int) -> int:
    h ^= h >> 16
    h = (h * 0x85EBCA6B) & 0xFFFFFFFF
    h ^= h >> 13
    h = (h * 0xC2B2AE35) & 0xFFFFFFFF
    return h ^ (h >> 16)


def reference_signature(text: str, n: int, a: list[int], b: list[int]) -> list[int]:
    """One document, plain Python ints: regex words (escapes read as spaces, contractions joined: tails first,
    then apostrophes), the multilinear word hash, n-gram polynomial, MinHash."""
    pow_ = [(fmix64_int((k + 0x9E3779B97F4A7C15) & M64) | 1) for k in range(4096)]
    folded = re.sub(r"\\[ntr]", "  ", fold_digraphs(fold_latin(text.lower())))
    folded = re.sub(r"(?<=\w)['\u2019](?=\w)", "", re.sub(r"(?<=\w) (?=(?:t|s|d|m|ll|re|ve)(?!\w))", "", folded))
    units = [fmix64_int(sum(pow_[k & 4095] * (c + 1) for k, c in enumerate(w.encode())) & M64)
             for w in re.findall(r"\w+", folded)]
    windows = [units[s: s + n] for s in range(len(units) - n + 1)] or [units]
    grams = []
    for window in windows:
        g = window[0]
        for u in window[1:]:
            g = (g * 0x9E3779B97F4A7C15 + u) & M64
        grams.append(fmix64_int(g) >> 32)
    hashed = [fmix32_int(h) for h in grams]
    return [min((ap * h + bp) & 0xFFFFFFFF for h in hashed) for ap, bp in zip(a, b)]


def test_batched_signatures_equal_a_per_document_reference():
    # Edge sizes in one batch: no word, shorter than the shingle, exactly one shingle, one more, very long
    # (a word over 4096 bytes wraps the per-offset multipliers), non-ASCII words and a word of 70 bytes.
    texts = ["two words here", "one two three four five", "One, two; three four five six!",
             "x" * 5000 + " tail of five words here " + "y" * 70, "Ünïcode wörds “quoted” here and there again",
             " ".join(f"w{k % 97}" for k in range(4000)), "a b c d", "é",
             "It's a JSON\\nstring: don't you see\\tit? I m sure we ll t'x it s fine",
             "rock\u2019n\u2019roll isn\u2019t 'quoted' nor d'  s \\\\n \\N x\\"]
    spec = DedupSpec(num_perm=16)
    a, b = (p.tolist() for p in minhash.permutations(16, 3))
    rows = signatures(["", "!!!", *texts], spec, seed=3)
    for text, row in zip(texts, rows[2:]):
        assert row.tolist() == reference_signature(text, spec.shingle_size, a, b), text[:30]
    assert [len(shingles(t, spec)) for t in texts[:3]] == [1, 1, 2]
    # no word at all: one shingle of the text's own keyed hash, so "" and "!!!" differ
    assert not np.array_equal(rows[0], rows[1])
    assert all(np.array_equal(signatures([t], spec, seed=3)[0], r) for t, r in zip(["", "!!!", *texts], rows))


def test_candidates_equal_datasketch_lsh(corpus, sigs):
    spec = DedupSpec()
    bands, rows = choose_banding(spec.threshold, spec.num_perm, spec.verify)
    lsh = MinHashLSH(num_perm=spec.num_perm, params=(bands, rows))
    subset = sigs[:1500]
    with lsh.insertion_session() as session:
        for i, row in enumerate(subset):
            session.insert(i, LeanMinHash(seed=1, hashvalues=row, scheme="affine32"))
    theirs = {(min(i, j), max(i, j)) for i, row in enumerate(subset)
              for j in lsh.query(LeanMinHash(seed=1, hashvalues=row, scheme="affine32")) if i != j}
    ours = {tuple(p) for p in candidate_pairs(subset, bands, rows).tolist()}
    assert ours == theirs and len(ours) > 100


@pytest.mark.parametrize("exact", [True, False], ids=["exact-verify", "estimated-verify"])
def test_planted_near_duplicates_found(corpus, sigs, exact):
    spec = DedupSpec()
    result = near_duplicates(corpus.ids, sigs, corpus.scores, spec, exact_fn(corpus, spec) if exact else None)
    precision, recall, f1 = f1_against_truth(corpus, result)
    assert f1 >= (0.95 if exact else 0.9), (precision, recall, f1)
    assert result.candidate_pairs >= result.verified_pairs > 0 and result.clusters > 0
    # distinct documents are kept: only members of planted families are ever dropped
    planted = {i for family in corpus.families for i in family}
    index = {doc_id: i for i, doc_id in enumerate(corpus.ids)}
    assert all(index[dropped] in planted for dropped, _, _ in result.dropped)
    assert all(sim >= spec.threshold for *_, sim in result.pairs)


def test_distinct_corpus_keeps_everything():
    corpus = make_corpus(1500, seed=5, family_rate=0.0)
    result = near_duplicates(corpus.ids, signatures(corpus.texts, DedupSpec()), corpus.scores, DedupSpec())
    assert result.dropped == [] and result.clusters == 0


def test_kept_document_has_the_best_score(corpus, sigs):
    score = dict(zip(corpus.ids, corpus.scores))
    result = near_duplicates(corpus.ids, sigs, corpus.scores, DedupSpec())
    for dropped, kept, similarity in result.dropped:
        assert score[kept] >= score[dropped] and 0 < similarity <= 1
    # ties go to the smallest id; without scores every document ties
    texts = [FOX * 3, FOX * 3 + " extra", "unrelated text " * 20, FOX * 3]
    ids = ["d", "b", "a", "c"]
    tied = near_duplicates(ids, signatures(texts, DedupSpec()), [0.5, 0.5, 0.9, 0.5], DedupSpec())
    assert [(d, k) for d, k, _ in tied.dropped] == [("c", "b"), ("d", "b")]
    best = near_duplicates(ids, signatures(texts, DedupSpec()), [0.1, 0.2, 0.9, 0.7], DedupSpec())
    assert [(d, k) for d, k, _ in best.dropped] == [("b", "c"), ("d", "c")]
    assert near_duplicates(ids, signatures(texts, DedupSpec()), None, DedupSpec()).dropped == tied.dropped


def test_deterministic(corpus, sigs):
    spec = DedupSpec()
    again = signatures(corpus.texts, spec)
    assert np.array_equal(sigs, again)
    first = near_duplicates(corpus.ids, sigs, corpus.scores, spec, exact_fn(corpus, spec))
    second = near_duplicates(corpus.ids, again, corpus.scores, spec, exact_fn(corpus, spec))
    assert first == second and first.dropped == sorted(first.dropped)


def test_s_curve_and_banding():
    verify = choose_banding(0.8, 128, True)
    plain = choose_banding(0.8, 128, False)
    assert verify == (16, 8) and plain == (9, 13)
    for bands, rows in (verify, plain):
        curve = s_curve(bands, rows)
        assert len(curve) == 21 and curve[0] == (0.0, 0.0) and curve[-1] == (1.0, 1.0)
        assert all(p1 <= p2 for (_, p1), (_, p2) in pairwise(curve))
    at = dict(s_curve(*plain))
    assert 0.3 <= at[0.8] <= 0.7          # without verification the S-curve is centred near the threshold
    at = dict(s_curve(*verify))
    assert at[0.8] >= 0.9 and at[0.5] <= 0.1   # with verification it leans to recall, verification cleans up
    for threshold in (0.5, 0.7, 0.9):
        for num_perm in (16, 64, 256):
            b, r = choose_banding(threshold, num_perm, True)
            assert b * r <= num_perm and 1 - (1 - threshold**r) ** b >= 0.89


def test_one_banding_rule_and_one_link_rule():
    """`spec_banding` and `are_duplicates` are what the in-memory path, the out-of-core path and the audit read:
    a spec's own b × r wins, else the recall-leaning choice; a pair exactly at the threshold links."""
    from tasks.data.dedup.lsh import are_duplicates, spec_banding

    assert spec_banding(DedupSpec(bands=4, rows=8)) == (4, 8)
    assert spec_banding(DedupSpec(threshold=0.8, num_perm=128)) == choose_banding(0.8, 128, True) == (16, 8)
    assert are_duplicates(np.array([0.79, 0.8, 0.81]), 0.8).tolist() == [False, True, True]


def test_explicit_banding_is_honoured(corpus, sigs):
    spec = DedupSpec(bands=4, rows=8)
    result = near_duplicates(corpus.ids, sigs, corpus.scores, spec)
    assert (result.bands, result.rows) == (4, 8)
    assert result.candidate_pairs == len(candidate_pairs(sigs, 4, 8))
    with pytest.raises(ValueError):
        DedupSpec(bands=20, rows=8)


def test_compiled_word_hashes_equal_bytewise():
    # Every word length from 1 to 300 bytes and one of 5,000 (past the 4,096 multipliers), non-ASCII words,
    # digits and "_", punctuation runs, empty and word-less documents, a word ending the batch.
    rng = np.random.default_rng(4)
    alphabet = list("abcdefghijklmnopqrstuvwxyz0123456789_") + ["é", "ß", "д", "中", "🙂"]
    texts = []
    for _ in range(60):
        words = ["".join(rng.choice(alphabet, size=int(rng.integers(1, 300 if rng.random() < 0.2 else 12))))
                 for _ in range(int(rng.integers(0, 80)))]
        texts.append(rng.choice([" ", ", ", " -- ", "\n"]).join(words))
    texts += ["", "!!! ...", "x" * 5000, "tail"]
    compiled, counts = word_hashes(texts)
    bytewise, counts_bw = word_hashes(texts, bytewise=True)
    assert np.array_equal(compiled, bytewise) and np.array_equal(counts, counts_bw)
    assert counts.tolist() == [len(re.findall(r"\w+", t.lower())) for t in texts]
    # equal words hash equally wherever they stand; different words (here: all distinct) differently
    words = [w for t in texts for w in re.findall(r"\w+", t.lower())]
    by_word = {}
    for w, h in zip(words, compiled.tolist()):
        assert by_word.setdefault(w, h) == h
    assert len(set(by_word.values())) == len(by_word)


def test_exact_jaccard_pairs_equal_python_sets(monkeypatch):
    # overlapping, disjoint, identical, nested and one-element sets, pairs in both orders and repeated
    rng = np.random.default_rng(5)
    sets = {d: np.unique(rng.integers(0, 60, int(rng.integers(1, 40))).astype(np.uint32)) for d in range(0, 40, 3)}
    sets[100], sets[101] = np.array([7], np.uint32), np.arange(0, 60, dtype=np.uint32)
    keys = sorted(sets)
    i = [keys[k] for k in rng.integers(0, len(keys), 300)] + [100, 101, 100]
    j = [keys[k] for k in rng.integers(0, len(keys), 300)] + [101, 100, 100]
    got = minhash.exact_jaccard_pairs(sets, i, j)
    monkeypatch.setattr(minhash, "PAIR_BATCH", 7)                  # many batches give the same values
    assert np.array_equal(minhash.exact_jaccard_pairs(sets, i, j), got)
    want = [len(set(sets[a].tolist()) & set(sets[b].tolist())) / len(set(sets[a].tolist()) | set(sets[b].tolist()))
            for a, b in zip(i, j)]
    assert got.tolist() == pytest.approx(want, abs=0, rel=1e-15)
    assert got[-3:].tolist() == [1 / 60, 1 / 60, 1.0] and 0 < np.count_nonzero(got == 0) < len(got)
    assert minhash.exact_jaccard_pairs(sets, [], []).shape == (0,)
