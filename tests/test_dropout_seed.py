"""Dropout seeds per rank (`tasks.train.objectives.base.dropout_seed`): data-parallel replicas draw different masks,
tensor-parallel peers the same ones unless sequence parallelism gives each its own tokens, pipeline stages their
own streams. The rank order is checked against DeepSpeed's own topology, and the pretrain objective's `prepare`
is checked to hand those seeds to the trainer (before the fix every dp replica got the job's seed)."""

from __future__ import annotations

import itertools
from pathlib import Path

import pytest
from deepspeed.runtime.pipe.topology import PipeModelDataParallelTopology

from tasks.train.objectives.base import dropout_seed
from tasks.train.inputs.synthetic import make_job
from tests.helpers.parallel import SEED, job_spec

LAYOUTS = [(dp, tp, pp) for dp, tp, pp in itertools.product((1, 2, 3), (1, 2, 4), (1, 2)) if dp * tp * pp > 1]


def coords(dp: int, tp: int, pp: int) -> list:
    topo = PipeModelDataParallelTopology(num_pp=pp, num_mp=tp, num_dp=dp)
    return [topo.get_coord(rank) for rank in range(dp * tp * pp)]


@pytest.mark.parametrize("dp,tp,pp", LAYOUTS)
def test_seeds_follow_deepspeeds_rank_order(dp, tp, pp):
    """Without sequence parallelism: one seed per (stage, dp replica), shared by its TP peers and distinct from
    every other; with it every rank has its own."""
    where = coords(dp, tp, pp)
    plain = [dropout_seed(7, r, dp, tp, False, pp) for r in range(dp * tp * pp)]
    by_group: dict = {}
    for c, s in zip(where, plain):
        by_group.setdefault((c.pipe, c.data), set()).add(s)
    assert all(len(v) == 1 for v in by_group.values())              # TP peers: the same masks
    assert len({next(iter(v)) for v in by_group.values()}) == dp * pp  # replicas and stages: their own
    split = [dropout_seed(7, r, dp, tp, True, pp) for r in range(dp * tp * pp)]
    assert len(set(split)) == dp * tp * pp if tp > 1 else split == plain


def test_seeds_differ_between_runs_and_keep_the_single_rank_value():
    assert dropout_seed(3, 0, 1, 1, False) == 3 * 1009
    assert dropout_seed(3, 0, 1, 1, False) != dropout_seed(4, 0, 1, 1, False)
    # SFT's earlier rule (seed·1009 + rank // tp with pp 1) is kept, so its results do not move
    assert [dropout_seed(5, r, 2, 2, False) for r in range(4)] == [5 * 1009 + r // 2 for r in range(4)]


@pytest.mark.parametrize("parallel", [{"dp": 2}, {"dp": 2, "tp": 2}, {"dp": 2, "pp": 2},
                                      {"dp": 2, "tp": 2, "sequence_parallel": True}])
def test_pretrain_objective_gives_each_replica_its_own_seed(tmp_path: Path, mix_dir, parallel):
    from tasks.train.objectives.pretrain import PretrainObjective

    spec = job_spec(parallel, model={"dropout": 0.1})
    par = spec.parallel
    world = par.dp * par.tp * par.pp
    seeds = [PretrainObjective(make_job(tmp_path, mix_dir, spec, SEED)).prepare(r).torch_seed for r in range(world)]
    where = coords(par.dp, par.tp, par.pp)
    replicas = {}
    for c, s in zip(where, seeds):
        replicas.setdefault(c.pipe, {}).setdefault(c.data, set()).add(s)
    for stage in replicas.values():
        assert len(set().union(*stage.values())) == (par.dp * par.tp if par.sequence_parallel else par.dp)
