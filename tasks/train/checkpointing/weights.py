"""Final weights without whole-model gathers: every rank writes its own shard, a streaming merge joins them on CPU.

At the end of training each rank of data-parallel rank 0 writes the parameters it holds — its pipeline stage's
layers, its tensor-parallel slice, fp32 master values — to `<out>/shards/pp<stage>-tp<rank>.safetensors`, with the
split dimension of every TP-split tensor in the file's metadata. No tensor travels between ranks for this (ZeRO's
gather of one parameter's fp32 master over data parallel stays: that is how the optimizer owns it), so no rank
ever holds more than its own share: on NCCL a `gather_object` of the model would allocate world × the largest
piece on rank 0's GPU, the out-of-memory at the end of every large run this replaces.

Then one process merges, streaming: keys in model order; for each, the TP slices are read from the memory-mapped
shards and concatenated; the tensor joins the current output file, which is written once it reaches
`max_file_bytes`. Peak host memory: one output file plus one tensor, whatever the model's size. The output is
Hugging Face's layout — `model.safetensors`, or `model-00001-of-0000N.safetensors` files with
`model.safetensors.index.json` — keyed by the plain model's names (`layers.<i>.<name>`); `load_weights` reads
either, never unpickling anything.
"""

from __future__ import annotations

import hashlib
import json
import re
import shutil
from collections import defaultdict
from pathlib import Path

import torch
from safetensors import safe_open
from safetensors.torch import load_file, save_file

from tasks.core.files import atomic_path, sha256_file, write_json_atomic
from specs.architecture import ModelConfig
from tasks.train.modeling.model import Transformer

SHARDS_DIR = "shards"
ADAPTER_SHARDS = "adapter_shards"  # LoRA: the adapter's rank shards, merged into <out>/adapter/
ADAPTER_DIR = "adapter"
SINGLE = "model.safetensors"
INDEX = "model.safetensors.index.json"
MAX_FILE_BYTES = 2 * 1024**3  # Hugging Face's usual cap per file: loaders and hubs handle it, memory stays bounded
_SHARD_NAME = re.compile(r"pp(\d+)-tp(\d+)\.safetensors")


def key_order(key: str) -> tuple[int, str]:
    """Model order of a plain-model key: by layer index, then by name."""
    parts = key.split(".")
    return int(parts[1]), key


def shard_path(out_dir: Path, stage: int, tp_rank: int, folder: str = SHARDS_DIR) -> Path:
    return out_dir / folder / f"pp{stage:03d}-tp{tp_rank:03d}.safetensors"


def write_shard(path: Path, tensors: dict[str, torch.Tensor], split: dict[str, int], tp: int, tp_rank: int,
                pp: int | None = None) -> None:
    """One rank's part: `tensors` (its TP slices and, on TP rank 0, the replicated tensors) and `split` (key →
    the dimension its slices are concatenated along). `pp`: the run's pipeline stages, so the merge can tell a
    missing stage's file (a node whose shards never reached the shared folder) from a smaller model."""
    # One metadata key: safetensors keeps metadata in a Rust HashMap, whose order is random per process, so
    # two keys would make equal shards differ in bytes from run to run (these files are only read back here).
    info = {"tp": tp, "tp_rank": tp_rank, "split": split, **({"pp": pp} if pp is not None else {})}
    meta = {"forgeline": json.dumps(info, sort_keys=True)}
    path.parent.mkdir(parents=True, exist_ok=True)
    with atomic_path(path) as tmp:
        save_file({k: v.contiguous() for k, v in tensors.items()}, str(tmp), metadata=meta)


