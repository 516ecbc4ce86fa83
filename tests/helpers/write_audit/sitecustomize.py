"""Write audit for tests/test_multinode.py: on PYTHONPATH with FORGELINE_AUDIT_DIR set, every Python process
(torchrun agents, their workers) logs each file it writes under FORGELINE_AUDIT_ROOT — opens for writing,
renames (every atomic write ends in one) and `torch.save` targets (its C++ writer opens files without Python's
audit events) — to `<audit dir>/<pid>.jsonl`, tagged with the process's ranks (the node: torchrun's
GROUP_RANK, the DeepSpeed launcher's CROSS_RANK). Unset, it does nothing. Only paths are recorded; nothing is read."""

from __future__ import annotations

import json
import os
import sys

_DIR = os.environ.get("FORGELINE_AUDIT_DIR")
_ROOT = os.environ.get("FORGELINE_AUDIT_ROOT", "/")
_WRITE_FLAGS = os.O_WRONLY | os.O_RDWR | os.O_CREAT | os.O_APPEND | os.O_TRUNC
_state = {"fd": None, "busy": False, "torch_patched": False}


def _emit(op: str, path: object) -> None:
    try:
        path = os.path.abspath(os.fsdecode(path))
    except TypeError:
        return  # a file descriptor or a file object: not a path
    if not path.startswith(_ROOT):
        return
    env = os.environ
    row = {"pid": os.getpid(), "op": op, "path": path, "cwd": os.getcwd(), "rank": env.get("RANK"),
           "local_rank": env.get("LOCAL_RANK"), "node": env.get("GROUP_RANK") or env.get("CROSS_RANK"),
           "world": env.get("WORLD_SIZE")}
    if _state["fd"] is None:
        busy, _state["busy"] = _state["busy"], True  # the log's own open is not audited
        try:
            _state["fd"] = os.open(os.path.join(_DIR, f"{os.getpid()}.jsonl"), os.O_WRONLY | os.O_CREAT | os.O_APPEND)
        finally:
            _state["busy"] = busy
    os.write(_state["fd"], (json.dumps(row) + "\n").encode())


def _patch_torch_save() -> None:
    torch = sys.modules["torch"]
    original = torch.save

    def save(obj, f, *args, **kwargs):
        if isinstance(f, (str, bytes, os.PathLike)):
            _emit("torch.save", f)
        return original(obj, f, *args, **kwargs)

    torch.save = save
    _state["torch_patched"] = True


def _hook(event: str, args: tuple) -> None:
    if _state["busy"] or event not in ("open", "os.rename", "import"):
        return
    _state["busy"] = True
    try:
        if event == "open":
            path, mode, flags = args
            writing = any(c in mode for c in "wax+") if isinstance(mode, str) else bool(flags & _WRITE_FLAGS)
            if writing and path is not None:
                _emit("open", path)
        elif event == "os.rename":
            _emit("rename", args[1])
        elif not _state["torch_patched"] and "torch" in sys.modules and hasattr(sys.modules["torch"], "save"):
            _patch_torch_save()  # at the first import after torch is loaded (before DeepSpeed saves anything)
    finally:
        _state["busy"] = False


if _DIR:
    sys.addaudithook(_hook)
