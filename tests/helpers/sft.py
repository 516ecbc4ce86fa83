"""The sft stage run in a test's root, shared by tests/test_sft.py and the child process its kill test starts."""

from __future__ import annotations

import json
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


TOPICS = ["rivers", "mills", "bread", "grain", "boats", "bridges", "stones", "roads", "wells", "barns"]


def conversations(n: int, offset: int = 0) -> list[dict]:
    rows = []
    for i in range(offset, offset + n):
        topic = TOPICS[i % len(TOPICS)]
        rows.append({"id": f"c{i:03d}", "source": "synthetic", "score": 1.0, "messages": [
            {"role": "user", "content": f"Tell me about {topic} {i}."},
            {"role": "assistant", "content": f"The {topic} are old and the {topic} are near the river."}]})
    return rows


def write_jsonl(path: Path, rows: list[dict]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))


def decide(root: Path, decision: str) -> None:
    """The gate's decision.json as the review stage writes it (a human's, in terminal mode)."""
    (root / "data" / "review").mkdir(parents=True, exist_ok=True)
    (root / "data" / "review" / "decision.json").write_text(json.dumps(
        {"decision": decision, "reviewer": "ada", "notes": "answers are made up" if decision == "reject" else "",
         "mode": "terminal", "time": "2026-12-01T10:00:00Z", "sample_sha256": "0" * 64, "items": []}))
