"""Stability guard: loss/grad-norm spike detection, skip or down-weight, rollback with a retry cap.

Pure logic (no torch, no torch.distributed): the training loop feeds it one observation per optimizer step,
on every rank with the same all-reduced values, so every rank takes the same decision.

How the loop uses it:
- `observe(step, loss, grad_norm, doc_ids)` before the optimizer update. SKIP: zero the grads / skip
  `optimizer.step()`; DOWNWEIGHT: scale the loss by `decision.factor` before backward (so observe the loss first,
  with grad_norm=None, when down-weighting); ROLLBACK: reload the checkpoint of `decision.to_step` (0 = the
  seeded initial weights) but keep this guard (it carries the rollback count and skipped windows); ABORT:
  `decision.raise_if_abort()`.
- `note_checkpoint(step)` after each checkpoint is saved; `batch_index(step)` names the data batch a step trains
  on (skipped windows excluded); `lr_scale(step)` multiplies the scheduled LR while cooling down.
- Checkpoint `state_dict()` with the model. After a ROLLBACK also write it beside the checkpoints (the
  checkpoint being resumed predates the rollback) and on a resume load whichever has more `rollbacks`.
- With fp16 dynamic loss scaling, overflow steps the scaler already skipped are not spikes: don't observe them,
  record them with `note_overflow` (an OVERFLOW incident: no spike count, no statistics, no rollback).
- Where the loss is only known after the update (a pipeline's `train_batch`, or accumulation with
  `accum_check: after`), call `observe(..., update_done=True)`: a spike is then NOTED (recorded, counted toward a
  rollback) instead of skipped. Where it is known before (one micro-batch per rank, or accumulation's forward
  pre-pass, tasks/train/loop/step.py), observe the loss first — with accumulation also each micro-batch's loss
  (`micro_losses`), judged against the accepted steps' micro-batch losses, so one spiking micro-batch of many is
  caught although the step's mean dilutes it — and the grad norm after the update with `observe_grad_norm`: an
  update is applied before its grad norm exists, so grad-norm spikes are NOTED too.
"""

from __future__ import annotations

import json
import math
from collections import deque
from dataclasses import dataclass
from enum import Enum
from statistics import median
from typing import Any, Callable, Iterable, Union

from specs.train import StabilitySpec

DocIds = Union[Iterable[str], Callable[[], Iterable[str]]]  # a batch's document ids, or a function giving them

# Consistency constant: 1.4826·MAD estimates the standard deviation of normally distributed values.
MAD_TO_STD = 1.4826


class Action(str, Enum):
    OK = "ok"
    SKIP = "skip"
    DOWNWEIGHT = "downweight"
    NOTED = "noted"  # a spike seen after its update was applied: recorded and counted, nothing undone
    ROLLBACK = "rollback"
    ABORT = "abort"
    OVERFLOW = "overflow"  # fp16: the loss scaler skipped the update (and lowered the scale); not a spike


class StabilityError(RuntimeError):
    """Training stopped because instability persisted through `max_rollbacks` rollbacks."""


@dataclass(frozen=True)
class Decision:
    action: Action
    factor: float = 1.0                        # DOWNWEIGHT: loss multiplier
    to_step: int | None = None                 # ROLLBACK: checkpoint step to restore (0 = initial weights)
    skip_batches: tuple[int, int] | None = None  # ROLLBACK: [start, stop) batch indices never trained on
    lr_factor: float = 1.0                     # ROLLBACK: LR multiplier for `cool_steps` steps after to_step
    cool_steps: int = 0
    reason: str = ""

    @property
    def apply_update(self) -> bool:
        return self.action in (Action.OK, Action.DOWNWEIGHT, Action.NOTED)

    def raise_if_abort(self) -> None:
        if self.action is Action.ABORT:
            raise StabilityError(self.reason)


def _json_float(x: float | None) -> float | str | None:
    """Finite floats as numbers; NaN/Inf as strings so every incident line is strict JSON."""
    if x is None or math.isfinite(x):
        return x
    return str(x)


