"""Each training stage names its own objective (issue #36): the rank job carries `objective_ref`, the rank imports
that class back (tasks/train/objectives/__init__.py), and nothing imports every objective — so a stage's computed
code deps hold its own objective and not the others', and a job file cannot make a rank import other code."""

from __future__ import annotations

import sys

import pytest

from specs.pretrain import ModelSpec, ParallelSpec, PretrainJob, PretrainSpec
from specs.ranks import JobFile, PretrainRun
from tasks.core import graph
from tasks.train.objectives import make_objective, reference, resolve
from tasks.train.objectives.pretrain import PretrainObjective
from tasks.train.objectives.sft import SFTObjective

OBJECTIVE_FILES = {"pretrain": {"tasks/train/objectives/pretrain.py"},
                   "sft": {"tasks/train/objectives/sft.py"},
                   "prefer": {"tasks/train/objectives/dpo.py", "tasks/train/objectives/dpo_loss.py"}}


def _job(ref: str) -> PretrainRun:
    return PretrainRun(spec=PretrainJob(model=ModelSpec(), parallel=ParallelSpec(), train=PretrainSpec()), mix_dir="/m", out_dir="/o",
                       ckpt_dir="/c", reports_dir="/r", marker_dir="/k", seed=1, objective_ref=ref)


@pytest.mark.parametrize("stage", sorted(OBJECTIVE_FILES))
def test_a_training_stage_depends_on_its_own_objective_only(stage):
    deps = set(graph.stage(stage).code_deps())
    others = set().union(*(files for name, files in OBJECTIVE_FILES.items() if name != stage))
    assert OBJECTIVE_FILES[stage] <= deps, stage
    assert not others & deps, (stage, others & deps)


def test_pretrain_runs_no_finetuning_code():
    deps = set(graph.stage("pretrain").code_deps())
    assert not {d for d in deps if d.startswith("tasks/train/objectives/") and ("sft" in d or "dpo" in d)}
    assert not {"tasks/sft.py", "tasks/prefer.py", "specs/sft.py", "specs/prefer.py"} & deps
    # nor the specs of the sections it never reads, even through a type a training module names for readers
    # (LoRA's AdapterSpec lives in specs/train.py: in specs/sft.py it pulled evaluate, review and clean in)
    assert not {"specs/evaluate.py", "specs/review.py", "specs/clean.py"} & deps


def test_a_job_round_trips_its_objective():
    ref = reference(PretrainObjective)
    assert ref == "tasks.train.objectives.pretrain:PretrainObjective"
    job = JobFile.loads(JobFile.dumps(_job(ref)))
    assert resolve(job.objective_ref) is PretrainObjective
    assert isinstance(make_objective(job), PretrainObjective)


@pytest.mark.parametrize("ref", [
    "json.tool:main",                                      # a module outside the package: never imported
    "tasks.train.launch:launch",                           # project code, but not an objective module
    "tasks.train.objectives_x.pretrain:PretrainObjective",  # a sibling whose name starts like the package
    "tasks.train.objectives.pretrain.torch:nn",            # below an objective module
    "tasks.train.objectives:make_objective",               # the package itself
    "tasks.train.objectives..pretrain:PretrainObjective",
    "tasks.train.objectives.pretrain",                     # no class
    "tasks.train.objectives.pretrain:PretrainObjective.__init__",
])
def test_a_reference_outside_the_package_is_refused_before_import(ref):
    before = set(sys.modules)
    with pytest.raises(ValueError, match="objective_ref"):
        make_objective(_job(ref))
    assert "json.tool" not in set(sys.modules) - before


def test_a_name_that_is_not_a_class_or_another_kinds_objective_is_refused():
    with pytest.raises(ValueError, match="has no class"):
        resolve("tasks.train.objectives.pretrain:data_facts")
    with pytest.raises(ValueError, match="has no class"):
        resolve("tasks.train.objectives.pretrain:Missing")
    with pytest.raises(ValueError, match="names objective 'sft', but the job is a 'pretrain' job"):
        make_objective(_job(reference(SFTObjective)))   # a pretrain job cannot run the SFT objective
