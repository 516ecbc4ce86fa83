"""Which sequences each rank trains on at each step: a pure function of (seed, step), so resuming needs only
the step number.

Order: the train sequences of epoch e are `permutation(seed, e)` of 0..n-1 (numpy PCG64 seeded with
[seed, e]); the epochs are concatenated into one stream of positions. Step s (0-based) takes the global batch
of positions [s·G, (s+1)·G), G = micro_batch × grad_accum × dp. Data-parallel rank r takes the slice
[r·m·a, (r+1)·m·a) of it and feeds it as `a` micro-batches of `m` sequences. Hence the same global batch reaches
the optimizer for any dp (a dp = 1 run with grad_accum·dp micro-batches sees the same micro-batches) — the
basis of the tests that compare layouts. TP ranks and pipeline stages of one data-parallel replica read the same
micro-batches; only the first and last pipeline stages need them (inputs, labels).

Evaluation: `eval_batches × micro_batch` val sequences spread evenly over the val split, the same on every
rank and layout. Per-source loss: each target token is attributed to the source of the document it belongs to
(the packed index's spans), so a sequence straddling two documents splits its loss between their sources.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from typing import Iterator

import numpy as np
import torch

from specs.batch import StepBatches
from tasks.data.mixing.packing import PackedDataset
from tasks.train.parallel.tensor_parallel import token_cross_entropy
from tasks.train.parallel.tp_context import NO_TP, TPContext


def to_device(t: torch.Tensor, device: torch.device | str) -> torch.Tensor:
    """A host batch tensor on `device`. On CUDA from pinned memory with `non_blocking`: the copy is queued behind
    the step's work instead of first waiting for the device to finish it (a pageable copy blocks the host until
    the queue drains: a host synchronisation every step). torch's pinned-memory cache keeps the buffer until
    the copy is done."""
    if torch.device(device).type != "cuda":
        return t.to(device)
    return t.pin_memory().to(device, non_blocking=True)


@lru_cache(maxsize=4)
def epoch_permutation(seed: int, epoch: int, n: int) -> np.ndarray:
    return np.random.default_rng([seed, epoch]).permutation(n)


@dataclass(frozen=True)
class BatchPlan(StepBatches):
    seed: int
    n: int             # train sequences
    micro_batch: int
    grad_accum: int
    dp: int

    def positions(self, step: int) -> np.ndarray:
        """Sequence indexes of step `step`'s global batch, in order: [global_batch]."""
        pos = np.arange(step * self.global_batch, (step + 1) * self.global_batch, dtype=np.int64)
        epochs, within = pos // self.n, pos % self.n
        out = np.empty_like(pos)
        for e in np.unique(epochs):
            sel = epochs == e
            out[sel] = epoch_permutation(self.seed, int(e), self.n)[within[sel]]
        return out



def to_tensors(ds: PackedDataset, idx: np.ndarray) -> tuple[torch.Tensor, torch.Tensor]:
    """(input_ids, labels), each int64 [len(idx), seq_len]."""
    seqs = np.stack([np.asarray(ds[int(i)], dtype=np.int64) for i in idx])        # [m, seq_len + 1]
    t = torch.from_numpy(seqs)
    return t[:, :-1].contiguous(), t[:, 1:].contiguous()


class TrainData:
    def __init__(self, folder: Path, seed: int, micro_batch: int, grad_accum: int, dp: int):
        self.ds = PackedDataset(folder, "train")
        if len(self.ds) == 0:
            raise ValueError(f"pretrain: {folder} has no train sequences")
        self.plan = BatchPlan(seed, len(self.ds), micro_batch, grad_accum, dp)

    def micro_batches(self, step: int, dp_rank: int) -> list[tuple[torch.Tensor, torch.Tensor]]:
        return [to_tensors(self.ds, idx) for idx in self.plan.micro_indexes(step, dp_rank)]

    def doc_ids(self, step: int) -> list[str]:
        """The documents in step `step`'s global batch (every rank's share), sorted: for incident reports."""
        return sorted({d for i in self.plan.positions(step) for d in self.ds.docs(int(i))})

    def iterator(self, step: int, dp_rank: int) -> Iterator[tuple[torch.Tensor, torch.Tensor]]:
        """The pipeline engine's `train_batch(data_iter)` format: (inputs, labels) tuples."""
        return iter(self.micro_batches(step, dp_rank))


@dataclass
class EvalBatch:
    inputs: torch.Tensor    # [m, T] int64
    labels: torch.Tensor    # [m, T] int64
    source: torch.Tensor    # [m, T] int64: index into EvalData.sources of each target token's source
    weight: torch.Tensor    # [m, T] float: 1, or 0 for padding sequences


class EvalData:
    """Fixed val micro-batches of exactly `micro_batch` sequences (a pipeline wants one shape); a val split
    smaller than one micro-batch is padded by repeating sequences with weight 0."""

    def __init__(self, folder: Path, micro_batch: int, eval_batches: int):
        self.ds = PackedDataset(folder, "val")
        n = len(self.ds)
        self.sources: list[str] = sorted({s for i in range(n) for s in self.ds.sources(i)})
        self.batches: list[EvalBatch] = []
        if n == 0:
            return
        count = max(1, min(eval_batches, n // micro_batch))
        total = count * micro_batch
        if n >= total:  # evenly spaced over the split: long documents span many sequences, so the first
            idx = (np.arange(total) * n) // total  # `total` would cover few documents and sources
            real = np.ones(total, dtype=bool)
        else:
            idx, real = np.arange(total) % n, np.arange(total) < n
        code = {s: k for k, s in enumerate(self.sources)}
        T = self.ds.seq_len
        for b in range(count):
            sel = idx[b * micro_batch:(b + 1) * micro_batch]
            x, y = to_tensors(self.ds, sel)
            src = torch.zeros((len(sel), T), dtype=torch.int64)
            for row, i in enumerate(sel):
                for start, end, _doc, s in self.ds.spans(int(i)):
                    # window position p is the target of input position p - 1: targets p in [start, end)
                    lo, hi = max(start - 1, 0), min(end - 1, T)
                    if hi > lo:
                        src[row, lo:hi] = code[s]
            w = torch.from_numpy(real[b * micro_batch:(b + 1) * micro_batch].astype(np.float32))
            self.batches.append(EvalBatch(x, y, src, w[:, None].expand(-1, T).contiguous()))


def loss_sums(logits: torch.Tensor, batch_labels: torch.Tensor, source: torch.Tensor, weight: torch.Tensor,
              n_sources: int, tp: TPContext = NO_TP) -> torch.Tensor:
    """[2·S + 2] float64: per-source loss sums, per-source token counts, total loss sum, total count.
    `tp`: the group a vocab-parallel head split `logits` over (this rank's columns; a collective), else whole."""
    tok = token_cross_entropy(logits, batch_labels.to(logits.device), tp).double()  # [m·T]
    w = weight.reshape(-1).double().to(tok.device)
    src = source.reshape(-1).to(tok.device)
    sums = torch.zeros(n_sources, dtype=torch.float64, device=tok.device).index_add_(0, src, tok * w)
    counts = torch.zeros(n_sources, dtype=torch.float64, device=tok.device).index_add_(0, src, w)
    return torch.cat([sums, counts, (tok * w).sum().reshape(1), w.sum().reshape(1)])
