"""Near dedup without chains, and an audit that can fail: brute-force exact Jaccard over a document sample."""

from __future__ import annotations

from itertools import combinations

import numpy as np
import pyarrow as pa
import pytest

from specs.clean import CleanSpec, DedupSpec
from tasks.data.cleanup.cleaning import deduplicate
from tasks.data.dedup.dedup_audit import audit, audit_sample, pairwise_jaccard
from tasks.data.dedup.lsh import clusters_of
from tasks.data.dedup.minhash import near_duplicates, shingle_sets, signatures
from tests.helpers.synthetic_corpus import cluster_pairs, exact_jaccard, make_corpus, pair_scores

WORDS = [f"w{k}x" for k in range(400)]          # distinct words: 5-gram overlap is exactly the shared window


def window(start: int, length: int = 200) -> str:
    return " ".join(WORDS[start:start + length])


def chain(shift: int) -> tuple[list[str], list[str], list[float]]:
    """A, B, C: each the previous shifted by `shift` words; A has the best score."""
    return ["a", "b", "c"], [window(0), window(shift), window(2 * shift)], [0.9, 0.5, 0.4]


def run(ids, texts, scores, spec):
    index = {d: i for i, d in enumerate(ids)}
    verify = (lambda batch: shingle_sets([texts[index[d]] for d in batch], spec)) if spec.verify else None
    return near_duplicates(ids, signatures(texts, spec), scores, spec, verify)


@pytest.mark.parametrize("verify", [True, False])
def test_chain_keeps_the_far_end(verify):
    ids, texts, scores = chain(15)
    j_ab, j_bc, j_ac = (exact_jaccard(texts[x], texts[y]) for x, y in ((0, 1), (1, 2), (0, 2)))
    assert j_ab >= 0.8 and j_bc >= 0.8 and j_ac < 0.8      # 181/211 = 0.858, 0.858, 166/226 = 0.735
    spec = DedupSpec(verify=verify)
    result = run(ids, texts, scores, spec)
    assert [(d, k) for d, k, _ in result.dropped] == [("b", "a")]   # C stays: it is far from A, its keeper
    if verify:
        assert result.dropped[0][2] == pytest.approx(j_ab, abs=1e-6)
    # union-find over the same links would have removed C for A
    links = np.array([[ids.index(a), ids.index(b)] for a, b, _ in result.pairs])
    assert clusters_of(links, 3) == [[0, 1, 2]]


def test_close_chain_end_is_removed_for_the_keeper():
    ids, texts, scores = chain(8)                          # J(A, C) = 180/212 = 0.849 ≥ 0.8
    result = run(ids, texts, scores, DedupSpec())
    assert [(d, k) for d, k, _ in result.dropped] == [("b", "a"), ("c", "a")]
    assert result.dropped[1][2] == pytest.approx(exact_jaccard(texts[0], texts[2]), abs=1e-6)
    # the best document decides: with C best, A and B go for C only where they are close to C
    result = run(ids, texts, [0.1, 0.2, 0.9], DedupSpec())
    assert [(d, k) for d, k, _ in result.dropped] == [("a", "c"), ("b", "c")]


def test_ledger_names_the_keeper_and_its_similarity():
    ids, texts, scores = chain(15)
    spec = CleanSpec()
    rows = pa.table({"id": ids, "quality": scores, "reason": [None] * 3, "text": texts,
                     "exact_key": [f"k{i}" for i in range(3)]})
    report = deduplicate(rows, signatures(texts, spec.dedup), spec, seed=1)
    assert report["reasons"] == {1: ("near_duplicate", "a", f"Jaccard {exact_jaccard(texts[0], texts[1]):.3f}")}
    summary = report["summary"]
    assert summary["near_dropped"] == 1 and summary["audit_pairs"] == 3
    # exhaustive on 3 documents: true pairs A–B and B–C; predicted A–B only
    assert (summary["precision"], summary["recall"]) == (1.0, 0.5) and summary["f1"] == pytest.approx(2 / 3)
    assert report["detail"]["audit"]["residual"] == 0    # B–C is not left with both kept: B was removed


