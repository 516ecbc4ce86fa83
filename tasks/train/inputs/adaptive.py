"""Adaptive source weights during pretraining (`mix.adaptive`): the update rule, the weighted sampler, and the
state that travels with each checkpoint.

Rule (DoReMi-style exponentiated gradient, Xie et al. 2023, "DoReMi", Alg. 1, run online on the val loss):
at an update point (every `every` steps, default each evaluation, from `warmup_steps` on) each train source s
gets a lag signal λ_s from its validation loss L_s:
    reference initial:  λ_s = ln(L_s / L_ref,s), L_ref = the loss at the first update point (that point only
                        records it) — the source that improved least since then lags most;
    reference previous: λ_s = ln(L_prev,s / L_s), the relative drop since the previous update point — the
                        sources still learning fastest gain, plateaued ones (learned, or unlearnable) lose;
    reference target:   λ_s = max(L_s − target_s, 0), DoReMi's clipped excess loss over a reference model's.
A source without a val loss this time gets the mean λ of the others (it neither gains nor loses on average).
Then  a = w ⊙ exp(η·λ) / Σ(…),  w' = (1 − c)·a + c·w0,  w'' = clip(k·w', lo, hi) with the one k that makes
Σ w'' = 1 (so ratios between unclamped sources are kept), η = step_size, c = smoothing, w0 = base weights.
Base weights w0: each source's share of the train sequences (what the fixed sampler draws on average), put
into the bounds the same way. Losses are the eval rows' per-source values (all-reduced, then rounded to 6
decimals), so every rank computes the same weights, and a resumed run the same ones again.

Sampler (`AdaptivePlan`, same interface as data.BatchPlan): a sequence belongs to the source holding most of
its L + 1 window tokens (ties: the alphabetically first source); each source has its own stream of its
sequences, epoch e being the permutation PCG64([seed, SALT_STREAM, source code, e]) of the source's pool.
Step t draws c_t,s sequences from source s's stream, where the targets T_s(t) = Σ_{u≤t} G·w_s(u) accumulate
and c_t = largest-remainder allocation of G over max(T(t) − N(t−1), 0) (N = sequences drawn so far): every
step's batch has exactly G sequences, the realized counts stay within one sequence per source of the targets,
and no fractional share is lost to rounding. The G drawn sequences are shuffled with PCG64([seed,
SALT_SHUFFLE, t]) so data-parallel ranks see mixed sources, then sliced per rank as BatchPlan does. Everything
is a pure function of (seed, step, weight history): the history — (from-batch, weights) entries, weights
applying to every data batch from `batch` on — is saved with each checkpoint (`adaptive_mix.json`), so a
resumed run draws the same batches. Batch indexes, not steps, key the history, so the stability guard's
skipped windows keep working (a rollback restores the history saved with the checkpoint it returns to).
The cumulative counts are cached per step (16·S bytes per step) and recomputed from step 0 after a resume.
"""

from __future__ import annotations

import bisect
import json
import math
from functools import lru_cache
from itertools import pairwise
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from specs.batch import StepBatches
from specs.mix import AdaptiveMixSpec
from tasks.core.files import write_json_atomic, write_text_atomic
from tasks.data.mixing.packing import PackedDataset

if TYPE_CHECKING:
    from specs.train import TrainLoopSpec
    from tasks.train.inputs.data import TrainData

STATE_FILE = "adaptive_mix.json"
SALT_STREAM, SALT_SHUFFLE = 0x4D4958, 0x534846  # keep these streams apart from data.epoch_permutation's
ROUND = 6


