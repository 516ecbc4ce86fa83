"""Peak memory (RSS) of the validate stage on a synthetic corpus, streamed (this checkout) vs an older checkout.

    python benchmarks/validate_memory.py                                  # 50k and 200k documents, this code only
    python benchmarks/validate_memory.py --docs 50000 200000 --before-rev main   # also the code of `main`

The corpus is written as ingest shards (RECORD_SCHEMA, 2,000 records each, 4 sources) of seeded random words,
~1 KB per text, with a few planted failures: ids repeated across sources, short texts, a wrong language tag.
Each run is `python -m tasks --root <corpus> validate` in a fresh process (with that code's own params.yaml,
Data Docs off, so the validation itself is measured); peak RSS comes from os.wait4 on that process. The last
column says whether results.json is byte-identical to the first code's for the same corpus.
"""

from __future__ import annotations

import argparse
import os
import re
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import numpy as np  # noqa: E402  (after the sys.path insert above)

from tasks.data.records import RECORD_SCHEMA, write_table  # noqa: E402

SOURCES = ("literature", "encyclopedia", "code", "docs")
PER_SHARD = 2000
WORDS = np.array([f"w{i:04d}" for i in range(5000)])


def build_corpus(folder: Path, docs: int, seed: int = 0) -> int:
    """Write `docs` records as ingest shards under folder/data/ingest/shards; return the text bytes."""
    rng = np.random.default_rng(seed)
    shards = folder / "data" / "ingest" / "shards"
    shards.mkdir(parents=True)
    total = 0
    for n, start in enumerate(range(0, docs, PER_SHARD)):
        source = SOURCES[n % len(SOURCES)]
        rows = []
        for i in range(start, min(start + PER_SHARD, docs)):
            words = WORDS[rng.integers(0, len(WORDS), int(rng.integers(100, 240)))]
            text = " ".join(words.tolist()) if i % 97 else "short"          # ~1% short texts
            rid = f"{source}/{i}" if i % 1013 else f"literature/{i - 1}"    # ~0.1% ids repeated across sources
            lang = "python" if source == "code" else ("en" if i % 4999 else "xx")
            rows.append({"id": rid, "text": text, "source": source, "lang": lang,
                         "origin": f"{source}.jsonl:{i}", "meta": "{}", "media": []})
            total += len(text)
        write_table(rows, RECORD_SCHEMA, shards / f"{source}-{n:05d}.parquet")
    return total


def run_validate(code: Path, corpus: Path) -> tuple[float, float]:
    """(peak RSS MiB, wall s) of the validate stage of checkout `code` on `corpus`."""
    params = (code / "params.yaml").read_text()
    (corpus / "params.yaml").write_text(re.sub(r"(?m)^(\s*data_docs:) true", r"\1 false", params))
    start = time.perf_counter()
    proc = subprocess.Popen([sys.executable, "-m", "tasks", "--root", str(corpus), "validate"], cwd=code,
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    _, status, usage = os.wait4(proc.pid, 0)
    wall = time.perf_counter() - start
    proc.returncode = os.waitstatus_to_exitcode(status)
    err = proc.stderr.read().decode() if proc.stderr else ""
    if not (corpus / "data" / "validate" / "results.json").exists():
        raise SystemExit(f"validate of {code} wrote no results (exit {proc.returncode}):\n{err[-2000:]}")
    return usage.ru_maxrss / 1024, wall  # ru_maxrss is in KiB on Linux


def checkout(rev: str, into: Path) -> Path:
    """The tracked files of `rev` (tasks, specs, params.yaml) extracted into `into`."""
    into.mkdir()
    archive = subprocess.run(["git", "-C", str(ROOT), "archive", rev, "tasks", "specs", "params.yaml"],
                             check=True, capture_output=True).stdout
    subprocess.run(["tar", "-x", "-C", str(into)], input=archive, check=True)
    return into


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--docs", type=int, nargs="+", default=[50_000, 200_000], help="corpus sizes to measure")
    ap.add_argument("--before-rev", default=None, help="git revision of the code to compare with (e.g. main)")
    args = ap.parse_args()
    with tempfile.TemporaryDirectory(prefix="validate-memory-") as tmp:
        codes = [("this checkout", ROOT)]
        if args.before_rev:
            codes.insert(0, (args.before_rev, checkout(args.before_rev, Path(tmp) / "before")))
        print("| code | documents | text MiB | peak RSS MiB | wall s | results.json same as first |")
        print("|---|---:|---:|---:|---:|---|")
        for docs in args.docs:
            corpus = Path(tmp) / f"corpus-{docs}"
            text = build_corpus(corpus, docs)
            first = None
            for name, code in codes:
                rss, wall = run_validate(code, corpus)
                result = (corpus / "data" / "validate" / "results.json").read_bytes()
                first = result if first is None else first
                same = "yes" if result == first else "NO"
                print(f"| {name} | {docs:,} | {text / 2**20:,.0f} | {rss:,.0f} | {wall:.1f} | {same} |",
                      flush=True)


if __name__ == "__main__":
    main()
