"""The fault suites share one session folder: the base projects are built once and reused by every scenario."""

from __future__ import annotations

from pathlib import Path

import pytest


@pytest.fixture(scope="session")
def fault_root(tmp_path_factory) -> Path:
    """One folder for the whole session: the base projects are built once and shared by the fault suites."""
    root = tmp_path_factory.getbasetemp() / "faults"
    root.mkdir(exist_ok=True)
    return root
