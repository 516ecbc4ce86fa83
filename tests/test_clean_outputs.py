"""Clean's output phase (`tasks.data.cleanup.clean_outputs` on the executor) against the former row-by-row writer,
written out here: every output file must have the same bytes, on planted work tables where kept shards straddle
tables, a source and a table lose everything, a table is empty, dedup drops point at keepers in other tables and
the ledger spans several row groups."""

from __future__ import annotations

import json
import subprocess
import sys
from collections import Counter, defaultdict
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from specs.clean import CleanSpec
from specs.run import ExecutorSpec
from tasks.core.files import write_json_atomic, write_text_atomic
from tasks.data.cleanup import clean_outputs
from tasks.data.filtering import quality
from tasks.data.cleanup.filter_steps import word_counts
from tasks.data.cleanup.cleaning import WORK_SCHEMA
from tasks.data.dedup.dedup_global import Decisions
from tasks.data.dedup.dedup_tasks import Layout
from tasks.data.records import LEDGER_SCHEMA, RECORD_SCHEMA, write_table

# texts with Python's whitespace that is not ASCII (U+2003, U+3000, U+00A0, U+2028, U+001C), runs and edges
TEXTS = ["alpha beta  gamma", " lead\u2003em\u3000ideo ", "nb\u00a0sp line\u2028sep fs\x1csep", "one",
         "tab\tnew\nline\r\nend", "\u2003\u2003", "many words in a row here now"]


def work_row(source: str, n: int, reason: str | None, score: float | None) -> dict:
    kinds = ["email", "phone", "ip", "url"][: n % 4 + (n % 4 == 3)]  # url: always scanned, never found
    return {"id": f"{source}/{n:03d}", "text": TEXTS[n % len(TEXTS)] + f" w{n}", "source": source, "lang": "en",
            "origin": f"o{n}", "meta": json.dumps({"n": n}), "media": [{"kind": "image", "path": f"m{n}.png"}]
            if n % 5 == 0 else [], "quality": score, "reason": reason,
            "detail": None if reason is None else json.dumps({"filter": reason}), "exact_key": f"k{n}",
            "pii_kinds": kinds, "pii_counts": [(n + i) % 3 if k != "url" else 0 for i, k in enumerate(kinds)]}


def planted(work: Path) -> tuple[Layout, dict]:
    """Four tables (10, 7, 0, 9 rows) over sources a, b and `gone` (every row dropped); table 1 drops all."""
    tables, n = [], 0
    for size, all_dropped in ((10, False), (7, True), (0, False), (9, False)):
        rows = []
        for _ in range(size):
            source = ("a", "b", "gone")[n % 3]
            reason = "low_quality" if source == "gone" or all_dropped or n % 7 == 3 else None
            score = None if n % 11 == 4 else round(0.37 + (n * 0.0731) % 0.6, 6)  # None: never measured
            rows.append(work_row(source, n, "empty" if score is None else reason, score))
            n += 1
        tables.append(rows)
    stems = tuple(f"t{s}" for s in range(len(tables)))
    offsets = tuple(int(x) for x in np.cumsum([0] + [len(t) for t in tables]))
    for stem, rows in zip(stems, tables):
        write_table(rows, WORK_SCHEMA, work / f"{stem}.parquet")
    flat = [r for t in tables for r in t]
    alive = [g for g, r in enumerate(flat) if r["reason"] is None]
    # dedup drops: kept rows of several tables, keepers elsewhere; one decision on a row a filter dropped
    # already (the filter's reason stands), similarities on the .3f rounding edge
    drops = sorted({alive[1], alive[4], alive[-2], alive[-1], 3})
    keeper = [alive[0] if g != alive[0] else alive[2] for g in drops]
    near = [i % 2 == 0 for i in range(len(drops))]
    sim = [0.8125, 0.87654321, 0.9995, 0.7, 0.8][: len(drops)]
    d = Decisions(np.array(drops, np.int64), np.array(near), np.array(keeper, np.int64), np.array(sim))
    return Layout(work, stems, offsets), {"decisions": d, "summary": {"exact_dropped": 2}, "detail": {"x": 1}}


