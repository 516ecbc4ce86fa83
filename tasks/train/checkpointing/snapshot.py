"""What an asynchronous checkpoint is made of: host snapshots of state dicts and files hashed as they are written.

`HostBuffers.snapshot(name, state)` copies every tensor of `state` into host storages kept for reuse: a storage
shared by several tensors (views, one tensor listed twice) is copied once and the copies share it the same way,
so `torch.save` of the snapshot writes the same bytes as `torch.save` of the original would have, whatever
training does to the original afterwards. The buffers are reused from one save to the next (the state has the
same shapes every time): copying into touched memory runs ~10x faster than into fresh pages (page faults), and
that copy is the whole of what training waits for.

`write_state` is how every checkpoint file is written (tasks/train/loop/engine.py's `CapturingEngine` puts it under
DeepSpeed's `save_checkpoint`; tasks/train/checkpointing/async_save.py runs it in the background writer).
"""

from __future__ import annotations

import copy
import hashlib
from dataclasses import dataclass
from pathlib import Path
from typing import Any, BinaryIO, Callable, Iterator, TypeVar

import torch

from tasks.core.files import atomic_path, sha256_file

State = TypeVar("State")  # a state dict as DeepSpeed or torch hands it over: nested containers of tensors and values
Writer = Callable[[Path], dict[str, Any]]  # writes its own format to a path, returns the digest (elastic.py)


@dataclass
class PendingFile:
    """One file of a checkpoint: its path, and either the state still to write or the digest of what was."""

    path: Path
    state: object = None  # a state for torch.save, a text (str), or a `Writer` of its own format; None once written
    digest: dict[str, Any] | None = None  # {"sha256": ..., "bytes": ...} once written


class HashingFile:
    """A write-only file wrapper that feeds every byte written to sha256 (no second read of the file)."""

    def __init__(self, fh: BinaryIO):
        self.fh, self.sha, self.size = fh, hashlib.sha256(), 0

    def write(self, data: bytes | bytearray | memoryview) -> int:
        self.sha.update(data)  # releases the GIL on large buffers: training threads keep running
        n = self.fh.write(data)
        self.size += n
        return n

    def flush(self) -> None:
        self.fh.flush()


def write_state(path: Path, state: object, zipfile: bool = True) -> dict[str, Any]:
    """`torch.save(state)` to `path` atomically (temp file, fsync, rename: a killed writer leaves no file under
    the final name); returns the written bytes' sha256 and size. Saving to a file object (not a path) keeps the
    bytes independent of the temp file's random name (zip records are named after a path's stem)."""
    with atomic_path(path) as tmp, open(tmp, "wb") as fh:
        out = HashingFile(fh)
        torch.save(state, out, _use_new_zipfile_serialization=zipfile)
        out.flush()
    return {"sha256": out.sha.hexdigest(), "bytes": out.size}


def iter_tensors(obj: object) -> Iterator[torch.Tensor]:
    """Every tensor inside nested dicts, lists and tuples (what checkpoint state dicts are made of)."""
    if isinstance(obj, torch.Tensor):
        yield obj
    elif isinstance(obj, dict):
        for v in obj.values():
            yield from iter_tensors(v)
    elif isinstance(obj, (list, tuple)):
        for v in obj:
            yield from iter_tensors(v)


def as_bytes(storage: torch.UntypedStorage) -> torch.Tensor:
    return torch.empty(0, dtype=torch.uint8, device=storage.device).set_(storage)


class HostBuffers:
    """Host storages that snapshots are copied into, kept per file name and reused while the sizes match."""

    def __init__(self) -> None:
        self.by_name: dict[str, list[torch.UntypedStorage]] = {}
        # Source storage -> (it, its copy), over every snapshot of one save (`begin` ... `end`): a tensor that two
        # files of one save hold (the layout-free copy's fp32 weights and Adam moments are DeepSpeed's own
        # without a ZeRO master) is copied once and both files read that copy. The source is held so that its
        # address (the key) cannot be reused by a new storage before the save ends. None outside a save: each
        # snapshot then copies all it holds.
        self.this_save: dict[int, tuple[torch.UntypedStorage, torch.UntypedStorage]] | None = None

    def nbytes(self) -> int:
        return sum(s.nbytes() for kept in self.by_name.values() for s in kept)

    def clear(self) -> None:
        self.by_name.clear()
        self.this_save = None

    def begin(self) -> None:
        """A save begins: its snapshots share copies of the same storage (copies made for earlier saves hold
        older values: never shared)."""
        self.this_save = {}

    def end(self) -> None:
        """The save's snapshots are taken: let go of their sources; later snapshots share nothing with them."""
        self.this_save = None

    def _buffer(self, kept: list[torch.UntypedStorage], i: int, src: torch.UntypedStorage) -> torch.UntypedStorage:
        if i < len(kept) and kept[i].nbytes() == src.nbytes():
            return kept[i]
        buf = torch.UntypedStorage(src.nbytes())
        if src.device.type == "cuda":
            buf = buf.pin_memory()  # device-to-host copies run at full speed only into pinned pages
        return buf

    def snapshot(self, name: str, state: State) -> State:
        """A copy of `state` whose tensors live in this object's host buffers (plain containers and values are
        deep-copied: the scheduler's and config's lists may change later too)."""
        kept = self.by_name.get(name, [])
        used: list[torch.UntypedStorage] = []
        copies: dict[int, torch.UntypedStorage] = {}
        memo: dict[int, Any] = {}
        for t in iter_tensors(state):
            if id(t) in memo or type(t) is not torch.Tensor or t.__dict__:
                continue  # a subclass or a tensor with attributes: deepcopy below copies it (not pooled)
            src = t.untyped_storage()
            key = src._cdata  # the StorageImpl: the identity torch.save itself dedups storages by
            shared = self.this_save or {}
            if key not in copies and key in shared:
                copies[key] = shared[key][1]  # copied for another file of this save: share that copy
            if key not in copies:
                buf = self._buffer(kept, len(used), src)
                as_bytes(buf).copy_(as_bytes(src))  # a tensor copy: torch's parallel kernel, not one memcpy
                copies[key] = buf
                if self.this_save is not None:
                    self.this_save[key] = (src, buf)
                used.append(buf)
            view = torch.empty(0, dtype=t.dtype).set_(copies[key], t.storage_offset(), t.size(), t.stride())
            memo[id(t)] = view.requires_grad_(t.requires_grad)
        self.by_name[name] = used
        return copy.deepcopy(state, memo)


def digest_file(path: Path) -> dict[str, Any]:
    return {"sha256": sha256_file(path), "bytes": path.stat().st_size}
