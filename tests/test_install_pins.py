"""scripts/constraints.txt: the versions of the libraries every stage's manifest records, pinned for a fresh install.

A fresh clone's `dvc repro` must write the committed dvc.lock again; each stage's manifest.json records the versions
of `runner.TRACKED_PACKAGES`, so a newer release of one (pandas 3.1.2 for 3.1.1 on 2026-12-07) changed every manifest
and the lock's hashes of them. The pins, their agreement with pyproject's ranges and the installed environment
(the README's commands install through scripts/setup.sh) are checked here.
"""

from __future__ import annotations

import tomllib
from importlib import metadata
from pathlib import Path

from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

from tasks.core.runner import TRACKED_PACKAGES

ROOT = Path(__file__).resolve().parents[1]
CONSTRAINTS = ROOT / "scripts" / "constraints.txt"


def pins() -> dict[str, Requirement]:
    reqs = [Requirement(line) for line in CONSTRAINTS.read_text().splitlines() if line and not line.startswith("#")]
    return {canonicalize_name(r.name): r for r in reqs}


def test_every_tracked_library_but_torch_is_pinned_exactly():
    tracked = {canonicalize_name(n) for n in TRACKED_PACKAGES} - {"torch"}   # setup.sh pins torch (FORGELINE_TORCH)
    got = pins()
    assert set(got) == tracked
    for name, req in got.items():
        (spec,) = req.specifier
        assert spec.operator == "==" and "*" not in spec.version, req


def test_pins_lie_in_pyproject_ranges():
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    ranges = {canonicalize_name(r.name): r.specifier for r in map(Requirement, project["dependencies"])}
    for name, req in pins().items():
        (spec,) = req.specifier
        if name in ranges:
            assert ranges[name].contains(spec.version, prereleases=True), (name, spec.version, ranges[name])


def test_setup_installs_the_project_under_the_pins_and_this_environment_has_them():
    setup = (ROOT / "scripts" / "setup.sh").read_text()
    assert '-c scripts/constraints.txt -e ".${extras}"' in setup
    for name, req in pins().items():
        (spec,) = req.specifier
        assert metadata.version(name) == spec.version, (name, metadata.version(name))
