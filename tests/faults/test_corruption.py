"""Corrupted upstream artifacts: a flipped or truncated Parquet shard of clean, token shard of mix or checkpoint
file. The consumer checks the folder against its manifest before any work and fails naming the file; a
corrupt checkpoint is skipped for the previous valid one; a full `dvc repro` restores the data.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from tasks.core.integrity import IntegrityError, verify_upstream
from tests.faults.test_kills import (Row, assert_row, base_projects, dvc, lock_entry, pretrain_reference,
                                     stage_cli, timed, tree_digest, workspace)


def damage(path: Path, mode: str) -> str:
    """Flip one byte in the middle of `path`, or cut it to half its size; returns a description."""
    data = bytearray(path.read_bytes())
    if mode == "flip":
        data[len(data) // 2] ^= 0xFF
        path.write_bytes(bytes(data))
        return f"flipped byte {len(data) // 2} of {len(data)}"
    path.write_bytes(bytes(data[: len(data) // 2]))
    return f"truncated {len(data)} -> {len(data) // 2} bytes"


EXPECTED = {"flip": "does not match its sha256", "truncate": "its manifest says"}


def corrupt_upstream(tmp_root: Path, rel: str, mode: str, consumer: str) -> Row:
    """Damage `rel` (an output of an upstream stage) and run `consumer` by hand: it must refuse, naming `rel`,
    before it touches its own outputs or checkpoints."""
    proj = workspace(tmp_root, f"corrupt-{consumer}-{mode}", which="mixed")
    how = damage(proj / rel, mode)
    before = tree_digest(proj / "data" / consumer) if (proj / "data" / consumer).exists() else {}
    proc, took = timed(stage_cli, proj, consumer)
    err = proc.stderr
    row = Row(f"{mode} bytes", f"{rel} (read by {consumer})", recover_s=None)
    row.checks = {
        "consumer failed": proc.returncode == 1,
        "message names the file": any(line.strip().startswith(rel) and EXPECTED[mode] in line
                                      for line in err.splitlines()),
        "message says how to restore": "dvc repro" in err,
        "no traceback": "Traceback" not in err,
        "consumer outputs untouched": (tree_digest(proj / "data" / consumer) if (proj / "data" / consumer).exists()
                                       else {}) == before,
        "no training started": not (proj / "checkpoints").exists(),
    }
    row.outcome = f"refused in {took:.1f} s, file named" if row.ok else "FAILED"
    row.lost = "none (nothing ran)"
    row.details = {"damage": how, "stderr": err[-2000:]}
    return row


def corrupt_then_repro(tmp_root: Path) -> Row:
    """Truncate a clean shard; `dvc repro --single-item mix` fails naming it; a full `dvc repro mix` finds
    clean's outs changed and restores them byte for byte (from DVC's run cache, or by re-running clean)."""
    base = base_projects(tmp_root)
    proj = workspace(tmp_root, "corrupt-repro", which="mixed")
    rel = "data/clean/shards/notes-00000.parquet"
    damage(proj / rel, "truncate")
    single = dvc(proj, "repro", "--single-item", "mix", check=False)
    full, row_s = timed(dvc, proj, "repro", "mix", check=False)
    out = single.stdout + single.stderr
    row = Row("truncate", f"{rel} (dvc repro --single-item mix)", recover_s=row_s)
    row.checks = {
        "single-item repro failed": single.returncode != 0,
        "DVC's output names the file": f"{rel} has " in out and "its manifest says" in out,
        "full repro succeeded": full.returncode == 0,
        "DVC restored clean (run cache or re-run)": "Stage 'clean' is cached - skipping run, checking out outputs"
        in full.stdout or "Running stage 'clean'" in full.stdout,
        "clean restored byte-identical": tree_digest(proj / "data/clean") == tree_digest(base.mixed / "data/clean"),
        "mix identical to the reference": lock_entry(proj, "mix") == lock_entry(base.mixed, "mix"),
    }
    row.outcome = "refused; `dvc repro` restored it" if row.ok else "FAILED"
    row.lost = "none"
    row.details = {"single": out[-2000:], "full": (full.stdout + full.stderr)[-2000:]}
    return row


def corrupt_checkpoint(tmp_root: Path, mode: str) -> Row:
    """Damage the newest checkpoint's model states of a finished pretrain and force a re-run: it skips that tag
    with a warning, resumes from the previous one, and ends with the same metrics."""
    ref = pretrain_reference(tmp_root)
    proj = workspace(tmp_root, f"corrupt-ckpt-{mode}", which="mixed")
    shutil.copytree(ref / "checkpoints", proj / "checkpoints")
    victim = proj / "checkpoints/pretrain/step000004/mp_rank_00_model_states.pt"
    how = damage(victim, mode)
    proc, took = timed(dvc, proj, "repro", "pretrain", check=False)
    log = proc.stdout + proc.stderr
    why = "does not match its checksum"
    row = Row(f"{mode} bytes", "newest checkpoint's model states (pretrain resume)", recover_s=took)
    row.checks = {
        "run succeeded": proc.returncode == 0,
        "corrupt tag skipped, file named": f"checkpoint step000004 skipped: mp_rank_00_model_states.pt {why}" in log,
        "resumed from the previous tag": "resumed from step000002 at step 2" in log,
        "data/pretrain byte-identical": proc.returncode == 0
        and tree_digest(proj / "data/pretrain") == tree_digest(ref / "data/pretrain"),
    }
    row.outcome = "fell back to step 2; outputs byte-identical" if row.ok else "FAILED"
    row.lost = "2 steps (recomputed)"
    row.details = {"damage": how, "log": log[-2500:]}
    return row


# ------------------------------------------------------------------------------------------ tests

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
