"""Near-duplicate detection benchmark: forgeline vs a naive datasketch loop vs HuggingFace datatrove.

    python benchmarks/dedup.py --speed              # ~2 KB docs: this checkout vs earlier code, per stage
    python benchmarks/dedup.py                      # 10k / 50k / 200k documents
    python benchmarks/dedup.py --quick              # 2k / 5k
    python benchmarks/dedup.py --sizes 20000 --skip datatrove
    python benchmarks/dedup.py --setup-datatrove    # create the datatrove virtualenv first (PyPI only)

(Peak memory of clean's whole corpus-wide phase as the corpus grows, out of core vs in memory, Dask vs local:
benchmarks/dedup_scale.py.)

Every method runs on the same synthetic corpus (`tests.helpers.synthetic_corpus`: Zipfian English-like documents with
planted near-duplicates and hard-negative relatives, word-5-gram Jaccard known exactly) in its own process with
one thread, and the table reports docs / CPU-second of the detection itself (input already in memory; for
datatrove its stages 1–3, which read the corpus JSONL and write their own files), the process's peak RSS
(VmHWM, read by the process itself: the rusage of a child forked from this big parent would also count the
parent's pages, shared until exec), and pair precision / recall / F1: a pair is predicted when both documents
end in one cluster, and true when their exact word-5-gram Jaccard is ≥ the threshold. Truth = every planted
pair (the generator computed all of them) ∪ any predicted pair that turns out ≥ threshold when checked
exactly; random pairs are checked to be far apart. `forgeline` verifies candidates by the exact Jaccard of
their shingle sets, `forgeline-est` by the signatures' estimate only (`near_duplicates` without
`shingle_sets_fn`), `forgeline-ooc` is clean's out-of-core path (signatures and dedup inputs written per shard
of 2,000, then `dedup_global.deduplicate`: buckets, verification read back from the shards, the streamed
decision; the work tables themselves are written before the clock starts, as phase 1 writes them anyway). datatrove runs from its own virtualenv (`--datatrove-venv`, default /tmp/bench-datatrove)
as a subprocess, with its default MinhashConfig (or `--datatrove-banding 16x8`); it is skipped with a message
when that venv is absent. No datatrove code is part of forgeline. The slow methods (~150–400 docs/s) are
skipped above `--slow-max` documents (default 50k: datatrove at 200k would take ~15 min per core).
"""

from __future__ import annotations

import argparse
import json
import os
import random
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from tasks.data.dedup.lsh import clusters_of  # noqa: E402  (after the sys.path insert above)
from tests.helpers.synthetic_corpus import cluster_pairs, exact_jaccard, make_corpus, pair_scores  # noqa: E402

METHODS = ("forgeline", "forgeline-ooc", "forgeline-est", "datasketch-naive", "datatrove")
SLOW = ("datasketch-naive", "datatrove")   # ~150–400 docs/s: skipped above --slow-max documents
SINGLE_THREAD = {**{k: "1" for k in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS",
                                     "NUMEXPR_NUM_THREADS", "RAYON_NUM_THREADS")}, "TOKENIZERS_PARALLELISM": "false"}
DATATROVE_PACKAGES = ["datatrove", "spacy", "regex", "xxhash<4", "orjson", "tokenizers"]

