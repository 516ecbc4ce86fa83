"""A small real mix output and the pretrain stage run on it, shared by tests/test_pretrain.py,
tests/test_pretrain_guard.py, tests/test_sft.py and tests/test_review_gate_real.py (the session fixtures `mixed`
and `pretrained_run` in tests/conftest.py build them once)."""

from __future__ import annotations

import shutil
from pathlib import Path

import numpy as np

from specs.mix import MixSpec
from specs.pretrain import PretrainJob
from tasks import mix, pretrain
from tasks.core.files import atomic_path
from tasks.core.runner import StagePaths
from tasks.data.records import RECORD_SCHEMA, write_table

SEED = 11
SPEC = {
    "model": {"flavor": "tiny", "n_layers": 2, "d_model": 32, "n_heads": 4, "n_kv_heads": 2},
    "parallel": {},
    "train": {"steps": 6, "micro_batch_size": 4, "log_every": 1, "eval_every": 3, "eval_batches": 4,
              "checkpoint_every": 2, "keep_checkpoints": 2, "optim": {"warmup_steps": 2}},
}


def write_clean_shards(root: Path) -> None:
    rng = np.random.default_rng(0)
    for source, n_docs in (("prose", 40), ("code", 30)):
        vocab = ["".join(rng.choice(list("abcdefghijklmnop"), size=rng.integers(2, 7))) for _ in range(120)]
        rows = [{"id": f"{source}/{k:03d}", "text": f"{source} {k}. " + " ".join(rng.choice(vocab, size=50)) + ".",
                 "source": source, "lang": "en", "origin": "synthetic", "meta": "{}", "media": []}
                for k in range(n_docs)]
        with atomic_path(root / "data" / "clean" / "shards" / f"{source}-00000.parquet") as tmp:
            write_table(rows, RECORD_SCHEMA, tmp)


def build_mixed(root: Path) -> Path:
    """`root` made a project root holding data/mix/ from the real mix stage (tokenizer.json, shards, index)."""
    write_clean_shards(root)
    paths = StagePaths(root=root, stage="mix", seed=SEED)
    paths.out.mkdir(parents=True)
    mix.run(MixSpec(tokenizer={"vocab_size": 512, "train_chars": 100_000}, seq_len=32, val_fraction=0.1), paths)
    return root


def fresh_root(mixed: Path, dest: Path) -> Path:
    shutil.copytree(mixed / "data" / "mix", dest / "data" / "mix")
    return dest


def run_stage(root: Path, spec: dict | None = None):
    """What `python -m tasks pretrain` does around run(): a clean out folder (DVC deletes it before a rerun)."""
    paths = StagePaths(root=root, stage="pretrain", seed=SEED)
    shutil.rmtree(paths.out, ignore_errors=True)
    paths.out.mkdir(parents=True)
    return pretrain.run(PretrainJob.model_validate(spec or SPEC), paths)
