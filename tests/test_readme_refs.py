"""What README.md names outside its recipes resolves in this repository (tests/helpers/readme_refs.py reads it):
every repository path exists, every `tasks.x` name is a module or a name one defines, every params key is a
field of the spec, and every command parses: `python -m tasks|flows ...` by the CLIs' own parsers, a benchmark's
or script's `--flags` by its source, `dvc repro/status STAGE` by the stage registry, Prefect names by
prefect.yaml. Static (nothing is run, a few seconds), so a rename that leaves the README behind fails here.
"""

from __future__ import annotations

import contextlib
import glob
import io
import re
import subprocess

import pytest
import yaml

from tests.helpers.readme_refs import (OUTPUT_ROOTS, PLACEHOLDER, SOURCE_ROOTS, Ref, commands, dotted_names,
                                       key_resolves, params_keys, path_tokens, readme_text, resolve_dotted, words)
from tests.helpers.recipes import REPO
from specs.pretrain import MODEL_KEYS, PARALLEL_KEYS

TEXT = readme_text()
COMMANDS = commands(TEXT)
# Dotted names that look like params keys and are not: FORGELINE_FAULT's points, and a library's function.
FAULT_POINT = re.compile(r"^[a-z_]+\.(shard_done|step_done|checkpoint_write|checkpoint_async_write|atomic_write)$")
NOT_KEYS = {"evaluate.load"}  # the Hugging Face `evaluate` library's loader, named as what lm-eval would call
REFUSED = {"parallel": PARALLEL_KEYS, "model": MODEL_KEYS}


def failures(refs, ok) -> list[str]:
    return [f"README line {r.line}: {r.text}" for r in refs if not ok(r)]


def ignored(path: str) -> bool:
    """Whether git ignores `path` (a folder a documented step creates, e.g. benchmarks/gpu/wheels/)."""
    return any(subprocess.run(["git", "check-ignore", "-q", "--no-index", p], cwd=REPO).returncode == 0
               for p in (path, path + "/x"))


def test_the_extraction_finds_what_the_readme_names():
    # Guards the parser itself: it must see commands in tables, wrapped prose spans and bash blocks alike.
    texts = {c.text for c in COMMANDS}
    assert "python -m tasks graph --write" in texts  # the Running table
    assert "bash benchmarks/gpu/run.sh --dry-run" in texts  # a bash block
    assert any(t.startswith("python benchmarks/dvc_disk.py --project") for t in texts)  # a span over two lines
    assert len(path_tokens(TEXT)) > 100 and len(params_keys(TEXT)) > 100


def test_every_repository_path_named_exists():
    def ok(ref: Ref) -> bool:
        first = ref.text.split("/")[0]
        if PLACEHOLDER.search(ref.text) or re.search(r"_X\b", ref.text):
            return True
        if first in OUTPUT_ROOTS:  # a stage's output: data/<stage>/... names a stage of the registry
            from tasks.core.graph import STAGE_NAMES

            part = ref.text.split("/")[1]
            if first != "data" or ("." in part and ref.text.count("/") == 1):  # data/x.jsonl: a dataset's own
                return True
            return part in STAGE_NAMES
        assert first in SOURCE_ROOTS or "/" not in ref.text
        return bool(glob.glob(str(REPO / ref.text))) or ignored(ref.text)

    assert not failures(path_tokens(TEXT), ok)


def test_every_module_named_exists():
    assert not failures(dotted_names(TEXT), lambda r: resolve_dotted(REPO, r.text))


def test_every_params_key_named_is_a_spec_field():
    fault_points = (REPO / "tasks" / "core" / "faults.py").read_text()

    def ok(ref: Ref) -> bool:
        if ref.text in NOT_KEYS or re.search(r"\.(py|sh|jsonl?|safetensors|pt|md|yaml|txt)$", ref.text):
            return True
        if FAULT_POINT.match(ref.text):  # FORGELINE_FAULT's points, listed by tasks/core/faults.py
            return ref.text.split(".")[1] in fault_points
        section, _, key = ref.text.partition(".")
        if key in REFUSED.get(section, {}):  # another trainer's key the spec refuses by name (README says so)
            return True
        return key_resolves(ref.text)

    assert not failures(params_keys(TEXT), ok)