def reference(layout: Layout, spec: CleanSpec, out: Path, dedup: dict, ledger_rows: int) -> dict:
    """The former writer: every row in Python, shards cut as each fills (rows, or text bytes as ingest cuts its
    shards), the ledger flushed per ledger_rows."""
    d = dedup["decisions"]
    rows = [r for s in range(len(layout.stems)) for r in pq.read_table(f"{layout.base(s)}.parquet").to_pylist()]
    decided = {int(g): k for k, g in enumerate(d.rows)}
    buffers, written, ledger, groups = defaultdict(list), Counter(), [], []
    by_source, pii = defaultdict(Counter), Counter()
    measured, above = defaultdict(lambda: [0, 0]), defaultdict(lambda: [0, 0])
    (out / "shards").mkdir(parents=True)
    for g, r in enumerate(rows):
        src = r["source"]
        by_source[src]["in"] += 1
        pii.update(dict(zip(r["pii_kinds"], r["pii_counts"])))
        if spec.quality.enabled and r["quality"] is not None:
            for key in (src, "all"):
                measured[key][0] += 1
                measured[key][1] += len(r["text"].split())
                for t in spec.quality.curve:
                    if r["quality"] >= t:
                        above[(t, key)][0] += 1
                        above[(t, key)][1] += len(r["text"].split())
        reason, kept_id, detail = r["reason"], None, r["detail"]
        if reason is None and g in decided:
            k = decided[g]
            kept_id = rows[int(d.keeper[k])]["id"]
            reason, detail = (("near_duplicate", f"Jaccard {round(float(d.sim[k]), 6):.3f}") if d.near[k]
                              else ("exact_duplicate", "identical after normalization"))
        if reason is None:
            by_source[src]["kept"] += 1
            buffers[src].append({k: r[k] for k in RECORD_SCHEMA.names})
            held = sum(len(b["text"].encode("utf-8")) for b in buffers[src])
            if len(buffers[src]) == spec.shard_records or held >= spec.shard_bytes:
                write_table(buffers.pop(src), RECORD_SCHEMA, out / f"shards/{src}-{written[src]:05d}.parquet")
                written[src] += 1
        else:
            by_source[src][f"dropped:{reason}"] += 1
            ledger.append({"id": r["id"], "source": src, "reason": reason, "score": r["quality"],
                           "kept_id": kept_id, "detail": detail, "text": r["text"]})
    for src in sorted(buffers):
        if buffers[src]:
            write_table(buffers[src], RECORD_SCHEMA, out / f"shards/{src}-{written[src]:05d}.parquet")
    with pq.ParquetWriter(out / "dropped.parquet", LEDGER_SCHEMA, compression="zstd", write_statistics=True) as w:
        for start in range(0, max(len(ledger), 1), ledger_rows):
            groups.append(len(ledger[start:start + ledger_rows]))
            w.write_table(pa.Table.from_pylist(ledger[start:start + ledger_rows], schema=LEDGER_SCHEMA))
    curve = [{"threshold": round(t, 6), "source": src, "docs": above[(t, src)][0], "words": above[(t, src)][1],
              "docs_share": round(above[(t, src)][0] / measured[src][0], 6),
              "words_share": round(above[(t, src)][1] / measured[src][1], 6) if measured[src][1] else 0.0}
             for t in spec.quality.curve for src in [*sorted(set(measured) - {"all"}), "all"]] if measured else []
    if curve:
        write_text_atomic(out / "quality_curve.csv", quality.curve_csv(curve))
    sources = {s: dict(sorted(c.items())) for s, c in sorted(by_source.items())}
    totals = sum((Counter(c) for c in sources.values()), Counter())
    counts = {"in": totals["in"], "kept": totals["kept"], "dropped": totals["in"] - totals["kept"],
              "dropped_by_reason": {k.split(":", 1)[1]: v for k, v in sorted(totals.items()) if ":" in k},
              "by_source": sources, "pii_replaced": dict(sorted(pii.items())), "dedup": dedup["summary"]}
    write_json_atomic(out / "report.json", {**counts, "dedup_detail": dedup["detail"], "quality_curve": curve,
                                            "decontamination": {"enabled": False}, "lines": {"enabled": False}})
    return {"counts": counts, "groups": groups}


def files(out: Path) -> dict[str, bytes]:
    return {str(p.relative_to(out)): p.read_bytes() for p in sorted(out.rglob("*")) if p.is_file()}


