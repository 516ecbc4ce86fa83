"""The files a source names are DVC deps of the stages that read them (tasks/core/datadeps.py): a file added to a
source's folder makes `dvc status` report the stage changed and `dvc repro` read it; a dvc.yaml that lacks them
is refused by `check` and by the stage under `dvc repro`, naming the command that fixes it."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pyarrow.parquet as pq
import pytest
import yaml

from specs import Params
from tasks.core import datadeps, graph
from tests.conftest import make_project, run, tiny_params

OUTS = graph.project_outputs()


def params_with(root: Path, **sections) -> Params:
    raw = tiny_params(root)
    for key, value in sections.items():
        raw[key] = {**raw.get(key, {}), **value}
    return Params.model_validate(raw)


def test_a_glob_is_its_folder_a_folder_or_file_itself(tmp_path):
    assert datadeps.dep_paths("my_data/**/*.jsonl", tmp_path, OUTS) == ["my_data"]
    assert datadeps.dep_paths("corpus/", tmp_path, OUTS) == ["corpus"]
    assert datadeps.dep_paths("downloads/a/../b.parquet", tmp_path, OUTS) == ["downloads/b.parquet"]
    assert datadeps.dep_paths("/mnt/crawl/2024-*/part-[0-9]*.warc.gz", tmp_path, OUTS) == ["/mnt/crawl"]


def test_a_glob_over_the_project_or_its_outputs_lists_the_files(tmp_path):
    """`*.jsonl` at the root would make the project itself (outputs included) a dep: DVC refuses a stage whose
    dep holds its own out, so the matched files are listed instead; likewise under data/."""
    (tmp_path / "a.jsonl").write_text("{}\n")
    (tmp_path / "b.jsonl").write_text("{}\n")
    (tmp_path / "data" / "x").mkdir(parents=True)
    (tmp_path / "data" / "x" / "c.jsonl").write_text("{}\n")
    assert datadeps.dep_paths("*.jsonl", tmp_path, OUTS) == ["a.jsonl", "b.jsonl"]
    assert datadeps.dep_paths("data/x/*.jsonl", tmp_path, OUTS) == ["data/x/c.jsonl"]


def test_each_stage_lists_what_its_params_name(tmp_path):
    params = params_with(
        tmp_path,
        instruct={"sources": [{"name": "mine", "kind": "files", "paths": ["chats/*.jsonl"]}]},
        prefer_data={"sources": [{"name": "uf", "kind": "files", "paths": ["downloads/uf/train-*.parquet"]}]},
        multimodal={"sources": [{"name": "pics", "kind": "files", "paths": ["pics"]}], "from_ingest": True},
        clean={"decontamination": {"benchmark_files": ["bench/own.txt"]}},
        benchmark={"files": [{"name": "arc_easy", "format": "arc", "path": "downloads/arc/test.jsonl",
                              "fewshot_path": "downloads/arc/train.jsonl"}], "include_path": ["my_tasks"]})
    deps = {s: datadeps.stage_deps(params, s, tmp_path, OUTS) for s in graph.STAGE_NAMES}
    assert deps["ingest"] == ["inputs"]
    assert deps["instruct"] == ["chats"]
    assert deps["prefer_data"] == ["downloads/uf"]
    assert deps["multimodal"] == ["pics", "inputs"]          # its own files, and ingest's (the records' media)
    assert deps["clean"] == ["bench/own.txt", "downloads/arc/test.jsonl"]   # the benchmark's .jsonl is indexed too
    assert deps["benchmark"] == ["downloads/arc/test.jsonl", "downloads/arc/train.jsonl", "my_tasks"]
    assert all(not deps[s] for s in graph.STAGE_NAMES if s not in datadeps.READERS)


def test_a_path_inside_another_is_listed_once(tmp_path):
    params = params_with(tmp_path, ingest={"sources": [
        {"name": "a", "kind": "files", "paths": ["corpus/**/*.jsonl", "corpus/extra/x.jsonl", "corpus/"]},
        {"name": "b", "kind": "files", "paths": ["other/*.txt"]}]})
    assert datadeps.stage_deps(params, "ingest", tmp_path, OUTS) == ["corpus", "other"]


def test_the_shipped_params_name_no_files_and_dvc_yaml_matches():
    assert datadeps.project_deps(graph.CODE_ROOT, OUTS) == {}
    assert graph.check_dvc_yaml(graph.CODE_ROOT) == []


def test_check_names_a_missing_data_dep_and_graph_write_adds_it(tmp_path):
    proj = make_project(tmp_path / "p")
    dvc_yaml = proj / "dvc.yaml"
    assert "inputs" in yaml.safe_load(dvc_yaml.read_text())["stages"]["ingest"]["deps"]
    assert graph.check_dvc_yaml(proj) == []
    dvc_yaml.write_text(graph.dvc_yaml_text(graph.CODE_ROOT))      # the shipped params' file: no `inputs`
    problems = graph.check_dvc_yaml(proj)
    assert ("dvc.yaml: stage 'ingest' does not depend on inputs, which params.yaml's sources (files the stage "
            "reads) holds") in problems
    assert run([sys.executable, "-m", "tasks", "graph", "--write"], proj).returncode == 0
    assert graph.check_dvc_yaml(proj) == []
    # params made invalid: `graph --write` said "wrote dvc.yaml" and wrote it without any data dep
    before = dvc_yaml.read_text()
    params = proj / "params.yaml"
    params.write_text(params.read_text() + "\nno_such_section: 1\n")
    out = run([sys.executable, "-m", "tasks", "graph", "--write"], proj, check=False)
    assert out.returncode == 2 and "dvc.yaml not written" in out.stderr and "no_such_section" in out.stderr
    assert dvc_yaml.read_text() == before


def _ids(proj: Path) -> set[str]:
    return {i for s in (proj / "data" / "ingest" / "shards").glob("*.parquet")
            for i in pq.read_table(s, columns=["id"]).column("id").to_pylist()}


def dvc(proj: Path, *args: str, check: bool = True):
    return run([sys.executable, "-m", "dvc", *args], proj, check=check)


def test_a_file_added_to_a_source_folder_reruns_ingest(tmp_path):
    """Before: `dvc status ingest` stayed up to date and the new document never reached the corpus."""
    proj = make_project(tmp_path / "p")
    dvc(proj, "repro", "ingest")
    assert "notes/n-late" not in _ids(proj) and "notes/n1" in _ids(proj)
    assert "up to date" in dvc(proj, "status", "ingest").stdout
    row = {"uid": "n-late", "body": "A late note about the mill by the river. " * 6}
    (proj / "inputs" / "more.jsonl").write_text(json.dumps(row) + "\n")
    status = dvc(proj, "status", "ingest").stdout
    assert "changed deps" in status and "inputs" in status, status
    dvc(proj, "repro", "ingest")
    assert "notes/n-late" in _ids(proj)


def test_a_stage_under_dvc_refuses_a_dvc_yaml_without_its_files(tmp_path):
    proj = make_project(tmp_path / "p")
    (proj / "dvc.yaml").write_text(graph.dvc_yaml_text(graph.CODE_ROOT))   # params name inputs/; this does not
    out = dvc(proj, "repro", "ingest", check=False)
    assert out.returncode != 0
    assert ("dvc.yaml: stage 'ingest' does not depend on inputs, which params.yaml's sources name" in out.stderr
            and "python -m tasks graph --write" in out.stderr), out.stderr
    assert not (proj / "data" / "ingest" / "shards").exists()
    # outside DVC nothing tracks the files: the stage runs
    assert run([sys.executable, "-m", "tasks", "ingest"], proj).returncode == 0


@pytest.mark.parametrize("pattern", ["inputs/*.jsonl", "inputs"])
def test_the_tiny_project_lists_its_folder_either_way(tmp_path, pattern):
    raw = tiny_params(tmp_path / "p")
    raw["ingest"]["sources"][2]["paths"] = [pattern]
    proj = make_project(tmp_path / "p", raw)
    assert yaml.safe_load((proj / "dvc.yaml").read_text())["stages"]["ingest"]["deps"][-1] == "inputs"