# ------------------------------------------------------------------------------------------------- the rule
def project(v: np.ndarray, lo: np.ndarray, hi: np.ndarray) -> np.ndarray:
    """clip(k·v, lo, hi) summing to 1 for the one scale k ≥ 0 that does it ([S] float64; Σlo ≤ 1 ≤ Σhi).

    The sum is continuous, non-decreasing and piecewise linear in k, with kinks where a source reaches its
    bound (k = lo/v or hi/v): find the segment where it crosses 1, then solve the linear piece exactly."""
    v = np.maximum(np.asarray(v, dtype=np.float64), 1e-300)

    def total(k: float) -> float:
        return float(np.clip(k * v, lo, hi).sum())

    if total(0.0) >= 1.0:
        return lo / lo.sum()
    kinks = np.unique(np.concatenate([lo / v, hi / v]))
    above = [k for k in kinks if total(k) >= 1.0]
    if not above:  # Σhi < 1: refused by bounds_for; keep the ratios of the caps
        return hi / hi.sum()
    k_hi = float(above[0])
    k_lo = float(kinks[kinks < k_hi].max()) if (kinks < k_hi).any() else 0.0
    mid = 0.5 * (k_lo + k_hi)
    free = (lo < mid * v) & (mid * v < hi)          # sources strictly inside their bounds on this segment
    fixed = np.clip(mid * v, lo, hi)[~free].sum()    # the others sit at a bound all along the segment
    k = (1.0 - fixed) / v[free].sum() if free.any() else k_hi
    w = np.clip(k * v, lo, hi)
    return w / w.sum()


def lag_signal(losses: np.ndarray, reference: np.ndarray, mode: str) -> np.ndarray:
    """λ per source ([S]); NaN losses (no val tokens) or references get the mean of the others."""
    if mode == "initial":
        lam = np.log(losses / reference)
    elif mode == "previous":
        lam = np.log(reference / losses)
    else:
        lam = np.maximum(losses - reference, 0.0)
    known = np.isfinite(lam)
    return np.where(known, lam, lam[known].mean() if known.any() else 0.0)


def next_weights(weights: np.ndarray, lam: np.ndarray, base: np.ndarray, lo: np.ndarray, hi: np.ndarray,
                 step_size: float, smoothing: float) -> np.ndarray:
    """One exponentiated-gradient step (see the module docstring); all arrays [S]."""
    z = np.log(np.maximum(weights, 1e-300)) + step_size * lam  # in log space: no overflow for large η·λ
    a = np.exp(z - z.max())
    a /= a.sum()
    return project((1.0 - smoothing) * a + smoothing * base, lo, hi)


def bounds_for(spec: AdaptiveMixSpec, sources: list[str]) -> tuple[np.ndarray, np.ndarray]:
    """Per-source (lo, hi) arrays; raises when no weights within them can sum to 1."""
    lo = np.array([spec.bounds.get(s, (spec.min_weight, spec.max_weight))[0] for s in sources])
    hi = np.array([spec.bounds.get(s, (spec.min_weight, spec.max_weight))[1] for s in sources])
    if lo.sum() > 1.0 + 1e-12 or hi.sum() < 1.0 - 1e-12:
        raise ValueError(f"mix.adaptive: bounds of the train sources {sources} must allow weights summing to 1 "
                         f"(Σmin = {lo.sum():.3f} must be ≤ 1 ≤ Σmax = {hi.sum():.3f})")
    return lo, hi


# ---------------------------------------------------------------------------------------------- the sampler
def majority_sources(ds: PackedDataset) -> tuple[list[str], np.ndarray]:
    """(sorted source names, [n] code of each train sequence's majority source; ties: the first name)."""
    n = len(ds)
    src_col, start_col = ds.index.column("sources").combine_chunks(), ds.index.column("starts").combine_chunks()
    encoded = src_col.flatten().dictionary_encode()                       # no Python string per piece
    seen = encoded.dictionary.to_pylist()
    names = sorted(seen)
    if n == 0:
        return names, np.zeros(0, dtype=np.int64)
    offsets = src_col.offsets.to_numpy()                                  # [n + 1] into the flat pieces
    flat_src = np.array([names.index(s) for s in seen], dtype=np.int64)[encoded.indices.to_numpy()]  # [pieces]
    starts = start_col.flatten().to_numpy().astype(np.int64)              # [pieces] window position of each
    seq_of = np.repeat(np.arange(n), np.diff(offsets))                    # [pieces] its sequence
    ends = np.append(starts[1:], ds.window)                               # next piece's start …
    last = np.zeros(len(starts), dtype=bool)
    last[offsets[1:] - 1] = True
    ends[last] = ds.window                                                # … or the window end
    tokens = np.zeros((n, len(names)), dtype=np.int64)                    # [n, S]
    np.add.at(tokens, (seq_of, flat_src), ends - starts)
    return names, tokens.argmax(axis=1)                                   # argmax takes the first of ties


