"""Yardsticks the review gate compares a model against: a unigram baseline's held-out perplexity, and how much a
generation repeats itself.

The unigram baseline predicts every token with its frequency among mix's train targets (add-one smoothed over
the vocabulary, so a token never seen in train costs log(V + N) nats instead of infinity) and is scored on the
same val targets the model's perplexity is (every window's positions 1..seq_len). A model that learned nothing
beyond token frequencies scores about this; one that beats it by a margin has learned context.
"""

from __future__ import annotations

import json
import math
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import numpy as np

from tasks.data.mixing.packing import LAYOUT_FILE, PackedDataset

CHUNK = 4096  # sequences per bincount: bounded memory on any split size


def target_counts(ds: PackedDataset, vocab_size: int) -> np.ndarray:
    """[vocab_size] int64: how often each id is a target (window positions 1..seq_len) in the split."""
    counts = np.zeros(vocab_size, dtype=np.int64)
    for start in range(0, len(ds), CHUNK):
        block = np.stack([ds[i][1:] for i in range(start, min(start + CHUNK, len(ds)))]).astype(np.int64)
        counts += np.bincount(block.ravel(), minlength=vocab_size)[:vocab_size]
    return counts


def unigram_perplexity(mix_dir: Path) -> dict[str, Any]:
    """Perplexity of the add-one-smoothed unigram distribution of mix's train targets on its val targets."""
    layout = json.loads((Path(mix_dir) / LAYOUT_FILE).read_text())
    vocab = int(layout["vocab_size"])
    train = target_counts(PackedDataset(mix_dir, "train"), vocab)
    val = target_counts(PackedDataset(mix_dir, "val"), vocab)
    n_val = int(val.sum())
    if n_val == 0:
        raise ValueError(f"{mix_dir} has no validation tokens to score the unigram baseline on")
    logp = np.log(train + 1.0) - math.log(float(train.sum()) + vocab)        # [V]
    loss = float(-(val * logp).sum() / n_val)
    return {"kind": "unigram", "loss": round(loss, 6), "perplexity": round(math.exp(loss), 6),
            "train_tokens": int(train.sum()), "val_tokens": n_val}


def repeated_ngram_share(tokens: list[str], n: int) -> float | None:
    """1 − distinct/total n-grams of one sequence (0: no n-gram repeats; →1: a loop); None when shorter than n."""
    grams = [tuple(tokens[i:i + n]) for i in range(len(tokens) - n + 1)]
    return 1.0 - len(set(grams)) / len(grams) if grams else None


def repetition(texts: Iterable[str], n: int) -> float | None:
    """The mean repeated word-n-gram share over texts long enough to have one (None when none is)."""
    shares = [s for s in (repeated_ngram_share(t.split(), n) for t in texts) if s is not None]
    return sum(shares) / len(shares) if shares else None
