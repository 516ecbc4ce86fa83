"""The small pretrain job that the engine tests on real CPU ranks train at every layout (tests/test_train_parallel.py,
tests/test_elastic_resume.py; their synthetic mix is the session's `mix_dir` fixture in tests/conftest.py)."""

from __future__ import annotations

from typing import Any

from specs.pretrain import PretrainJob

SEED = 3
STEPS = 5


def job_spec(parallel: dict, **train: Any) -> PretrainJob:
    """4 layers × d 64 on the 256-token synthetic mix, 5 steps of 4-sequence micro-batches; `train` overrides the
    train section (`model=` the model section; `checkpoint_every` is 100 unless given)."""
    model = train.pop("model", {})
    return PretrainJob.model_validate({
        "model": {"flavor": "tiny", "n_layers": 4, "d_model": 64, "n_heads": 4, "n_kv_heads": 2, **model},
        "parallel": parallel,
        "train": {"steps": STEPS, "micro_batch_size": 4, "log_every": 1, "eval_every": STEPS, "eval_batches": 2,
                  "checkpoint_every": 100, "optim": {"warmup_steps": 2}, **train},
    })
