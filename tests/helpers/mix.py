"""Clean-stage shards of synthetic sources and the mix stage run on them (tests/test_mix.py,
tests/test_mix_stream.py)."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np

from specs.mix import MixSpec
from specs.results import StageResult
from specs.run import ExecutorSpec
from tasks import mix
from tasks.core.files import atomic_path
from tasks.core.runner import StagePaths
from tasks.data.records import RECORD_SCHEMA, write_table

SMALL_TOKENIZER = {"vocab_size": 1024, "train_chars": 200_000}


def doc_text(rng: np.random.Generator, vocab: list[str], words: int, tag: str) -> str:
    body = " ".join(rng.choice(vocab, size=words))
    return f"{tag}. {body}."  # the tag makes every document's text unique and findable


def write_corpus(root: Path, sizes: dict[str, tuple[int, int]], seed: int = 0) -> dict[str, str]:
    """Clean-stage shards for sources {name: (documents, words per document)}; returns id -> text."""
    rng = np.random.default_rng(seed)
    letters = list("abcdefghijklmnopqrstuvwxyz")
    texts = {}
    for s, (n_docs, words) in sizes.items():
        # Each source has its own vocabulary, so its text looks different (as prose and code do).
        vocab = ["".join(rng.choice(letters, size=rng.integers(2, 9))) for _ in range(300)]
        rows = []
        for k in range(n_docs):
            doc_id = f"{s}/doc{k:04d}"
            texts[doc_id] = doc_text(rng, vocab, int(words * rng.uniform(0.5, 1.5)), f"{s} {k}")
            rows.append({"id": doc_id, "text": texts[doc_id], "source": s, "lang": "en", "origin": "synthetic",
                         "meta": "{}", "media": []})
        with atomic_path(root / "data" / "clean" / "shards" / f"{s}-00000.parquet") as tmp:
            write_table(rows, RECORD_SCHEMA, tmp)
    return texts


def run_mix(root: Path, seed: int = 7, executor: ExecutorSpec = ExecutorSpec(workers=1),
            **spec) -> tuple[StageResult, dict]:
    spec = MixSpec(**{"tokenizer": SMALL_TOKENIZER, "seq_len": 64, **spec})
    paths = StagePaths(root=root, stage="mix", seed=seed, executor=executor)
    paths.out.mkdir(parents=True, exist_ok=True)
    result = mix.run(spec, paths)
    return result, json.loads((paths.out / "report.json").read_text())