@lru_cache(maxsize=64)
def _stream_permutation(seed: int, code: int, epoch: int, n: int) -> np.ndarray:
    return np.random.default_rng([seed, SALT_STREAM, code, epoch]).permutation(n)


def allocate(x: np.ndarray, total: int) -> np.ndarray:
    """Largest remainder: ints ≥ 0 summing to `total`, proportional to x ≥ 0 (ties: lower index first)."""
    if x.sum() <= 0:
        x = np.ones_like(x)
    q = x * (total / x.sum())
    out = np.floor(q).astype(np.int64)
    order = np.lexsort((np.arange(len(q)), -(q - out)))  # descending fractional part, then index
    out[order[:total - int(out.sum())]] += 1
    return out


def _first_difference(old: list[tuple[int, np.ndarray]], new: list[tuple[int, np.ndarray]]) -> int | None:
    """The first data batch whose weights may differ between two histories (None: identical)."""
    for i in range(max(len(old), len(new))):
        if i >= len(old) or i >= len(new):
            return (new if i < len(new) else old)[i][0]
        if old[i][0] != new[i][0] or not np.array_equal(old[i][1], new[i][1]):
            return min(old[i][0], new[i][0])
    return None


class AdaptivePlan(StepBatches):
    """Step `t`'s global batch drawn per source in proportion to the weights in effect for data batch t."""

    def __init__(self, seed: int, pools: list[np.ndarray], micro_batch: int, grad_accum: int, dp: int,
                 history: list[tuple[int, np.ndarray]]):
        self.seed, self.pools = seed, pools
        self.micro_batch, self.grad_accum, self.dp = micro_batch, grad_accum, dp
        self.n = int(sum(len(p) for p in pools))
        self._cum = np.zeros((1, len(pools)), dtype=np.int64)    # [steps + 1, S] drawn before each step
        self._target = np.zeros((1, len(pools)), dtype=np.float64)  # [steps + 1, S] Σ G·w before each step
        self._len = 1
        self.set_history(history)

    def set_history(self, history: list[tuple[int, np.ndarray]]) -> None:
        """Replace the (from-batch, weights) history; cached counts beyond the first change are dropped."""
        history = [(int(b), np.asarray(w, dtype=np.float64)) for b, w in history]
        if not history or history[0][0] != 0 or any(b2 < b1 for (b1, _), (b2, _) in pairwise(history)):
            raise ValueError("weight history must start at batch 0 and be ordered by batch")
        changed = _first_difference(getattr(self, "history", []), history)
        self.history = history
        self._batches = [b for b, _ in history]
        if changed is not None:
            self._len = min(self._len, changed + 1)  # counts before batch `changed` do not depend on it

    def weights_at(self, step: int) -> np.ndarray:
        return self.history[bisect.bisect_right(self._batches, step) - 1][1]

    def _extend(self, step: int) -> None:
        """Make the cumulative counts before step `step + 1` available."""
        need = step + 2
        if need > self._cum.shape[0]:
            grow = max(need, 2 * self._cum.shape[0])
            self._cum = np.resize(self._cum, (grow, self._cum.shape[1]))
            self._target = np.resize(self._target, (grow, self._target.shape[1]))
        G = self.global_batch
        for t in range(self._len - 1, step + 1):
            target = self._target[t] + G * self.weights_at(t)
            self._cum[t + 1] = self._cum[t] + allocate(np.maximum(target - self._cum[t], 0.0), G)
            self._target[t + 1] = target
        self._len = max(self._len, need)

    def counts(self, step: int) -> np.ndarray:
        """[S] sequences of each source in step `step`'s global batch (sum = global_batch)."""
        self._extend(step)
        return self._cum[step + 1] - self._cum[step]

    def positions(self, step: int) -> np.ndarray:
        """Sequence indexes of step `step`'s global batch: [global_batch]."""
        self._extend(step)
        parts = []
        for s, pool in enumerate(self.pools):
            k = np.arange(self._cum[step, s], self._cum[step + 1, s])      # this source's stream positions
            epochs, within = k // len(pool), k % len(pool)
            out = np.empty(len(k), dtype=np.int64)
            for e in np.unique(epochs):
                sel = epochs == e
                out[sel] = pool[_stream_permutation(self.seed, s, int(e), len(pool))[within[sel]]]
            parts.append(out)
        batch = np.concatenate(parts)
        return batch[np.random.default_rng([self.seed, SALT_SHUFFLE, step]).permutation(len(batch))]



