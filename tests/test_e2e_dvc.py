"""The whole pipeline through `dvc repro` in a fresh git + DVC repo: up to date afterwards, identical reruns,
a change to the last stage's params re-runs that stage only, and one to a gate's knobs the gate only."""

from __future__ import annotations

import json
import sys

import yaml

from tasks.core.graph import STAGE_NAMES
from tests.conftest import run


def dvc(project, *args, check=True):
    return run([sys.executable, "-m", "dvc", *args], project, check=check)


def test_repro_status_rerun_and_param_change(reproduced):
    # The first `dvc repro` of a fresh project is the session's shared one (tests/conftest.py: test_flow reads it
    # too); this test is the only one that changes that project's work tree, so it goes on from it.
    project = reproduced.project
    assert "Running stage 'ingest'" in reproduced.stdout and "Running stage 'validate'" in reproduced.stdout
    status = dvc(project, "status")
    assert "Data and pipelines are up to date" in status.stdout
    lock = (project / "dvc.lock").read_text()
    metrics = json.loads((project / "metrics/ingest.json").read_text())
    assert metrics["read"] == metrics["kept"] + metrics["quarantined"]
    assert metrics["by_source"]["notes"]["by_reason"] == {"invalid_json": 1}

    again = dvc(project, "repro")
    assert "didn't change, skipping" in again.stdout and "Running stage" not in again.stdout

    # Really re-execute the data stages (mix and everything upstream of it): their outputs must come back to the
    # byte. Training's rerun is test_flow's (a second whole run, in a clone, writes this same dvc.lock) and
    # test_pretrain's; forcing all 17 stages here again cost ~7 min on a 2-core AVX2 machine.
    forced = dvc(project, "repro", "--force", "mix")
    assert "Running stage 'clean'" in forced.stdout and "Running stage 'pretrain'" not in forced.stdout
    assert (project / "dvc.lock").read_text() == lock, "outputs must be byte-identical on rerun"

    # A param only the last stage reads (the model card's text): that stage re-runs and nothing else. (A param of
    # an early stage re-runs everything its outputs feed, which is DVC doing its job, and ~200 s here.)
    params = yaml.safe_load((project / "params.yaml").read_text())
    params["export"]["description"] += " Edited."
    (project / "params.yaml").write_text(yaml.safe_dump(params, sort_keys=False))
    changed = dvc(project, "repro")
    assert [line for line in changed.stdout.splitlines() if "Running stage" in line] == ["Running stage 'export':"]
    skipped = {s for s in STAGE_NAMES if f"Stage '{s}' didn't change, skipping" in changed.stdout}
    assert skipped == set(STAGE_NAMES) - {"export"}
    assert "Edited." in (project / "data" / "export" / "hf" / "README.md").read_text()
    assert "Data and pipelines are up to date" in dvc(project, "status").stdout

    # Knobs of the gates that leave their verdicts as they were: the gates re-run, nothing after them does (the
    # stages after a gate depend on its verdict file; its manifest records these params).
    card = (project / "data" / "export" / "hf" / "README.md").read_bytes()
    params["validate"]["examples"] += 1
    params["review"]["prefect_timeout_s"] = 3_600
    (project / "params.yaml").write_text(yaml.safe_dump(params, sort_keys=False))
    gated = dvc(project, "repro")
    ran = [line for line in gated.stdout.splitlines() if "Running stage" in line]
    assert ran == ["Running stage 'validate':", "Running stage 'review':"], ran
    assert (project / "data" / "export" / "hf" / "README.md").read_bytes() == card  # its lineage: the verdicts
    clean = json.loads((project / "data" / "clean" / "manifest.json").read_text())
    assert [r["path"] for r in clean["inputs"] if r["path"].startswith("data/validate/")] == \
        ["data/validate/verdict.json"]
    assert "Data and pipelines are up to date" in dvc(project, "status").stdout


def test_failed_gate_stops_repro_with_readable_summary(project):
    params = yaml.safe_load((project / "params.yaml").read_text())
    params["validate"]["expectations"].append({"expect": "in_set", "column": "source", "values": ["docs"]})
    (project / "params.yaml").write_text(yaml.safe_dump(params, sort_keys=False))
    proc = dvc(project, "repro", check=False)
    assert proc.returncode != 0
    out = proc.stdout + proc.stderr
    assert "in_set" in out and "literature" in out  # which expectation, which source
    assert "Traceback" not in out
    assert "validate" in dvc(project, "status").stdout  # not recorded as done
