"""The small pretrain job that the engine tests on real CPU ranks train at every layout (tests/test_train_parallel.py,
tests/test_elastic_resume.py; their synthetic mix is the session's `mix_dir` fixture in tests/conftest.py), and the
tensor-parallel forward/backward check of several model configs in one gloo launch."""

from __future__ import annotations

from typing import Any

import torch

from specs.pretrain import PretrainJob
from tasks.train.testing import tp_forward_check

SEED = 3
STEPS = 5


def job_spec(parallel: dict, **train: Any) -> PretrainJob:
    """4 layers × d 64 on the 256-token synthetic mix, 5 steps of 4-sequence micro-batches; `train` overrides the
    train section (`model=` the model section); checkpoints only when `checkpoint_every` is given."""
    model = train.pop("model", {})
    return PretrainJob.model_validate({
        "model": {"flavor": "tiny", "n_layers": 4, "d_model": 64, "n_heads": 4, "n_kv_heads": 2, **model},
        "parallel": parallel,
        "train": {"steps": STEPS, "micro_batch_size": 4, "log_every": 1, "eval_every": STEPS, "eval_batches": 2,
                  "checkpoint_every": 100, "optim": {"warmup_steps": 2}, **train},
    })


def tp_forward_checks(rank: int, world: int, cfg_dicts: list[dict[str, Any]], seed: int) -> dict[str, torch.Tensor]:
    """`tp_forward_check` of each config in turn on the same ranks (one start-up for all of them): its outputs
    under `<index>/<name>`."""
    out: dict[str, torch.Tensor] = {}
    for i, cfg in enumerate(cfg_dicts):
        out.update({f"{i}/{k}": v for k, v in tp_forward_check(rank, world, cfg, seed).items()})
    return out
