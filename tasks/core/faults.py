"""Fault injection for tests of the resume promises: `FORGELINE_FAULT=<point>=<n>` SIGKILLs the process the
n-th time execution reaches `point` (e.g. `clean.shard_done=2`). Unset, it costs one dict lookup."""

from __future__ import annotations

import os
import signal
from collections import Counter

_hits: Counter[str] = Counter()


def checkpoint(point: str) -> None:
    spec = os.environ.get("FORGELINE_FAULT")
    if not spec:
        return
    name, _, nth = spec.partition("=")
    if name != point:
        return
    _hits[point] += 1
    if _hits[point] == int(nth or 1):
        os.kill(os.getpid(), signal.SIGKILL)  # as abrupt as a lost node: no cleanup, no atexit


def loss_factor(batch: int) -> float:
    """`FORGELINE_INJECT_LOSS=<batch>:<factor>[,...]` multiplies the training loss of those data batches (numbered
    from 1 as in incidents.jsonl; `nan` allowed), so tests can drive the stability guard through real ranks. Keyed by data batch, not step: a
    rollback that skips the batch no longer meets the fault, as it would not meet a truly bad batch again."""
    spec = os.environ.get("FORGELINE_INJECT_LOSS")
    if not spec:
        return 1.0
    for item in spec.split(","):
        key, _, factor = item.partition(":")
        if key.strip() and int(key) == batch:
            return float(factor)
    return 1.0
