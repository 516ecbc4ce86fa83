"""One optimizer step as the stability guard sees it: when the guard judges (before or after the update), what a
skip or a down-weight does there, and fp16 overflow steps recognised as such.

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

from typing import Any, Callable

import torch

from tasks.train.stability import Decision, StabilityGuard

Factor = Callable[[int], float]  # micro-batch index -> loss multiplier (test fault injection; 1.0 normally)


def skipped_steps_of(ds: Any) -> int:
    """Steps the DeepSpeed engine `ds` skipped for an fp16 overflow (its `skipped_steps` counter, +1 at each
    accumulation boundary whose update the loss scaler dropped; restored with a checkpoint). A step overflowed
    when the count grew across it. Engines without the counter never skip."""
    count = getattr(ds, "skipped_steps", 0)
    return int(count) if isinstance(count, int) and not isinstance(count, bool) else 0


def loss_scale_of(ds: Any) -> float | None:
    """The dynamic loss scale now in use (fp16), or None where there is none (bf16, fp32)."""
    scale = getattr(getattr(ds, "optimizer", None), "loss_scale", None)
    return float(scale) if isinstance(scale, (int, float)) and not isinstance(scale, bool) else None


def take_step(e: Any, o: Any, guard: StabilityGuard, accum_check: str, batch: int, done: int,
              factor: Factor) -> tuple[float, float | None, Decision | None]:
    """One optimizer step on data batch `batch` (step `done`, 1-based): (loss of the global batch, grad norm, the
    guard's decision when it judged, else None: the caller judges after the update)."""
    doc_ids = lambda: o.doc_ids(batch)  # noqa: E731 - called only for an incident
    skipped_before = e.skipped_steps()
    if o.whole_steps:
        loss, gnorm, decision = o.whole_step(e, batch) * factor(0), e.grad_norm(), None
    else:
        micros = list(o.micro_batches(e, batch))
        if len(micros) == 1:
            loss, gnorm, decision = single(e, o, guard, micros[0], batch, done, factor(0))
        elif accum_check == "prepass" and guard.spec.enabled:
            loss, gnorm, decision = prepass(e, o, guard, micros, batch, done, factor)
        else:
            loss, gnorm, decision = accumulate(e, o, micros, batch, factor, 1.0), e.grad_norm(), None
    if e.skipped_steps() > skipped_before:
        e.skip_update()  # DeepSpeed left the schedule where it was: the next step keeps its own LR
        return loss, None, guard.note_overflow(done, loss, e.loss_scale(), doc_ids)
    return loss, gnorm, decision


def single(e: Any, o: Any, guard: StabilityGuard, micro: Callable, batch: int, done: int,
           fault: float) -> tuple[float, float | None, Decision]:
    """One micro-batch per rank: the forward's loss is judged before its backward."""
    loss, value = micro()
    if fault != 1.0:
        loss, value = loss * fault, value * fault
    reported = o.reduce(e, batch, [value.detach()])
    decision = guard.observe(done, reported, doc_ids=lambda: o.doc_ids(batch))
    if not decision.apply_update:
        e.skip_update()
        return reported, None, decision
    e.backward_and_step(loss * decision.factor if decision.factor != 1.0 else loss)
    return reported, e.grad_norm(), decision


def prepass(e: Any, o: Any, guard: StabilityGuard, micros: list[Callable], batch: int, done: int,
            factor: Factor) -> tuple[float, float | None, Decision]:
    """Accumulation judged before any backward: a forward-only pass gives every micro-batch's loss."""
    with e.eval_mode():
        pre = [micro()[1] * factor(i) for i, micro in enumerate(micros)]
    step_loss = o.reduce(e, batch, pre)
    decision = guard.observe(done, step_loss, doc_ids=lambda: o.doc_ids(batch),
                             micro_losses=o.micro_losses(e, batch, pre))
    if not decision.apply_update:
        e.skip_update()  # nothing was backpropagated: no accumulated gradient to drop
        return step_loss, None, decision
    return accumulate(e, o, micros, batch, factor, decision.factor), e.grad_norm(), decision


def accumulate(e: Any, o: Any, micros: list[Callable], batch: int, factor: Factor, weight: float) -> float:
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


__all__ = ["take_step", "skipped_steps_of", "loss_scale_of"]
