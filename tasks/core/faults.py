"""Fault injection for tests of the resume and failure promises.

`FORGELINE_FAULT=<point>=<n>[:<action>]` acts the n-th time execution reaches `point` in this process:
- action `kill` (the default): SIGKILL the process, as abruptly as a lost node (no cleanup, no atexit);
- action an errno name (`ENOSPC`, `EROFS`, `EIO`, ...): raise that OSError, as the OS would (e.g. a full disk
  at `files.atomic_write`, which every output write passes just before its temp file is published);
- action `pause`: wait there until the file named by `FORGELINE_FAULT_RELEASE` exists (at most 10 minutes), so
  a test can act while a stage is provably mid-run (e.g. start a second run on the same workspace).
`FORGELINE_FAULT_PATH=<text>`: count only the hits whose file path contains `<text>` (e.g. `/data/clean/shards/`:
the n-th output shard, however many work files the stage writes before it).
`FORGELINE_FAULT_ONCE=<file>`: fire at most once across processes (firing creates the file first), so a retried
or re-run stage meets no fault, as a retry after a real crash would not meet the same crash.

Points: clean.shard_done, <objective>.step_done and <objective>.checkpoint_write (pretrain, sft: between
every rank's checkpoint files and the checkpoint's manifest), <objective>.checkpoint_async_write (in an async
save's background writer, after the first of its files), files.atomic_write (a temp file written, not yet renamed into place).
Unset, `checkpoint` costs one dict lookup. The trainer calls it through its `Hooks.point` (tasks/train/loop/trainer.py),
so in-process tests can install their own hook instead.
"""

from __future__ import annotations

import errno
import os
import signal
import time
from collections import Counter
from pathlib import Path

_hits: Counter[str] = Counter()


def reset_counts() -> None:
    """Count hits from zero again, as a new process would (for in-process tests that inject a fault more than
    once in one process)."""
    _hits.clear()


def checkpoint(point: str, path: str | Path | None = None) -> None:
    """A fault point; `path` names the file being written there (used in an injected OSError)."""
    spec = os.environ.get("FORGELINE_FAULT")
    if not spec:
        return
    name, _, rest = spec.partition("=")
    if name != point:
        return
    nth, _, action = rest.partition(":")
    only = os.environ.get("FORGELINE_FAULT_PATH")
    if only and (path is None or only not in Path(path).as_posix()):
        return
    _hits[point] += 1
    if _hits[point] != int(nth or 1):
        return
    once = os.environ.get("FORGELINE_FAULT_ONCE")
    if once:
        try:
            os.close(os.open(once, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o644))
        except FileExistsError:
            return  # an earlier process met this fault already
    if action in ("", "kill"):
        os.kill(os.getpid(), signal.SIGKILL)
    if action == "pause":
        release = os.environ.get("FORGELINE_FAULT_RELEASE")
        deadline = time.monotonic() + 600
        while release and not os.path.exists(release) and time.monotonic() < deadline:
            time.sleep(0.1)
        return
    code = getattr(errno, action, None)
    if not isinstance(code, int):
        raise ValueError(f"FORGELINE_FAULT: unknown action {action!r} (kill, or an errno name such as ENOSPC)")
    raise OSError(code, os.strerror(code), None if path is None else str(path))