# ------------------------------------------------------------------------------------------ the loop's mixer
class AdaptiveMixer:
    """Owns the weight history of one run: decides update points, applies the rule, feeds the sampler, and
    saves/restores its state with the checkpoints. Every rank holds one and computes the same values."""

    def __init__(self, spec: AdaptiveMixSpec, sources: list[str], pools: list[np.ndarray], plan: AdaptivePlan,
                 eval_every: int, steps: int):
        self.spec, self.sources, self.plan = spec, sources, plan
        self.eval_every, self.steps = eval_every, steps
        self.lo, self.hi = bounds_for(spec, sources)
        shares = np.array([len(p) for p in pools], dtype=np.float64)
        self.base = project(shares / shares.sum(), self.lo, self.hi)
        if spec.reference == "target":
            missing = [s for s in sources if s not in spec.targets]
            if missing:
                raise ValueError(f"mix.adaptive.targets: lacks train source(s) {missing}")
            self.reference = np.array([spec.targets[s] for s in sources], dtype=np.float64)
        else:
            self.reference = np.full(len(sources), np.nan)  # set at the first update point
        self.entries: list[dict[str, Any]] = [{"batch": 0, "step": 0, "weights": self.base.tolist()}]
        self._sync()

    @classmethod
    def attach(cls, spec: AdaptiveMixSpec, train: TrainLoopSpec, data: TrainData, ckpt_dir: Path, tag: str | None
               ) -> AdaptiveMixer | None:
        """Put an AdaptivePlan into `data` (a TrainData) when mix.adaptive is on, restoring the history saved
        with checkpoint `tag`; None when off. Refuses to resume across a change of sampler (the data order of
        the steps done so far would not be the one the checkpoint was trained on)."""
        saved = Path(ckpt_dir) / tag / STATE_FILE if tag is not None else None
        if saved is not None and saved.exists() != spec.enabled:
            raise ValueError(f"pretrain: checkpoint {tag} was trained with mix.adaptive "
                             f"{'on' if saved.exists() else 'off'} but this run has it "
                             f"{'on' if spec.enabled else 'off'}; restore the setting or delete {ckpt_dir}")
        if not spec.enabled:
            return None
        names, codes = majority_sources(data.ds)
        keep = [k for k in range(len(names)) if (codes == k).any()]  # a source never in the majority: no pool
        sources = [names[k] for k in keep]
        pools = [np.flatnonzero(codes == k) for k in keep]
        p = data.plan
        plan = AdaptivePlan(p.seed, pools, p.micro_batch, p.grad_accum, p.dp, [(0, np.ones(len(pools)))])
        mixer = cls(spec, sources, pools, plan, train.eval_every, train.steps)
        if saved is not None:
            mixer.restore(saved.parent)
        data.plan = plan
        return mixer

    # -------------------------------------------------------------------------------------------- updates
    def due(self, done: int) -> bool:
        """Whether step `done` (1-based, after its update) is an update point (never the last step)."""
        every = self.spec.every or self.eval_every
        return done >= max(self.spec.warmup_steps, 1) and done % every == 0 and done < self.steps

    @property
    def weights(self) -> np.ndarray:
        return np.asarray(self.entries[-1]["weights"])

    def update(self, done: int, val_loss_by_source: dict[str, float], next_batch: int) -> dict[str, Any]:
        """Apply the rule to step `done`'s per-source val losses; the new weights govern data batches from
        `next_batch` on. Returns the metrics row (`kind: mix`)."""
        losses = np.array([val_loss_by_source.get(s, math.nan) for s in self.sources], dtype=np.float64)
        if self.spec.reference != "target":
            first = np.isnan(self.reference) & np.isfinite(losses)
            self.reference = np.where(first, losses, self.reference)
            losses = np.where(first, np.nan, losses)  # a source's first loss only records its reference
        lam = lag_signal(losses, self.reference, self.spec.reference)
        if self.spec.reference == "previous":
            self.reference = np.where(np.isfinite(losses), losses, self.reference)
        w = next_weights(self.weights, lam, self.base, self.lo, self.hi, self.spec.step_size, self.spec.smoothing)
        self.entries.append({"batch": int(next_batch), "step": int(done), "weights": w.tolist()})
        self._sync()
        return self.row(done, lam)

    def row(self, step: int, lam: np.ndarray | None = None) -> dict[str, Any]:
        entry = self.entries[-1]
        row = {"kind": "mix", "step": step, "batch": entry["batch"],
               "weights": {s: round(float(w), ROUND) for s, w in zip(self.sources, entry["weights"])}}
        if lam is not None:
            row["lag"] = {s: round(float(x), ROUND) for s, x in zip(self.sources, lam)}
        return row

    def log_values(self) -> dict[str, float]:
        """For wandb: `mix_weight/<source>`."""
        return {f"mix_weight/{s}": float(w) for s, w in zip(self.sources, self.weights)}

    def _sync(self) -> None:
        self.plan.set_history([(e["batch"], np.asarray(e["weights"])) for e in self.entries])

    # ------------------------------------------------------------------------------------------- persistence
    def state_dict(self) -> dict[str, Any]:
        ref = [None if math.isnan(x) else float(x) for x in self.reference]
        return {"sources": self.sources, "base": self.base.tolist(), "reference": ref, "history": self.entries,
                "spec": self.spec.model_dump(mode="json")}

    def save(self, tag_dir: Path) -> None:
        """Write the state into a checkpoint tag folder (before its manifest, so it is checksummed with it)."""
        write_json_atomic(Path(tag_dir) / STATE_FILE, self.state_dict())

    def restore(self, tag_dir: Path) -> None:
        """The history and reference saved with a checkpoint (resume, or a stability rollback to it)."""
        state = json.loads((Path(tag_dir) / STATE_FILE).read_text())
        if state["sources"] != self.sources:
            raise ValueError(f"pretrain: checkpoint {Path(tag_dir).name} mixes sources {state['sources']}, the "
                             f"data now has {self.sources}")
        if state["spec"]["reference"] != self.spec.reference:  # the saved reference losses mean something else
            raise ValueError(f"pretrain: checkpoint {Path(tag_dir).name} used mix.adaptive.reference "
                             f"{state['spec']['reference']!r}, this run has {self.spec.reference!r}")
        self.reference = np.array([math.nan if x is None else x for x in state["reference"]], dtype=np.float64)
        if self.spec.reference == "target":  # changed targets apply from here on; the history stays
            self.reference = np.array([self.spec.targets[s] for s in self.sources], dtype=np.float64)
        self.entries = state["history"]
        self._sync()

    def write_csv(self, out_dir: Path, rows: list[dict[str, Any]]) -> None:
        """`plots/mix_weights.csv`: step, batch and each source's weight at every update (for `dvc plots`)."""
        lines = [",".join(["step", "batch", *self.sources])]
        lines += [",".join([str(r["step"]), str(r["batch"]), *(str(r["weights"][s]) for s in self.sources)])
                  for r in rows if r["kind"] == "mix"]
        write_text_atomic(Path(out_dir) / "plots" / "mix_weights.csv", "\n".join(lines) + "\n")

    def summary(self) -> dict[str, Any]:
        return {"sources": self.sources, "base": [round(x, ROUND) for x in self.base.tolist()],
                "final": [round(x, ROUND) for x in self.weights.tolist()], "updates": len(self.entries) - 1}


__all__ = [
    "STATE_FILE",
    "AdaptiveMixer",
    "AdaptivePlan",
    "allocate",
    "bounds_for",
    "lag_signal",
    "majority_sources",
    "next_weights",
    "project",
]
