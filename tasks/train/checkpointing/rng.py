"""Each rank's torch RNG states in a checkpoint tag (dropout draws from them: a resumed run must continue the same
stream); one file per rank, read back with `weights_only=True`."""

from __future__ import annotations

from pathlib import Path
from typing import Any


def rng_file(folder: Path, tag: str, rank: int) -> Path:
    return folder / tag / f"rng-rank{rank:05d}.pt"


def rng_state() -> dict[str, Any]:
    """This rank's torch RNG states (dropout draws from them: a resumed run must continue the same stream)."""
    import torch

    state = {"cpu": torch.get_rng_state()}
    if torch.cuda.is_available() and torch.cuda.is_initialized():
        state["cuda"] = torch.cuda.get_rng_state()
    return state


def restore_rng(path: Path) -> None:
    """Set the RNG states saved at `path` (tensors only: `weights_only=True`); a missing file changes nothing."""
    import torch

    if not path.exists():
        return
    state = torch.load(path, weights_only=True)
    torch.set_rng_state(state["cpu"])
    if "cuda" in state and torch.cuda.is_available():
        torch.cuda.set_rng_state(state["cuda"])