# Runs inside the datatrove venv: stages 1–3 of its MinHash pipeline with its default config (English word
# tokenizer = spacy.blank("en"), 5-grams, 64-bit xxhash), then the clusters it saved (doc index, cluster id).
DATATROVE_RUNNER = r'''
import json, struct, sys, time
from pathlib import Path
corpus, work, result, buckets, rows = sys.argv[1], Path(sys.argv[2]), sys.argv[3], int(sys.argv[4]), int(sys.argv[5])
from datatrove.executor import LocalPipelineExecutor
from datatrove.pipeline.readers import JsonlReader
from datatrove.pipeline.dedup.minhash import (MinhashConfig, MinhashDedupBuckets, MinhashDedupCluster,
                                              MinhashDedupSignature)
config = MinhashConfig() if buckets == 0 else MinhashConfig(num_buckets=buckets, hashes_per_bucket=rows)
def run(pipeline, name, tasks=1):
    LocalPipelineExecutor(pipeline=pipeline, tasks=tasks, workers=1, logging_dir=str(work / "logs" / name)).run()
cpu, wall = time.process_time(), time.perf_counter()
run([JsonlReader(str(Path(corpus).parent), glob_pattern=Path(corpus).name),
     MinhashDedupSignature(output_folder=str(work / "sigs"), config=config)], "sigs")
run([MinhashDedupBuckets(input_folder=str(work / "sigs"), output_folder=str(work / "buckets"), config=config)],
    "buckets", tasks=config.num_buckets)
run([MinhashDedupCluster(input_folder=str(work / "buckets"), output_folder=str(work / "remove"), config=config,
                         save_cluster_id=True)], "clusters")
cpu, wall = time.process_time() - cpu, time.perf_counter() - wall
clusters = {}
path = work / "remove" / "000000.clusters"
data = path.read_bytes() if path.exists() else b""
for doc, cid in struct.iter_unpack("<II", data):
    clusters.setdefault(cid, []).append(doc)
from importlib.metadata import version
b, r = config.num_buckets, config.hashes_per_bucket
peak_mb = next(int(l.split()[1]) / 1024 for l in open("/proc/self/status") if l.startswith("VmHWM:"))
json.dump({"cpu_s": cpu, "wall_s": wall, "clusters": list(clusters.values()), "peak_mb": peak_mb,
           "config": f"{b}x{r} ({b * r} hashes), {config.n_grams}-grams, {config.hash_config}, "
                     f"datatrove {version('datatrove')}"},
          open(result, "w"))
'''


def worker(method: str, corpus_path: str, result_path: str) -> None:
    """One method on one corpus, timed in this (single-threaded) process; clusters as doc-index lists."""
    from specs.clean import DedupSpec
    from tasks.data.dedup.minhash import near_duplicates, shingle_sets, signatures

    ids, texts, scores = [], [], []
    with open(corpus_path) as f:
        for line in f:
            row = json.loads(line)
            ids.append(row["id"]), texts.append(row["text"]), scores.append(row["score"])
    tmp = tempfile.TemporaryDirectory(prefix="forgeline-ooc-") if method == "forgeline-ooc" else None
    if tmp:
        work = _work_tables(Path(tmp.name), ids, texts, scores)       # phase 1 writes them anyway: not timed
    # modules imported and compiled loops loaded once per process (reported apart): the clock measures the work
    warm_s = _warm_up() if method.startswith("forgeline") else 0.0
    loaded_mb = peak_rss_mb()
    cpu, wall = time.process_time(), time.perf_counter()
    if tmp:
        clusters, config = _out_of_core(work, texts)
    elif method.startswith("forgeline"):
        spec = DedupSpec()
        index = {d: i for i, d in enumerate(ids)}
        exact = (lambda batch: shingle_sets([texts[index[d]] for d in batch], spec)) if method == "forgeline" else None
        result = near_duplicates(ids, signatures(texts, spec), scores, spec, shingle_sets_fn=exact)
        groups: dict[str, list[int]] = {}
        for dropped, kept, _ in result.dropped:
            groups.setdefault(kept, [index[kept]]).append(index[dropped])
        clusters = list(groups.values())
        config = (f"{result.bands}x{result.rows}, verify={'exact' if exact else 'estimated'} Jaccard, "
                  f"{result.candidate_pairs} candidates, {result.verified_pairs} verified")
    else:
        clusters, config = _naive_datasketch(texts)
    cpu, wall = time.process_time() - cpu, time.perf_counter() - wall
    with open(result_path, "w") as f:
        json.dump({"cpu_s": cpu, "wall_s": wall, "clusters": clusters, "config": config, "loaded_mb": loaded_mb,
                   "peak_mb": peak_rss_mb(), "warm_s": warm_s}, f)


