"""Synthetic inputs for timing runs (`plan --measure`, the benchmarks) and for the tests: a mix-shaped folder
of random token documents and a PretrainRun writing under one folder.

`synthetic_mix` writes what the mix stage writes (packed train/val shards, index, packing.json) from random
token documents with per-source token ranges, without training a tokenizer: seconds instead of a mix run.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

from tasks.data.mixing.packing import pack_split, write_layout

if TYPE_CHECKING:
    from specs.pretrain import PretrainJob
    from specs.ranks import PretrainRun


def synthetic_mix(folder: Path, vocab_size: int = 256, seq_len: int = 32, docs: int = 120, val_docs: int = 12,
                  sources: tuple[str, ...] = ("prose", "code"), seed: int = 0) -> Path:
    """A mix-shaped folder of random documents; source k draws tokens from its own band of the vocab (so the
    model can learn something and per-source losses differ)."""
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    rng = np.random.default_rng(seed)
    eos, pad = 0, 1
    band = (vocab_size - 2) // len(sources)
    layout = {}
    for split, n in (("train", docs), ("val", val_docs)):
        arrays, ids, srcs = [], [], []
        for i in range(n):
            k = i % len(sources)
            length = int(rng.integers(seq_len // 2, seq_len * 3))
            # a repetitive pattern per source plus noise: learnable within a few steps
            base = 2 + k * band + (np.arange(length) * (k + 1)) % band
            noise = rng.integers(0, band, size=length)
            toks = np.where(rng.random(length) < 0.3, 2 + k * band + noise, base).astype(np.uint16)
            arrays.append(toks)
            ids.append(f"{split}/{sources[k]}/{i:05d}")
            srcs.append(sources[k])
        layout[split] = pack_split(arrays, ids, srcs, folder, split, seq_len, eos, "uint16", 10_000)
    write_layout(folder, seq_len, "uint16", vocab_size, eos, {"<|endoftext|>": eos, "<|pad|>": pad}, layout)
    return folder


def make_job(base: Path, mix_dir: Path, spec: PretrainJob, seed: int) -> PretrainRun:
    """A PretrainRun of `spec` writing under `base` (out/, checkpoints/, reports/, markers/)."""
    from specs.ranks import PretrainRun
    from tasks.train.objectives import reference
    from tasks.train.objectives.pretrain import PretrainObjective

    base = Path(base)
    (base / "out").mkdir(parents=True, exist_ok=True)
    return PretrainRun(spec=spec, mix_dir=str(mix_dir), out_dir=str(base / "out"),
                       ckpt_dir=str(base / "checkpoints"), reports_dir=str(base / "reports"),
                       marker_dir=str(base / "markers"), seed=seed, objective_ref=reference(PretrainObjective))
