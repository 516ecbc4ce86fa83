"""Check a stage's upstream folders against their `manifest.json` before the stage reads them.

Every stage's runner writes `manifest.json` last, listing each output file with its size and sha256. A
consumer re-hashes the folder before it starts: a file truncated, flipped, deleted or added since the producer
finished fails the consumer before any work, with a message naming the file and how to restore it. (DVC
would re-run the producer on a full `dvc repro`; this catches `dvc repro --single-item`, `python -m tasks
<stage>` by hand, the flow's single-stage steps, and storage that rots between runs.)

The records computed here double as the consumer manifest's `inputs`, so the folder is hashed once per run.
"""

from __future__ import annotations

import json
import logging
from pathlib import Path

from pydantic import ValidationError

from specs.results import FileRecord, Manifest
from tasks.core.files import file_records, is_temp

log = logging.getLogger("forgeline.integrity")
MANIFEST = "manifest.json"


class IntegrityError(ValueError):
    """An upstream folder does not match its manifest (or has none where one is required)."""

    def __init__(self, problems: list[str]):
        self.problems = problems
        super().__init__("\n  ".join(["upstream data failed its integrity check:", *problems]))


def _rel(path: Path, root: Path) -> str:
    try:
        return path.resolve().relative_to(root.resolve()).as_posix()
    except ValueError:
        return str(path)


def folder_problems(folder: Path, root: Path, records: list[FileRecord], producer: str,
                    require_manifest: bool) -> list[str]:
    """What differs between `records` (the folder as it is now) and the folder's manifest; [] when it matches.

    `producer` names the stage that wrote the folder (for the remedy in the message). Without a manifest:
    a problem when `require_manifest`, else a warning (a folder put together by hand or by a library caller).
    """
    rel_folder = _rel(folder, root)
    remedy = f"re-run stage {producer} (`dvc repro {producer}` restores it) or restore {rel_folder} from a copy"
    if not folder.is_dir():
        return [f"{rel_folder} is missing: run stage {producer} first"] if require_manifest else []
    manifest_path = folder / MANIFEST
    if not manifest_path.exists():
        if require_manifest:
            return [f"{rel_folder}/{MANIFEST} is missing: stage {producer} did not finish (killed, failed or out of "
                    f"space); {remedy}"]
        log.warning("%s has no %s: its files cannot be verified", rel_folder, MANIFEST)
        return []
    try:
        manifest = Manifest.model_validate(json.loads(manifest_path.read_text(encoding="utf-8")))
    except (OSError, ValueError, ValidationError) as exc:
        first = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
        return [f"{rel_folder}/{MANIFEST} is unreadable ({first}); {remedy}"]

    want = {r.path: r for r in manifest.outputs}
    have = {r.path: r for r in records if r.path != f"{rel_folder}/{MANIFEST}"}
    problems = []
    for path in sorted(set(want) | set(have)):
        w, h = want.get(path), have.get(path)
        if h is None:
            problems.append(f"{path} is missing (listed in {rel_folder}/{MANIFEST})")
        elif w is None:
            problems.append(f"{path} is not listed in {rel_folder}/{MANIFEST} (added after stage {producer} "
                            "finished?)")
        elif h.bytes != w.bytes:
            problems.append(f"{path} has {h.bytes:,} bytes, its manifest says {w.bytes:,} (truncated or "
                            "overwritten)")
        elif h.sha256 != w.sha256:
            problems.append(f"{path} does not match its sha256 in {rel_folder}/{MANIFEST} (bytes changed since "
                            f"stage {producer} wrote it)")
    if problems:
        problems.append(remedy)
    return problems


def verify_upstream(folders: dict[str, Path], root: Path, require_manifest: bool) -> list[FileRecord]:
    """Verify each upstream folder (producer stage -> folder) against its manifest; return their file records
    in the given order (the manifest files included, as a consumer's manifest lists its inputs).

    Raises IntegrityError naming every file that differs, before the consumer does any work.
    """
    records: list[FileRecord] = []
    problems: list[str] = []
    for producer, folder in folders.items():
        recs = file_records([folder], root)
        problems += folder_problems(folder, root, recs, producer, require_manifest)
        records += recs
    if problems:
        raise IntegrityError(problems)
    return records


def stray_temp_files(folder: Path) -> list[Path]:
    """Temp files (`.name.tmp-*`) left under `folder` by a killed or failed writer, sorted."""
    if not folder.is_dir():
        return []
    return sorted(p for p in folder.rglob("*") if p.is_file() and is_temp(p))
