"""Security promises: listeners bind 127.0.0.1; checkpoints load without unpickling code; secrets from the
environment and the input never reach logs, manifests, run records, Prefect artifacts or wandb files; planted
PII never reaches mix's token shards or the spot-check sample.

Known gaps were pinned as strict xfails until fixed (both are fixed now):
the rendezvous store of a training launch listens on all interfaces, and DeepSpeed's own checkpoint loader
unpickles with weights_only=False (a tampered checkpoint with a forged manifest runs code).
"""

from __future__ import annotations

import ast

import pytest
import torch

from tests.faults.scenarios.common import EMAILS, PLANTED_FILE, assert_row, base_projects
from tests.faults.scenarios.security import (LOOPBACK, REPO, decoded_shards, listeners, malicious, pickled_model,
                                             pii_strings, prefect_listener, rendezvous_listener, secrets_and_pii,
                                             tampered_deepspeed_checkpoint)


def test_prefect_server_binds_loopback_only(fault_root):
    assert_row(prefect_listener(fault_root))


@pytest.mark.slow
def test_prefect_defaults_bind_loopback(tmp_path):
    """Without our flags: Prefect's default server host, and the temporary server a flow run starts."""
    from prefect.server.api.server import SubprocessASGIServer
    from prefect.settings import get_current_settings

    assert get_current_settings().server.api.host == "127.0.0.1"
    server = SubprocessASGIServer()
    server.start(timeout=120)
    try:
        bound = listeners(port=server.port)
    finally:
        server.stop()
    assert bound and {ip for ip, _, _ in bound} <= LOOPBACK, bound


def test_training_rendezvous_listens_on_loopback_only():
    assert_row(rendezvous_listener())


def test_payload_really_runs_code_when_unpickled_unsafely(tmp_path):
    """The control: without weights_only the file does run code (so the refusals below mean something)."""
    marker = tmp_path / "ran"
    torch.load(malicious(tmp_path / "x.pt", marker), weights_only=False)
    assert marker.read_text() == "code ran"


def test_model_loading_refuses_pickled_code(fault_root):
    assert_row(pickled_model(fault_root))


def test_every_torch_load_in_the_project_is_weights_only():
    """Static guard: each `torch.load(...)` call in tasks/, flows/ and specs/ passes weights_only=True."""
    calls = []
    for folder in ("tasks", "flows", "specs"):
        for path in sorted((REPO / folder).rglob("*.py")):
            for node in ast.walk(ast.parse(path.read_text(), str(path))):
                if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == "load" \
                        and isinstance(node.func.value, ast.Name) and node.func.value.id == "torch":
                    safe = any(k.arg == "weights_only" and isinstance(k.value, ast.Constant) and k.value.value is True
                               for k in node.keywords)
                    calls.append((f"{path.relative_to(REPO)}:{node.lineno}", safe))
    # the scan sees the project's loaders: RNG states (checkpointing/rng.py) and DeepSpeed checkpoints
    # (parallel/deepspeed_adapter.py); the tests' own rank-result loader lives in tests/helpers
    assert {c.split(":")[0] for c, _ in calls} >= {"tasks/train/checkpointing/rng.py",
                                                   "tasks/train/parallel/deepspeed_adapter.py"}
    assert [c for c, safe in calls if not safe] == []


@pytest.mark.slow
def test_tampered_deepspeed_checkpoint_with_forged_manifest_does_not_run_code(fault_root):
    assert_row(tampered_deepspeed_checkpoint(fault_root))


def test_planted_pii_never_reaches_the_token_shards(fault_root):
    mixed = base_projects(fault_root).mixed
    raw = b"".join(p.read_bytes() for p in sorted((mixed / "data/ingest/shards").glob("*.parquet")))
    assert EMAILS[0].encode() in raw or EMAILS[0].encode() in (mixed / PLANTED_FILE).read_bytes()
    text = decoded_shards(mixed / "data/mix")
    # The planted documents are in the shards (decoding works, they were kept), their PII replaced.
    assert "The harbour master keeps the tide tables" in text and "Write to <EMAIL> or call <PHONE>" in text
    assert "api_key = <SECRET>" in text
    assert [s for s in pii_strings() if s in text] == []


@pytest.mark.slow
@pytest.mark.prefect
def test_secrets_and_pii_stay_out_of_logs_records_artifacts_and_samples(fault_root):
    assert_row(secrets_and_pii(fault_root))
