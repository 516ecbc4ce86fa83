"""One graph: dvc.yaml is generated from the registry and the code's imports, and the flow's order comes from DVC
reading dvc.yaml."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
import yaml

from tasks.core import graph
from tests.conftest import REPO, make_project


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
        # The runner imports the stage's module by name (importlib), so no import names it: it must be a root.
        assert f"tasks/{s.module_name}.py" in s.code_deps(), s.name


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


# A small project: each file says why it is (or is not) in stage alpha's closure.
SYNTHETIC = {
    "probe.py": """
        import json, os, sys
        from pathlib import Path

        def dump():  # the project files this process loaded, for the test to compare (not project code itself)
            root = Path.cwd().resolve()
            files = {Path(m.__file__).resolve() for m in list(sys.modules.values()) if getattr(m, "__file__", None)}
            rel = sorted(f.relative_to(root).as_posix() for f in files
                         if f.is_relative_to(root) and f.name != "probe.py")
            with open(os.environ["PROBE_OUT"], "a") as out:
                out.write(json.dumps(rel) + "\\n")
        """,
    "tasks/__init__.py": "",
    "tasks/__main__.py": """
        from tasks import heavy                    # the command line's other subcommands: no stage runs them

        def cmd_other(argv):
            return heavy.go()
        """,
    "tasks/core/run.py": """
        import importlib, sys
        from tasks.core import registry            # module level: runs for every stage

        def _spec(name):
            from specs import base                 # reached from the stage handler
            return importlib.import_module(f"specs.{name}")  # by name, like the real runner: a root

        def run(name):
            _spec(name)
            return importlib.import_module(f"tasks.{name}").run()

        if __name__ == "__main__":
            import probe
            run(sys.argv[1])
            probe.dump()
        """,
    "tasks/heavy.py": "def go(): return 0",
    "tasks/core/__init__.py": "",
    "tasks/core/registry.py": "import json  # a library: not a dep",
    "tasks/alpha.py": """
        from . import lib                          # relative import of a package

        def run():
            from .lib.helper import twice          # lazy and relative
            import tasks.lib.launch
            tasks.lib.launch.start()
            return twice(1)
        """,
    "tasks/lib/__init__.py": "",
    "tasks/lib/helper.py": """
        def twice(x):
            import flows.util                      # lazy, into flows/
            return 2 * x
        """,
    "tasks/lib/unused.py": "import tasks.heavy",
    "tasks/lib/launch.py": """
        import subprocess, sys
        WORKER = "tasks.lib.worker"                # started as a program: its closure runs too

        def start():
            subprocess.run([sys.executable, "-m", WORKER], check=True)
        """,
    "tasks/lib/worker.py": """
        from tasks.lib import deep

        if __name__ == "__main__":
            import probe
            probe.dump()
        """,
    "tasks/lib/deep.py": "",
    "specs/__init__.py": "",
    "specs/base.py": "",
    "specs/alpha.py": "from .base import *",
    "specs/other.py": "",
    "flows/__init__.py": "",
    "flows/util.py": "",
}


def test_code_deps_are_the_import_closure_of_what_the_stage_runs(tmp_path):
    for rel, text in SYNTHETIC.items():
        (tmp_path / rel).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / rel).write_text(textwrap.dedent(text))
    expected = sorted(set(SYNTHETIC) - {"probe.py", "tasks/heavy.py", "tasks/__main__.py", "tasks/lib/unused.py",
                                        "specs/other.py"})
    assert graph.StageDef("alpha").code_deps(tmp_path) == expected
    # Independently: what Python loads when the stage runs, in its process and in the worker it starts.
    out = tmp_path / "loaded.jsonl"
    subprocess.run([sys.executable, "-m", "tasks.core.run", "alpha"], cwd=tmp_path, check=True,
                   env={**os.environ, "PROBE_OUT": str(out), "PYTHONPATH": str(tmp_path)})
    loaded = {f for line in out.read_text().splitlines() for f in json.loads(line)}
    assert len(out.read_text().splitlines()) == 2  # the stage's process and the worker's
    assert sorted(loaded) == expected
    # An edit that adds an import changes the closure at once (the parse cache follows the file).
    with (tmp_path / "tasks/lib/deep.py").open("a") as f:
        f.write("import specs.other\n")
    assert "specs/other.py" in graph.StageDef("alpha").code_deps(tmp_path)


def test_check_names_the_stage_and_the_file_when_a_dep_is_removed_or_added(tmp_path):
    data = graph.dvc_yaml_data()
    export, ingest = data["stages"]["export"], data["stages"]["ingest"]
    removed = "tasks/train/hf/hf_export.py"
    assert removed in export["deps"]
    export["deps"].remove(removed)
    ingest["deps"].append("tasks/pretrain.py")
    (tmp_path / "dvc.yaml").write_text(yaml.safe_dump(data, sort_keys=False))
    shutil.copy(REPO / "params.yaml", tmp_path / "params.yaml")
    proc = subprocess.run([sys.executable, "-m", "tasks", "--root", str(tmp_path), "check"], cwd=REPO,
                          capture_output=True, text=True)
    assert proc.returncode != 0
    assert f"dvc.yaml: stage 'export' does not depend on {removed}, which its import closure holds" in proc.stderr
    assert "dvc.yaml: stage 'ingest' depends on tasks/pretrain.py, which its import closure does not hold" \
        in proc.stderr
    assert "regenerate it with `python -m tasks graph --write`" in proc.stderr
    assert "stage 'mix'" not in proc.stderr


def _downstream(name: str) -> set[str]:
    """The stages that read `name`'s out, directly or through others (from the registry, not DVC)."""
    below = {s.name for s in graph.STAGES if name in s.upstream}
    return below.union(*(_downstream(b) for b in below))


