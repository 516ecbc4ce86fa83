"""A Python that sees only what the lent GPU box has, built from this machine's installed packages: to find, on
a CPU, every import a GPU part would fail on (the last GPU run lost its pretrain part to `import wandb`).

    python benchmarks/gpu/box_env.py /tmp/box      # prints the path of /tmp/box/bin/python

The box (../shared/FACTS.md, "The lent GPU box"): torch, numpy, transformers, safetensors, tokenizers, pyarrow,
accelerate, peft and triton, plus what benchmarks/gpu/prepare_wheels.sh carries (read from that script). Each of
those distributions and everything it requires (its install requirements, no extras) is linked into the
site-packages of a fresh virtual environment of this interpreter — nothing else (no wandb, dvc, prefect, great
expectations, pandas, ...). A package the box has but this machine lacks (nvidia-ml-py, triton on a CPU build)
is left out: code must treat those as optional anyway. Children started with `sys.executable` stay inside.
"""

from __future__ import annotations

import importlib.metadata as md
import re
import subprocess
import sys
import sysconfig
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
BOX = ("torch", "numpy", "transformers", "safetensors", "tokenizers", "pyarrow", "accelerate", "peft", "triton")


def carried(script: Path = ROOT / "benchmarks" / "gpu" / "prepare_wheels.sh") -> list[str]:
    """The distributions prepare_wheels.sh puts in the wheels folder: its PURE and BINARY lists, deepspeed and
    nvidia-ml-py."""
    text = script.read_text()
    names = ["deepspeed", "nvidia-ml-py"]
    for array in ("PURE", "BINARY"):
        m = re.search(rf"^{array}=\(([^)]*)\)", text, re.M)
        if m is None:
            raise ValueError(f"{script}: no {array}=(...) list")
        names += m.group(1).split()
    return names


def closure(roots: list[str]) -> tuple[list[md.Distribution], list[str]]:
    """The installed distributions of `roots` and of everything they require (no extras); and the names not
    installed here."""
    from packaging.requirements import Requirement

    seen: set[str] = set()
    found, missing, todo = [], [], list(roots)
    while todo:
        name = todo.pop()
        norm = re.sub(r"[-_.]+", "-", name).lower()
        if norm in seen:
            continue
        seen.add(norm)
        try:
            dist = md.distribution(name)
        except md.PackageNotFoundError:
            missing.append(name)
            continue
        found.append(dist)
        for text in dist.requires or []:
            req = Requirement(text)
            if req.marker is None or req.marker.evaluate({"extra": ""}):
                todo.append(req.name)
    return found, sorted(missing)


def top_level(dist: md.Distribution) -> set[str]:
    """What the distribution put into site-packages: packages, modules, its .dist-info (read by version checks)."""
    return {f.parts[0] for f in dist.files or [] if f.parts[0] not in ("..", "bin", "__pycache__")
            and not f.parts[0].endswith(".pth")}


def box_python(dest: Path) -> Path:
    """A virtual environment at `dest` holding links to the box's packages only; its python."""
    dest = Path(dest)
    python = dest / "bin" / "python"
    if not python.exists():
        subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(dest)], check=True)
    site = Path(subprocess.run([str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                               check=True, capture_output=True, text=True).stdout.strip())
    dists, _ = closure([*BOX, *carried()])
    here = Path(sysconfig.get_paths()["purelib"])
    for dist in dists:
        for name in top_level(dist):
            src = Path(str(dist.locate_file(name)))
            link = site / name
            if src.exists() and not link.exists() and src.parent.resolve() == here.resolve():
                link.symlink_to(src)
    return python


if __name__ == "__main__":
    print(box_python(Path(sys.argv[1])))
