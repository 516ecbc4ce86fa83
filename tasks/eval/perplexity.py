"""Held-out perplexity, overall and per source, on mix's validation shards.

The same machinery as pretraining's periodic eval (`tasks.train.inputs.data.EvalData` + `loss_sums`: each target token
is attributed to the source of the document it belongs to), over more batches: the training loop samples a few
for speed, this reads as many as `evaluate.perplexity_batches` asks (or all). Perplexity = exp(mean token loss).
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import torch

from tasks.train.inputs.data import EvalData, loss_sums
from tasks.train.modeling.model import Transformer


def _r(x: float) -> float:
    """Rounded for the JSON outputs: the last bits of a float sum are noise no reader should diff on."""
    return round(x, 6)


def _entry(loss_sum: float, tokens: float) -> dict[str, Any]:
    loss = loss_sum / tokens
    return {"loss": _r(loss), "perplexity": _r(math.exp(loss)), "tokens": int(tokens)}


@torch.inference_mode()
def perplexity(model: Transformer, mix_dir: Path, batch_size: int, batches: int | None) -> dict[str, Any]:
    """Mean loss and perplexity overall and per source over evenly spaced val batches of `batch_size`."""
    evald = EvalData(mix_dir, batch_size, batches if batches is not None else 1 << 62)
    if not evald.batches:
        raise ValueError(f"evaluate: {mix_dir} has no validation sequences to measure perplexity on "
                         "(raise mix.val_fraction / mix.min_val_docs, or lower mix.seq_len)")
    if evald.ds.seq_len != model.cfg.seq_len:
        raise ValueError(f"evaluate: the val shards hold sequences of {evald.ds.seq_len} tokens but the model was "
                         f"trained on {model.cfg.seq_len}: pretrain is stale relative to mix")
    device = next(model.parameters()).device
    S = len(evald.sources)
    sums = torch.zeros(2 * S + 2, dtype=torch.float64)                  # [2·S + 2], see loss_sums
    real = 0
    for b in evald.batches:
        logits = model(b.inputs.to(device))                             # [m, T, V]
        sums += loss_sums(logits, b.labels.to(device), b.source, b.weight, S).cpu()
        real += int(b.weight[:, 0].sum())                               # padding sequences have weight 0
    by_source = {s: _entry(float(sums[k]), float(sums[S + k])) for k, s in enumerate(evald.sources)
                 if sums[S + k] > 0}
    return {
        "overall": _entry(float(sums[2 * S]), float(sums[2 * S + 1])),
        "by_source": by_source,
        "batches": len(evald.batches), "batch_size": batch_size, "sequences": real,
        "val_sequences": len(evald.ds), "seq_len": evald.ds.seq_len,
    }
