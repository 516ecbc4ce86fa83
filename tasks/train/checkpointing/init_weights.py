"""Starting weights, read per rank: each rank copies into its own parameters only its own slices.

A `WeightSource` answers "the slice `part` of `parts` along `dim` of plain-model tensor `key`" (`dim` None: the
whole tensor). The engine's module is built first — the plain model or this rank's pipeline stage, with its
linears already swapped for their column/row-parallel slices — and `load_local` then walks exactly the
parameters this rank holds and asks the source for each one's slice. So tp > 1 and pp > 1 start from a checkpoint
the same way tp = pp = 1 does, and from a Hugging Face folder a rank reads only its own rows or columns
(safetensors slices are read from the memory-mapped file without touching the rest of the tensor).

Sources: `RandomSource` (the seeded random init of `tasks/train/modeling/model.py`, generated for the asked slice only),
`ConsolidatedSource` (a forgeline model folder's consolidated safetensors: SFT's pretrained model, its token
table grown on the fly by `tasks/train/inputs/chat.py: GrownTableSource`) and `HFSource` (a Hugging Face checkpoint
folder, via the tensor references of `tasks/train/hf/hf_export.py`: a Phi-3 q/k/v or gate/up slice is read from
its rows of the fused `qkv_proj` / `gate_up_proj`). Neither reads more than the asked slice.

The module may be built on the meta device (shapes only): `load_local` then *materialises* each meta parameter
from its slice (in the dtype asked for), so a rank never allocates a tensor it does not own — not the full
column/row-parallel weight under TP, not another stage's layers under PP.

Exactness of `RandomSource`: `init_normal` draws a whole tensor with `Tensor.normal_` on its own CPU generator
(mt19937). That kernel fills the tensor with one 32-bit uniform per element in order, then Box-Muller-transforms
each aligned block of 16 (element j pairs with j + 8); when the size is not a multiple of 16 it draws 16 more
uniforms and recomputes the last 16 elements. So element i depends only on the stream position of its aligned
16-block (or on the tail draw): skipping `a` uniforms (`uniform_`, one draw per element too) and drawing chunks
whose sizes are multiples of 16 — the last one reaching the end and ≥ 16 long, so it redraws the same tail —
reproduces any range of the whole tensor bit for bit (tests/test_init_meta.py checks against `init_normal`).
"""

from __future__ import annotations

import hashlib
import math
from pathlib import Path
from typing import Protocol

import torch
from torch import nn

from specs.architecture import ModelConfig
from tasks.train.modeling.fused import join_values
from tasks.train.hf.hf_export import hf_refs, key_map
from tasks.train.hf.hf_families import HFImportError
from tasks.train.hf.hf_files import float_weight
from tasks.train.hf.hf_import import check_shapes, missing_weights, weight_files
from tasks.train.modeling.model import Transformer, name_seed
from tasks.train.checkpointing.weights import key_order, tensor_files, weights_fingerprint

CHUNK = 1 << 20  # elements drawn per step (4 MiB fp32): the generator's working memory, a multiple of 16


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