def _warm_up() -> float:
    """Import what the forgeline methods use and run each compiled loop once; its CPU seconds."""
    from specs.clean import DedupSpec
    from tasks.data.dedup import dedup_global  # noqa: F401  (the out-of-core path's modules)
    from tasks.data.dedup.minhash import near_duplicates, shingle_sets, signatures

    cpu, spec, texts = time.process_time(), DedupSpec(), ["one two three four five six"] * 2
    near_duplicates(["a", "b"], signatures(texts, spec), None, spec, lambda ids: shingle_sets(texts, spec))
    return time.process_time() - cpu


def _work_tables(folder: Path, ids: list[str], texts: list[str], scores: list[float]) -> list[list[dict]]:
    """Clean's work tables for the corpus in shards of 2,000 (what phase 1 writes besides the dedup inputs)."""
    import pyarrow as pa

    from tasks.data.dedup.dedup_files import at
    from tasks.data.cleanup.normalize import exact_key
    from tasks.data.records import write_table

    schema = pa.schema([("id", pa.string()), ("text", pa.string()), ("quality", pa.float64()),
                        ("reason", pa.string()), ("exact_key", pa.string())])
    shards = []
    for n, lo in enumerate(range(0, len(ids), 2000)):
        rows = [{"id": ids[k], "text": texts[k], "quality": scores[k], "reason": None,
                 "exact_key": exact_key(texts[k])} for k in range(lo, min(lo + 2000, len(ids)))]
        write_table(rows, schema, at(folder / f"s-{n:05d}", ".parquet"))
        shards.append(rows)
    return [folder, shards]


def _out_of_core(work: list, texts: list[str]) -> tuple[list[list[int]], str]:
    """Signatures and dedup inputs per shard, then the out-of-core global phase (no exact dedup, no audit: the
    in-memory methods do neither), one bucket task after another in this process."""
    from specs.clean import CleanSpec
    from specs.run import ExecutorSpec
    from tasks.data.cleanup.steps import write_dedup_inputs
    from tasks.data.dedup import dedup_files, dedup_global

    (folder, shards), executor = work, ExecutorSpec(workers=1)
    spec = CleanSpec(dedup={"exact": False, "audit_sample": 0, "precision_sample": 0})
    buckets = dedup_global.plan_buckets(len(texts), spec, executor)
    for n, part in enumerate(shards):
        ids, columns = dedup_files.row_columns(part)
        write_dedup_inputs(folder / f"s-{n:05d}", ids, {**columns, "text": [r["text"] for r in part]},
                           spec.dedup, 1, buckets)
    layout = dedup_global.layout_of(folder, [f"s-{n:05d}" for n in range(len(shards))])
    found = dedup_global.deduplicate(layout, spec, 1, executor)
    d, groups = found["decisions"], {}
    for dropped, kept in zip(d.rows.tolist(), d.keeper.tolist()):
        groups.setdefault(kept, [kept]).append(dropped)
    s = found["summary"]
    return list(groups.values()), (f"out of core, {buckets} bucket(s), {s['bands']}x{s['rows']}, exact "
                                   f"verification, {s['candidate_pairs']} candidates, {s['verified_pairs']} verified")


def peak_rss_mb() -> float:
    """This process's peak resident set since exec (VmHWM), in MB."""
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) / 1024
    raise RuntimeError("no VmHWM in /proc/self/status")


def _naive_datasketch(texts: list[str]) -> tuple[list[list[int]], str]:
    """What a first attempt looks like: MinHash() + update() per shingle, MinHashLSH(threshold=0.8), query."""
    import re

    from datasketch import MinHash, MinHashLSH

    word = re.compile(r"\w+")
    lsh = MinHashLSH(threshold=0.8, num_perm=128)
    sketches = []
    for i, text in enumerate(texts):
        words = word.findall(text.lower())
        m = MinHash(num_perm=128)
        for k in range(max(len(words) - 4, 1)):
            m.update(" ".join(words[k:k + 5]).encode("utf-8"))
        lsh.insert(i, m)
        sketches.append(m)
    pairs = sorted({(min(i, j), max(i, j)) for i, m in enumerate(sketches) for j in lsh.query(m) if j != i})
    return clusters_of(np.array(pairs, dtype=np.int64).reshape(-1, 2), len(texts)), f"{lsh.b}x{lsh.r}, no verify"


