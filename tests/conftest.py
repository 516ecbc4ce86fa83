"""Shared fixtures: a throw-away forgeline project (git + DVC) built from this checkout."""

from __future__ import annotations

import json
import os
import random
import shutil
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest
import yaml

REPO = Path(__file__).resolve().parents[1]
PROJECT_FILES = ("tasks", "specs", "flows", "reviews", "dvc.yaml", "prefect.yaml", ".dvcignore", ".gitignore")

import tempfile

os.environ.setdefault("DVC_NO_ANALYTICS", "1")
# Prefect keeps its state (SQLite, settings) in a throw-away folder during tests, never in ~ or the checkout.
os.environ.setdefault("PREFECT_HOME", tempfile.mkdtemp(prefix="forgeline-prefect-"))
os.environ.setdefault("PREFECT_SERVER_ANALYTICS_ENABLED", "false")
os.environ.setdefault("PREFECT_SERVER_EPHEMERAL_STARTUP_TIMEOUT_SECONDS", "90")
os.environ.setdefault("WANDB_MODE", "disabled")
# Offline, as the pipeline runs: the `datasets` compatibility tests must never reach the Hub.
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("HF_DATASETS_OFFLINE", "1")

# Property tests explore new random examples on a developer's machine (and save failures to .hypothesis/), but in
# CI each draws the same examples every run: a main that passed stays green, and a rare draw cannot fail an
# unrelated change. (A draw that once failed here becomes an explicit case in its test file.)
from hypothesis import settings as _hypothesis_settings  # noqa: E402

_hypothesis_settings.register_profile("ci", derandomize=True, database=None)
if os.environ.get("CI"):
    _hypothesis_settings.load_profile("ci")


# The tiny sample holds one kept document per source, and a Shakespeare scene can hit the flagger's word list
# (clean keeps it: below its toxic share): on two documents a 0.25 share cannot judge anything.
TINY_GATE = {"max_perplexity_ratio": None, "max_low_quality_fraction": 1.0, "max_repetition": None,
             "max_kept_toxic_fraction": 1.0}


def tiny_params(root: Path) -> dict:
    """A params set that runs in seconds: two small embedded sources and one user jsonl file."""
    notes = root / "inputs" / "notes.jsonl"
    notes.parent.mkdir(parents=True, exist_ok=True)
    rows = [{"uid": f"n{i}", "body": f"Note number {i}. " + "The mill by the river grinds grain. " * 8}
            for i in range(12)]
    notes.write_text("".join(json.dumps(r) + "\n" for r in rows) + "{not json\n")
    return {
        "run": {"name": "tiny", "seed": 7},
        "ingest": {
            "sources": [
                {"name": "docs", "kind": "embedded", "corpus": "docs", "max_docs": 15},
                {"name": "literature", "kind": "embedded", "corpus": "literature", "max_docs": 5},
                {"name": "notes", "kind": "files", "paths": ["inputs/*.jsonl"], "fields": {"text": "body", "id": "uid"}},
            ],
            "max_doc_chars": 100000,
            "shard_records": 8,
        },
        "validate": {
            "expectations": [
                {"expect": "not_null", "column": "text"},
                {"expect": "length_between", "column": "text", "min": 1, "max": 100000},
                {"expect": "unique", "column": "id"},
                {"expect": "in_set", "column": "source", "values": ["docs", "literature", "notes"]},
            ],
            "data_docs": False,
        },
        "mix": {"token_budget": None, "seq_len": 64, "tokenizer": {"vocab_size": 1024}},
        "pretrain": {"steps": 4, "micro_batch_size": 2, "eval_every": 2, "eval_batches": 1, "checkpoint_every": 2,
                     "log_every": 1, "optim": {"warmup_steps": 1}},
        "evaluate": {"perplexity_batches": 2, "batch_size": 4, "sampling": {"max_new_tokens": 8},
                     "prompts": [{"id": "p-mill", "category": "prose", "text": "The mill by the river"},
                                 {"id": "d-with", "category": "docs", "text": "The with statement"}],
                     "spotcheck": {"per_stratum": 1}},
        # A 4-step model neither beats the unigram baseline nor writes fluent or varied text: the tiny run's gates
        # check the PII / toxic flags (generations and kept documents) and the drops only.
        "review": TINY_GATE,
        "instruct": {"sources": [{"name": "chatterbot", "kind": "embedded", "corpus": "chatterbot", "max_pairs": 200},
                                 {"name": "pydoc_topics", "kind": "embedded", "corpus": "pydoc_topics",
                                  "max_pairs": 60}],
                     "max_train_pairs": 150},
        "sft": {"steps": 4, "micro_batch_size": 2, "seq_len": 64, "eval_every": 2, "checkpoint_every": 2,
                "log_every": 1, "compare_prompts": 2, "sampling": {"max_new_tokens": 8},
                "optim": {"warmup_steps": 1}},
        "review_sft": {"target": "sft", **TINY_GATE},
        # 4 DPO steps on a 4-step SFT model prove the wiring, not a preference: the gate checks flags only
        "prefer_data": {"sources": [{"name": "instruct", "kind": "embedded", "max_pairs": 24, "max_new_tokens": 8}]},
        "prefer": {"steps": 4, "micro_batch_size": 2, "eval_every": 2, "checkpoint_every": 2, "log_every": 1,
                   "compare_prompts": 2, "sampling": {"max_new_tokens": 8}, "optim": {"warmup_steps": 1}},
        "review_prefer": {"target": "prefer", **TINY_GATE, "min_accuracy_gain": None, "reject_collapse": False},
        # The shipped benchmark tasks, small: a 4-step model's scores only show that the stage measures.
        "benchmark": {"limit": 20, "shipped": {"docs": 20, "context_words": 24, "continuation_words": 6,
                                               "passage_words": 40}},
    }


