"""`speed.compile` (every transformer block `torch.compile`d in place) under ZeRO-3 and a pipeline, and the whole
model compiled as one graph (`compile_scope: model`) under ZeRO-2's gradient hooks and reduce buckets, on real CPU
ranks (gloo, inductor's CPU code generation): the losses and merged weights equal the plain eager reference's
(`tests/test_train_parallel.py`'s yardstick), and every rank really compiled (inductor wrote code into the
fresh cache folder the ranks were given). Slow: ~1 min per layout on 2 cores, mostly code generation."""

from __future__ import annotations

import pytest

from tests.helpers.parallel import job_spec
from tests.test_train_parallel import run_and_compare


@pytest.mark.slow
@pytest.mark.parametrize("parallel, scope", [({"dp": 2, "zero_stage": 3}, "blocks"), ({"pp": 2}, "blocks"),
                                             ({"dp": 2, "zero_stage": 2}, "model")],
                         ids=["dp2-zero3", "pp2", "dp2-zero2-whole-model"])
def test_compiled_blocks_train_like_the_eager_reference(tmp_path, mix_dir, monkeypatch, parallel, scope):
    cache = tmp_path / "inductor"
    monkeypatch.setenv("TORCHINDUCTOR_CACHE_DIR", str(cache))   # the ranks inherit the launch's environment
    # compiled kernels fuse and reorder float ops: 1e-4 (the one-rank compile test's tolerance), not 1e-5
    run_and_compare(tmp_path, mix_dir, job_spec(parallel, grad_accum=2, speed={"compile": True, "compile_scope": scope}), atol=1e-4)
    generated = list(cache.rglob("*.py"))
    assert generated, "no rank compiled a block"