def test_pairwise_jaccard_equals_python_sets():
    corpus = make_corpus(40, seed=3, family_rate=0.5)
    texts = corpus.texts + [corpus.texts[0], "", corpus.texts[1][: len(corpus.texts[1]) // 2]]
    sets = shingle_sets(texts, DedupSpec())
    i, j, jac = pairwise_jaccard(sets)
    found = {(a, b): v for a, b, v in zip(i.tolist(), j.tolist(), jac.tolist())}
    py = [set(s.tolist()) for s in sets]
    for a, b in combinations(range(len(texts)), 2):
        expected = len(py[a] & py[b]) / len(py[a] | py[b])
        assert found.get((a, b), 0.0) == pytest.approx(expected, abs=1e-12), (a, b)
        if expected and texts[a] and texts[b]:   # and on the words themselves (no hash involved)
            assert expected == pytest.approx(exact_jaccard(texts[a], texts[b]), abs=1e-12)
    assert found[(0, 40)] == 1.0 and 0.4 < found[(1, 42)] < 0.6 and len(found) < len(texts) ** 2 / 4


@pytest.fixture(scope="module")
def corpus():
    return make_corpus(1200, seed=7)


def audited(corpus, spec, seed=0):
    result = run(corpus.ids, corpus.texts, corpus.scores, spec)
    text = dict(zip(corpus.ids, corpus.texts))
    return result, audit(corpus.ids, text.__getitem__, result, spec, seed)


def independent_scores(corpus, result, threshold=0.8):
    """Pair precision / recall from the generator's ground truth and the groups, without the audit's code."""
    index = {d: i for i, d in enumerate(corpus.ids)}
    groups: dict[str, list[int]] = {}
    for dropped, kept, _ in result.dropped:
        groups.setdefault(kept, [index[kept]]).append(index[dropped])
    return pair_scores(cluster_pairs(list(groups.values())), corpus.true_pairs(threshold))


def test_audit_recall_falls_with_bad_banding(corpus):
    good_result, good = audited(corpus, DedupSpec(audit_sample=5000))
    bad_result, bad = audited(corpus, DedupSpec(audit_sample=5000, bands=1, rows=128))
    # exhaustive (sample ≥ corpus): the brute force finds exactly the planted pairs ≥ 0.8
    assert good["audit_pairs"] == 1200 * 1199 // 2 and good["true_pairs"] == len(corpus.true_pairs(0.8))
    assert bad["recall"] < 0.5 < 0.95 <= good["recall"]     # 1 × 128 finds only near-verbatim copies
    assert good["f1"] >= 0.95 and bad["p_candidate_at_threshold"] < 1e-9 < 0.9 < good["p_candidate_at_threshold"]
    for result, report in ((good_result, good), (bad_result, bad)):
        p, r, _ = independent_scores(corpus, result)
        assert (report["precision"], report["recall"]) == (pytest.approx(p, abs=1e-6), pytest.approx(r, abs=1e-6))
    assert bad["residual"] > good["residual"]


def test_audit_precision_below_one_on_signature_estimates(corpus):
    loose = DedupSpec(audit_sample=5000, verify=False, num_perm=32, bands=8, rows=4)
    result, report = audited(corpus, loose)
    p, r, _ = independent_scores(corpus, result)
    assert report["precision"] < 0.97 and report["precision"] == pytest.approx(p, abs=1e-6)
    assert report["recall"] == pytest.approx(r, abs=1e-6)
    _, verified = audited(corpus, DedupSpec(audit_sample=5000, num_perm=32, bands=8, rows=4))
    assert verified["precision"] > report["precision"]


def test_sampled_audit_is_seeded_and_has_positives(corpus):
    spec = DedupSpec(audit_sample=300, precision_sample=40)
    result, first = audited(corpus, spec, seed=5)
    assert first == audited(corpus, spec, seed=5)[1]
    assert audited(corpus, spec, seed=6)[1] != first                       # another seed, another sample
    assert 300 < first["audit_docs"] <= 380 and first["true_pairs"] >= 30   # the candidate pairs' documents
    sample = audit_sample(len(corpus.ids), result.candidate_index, spec, 5)
    assert len(sample) == first["audit_docs"] and np.all(np.diff(sample) > 0)
    assert audit(corpus.ids, dict(zip(corpus.ids, corpus.texts)).__getitem__, result,
                 DedupSpec(audit_sample=0, precision_sample=0), 5)["precision"] is None