def _write_outputs(root: Path, s: graph.StageDef, text: str) -> None:
    """A placeholder of what stage `s` writes: a file in each out and, for a gate, its verdict."""
    for out in (s.out_dir, *s.persist_outs):
        (root / out).mkdir(parents=True, exist_ok=True)
        (root / out / "out.txt").write_text(text)
    (root / s.record).write_text(text)  # a gate's verdict, else its manifest (lineage deps read it)


def _placeholder_outputs(root: Path) -> None:
    """Every stage's placeholder outputs and metrics, to be recorded in dvc.lock as if every stage had run."""
    for s in graph.STAGES:
        _write_outputs(root, s, s.name)
        (root / s.metrics_file).parent.mkdir(exist_ok=True)
        (root / s.metrics_file).write_text("{}")


def placeholder_project(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A project whose dvc.yaml is the graph generated from this code (whether the committed one is current is
    another test's), every stage's placeholder outputs committed to dvc.lock as if every stage had run."""
    from dvc.repo import Repo

    root = make_project(tmp_path / "proj")
    monkeypatch.chdir(root)  # DVC's API resolves a stage's paths from the working directory
    (root / "dvc.yaml").write_text(graph.dvc_yaml_text())
    _placeholder_outputs(root)
    with Repo(str(root)) as repo:
        repo.commit(None, force=True)
    return root


def _stale_waves(root: Path) -> list[list[str]]:
    """The stages `dvc status` calls stale, wave by wave: each stale stage is treated as re-run (a new output,
    committed to dvc.lock without running the stage), which is what makes the next wave stale."""
    from dvc.repo import Repo

    waves = []
    while True:
        with Repo(str(root)) as repo:
            stale = sorted(repo.status())
            for name in stale:
                _write_outputs(root, graph.stage(name), f"{name}, re-run")  # a rerun that changed its outputs
                repo.commit(name, force=True)
        if not stale:
            return waves
        waves.append(stale)
        assert len(waves) <= len(graph.STAGES), waves


def test_editing_a_module_one_stage_imports_makes_only_it_and_its_downstream_stale(tmp_path, monkeypatch):
    deps = {s.name: set(s.code_deps()) for s in graph.STAGES}
    # A library file exactly one stage imports; of those, the stage with the fewest stages below it (but some).
    picks = sorted((len(_downstream(s.name)), s.name, f) for s in graph.STAGES
                   for f in sorted(deps[s.name] - set().union(*(deps[o] for o in deps if o != s.name)))
                   if f != f"tasks/{s.module_name}.py" and _downstream(s.name))
    assert picks, "no library file is imported by one stage only"
    _, name, edited = picks[0]
    root = placeholder_project(tmp_path, monkeypatch)
    assert _stale_waves(root) == []
    with (root / edited).open("a") as f:
        f.write("# an edit\n")
    waves = _stale_waves(root)
    assert waves[0] == [name], (edited, waves)
    assert set().union(*waves) == {name} | _downstream(name), (edited, waves)


def test_a_gate_that_reruns_to_the_same_verdict_leaves_the_stages_after_it_up_to_date(tmp_path, monkeypatch):
    """The stages after a gate depend on its verdict file, not on its folder: validate's report and manifest change
    with knobs such as `validate.examples`, which must not re-run clean, mix, pretrain and all that follows. A
    changed verdict still re-runs them."""
    gates = [s for s in graph.STAGES if s.verdict]
    assert [s.name for s in gates] == ["validate", "review", "review_sft", "review_prefer"]
    root = placeholder_project(tmp_path, monkeypatch)
    from dvc.repo import Repo

    validate = graph.stage("validate")
    with Repo(str(root)) as repo:
        (root / validate.out_dir / "out.txt").write_text("validate, re-run: another report, the same verdict")
        repo.commit("validate", force=True)
        assert repo.status() == {}
        (root / validate.handed_on).write_text("validate, re-run: another verdict")
        repo.commit("validate", force=True)
        assert sorted(repo.status()) == ["clean", "export", "multimodal"]  # export's card lists the verdict


@pytest.mark.slow
def test_editing_the_review_gate_leaves_ingest_to_pretrain_up_to_date(tmp_path, monkeypatch):
    """Issue #36: the review machinery is code of the review stages only (it was every stage's dep, so editing
    the gate re-ran ingest, clean, mix and pretrain). Through DVC: only the stages that run the gate and what
    follows them become stale."""
    runs_gate = {s.name for s in graph.STAGES if "tasks/eval/review_gate.py" in s.code_deps()}
    assert runs_gate == {s.name for s in graph.STAGES if s.module_name == "review"}  # the gates, nothing else
    upstream_of_review = {"ingest", "validate", "instruct", "clean", "mix", "pretrain"}
    root = placeholder_project(tmp_path, monkeypatch)
    with (root / "tasks/eval/review_gate.py").open("a") as f:
        f.write("# an edit\n")
    waves = _stale_waves(root)
    assert set(waves[0]) == runs_gate, waves
    assert not upstream_of_review & set().union(*waves), waves


def test_a_stage_depends_only_on_the_specs_of_the_sections_it_reads():
    """specs/params.py validates every section (a bad key stops any stage), but a stage's deps hold only the spec
    modules of the sections it reads (tasks/core/closure.py: hubs)."""
    deps = {s.name: set(s.code_deps()) for s in graph.STAGES}
    assert "specs/export.py" not in deps["ingest"] and "specs/review.py" not in deps["ingest"]
    assert "specs/ingest.py" in deps["ingest"] and "specs/params.py" in deps["ingest"]
    assert "specs/export.py" in deps["export"]
    assert graph.over_broad() == []
    assert all("tasks/review.py" not in deps[n] for n in ("ingest", "validate", "clean", "mix", "pretrain"))
