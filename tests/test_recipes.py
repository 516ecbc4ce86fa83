"""The README's recipes run as the README writes them (tests/helpers/recipes.py reads them from README.md): each on
the params.yaml that ships, with its fragment merged in and only sizes scaled down (TINY).

Fast: the parser, that every recipe is run here, tested elsewhere or says why it is not run, the `check` example's
output and the `plan` examples. Slow (one prepared data project shared by the module: every stage mix does not feed,
run once, ~1 min): the checkpoint recipe for each importable family (with and without a chat template, LoRA
and full SFT), the Dask example, the terminal review and the two Prefect deployment recipes.
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
from dataclasses import replace
from pathlib import Path

import pytest
import yaml

from tests.helpers.recipes import (REPO, TINY, Recipe, clone, data_project, env, merge, new_project, parse,
                                   readme_recipes, recipe_params, sh, shipped_params, write_params)

RECIPES = readme_recipes()
RUN_HERE = {"check", "plan", "checkpoint", "dask", "review-terminal", "prefect-serve", "prefect-worker"}
TIMES: dict[str, float] = {}  # recipe (variant) -> seconds, printed at the end of the module


@pytest.fixture(scope="module", autouse=True)
def report_times():
    yield
    if TIMES:
        print("\nrecipe times (s):", json.dumps({k: round(v, 1) for k, v in TIMES.items()}))


def run_recipe(name: str, recipe: Recipe, project: Path, **kw) -> list[subprocess.CompletedProcess]:
    t0 = time.monotonic()
    out = [sh(command, project, **kw) for command in recipe.commands]
    TIMES[name] = time.monotonic() - t0
    return out


# ------------------------------------------------------------------------------------------------ fast
def test_the_parser_reads_fragments_commands_and_outputs():
    text = "\n".join([
        "# x", "<!-- recipe: demo -->", "1. step", "   ```yaml", "   a: {b: 1}", "   ```", "```yaml", "a: {c: 2}",
        "```", "```bash", "echo one \\", "  two   # a comment", "# only a comment", "", "echo 'x # y'", "```",
        "```console", "$ echo hi", "hi", "```", "<!-- /recipe -->",
        "<!-- recipe: gpu; not run: needs a GPU -->", "<!-- /recipe -->",
        "<!-- recipe: dry; tested by: tests/test_gpu_script.py -->", "<!-- /recipe -->"])
    got = parse(text)
    assert got["demo"].params == {"a": {"b": 1, "c": 2}}
    assert got["demo"].commands == ["echo one two", "echo 'x # y'"]
    assert got["demo"].console == [("echo hi", ["hi"])]
    assert (got["gpu"].not_run, got["dry"].tested_by) == ("needs a GPU", "tests/test_gpu_script.py")
    for bad, why in (("<!-- recipe: a -->\n", "no <!-- /recipe -->"),
                     ("<!-- recipe: a -->\n<!-- /recipe -->\n<!-- recipe: a -->\n<!-- /recipe -->", "twice"),
                     ("<!-- recipe: a; cpu: no -->\n<!-- /recipe -->", "unknown recipe attribute")):
        with pytest.raises(ValueError, match=why):
            parse(bad)


def test_every_recipe_is_run_here_tested_elsewhere_or_says_why_not():
    assert RUN_HERE <= set(RECIPES), sorted(RUN_HERE - set(RECIPES))
    for recipe in RECIPES.values():
        if recipe.not_run:
            assert len(recipe.not_run) > 10, recipe.name
        elif recipe.tested_by:
            module = (REPO / recipe.tested_by).read_text()
            for command in recipe.commands:  # the other test runs these very commands (a path by its file name)
                words = [Path(w).name for w in command.split()[1:]]
                assert all(w in module for w in words), (recipe.name, command, [w for w in words if w not in module])
        else:
            assert recipe.name in RUN_HERE, f"README recipe {recipe.name!r} is run by no test"
            assert recipe.commands or recipe.console, recipe.name


def test_check_prints_what_the_readme_shows(tmp_path):
    project = new_project(tmp_path / "p", shipped_params())
    for command, expected in RECIPES["check"].console:
        proc = sh(command, project, check=False)
        assert proc.returncode == 2
        assert (proc.stdout + proc.stderr).rstrip("\n").splitlines() == expected


def test_plan_examples_run_on_the_shipped_params(tmp_path):
    project = new_project(tmp_path / "p", shipped_params())
    t0 = time.monotonic()
    for command in RECIPES["plan"].commands:
        proc = sh(command, project, check=False)
        assert proc.returncode in (0, 2) and proc.stdout.strip(), (command, proc.stdout, proc.stderr)
        assert "Traceback" not in proc.stderr, proc.stderr
        if "--json" in command:
            assert json.loads(proc.stdout)["chosen"], proc.stdout[:500]
    TIMES["plan"] = time.monotonic() - t0


# ------------------------------------------------------------------------------------------------ slow
@pytest.fixture(scope="module")
def data(tmp_path_factory) -> Path:
    """The shipped params.yaml at TINY shapes with every stage before mix done (read-only: every test clones it)."""
    t0 = time.monotonic()
    project = data_project(tmp_path_factory.mktemp("recipes") / "data")
    TIMES["shared data stages"] = time.monotonic() - t0
    return project


# family, chat template in the checkpoint, sft.adapter.kind: each family once, each of the other two choices at least twice
CHECKPOINTS = [("llama", True, "lora"), ("mistral", False, "none"), ("qwen2", True, "none"),
               ("qwen3", False, "lora"), ("phi3", True, "lora")]  # phi3: its LoRA export fuses q/k/v, gate/up


def checkpoint_variant(family: str, template: bool, adapter: str) -> Recipe:
    """The README's checkpoint recipe for another family / template / adapter, as its text says to vary it
    (`--family`, `--no-chat-template`, `adapter: {kind: none}`); llama + template + LoRA is the text itself."""
    recipe = RECIPES["checkpoint"]
    flags = ([] if family == "llama" else [f"--family {family}"]) + ([] if template else ["--no-chat-template"])
    commands = [" ".join([c.replace("tiny-llama", f"tiny-{family}"), *flags]) if "tiny-checkpoint" in c else c
                for c in recipe.commands]
    params = yaml.safe_load(yaml.safe_dump(recipe.params).replace("tiny-llama", f"tiny-{family}"))
    if adapter != recipe.params["sft"]["adapter"]["kind"]:
        params = merge(params, {"sft": {"adapter": {"kind": adapter}}})
    return replace(recipe, commands=commands, params=params)


@pytest.mark.slow
@pytest.mark.parametrize("family, template, adapter", CHECKPOINTS,
                         ids=[f"{f}-{'template' if t else 'no-template'}-{a}" for f, t, a in CHECKPOINTS])
def test_checkpoint_recipe_exports_in_the_checkpoints_family(data, tmp_path, family, template, adapter):
    recipe = checkpoint_variant(family, template, adapter)
    project = clone(data, tmp_path / "p")
    write_params(project, recipe_params(recipe))
    run_recipe(f"checkpoint[{family}]", recipe, project)
    hf = project / "data" / "export" / "hf"
    config = json.loads((hf / "config.json").read_text())
    tok = json.loads((hf / "tokenizer_config.json").read_text())
    source = json.loads((project / "checkpoints" / "hf" / f"tiny-{family}" / "config.json").read_text())
    assert config["model_type"] == family
    # What the checkpoint states, not params.yaml's defaults: its context and its end-of-turn token.
    assert config["max_position_embeddings"] == source["max_position_embeddings"] > TINY["mix"]["seq_len"]
    assert tok["eos_token"] == ("<|im_end|>" if template else "<|end|>")
    assert ("chat_template" in tok) and (template == ("<|im_start|>" in tok["chat_template"]))
    assert (project / "data" / "export" / "adapter").is_dir() == (adapter == "lora")
    assert "up to date" in sh("dvc status", project).stdout


@pytest.mark.slow
def test_dask_recipe_writes_the_same_bytes(data, tmp_path):
    recipe = RECIPES["dask"]
    project = clone(data, tmp_path / "p")
    write_params(project, recipe_params(recipe, merge(shipped_params(), TINY)))
    clean, status = run_recipe("dask", recipe, project)
    assert "on a local Dask cluster of 2 workers" in clean.stderr, clean.stderr[-2000:]
    assert "Data and pipelines are up to date" in status.stdout


@pytest.mark.slow
def test_terminal_review_recipe(data, tmp_path):
    recipe = RECIPES["review-terminal"]
    project = clone(data, tmp_path / "p")
    write_params(project, recipe_params(recipe))
    who = {"GIT_AUTHOR_NAME": "Ada", "GIT_AUTHOR_EMAIL": "a@x", "GIT_COMMITTER_NAME": "Ada",
           "GIT_COMMITTER_EMAIL": "a@x"}
    t0 = time.monotonic()
    for command in recipe.commands:
        answers = None
        if "--interactive" in command:  # enter (ok) and an empty note per item, then approve with a note
            n = len((project / "data" / "evaluate" / "spotcheck.jsonl").read_text().splitlines())
            answers = "\n\n" * n + "a\nread every item\n"
        sh(command, project, input=answers, env={**env(), **who})
    TIMES["review-terminal"] = time.monotonic() - t0
    decision = json.loads((project / "data" / "review" / "decision.json").read_text())
    assert (decision["mode"], decision["decision"], decision["notes"]) == ("terminal", "approve", "read every item")


def wait_for_deployment(name: str, proc: subprocess.Popen, environ: dict, timeout: float = 180) -> None:
    deadline = time.monotonic() + timeout
    while True:
        assert proc.poll() is None, proc.stdout.read() if proc.stdout else proc.returncode
        found = subprocess.run([sys.executable, "-m", "prefect", "deployment", "inspect", name], env=environ,
                               capture_output=True, text=True)
        if found.returncode == 0:
            return
        assert time.monotonic() < deadline, f"deployment {name} never appeared"
        time.sleep(2)


def run_with_daemons(name: str, project: Path, environ: dict) -> list[subprocess.CompletedProcess]:
    """A Prefect recipe: its long-running commands (serve, worker) started in the background, the rest in order."""
    from flows.server import stop

    daemons, outs, t0 = [], [], time.monotonic()
    try:
        for command in RECIPES[name].commands:
            if command.startswith(("python -m flows serve", "prefect worker start")):
                daemons.append(subprocess.Popen(["bash", "-c", command], cwd=project, env=environ,
                                                stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True))
                if "serve" in command:
                    wait_for_deployment("forgeline/" + command.split("--name")[1].split()[0], daemons[-1], environ)
                continue
            outs.append(sh(command, project, env=environ, timeout=900))
    finally:
        for proc in daemons:
            stop(proc, grace=10)  # a worker needs SIGTERM then SIGINT
    TIMES[name] = time.monotonic() - t0
    return outs


@pytest.mark.slow
@pytest.mark.prefect
def test_prefect_deployment_recipes(data, tmp_path):
    from flows.server import local_server, prefect_env

    project = clone(data, tmp_path / "p")
    home = tmp_path / "prefect-home"
    home.mkdir()
    with local_server(home) as api_url:  # `python -m flows server` on a free port, not the README's 4200
        environ = {**env(), **prefect_env(api_url, home)}
        run_with_daemons("prefect-serve", project, environ)
        params = yaml.safe_load((project / "params.yaml").read_text())
        assert params["ingest"]["max_doc_chars"] == 50000  # the run's override, written for `dvc repro`
        assert (project / "data" / "validate" / "results.json").is_file()
        *_, last = run_with_daemons("prefect-worker", project, environ)
        assert "Completed" in last.stdout + last.stderr, last.stdout[-2000:]
    assert "up to date" in sh("dvc status clean", project).stdout
