"""specs/batch.py: the one owner of micro_batch × grad_accum × dp, and how a step's global batch is split."""

from __future__ import annotations

import numpy as np
import pytest

from specs.batch import BatchGeometry
from specs.pretrain import PretrainJob
from tasks.train.inputs.data import BatchPlan
from tasks.train.parallel.dsconfig import ds_config


@pytest.mark.parametrize("micro, accum, dp", [(1, 1, 1), (4, 3, 2), (2, 5, 3)])
def test_each_rank_takes_its_block_in_micro_batches(micro, accum, dp):
    g = BatchGeometry(micro, accum, dp)
    positions = np.arange(100, 100 + g.global_batch)
    parts = [g.rank_micro_batches(positions, r) for r in range(dp)]
    assert all(len(p) == accum and all(len(m) == micro for m in p) for p in parts)
    assert np.concatenate([m for p in parts for m in p]).tolist() == positions.tolist()  # every one once, in order
    assert parts[dp - 1][0][0] == 100 + (dp - 1) * micro * accum


def test_the_spec_the_identity_and_deepspeed_agree():
    job = PretrainJob.model_validate({"model": {"flavor": "tiny"}, "train": {"micro_batch_size": 3, "grad_accum": 4},
                                      "parallel": {"dp": 2}})
    g = BatchGeometry.of(job.train, job.parallel)
    assert (g.per_rank, g.global_batch) == (12, 24)
    identity = {"train": {"micro_batch_size": 3, "grad_accum": 4}, "parallel": {"dp": 2, "tp": 1}}
    assert BatchGeometry.of_identity(identity) == g
    assert BatchGeometry.of_identity({"train": {"micro_batch_size": 3}, "parallel": {}}).global_batch == 3
    assert ds_config(job.train, job.parallel)["train_batch_size"] == 24
    plan = BatchPlan(seed=0, n=1000, micro_batch=3, grad_accum=4, dp=2)
    assert plan.geometry == g and plan.global_batch == 24
    assert [m.tolist() for m in plan.micro_indexes(5, 1)] == \
        [m.tolist() for m in g.rank_micro_batches(plan.positions(5), 1)]


@pytest.mark.parametrize("micro, accum, dp, seq_len", [(1, 1, 1, 128), (3, 4, 2, 256), (2, 5, 3, 1000)])
def test_tokens_per_step_is_the_global_batch_of_rows(micro, accum, dp, seq_len):
    g = BatchGeometry(micro, accum, dp)
    assert g.tokens(seq_len) == micro * accum * dp * seq_len
    # the data order (what the objectives report throughput from) and the planner's observations agree with it
    assert BatchPlan(seed=0, n=1000, micro_batch=micro, grad_accum=accum, dp=dp).geometry.tokens(seq_len) \
        == g.tokens(seq_len)
    from specs.pretrain import ModelSpec
    from tasks.train.planning.cluster import ClusterSpec
    from tasks.train.planning.plan_calibrate import Observation

    obs = Observation("x", "test", ModelSpec(), 8192, seq_len, ClusterSpec(), dp, 1, 1, 0, micro, accum)
    assert obs.tokens_per_step == g.tokens(seq_len)
