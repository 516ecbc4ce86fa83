"""Grad norms judged one step late (tasks/train/loop/step.py: HeldNorm, issue #29 item 2): the read moves behind
the next step's forward, and the guard still decides the same — same incidents, same rollback, same batches, same
weights — as when every norm is read right after its update."""

from __future__ import annotations

from pathlib import Path
from typing import Any, Iterator

import pytest
import torch

from tasks.train.checkpointing.manager import CheckpointManager
from tasks.train.loop.step import HeldNorm
from tasks.train.loop.trainer import Hooks, Trainer
from tests.helpers.trainer import FakeEngine, FakeObjective, job


class SpikyNormEngine(FakeEngine):
    """Reports the grad norm `norms[boundary]` at the given updates (the weight update itself is unchanged), and
    records when each update's norm is read."""

    def __init__(self, norms: dict[int, float]):
        super().__init__(1)
        self.norms = norms

    def grad_norm_later(self) -> Any:
        boundary, value = self.boundaries, self.norms.get(self.boundaries, self.last_norm)

        def read() -> float:
            self.calls.append(f"read:{boundary}")
            return value
        return read


class ForwardRecorded(FakeObjective):
    def micro_batches(self, engine: FakeEngine, batch: int) -> Iterator[Any]:
        for micro in super().micro_batches(engine, batch):
            def recorded(micro: Any = micro) -> tuple[torch.Tensor, torch.Tensor]:
                engine.calls.append("forward")
                return micro()
            yield recorded


def run(tmp, norms: dict[int, float], defer: bool, monkeypatch):
    if not defer:
        monkeypatch.setattr(HeldNorm, "may_defer", lambda self, done: False)
    j = job(tmp, steps=12)
    train = j.spec.train.model_copy(update={"log_every": 100, "eval_every": 100, "checkpoint_every": 4})
    j = j.model_copy(update={"spec": j.spec.model_copy(update={"train": train})})
    engine, objective = SpikyNormEngine(norms), ForwardRecorded(1)
    checkpoints = CheckpointManager(Path(j.ckpt_dir))
    prepared = objective.prepare(0)
    point = checkpoints.resume(prepared.identity, train.steps, "fake")
    trainer = Trainer(objective, prepared, engine, checkpoints, j, Hooks(), schedule=point.schedule)
    result = trainer.fit(point.tag, point.step, point.rows, {})
    monkeypatch.undo()
    return result, engine, objective, trainer


def discarded_forwards(calls: list[str]) -> set[int]:
    """Indexes (among the forwards) of forwards whose next non-read call is a checkpoint load."""
    out, n = set(), -1
    for i, c in enumerate(calls):
        if c == "forward":
            n += 1
            after = next((d for d in calls[i + 1:] if not d.startswith("read")), "")
            if after.startswith("load:"):
                out.add(n)
    return out


def forward_positions(calls: list[str], which: set[int]) -> set[int]:
    """Positions in `calls` of the forwards numbered `which`."""
    forwards = [i for i, c in enumerate(calls) if c == "forward"]
    return {forwards[n] for n in which}


@pytest.mark.parametrize("norms", [{}, {6: 1e3}, {6: 1e3, 7: 1e3}], ids=["quiet", "one-spike", "rollback"])
def test_a_held_norm_decides_what_an_immediate_read_decides(tmp_path, monkeypatch, norms):
    late = run(tmp_path / "late", norms, True, monkeypatch)
    now = run(tmp_path / "now", norms, False, monkeypatch)
    (r1, e1, o1, t1), (r2, e2, o2, t2) = late, now
    strip = lambda incidents: [{k: v for k, v in i.items() if k != "time"} for i in incidents]  # noqa: E731
    assert strip(t1.guard.incidents) == strip(t2.guard.incidents)
    assert (t1.guard.rollbacks, t1.guard.skipped) == (t2.guard.rollbacks, t2.guard.skipped)
    # a rollback raised by a late read comes after the next step's forward: that forward is thrown away unapplied
    thrown = discarded_forwards(e1.calls)
    assert [b for i, b in enumerate(o1.seen) if i not in thrown] == o2.seen and len(thrown) == t1.guard.rollbacks
    assert r1.losses == r2.losses and r1.rows == r2.rows
    assert float(e1.w.detach()) == float(e2.w.detach())
    skip = forward_positions(e1.calls, thrown)
    calls1 = [c for i, c in enumerate(e1.calls) if not c.startswith("read") and i not in skip]
    assert calls1 == [c for c in e2.calls if not c.startswith("read")]
    if len(norms) == 2:
        assert t1.guard.rollbacks == 1 and "load:step000004" in e1.calls
    elif norms:
        assert [i["action"] for i in t1.guard.incidents] == ["noted"]
    # where the reads happened: late, behind the next step's forward, except where a step needs its norm now
    # (step 4 and 8 checkpoint, step 12 ends the run)
    after_forward = [e1.calls[i + 1] for i, c in enumerate(e1.calls[:-1]) if c == "forward"]
    assert after_forward.count("backward") < len(after_forward) and \
        all(c == "backward" for c in [e2.calls[i + 1] for i, c in enumerate(e2.calls[:-1]) if c == "forward"])
    update_then = [e2.calls[i + 1] for i, c in enumerate(e2.calls[:-1]) if c == "update"]
    assert all(c.startswith("read") for c in update_then)
