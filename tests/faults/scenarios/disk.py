"""A full disk (injected ENOSPC, a real tiny tmpfs) and an unwritable output folder (tests/faults/test_disk.py)."""

from __future__ import annotations

import functools
import os
import shutil
import stat
import subprocess
import sys
from pathlib import Path

from tests.faults.scenarios.common import (Row, base_projects, child_env, in_process_executor,
                                           sh, stage_cli, timed, tree_digest, workspace)


@functools.cache
def can_unshare_mount() -> bool:
    """Whether this machine lets us mount a tmpfs in a private user + mount namespace."""
    if not shutil.which("unshare"):
        return False
    probe = subprocess.run(["unshare", "-rm", "sh", "-c", "mount -t tmpfs -o size=64k tmpfs /mnt 2>/dev/null "
                            "|| mount -t tmpfs -o size=64k tmpfs /tmp"], capture_output=True)
    return probe.returncode == 0


def disk_full_by_fault(tmp_root: Path) -> Row:
    """ENOSPC at the first output shard of clean (after every work shard finished); then a plain re-run."""
    base = base_projects(tmp_root)
    proj = workspace(tmp_root, "disk-fault")
    in_process_executor(proj)  # the outputs come after every work shard: one process makes them all
    failed = stage_cli(proj, "clean", env=child_env(FORGELINE_FAULT="files.atomic_write=1:ENOSPC",
                                                    FORGELINE_FAULT_PATH="/data/clean/shards/"))
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
