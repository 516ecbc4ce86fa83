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
