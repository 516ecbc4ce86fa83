"""Which files a source names (files, directories, globs), how they are shown, and which are dataset metadata.

A Hugging Face dataset folder holds metadata next to its data: the dataset card (`README.md` with YAML front
matter), `dataset_info.json`/`dataset_infos.json`, and `save_to_disk`'s `state.json`/`dataset_dict.json`. Those
describe the records; read as records they would add one bogus markdown document (the card) and quarantine the
JSON files, so they are left out of the file list (and logged).
"""

from __future__ import annotations

import glob
import logging
from dataclasses import dataclass
from pathlib import Path

from tasks.core.globs import glob_base, glob_once
from tasks.data.records import valid_unicode

log = logging.getLogger("forgeline.ingest")
HF_METADATA = frozenset({"dataset_info.json", "dataset_infos.json", "state.json", "dataset_dict.json",
                         ".gitattributes"})
CARD_KEYS = ("dataset_info:", "configs:", "license:", "task_categories:", "pretty_name:")


@dataclass(frozen=True)
class Listed:
    """One file of a source: its resolved path, or a link's own path (in its resolved folder), and why not read."""

    path: Path
    refused: str | None = None   # set for a link out of the source's folders or a special file: never opened
    reason: str = "link_outside"  # the quarantine reason a refusal is recorded under


def expand_paths(patterns: list[str], root: Path, source: str, symlinks: str = "inside") -> list[Listed]:
    """Files named by `patterns` (files, directories read recursively, globs), sorted and de-duplicated.

    With `symlinks="inside"`, a link found by expanding a directory or glob whose target lies outside the
    folders `link_roots` allows is listed with a refusal instead of its target, and is never opened.
    """
    found: dict[Path, Listed] = {}  # by the file actually read, so a file and a link to it are read once
    for pattern in patterns:
        base = Path(pattern) if Path(pattern).is_absolute() else root / pattern
        named = not glob.has_magic(pattern) and not base.is_dir()  # one file the user named: always read
        if glob.has_magic(pattern):
            matches = glob_once(str(base))
        elif base.is_dir():
            matches = [p for p in base.rglob("*")]
        else:
            matches = [base] if base.exists() else []
        # A dangling (or looping) symlink is kept so it is quarantined as unreadable, and a FIFO, socket or
        # device (or a link to one) as `not_a_file`, never opened (a FIFO's open waits for a writer): not skipped
        # silently.
        files = [m for m in matches if m.is_file() or not m.is_dir()]
        if not files:
            raise FileNotFoundError(f"ingest source '{source}': path {pattern!r} matched no files under {root}")
        roots = None if named or symlinks == "follow" else link_roots(base)
        for m in files:
            target, listed = _listed(m, roots)
            if m.exists() and not m.is_file() and listed.refused is None:
                listed = Listed(listed.path, f"a {_special_kind(m)}, not a regular file: not read", "not_a_file")
            if target not in found or listed.path < found[target].path:
                found[target] = listed
    chosen = sorted(found.values(), key=lambda item: item.path)
    metadata = {item for item in chosen if item.refused is None and is_dataset_metadata(item.path)}
    if metadata:
        log.info("ingest source '%s': %d Hugging Face dataset metadata file(s) are not records: %s", source,
                 len(metadata), ", ".join(sorted(item.path.name for item in metadata)))
    return [item for item in chosen if item not in metadata]


def _special_kind(path: Path) -> str:
    return "FIFO" if path.is_fifo() else "socket" if path.is_socket() else "device"


def link_roots(base: Path) -> list[Path]:
    """The folders a link found under `base` (a directory or glob) may point into.

    That is the folder named (a glob's part before its first wildcard) and, inside a Hugging Face hub cache
    (`<repo>/snapshots/<revision>/...`, files linked to `<repo>/blobs/<sha>`), the repo's cache folder.
    """
    top = glob_base(base.absolute())
    roots = [top.resolve()]
    for folder in (top, *top.parents):
        if folder.name == "snapshots" and (folder.parent / "blobs").is_dir():
            roots.append(folder.parent.resolve())
            break
    return roots


def _listed(match: Path, roots: list[Path] | None) -> tuple[Path, Listed]:
    """The file `match` reads (its key) and how it is listed.

    A link is listed under its own name (in its real folder), not its target's: a hub cache's targets are
    `blobs/<sha>`, whose missing suffix would hide the format and whose name means nothing in an origin. A
    file reached through a linked folder (a glob's `**` follows them) is held to the same roots.
    """
    link = match.parent.resolve() / match.name
    if match.is_symlink() and not match.exists():  # dangling or looping: opening it fails as unreadable
        return link, Listed(link)
    target = match.resolve()
    shown = link if match.is_symlink() else target
    if roots is None or any(target.is_relative_to(r) for r in roots):
        return target, Listed(shown)
    shown = link if match.is_symlink() else match.absolute()  # the name met in the folder, not the target
    return shown, Listed(shown, f"symbolic link to {target}, outside {', '.join(map(str, roots))}: not read "
                         "(set the source's `symlinks: follow` to read links that leave its folder)")


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


def display_path(path: Path, root: Path, follow: bool = True) -> str:
    """`path` relative to `root` where possible, as valid Unicode (it becomes part of ids and origins).

    A link that is not followed (`follow=False`) or leads nowhere is shown as the link, not as its target.
    """
    as_link = not follow or (path.is_symlink() and not path.exists())
    try:
        shown = (path.absolute() if as_link else path.resolve()).relative_to(root.resolve()).as_posix()
    except ValueError:
        shown = path.as_posix()
    # A file name that is not UTF-8 arrives with its bytes as lone surrogates, which Parquet cannot store:
    # show those bytes as `\xNN` so the file's records keep a stable, writable id instead of crashing ingest.
    return valid_unicode(shown)
