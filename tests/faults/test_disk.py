"""Disk full and unwritable output: a clear error naming the file or folder, and nothing half-written left
behind as if complete (no manifest, no file under its final name, no temp file); a re-run after the space
comes back resumes and ends byte-identical.

Three ways to fill the disk: the `files.atomic_write=N:ENOSPC` fault (everywhere), a real 'tiny tmpfs'
mounted over data/ in a private mount namespace (`unshare -rm`, where the kernel allows it), and in-process
writers failing the ways libraries report a full disk.
"""

from __future__ import annotations

import errno
import os

import numpy as np
import pytest

from tasks.core import files
from tasks.core.files import StorageError, atomic_path
from tasks.core.integrity import stray_temp_files
from tests.faults.scenarios.common import assert_row
from tests.faults.scenarios.disk import can_unshare_mount, disk_full_by_fault, disk_full_tmpfs, read_only_output

needs_mount = pytest.mark.skipif(not can_unshare_mount(), reason="no unprivileged tmpfs mount (unshare -rm)")


def test_injected_enospc_names_the_file_and_publishes_nothing(fault_root):
    assert_row(disk_full_by_fault(fault_root))


@needs_mount
@pytest.mark.slow
def test_real_full_tmpfs_fails_clearly_without_a_manifest(fault_root):
    assert_row(disk_full_tmpfs(fault_root))


@pytest.mark.skipif(os.geteuid() == 0 and not can_unshare_mount(), reason="root ignores modes; no mount ns")
def test_read_only_output_folder_is_refused_before_any_work(fault_root):
    assert_row(read_only_output(fault_root))


def _full_disk(monkeypatch, free: int = 0) -> None:
    class Full:
        f_bavail, f_frsize = free, 1

    monkeypatch.setattr(files.os, "statvfs", lambda _path: Full())


@pytest.mark.parametrize("writer", ["errno", "numpy", "torch"])
def test_atomic_path_reports_a_full_disk_in_any_writer_words(tmp_path, monkeypatch, writer):
    """Libraries word a full disk differently (errno 28; numpy 'N requested and M written'; torch 'unexpected
    pos'): each becomes a StorageError naming the final file; the temp file is gone, the final never existed."""
    target = tmp_path / "out" / "x.bin"
    errors = {"errno": OSError(errno.ENOSPC, "No space left on device"),
              "numpy": OSError("100000 requested and 8176 written"),
              "torch": RuntimeError("[enforce fail at inline_container.cc:672] . unexpected pos 704 vs 598")}
    if writer != "errno":
        _full_disk(monkeypatch)
    with pytest.raises(StorageError) as err:
        with atomic_path(target) as tmp:
            tmp.write_bytes(np.zeros(4).tobytes())  # the temp file has bytes in it when the writer fails
            raise errors[writer]
    assert err.value.errno == errno.ENOSPC
    assert str(err.value).startswith(f"[Errno 28] cannot write {target}: No space left on device")
    assert err.value.__cause__ is errors[writer]
    assert not target.exists() and stray_temp_files(target.parent) == []


def test_atomic_path_keeps_code_errors_as_they_are(tmp_path):
    """A bug in the writer is not blamed on the disk, and an EACCES about another file is not ours."""
    with pytest.raises(ValueError, match="bad row"):
        with atomic_path(tmp_path / "a.json"):
            raise ValueError("bad row")
    with pytest.raises(PermissionError) as err:
        with atomic_path(tmp_path / "b.json"):
            raise PermissionError(errno.EACCES, "Permission denied", "/etc/some-input")
    assert not isinstance(err.value, StorageError)
    assert sorted(p.name for p in tmp_path.iterdir()) == []


def test_check_writable_names_the_folder(tmp_path, monkeypatch):
    files.check_writable(tmp_path / "not" / "yet")  # absent folders are probed at their nearest parent
    assert not (tmp_path / "not").exists() and stray_temp_files(tmp_path) == []

    def refuse(*_a, **_k):
        raise OSError(errno.EROFS, "Read-only file system")

    monkeypatch.setattr(files.tempfile, "mkstemp", refuse)
    with pytest.raises(StorageError, match=f"output folder {tmp_path / 'x'} is not writable: Read-only file system"):
        files.check_writable(tmp_path / "x")
