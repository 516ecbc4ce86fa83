"""A stage run that an injected fault (FORGELINE_FAULT) SIGKILLs, in a child process the test can lose.

The child is forked from the launcher's warm forkserver (tasks/train/launch.py: torch, DeepSpeed and wandb already
imported), not a fresh `python -c` interpreter that spends ~8–10 CPU s importing them before the first step. It
runs with this process's environment (plus the fault), torch thread count and the repository as working directory, so it trains as a
fresh interpreter started from here would; on a machine with CUDA it is spawned instead (the forkserver's DeepSpeed
chose the CPU accelerator at import).
"""

from __future__ import annotations

import multiprocessing
import os
import tempfile
from pathlib import Path
from typing import Any, Callable

REPO = Path(__file__).resolve().parents[2]


def _child(fn: Callable[..., Any], args: tuple, env: dict[str, str], cwd: str, threads: int, log: str) -> None:
    os.environ.clear()
    os.environ.update(env)
    os.chdir(cwd)
    fd = os.open(log, os.O_WRONLY | os.O_APPEND)
    os.dup2(fd, 1)  # what the test reads back on failure, as a subprocess's captured output
    os.dup2(fd, 2)
    os.close(fd)
    import torch

    torch.set_num_threads(threads)  # the forkserver loaded torch under the ranks' OMP_NUM_THREADS=1
    fn(*args)


def run_killed(fn: Callable[..., Any], *args: Any, fault: str, timeout: float = 600) -> tuple[int | None, str]:
    """Run `fn(*args)` in a child with FORGELINE_FAULT=`fault`; its exit code (-9: SIGKILLed) and its output.
    `fn` must be importable by name (a module-level function)."""
    import torch

    from tasks.train.launch import environ, rank_env, start_method

    with environ(**rank_env("cpu")):  # the environment launch starts (and keeps) its forkserver in
        method = "spawn" if torch.cuda.is_available() else start_method("cpu")
    with tempfile.NamedTemporaryFile("w+", prefix="forgeline-killed-", suffix=".log", delete=False) as f:
        log = f.name
    try:
        env = {**os.environ, "FORGELINE_FAULT": fault}
        proc = multiprocessing.get_context(method).Process(
            target=_child, args=(fn, args, env, str(REPO), torch.get_num_threads(), log))
        proc.start()
        proc.join(timeout)
        if proc.is_alive():
            proc.kill()
            proc.join()
            raise AssertionError(f"{fault}: the child ran past {timeout} s:\n{Path(log).read_text()[-2000:]}")
        return proc.exitcode, Path(log).read_text()
    finally:
        os.unlink(log)
