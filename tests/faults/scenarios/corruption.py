"""Corrupted upstream artifacts (a flipped or truncated shard or checkpoint file) and how the consumer and
`dvc repro` deal with them (tests/faults/test_corruption.py)."""

from __future__ import annotations

import shutil
from pathlib import Path

from tests.faults.scenarios.common import (Row, base_projects, dvc, lock_entry, pretrain_reference, stage_cli, timed,
                                           tree_digest, workspace)


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