def run_method(cmd: list[str], env: dict[str, str], log) -> int:
    """Run a child to completion; its exit status."""
    return subprocess.run(cmd, env=env, stdout=log, stderr=subprocess.STDOUT, check=False).returncode


def setup_datatrove(venv: Path) -> None:
    print(f"creating {venv} and installing {' '.join(DATATROVE_PACKAGES)} from PyPI ...", flush=True)
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
    subprocess.run([str(venv / "bin" / "pip"), "install", "-q", *DATATROVE_PACKAGES], check=True)


def evaluate(corpus, clusters: list[list[int]], threshold: float, checked: dict) -> tuple[float, float, float]:
    predicted = cluster_pairs(clusters)
    for pair in predicted - corpus.pair_jaccard.keys() - checked.keys():   # unplanted pairs: check exactly
        checked[pair] = exact_jaccard(corpus.texts[pair[0]], corpus.texts[pair[1]])
    truth = corpus.true_pairs(threshold) | {p for p, j in checked.items() if j >= threshold}
    return pair_scores(predicted, truth)


def load_baseline(rev: str):
    """tasks/data/dedup/minhash.py as of git `rev`, imported as its own module with that revision's wordhash.py (when it
    has one; both use today's lsh and specs), so the baseline's hashing is entirely its own."""
    import types
    loaded: list[str] = []
    for name in ("wordhash", "minhash"):
        shown = subprocess.run(["git", "-C", str(ROOT), "show", f"{rev}:tasks/data/{name}.py"], capture_output=True,
                               text=True)
        if shown.returncode != 0:          # e155486 predates wordhash.py
            continue
        source = shown.stdout
        for dep in loaded:
            source = source.replace(f"from tasks.data.{dep} import", f"from {dep}_{rev} import")
        module = types.ModuleType(f"{name}_{rev}")
        sys.modules[module.__name__] = module      # dataclasses look their module up while decorating
        exec(compile(source, f"{rev}:tasks/data/{name}.py", "exec"), module.__dict__)
        loaded.append(name)
    return module


