"""Which files a source names (files, directories, globs), how they are shown, and which are dataset metadata.

A Hugging Face dataset folder holds metadata next to its data: the dataset card (`README.md` with YAML front
matter), `dataset_info.json`/`dataset_infos.json`, and `save_to_disk`'s `state.json`/`dataset_dict.json`. Those
describe the records; read as records they would add one bogus markdown document (the card) and quarantine the
JSON files, so they are left out of the file list (and logged).
"""

from __future__ import annotations

import glob
import logging
from pathlib import Path

from tasks.data.records import valid_unicode

log = logging.getLogger("forgeline.ingest")
HF_METADATA = frozenset({"dataset_info.json", "dataset_infos.json", "state.json", "dataset_dict.json",
                         ".gitattributes"})
CARD_KEYS = ("dataset_info:", "configs:", "license:", "task_categories:", "pretty_name:")


def expand_paths(patterns: list[str], root: Path, source: str) -> list[Path]:
    """Files named by `patterns` (files, directories read recursively, globs), sorted and de-duplicated."""
    found: set[Path] = set()
    for pattern in patterns:
        base = Path(pattern) if Path(pattern).is_absolute() else root / pattern
        if glob.has_magic(pattern):
            matches = [Path(m) for m in glob.glob(str(base), recursive=True)]
        elif base.is_dir():
            matches = [p for p in base.rglob("*")]
        else:
            matches = [base] if base.exists() else []
        # A dangling (or looping) symlink is kept so it is quarantined as unreadable, not skipped silently.
        files = [m for m in matches if m.is_file() or (m.is_symlink() and not m.exists())]
        if not files:
            raise FileNotFoundError(f"ingest source '{source}': path {pattern!r} matched no files under {root}")
        found.update(m.resolve() if m.exists() else m.absolute() for m in files)
    metadata = {p for p in found if is_dataset_metadata(p)}
    if metadata:
        log.info("ingest source '%s': %d Hugging Face dataset metadata file(s) are not records: %s", source,
                 len(metadata), ", ".join(sorted(p.name for p in metadata)))
    return sorted(found - metadata)


def is_dataset_metadata(path: Path) -> bool:
    """True for the metadata files of a Hugging Face dataset folder (hub layout or `save_to_disk`)."""
    folder = path.parent
    if path.name in HF_METADATA:
        return path.name != "state.json" or (folder / "dataset_info.json").is_file()
    return path.name == "README.md" and is_dataset_card(path)


def is_dataset_card(path: Path) -> bool:
    """A hub dataset card: README.md whose YAML front matter carries dataset-card keys."""
    try:
        with path.open("rb") as fh:
            head = fh.read(64 * 1024).decode("utf-8", "replace")
    except OSError:
        return False
    if not head.startswith("---"):
        return False
    front = head[3:].split("\n---", 1)[0]
    return any(line.startswith(CARD_KEYS) for line in front.splitlines())


def display_path(path: Path, root: Path) -> str:
    """`path` relative to `root` where possible, as valid Unicode (it becomes part of ids and origins)."""
    dangling = path.is_symlink() and not path.exists()  # name the link, not the target it fails to reach
    try:
        shown = (path.absolute() if dangling else path.resolve()).relative_to(root.resolve()).as_posix()
    except ValueError:
        shown = path.as_posix()
    # A file name that is not UTF-8 arrives with its bytes as lone surrogates, which Parquet cannot store:
    # show those bytes as `\xNN` so the file's records keep a stable, writable id instead of crashing ingest.
    return valid_unicode(shown)
