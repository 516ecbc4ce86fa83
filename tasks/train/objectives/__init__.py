"""Training objectives (see base.py for the protocol). A new one: a module here plus one line in OBJECTIVES, and a
job model in specs/ranks.py whose `objective` literal is its key. Imported directly (not by name strings) so the
stages' code dependencies, computed from imports, include every objective the trainer can run."""

from __future__ import annotations

from typing import Callable

from specs.ranks import RankJob
from tasks.train.objectives.base import Objective
from tasks.train.objectives.dpo import DPOObjective
from tasks.train.objectives.pretrain import PretrainObjective
from tasks.train.objectives.sft import SFTObjective

OBJECTIVES: dict[str, Callable[[RankJob], Objective]] = {"pretrain": PretrainObjective, "sft": SFTObjective, "prefer": DPOObjective}  # job.objective -> class


def make_objective(job: RankJob) -> Objective:
    """The objective object for a rank job (a `specs.ranks` model)."""
    return OBJECTIVES[job.objective](job)
