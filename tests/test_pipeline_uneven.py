"""Pipeline stages that do not divide the layers (BLOOM: 12 stages over 70): DeepSpeed balances the blocks
(`partition_method="type:Block"`), the first `n_layers mod pp` stages one block more.

On real CPU ranks (gloo) each uneven layout trains exactly like the plain single-process reference
(`tests/test_train_parallel.py`'s yardstick: losses, merged weights), its stages hold the blocks the planner
counts (`tasks.train.planning.planner.stage_blocks`), and a run checkpointed at one uneven cut resumes at another.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from safetensors import safe_open

from tasks.train.modeling.model import ModelConfig
from tasks.train.parallel.parallelize import pipeline_layers
from tasks.train.planning.planner import stage_blocks
from tasks.train.checkpointing.resume_rules import FOLDER
from tests.helpers.parallel import job_spec
from tests.test_elastic_resume import fail_after_step_3, resume_and_compare
from tests.test_train_parallel import run_and_compare


def blocks_per_stage(run: Path, pp: int, n_layers: int) -> list[int]:
    """Distinct transformer blocks (global indices 1..n_layers) each stage wrote into the final checkpoint's
    layout-free state (every rank writes what it holds)."""
    final = sorted((run / "checkpoints").glob("step*"))[-1] / FOLDER
    counts = []
    for stage in range(pp):
        found = set()
        for path in final.glob(f"pp{stage:03d}-tp000-*.safetensors"):
            with safe_open(str(path), "pt") as f:
                found |= {int(m.group(1)) for k in f.keys() if (m := re.match(r"layers\.(\d+)\.", k))}
        counts.append(len(found & set(range(1, n_layers + 1))))
    return counts


def test_stage_blocks_is_deepspeeds_cut_of_our_layer_list():
    from deepspeed.runtime.utils import partition_balanced

    for n_layers in (1, 2, 3, 5, 7, 12, 70):
        cfg = ModelConfig.from_spec(job_spec({}, model={"n_layers": n_layers}).model, vocab_size=256, seq_len=32)
        # The weights DeepSpeed's "type:Block" gives our LayerSpecs: 1 where the class name holds "block".
        weights = [int(re.search("block", s.typename.__name__, re.IGNORECASE) is not None)
                   for s in pipeline_layers(cfg, 0, finish=lambda i, layer: layer)]
        assert sum(weights) == n_layers
        for pp in range(1, n_layers + 1):
            parts = partition_balanced(weights, pp)
            cut = [sum(weights[parts[i]:parts[i + 1]]) for i in range(pp)]
            assert cut == stage_blocks(n_layers, pp), (n_layers, pp)


@pytest.mark.parametrize("parallel,n_layers", [({"pp": 2}, 3), ({"pp": 3, "zero_stage": 1}, 4)],
                         ids=["pp2-3layers", "pp3-4layers-zero1"])
def test_uneven_pipeline_trains_like_the_reference(tmp_path, mix_dir, parallel, n_layers):
    spec = job_spec(parallel, model={"n_layers": n_layers}, grad_accum=2)
    run_and_compare(tmp_path, mix_dir, spec)
    assert blocks_per_stage(tmp_path, parallel["pp"], n_layers) == stage_blocks(n_layers, parallel["pp"])


def test_uneven_cut_resumes_at_another_cut(tmp_path, mix_dir, monkeypatch):
    """4 blocks as 2 + 1 + 1 over 3 stages, checkpointed at step 2, resumed as 2 + 2 over 2 stages."""
    model = {"n_layers": 4}
    fail_after_step_3(tmp_path, mix_dir, job_spec({"pp": 3}, model=model, grad_accum=2, checkpoint_every=2),
                      monkeypatch)
    resume_and_compare(tmp_path, mix_dir, job_spec({"pp": 2}, model=model, grad_accum=2, checkpoint_every=2))
    assert blocks_per_stage(tmp_path, 2, 4) == [2, 2]
