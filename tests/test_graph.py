"""One graph: dvc.yaml is generated from the registry, and the flow's order comes from DVC reading dvc.yaml."""

from __future__ import annotations

import yaml

from tasks.core import graph
from tests.conftest import REPO


def test_committed_dvc_yaml_matches_registry():
    assert graph.check_dvc_yaml(REPO) == []


def test_drift_is_detected(tmp_path):
    data = graph.dvc_yaml_data()
    data["stages"]["validate"]["params"] = ["validate", "run"]
    del data["stages"]["ingest"]
    (tmp_path / "dvc.yaml").write_text(yaml.safe_dump(data))
    problems = graph.check_dvc_yaml(tmp_path)
    assert "dvc.yaml: stage 'ingest' is missing" in problems
    assert "dvc.yaml: stage 'validate' differs from the registry in: params" in problems


def test_every_stage_has_a_module_with_run():
    import importlib

    for s in graph.STAGES:
        module = importlib.import_module(f"tasks.{s.module_name}")
        assert callable(module.run), s.name
        assert s.code_deps()[0] == "tasks/__main__.py"


def test_flow_order_is_what_dvc_reads_from_dvc_yaml(project):
    # Write the stages in reverse and add a stage the registry knows nothing about: DVC's graph must decide.
    data = yaml.safe_load((project / "dvc.yaml").read_text())
    stages = dict(reversed(list(data["stages"].items())))
    stages["report"] = {"cmd": "echo report > report.txt", "deps": ["data/validate"], "outs": ["report.txt"]}
    (project / "dvc.yaml").write_text(yaml.safe_dump({"stages": stages}, sort_keys=False))
    assert list(stages)[0] == graph.STAGE_NAMES[-1] and list(stages)[-1] == "report"
    assert graph.dvc_stage_order(project) == [*graph.STAGE_NAMES, "report"]
    assert graph.dvc_stage_order(project, until="validate") == ["ingest", "validate"]
    assert graph.dvc_stage_order(project, until="ingest") == ["ingest"]
