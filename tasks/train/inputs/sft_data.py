"""SFT data: render instruction records, pack them into rows without cross-sample leakage, and the per-token loss.

Packing. A row holds seq_len + 1 tokens (the +1 is the last target). Samples are placed whole, first-fit in a
seeded random order, into the first of the most recent `open_rows` rows with room (a bounded window keeps
packing O(n·open_rows); older rows are closed). The rest of a row is `<|pad|>`. Per row, with T = seq_len:

    input_ids    [T]  row[:-1]
    targets      [T]  row[1:]
    weights      [T]  loss mask of the target token, 0 on padding and on the first target of every sample
                      after the first (predicting sample B's first token from sample A's last one)
    segment_ids  [T]  0, 1, ... per sample in the row; padding is the next id (its own segment)
    position_ids [T]  0.. restarting at every segment (RoPE positions as if each sample were alone)

With `Transformer.forward(input_ids, segment_ids=..., position_ids=...)` attention is block-diagonal causal, so a
sample's logits are exactly those of the sample run alone. Samples longer than seq_len + 1 are dropped (or cut
to fit with overflow="truncate"); samples with no loss token left are dropped. Every dropped sample is listed
with its reason, and the counts add up: samples = packed + dropped.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Iterable, Literal, Mapping, Sequence

import numpy as np
import torch
import torch.distributed as dist
from tokenizers import Tokenizer

from tasks.train.inputs.chat import DEFAULT_FORMAT, ChatFormat, render
from tasks.train.inputs.chat_template import TemplateChat
from tasks.train.inputs.data import to_device
from tasks.train.parallel.tensor_parallel import token_cross_entropy
from tasks.train.parallel.tp_context import NO_TP, TPContext

Sample = tuple[Sequence[int], Sequence[int]]  # (ids, loss_mask) as rendered by `chat.render`


def render_records(records: Iterable[Mapping[str, Any]], tok: Tokenizer, fmt: ChatFormat = DEFAULT_FORMAT,
                   chat: TemplateChat | None = None) -> tuple[list[Sample], list[str], list[tuple[str, str]]]:
    """Render instruct jsonl records ({"id", "messages", ...}): (samples, their ids, rejected (id, reason)).
    `chat`: a checkpoint's template (`tasks.train.inputs.chat_template.TemplateChat`) instead of forgeline's."""
    samples, ids, rejected = [], [], []
    for rec in records:
        rid = str(rec.get("id"))
        try:
            samples.append(chat.render(rec["messages"]) if chat is not None else render(rec["messages"], tok, fmt))
            ids.append(rid)
        except (KeyError, TypeError, ValueError) as err:  # a malformed record is reported, not fatal
            rejected.append((rid, f"render: {err}"))
    return samples, ids, rejected


@dataclass
class Packed:
    """Packed rows (numpy, int32 / float32) plus where every sample went."""

    input_ids: np.ndarray     # [N, T]
    targets: np.ndarray       # [N, T]
    weights: np.ndarray       # [N, T]
    segment_ids: np.ndarray   # [N, T]
    position_ids: np.ndarray  # [N, T]
    rows: list[list[int]]     # sample indexes (into the input list) per row, in row order
    dropped: list[tuple[int, str]] = field(default_factory=list)  # (sample index, reason), sorted
    stats: dict[str, Any] = field(default_factory=dict)

    def batch(self, row_indexes: Sequence[int], device: torch.device | str = "cpu") -> dict[str, torch.Tensor]:
        """Tensors of the given rows for `Transformer.forward` and `sft_loss_sums` (ids as int64), on `device`
        (`data.to_device`: without a host synchronisation on CUDA)."""
        idx = np.asarray(row_indexes, dtype=np.int64)
        out = {k: torch.from_numpy(getattr(self, k)[idx]).long()
               for k in ("input_ids", "targets", "segment_ids", "position_ids")}   # [b, T]
        out["weights"] = torch.from_numpy(self.weights[idx])                      # [b, T] float32
        return {k: to_device(v, device) for k, v in out.items()}


def _first_fit(lengths: np.ndarray, order: np.ndarray, capacity: int, open_rows: int) -> list[list[int]]:
    """Sample indexes per row: each sample (in `order`) goes to the first open row with room, else a new row."""
    rows: list[list[int]] = []
    open_: list[tuple[int, int]] = []  # (row, remaining), oldest first
    for k in order.tolist():
        need = int(lengths[k])
        slot = next((j for j, (_, rem) in enumerate(open_) if rem >= need), None)
        if slot is None:
            rows.append([])
            open_.append((len(rows) - 1, capacity))
            slot = len(open_) - 1
        r, rem = open_[slot]
        rows[r].append(k)
        open_[slot] = (r, rem - need)
        # close full rows (< 2 tokens can hold no target) and the oldest beyond the window
        open_ = [(r, rem) for r, rem in open_ if rem >= 2][-open_rows:]
    return rows


def pack_samples(samples: Sequence[Sample], seq_len: int, pad_id: int, seed: int,
                 overflow: Literal["drop", "truncate"] = "drop", open_rows: int = 64,
                 groups: Sequence[Sequence[int]] | None = None) -> Packed:
    """Pack rendered samples into rows of seq_len + 1 tokens (see the module docstring). Deterministic in seed.

    `groups` (sample indexes; default: each sample alone): samples that must share a row, adjacent and in this
    order, each still its own segment — preference tuning's chosen and rejected answers of one pair, whose loss
    needs both in one micro-batch. A group whose member is dropped, or longer than a row, is dropped whole."""
    if seq_len < 1 or open_rows < 1:
        raise ValueError("seq_len and open_rows must be ≥ 1")
    cap = seq_len + 1
    toks: dict[int, np.ndarray] = {}
    masks: dict[int, np.ndarray] = {}
    dropped: list[tuple[int, str]] = []
    truncated = 0
    for k, (ids, mask) in enumerate(samples):
        ids, mask = np.asarray(ids, dtype=np.int64), np.asarray(mask, dtype=np.float32)
        if len(ids) != len(mask):
            raise ValueError(f"sample {k}: {len(ids)} ids but {len(mask)} mask entries")
        if len(ids) > cap:
            if overflow == "drop":
                dropped.append((k, f"too_long: {len(ids)} tokens > seq_len + 1 = {cap}"))
                continue
            ids, mask = ids[:cap], mask[:cap]
            truncated += 1
        if mask[1:].sum() <= 0:  # position 0 is never a target inside its own sample
            dropped.append((k, "no_loss_tokens"))
            continue
        toks[k], masks[k] = ids, mask
    units = [[k] for k in range(len(samples))] if groups is None else [list(g) for g in groups]
    unit_len = np.zeros(len(units), dtype=np.int64)
    live = []
    for u, members in enumerate(units):
        size = sum(len(toks[k]) for k in members if k in toks)
        why = "group: another member was dropped" if any(k not in toks for k in members) else \
            f"too_long: group of {size} tokens > seq_len + 1 = {cap}" if size > cap else None
        if why is not None:  # never for a sample alone: its own checks above already decided
            dropped += [(k, why) for k in members if toks.pop(k, None) is not None]
            continue
        unit_len[u] = size
        live.append(u)
    kept = np.array(sorted(toks), dtype=np.int64)
    lengths = np.zeros(len(samples), dtype=np.int64)
    lengths[kept] = [len(toks[k]) for k in kept.tolist()]
    order = np.array(live, dtype=np.int64)[np.random.default_rng(seed).permutation(len(live))]
    rows = [[k for u in row for k in units[u]] for row in _first_fit(unit_len, order, cap, open_rows)]

    n = len(rows)
    tok = np.full((n, cap), pad_id, dtype=np.int32)    # [N, T+1]
    lmask = np.zeros((n, cap), dtype=np.float32)       # [N, T+1] loss mask of each token as a target
    seg = np.zeros((n, cap), dtype=np.int32)           # [N, T+1]
    pos = np.zeros((n, cap), dtype=np.int32)           # [N, T+1]
    for r, members in enumerate(rows):
        at = 0
        for j, k in enumerate(members):
            L = len(toks[k])
            tok[r, at:at + L], lmask[r, at:at + L] = toks[k], masks[k]
            seg[r, at:at + L], pos[r, at:at + L] = j, np.arange(L)
            at += L
        seg[r, at:], pos[r, at:] = len(members), np.arange(cap - at)  # padding: one more segment
    same = seg[:, 1:] == seg[:, :-1]                    # [N, T] target in the input token's own sample
    weights = lmask[:, 1:] * same                       # [N, T]
    stats = {
        "samples": len(samples), "packed": int(len(kept)), "dropped": len(dropped),
        "dropped_too_long": sum(r.startswith("too_long") for _, r in dropped),
        "dropped_no_loss_tokens": sum(r == "no_loss_tokens" for _, r in dropped),
        "truncated": truncated, "rows": n, "seq_len": seq_len,
        "tokens": int(lengths.sum()), "loss_tokens": int(weights.sum()),
        "fill": float(lengths.sum() / (n * cap)) if n else 0.0,
    }
    return Packed(input_ids=tok[:, :-1].copy(), targets=tok[:, 1:].copy(), weights=weights,
                  segment_ids=seg[:, :-1].copy(), position_ids=pos[:, :-1].copy(), rows=rows,
                  dropped=sorted(dropped), stats=stats)


# -------------------------------------------------------------------------------------------------- the loss
def sft_loss_sums(logits: torch.Tensor, targets: torch.Tensor, weights: torch.Tensor, tp: TPContext = NO_TP
                  ) -> tuple[torch.Tensor, torch.Tensor]:
    """(Σ weight·cross-entropy, Σ weight) of a micro-batch; logits [B, T, V], targets/weights [B, T]; `tp`: the
    group a vocab-parallel head split the logits over ([B, T, V/tp], this rank's columns; a collective).

    Not a mean: a micro-batch mean would give a micro-batch with 3 assistant tokens the same say in the step as
    one with 3,000. Normalize by the token count of the whole optimizer step instead:

      1. before the step's forwards, sum `weights` of all this rank's micro-batches (the weights are data,
         known up front) and all-reduce that sum over the data-parallel group: `global_token_count`;
      2. for each micro-batch backpropagate `step_loss(loss_sum, global_count, dp, grad_accum)`,
         i.e. loss_sum · dp · grad_accum / global_count. The factor undoes DeepSpeed's own scaling: its
         `engine.backward` divides the loss by grad_accum and its gradient all-reduce averages over dp
         ranks (with a plain loop that sums gradients, pass dp = grad_accum = 1);
      3. the resulting gradient is ∇(Σ_all tokens w·ce / Σ_all w): that of one batch holding every micro-batch
         of every rank. For logging, all-reduce the loss sums too and divide by the same global count.
    Cross entropy runs in float32 whatever the logits' dtype.
    """
    ce = token_cross_entropy(logits, targets, tp)                                  # [B·T]
    w = weights.reshape(-1).float()                                                # [B·T]
    return (ce * w).sum(), w.sum()


def global_token_count(counts: Iterable[torch.Tensor | float], group: dist.ProcessGroup | None = None,
                       device: torch.device | str = "cpu") -> torch.Tensor:
    """Σ of this rank's micro-batch token counts, summed over the data-parallel `group` when distributed.

    `device` must suit the backend: "cpu" for gloo, the rank's GPU for nccl.
    """
    total = torch.tensor(float(sum(float(c) for c in counts)), dtype=torch.float64, device=device)
    if dist.is_available() and dist.is_initialized():
        dist.all_reduce(total, group=group)  # gloo/nccl: one tiny all-reduce per optimizer step
    return total


def step_loss(loss_sum: torch.Tensor, global_count: torch.Tensor | float, dp: int, grad_accum: int) -> torch.Tensor:
    """The micro-batch loss to backpropagate so the step's gradient is per token over the global batch."""
    denom = max(float(global_count), 1.0)  # a step with no loss token gives zero gradient, not NaN
    return loss_sum * (dp * grad_accum / denom)
