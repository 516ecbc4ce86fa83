"""Module-level shard functions for tests/test_executors.py: worker processes import them by name."""

from __future__ import annotations

import os
import time
from pathlib import Path


def square_after(x: int, wait_for: str | None = None, timeout_s: float = 60.0) -> dict:
    """x², with the pid that computed it; first waits until the file `wait_for` exists (a test's `on_done`
    writes it when another shard's result has arrived, which forces the order shards finish in)."""
    if wait_for:
        deadline = time.monotonic() + timeout_s
        while not Path(wait_for).exists():
            if time.monotonic() > deadline:
                raise TimeoutError(f"{wait_for} never appeared")
            time.sleep(0.02)
    return {"value": x * x, "pid": os.getpid()}


def fail_first_attempt(x: int, attempts_dir: str) -> int:
    """Records each attempt as a file; the first attempt of each x raises, later ones return x + 100."""
    folder = Path(attempts_dir)
    n = len(list(folder.glob(f"{x}-*")))
    (folder / f"{x}-{n}-{os.getpid()}").write_text("")
    if n == 0:
        raise OSError(f"flaky node under shard {x}")
    return x + 100
