"""The fault suites share one session folder: the base projects are built once and reused by every scenario."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.faults.test_kills import fault_dir


@pytest.fixture(scope="session")
def fault_root(tmp_path_factory) -> Path:
    return fault_dir(tmp_path_factory)