def run(cmd: list[str], cwd: Path, check: bool = True, **kw) -> subprocess.CompletedProcess:
    env = {**os.environ, "PATH": str(Path(sys.executable).parent) + os.pathsep + os.environ.get("PATH", "")}
    proc = subprocess.run(cmd, cwd=cwd, env=env, capture_output=True, text=True, **kw)
    if check and proc.returncode != 0:
        raise AssertionError(f"{cmd} failed ({proc.returncode}):\n{proc.stdout}\n{proc.stderr}")
    return proc


def dvc_init(dest: Path) -> None:
    """What `dvc init -q` then `dvc config core.analytics false` do (the same files, staged in git the same way),
    through DVC's API in this process: two fewer interpreters that import DVC (~2 s each) per project made."""
    from dvc.repo import Repo

    repo = Repo.init(str(dest))
    try:
        with repo.config.edit() as conf:
            conf["core"]["analytics"] = "false"  # as the command line writes it: a string
    finally:
        repo.close()


def make_project(dest: Path, params: dict | None = None, as_given: bool = False) -> Path:
    """Copy the project's code into `dest`, write params, and make it a git + DVC repo with one commit. `as_given`:
    params.yaml holds exactly `params` (a user's edited file), not every key filled in from the schema."""
    dest.mkdir(parents=True, exist_ok=True)
    for name in PROJECT_FILES:
        src = REPO / name
        if src.is_dir():
            shutil.copytree(src, dest / name, ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
        else:
            shutil.copy2(src, dest / name)
    from specs import Params

    # Written out in full (defaults included): DVC tracks the values in the file, not pydantic's defaults.
    data = params if as_given else Params.model_validate(params if params is not None else tiny_params(dest)).dump()
    (dest / "params.yaml").write_text(yaml.safe_dump(data, sort_keys=False, allow_unicode=True))
    from tasks.core import graph

    # as `python -m tasks graph --write` in the project: its params' source files are deps (tasks/core/datadeps.py)
    (dest / "dvc.yaml").write_text(graph.dvc_yaml_text(dest))
    run(["git", "init", "-q"], dest)
    run(["git", "-c", "user.email=t@t", "-c", "user.name=t", "commit", "-q", "--allow-empty", "-m", "empty"], dest)
    dvc_init(dest)
    run(["git", "add", "-A"], dest)
    run(["git", "-c", "user.email=t@t", "-c", "user.name=t", "commit", "-q", "-m", "project"], dest)
    return dest


@pytest.fixture
def project(tmp_path: Path) -> Path:
    return make_project(tmp_path / "proj")


@dataclass(frozen=True)
class Reproduced:
    """The tiny project right after its first full `dvc repro`: the run's output and dvc.lock as they were then."""

    project: Path
    stdout: str
    lock: str


@pytest.fixture(scope="session")
def reproduced(tmp_path_factory) -> Reproduced:
    """One full `dvc repro` of a fresh tiny project per session (the slowest command in the suite): test_e2e_dvc
    goes on from it (status, rerun, --force, param change: it changes the work tree, never the commit), and
    test_flow clones its commit and compares a flow run's dvc.lock against the lock recorded here."""
    proj = make_project(tmp_path_factory.mktemp("reproduced") / "proj")
    first = run([sys.executable, "-m", "dvc", "repro"], proj)
    return Reproduced(proj, first.stdout, (proj / "dvc.lock").read_text())


@pytest.fixture(scope="session")
def mixed(tmp_path_factory) -> Path:
    """A project root holding data/mix/ from the real mix stage (tokenizer.json, shards, index), built once per
    session (see tests/helpers/pretrain.py): the tests copy it out (fresh_root) and never write into it."""
    from tests.helpers.pretrain import build_mixed

    return build_mixed(tmp_path_factory.mktemp("mixed"))


@pytest.fixture(scope="session")
def pretrained_run(mixed, tmp_path_factory):
    """(root, result) of the pretrain stage with tests/helpers/pretrain.py's SPEC on `mixed`, run once per
    session: test_pretrain's uninterrupted reference and the model test_sft starts from (it copies the root);
    neither writes into it."""
    from tests.helpers.pretrain import fresh_root, run_stage

    root = fresh_root(mixed, tmp_path_factory.mktemp("pretrained"))
    return root, run_stage(root)


@pytest.fixture(scope="session")
def mix_dir(tmp_path_factory) -> Path:
    """A synthetic mix folder (256-token vocab, 32-token sequences; tasks.train.inputs.synthetic.synthetic_mix) that the
    engine tests on real ranks read and never write (tests/test_train_parallel.py, test_elastic_resume.py,
    test_async_checkpoint.py)."""
    from tasks.train.inputs.synthetic import synthetic_mix

    return synthetic_mix(tmp_path_factory.mktemp("mix") / "mix", vocab_size=256, seq_len=32)


@pytest.fixture(scope="session")
def tiny_hf_folder(tmp_path_factory) -> Path:
    """A tiny Llama-shaped Hugging Face checkpoint folder (300-token tokenizer of embedded texts) that the hostile
    checkpoint tests copy and then break, one way each (tests/test_hf_hostile.py, test_hostile_checkpoints.py)."""
    from tasks.train.hf.tiny_checkpoint import embedded_texts, make_checkpoint

    folder = tmp_path_factory.mktemp("hf") / "ckpt"
    make_checkpoint(folder, embedded_texts(20), vocab=300)
    return folder


def drain_prefect_workers(timeout: float = 30.0) -> None:
    """Tests that point Prefect at a server of their own (deployments, the browser test) stop that server when
    done; a log/event worker left bound to it made the next module's `prefect_test_harness` teardown wait forever."""
    from flows.server import drain_prefect_workers as drain

    drain(timeout)


@pytest.fixture(scope="session")
def prefect_api(tmp_path_factory) -> str:
    """One local Prefect server (flows.server.local_server: 127.0.0.1, SQLite in a session folder) for the modules
    that run flows in this process (test_flow, test_flow_select, faults/test_kills): one server start (~15 s on 2
    cores) instead of one per module. Those tests read back only their own flow runs (by flow-run id), never a
    count over the whole server, so no assertion depends on which module ran before."""
    from flows.server import local_server

    with local_server(tmp_path_factory.mktemp("prefect-server")) as api_url:
        yield api_url
        drain_prefect_workers()  # before the server stops


@pytest.fixture(scope="module")
def prefect_server(prefect_api):
    """This process's Prefect client pointed at the session's server while the module runs; its API URL."""
    from prefect.settings import PREFECT_API_URL, temporary_settings

    with temporary_settings(updates={PREFECT_API_URL: prefect_api}):
        yield prefect_api
        drain_prefect_workers()  # this module's queued logs and events reach the server now, not a later module


# Kill points are drawn at random for each session (the seed is in every row, so a failure can be replayed
# with FORGELINE_FAULT_SEED=<seed>); each scenario draws from its own stream, so adding one moves no other.
# Kept in the environment, so every import of this module and every child process agree on it.
FAULT_SEED = int(os.environ.setdefault("FORGELINE_FAULT_SEED", str(random.SystemRandom().randrange(1 << 32))))


def pytest_report_header(config) -> str:
    return f"fault seed: {FAULT_SEED} (replay the same kill points with FORGELINE_FAULT_SEED={FAULT_SEED})"


def kill_point(scenario: str, lo: int, hi: int) -> int:
    """A point in [lo, hi] for `scenario`, from the session's fault seed."""
    return random.Random(f"{FAULT_SEED}:{scenario}").randint(lo, max(lo, hi))


def seed_note() -> str:
    return f"; seed {FAULT_SEED}"
