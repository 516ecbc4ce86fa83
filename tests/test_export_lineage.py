"""Export's model card reads other stages' records, metrics and params: every one must be a DVC dep or param of
export (tasks/core/graph.py `lineage`, `quotes_params`), or a rerun that changes only them leaves the card stale —
as it did when a re-lock re-ran evaluate alone and the card kept naming evaluate's old manifest."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import yaml

from specs.export import ExportSpec
from tasks.core import graph
from tasks.eval import export_card
from tests.conftest import REPO
from tests.test_graph import placeholder_project

TEMPLATE = "{% for m in messages %}<|{{ m['role'] }}|>{{ m['content'] }}{% endfor %}"


class Recorded(dict):
    """params.yaml as a dict that notes each key path read: a value (`leaf`) or a whole section by `[]`."""

    def __init__(self, data: dict[str, Any], reads: list[tuple[str, ...]], path: tuple[str, ...] = ()):
        super().__init__(data)
        self.reads, self.path = reads, path

    def _wrap(self, key: str, value: Any, whole: bool) -> Any:
        where = (*self.path, key)
        if isinstance(value, dict):
            if whole:
                self.reads.append(where)
            return Recorded(value, self.reads, where)
        self.reads.append(where)
        return value

    def get(self, key, default=None):
        return self._wrap(key, super().get(key, default), whole=False)

    def __getitem__(self, key):
        return self._wrap(key, super().__getitem__(key), whole=True)


def _project_with_every_record(root: Path) -> None:
    for s in graph.STAGES:
        (root / s.out_dir).mkdir(parents=True, exist_ok=True)
        (root / s.record).write_text(json.dumps({"stage": s.name, "decision": "approve", "mode": "auto"}))
        (root / s.metrics_file).parent.mkdir(exist_ok=True)
        (root / s.metrics_file).write_text(json.dumps({"ok": True, "docs": 3}))
    for name in ("report.json", "scores.json"):
        for stage in ("sft", "benchmark", "prefer"):
            (root / "data" / stage / name).write_text("{}")


def _covered(path: str, deps: list[str]) -> bool:
    return any(path == d or path.startswith(f"{d}/") for d in deps)


@pytest.mark.parametrize("init", [None, {"kind": "hf", "path": "ckpt/base"}])
def test_every_file_and_param_the_card_reads_is_a_dvc_dep_of_export(tmp_path, monkeypatch, init):
    _project_with_every_record(tmp_path)
    files: list[Path] = []
    read_text, sha = Path.read_text, export_card.sha256_file
    monkeypatch.setattr(Path, "read_text", lambda self, *a, **k: (files.append(self), read_text(self, *a, **k))[1])
    monkeypatch.setattr(export_card, "sha256_file", lambda p: (files.append(Path(p)), sha(p))[1])
    params = yaml.safe_load((REPO / "params.yaml").read_text())
    if init:
        params["model"]["init"] = init
    reads: list[tuple[str, ...]] = []

    export = graph.stage("export")
    lineage = export_card.lineage_rows(tmp_path, export.lineage)
    export_card.build_card(ExportSpec(), Recorded(params, reads), lineage, TEMPLATE, tmp_path,
                           tmp_path / "data" / "sft")

    entry = graph.dvc_stage_entry(export)
    read = sorted({p.relative_to(tmp_path).as_posix() for p in files if p.is_relative_to(tmp_path)})
    assert "data/evaluate/manifest.json" in read and "metrics/pretrain.json" in read  # it did read the lineage
    assert [p for p in read if not _covered(p, entry["deps"])] == []
    keys = [tuple(k.split(".")) for k in entry["params"]]
    assert ("ingest", "sources") in reads and ("model",) in reads
    assert [r for r in reads if not any(r[:len(k)] == k for k in keys)] == []
    assert [row["stage"] for row in lineage] == list(export.lineage)


def test_a_rerun_that_changes_only_a_lineage_record_reruns_export(tmp_path, monkeypatch):
    """evaluate re-runs and only its manifest changes (new code, same samples): review re-runs and so does export,
    whose card lists that manifest's sha256; sft, which the gate's unchanged verdict would decide, does not."""
    root = placeholder_project(tmp_path, monkeypatch)
    from dvc.repo import Repo

    evaluate = graph.stage("evaluate")
    with Repo(str(root)) as repo:
        assert repo.status() == {}
        (root / evaluate.record).write_text('{"stage": "evaluate", "code": "edited"}')
        repo.commit("evaluate", force=True)
        assert sorted(repo.status()) == ["export", "review"]