def _shard_table(folder: Path) -> tuple[int, dict[str, list[tuple[int, Path]]], dict[str, int | None]]:
    """(tp, key → [(tp rank, file)], key → split dim or None) over every shard file in `folder`."""
    pieces: dict[str, list[tuple[int, Path]]] = defaultdict(list)
    split: dict[str, int | None] = {}
    tps, pps, found = set(), set(), set()
    files = sorted(folder.glob("*.safetensors"))
    if not files:
        raise FileNotFoundError(f"no weight shards in {folder}")
    for f in files:
        name = _SHARD_NAME.fullmatch(f.name)
        if not name:
            raise ValueError(f"{f}: not a weight shard name (ppNNN-tpNNN.safetensors)")
        found.add((int(name[1]), int(name[2])))
        with safe_open(str(f), framework="pt") as fh:
            info = json.loads(fh.metadata()["forgeline"])
            tps.add(info["tp"])
            pps.add(info.get("pp"))
            for key in fh.keys():
                pieces[key].append((info["tp_rank"], f))
                split[key] = info["split"].get(key)
    if len(tps) != 1:
        raise ValueError(f"{folder}: shards disagree on the tensor-parallel degree ({sorted(tps)})")
    tp = tps.pop()
    if None not in pps:  # written with the stage count (older shards have none: nothing to check against)
        if len(pps) != 1:
            raise ValueError(f"{folder}: shards disagree on the pipeline stages ({sorted(pps)})")
        pp = pps.pop()
        missing = [shard_path(Path(""), s, r).name for s in range(pp) for r in range(tp) if (s, r) not in found]
        if missing:
            raise FileNotFoundError(f"{folder}: {len(missing)} of {pp * tp} weight shards missing ({missing[0]}"
                                    f"{' …' if len(missing) > 1 else ''}); every stage × TP rank writes one "
                                    "(on several nodes the output folder must be shared)")
    return tp, pieces, split


def _joined(key: str, parts: list[tuple[int, Path]], dim: int | None, tp: int) -> torch.Tensor:
    if dim is None:
        return _read(parts[0][1], key)
    ranks = sorted(r for r, _ in parts)
    if ranks != list(range(tp)):
        raise ValueError(f"`{key}`: slices of TP ranks {ranks} found, expected 0..{tp - 1}")
    return torch.cat([_read(f, key) for _, f in sorted(parts)], dim=dim)


def _read(path: Path, key: str) -> torch.Tensor:
    with safe_open(str(path), framework="pt") as fh:  # memory-mapped: only this tensor is read
        return fh.get_tensor(key)


def merge_shards(out_dir: Path, max_file_bytes: int = MAX_FILE_BYTES, keep_shards: bool = False,
                 folder: Path | None = None) -> list[Path]:
    """Join the shards in `folder` (default `out_dir/shards`) into `out_dir`'s consolidated weights (see the
    module docstring); returns the files written. The shard folder is removed afterwards unless `keep_shards`."""
    folder = folder or out_dir / SHARDS_DIR
    out_dir.mkdir(parents=True, exist_ok=True)
    tp, pieces, split = _shard_table(folder)
    size = 0
    files: list[Path] = []
    # Two passes keep memory at one file: the first only sizes the groups (shapes from the headers), the second
    # reads, joins and writes one group at a time.
    plan: list[list[str]] = [[]]
    for key in sorted(pieces, key=key_order):
        nbytes = sum(_nbytes(f, key) for _, f in pieces[key]) if split[key] is not None else _nbytes(
            pieces[key][0][1], key)
        if plan[-1] and size + nbytes > max_file_bytes:
            plan.append([])
            size = 0
        plan[-1].append(key)
        size += nbytes
    for k in (SINGLE, INDEX):
        (out_dir / k).unlink(missing_ok=True)
    for old in out_dir.glob("model-*-of-*.safetensors"):
        old.unlink()
    weight_map: dict[str, str] = {}
    total = 0
    for n, keys in enumerate(plan, start=1):
        name = SINGLE if len(plan) == 1 else f"model-{n:05d}-of-{len(plan):05d}.safetensors"
        tensors = {key: _joined(key, pieces[key], split[key], tp) for key in keys}
        total += sum(t.numel() * t.element_size() for t in tensors.values())
        with atomic_path(out_dir / name) as tmp:
            save_file(tensors, str(tmp), metadata={"format": "pt"})
        weight_map.update(dict.fromkeys(keys, name))
        files.append(out_dir / name)
        del tensors
    if len(plan) > 1:
        write_json_atomic(out_dir / INDEX, {"metadata": {"total_size": total}, "weight_map": weight_map})
        files.append(out_dir / INDEX)
    if not keep_shards:
        shutil.rmtree(folder)
    return files