class StabilityGuard:
    def __init__(self, spec: StabilitySpec):
        self.spec = spec
        self._history: deque[tuple[int, float, float | None]] = deque(maxlen=spec.window)  # accepted steps only
        self._micro: deque[tuple[int, list[float]]] = deque(maxlen=spec.window)  # their micro-batch losses
        self._checkpoint_micro: list[tuple[int, list[float]]] = []
        self._spikes: list[int] = []             # spike steps of the current episode (within `window`)
        self.incidents: list[dict[str, Any]] = []
        self.rollbacks = 0
        self.last_checkpoint = 0
        self._checkpoint_history: list[tuple[int, float, float | None]] = []  # the window at last_checkpoint
        self.skipped: list[tuple[int, int]] = []  # merged [start, stop) batch ranges
        self.cool: tuple[int, int, float] | None = None  # [start step, stop step), factor
        self.aborted: str | None = None

    # ---- data position and LR -------------------------------------------------------------------------------
    def batch_index(self, step: int) -> int:
        """The batch step `step` trains on: `step` itself, shifted past every skipped window."""
        idx = step
        for start, stop in self.skipped:  # sorted, disjoint: each shift may carry idx into the next range
            if idx >= start:
                idx += stop - start
        return idx

    def lr_scale(self, step: int) -> float:
        if self.cool and self.cool[0] <= step < self.cool[1]:
            return self.cool[2]
        return 1.0

    def note_checkpoint(self, step: int) -> None:
        """Call after the checkpoint of `step` is saved: a rollback returns to it."""
        self.last_checkpoint = step
        self._checkpoint_history = list(self._history)
        self._checkpoint_micro = list(self._micro)

    # ---- detection ------------------------------------------------------------------------------------------
    def _robust_z(self, x: float | None, column: int, log_scale: bool = False) -> float | None:
        """(x − median) / (1.4826·MAD) over the accepted window (of log values when `log_scale`).

        Median/MAD rather than mean/std or an EMA: with a 50% breakdown point, a few spikes that slipped through
        as accepted (below threshold) or a heavy-tailed stretch cannot inflate the scale and mask the next spike,
        and there is no decay constant to tune against the LR schedule. A window of ≤ a few hundred values makes
        the exact median cheap. Only accepted steps enter the window, so a spike never shifts the reference.
        Grad norms are judged on a log scale: their noise is multiplicative (right-skewed), which made a linear
        z-score flag ordinary upper-tail steps; on a log scale the relative floor is simply min_rel_std.
        """
        values = [h[column] for h in self._history if h[column] is not None]
        if x is None or not math.isfinite(x) or len(values) < self.spec.min_history:
            return None
        if log_scale:
            values, x = [math.log(max(v, 1e-30)) for v in values], math.log(max(x, 1e-30))
        med = median(values)
        mad = median(abs(v - med) for v in values)
        floor = self.spec.min_rel_std * (1.0 if log_scale else abs(med))
        return (x - med) / max(MAD_TO_STD * mad, floor, 1e-12)

    def _micro_z(self, micro: list[float]) -> tuple[int, float] | None:
        """(index, robust z) of the highest micro-batch loss against the accepted steps' micro-batch losses, once
        `min_history` steps with micro-batch losses are in the window; None before (or with no micro losses)."""
        if len(micro) < 2 or len(self._micro) < self.spec.min_history or not all(map(math.isfinite, micro)):
            return None
        values = [v for _, vs in self._micro for v in vs]
        med = median(values)
        mad = median(abs(v - med) for v in values)
        scale = max(MAD_TO_STD * mad, self.spec.min_rel_std * abs(med), 1e-12)
        worst = max(range(len(micro)), key=lambda i: micro[i])
        return worst, (micro[worst] - med) / scale

    def observe(self, step: int, loss: float, grad_norm: float | None = None,
                doc_ids: DocIds = (), update_done: bool = False,
                micro_losses: list[float] | None = None) -> Decision:
        """Judge one step; accepted steps feed the statistics, spikes are written to `incidents`.

        `doc_ids`: the batch's document ids, or a function returning them (called only for an incident).
        `update_done`: the optimizer already applied this step, so a spike short of a rollback is NOTED.
        `micro_losses`: the step's micro-batch losses (each reduced over dp, identical on every rank): a NaN or a
        spike in any one of them makes the step a spike.
        """
        if self.aborted:
            return Decision(Action.ABORT, reason=self.aborted)
        loss = float(loss)
        grad_norm = None if grad_norm is None else float(grad_norm)
        micro = [float(v) for v in micro_losses or ()]
        if not self.spec.enabled:
            return Decision(Action.OK)
        non_finite = not math.isfinite(loss) or not all(map(math.isfinite, micro)) or \
            (grad_norm is not None and not math.isfinite(grad_norm))
        z_loss, z_grad = self._robust_z(loss, 1), self._robust_z(grad_norm, 2, log_scale=True)
        z_micro = self._micro_z(micro)
        over = [name for name, z in (("loss", z_loss), ("grad_norm", z_grad), ("micro", z_micro and z_micro[1]))
                if z is not None and z > self.spec.z_threshold]
        if not non_finite and not over:
            self._history.append((step, loss, grad_norm))
            if len(micro) > 1:
                self._micro.append((step, micro))
            return Decision(Action.OK)

        batch = self.batch_index(step)  # before a rollback adds this batch to the skipped windows
        named = {"loss": z_loss, "grad_norm": z_grad}
        reason = "non-finite loss or grad norm" if non_finite else " and ".join(
            f"micro-batch {z_micro[0]} loss z={z_micro[1]:.1f}" if n == "micro" and z_micro else f"{n} z={named[n]:.1f}"
            for n in over)
        self._spikes = [s for s in self._spikes if s > step - self.spec.window] + [step]
        if len(self._spikes) >= self.spec.max_spikes:
            decision = self._escalate(step, reason)
        elif update_done:
            decision = Decision(Action.NOTED, reason=reason + " (update already applied)")
        elif non_finite or self.spec.on_spike == "skip":
            decision = Decision(Action.SKIP, reason=reason)
        else:
            decision = Decision(Action.DOWNWEIGHT, factor=self.spec.downweight_factor, reason=reason)
        self._record(step, batch, loss, grad_norm, z_loss, z_grad, decision, doc_ids, micro)
        return decision

    def note_overflow(self, step: int, loss: float, loss_scale: float | None,
                      doc_ids: DocIds = ()) -> Decision:
        """DeepSpeed found inf/NaN gradients and skipped the update itself — fp16's loss scaler (which also lowers
        the scale), or ZeRO 1–3's non-finite grad-norm check in fp32. Recorded as an OVERFLOW incident; not a spike
        (no count toward a rollback) and not in the statistics — a run with dynamic loss scaling overflows
        routinely while the scale searches for its ceiling."""
        if self._history and self._history[-1][0] == step:  # judged on its loss before the update: take it out
            self._history.pop()
        if self._micro and self._micro[-1][0] == step:
            self._micro.pop()
        decision = Decision(Action.OVERFLOW, reason="inf/NaN gradients: DeepSpeed skipped the update"
                            + (f", scale now {loss_scale:g}" if loss_scale is not None else ""))
        self._record(step, self.batch_index(step), float(loss), None, None, None, decision, doc_ids)
        return decision

    def observe_grad_norm(self, step: int, grad_norm: float | None,
                          doc_ids: DocIds = ()) -> Decision:
        """After an update that `observe` accepted on its loss: judge the grad norm it produced.

        The step's entry (the newest in the window, grad norm unknown until now) gets the value when it is
        ordinary; a spiking value takes the entry out of the reference and is NOTED (or escalates).
        """
        if not self.spec.enabled or grad_norm is None or not self._history or self._history[-1][0] != step:
            return Decision(Action.OK)
        grad_norm = float(grad_norm)
        _, loss, _ = self._history[-1]
        z_grad = self._robust_z(grad_norm, 2, log_scale=True)
        if math.isfinite(grad_norm) and (z_grad is None or z_grad <= self.spec.z_threshold):
            self._history[-1] = (step, loss, grad_norm)
            return Decision(Action.OK)
        self._history.pop()
        if self._micro and self._micro[-1][0] == step:
            self._micro.pop()
        batch = self.batch_index(step)
        reason = ("non-finite grad norm" if not math.isfinite(grad_norm) else f"grad_norm z={z_grad:.1f}")
        self._spikes = [s for s in self._spikes if s > step - self.spec.window] + [step]
        if len(self._spikes) >= self.spec.max_spikes:
            decision = self._escalate(step, reason)
        else:
            decision = Decision(Action.NOTED, reason=reason + " (update already applied)")
        self._record(step, batch, loss, grad_norm, None, z_grad, decision, doc_ids)
        return decision

    def _record(self, step: int, batch: int, loss: float, grad_norm: float | None, z_loss: float | None,
                z_grad: float | None, decision: Decision, doc_ids: DocIds, micro: list[float] | None = None) -> None:
        ids = doc_ids() if callable(doc_ids) else doc_ids
        self.incidents.append({
            **({"micro_losses": [_json_float(v) for v in micro]} if micro else {}),
            "step": step, "batch": batch, "loss": _json_float(loss),
            "grad_norm": _json_float(grad_norm), "z_loss": _json_float(z_loss), "z_grad_norm": _json_float(z_grad),
            "action": decision.action.value, "reason": decision.reason, "doc_ids": list(ids),
            **({"to_step": decision.to_step, "skip_batches": list(decision.skip_batches),
                "lr_factor": decision.lr_factor, "cool_steps": decision.cool_steps}
               if decision.action is Action.ROLLBACK else {}),
        })

    def _escalate(self, step: int, reason: str) -> Decision:
        spikes, window = list(self._spikes), self.spec.window
        if self.rollbacks >= self.spec.max_rollbacks:
            self.aborted = (
                f"stability: {len(spikes)} spikes within {window} steps (steps {spikes}; last: {reason}) after "
                f"{self.rollbacks} rollback(s), the pretrain.stability.max_rollbacks cap. The incidents, with the "
                "document ids of each batch, are in the run's incidents.jsonl: inspect those documents, lower "
                "optim.lr, or raise max_rollbacks.")
            return Decision(Action.ABORT, reason=self.aborted)
        to_step = self.last_checkpoint
        # PaLM (Chowdhery et al. 2022, §5.1): restart from a checkpoint before the spike and skip the batches seen
        # around it. Data already inside the restored checkpoint cannot be skipped, hence the lower bound.
        start = max(self.batch_index(to_step) + 1, self.batch_index(spikes[0]) - self.spec.skip_before)
        stop = self.batch_index(step) + 1
        self._add_skip(start, stop)
        self.rollbacks += 1
        self.cool = (to_step + 1, to_step + 1 + self.spec.lr_cool_steps, self.spec.lr_cool_factor)
        # Statistics go back to what they were at the checkpoint, i.e. what the restored weights had produced:
        # the replay is judged against the same reference as the first pass, and the guard stays armed (no
        # min_history blind spell unless it restarts from the initial weights). A new spike episode starts.
        self._history = deque(self._checkpoint_history, maxlen=window)
        self._micro = deque(self._checkpoint_micro, maxlen=window)
        self._spikes = []
        return Decision(Action.ROLLBACK, to_step=to_step, skip_batches=(start, stop),
                        lr_factor=self.spec.lr_cool_factor, cool_steps=self.spec.lr_cool_steps,
                        reason=f"{len(spikes)} spikes within {window} steps (steps {spikes}; last: {reason}); "
                               f"rollback {self.rollbacks} of {self.spec.max_rollbacks}")

    def _add_skip(self, start: int, stop: int) -> None:
        merged: list[tuple[int, int]] = []
        for a, b in sorted(self.skipped + [(start, stop)]):
            if merged and a <= merged[-1][1]:
                merged[-1] = (merged[-1][0], max(merged[-1][1], b))
            else:
                merged.append((a, b))
        self.skipped = merged

    # ---- persistence ----------------------------------------------------------------------------------------
    def incidents_jsonl(self) -> str:
        return "".join(json.dumps(i, sort_keys=True) + "\n" for i in self.incidents)

    def state_dict(self) -> dict[str, Any]:
        """Plain JSON-able state: saved with each checkpoint so a resumed run decides exactly as before."""
        return {
            "version": 1, "history": [list(h) for h in self._history], "spikes": list(self._spikes),
            "incidents": [dict(i) for i in self.incidents], "rollbacks": self.rollbacks,
            "last_checkpoint": self.last_checkpoint,
            "checkpoint_history": [list(h) for h in self._checkpoint_history],
            "micro": [[s, list(v)] for s, v in self._micro],
            "checkpoint_micro": [[s, list(v)] for s, v in self._checkpoint_micro],
            "skipped": [list(r) for r in self.skipped],
            "cool": list(self.cool) if self.cool else None, "aborted": self.aborted,
        }

    def load_state_dict(self, state: dict[str, Any]) -> None:
        if state.get("version") != 1:
            raise ValueError(f"unknown stability state version {state.get('version')!r}")
        self._history = deque((tuple(h) for h in state["history"]), maxlen=self.spec.window)
        self._spikes = list(state["spikes"])
        self.incidents = [dict(i) for i in state["incidents"]]
        self.rollbacks = int(state["rollbacks"])
        self.last_checkpoint = int(state["last_checkpoint"])
        self._checkpoint_history = [tuple(h) for h in state["checkpoint_history"]]
        # absent in states saved before micro-batch judging existed: those runs had none
        self._micro = deque(((int(s), list(v)) for s, v in state.get("micro", [])), maxlen=self.spec.window)
        self._checkpoint_micro = [(int(s), list(v)) for s, v in state.get("checkpoint_micro", [])]
        self.skipped = [tuple(r) for r in state["skipped"]]
        self.cool = tuple(state["cool"]) if state["cool"] else None
        self.aborted = state["aborted"]
