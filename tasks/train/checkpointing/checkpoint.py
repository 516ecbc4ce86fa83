"""Checkpoint folder management around DeepSpeed's own save/load: manifests, `latest`, rotation, resume choice.

Layout (`<root>/checkpoints/pretrain/`, outside the DVC out, which DVC deletes before a rerun; declared a
`persist: true` out):

    step000050/                 DeepSpeed's files for this tag (model/optimizer states per rank)
        rng-rank00000.pt        torch RNG state of each rank
        metrics.jsonl           the run's metric rows up to this step (so a resumed run's metrics.jsonl is whole)
        stability.json          the stability guard's state; schedule.json: the LR schedule segments
        elastic/                the layout-free copy of the training state (elastic.py)
        forgeline.json          manifest: step, sha256 + size of every other file of the tag, the resolved spec,
                                the identity of the run (written last, atomically, once every rank's files are
                                written: each rank hashes its own files as it writes them)
    latest                      the newest complete tag (DeepSpeed's convention), written after the manifest
    ds_config.json              the DeepSpeed config of the run
    stability.json              the guard's state written at a rollback (a resume keeps its rollback count)

A tag counts only when its manifest exists and every file matches it; a newest tag that fails (killed mid-save,
flipped bytes, missing file) is skipped with a warning and the next older valid one is used. At resume the
re-hashing is split between the ranks (`Ranks`, `hash_share`): each reads its share of the bytes.
"""

from __future__ import annotations

import json
import logging
import re
import shutil
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

from tasks.core.files import list_files, sha256_file, write_json_atomic, write_text_atomic
from tasks.train.checkpointing.resume_rules import layout_problems

SCHEDULE_FILE = "schedule.json"  # per checkpoint: the LR schedule segments it was trained under
METRICS_FILE = "metrics.jsonl"   # per checkpoint: the run's metric rows up to its step
GUARD_FILE = "stability.json"    # per checkpoint, and beside the tags after a rollback: the guard's state
log = logging.getLogger("forgeline.pretrain")
MANIFEST = "forgeline.json"
LATEST = "latest"
TAG_RE = re.compile(r"^step(\d{6,})$")
VERIFY_THREADS = 8  # files one process hashes at once when a tag is verified (sha256 releases the GIL)

# Fields of the run identity that a checkpoint must share with the run resuming from it: they change tensor
# shapes, the numbers trained in, or what the steps so far mean (data, order). The layout (parallel.dp / tp /
# pp / zero_stage) and how the global batch is cut (train.micro_batch_size, grad_accum) may change: the
# layout-free state resumes any layout as long as the global batch stays the same (tasks/train/checkpointing/elastic.py).
IDENTITY_FIELDS = (
    "model", "train.precision", "train.adapter", "seq_len", "vocab_size", "seed", "data", "init",
)


def tag_name(step: int) -> str:
    return f"step{step:06d}"


def tag_step(name: str) -> int | None:
    m = TAG_RE.match(name)
    return int(m.group(1)) if m else None


def identity_problems(stored: dict[str, Any], current: dict[str, Any]) -> list[str]:
    """Each identity field whose value differs, as 'field: checkpoint has X, this run has Y' (nested dicts
    are compared key by key so the message names e.g. model.d_model)."""
    problems: list[str] = []

    def compare(prefix: str, a: object, b: object) -> None:
        if isinstance(a, dict) and isinstance(b, dict):
            for k in sorted(set(a) | set(b)):
                compare(f"{prefix}.{k}", a.get(k), b.get(k))
        elif a != b:
            problems.append(f"{prefix}: checkpoint has {json.dumps(a)}, this run has {json.dumps(b)}")

    for field in IDENTITY_FIELDS:
        compare(field, _get(stored, field), _get(current, field))
    return problems


def _get(data: dict[str, Any], dotted: str) -> object:
    node: object = data
    for part in dotted.split("."):
        node = node.get(part) if isinstance(node, dict) else None
    return node


@dataclass
class Ranks:
    """The processes that verify a checkpoint together (one process by default). The trainer passes its
    ranks with the default group's object collectives, so a resume re-hashes a multi-terabyte checkpoint at the
    read bandwidth of every node instead of rank 0's alone."""

    rank: int = 0
    world: int = 1
    threads: int = VERIFY_THREADS                                # files hashed at once by this rank
    broadcast: Callable[[Any], Any] = lambda obj: obj            # rank 0's object, on every rank
    gather: Callable[[Any], list[Any]] = lambda obj: [obj]       # every rank's object, in rank order


