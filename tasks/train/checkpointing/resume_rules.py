"""Whether a checkpoint written at one layout may be resumed at another: pure rules over two run identities and
the tag's layout-free state file (no torch, no DeepSpeed), read by the checkpoint store when it picks what to
resume and by the layout-free copy itself (tasks/train/checkpointing/elastic.py).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from specs.batch import BatchGeometry

FOLDER = "elastic"         # a tag's layout-free state lives in <tag>/elastic/
STATE = "state.json"       # ... described by this file (the layout that wrote it, the tensors' index)


def saved_layout(tag_dir: Path) -> dict[str, int] | None:
    """The layout that wrote the layout-free state of `tag_dir`; None when the tag has none (an older run)."""
    f = Path(tag_dir) / FOLDER / STATE
    return json.loads(f.read_text())["layout"] if f.exists() else None


def unsupported_reason(precision: str | None, zero_stage: int) -> str | None:
    """Why this run cannot write a layout-free state (None: it can). fp16 without ZeRO runs DeepSpeed's
    FP16_(Unfused)Optimizer, whose fp32 masters (`fp32_groups`) carry no `_hp_mapping`: the safe_get/set API
    reads None for them, so the copy would hold fp16-rounded weights and zero moments and a resume would
    restart from stale masters. Refused rather than written wrong."""
    if precision == "fp16" and zero_stage == 0:
        return "DeepSpeed's fp16 optimizer keeps fp32 masters that its safe_get/set API cannot reach"
    return None


def layout_problems(stored: dict[str, Any], current: dict[str, Any], tag_dir: Path, stage: str = "pretrain",
                    spec: dict[str, Any] | None = None) -> list[str]:
    """Why a checkpoint at another layout cannot be resumed here (empty: it can, or the layout is the same).
    `spec`: the resolved spec its manifest records (says whether it was saved with `checkpoint_elastic` off)."""
    keys = ("dp", "tp", "pp", "zero_stage")
    old = {k: int(stored.get("parallel", {}).get(k, 1 if k != "zero_stage" else 0)) for k in keys}
    new = {k: int(current.get("parallel", {}).get(k, 1 if k != "zero_stage" else 0)) for k in keys}
    was, now = BatchGeometry.of_identity(stored), BatchGeometry.of_identity(current)
    problems = []
    if was.global_batch != now.global_batch:
        hint = ""
        if was.global_batch % (now.micro_batch * now.dp) == 0:
            hint = (f" (with micro_batch_size {now.micro_batch} and dp {now.dp}: train.grad_accum = "
                    f"{was.global_batch // (now.micro_batch * now.dp)})")
        problems.append(f"global batch: checkpoint has {was.global_batch} sequences per step (micro_batch_size "
                        f"{was.micro_batch} × grad_accum {was.grad_accum} × dp {was.dp}), this run has "
                        f"{now.global_batch} ({now.micro_batch} × {now.grad_accum} × {now.dp}); the data position "
                        f"is kept in global samples, so the global batch must stay the same{hint}")
    fp16_zero0 = unsupported_reason(stored.get("train", {}).get("precision"), old["zero_stage"])
    if old != new and fp16_zero0:
        problems.append(f"parallel: checkpoint was written at {old} in fp16 without ZeRO, which has no layout-free "
                        f"state ({fp16_zero0}); resume at {old}, or train with zero_stage ≥ 1 to change layouts")
    elif old != new and saved_layout(tag_dir) is None:
        saved_with = (spec or {}).get("train", {}).get("checkpoint_elastic")  # the job spec's train section
        why = (f"it was saved with `{stage}.checkpoint_elastic: false`" if saved_with is False
               else f"it predates that format; it is written with `{stage}.checkpoint_elastic: true`")
        problems.append(f"parallel: checkpoint was written at {old} without the layout-free state "
                        f"({FOLDER}/{STATE}) that resuming at {new} needs ({why}); resume at {old}, or train "
                        f"again with `{stage}.checkpoint_elastic: true` to change layouts")
    return problems