def argv_of(command: str, prefix: list[str]) -> list[str] | None:
    """The arguments after `prefix` (e.g. python -m tasks), up to a `&&`/`;`; None: not such a command, or one
    with a placeholder."""
    ws = words(command)
    while ws and re.match(r"^[A-Z_]+=", ws[0]):  # VAR=value before the command
        ws = ws[1:]
    argv = ws[len(prefix):]
    if ws[:len(prefix)] != prefix or PLACEHOLDER.search(" ".join(argv)):
        return None
    for stop in ("&&", ";", "|"):
        argv = argv[:argv.index(stop)] if stop in argv else argv
    return argv


def parses(parser, argv: list[str]) -> str:
    """'' when `parser` takes `argv`, else argparse's complaint."""
    err = io.StringIO()
    try:
        with contextlib.redirect_stderr(err):
            parser.parse_args(argv)
    except SystemExit:
        return err.getvalue().strip().splitlines()[-1]
    return ""


def test_tasks_and_flows_commands_parse():
    from flows.__main__ import build_parser as flows_parser
    from tasks.__main__ import build_parser as tasks_parser

    bad, parsers = [], ((["python", "-m", "tasks"], tasks_parser()), (["python", "-m", "flows"], flows_parser()))
    for ref in COMMANDS:
        for prefix, parser in parsers:
            argv = argv_of(ref.text, prefix)
            if not argv:  # `python -m tasks` alone names the CLI
                continue
            if prefix[-1] == "flows" and argv[0] not in ("run", "serve", "server"):
                argv = ["run", *argv]  # flows.__main__.main's default command
            if why := parses(parser, argv):
                bad.append(f"README line {ref.line}: {ref.text}: {why}")
    assert not bad


def flags_missing(source: str, argv: list[str]) -> list[str]:
    return [a.split("=")[0] for a in argv if a.startswith("--") and not re.search(
        rf"[\"'\s(]{re.escape(a.split('=')[0])}\b", source)]


# Environment variables whose value is more flags, for the script that takes them.
FLAG_VARS = {"TPUT_ARGS": "benchmarks/pretrain_throughput.py"}  # run.sh passes them to every throughput run


def test_scripts_and_modules_take_the_flags_named():
    bad = []
    for ref in COMMANDS:
        for var, script in FLAG_VARS.items():
            value = re.search(rf"\b{var}=(\"[^\"]*\"|'[^']*'|\S+)", ref.text)
            if value and (missing := flags_missing((REPO / script).read_text(), words(value.group(1).strip("'\"")))):
                bad.append(f"README line {ref.line}: {ref.text}: {script} takes no {missing}")
        ws = [w for w in words(ref.text) if not re.match(r"^[A-Z_]+=", w)]
        if len(ws) < 2 or ws[0] not in ("python", "bash") or ws[1].startswith("/"):
            continue
        module = ws[2] if ws[1] == "-m" and len(ws) > 2 and re.fullmatch(r"[\w.]+", ws[2]) else None
        if module and module not in ("tasks", "flows", "pytest"):
            target = REPO / (module.replace(".", "/") + ".py")
            argv = ws[3:]
        elif ws[1].endswith((".py", ".sh")):
            target, argv = REPO / ws[1], ws[2:]
        else:
            continue
        if not target.is_file():
            bad.append(f"README line {ref.line}: {ref.text}: no {target.relative_to(REPO)}")
        elif missing := flags_missing(target.read_text(), argv):
            bad.append(f"README line {ref.line}: {ref.text}: {target.name} takes no {missing}")
    assert not bad


def test_dvc_and_prefect_commands_name_what_exists():
    from tasks.core.graph import STAGE_NAMES

    deployments = yaml.safe_load((REPO / "prefect.yaml").read_text())["deployments"]
    names = {f"forgeline/{d['name']}" for d in deployments}
    pools = {d["work_pool"]["name"] for d in deployments}
    bad = []
    for ref in COMMANDS:
        for sub in ("repro", "status"):
            argv = argv_of(ref.text, ["dvc", sub])
            stages = [a for a in argv or () if not a.startswith("-")]
            bad += [f"README line {ref.line}: {ref.text}: no stage {s}" for s in stages if s not in STAGE_NAMES]
        run = argv_of(ref.text, ["prefect", "deployment", "run"])
        if run and run[0] not in names | {"forgeline/local"}:  # local: `python -m flows serve --name local`
            bad.append(f"README line {ref.line}: {ref.text}: no deployment {run[0]}")
        pool = re.search(r"--pool (\S+)|work-pool create (\S+) --type process", ref.text)
        if pool and (pool.group(1) or pool.group(2)) not in pools:
            bad.append(f"README line {ref.line}: {ref.text}: prefect.yaml has no pool {pool.group(1)}")
    assert not bad