def hash_share(files: list[tuple[str, dict[str, Any]]], rank: int, world: int) -> list[tuple[str, dict[str, Any]]]:
    """The files rank `rank` of `world` re-hashes: largest first, each to the rank with the fewest bytes so far
    (ties to the lowest rank) — every rank computes the same split from the manifest alone."""
    load = [0] * world
    mine = []
    for rel, want in sorted(files, key=lambda item: (-int(item[1]["bytes"]), item[0])):
        owner = min(range(world), key=lambda r: (load[r], r))
        load[owner] += int(want["bytes"])
        if owner == rank:
            mine.append((rel, want))
    return sorted(mine)


class CheckpointStore:
    def __init__(self, folder: Path):
        self.folder = Path(folder)

    def tags(self) -> list[tuple[int, str]]:
        """(step, tag) of every tag folder, newest first."""
        if not self.folder.is_dir():
            return []
        found = [(tag_step(p.name), p.name) for p in self.folder.iterdir() if p.is_dir()]
        return sorted(((s, n) for s, n in found if s is not None), reverse=True)

    def prepare(self, tag: str) -> None:
        """Before saving `tag`: remove any earlier (stale or partial) folder of that name."""
        if (self.folder / tag).exists():
            shutil.rmtree(self.folder / tag)

    def write_manifest(self, tag: str, step: int, identity: dict[str, Any], spec: dict[str, Any],
                       digests: dict[str, dict[str, Any]] | None = None) -> None:
        """The tag's manifest over every file of its folder: `digests` (relative path -> sha256 and bytes) are
        what the ranks computed as they wrote their files (each rank hashes its own, in parallel); any other
        file (the small ones rank 0 writes, or a configured DeepSpeed writer's) is hashed here."""
        folder = self.folder / tag
        digests = digests or {}
        on_disk = {p.relative_to(folder).as_posix(): p for p in list_files(folder) if p.name != MANIFEST}
        missing = sorted(set(digests) - set(on_disk))
        if missing:
            raise RuntimeError(f"checkpoint {tag}: reported file(s) {', '.join(missing)} are not on disk")
        files = {}
        for rel, path in on_disk.items():
            files[rel] = digests.get(rel) or {"sha256": sha256_file(path), "bytes": path.stat().st_size}
            if files[rel]["bytes"] != path.stat().st_size:
                raise RuntimeError(f"checkpoint {tag}: {rel} has {path.stat().st_size} bytes on disk, its writer "
                                   f"wrote {files[rel]['bytes']}")
        write_json_atomic(folder / MANIFEST, {"format": "forgeline-checkpoint-v1", "tag": tag, "step": step,
                                              "identity": identity, "spec": spec, "files": files})

    def publish(self, tag: str) -> None:
        write_text_atomic(self.folder / LATEST, tag)

    def verify(self, tag: str, ranks: Ranks | None = None) -> tuple[dict[str, Any] | None, str]:
        """(manifest, '') when the tag is complete and intact, else (None, why not). Rank 0 reads the manifest and
        checks every file is there at its size; then every file is re-hashed, each by one rank of `ranks` (all by
        this process when None), a few threads per rank (sha256 releases the GIL). The first problem in path
        order is reported. A collective when `ranks` spans several processes: every rank must call it."""
        ranks = ranks or Ranks()
        manifest, why = ranks.broadcast(self._precheck(tag) if ranks.rank == 0 else None)
        if manifest is None:
            return None, why
        mine = hash_share(sorted(manifest.get("files", {}).items()), ranks.rank, ranks.world)
        with ThreadPoolExecutor(max_workers=max(1, min(ranks.threads, len(mine)))) as pool:
            digests = list(pool.map(sha256_file, [self.folder / tag / rel for rel, _ in mine]))
        bad = [rel for (rel, want), digest in zip(mine, digests) if digest != want["sha256"]]
        everyone = [rel for part in ranks.gather(bad[:1]) for rel in part]
        if everyone:
            return None, f"{min(everyone)} does not match its checksum"
        return manifest, ""

    def _precheck(self, tag: str) -> tuple[dict[str, Any] | None, str]:
        """The manifest, when it reads and every file it names is there at its size (no hashing)."""
        folder = self.folder / tag
        try:
            manifest = json.loads((folder / MANIFEST).read_text())
        except FileNotFoundError:
            return None, "no manifest (the save did not finish)"
        except (OSError, ValueError) as exc:
            return None, f"unreadable manifest ({exc})"
        for rel, want in sorted(manifest.get("files", {}).items()):
            path = folder / rel
            if not path.is_file():
                return None, f"{rel} is missing"
            if path.stat().st_size != want["bytes"]:
                return None, f"{rel} does not match its checksum"
        return manifest, ""

    def find_resumable(self, ranks: Ranks | None = None) -> tuple[str | None, dict[str, Any] | None, list[str]]:
        """The newest verified tag, its manifest, and a warning per newer tag that was skipped (a collective
        over `ranks`, which share the hashing: see `verify`). Rank 0 lists the tags, so every rank walks the
        same ones even where a shared filesystem shows them late."""
        ranks = ranks or Ranks()
        warnings = []
        for _step, tag in ranks.broadcast(self.tags() if ranks.rank == 0 else None):
            manifest, why = self.verify(tag, ranks)
            if manifest is not None:
                return tag, manifest, warnings
            warnings.append(f"checkpoint {tag} skipped: {why}")
        return None, None, warnings

    def prune(self, keep: int, protect: str | None = None) -> list[str]:
        """Delete all but the newest `keep` verified-at-save tags (by step); folders of other names stay."""
        removed = []
        for _step, tag in self.tags()[keep:]:
            if tag != protect:
                shutil.rmtree(self.folder / tag, ignore_errors=True)
                removed.append(tag)
        return removed

    def drop_newer_than(self, step: int) -> list[str]:
        """Tags beyond the resume point (skipped as corrupt): removed so rotation never keeps them."""
        removed = []
        for s, tag in self.tags():
            if s > step:
                shutil.rmtree(self.folder / tag, ignore_errors=True)
                removed.append(tag)
        return removed


