"""Starting weights, read per rank: each rank copies into its own parameters only its own slices.

A `WeightSource` answers "the slice `part` of `parts` along `dim` of plain-model tensor `key`" (`dim` None: the
whole tensor). The engine's module is built first — the plain model or this rank's pipeline stage, with its
linears already swapped for their column/row-parallel slices — and `load_local` then walks exactly the
parameters this rank holds and asks the source for each one's slice. So tp > 1 and pp > 1 start from a checkpoint
the same way tp = pp = 1 does, and from a Hugging Face folder a rank reads only its own rows or columns
(safetensors slices are read from the memory-mapped file without touching the rest of the tensor).

Sources: `StateDictSource` (a state dict in memory: SFT's pretrained model after its embedding resize) and
`HFSource` (a Hugging Face checkpoint folder, via the key map of `tasks/train/hf_export.py`).
"""

from __future__ import annotations

import hashlib
from pathlib import Path
from typing import Protocol

import torch
from torch import nn

from tasks.train.config import ModelConfig
from tasks.train.hf_export import key_map
from tasks.train.hf_import import HFImportError, weight_files


class WeightSource(Protocol):
    def read(self, key: str, dim: int | None, part: int, parts: int) -> torch.Tensor:
        """Plain-model tensor `key`, or its slice `part` of `parts` equal slices along `dim`."""
        ...

    def fingerprint(self) -> str:
        """What these weights are, for the checkpoint identity (a resume refuses different starting weights)."""
        ...


def _slice_bounds(size: int, part: int, parts: int, what: str) -> tuple[int, int]:
    if size % parts:
        raise ValueError(f"{what}: size {size} does not split into {parts} tensor-parallel slices")
    step = size // parts
    return part * step, (part + 1) * step


class StateDictSource:
    """Slices of a state dict held in memory."""

    def __init__(self, state: dict[str, torch.Tensor], name: str = "state dict"):
        self.state, self.name = state, name

    def read(self, key: str, dim: int | None, part: int, parts: int) -> torch.Tensor:
        if key not in self.state:
            raise KeyError(f"{self.name}: no tensor `{key}`")
        t = self.state[key]
        if dim is None:
            return t
        lo, hi = _slice_bounds(t.shape[dim], part, parts, f"{self.name}: `{key}`")
        return t.narrow(dim, lo, hi - lo)

    def fingerprint(self) -> str:
        h = hashlib.sha256()
        for k in sorted(self.state):
            t = self.state[k].detach().contiguous().cpu()
            h.update(k.encode() + str(tuple(t.shape)).encode() + t.view(torch.uint8).numpy().tobytes())
        return h.hexdigest()[:16]


class HFSource:
    """Slices straight from a Hugging Face checkpoint's safetensors files (never unpickling anything)."""

    def __init__(self, folder: Path, cfg: ModelConfig):
        self.folder = Path(folder)
        self.mapping = key_map(cfg)
        self.files = weight_files(self.folder)  # refuses pickle-only folders by name
        missing = [hf for hf in self.mapping.values() if hf not in self.files]
        if missing:
            raise HFImportError(f"{self.folder}: weight `{missing[0]}` is missing ({len(missing)} missing in all)")

    def read(self, key: str, dim: int | None, part: int, parts: int) -> torch.Tensor:
        from safetensors import safe_open

        hf = self.mapping[key]
        with safe_open(str(self.files[hf]), framework="pt") as f:
            piece = f.get_slice(hf)
            shape = tuple(piece.get_shape())
            if dim is None:
                return piece[:]
            lo, hi = _slice_bounds(shape[dim], part, parts, f"{self.files[hf]}: `{hf}`")
            return piece[lo:hi] if dim == 0 else piece[:, lo:hi]

    def fingerprint(self) -> str:
        """config.json plus the weight files' names and sizes (hashing terabytes of weights at every start would
        cost minutes; a changed tensor changes a file's size or the config in practice, and DVC tracks the path)."""
        h = hashlib.sha256((self.folder / "config.json").read_bytes())
        for f in sorted(set(self.files.values())):
            h.update(f.name.encode() + str(f.stat().st_size).encode())
        return h.hexdigest()[:16]


def load_local(layers: list[tuple[int, nn.Module]], tp_rank: int, tp: int, source: WeightSource) -> int:
    """Copy `source`'s slices into the parameters of `layers` ((global index, layer) pairs: this rank's); returns
    the number of tensors loaded. A shape that differs from the parameter's is refused by name."""
    loaded = 0
    with torch.no_grad():
        for idx, layer in layers:
            for name, p in layer.named_parameters():
                key = f"layers.{idx}.{name}"
                dim = getattr(p, "partition_dim", None) if tp > 1 else None
                t = source.read(key, dim, tp_rank, tp)
                if tuple(t.shape) != tuple(p.shape):
                    raise ValueError(f"starting weights: `{key}` has shape {tuple(t.shape)} on TP rank {tp_rank}, "
                                     f"the model expects {tuple(p.shape)}")
                p.copy_(t.to(dtype=p.dtype, device=p.device))
                loaded += 1
    return loaded
