"""The compiled MinHash loops cache outside the installed package: a read-only install works, and the user's
NUMBA_CACHE_DIR is honoured (issue #31)."""

from __future__ import annotations

import os
import shutil
import stat
import subprocess
import sys
from pathlib import Path

import pytest
REPO = Path(__file__).resolve().parents[1]
RUN = """
from specs.clean import DedupSpec
from tasks.data.dedup import hashloops, minhash
print(hashloops.kernel_cache_dir())
print(minhash.signatures(["one two three four five six", "seven eight nine ten eleven"], DedupSpec())[0][:2])
"""


def _read_only_copy(tmp: Path) -> Path:
    install = tmp / "site"
    for package in ("specs", "tasks"):
        shutil.copytree(REPO / package, install / package, ignore=shutil.ignore_patterns("__pycache__"))
    for path in [install, *install.rglob("*")]:
        path.chmod(path.stat().st_mode & ~(stat.S_IWUSR | stat.S_IWGRP | stat.S_IWOTH))
    return install


def _run(install: Path, env: dict[str, str]) -> list[str]:
    base = {k: v for k, v in os.environ.items() if not k.startswith(("NUMBA_", "XDG_"))}
    done = subprocess.run([sys.executable, "-c", RUN], cwd=install, capture_output=True, text=True, timeout=600,
                          env={**base, "PYTHONPATH": str(install), "PYTHONDONTWRITEBYTECODE": "1", **env})
    assert done.returncode == 0, done.stderr[-3000:]
    return done.stdout.splitlines()


@pytest.mark.slow
def test_a_read_only_install_caches_in_the_users_folder(tmp_path: Path) -> None:
    install = _read_only_copy(tmp_path)
    try:
        home = tmp_path / "home"
        home.mkdir()
        out = _run(install, {"HOME": str(home)})
        assert out[0] == str(home / ".cache" / "forgeline" / "numba")
        assert list((home / ".cache" / "forgeline" / "numba").rglob("*.nbi")), "nothing cached"
        assert not [p for p in install.rglob("*") if p.suffix in (".nbi", ".nbc")], "cached inside the package"
        # a second process loads what the first compiled: the same result
        assert _run(install, {"HOME": str(home)}) == out
        # the user's NUMBA_CACHE_DIR wins
        mine = tmp_path / "mine"
        assert _run(install, {"HOME": str(home), "NUMBA_CACHE_DIR": str(mine)})[0] == str(mine)
        assert list(mine.rglob("*.nbi"))
    finally:
        for path in [install, *install.rglob("*")]:
            path.chmod(path.stat().st_mode | stat.S_IWUSR)
