"""SIGKILL mid-stage, re-run by hand under `dvc repro` and retried by the Prefect flow: the run completes and
its outputs equal an uninterrupted run's (byte-identical data stages; for training, metrics, report and model
byte-identical too); no temp file left by the killed writer is ever taken as an output.

The scenarios are in tests/faults/scenarios/kills.py (benchmarks/faults.py runs them too); what the fault
suites share (the tiny project with planted input, `Row`) is in tests/faults/scenarios/common.py.
"""

from __future__ import annotations

import pytest

from tests.faults.scenarios.common import assert_row
from tests.faults.scenarios.kills import (flow_retry_after_kill, kill_clean_between_shards, kill_clean_mid_write,
                                          kill_pretrain_mid_checkpoint, kill_pretrain_mid_step)


def test_clean_killed_between_shards_resumes_byte_identical(fault_root):
    assert_row(kill_clean_between_shards(fault_root))


@pytest.mark.slow
def test_clean_killed_mid_write_leaves_a_temp_file_never_taken_as_output(fault_root):
    assert_row(kill_clean_mid_write(fault_root))


@pytest.mark.slow
def test_pretrain_killed_mid_checkpoint_write_resumes_from_the_previous_tag(fault_root):
    assert_row(kill_pretrain_mid_checkpoint(fault_root))


@pytest.mark.slow
def test_pretrain_killed_mid_step_resumes_byte_identical(fault_root):
    assert_row(kill_pretrain_mid_step(fault_root))


@pytest.mark.slow
@pytest.mark.prefect
def test_flow_task_retry_finishes_a_killed_stage(fault_root, prefect_server, monkeypatch):
    assert_row(flow_retry_after_kill(fault_root, monkeypatch))