@pytest.mark.parametrize("shard_records, ledger_rows, quality_on, shard_bytes", [
    (4, 3, True, None), (3, 1000, True, None), (50, 2, False, None), (4, 3, True, 45), (50, 2, False, 60)])
def test_outputs_equal_the_row_by_row_writer(tmp_path, shard_records, ledger_rows, quality_on, shard_bytes):
    (tmp_path / "work").mkdir()
    layout, dedup = planted(tmp_path / "work")
    spec = CleanSpec.model_validate({"shard_records": shard_records, "quality": {"enabled": quality_on},
                                     **({"shard_bytes": shard_bytes} if shard_bytes else {})})
    ref = reference(layout, spec, tmp_path / "ref", dedup, ledger_rows)
    counts = clean_outputs.write_outputs(layout, spec, tmp_path / "new", dedup, {"enabled": False},
                                         ledger_rows=ledger_rows)
    expected, got = files(tmp_path / "ref"), files(tmp_path / "new")
    assert got.keys() == expected.keys()
    for name in expected:
        assert got[name] == expected[name], name
    assert counts == ref["counts"]
    c = counts["by_source"]
    # the planted structure really is there: `gone` keeps nothing, the ledger has several row groups
    assert "kept" not in c["gone"] and c["gone"]["in"] > 0 and not any(n.startswith("gone") for n in got)
    assert c["a"]["dropped:near_duplicate"] + c["b"]["dropped:near_duplicate"] >= 1
    assert counts["dropped_by_reason"]["exact_duplicate"] >= 1 and counts["pii_replaced"]["url"] == 0
    meta = pq.ParquetFile(tmp_path / "new/dropped.parquet").metadata
    assert [meta.row_group(i).num_rows for i in range(meta.num_row_groups)] == ref["groups"]
    if ledger_rows < counts["dropped"]:
        assert meta.num_row_groups > 1
    shards = [pq.read_table(tmp_path / "new/shards" / n[7:]).num_rows for n in got if n.startswith("shards/a-")]
    assert sum(shards) == c["a"]["kept"]
    if shard_bytes is None:
        assert shards[:-1] == [shard_records] * (len(shards) - 1)
    else:  # the byte cap cuts shards shorter than shard_records (the texts are 6-30 bytes)
        assert min(shards[:-1]) < shard_records and len(shards) > -(-c["a"]["kept"] // shard_records)
    assert ("quality_curve.csv" in got) == quality_on


def test_nothing_dropped_writes_an_empty_ledger_and_a_pool_gives_the_same_bytes(tmp_path):
    outs = {}
    for name, executor in (("one", ExecutorSpec(workers=1)), ("pool", ExecutorSpec(workers=2))):
        work = tmp_path / name / "work"
        work.mkdir(parents=True)
        for s, size in enumerate((5, 4)):
            write_table([work_row("a", 10 * s + i, None, 0.9) for i in range(size)], WORK_SCHEMA,
                        work / f"t{s}.parquet")
        layout = Layout(work, ("t0", "t1"), (0, 5, 9))
        none = np.zeros(0, np.int64)
        dedup = {"decisions": Decisions(none, np.zeros(0, bool), none, np.zeros(0)), "summary": {}, "detail": {}}
        spec = CleanSpec.model_validate({"shard_records": 3})
        if name == "one":
            reference(layout, spec, tmp_path / "ref", dedup, 4)
        clean_outputs.write_outputs(layout, spec, tmp_path / name / "out", dedup, {"enabled": False}, executor, 4)
        outs[name] = files(tmp_path / name / "out")
    assert outs["one"] == files(tmp_path / "ref") == outs["pool"]
    assert pq.ParquetFile(tmp_path / "one/out/dropped.parquet").metadata.num_rows == 0
    assert sorted(outs["one"]) == ["dropped.parquet", "quality_curve.csv", "report.json",
                                   "shards/a-00000.parquet", "shards/a-00001.parquet", "shards/a-00002.parquet"]


DOC = 5 << 20  # one document: 5 MiB
# VmHWM, not ru_maxrss: Linux carries ru_maxrss over from the parent (pytest) through fork and exec. The id
# column is read first: pyarrow's dataset libraries, loaded by the first read, are not the shard's memory.
MIX_READ = """
import sys
import pyarrow.parquet as pq
from tasks.data.mixing.mixshards import shard_documents
def hwm():
    return next(int(l.split()[1]) for l in open("/proc/self/status") if l.startswith("VmHWM")) * 1024
pq.read_table(sys.argv[1], columns=["id"])
base = hwm()
docs = shard_documents(sys.argv[1], ["id", "text"])
print(hwm() - base)
"""


def mix_reads(shard: Path) -> int:
    """Peak RSS growth (bytes) of mix's reader of one clean shard (`shard_documents`), in a fresh process."""
    done = subprocess.run([sys.executable, "-c", MIX_READ, str(shard)], capture_output=True, text=True, check=True)
    return int(done.stdout.split()[-1])


def test_shards_of_huge_documents_are_cut_by_bytes_and_mix_reads_one_within_that(tmp_path):
    """24 documents of 5 MiB: cut by `shard_records` alone they were one 120 MiB shard, and mix's read of it grew
    by ~4.4x its texts (Arrow's decoding and pool, then Python strings); with `shard_bytes` at 16 MiB a shard holds
    at most 16 MiB plus one document, and mix's read grows by the same factor of that bound, whatever the source."""
    work = tmp_path / "work"
    work.mkdir()
    for s in range(2):
        rows = [work_row("a", 12 * s + i, None, 0.9) for i in range(12)]
        for r in rows:
            r["text"] = f"{r['id']} " + "abcdefgh"[int(r["id"][-2:]) % 8] * DOC
        write_table(rows, WORK_SCHEMA, work / f"t{s}.parquet")
    layout = Layout(work, ("t0", "t1"), (0, 12, 24))
    none = np.zeros(0, np.int64)
    dedup = {"decisions": Decisions(none, np.zeros(0, bool), none, np.zeros(0)), "summary": {}, "detail": {}}
    peaks = {}
    for name, cap in (("rows", 1 << 30), ("bytes", 16 << 20)):
        spec = CleanSpec.model_validate({"shard_bytes": cap, "quality": {"enabled": False}})
        out = tmp_path / name
        clean_outputs.write_outputs(layout, spec, out, dedup, {"enabled": False})
        shards = sorted((out / "shards").glob("*.parquet"))
        texts = [pq.read_table(p, columns=["text"]).column("text").to_pylist() for p in shards]
        assert sum(len(t) for t in texts) == 24
        if name == "bytes":
            sizes = [sum(len(x) for x in t) for t in texts]
            assert len(shards) == 6 and max(sizes) <= cap + DOC + 64, sizes   # 4 documents each (the 4th crosses)
        peaks[name] = mix_reads(max(shards, key=lambda p: p.stat().st_size))
    print(f"mix's read of the largest clean shard: {peaks['rows']:,} B cut by records, {peaks['bytes']:,} B by bytes "
          f"({peaks['bytes'] / DOC:.1f} documents)")
    bound = (16 << 20) + DOC                 # the most text a shard can hold: the cap plus the document crossing it
    assert peaks["rows"] > 24 * DOC          # the old shape: more than the whole source, held at once
    assert peaks["bytes"] < 7 * bound        # measured 5x (103 MiB); 24 documents of any size would not fit


def test_planted_tables_on_a_pool_equal_in_process(tmp_path):
    outs = {}
    for name, workers in (("one", 1), ("pool", 2)):
        (tmp_path / name / "work").mkdir(parents=True)
        layout, dedup = planted(tmp_path / name / "work")
        spec = CleanSpec.model_validate({"shard_records": 4})
        clean_outputs.write_outputs(layout, spec, tmp_path / name / "out", dedup, {"enabled": False},
                                    ExecutorSpec(workers=workers), 3)
        outs[name] = files(tmp_path / name / "out")
    assert outs["one"] == outs["pool"] and sum(n.startswith("shards/") for n in outs["one"]) >= 2


def test_word_counts_equal_python_split_on_every_code_point():
    points = [chr(c) for c in range(sys.maxunicode + 1) if not 0xD800 <= c < 0xE000]
    texts = [f"a{c}b" for c in points] + TEXTS + ["", " ", "  x  ", "\u2003x\u2003\u2003y"]
    assert word_counts(pa.array(texts)).tolist() == [len(t.split()) for t in texts]
    assert word_counts(pa.array([], pa.string())).tolist() == []
