"""The sft stage run in a test's root, shared by tests/test_sft.py and the child process its kill test starts."""

from __future__ import annotations

import shutil
from pathlib import Path

from specs.pretrain import ParallelSpec
from specs.sft import SFTJob, SFTSpec
from tasks import sft
from tasks.core.runner import StagePaths
from tests.helpers.pretrain import SEED

SFT = {"steps": 6, "micro_batch_size": 4, "seq_len": 32, "eval_every": 3, "checkpoint_every": 2, "log_every": 1,
       "compare_prompts": 3, "sampling": {"max_new_tokens": 6}, "optim": {"warmup_steps": 1, "lr": 3e-3}}


def run_sft(root: Path, **overrides) -> object:
    paths = StagePaths(root=root, stage="sft", seed=SEED)
    shutil.rmtree(paths.out, ignore_errors=True)
    paths.out.mkdir(parents=True)
    spec = SFTJob.from_sections(SFTSpec.model_validate({**SFT, **overrides}), ParallelSpec())
    return sft.run(spec, paths)
