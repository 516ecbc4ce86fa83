"""Out-of-core dedup (tasks/data/dedup/dedup_global.py) against the in-memory reference (cleaning.deduplicate): the same
drops, keepers, similarities, summary and audit on a planted corpus and on the edge cases (exact duplicates,
chains, a group larger than the LSH window, pairs in many buckets), whatever the bucket count and task size."""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pytest

from specs.clean import CleanSpec
from specs.run import ExecutorSpec
from tasks.data.cleanup import cleaning, steps
from tasks.data.dedup import dedup_files, dedup_global, hashloops, lsh, minhash
from tasks.data.cleanup.normalize import exact_key
from tasks.data.records import write_table
from tests.helpers.synthetic_corpus import exact_jaccard, make_corpus

SCHEMA = pa.schema([("id", pa.string()), ("text", pa.string()), ("quality", pa.float64()),
                    ("reason", pa.string()), ("exact_key", pa.string())])
WORDS = [f"w{k}x" for k in range(600)]
ONE = ExecutorSpec(workers=1)


def write_work(work, rows, cuts, spec, seed, buckets):
    """Phase 1's files for `rows` cut into shards at `cuts` (what process_shard writes, minus the filters)."""
    stems = []
    work.mkdir(parents=True, exist_ok=True)
    for n, (lo, hi) in enumerate(zip([0, *cuts], [*cuts, len(rows)])):
        part, stem = rows[lo:hi], f"s.{n:03d}"          # a dot in the stem, as a source name may have
        base = work / stem
        ids, columns = dedup_files.row_columns(part)
        steps.write_dedup_inputs(base, ids, {**columns, "text": [r["text"] for r in part]}, spec.dedup, seed,
                                 buckets)
        write_table(part, SCHEMA, dedup_files.at(base, ".parquet"))
        stems.append(stem)
    return dedup_global.layout_of(work, stems)


def as_reasons(rows, decisions):
    """The reference's shape: row -> (reason, kept id, detail)."""
    out = {}
    for g, near, keeper, sim in zip(decisions.rows.tolist(), decisions.near.tolist(), decisions.keeper.tolist(),
                                    decisions.sim.tolist()):
        detail = f"Jaccard {round(sim, 6):.3f}" if near else "identical after normalization"
        out[g] = ("near_duplicate" if near else "exact_duplicate", rows[keeper]["id"], detail)
    return out


def both(tmp_path, rows, spec, seed=1, cuts=(), buckets=1, executor=ONE):
    reference = cleaning.deduplicate(pa.Table.from_pylist(rows, schema=SCHEMA),
                                     minhash.signatures([r["text"] for r in rows], spec.dedup, seed), spec, seed)
    layout = write_work(tmp_path, rows, list(cuts), spec, seed, buckets)
    found = dedup_global.deduplicate(layout, spec, seed, executor)
    return reference, found, as_reasons(rows, found["decisions"])


def row(i, text, quality=0.5, reason=None):
    return {"id": f"d{i:05d}", "text": text, "quality": quality, "reason": reason, "exact_key": exact_key(text)}


def planted_rows(n=2500, seed=7):
    corpus = make_corpus(n, seed=seed)
    rng = np.random.default_rng(seed)
    quality = np.round(rng.choice([0.25, 0.5, 0.75, 1.0], size=n), 6)     # many ties: the id decides
    rows = [row(i, t, float(q)) for i, (t, q) in enumerate(zip(corpus.texts, quality))]
    for k in range(0, n, 97):                                           # filtered rows take no part
        rows[k]["reason"] = "low_quality"
    for k in range(5, n, 211):                                          # exact copies, case and layout changed
        rows.append(row(len(rows), "  " + rows[k]["text"].upper().replace(" ", "\n ") + " ", 0.9))
    return rows


@pytest.mark.parametrize("memory_gb,cuts", [(2.0, ()), (1e-4, (1, 400, 401, 1700)), (3e-6, (900,))])
def test_planted_corpus_matches_the_in_memory_decision(tmp_path, memory_gb, cuts, monkeypatch):
    rows = planted_rows()
    spec = CleanSpec(memory_gb=memory_gb)
    monkeypatch.setattr(dedup_global, "MIN_VERIFY_PAIRS", 64)            # many verification ranges when small
    buckets = dedup_global.plan_buckets(len(rows), spec, ONE)
    assert (buckets == 1) == (memory_gb == 2.0)
    reference, found, reasons = both(tmp_path, rows, spec, cuts=cuts, buckets=buckets)
    assert reasons == reference["reasons"]
    assert found["summary"] == reference["summary"] and found["detail"] == reference["detail"]
    s = found["summary"]
    assert s["exact_dropped"] == 12 and s["near_dropped"] >= 100 and s["candidate_pairs"] > s["verified_pairs"]


def window(start, length=200):
    return " ".join(WORDS[start:start + length])


