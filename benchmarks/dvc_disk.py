"""Bytes on disk of the data stages' outputs plus DVC's cache, per `cache.type`, against the input text.

    python benchmarks/dvc_disk.py [--project PATH]   # PATH: a project whose data stages have run (default: here)

For each cache.type the data stages' outputs (ingest, validate, instruct, clean, mix) of PATH are copied into a
fresh git + DVC project with PATH's dvc.yaml and dvc.lock, then `dvc commit -f` of those stages stores them in
the cache exactly as `dvc repro` does after a stage runs (Output.commit: transfer to the cache, then relink the
workspace). `du` counts data/ and .dvc/cache together, so a file hardlinked into the cache counts once. Input =
the UTF-8 bytes of the ingested texts (what a raw corpus of that text weighs, before any format overhead).
"""

from __future__ import annotations

import argparse
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import pyarrow.compute as pc
import pyarrow.parquet as pq

ROOT = Path(__file__).resolve().parents[1]
STAGES = ("ingest", "validate", "instruct", "clean", "mix")
TYPES = ("copy", "hardlink,reflink,symlink,copy", "reflink,hardlink,symlink,copy")


def du(*paths: Path) -> int:
    out = subprocess.run(["du", "-s", "-B1", "-c", *map(str, paths)], check=True, capture_output=True, text=True)
    return int(out.stdout.splitlines()[-1].split()[0])


def input_bytes(project: Path) -> int:
    total = 0
    for shard in sorted((project / "data" / "ingest" / "shards").glob("*.parquet")):
        total += pc.sum(pc.binary_length(pc.cast(pq.read_table(shard, columns=["text"]).column("text"),
                                                  "binary"))).as_py() or 0
    return total


def measure(source: Path, cache_type: str, tmp: Path) -> tuple[int, int, int]:
    """(bytes of data/ alone, of .dvc/cache alone, of both together) after committing the stages."""
    proj = tmp / cache_type.replace(",", "-")
    proj.mkdir()
    dvc = str(Path(sys.executable).with_name("dvc"))
    for name in ("dvc.yaml", "dvc.lock", "params.yaml"):
        shutil.copy(source / name, proj / name)
    for folder in ("tasks", "specs", "metrics"):  # the stages' code deps and uncached metrics outs
        shutil.copytree(source / folder, proj / folder, ignore=shutil.ignore_patterns("__pycache__"))
    for stage in STAGES:
        shutil.copytree(source / "data" / stage, proj / "data" / stage)
    subprocess.run(["git", "init", "-q"], cwd=proj, check=True)
    subprocess.run([dvc, "init", "-q"], cwd=proj, check=True)
    subprocess.run([dvc, "config", "cache.type", cache_type], cwd=proj, check=True)
    done = subprocess.run([dvc, "commit", "-f", *STAGES], cwd=proj, capture_output=True, text=True)
    if done.returncode:
        raise SystemExit(f"dvc commit failed:\n{done.stdout[-2000:]}{done.stderr[-2000:]}")
    return du(proj / "data"), du(proj / ".dvc" / "cache"), du(proj / "data", proj / ".dvc" / "cache")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--project", type=Path, default=ROOT)
    args = ap.parse_args()
    text = input_bytes(args.project)
    print(f"input text: {text:,} bytes")
    print("| cache.type | data/ bytes | .dvc/cache bytes | together on disk | per GB of input text |")
    print("|---|---:|---:|---:|---:|")
    with tempfile.TemporaryDirectory(prefix="dvc-disk-") as tmp:
        for cache_type in TYPES:
            data, cache, both = measure(args.project, cache_type, Path(tmp))
            print(f"| `{cache_type}` | {data:,} | {cache:,} | {both:,} | {both / text:.2f} GB |", flush=True)


if __name__ == "__main__":
    main()