@pytest.mark.parametrize("text, key, ok", [("`pretrain.optim.lr`", "pretrain.optim.lr", True),
                                          ("`ingest.sources.0.max_docs`", "ingest.sources.0.max_docs", True),
                                          ("`review.spotcheck.flags`", "review.spotcheck.flags", False),
                                          ("`--set train.speed.compile=on`", "train.speed.compile", True)])
def test_the_key_lookup_tells_fields_from_typos(text, key, ok):
    found = [k.text for k in params_keys(f"x {text}\n")]
    if text.startswith("`--set"):
        found = [k.text for k in params_keys(f"```bash\npython b.py {text.strip('`')}\n```\n")]
    assert found == [key] and key_resolves(key) is ok


def test_every_forgeline_variable_named_is_read_somewhere():
    """`FORGELINE_*` environment variables the README tells users to set are read by the code, a script or the
    test set-up (the last for the test-only knobs the Tests section documents)."""
    sources = [p for root in ("tasks", "flows", "specs", "scripts", "benchmarks", "tests", ".ci")
               for p in (REPO / root).rglob("*") if p.is_file() and p.suffix in (".py", ".sh", "")]
    code = "\n".join(p.read_text(errors="replace") for p in sources if p.name != "test_readme_refs.py")
    named = {(m.group(0), TEXT.count("\n", 0, m.start()) + 1) for m in re.finditer(r"FORGELINE_[A-Z][A-Z_]*", TEXT)}
    assert not sorted(f"README line {line}: {var}" for var, line in named if var not in code)


def test_params_fragments_outside_recipes_validate_in_the_shipped_params():
    from specs import ParamsError
    from specs.params import validate_params
    from tests.helpers.readme_refs import yaml_fragments
    from tests.helpers.recipes import merge, shipped_params

    fragments = yaml_fragments(TEXT)
    assert len(fragments) >= 3  # benchmark's keys, downloaded benchmarks, model.init
    bad = []
    for line, body in fragments:
        try:
            validate_params(merge(shipped_params(), yaml.safe_load(body)))
        except ParamsError as exc:
            bad.append(f"README line {line}: {exc.problems}")
    assert not bad


def test_every_yaml_block_reads_the_same_to_yaml_1_1_and_to_dvc():
    # a user pastes these into params.yaml, whose reader refuses what PyYAML (1.1) and DVC (1.2) read apart:
    # the checkpoint recipe's `review: {mode: off}` made `check` fail as pasted, while the recipe test's own
    # safe_load/safe_dump round trip turned `off` into false and passed
    from specs.params import dvc_reading, reading_differences

    blocks = re.findall(r"(?m)^([ \t]*)```ya?ml\n(.*?)^\1```", TEXT, re.S)
    assert len(blocks) >= 7
    bad = []
    for indent, body in blocks:
        text = "\n".join(line[len(indent):] for line in body.splitlines())
        ours = yaml.safe_load(text)
        problems = reading_differences(ours, dvc_reading(text, REPO / "README.md"))
        bad += [f"{text.splitlines()[0]!r}...: {p}" for p in problems]
    assert not bad


def test_the_benchmark_table_is_the_committed_default_runs():
    # the table said 0.32 / 35,890 after a re-lock had moved metrics/benchmark.json to 0.34 / 40,475
    import json

    metrics = json.loads((REPO / "metrics" / "benchmark.json").read_text())
    rows = re.findall(r"(?m)^\| (forgeline_\w+) \| (\w+) \| ([\d.,]+)(?: ± [\d.]+)? \| ([\d.,]+)(?: ± [\d.]+)? \|$",
                      TEXT)
    assert len(rows) == 6
    for task, metric, before, after in rows:
        for shown, when in ((before, "before"), (after, "after")):
            value = metrics[when][task][metric]
            decimals = len(shown.partition(".")[2])
            assert float(shown.replace(",", "")) == round(value, decimals), (task, metric, when, value)
