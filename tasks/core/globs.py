"""Globs that are safe on untrusted folders, and the folder a glob is rooted at.

`glob_once` is `glob.glob(..., recursive=True)` walking each real folder once (a link cycle made glob's `**` list
2^40 paths); `glob_base` is a pattern's folder before its first wildcard. Ingest lists a source's files with them
(`tasks.data.formats.paths`) and the DVC graph names a source's folder as a stage's dep (`tasks.core.datadeps`).
"""

from __future__ import annotations

import glob
import os
from pathlib import Path


def glob_base(pattern: str | Path) -> Path:
    """The folder part of `pattern` before its first wildcard (`my_data/**/*.jsonl` -> `my_data`; `*.jsonl` -> `.`;
    a pattern without one is itself)."""
    parts = Path(pattern).parts
    fixed = next((i for i, part in enumerate(parts) if glob.has_magic(part)), len(parts))
    return Path(*parts[:fixed]) if fixed else Path(".")


def glob_once(pattern: str) -> list[Path]:
    """`glob.glob(pattern, recursive=True)`, except that a `**` walks each real folder once.

    glob's `**` follows links to folders without noticing a cycle: in a folder holding `a -> .` and `b -> .`,
    `corpus/**/*.jsonl` listed `corpus/a/b/a/.../x.jsonl` down to the kernel's 40-link limit, 2^40 paths (it
    never finished). What is below a `**` is matched inside each folder it reaches, so a folder already walked
    (same device and inode) adds no file: the folders are walked in sorted order and each real one once.
    """
    parts = Path(pattern).parts
    if "**" not in parts:
        return [Path(m) for m in glob.glob(pattern)]
    cut = parts.index("**")
    head, rest = os.path.join(*parts[:cut]), parts[cut + 1:]
    found: list[Path] = []
    for top in sorted(glob.glob(head)) if glob.has_magic(head) else [head]:
        for folder in _folders_once(top):
            if rest:  # the rest (another `**` included) is matched inside this folder
                found += glob_once(os.path.join(glob.escape(folder), *rest))
            else:     # a trailing `**`: every file (and dangling link) in the folder; folders come in their turn
                found += [Path(folder, e) for e in _entries(folder)
                          if not e.startswith(".") and not os.path.isdir(os.path.join(folder, e))]
    return found


def _folders_once(top: str) -> list[str]:
    """`top` and the folders below it that glob's `**` would visit (links to folders followed, hidden names
    skipped), depth first in sorted order, each real folder (device, inode) once."""
    seen: set[tuple[int, int]] = set()
    stack, out = [top], []
    while stack:
        folder = stack.pop()
        try:
            st = os.stat(folder)
        except OSError:  # gone, a dangling or looping link
            continue
        if (st.st_dev, st.st_ino) in seen or not os.path.isdir(folder):
            continue
        seen.add((st.st_dev, st.st_ino))
        out.append(folder)
        subs = [os.path.join(folder, e) for e in _entries(folder) if not e.startswith(".")]
        stack += reversed([s for s in subs if os.path.isdir(s)])
    return out


def _entries(folder: str) -> list[str]:
    try:
        return sorted(os.listdir(folder))
    except OSError:
        return []