def test_edge_cases_match_and_are_right(tmp_path):
    rows = [row(0, window(0), 0.9), row(1, window(15), 0.5), row(2, window(30), 0.4),        # chain, far end
            row(3, window(300), 0.9), row(4, window(308), 0.5), row(5, window(316), 0.4),    # chain, close end
            row(6, window(0).upper(), 0.95), row(7, window(300), 0.2, reason="toxic")]
    # 150 copies of one text but for the last word: in most bands one (band, key) group of all 150, larger
    # than the LSH window (each member linked to its next 64 and to the group's best); each copy also shares
    # most bands, so its pairs recur in many buckets
    rows += [row(8 + k, window(100, 300) + f" tail{k}x", 0.3 + k / 1000) for k in range(150)]
    spec = CleanSpec(memory_gb=1e-6)                                     # many buckets
    buckets = dedup_global.plan_buckets(len(rows), spec, ONE)
    assert buckets > 16
    reference, found, reasons = both(tmp_path, rows, spec, cuts=(3, 4, 40), buckets=buckets)
    assert reasons == reference["reasons"] and found["summary"] == reference["summary"]
    assert reasons[0] == ("exact_duplicate", "d00006", "identical after normalization")   # 6 is better than 0
    assert reasons[1] == ("near_duplicate", "d00006", f"Jaccard {exact_jaccard(window(0), window(15)):.3f}")
    assert 2 not in reasons                                              # J(6, 2) = 0.735: kept, not chained
    assert reasons[4][1] == reasons[5][1] == "d00003" and 3 not in reasons and 7 not in reasons
    copies = [reasons.get(8 + k) for k in range(150)]
    # The best copy is linked to every member of the wide group (not only its next 64), so it removes them all;
    # before, the window left a keeper per ~65 copies.
    assert copies[-1] is None and all(c[1] == "d00157" for c in copies[:-1])
    assert found["summary"]["candidate_pairs"] < 150 * 149 // 2 - 1000
    per_bucket = sum(len(np.load(p)) for p in tmp_path.glob("cand-*.npy"))
    merged = len(np.memmap(tmp_path / "candidates.bin", dtype=np.int64, mode="r"))
    assert merged == found["summary"]["candidate_pairs"] and per_bucket > 2 * merged


def test_no_near_dedup_and_empty_inputs(tmp_path):
    rows = [row(0, window(0)), row(1, window(0).upper()), row(2, window(200), reason="language")]
    spec = CleanSpec(dedup={"near": False})
    reference, found, reasons = both(tmp_path / "a", rows, spec)
    assert reasons == reference["reasons"] == {1: ("exact_duplicate", "d00000", "identical after normalization")}
    assert found["summary"] == reference["summary"] == {"exact_dropped": 1}
    gone = [row(0, window(0), reason="toxic")]
    reference, found, reasons = both(tmp_path / "b", gone, CleanSpec())
    assert reasons == {} and found["summary"] == reference["summary"] == {"exact_dropped": 0}


def test_near_dedup_with_no_candidate_pair(tmp_path):
    """Distinct documents, near dedup on: the candidate file is empty (a tiny or duplicate-free corpus) and the
    audit and decision still run, keeping everything (numpy cannot memory-map an empty file)."""
    rows = [row(i, window(100 * i, 60)) for i in range(6)]  # disjoint word windows
    reference, found, reasons = both(tmp_path, rows, CleanSpec())
    assert reasons == reference["reasons"] == {}
    assert found["summary"]["near_dropped"] == reference["summary"]["near_dropped"] == 0
    assert found["summary"]["candidate_pairs"] == 0


def test_estimated_similarity_path_matches(tmp_path):
    rows = planted_rows(1200, seed=3)
    spec = CleanSpec(memory_gb=1e-4, dedup={"verify": False, "num_perm": 64})
    reference, found, reasons = both(tmp_path, rows, spec, cuts=(600,),
                                     buckets=dedup_global.plan_buckets(len(rows), spec, ONE))
    assert reasons == reference["reasons"] and found["summary"] == reference["summary"]
    assert found["summary"]["near_dropped"] > 30


