"""Corrupted upstream artifacts: a flipped or truncated Parquet shard of clean, token shard of mix or checkpoint
file. The consumer checks the folder against its manifest before any work and fails naming the file; a
corrupt checkpoint is skipped for the previous valid one; a full `dvc repro` restores the data.
"""

from __future__ import annotations

import json
import shutil

import pytest

from tasks.core.integrity import IntegrityError, verify_upstream
from tests.faults.scenarios.common import assert_row, base_projects, tree_digest
from tests.faults.scenarios.corruption import corrupt_checkpoint, corrupt_then_repro, corrupt_upstream


@pytest.mark.parametrize("mode", ["flip", "truncate"])
def test_damaged_clean_shard_stops_mix_naming_the_file(fault_root, mode):
    assert_row(corrupt_upstream(fault_root, "data/clean/shards/docs-00000.parquet", mode, "mix"))


def test_damaged_token_shard_stops_pretrain_before_training(fault_root):
    assert_row(corrupt_upstream(fault_root, "data/mix/train-00000.bin", "flip", "pretrain"))


def test_single_item_repro_names_the_file_and_full_repro_repairs(fault_root):
    assert_row(corrupt_then_repro(fault_root))


def test_verify_upstream_names_added_missing_and_unlisted_files(fault_root, tmp_path):
    """The manifest check itself, in-process: every kind of difference is named, the remedy is given, and a
    folder without a manifest is an error only where one is required (a pipeline project)."""
    clean = tmp_path / "data/clean"
    shutil.copytree(base_projects(fault_root).mixed / "data/clean", clean)
    good = verify_upstream({"clean": clean}, tmp_path, require_manifest=True)
    assert {r.path for r in good} >= {"data/clean/manifest.json", "data/clean/dropped.parquet"}

    (clean / "shards/extra.parquet").write_bytes(b"PAR1")
    (clean / "report.json").unlink()
    (clean / ".report.json.tmp-abc").write_text("{}")  # a killed writer's temp file is not an output
    with pytest.raises(IntegrityError) as err:
        verify_upstream({"clean": clean}, tmp_path, require_manifest=True)
    assert err.value.problems[:2] == [
        "data/clean/report.json is missing (listed in data/clean/manifest.json)",
        "data/clean/shards/extra.parquet is not listed in data/clean/manifest.json (added after stage clean "
        "finished?)"]
    assert "dvc repro clean" in err.value.problems[-1] and len(err.value.problems) == 3

    (clean / "manifest.json").write_text("{not json")
    with pytest.raises(IntegrityError, match=r"data/clean/manifest.json is unreadable"):
        verify_upstream({"clean": clean}, tmp_path, require_manifest=True)
    (clean / "manifest.json").unlink()
    with pytest.raises(IntegrityError, match="stage clean did not finish"):
        verify_upstream({"clean": clean}, tmp_path, require_manifest=True)
    assert verify_upstream({"clean": clean}, tmp_path, require_manifest=False)  # library use: a warning only
    with pytest.raises(IntegrityError, match="data/ingest is missing: run stage ingest first"):
        verify_upstream({"ingest": tmp_path / "data/ingest"}, tmp_path, require_manifest=True)


def test_manifest_inputs_are_unchanged_by_the_check(fault_root):
    """The consumer's manifest lists its inputs exactly as the producer's files are (hashed once, reused)."""
    mixed = base_projects(fault_root).mixed
    inputs = {r["path"]: r["sha256"] for r in json.loads((mixed / "data/mix/manifest.json").read_text())["inputs"]}
    assert inputs == {f"data/clean/{k}": v for k, v in tree_digest(mixed / "data/clean").items()}


@pytest.mark.slow
@pytest.mark.parametrize("mode", ["flip", "truncate"])
def test_damaged_newest_checkpoint_falls_back_to_the_previous(fault_root, mode):
    assert_row(corrupt_checkpoint(fault_root, mode))
