"""Training objectives (see base.py for the protocol). A new one: a module here with a class following `Objective`,
and a job model in specs/ranks.py whose `objective` literal is the class's `name`.

There is no registry importing every objective: the stage that builds a rank job imports its own objective's class
and names it in the job (`objective_ref = reference(cls)`), and each rank imports it back by that name (`resolve`).
So a stage's code dependencies, computed from imports (tasks/core/closure.py), hold its own objective and not the
others': editing DPO does not re-run pretraining. A job file is data, so `resolve` imports only modules of this
package: a reference elsewhere is refused, never imported.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING

from tasks.train.objectives.base import Objective

if TYPE_CHECKING:  # the job union, for readers (specs/ranks.py is imported by every rank anyway)
    from specs.ranks import RankJob

PACKAGE = __name__  # "tasks.train.objectives": the only package a job may name an objective from


def reference(cls: type) -> str:
    """`module:Class` of an objective class, as a job carries it (`objective_ref`)."""
    return f"{cls.__module__}:{cls.__qualname__}"


def resolve(ref: str) -> type:
    """The objective class a job's `objective_ref` names. Refuses (ValueError, before importing anything) a
    reference that is not `tasks.train.objectives.<module>:<Class>`, and a name there that is not a class."""
    module, _, name = ref.partition(":")
    parts = module.split(".")
    inside = module.startswith(PACKAGE + ".") and len(parts) == len(PACKAGE.split(".")) + 1
    if not (inside and all(p.isidentifier() for p in parts) and name.isidentifier()):
        raise ValueError(f"objective_ref {ref!r}: an objective is `{PACKAGE}.<module>:<Class>`; a job file may not "
                         f"make a rank import anything else")
    cls = getattr(importlib.import_module(module), name, None)
    if not isinstance(cls, type):
        raise ValueError(f"objective_ref {ref!r}: {module} has no class {name}")
    return cls


def make_objective(job: RankJob) -> Objective:
    """The objective object for a rank job (a `specs.ranks` model): the class its `objective_ref` names, which
    must be the objective of the job's kind (`name` equal to the job's `objective`)."""
    cls = resolve(job.objective_ref)
    if getattr(cls, "name", None) != job.objective:
        raise ValueError(f"objective_ref {job.objective_ref!r} names objective {getattr(cls, 'name', None)!r}, "
                         f"but the job is a {job.objective!r} job")
    return cls(job)
