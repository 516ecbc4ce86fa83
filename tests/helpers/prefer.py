"""The preference stages run in a test's root (prefer_data -> prefer_ref -> prefer), shared by tests/test_prefer.py
and the child process its kill test starts. The root holds a tiny SFT model (tests/helpers/sft.py) and an
approving review_sft decision."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

from specs.pretrain import ParallelSpec
from specs.prefer import PreferDataJob, PreferDataSpec, PreferJob, PreferRefJob, PreferRefSpec, PreferSpec
from tasks import prefer, prefer_data, prefer_ref
from tasks.core.runner import StagePaths
from tests.helpers.pretrain import SEED

PREFER = {"steps": 8, "micro_batch_size": 2, "eval_every": 4, "checkpoint_every": 2, "log_every": 1, "beta": 0.5,
          "compare_prompts": 3, "sampling": {"max_new_tokens": 6}, "optim": {"warmup_steps": 1, "lr": 3e-3}}
DATA = {"sources": [{"name": "instruct", "kind": "embedded", "rejected": ["sft_greedy", "other_answer"],
                     "max_new_tokens": 8}], "decontamination": {"enabled": False}}
OUTPUTS = ("model.safetensors", "metrics.jsonl", "report.json", "comparisons.jsonl", "spotcheck.jsonl",
           "tokenizer.json", "config.json", "chat.json")


def approve(root: Path, gate: str = "review_sft") -> None:
    (root / "data" / gate).mkdir(parents=True, exist_ok=True)
    (root / "data" / gate / "decision.json").write_text(json.dumps(
        {"decision": "approve", "reviewer": "auto", "mode": "auto", "sample_sha256": "0" * 64, "items": []}))


def fresh(root: Path, stage: str) -> StagePaths:
    """What `python -m tasks <stage>` does around run(): a clean out folder (DVC deletes it before a rerun)."""
    paths = StagePaths(root=root, stage=stage, seed=SEED)
    shutil.rmtree(paths.out, ignore_errors=True)
    paths.out.mkdir(parents=True)
    return paths


def run_data(root: Path, **data) -> None:
    """prefer_data and prefer_ref on the root's SFT model."""
    prefer_data.run(PreferDataJob(data=PreferDataSpec.model_validate({**DATA, **data})), fresh(root, "prefer_data"))
    prefer_ref.run(PreferRefJob(ref=PreferRefSpec()), fresh(root, "prefer_ref"))


def run_prefer(root: Path, **overrides) -> object:
    spec = PreferJob.from_sections(PreferSpec.model_validate({**PREFER, **overrides}), ParallelSpec())
    return prefer.run(spec, fresh(root, "prefer"))


def outputs(root: Path) -> dict[str, bytes]:
    return {n: (root / "data" / "prefer" / n).read_bytes() for n in OUTPUTS}