def _ceil16(n: int) -> int:
    return -(-n // 16) * 16


def normal_chunks(numel: int, std: float, seed: int, name: str, start: int, stop: int, chunk: int = CHUNK):
    """Yield (offset, values) consecutive pieces of `init_normal(numel, std, seed, name)` flattened, from an
    aligned offset ≤ `start` to one ≥ `stop`, each exactly as the whole-tensor draw makes it (module docstring).
    `chunk` must be a multiple of 16."""
    gen = torch.Generator().manual_seed(name_seed(seed, name))
    if numel < 16:  # the kernel's scalar path: small enough to draw whole
        yield 0, torch.empty(numel).normal_(0.0, std, generator=gen)
        return
    first = start - start % 16
    end = numel if (numel % 16 and stop > numel - 16) or stop >= numel else _ceil16(stop)
    if end == numel and numel % 16:
        first = min(first, (numel - 16) // 16 * 16)  # the last draw must hold the whole recomputed tail
    skipped = 0
    while skipped < first:  # advance the stream: one 32-bit draw per element, as the kernel's fill
        k = min(chunk, first - skipped)
        torch.empty(k).uniform_(generator=gen)
        skipped += k
    pos = first
    while pos < end:
        k = min(chunk, end - pos)
        if 0 < end - pos - k < 16:  # never leave a last piece under 16 (the kernel's scalar path)
            k = end - pos
        yield pos, torch.empty(k).normal_(0.0, std, generator=gen)
        pos += k


class RandomSource:
    """The seeded random init of `Transformer(cfg, seed)`, generated per slice: a row slice draws only its own
    rows (after skipping the stream before them); a column slice walks the whole stream in row blocks of
    `CHUNK` elements and keeps its columns, so memory stays at its slice plus one block."""

    def __init__(self, cfg: ModelConfig, seed: int):
        with torch.device("meta"):  # shapes and recipes only: nothing is drawn
            plain = Transformer(cfg, seed)
        self.seed = seed
        self.recipes = {k: (tuple(p.shape), p.init_std, p.init_fill) for k, p in plain.named_parameters()}

    def read(self, key: str, dim: int | None, part: int, parts: int) -> torch.Tensor:
        if key not in self.recipes:
            raise KeyError(f"random init: no parameter `{key}`")
        shape, std, fill = self.recipes[key]
        lo, hi = (0, shape[0]) if dim is None else _slice_bounds(shape[dim], part, parts, f"random init `{key}`")
        local = list(shape)
        if dim is not None:
            local[dim] = hi - lo
        if std is None:
            return torch.full(local, fill)
        numel, row = math.prod(shape), math.prod(shape[1:])
        out = torch.empty(local)
        if dim in (None, 0):  # rows lo..hi: one contiguous range of the flattened tensor
            flat, a, b = out.view(-1), lo * row, hi * row
            for pos, v in normal_chunks(numel, std, self.seed, key, a, b):
                s, e = max(a, pos), min(b, pos + v.numel())
                if s < e:
                    flat[s - a: e - a] = v[s - pos: e - pos]
            return out
        if len(shape) != 2 or dim != 1:
            raise ValueError(f"random init `{key}`: slicing along dim {dim} of shape {shape} is not supported")
        block = max(16, CHUNK // row // 16 * 16) * row  # whole rows, a multiple of 16 elements
        for pos, v in normal_chunks(numel, std, self.seed, key, 0, numel, block):
            rows = v.view(-1, row)
            out[pos // row: pos // row + rows.size(0)] = rows[:, lo:hi]
        return out

    def fingerprint(self) -> str:
        return f"random:{self.seed}"


class HFSource:
    """Slices straight from a Hugging Face checkpoint's safetensors files (never unpickling anything)."""

    def __init__(self, folder: Path, cfg: ModelConfig):
        self.folder = Path(folder)
        self.mapping = key_map(cfg)
        self.refs = hf_refs(cfg)
        self.width = cfg.d_model  # the input width of every fused projection (Phi-3's qkv_proj, gate_up_proj)
        self.files = weight_files(self.folder)  # refuses pickle-only folders by name
        missing_weights(self.folder, self.files, self.mapping, cfg.tie_embeddings)
        # headers only: a misshapen tensor is named by file and HF name here, not later by forgeline's key
        check_shapes(cfg, self.files)

    def read(self, key: str, dim: int | None, part: int, parts: int) -> torch.Tensor:
        """As `load_hf_state` reads it: an integer or boolean weight is refused (`float_weight`), not cast to
        the parameter's float dtype by `load_params` (a bool norm weight became 0.0/1.0 silently). A part of a
        fused tensor reads only its rows (its TP share of them), after checking the fused tensor's row count."""
        ref = self.refs[key]
        path = self.files[ref.name]
        if ref.stop is None:
            return float_weight(path, ref.name, read_file_slice(path, ref.name, dim, part, parts))
        want = (ref.rows, self.width)
        return float_weight(path, ref.name, read_fused_part(path, ref.name, want, ref.start, ref.stop, dim, part,
                                                            parts))

    def fingerprint(self) -> str:
        """config.json plus the weight files' names and sizes (hashing terabytes of weights at every start would
        cost minutes; a changed tensor changes a file's size or the config in practice, and DVC tracks the path)."""
        h = hashlib.sha256((self.folder / "config.json").read_bytes())
        for f in sorted(set(self.files.values())):
            h.update(f.name.encode() + str(f.stat().st_size).encode())
        return h.hexdigest()[:16]


def read_file_slice(path: Path, name: str, dim: int | None, part: int, parts: int) -> torch.Tensor:
    """Tensor `name` of safetensors file `path`, or its slice `part` of `parts` along `dim` (0 or 1): memory-
    mapped, so only the slice's bytes are read."""
    from safetensors import safe_open

    with safe_open(str(path), framework="pt") as f:
        piece = f.get_slice(name)
        shape = tuple(piece.get_shape())
        if dim is None:
            return piece[:]
        lo, hi = _slice_bounds(shape[dim], part, parts, f"{path}: `{name}`")
        return piece[lo:hi] if dim == 0 else piece[:, lo:hi]


def read_fused_part(path: Path, name: str, want: tuple[int, ...], start: int, stop: int, dim: int | None,
                    part: int, parts: int) -> torch.Tensor:
    """Rows [start, stop) of fused tensor `name`, or their slice `part` of `parts` along `dim`: memory-mapped, only
    the slice's bytes read. A tensor not of shape `want` is refused naming it (its parts would be read from the
    wrong rows)."""
    from safetensors import safe_open

    with safe_open(str(path), framework="pt") as f:
        piece = f.get_slice(name)
        shape = tuple(piece.get_shape())
        if shape != tuple(want):
            raise HFImportError(f"{path}: `{name}` has shape {shape}, config.json implies {tuple(want)} (the fused "
                                "parts' rows stacked)")
        if dim is None:
            return piece[start:stop]
        lo, hi = _slice_bounds(stop - start if dim == 0 else shape[1], part, parts, f"{path}: `{name}` rows "
                               f"{start}:{stop}")
        return piece[start + lo:start + hi] if dim == 0 else piece[start:stop, lo:hi]


class ConsolidatedSource:
    """Slices of a forgeline model folder's consolidated weights (`model.safetensors`, or the files its index
    names), read per tensor: a rank reads only its own slices, never the whole model."""

    def __init__(self, folder: Path, name: str = "the pretrained model"):
        self.folder, self.name = Path(folder), name
        self.files = tensor_files(self.folder)
        self.keys = sorted(self.files, key=key_order)

    def read(self, key: str, dim: int | None, part: int, parts: int) -> torch.Tensor:
        if key not in self.files:
            raise KeyError(f"{self.name}: no tensor `{key}`")
        return read_file_slice(self.files[key], key, dim, part, parts)

    def fingerprint(self) -> str:
        return weights_fingerprint(self.folder)[:16]


def load_local(layers: list[tuple[int, nn.Module]], tp_rank: int, tp: int, source: WeightSource,
               dtype: torch.dtype | None = None, meta_only: bool = False) -> int:
    """Give the parameters of `layers` ((global index, layer) pairs: this rank's) `source`'s slices; returns the
    number of tensors loaded (`load_params` per layer)."""
    return sum(load_params(f"layers.{idx}", layer, tp_rank, tp, source, dtype, meta_only) for idx, layer in layers)


def load_params(prefix: str, module: nn.Module, tp_rank: int, tp: int, source: WeightSource,
                dtype: torch.dtype | None = None, meta_only: bool = False, recurse: bool = True) -> int:
    """Give `module`'s parameters (plain keys `<prefix>.<name>`; `recurse` False: its own, not its children's)
    `source`'s slices; a fused parameter (tasks/train/modeling/fused.py) gets its parts' slices stacked. A meta parameter is replaced by a new one holding its slice (in `dtype`, default its own;
    its attributes — TP marks, init recipe, requires_grad — kept); a real one is copied into. `meta_only`: leave
    real parameters alone (LoRA's adapters, added before materialising). A shape that differs from the
    parameter's is refused by name."""
    loaded = 0
    with torch.no_grad():
        for name, p in list(module.named_parameters(recurse=recurse)):
            if meta_only and not p.is_meta:
                continue
            key = f"{prefix}.{name}"
            dim = getattr(p, "partition_dim", None) if tp > 1 else None
            t = join_values(key, p, lambda k: source.read(k, dim, tp_rank, tp))  # a fused one: its parts stacked
            if tuple(t.shape) != tuple(p.shape):
                raise ValueError(f"starting weights: `{key}` has shape {tuple(t.shape)} on TP rank {tp_rank}, "
                                 f"the model expects {tuple(p.shape)}")
            if p.is_meta:
                owner_path, _, attr = name.rpartition(".")
                new = nn.Parameter(t.to(dtype or p.dtype).contiguous(), requires_grad=p.requires_grad)
                new.__dict__.update(p.__dict__)
                setattr(module.get_submodule(owner_path) if owner_path else module, attr, new)
            else:
                p.copy_(t.to(dtype=p.dtype, device=p.device))
            loaded += 1
    return loaded
