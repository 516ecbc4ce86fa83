"""The training step, in one place: `train_step` runs one optimizer step of any objective on one rank.

    micro-batches <- objective.micro_batches(engine, batch)     (or objective.whole_step: a pipeline)
    forward each; the guard judges the step's loss              (`single`, or `prepass` with accumulation)
    skip, down-weight or apply: engine.backward_and_step(loss)  (`accumulate` over the micro-batches)
    the grad norm, read after the update                        (`HeldNorm`: one step late on ordinary steps)
    fp16 overflow: the update DeepSpeed skipped, recorded as such

The Trainer (tasks/train/loop/trainer.py) calls it once per step and does everything around it (logging, evaluation,
checkpoints, rollback). When the stability guard judges (before or after the update), what a skip or a
down-weight does there, and fp16 overflow steps:

- One micro-batch per rank (no pipeline): the step's loss is known before any backward — judged first, then
  skipped (no backward; the LR schedule still advances), down-weighted (the loss scaled before its backward) or
  applied. Its grad norm exists only after the update, so the Trainer judges that afterwards (NOTED at most).
- Accumulation (grad_accum > 1, no pipeline), `stability.accum_check: prepass` (default): a forward-only pass over
  the step's micro-batches (eval mode, no autograd: no activations kept) gives the step's loss and every
  micro-batch's loss, each reduced over dp (so every rank holds the same numbers and decides the same), BEFORE
  any backward. Skip: no micro-batch is backpropagated, so there are no accumulated gradients to drop and the
  optimizer state never sees the step; down-weight: every micro-batch's loss is scaled, so the step's whole
  gradient is (exactly as with one micro-batch). Cost: one extra forward per micro-batch, about +1/3 of the step's
  compute (+1/4 with activation checkpointing), one small all-reduce, no memory. Judging each micro-batch just
  before its own backward would be free but cannot skip: by the time micro-batch j spikes, 1..j-1 are reduced
  into DeepSpeed's ZeRO buffers, which have no supported way to be discarded short of its fp16-overflow path.
  `accum_check: after` keeps that cost off: judged once the update is applied (NOTED, counted toward a rollback).
- Pipeline (pp > 1): DeepSpeed's `train_batch` runs forward, backward and the update of every micro-batch in one
  call, and the loss exists only on the last stage until it returns — nothing can act before the update. The step
  is judged after it: a spike is NOTED and counts toward the rollback (restore the last checkpoint, skip the
  offending batches, cool the LR), which is the recovery a pipeline has. NaN steps are NOTED the same way.
- fp16 (dynamic loss scaling): DeepSpeed skips a step whose gradients overflow and lowers the scale, counting it in
  `skipped_steps` (its overflow flag is all-reduced, so on every rank alike). Such a step is an OVERFLOW incident,
  not a spike; its LR-schedule step is advanced here (DeepSpeed does not), so the LR stays a function of the step,
  as with a skip.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Callable

import torch

from specs.train import TrainLoopSpec
from tasks.train.loop.stability import Action, Decision, StabilityGuard

if TYPE_CHECKING:
    from tasks.train.loop.seam import StepEngine
    from tasks.train.objectives.base import Objective

Factor = Callable[[int], float]  # micro-batch index -> loss multiplier (test fault injection; 1.0 normally)
Settle = Callable[[], None]       # judges what the previous step left unread (the Trainer's; may raise LateDecision)
GradNorm = Callable[[], "float | None"]  # the step's grad norm, read from the device when called


class LateDecision(Exception):
    """A decision about an earlier step that came due during this one (its grad norm, read one step late,
    escalated to a rollback or an abort): raised before this step's backward, so this step changes nothing."""

    def __init__(self, decision: Decision):
        super().__init__(decision.reason)
        self.decision = decision


def no_settle() -> None:
    return None


def train_step(e: StepEngine, o: Objective, guard: StabilityGuard, accum_check: str, batch: int, done: int,
              factor: Factor, settle: Settle = no_settle) -> tuple[float, GradNorm, Decision | None]:
    """One optimizer step on data batch `batch` (step `done`, 1-based): (loss of the global batch, its grad norm
    to read when wanted, the guard's decision when it judged, else None: the caller judges after the update).
    `settle` runs once this step's forward is queued and before its loss is judged: a read of the previous step's
    grad norm there finds it computed without draining the device (tasks/train/loop/trainer.py: `_settle`)."""
    doc_ids = lambda: o.doc_ids(batch)  # noqa: E731 - called only for an incident
    skipped_before = e.skipped_steps()
    if o.whole_steps:
        settle()
        loss, gnorm, decision = o.whole_step(e, batch) * factor(0), e.grad_norm_later(), None
    else:
        micros = list(o.micro_batches(e, batch))
        if len(micros) == 1:
            loss, gnorm, decision = single(e, o, guard, micros[0], batch, done, factor(0), settle)
        elif accum_check == "prepass" and guard.spec.enabled:
            loss, gnorm, decision = prepass(e, o, guard, micros, batch, done, factor, settle)
        else:
            settle()
            loss, gnorm, decision = accumulate(e, o, micros, batch, factor, 1.0), e.grad_norm_later(), None
    if e.skipped_steps() > skipped_before:
        e.skip_update()  # DeepSpeed left the schedule where it was: the next step keeps its own LR
        return loss, no_norm, guard.note_overflow(done, loss, e.loss_scale(), doc_ids)
    return loss, gnorm, decision