def _nbytes(path: Path, key: str) -> int:
    with safe_open(str(path), framework="pt") as fh:
        piece = fh.get_slice(key)
        count = 1
        for d in piece.get_shape():
            count *= d
        return count * _DTYPE_BYTES[piece.get_dtype()]


_DTYPE_BYTES = {"F64": 8, "F32": 4, "F16": 2, "BF16": 2, "I64": 8, "I32": 4, "I16": 2, "I8": 1, "U8": 1, "BOOL": 1}


def weight_files(folder: Path) -> list[Path]:
    """The consolidated weight files in `folder` (one file, or the files its index names), in order."""
    index = folder / INDEX
    if index.exists():
        mapping = json.loads(index.read_text())["weight_map"]
        return [folder / name for name in sorted(set(mapping.values()))]
    if (folder / SINGLE).exists():
        return [folder / SINGLE]
    raise FileNotFoundError(f"{folder}: no {SINGLE} or {INDEX} (the weights a finished training run writes)")


def tensor_files(folder: Path) -> dict[str, Path]:
    """Key → the consolidated weight file holding it (read from the index or the files' headers only)."""
    index = folder / INDEX
    if index.exists():
        return {k: folder / name for k, name in json.loads(index.read_text())["weight_map"].items()}
    out: dict[str, Path] = {}
    for f in weight_files(folder):
        with safe_open(str(f), framework="pt") as fh:
            out.update(dict.fromkeys(fh.keys(), f))
    return out


def load_weights(folder: Path) -> dict[str, torch.Tensor]:
    """The consolidated state dict in model order, read from safetensors only (nothing is unpickled)."""
    state: dict[str, torch.Tensor] = {}
    for f in weight_files(folder):
        state.update(load_file(str(f)))
    return dict(sorted(state.items(), key=lambda kv: key_order(kv[0])))


def model_from_state(cfg: ModelConfig, state: dict[str, torch.Tensor], device: str = "cpu") -> Transformer:
    """The plain model (eval mode) holding `state` in fp32 on `device`. Built on the meta device and handed the
    tensors themselves: no random initialisation (minutes of RNG on a CPU for a 7B model) and no second
    whole-model copy beside the state dict, which `Transformer(cfg, seed)` + `load_state_dict` cost."""
    with torch.device("meta"):
        model = Transformer(cfg, seed=0)
    model.load_state_dict({k: v.to(device=device, dtype=torch.float32) for k, v in state.items()}, strict=True,
                          assign=True)
    return model.eval()


def weights_fingerprint(folder: Path) -> str:
    """A digest of the consolidated weight files' bytes (the identity downstream stages record)."""
    h = hashlib.sha256()
    for f in weight_files(folder):
        h.update(f.name.encode() + b"\0" + sha256_file(f).encode() + b"\n")
    return h.hexdigest()


def save_weights(folder: Path, state: dict[str, torch.Tensor]) -> Path:
    """Write an in-memory state dict (a small model: tests, conversions) the way a training run's merge does."""
    folder.mkdir(parents=True, exist_ok=True)
    ordered = dict(sorted(((k, v.contiguous()) for k, v in state.items()), key=lambda kv: key_order(kv[0])))
    with atomic_path(folder / SINGLE) as tmp:
        save_file(ordered, str(tmp), metadata={"format": "pt"})
    return folder / SINGLE
