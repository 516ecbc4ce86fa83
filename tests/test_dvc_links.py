"""DVC's cache links outputs instead of copying them (`.dvc/config` cache.type), and a re-run never writes into a
linked cache file: stage outputs are replaced (new files), so the cache keeps what it hashed."""

from __future__ import annotations

import configparser
import hashlib
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
LINK_ORDER = "hardlink,reflink,symlink,copy"

MAKE = '''import sys
from tasks.core.files import atomic_path, write_text_atomic
write_text_atomic("out/a.txt", "VERSION\\n")
with atomic_path("out/b.bin") as tmp:
    tmp.write_bytes(bytes(range(256)) * 64)
'''


def dvc_bin() -> str:
    found = shutil.which("dvc") or str(Path(sys.executable).with_name("dvc"))
    if not Path(found).exists():
        pytest.skip("dvc is not installed")
    return found


def test_config_links_before_copying():
    config = configparser.ConfigParser()
    config.read(REPO / ".dvc" / "config")
    assert config.get('cache', "type").strip('"') == LINK_ORDER  # hardlink first: see the README (Disk)


def cache_file(project: Path, path: Path) -> Path:
    md5 = hashlib.md5(path.read_bytes()).hexdigest()
    return project / ".dvc" / "cache" / "files" / "md5" / md5[:2] / md5[2:]


def test_repro_leaves_outputs_hardlinked_and_a_rerun_replaces_them(tmp_path):
    probe = tmp_path / "probe"
    probe.write_text("x")
    try:
        os.link(probe, tmp_path / "probe-link")
    except OSError:
        pytest.skip("this filesystem has no hardlinks")
    dvc = dvc_bin()
    project = tmp_path / "project"
    project.mkdir()
    env = {**os.environ, "PYTHONPATH": str(REPO), "DVC_NO_ANALYTICS": "1"}

    def run(*args: str) -> None:
        proc = subprocess.run([dvc, *args], cwd=project, env=env, capture_output=True, text=True)
        assert proc.returncode == 0, f"dvc {' '.join(args)}: {proc.stdout[-1500:]}{proc.stderr[-1500:]}"

    subprocess.run(["git", "init", "-q"], cwd=project, check=True)
    run("init", "-q")
    shutil.copy(REPO / ".dvc" / "config", project / ".dvc" / "config")  # the project's own setting
    (project / "make.py").write_text(MAKE.replace("VERSION", "one"))
    (project / "dvc.yaml").write_text(f"stages:\n  make:\n    cmd: {sys.executable} make.py\n    deps: [make.py]\n"
                                      "    outs: [out]\n")
    run("repro")
    first = {}
    for name in ("a.txt", "b.bin"):
        out = project / "out" / name
        cached = cache_file(project, out)
        assert cached.exists() and os.stat(out).st_ino == os.stat(cached).st_ino  # a hardlink, not a copy
        assert not os.stat(out).st_mode & 0o222  # DVC makes linked outputs read-only
        first[name] = (cached, out.read_bytes())

    (project / "make.py").write_text(MAKE.replace("VERSION", "two"))
    run("repro")
    assert (project / "out" / "a.txt").read_text() == "two\n"
    old_cache, old_bytes = first["a.txt"]
    assert old_cache.read_bytes() == old_bytes == b"one\n"  # the rewrite went to a new file, not into the cache
    assert os.stat(project / "out" / "a.txt").st_ino == os.stat(cache_file(project, project / "out" / "a.txt")).st_ino