def no_norm() -> None:
    return None


def single(e: StepEngine, o: Objective, guard: StabilityGuard, micro: Callable, batch: int, done: int,
           fault: float, settle: Settle = no_settle) -> tuple[float, GradNorm, Decision]:
    """One micro-batch per rank: the forward's loss is judged before its backward."""
    loss, value = micro()
    if fault != 1.0:
        loss, value = loss * fault, value * fault
    settle()
    reported = o.reduce(e, batch, [value.detach()])
    decision = guard.observe(done, reported, doc_ids=lambda: o.doc_ids(batch))
    if not decision.apply_update:
        e.skip_update()
        return reported, no_norm, decision
    e.backward_and_step(loss * decision.factor if decision.factor != 1.0 else loss)
    return reported, e.grad_norm_later(), decision


def prepass(e: StepEngine, o: Objective, guard: StabilityGuard, micros: list[Callable], batch: int, done: int,
            factor: Factor, settle: Settle = no_settle) -> tuple[float, GradNorm, Decision]:
    """Accumulation judged before any backward: a forward-only pass gives every micro-batch's loss."""
    with e.eval_mode():
        pre = [micro()[1] * factor(i) for i, micro in enumerate(micros)]
    settle()
    step_loss = o.reduce(e, batch, pre)
    decision = guard.observe(done, step_loss, doc_ids=lambda: o.doc_ids(batch),
                             micro_losses=o.micro_losses(e, batch, pre))
    if not decision.apply_update:
        e.skip_update()  # nothing was backpropagated: no accumulated gradient to drop
        return step_loss, no_norm, decision
    return accumulate(e, o, micros, batch, factor, decision.factor), e.grad_norm_later(), decision


def accumulate(e: StepEngine, o: Objective, micros: list[Callable], batch: int, factor: Factor, weight: float) -> float:
    """Forward and backward of every micro-batch (DeepSpeed updates at the last); each loss scaled by `weight`
    (a down-weighted step) and its fault factor. Returns the global batch's loss (unweighted)."""
    values: list[torch.Tensor] = []
    for i, micro in enumerate(micros):
        loss, value = micro()
        f = factor(i)
        if f != 1.0:
            loss, value = loss * f, value * f
        values.append(value.detach())
        e.backward_and_step(loss * weight if weight != 1.0 else loss)
    return o.reduce(e, batch, values)


class HeldNorm:
    """A step's grad norm judged one step late, so that its read does not drain the device every step.

    Right after an update, reading its grad norm makes the host wait for the device to finish the whole queue
    (a synchronisation per step). Held instead, it is read during the next step once that step's forward is
    queued behind the update (`settle`, called from `train_step`): the read then waits for the update only. It
    is judged there before the next step's loss is, so the guard sees the same values in the same order and
    decides the same; a rollback it calls for is raised (`LateDecision`) before the next step's backward, so
    nothing of that step is applied and the same checkpoint is restored. Held only on ordinary steps of a
    guarded run: a step that logs, evaluates, checkpoints or ends the run needs the value now, and so does a
    pipeline's (its whole step is one call, with nothing to queue in front of the read)."""

    def __init__(self, guard: StabilityGuard, objective: Objective, train: TrainLoopSpec):
        self.guard, self.objective, self.train = guard, objective, train
        self.held: tuple[int, int, GradNorm] | None = None  # (step, batch, its grad norm)

    def may_defer(self, done: int) -> bool:
        t = self.train
        return (t.stability.enabled and not t.sanity_overfit and not self.objective.whole_steps and done < t.steps
                and all(done % every for every in (t.log_every, t.eval_every, t.checkpoint_every))
                and not self.objective.eval_due(done))

    def judge(self, done: int, batch: int, loss: float, read: GradNorm, decision: Decision | None
              ) -> tuple[Decision, float | None]:
        """The step's decision once its grad norm is judged (now, or held for `settle`), and the norm if read."""
        if decision is not None and decision.action is Action.OK and self.may_defer(done):
            self.held = (done, batch, read)
            return decision, None
        gnorm = read()
        doc_ids = lambda: self.objective.doc_ids(batch)  # noqa: E731 - called only for an incident
        if decision is None:  # the update came first (a pipeline, accumulation judged after)
            return self.guard.observe(done, loss, gnorm, doc_ids, update_done=True), gnorm
        if decision.action is Action.OK:
            return self.guard.observe_grad_norm(done, gnorm, doc_ids), gnorm
        return decision, gnorm

    def settle(self) -> None:
        """Judge the held grad norm (if any); raises `LateDecision` when that escalates."""
        if self.held is None:
            return
        done, batch, read = self.held
        self.held = None
        decision = self.guard.observe_grad_norm(done, read(), lambda: self.objective.doc_ids(batch))
        if decision.action in (Action.ROLLBACK, Action.ABORT):
            raise LateDecision(decision)

    def drop(self) -> None:
        self.held = None


__all__ = ["train_step", "HeldNorm", "LateDecision", "GradNorm"]
