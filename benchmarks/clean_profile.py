"""Clean's per-document cost, step by step: CPU µs per document of each filter and step of phase 1.

    python benchmarks/data_scale.py --docs 5000 --workers 1 --work /tmp/ds   # a project with data/ingest
    python benchmarks/clean_profile.py /tmp/ds/n5000-*                       # the table

Runs `tasks.data.cleanup.cleaning.process_shard` over the project's ingest shards in this process (the stage's spec,
seed and decontamination index, as `python -m tasks clean` builds them) with each step's function wrapped by a
timer of process CPU time (exclusive of the wrapped steps it calls), so the figures hold on a loaded machine
too. A step the code of this checkout does not have is left out, so the same script profiles an older checkout
(copy it into that checkout's `benchmarks/`): that is how the README's before/after table was made.
"""

from __future__ import annotations

import argparse
import importlib
import sys
import tempfile
import time
from collections import defaultdict
from pathlib import Path
from typing import Any, Callable

import yaml

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from specs import Params  # noqa: E402  (after the sys.path insert above)
from tasks.data.cleanup import cleaning  # noqa: E402
from tasks.data.filtering.decontaminate import heldout_texts, keep_indexable  # noqa: E402

STEPS = [  # (module, function, label): what process_shard calls, old and new names
    ("tasks.data.cleanup.cleaning", "normalize_text", "normalize"), ("tasks.data.cleanup.cleaning", "scrub_pii", "PII"),
    ("tasks.data.cleanup.cleaning", "exact_key", "exact-dedup key"), ("tasks.data.cleanup.cleaning", "meta_json", "meta JSON"),
    ("tasks.data.dedup.minhash", "signatures", "MinHash signatures"),
    ("tasks.data.dedup.dedup_files", "write_shard_inputs", "dedup inputs (band keys)"),
    ("tasks.data.cleanup.cleaning", "write_table", "work table write"), ("pyarrow.parquet", "read_table", "shard read"),
]


class Timer:
    """CPU seconds per label, a nested timed call's time counted to it alone."""

    def __init__(self) -> None:
        self.seconds: dict[str, float] = defaultdict(float)
        self.stack: list[float] = []

    def wrap(self, label: str, fn: Callable[..., Any]) -> Callable[..., Any]:
        def timed(*args: Any, **kwargs: Any) -> Any:
            t0 = time.process_time()
            self.stack.append(0.0)
            try:
                return fn(*args, **kwargs)
            finally:
                spent, inner = time.process_time() - t0, self.stack.pop()
                self.seconds[label] += spent - inner
                if self.stack:
                    self.stack[-1] += spent
        return timed


class TimedFilter:
    """A clean filter with its call (and its batch call, where it has one) timed."""

    def __init__(self, f: Any, timer: Timer):
        self.name = f.name
        self.call = timer.wrap(f"filter: {f.name}", f.__call__)
        if hasattr(f, "batch"):
            self.batch = timer.wrap(f"filter: {f.name}", f.batch)

    def __call__(self, doc: Any) -> Any:
        return self.call(doc)


def profile(project: Path, max_shards: int | None) -> tuple[int, float, dict[str, float]]:
    params = Params.model_validate(yaml.safe_load((project / "params.yaml").read_text()))
    job = params.section("clean")
    # what the stage indexes (benchmark_files aside): evaluate's prompts and instruct's held-out set if present
    texts = [(f"evaluate.prompts:{pid}", text) for pid, text in job.eval_prompts.items()]
    if (project / "data/instruct/heldout.jsonl").exists():
        texts += heldout_texts(project / "data/instruct/heldout.jsonl")
    index_texts = tuple(keep_indexable(texts, job.clean.decontamination.min_words)[0])
    timer = Timer()
    for module, name, label in STEPS:
        m = importlib.import_module(module)
        if hasattr(m, name):
            setattr(m, name, timer.wrap(label, getattr(m, name)))
    built = [TimedFilter(f, timer) for f in cleaning.filters_for(job.clean, project, index_texts)]
    cleaning.filters_for = lambda *a, **k: built
    shards = sorted((project / "data/ingest/shards").glob("*.parquet"))[:max_shards]
    out, docs = Path(tempfile.mkdtemp(prefix="clean-profile-")), 0
    t0 = time.process_time()
    for s in shards:
        docs += cleaning.process_shard(s, out / f"{s.stem}.parquet", job.clean, params.run.seed, project, 8,
                                       index_texts)
    return docs, time.process_time() - t0, dict(timer.seconds)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("project", type=Path, help="a project folder holding params.yaml and data/ingest")
    ap.add_argument("--shards", type=int, default=None, help="profile only the first N ingest shards")
    args = ap.parse_args()
    docs, total, steps = profile(args.project, args.shards)
    print(f"{docs:,} documents: {total:.2f} CPU s, {1e6 * total / docs:,.0f} µs per document")
    print("| step | µs/doc | share |\n|---|---:|---:|")
    rest = total - sum(steps.values())
    for label, sec in [*sorted(steps.items(), key=lambda kv: -kv[1]), ("rest (record dicts, verdicts, JSON)", rest)]:
        print(f"| {label} | {1e6 * sec / docs:,.0f} | {100 * sec / total:.0f} % |")


if __name__ == "__main__":
    main()