def choose_resume(store: CheckpointStore, identity: dict[str, Any], steps: int, stage: str,
                  found: tuple[str | None, dict[str, Any] | None, list[str]] | None = None
                  ) -> tuple[str | None, int, list[dict[str, Any]], str | None]:
    """(tag, step, metric rows, error): the newest intact checkpoint this run may resume from; tag None to start
    fresh; `error` set to refuse (another model, precision, data, seed or global batch, another layout without
    the layout-free state, or a checkpoint beyond `steps`). `found`: `store.find_resumable()`'s answer when the
    caller's ranks already verified together (searched here otherwise)."""
    tag, manifest, warnings = found if found is not None else store.find_resumable()
    for w in warnings:
        log.warning("%s", w)
    if tag is None or manifest is None:
        return None, 0, [], None
    problems = identity_problems(manifest["identity"], identity) + layout_problems(
        manifest["identity"], identity, store.folder / tag, stage, manifest.get("spec"))
    if problems:
        return None, 0, [], (f"{stage}: refusing to resume from {store.folder / tag}: the run differs in "
                             + "; ".join(problems)
                             + f". Delete {store.folder} to start over, or restore the previous settings.")
    step = int(manifest["step"])
    if step > steps:
        return None, 0, [], (f"{stage}: checkpoint {tag} is at step {step}, beyond {stage}.steps = {steps}; "
                             f"delete {store.folder} to start over or raise {stage}.steps")
    removed = store.drop_newer_than(step)
    if removed:
        log.warning("removed unusable newer checkpoint(s): %s", ", ".join(removed))
    mfile = store.folder / tag / METRICS_FILE
    rows = [json.loads(line) for line in mfile.read_text().splitlines() if line.strip()] if mfile.exists() else []
    return tag, step, rows, None


def schedule_segments(store: CheckpointStore, tag: str | None, start: int, steps: int) -> list[tuple[int, int]]:
    """The LR schedules this run follows (`dsconfig.lr_at`): the checkpoint's, plus a new segment from the resume
    step when `train.steps` changed since — so already-taken steps keep their rates and the decay continues
    from the current rate instead of jumping to a recomputed cosine."""
    saved = store.folder / tag / SCHEDULE_FILE if tag else None
    segments = [tuple(s) for s in json.loads(saved.read_text())] if saved and saved.exists() else [(0, steps)]
    if segments[-1][1] != steps:
        segments.append((start, steps))
    return [(int(a), int(b)) for a, b in segments]
