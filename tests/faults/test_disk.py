"""Disk full and unwritable output: a clear error naming the file or folder, and nothing half-written left
behind as if complete (no manifest, no file under its final name, no temp file); a re-run after the space
comes back resumes and ends byte-identical.

Three ways to fill the disk: the `files.atomic_write=N:ENOSPC` fault (everywhere), a real 'tiny tmpfs'
mounted over data/ in a private mount namespace (`unshare -rm`, where the kernel allows it), and in-process
writers failing the ways libraries report a full disk.
"""

from __future__ import annotations

import errno
import functools
import os
import shutil
import stat
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from tasks.core import files
from tasks.core.files import StorageError, atomic_path
from tasks.core.integrity import stray_temp_files
from tests.faults.test_kills import (Row, assert_row, base_projects, child_env, ingest_shard_count, sh,
                                     stage_cli, timed, tree_digest, workspace)


@functools.cache
def can_unshare_mount() -> bool:
    """Whether this machine lets us mount a tmpfs in a private user + mount namespace."""
    if not shutil.which("unshare"):
        return False
    probe = subprocess.run(["unshare", "-rm", "sh", "-c", "mount -t tmpfs -o size=64k tmpfs /mnt 2>/dev/null "
                            "|| mount -t tmpfs -o size=64k tmpfs /tmp"], capture_output=True)
    return probe.returncode == 0


needs_mount = pytest.mark.skipif(not can_unshare_mount(), reason="no unprivileged tmpfs mount (unshare -rm)")


def disk_full_by_fault(tmp_root: Path) -> Row:
    """ENOSPC at the first output shard of clean (after every work shard finished); then a plain re-run."""
    base = base_projects(tmp_root)
    proj = workspace(tmp_root, "disk-fault")
    nth = 2 * ingest_shard_count(proj) + 1
    failed = stage_cli(proj, "clean", env=child_env(FORGELINE_FAULT=f"files.atomic_write={nth}:ENOSPC"))
    out = proj / "data/clean"
    left = sorted(p.relative_to(out).as_posix() for p in out.rglob("*") if p.is_file())
    rerun, took = timed(stage_cli, proj, "clean")
    row = Row("ENOSPC (injected)", "clean, first output shard", recover_s=took)
    row.checks = {
        "stage failed": failed.returncode == 1,
        "error names the file and the cause": f"cannot write {out}/shards/docs-00000.parquet: No space left on device"
        in failed.stderr and "Nothing was published under that name" in failed.stderr,
        "nothing left in the output folder": left == [],
        "no manifest": "manifest.json" not in left,
        "re-run succeeded": rerun.returncode == 0,
        "re-run reused the finished work shards": "were already finished" in rerun.stderr,
        "outputs byte-identical": tree_digest(out) == tree_digest(base.mixed / "data/clean"),
    }
    row.outcome = "clear error, nothing published; re-run identical" if row.ok else "FAILED"
    row.lost = "0 records (work shards reused)"
    row.details = {"stderr": failed.stderr[-2500:], "left": left}
    return row


def tmpfs_blocks(*folders: Path) -> int:
    """Bytes the files under `folders` take on a tmpfs (whole 4 KiB pages)."""
    return sum(-(-p.stat().st_size // 4096) * 4096 for f in folders for p in f.rglob("*") if p.is_file())


# Run inside the namespace (the tmpfs vanishes with it): every file left under a final name must parse.
WHOLE_CHECK = ("import json, pathlib, pyarrow.parquet as pq\n"
               "for p in sorted(pathlib.Path(\"data/clean\").rglob(\"*\")):\n"
               "    if p.is_file() and \".tmp-\" not in p.name:\n"
               "        try: pq.read_table(p) if p.suffix == \".parquet\" else json.loads(p.read_text())\n"
               "        except Exception as e: print(\"BROKEN\", p, e)\n"
               "print(\"WHOLE-CHECKED\")")


def disk_full_tmpfs(tmp_root: Path) -> Row:
    """data/ on a tmpfs with room for the inputs and 8 KiB more: clean runs out of space for real."""
    proj = workspace(tmp_root, "disk-tmpfs")
    shutil.move(proj / "data", proj / "data.saved")
    (proj / "data").mkdir()
    size = tmpfs_blocks(proj / "data.saved") + 8192
    script = (f"mount -t tmpfs -o size={size} tmpfs data && cp -a data.saved/. data/ && "
              f"{sys.executable} -m tasks clean; echo \"rc=$?\"; "
              "find data/clean -type f 2>/dev/null | sort | sed 's/^/LEFT /'; "
              f"{sys.executable} -c '{WHOLE_CHECK}'")
    proc, took = timed(sh, ["unshare", "-rm", "sh", "-c", script], proj, child_env(), False)
    left = [line[5:] for line in proc.stdout.splitlines() if line.startswith("LEFT ")]
    row = Row("ENOSPC (real tmpfs)", "clean outputs on a full file system", recover_s=None)
    row.checks = {
        "stage failed": "rc=1" in proc.stdout,
        "error names a file and the cause": "cannot write " in proc.stderr and "No space left on device"
        in proc.stderr and "/data/clean/" in proc.stderr,
        "no manifest": "data/clean/manifest.json" not in left,
        "no temp files": not [p for p in left if ".tmp-" in p],
        "files left under final names are whole": "WHOLE-CHECKED" in proc.stdout and "BROKEN" not in proc.stdout,
    }
    row.outcome = f"clear error after {took:.1f} s; no manifest, no temp" if row.ok else "FAILED"
    row.lost = "stage not published (re-run when space is back)"
    row.details = {"stdout": proc.stdout[-1500:], "stderr": proc.stderr[-2500:], "size": size}
    return row


def read_only_output(tmp_root: Path) -> Row:
    """data/clean read-only (a read-only bind mount when we are root, who ignores modes; else chmod 555)."""
    proj = workspace(tmp_root, "read-only")
    out = proj / "data/clean"
    out.mkdir(parents=True)
    cmd = [sys.executable, "-m", "tasks", "--root", str(proj), "clean"]
    if os.geteuid() == 0:
        script = "mount --bind data/clean data/clean && mount -o remount,bind,ro data/clean && exec \"$@\""
        proc = sh(["unshare", "-rm", "sh", "-c", script, "sh", *cmd], proj, child_env(), False)
    else:
        out.chmod(stat.S_IRUSR | stat.S_IXUSR)
        try:
            proc = sh(cmd, proj, child_env(), False)
        finally:
            out.chmod(0o755)
    row = Row("read-only output", "data/clean (clean by hand)")
    row.checks = {
        "stage failed": proc.returncode == 1,
        "error names the folder": f"output folder {out} is not writable" in proc.stderr,
        "failed before any work": not (proj / "work/clean").exists() and not any(out.iterdir()),
    }
    row.outcome = "refused before any work" if row.ok else "FAILED"
    row.lost = "none (nothing ran)"
    row.details = {"stderr": proc.stderr[-2000:]}
    return row


# ------------------------------------------------------------------------------------------ tests

def test_injected_enospc_names_the_file_and_publishes_nothing(fault_root):
    assert_row(disk_full_by_fault(fault_root))


@needs_mount
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