@pytest.mark.parametrize("chunk", [1, 3, 50, 10_000])
def test_external_merge_equals_one_sort(tmp_path, chunk):
    rng = np.random.default_rng(4)
    # distinct within each run (as candidate codes and links are), repeated across runs
    runs = [np.sort(rng.choice(600, size=n, replace=False)) for n in (0, 1, 37, 200, 500)]
    paths = []
    for k, run in enumerate(runs):
        paths.append(tmp_path / f"r{k}.npy")
        np.save(paths[-1], run)
    parts = list(dedup_files.merge_sorted(paths, None, chunk))
    assert np.array_equal(np.concatenate(parts), np.sort(np.concatenate(runs)))
    seen = [set(p.tolist()) for p in parts]                   # a value never spans two chunks
    assert all(not (a & b) for x, a in enumerate(seen) for b in seen[x + 1:])
    assert max(len(p) for p in parts) <= len(runs) * chunk and (chunk > 500) == (len(parts) == 1)
    rows = np.zeros(5, dtype=[("code", "<i8"), ("tag", "<i8")])      # structured rows merge by their field
    rows["code"], rows["tag"] = [1, 1, 2, 5, 9], [0, 1, 2, 3, 4]
    np.save(tmp_path / "a.npy", rows[::2]), np.save(tmp_path / "b.npy", rows[1::2])
    merged = np.concatenate(list(dedup_files.merge_sorted([tmp_path / "a.npy", tmp_path / "b.npy"], "code", chunk)))
    assert merged["tag"].tolist() == [0, 1, 2, 3, 4]                  # ties keep file order


def test_bucket_count_follows_the_budget_and_the_concurrent_tasks():
    # 1,000 rows × 16 bands × 96 B = 1,536,000 B of bucket entries; 0.001 GiB = 1,073,741.8 B
    spec = CleanSpec(memory_gb=0.001)
    assert dedup_global.plan_buckets(1000, spec, ONE) == 2
    assert dedup_global.plan_buckets(1000, spec, ExecutorSpec(workers=2)) == 3       # two tasks share it
    assert dedup_global.plan_buckets(1000, spec, ExecutorSpec(kind="dask", workers=2)) == 3
    assert dedup_global.plan_buckets(4000, spec, ONE) == 6                            # ceil(5.72)
    assert dedup_global.plan_buckets(10**6, CleanSpec(), ExecutorSpec(workers=2)) == 2  # 1.536 GB / 1 GiB
    assert dedup_global.plan_buckets(1000, CleanSpec(), ONE) == 1


def test_radix_orders_equal_numpys_stable_argsort():
    rng = np.random.default_rng(7)
    values = rng.integers(0, 2**32, 5000, dtype=np.uint64).astype(np.uint32)
    values[::7] = values[3]                                            # ties keep their positions
    assert np.array_equal(lsh.stable_order(values), np.argsort(values, kind="stable"))
    # keys equal in their low 32 bits but not their high ones, interleaved, beside real repeats and singles
    low = rng.integers(0, 2**32, 300, dtype=np.uint64)
    keys = np.concatenate([low, low + (np.uint64(1) << np.uint64(40)), low[:50], rng.integers(0, 2**63, 900,
                                                                                          dtype=np.uint64)])
    keys = keys[rng.permutation(len(keys))]
    order = np.argsort(keys, kind="stable")
    repeated = np.concatenate([[False], keys[order][1:] == keys[order][:-1]])
    repeated[:-1] |= repeated[1:]
    assert np.array_equal(lsh.repeated_groups(keys), order[repeated])


def test_distinct_runs_drops_repeats_per_run():
    values = np.array([1, 1, 2, 5, 3, 3, 3, 7, 7, 7], dtype=np.uint32)
    got, offsets = hashloops.distinct_runs(values, np.array([0, 4, 4, 6, 10]))
    assert got.tolist() == [1, 2, 5, 3, 3, 7] and offsets.tolist() == [0, 3, 3, 4, 6]   # 3 stays in both runs


@pytest.mark.parametrize("batch", [1, 3, 4096])
def test_rank_merge_equals_one_sort_of_the_tuples(tmp_path, batch):
    # ties in quality (0.0 and -0.0 too) and in id across shards, runs of unequal length read `batch` rows at a time
    rng, bases, offsets, every = np.random.default_rng(5), [], [0], []
    for s, n in enumerate([0, 6, 40, 17]):
        live = np.sort(rng.choice(n + 3, size=n, replace=False)).tolist()
        neg = rng.choice([-1.0, -0.5, 0.0, -0.0, np.inf], size=n).tolist()
        ids = rng.choice(["a", "b", "é", "z", "aa"], size=n).tolist()
        rows = sorted(zip(neg, ids, live))
        every += [(q, i, r + offsets[-1]) for q, i, r in rows]
        bases.append(tmp_path / f"s{s}")
        table = pa.table([pa.array([r[0] for r in rows], pa.float64()), pa.array([r[1] for r in rows], pa.string()),
                          pa.array([r[2] for r in rows], pa.int32())], schema=dedup_files.ORDER_SCHEMA)
        with pa.OSFile(str(dedup_files.at(bases[-1], ".order.arrow")), "wb") as sink:
            with pa.ipc.new_file(sink, dedup_files.ORDER_SCHEMA) as writer:
                writer.write_table(table, max_chunksize=batch)
        offsets.append(offsets[-1] + n + 3)
    expected = np.full(offsets[-1], -1)
    expected[[g for _, _, g in sorted(every)]] = np.arange(len(every))
    assert np.array_equal(dedup_files.rank_runs(bases, np.array(offsets), offsets[-1]), expected)