def speed(args) -> None:
    """Per-stage docs / CPU-second and pair F1, the code at `--baseline` and this checkout, in one process."""
    from specs.clean import DedupSpec
    from tasks.data.dedup import dedup_audit, minhash
    from tasks.data.dedup.lsh import candidate_pairs

    corpus = make_corpus(args.docs, seed=args.seed, words=(360, 560))
    kb = sum(len(t.encode()) for t in corpus.texts) / len(corpus.texts) / 1024
    spec, n = DedupSpec(), len(corpus.texts)
    index = {d: i for i, d in enumerate(corpus.ids)}

    def best_of(fn, reps=args.reps):
        times, result = [], None
        for _ in range(reps):
            t = time.process_time()
            result = fn()
            times.append(time.process_time() - t)
        return min(times), result

    rows, sigs_of, checked = [], {}, {}
    codes = [(f"before ({rev})", load_baseline(rev)) for rev in args.baseline.split(",")] + [("now", minhash)]
    for name, module in codes:
        exact = (lambda m: lambda batch: m.shingle_sets([corpus.texts[index[d]] for d in batch], spec))(module)
        t_sig, sigs = best_of(lambda: module.signatures(corpus.texts, spec))
        t_band, _ = best_of(lambda: candidate_pairs(sigs, 16, 8))
        t_near, result = best_of(lambda: module.near_duplicates(corpus.ids, sigs, corpus.scores, spec, exact))
        groups: dict[str, list[int]] = {}
        for dropped, kept, _ in result.dropped:
            groups.setdefault(kept, [index[kept]]).append(index[dropped])
        p, r, f1 = evaluate(corpus, list(groups.values()), spec.threshold, checked)
        sigs_of[name] = sigs
        rows.append((name, n / t_sig, n / t_band, n / max(t_near - t_band, 1e-9), n / (t_sig + t_near), p, r, f1))
    t_audit, report = best_of(lambda: dedup_audit.audit(corpus.ids, dict(zip(corpus.ids, corpus.texts)).get,
                                                        result, spec, args.seed), reps=1)
    header = ("code", "signatures", "banding", "verification + decision", "near dedup in all", "pair precision",
              "recall", "F1")
    print(f"{n:,} synthetic documents of {kb:.2f} KB on average, docs / CPU-second (best of {args.reps}):\n")
    print("| " + " | ".join(header) + " |")
    print("|" + "|".join(["---"] + ["---:"] * (len(header) - 1)) + "|")
    for name, *rates, p, r, f1 in rows:
        print(f"| {name} | " + " | ".join(f"{x:,.0f}" for x in rates) + f" | {p:.3f} | {r:.3f} | {f1:.3f} |")
    new = rows[-1]
    same = all(np.array_equal(a, sigs_of[new[0]]) for a in sigs_of.values())
    print()
    for old in rows[:-1]:
        print(f"- now / {old[0]}: signatures {new[1] / old[1]:.2f}×, near dedup in all {new[4] / old[4]:.2f}×")
    print(f"- signatures bit-identical: {'yes' if same else 'NO'}")
    print(f"- the run's audit (now): {report['audit_docs']:,} documents, {report['audit_pairs']:,} pairs in "
          f"{t_audit:.1f} CPU-s: precision {report['precision']}, recall {report['recall']}, F1 {report['f1']}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--sizes", default="10000,50000,200000", help="comma-separated corpus sizes")
    parser.add_argument("--quick", action="store_true", help="sizes 2000,5000")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--skip", default="", help=f"comma-separated methods to skip, of {','.join(METHODS)}")
    parser.add_argument("--slow-max", type=int, default=50_000,
                        help=f"largest corpus for the slow methods ({', '.join(SLOW)}); default 50000")
    parser.add_argument("--datatrove-venv", type=Path, default=Path("/tmp/bench-datatrove"))
    parser.add_argument("--datatrove-banding", default="", help="BxR instead of datatrove's default (14x8)")
    parser.add_argument("--setup-datatrove", action="store_true", help="create the datatrove venv, then run")
    parser.add_argument("--speed", action="store_true", help="per-stage speed, --baseline vs this checkout")
    parser.add_argument("--docs", type=int, default=20_000, help="--speed: corpus size (default 20000)")
    parser.add_argument("--baseline", default="e155486,94d22d3", help="--speed: comma-separated git revisions to "
                        "compare with (default: e155486, the code before #14/#15, and 94d22d3, the numpy hashing "
                        "before the compiled loops)")
    parser.add_argument("--reps", type=int, default=3, help="--speed: repetitions, the best is kept")
    parser.add_argument("--worker", nargs=3, metavar=("METHOD", "CORPUS", "RESULT"), help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.worker:
        return worker(*args.worker)
    if args.speed:
        return speed(args)
    if args.setup_datatrove and not (args.datatrove_venv / "bin" / "python").exists():
        setup_datatrove(args.datatrove_venv)
    sizes = [2000, 5000] if args.quick else [int(s) for s in args.sizes.split(",")]
    methods = [m for m in METHODS if m not in args.skip.split(",")]
    dt_python = args.datatrove_venv / "bin" / "python"
    if "datatrove" in methods and not dt_python.exists():
        print(f"note: datatrove skipped: no venv at {args.datatrove_venv} (create it with --setup-datatrove)")
        methods.remove("datatrove")
    env = {**os.environ, **SINGLE_THREAD, "PYTHONPATH": str(ROOT), "DATATROVE_COLORIZE_LOGS": "0"}

    rows, notes = [], []
    with tempfile.TemporaryDirectory(prefix="forgeline-dedup-bench-") as tmp:
        for size in sizes:
            started = time.perf_counter()
            corpus = make_corpus(size, seed=args.seed)
            corpus_path = Path(tmp) / f"corpus-{size}.jsonl"
            with open(corpus_path, "w") as f:
                for i, text, score in zip(corpus.ids, corpus.texts, corpus.scores):
                    f.write(json.dumps({"id": i, "text": text, "score": score}) + "\n")
            rng = random.Random(args.seed)
            randoms = {tuple(sorted(rng.sample(range(size), 2))) for _ in range(2000)} - corpus.pair_jaccard.keys()
            far = max(exact_jaccard(corpus.texts[i], corpus.texts[j]) for i, j in randoms)
            true = corpus.true_pairs(0.8)
            ceiling = pair_scores(cluster_pairs(clusters_of(np.array(sorted(true)).reshape(-1, 2), size)), true)[2]
            notes.append(f"{size} docs: {len(corpus.families)} planted families, "
                         f"{len(corpus.true_pairs(0.8))} planted pairs with J ≥ 0.8, {len(corpus.pair_jaccard)} "
                         f"planted pairs in all; F1 of a perfect detector + union-find = {ceiling:.3f}; "
                         f"max exact J of {len(randoms)} random unplanted pairs = {far:.3f}; "
                         f"corpus built in {time.perf_counter() - started:.0f} s")
            checked: dict = {}
            for method in methods:
                if method in SLOW and size > args.slow_max:
                    notes.append(f"{method} at {size}: skipped (above --slow-max {args.slow_max}; it runs at "
                                 f"~{size // 250 // 60} min or more per core at this size)")
                    continue
                result_path = Path(tmp) / f"{method}-{size}.json"
                if method == "datatrove":
                    work = Path(tempfile.mkdtemp(dir=tmp))
                    banding = args.datatrove_banding.split("x") if args.datatrove_banding else ["0", "0"]
                    runner = Path(tmp) / "datatrove_runner.py"
                    runner.write_text(DATATROVE_RUNNER)
                    cmd = [str(dt_python), str(runner), str(corpus_path), str(work), str(result_path), *banding]
                else:
                    cmd = [sys.executable, __file__, "--worker", method, str(corpus_path), str(result_path)]
                t0 = time.perf_counter()
                with open(Path(tmp) / f"{method}-{size}.log", "w") as log:
                    code = run_method(cmd, env, log)
                if code != 0:
                    tail = (Path(tmp) / f"{method}-{size}.log").read_text()[-2000:]
                    notes.append(f"{method} at {size} docs failed (exit {code}): …{tail}")
                    continue
                res = json.loads(result_path.read_text())
                precision, recall, f1 = evaluate(corpus, res["clusters"], 0.8, checked)
                rss = res["peak_mb"]
                rows.append((method, size, size / res["cpu_s"], rss, precision, recall, f1))
                extra = f", {rss - res['loaded_mb']:.0f} MB over the loaded corpus" if "loaded_mb" in res else ""
                extra += f", {res['warm_s']:.2f} CPU-s warm-up before the clock" if res.get("warm_s") else ""
                notes.append(f"{method} at {size}: {res['config']}; detection {res['cpu_s']:.1f} s CPU, "
                             f"{res['wall_s']:.1f} s wall; process {time.perf_counter() - t0:.0f} s in all{extra}")
                print(f"  done {method} {size}", file=sys.stderr, flush=True)

    header = ("method", "docs", "docs/s per core", "peak RSS (MB)", "pair precision", "recall", "F1")
    print("| " + " | ".join(header) + " |")
    print("|" + "|".join(["---"] + ["---:"] * (len(header) - 1)) + "|")
    for method, size, rate, rss, p, r, f in rows:
        print(f"| {method} | {size:,} | {rate:,.0f} | {rss:,.0f} | {p:.3f} | {r:.3f} | {f:.3f} |")
    print()
    for note in notes:
        print(f"- {note}")


if __name__ == "__main__":
    main()
