"""Security promises: listeners bind 127.0.0.1; checkpoints load without unpickling code; secrets from the
environment and the input never reach logs, manifests, run records, Prefect artifacts or wandb files; planted
PII never reaches mix's token shards or the spot-check sample.

Known gaps were pinned as strict xfails until fixed (both are fixed now):
the rendezvous store of a training launch listens on all interfaces, and DeepSpeed's own checkpoint loader
unpickles with weights_only=False (a tampered checkpoint with a forged manifest runs code).
"""

from __future__ import annotations

import ast
import json
import pickle
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch

from tests.faults.test_kills import (EMAILS, FAKE_KEY, PHONES, PLANTED_FILE, WANDB_SECRET, Row, assert_row,
                                     base_projects, child_env, pretrain_reference, sh, timed, workspace)

REPO = Path(__file__).resolve().parents[2]
LOOPBACK = {"127.0.0.1", "::1", "::ffff:127.0.0.1"}



# ------------------------------------------------------------------------------------------ listeners
def listeners(pids: set[int] | None = None, port: int | None = None) -> list[tuple[str, int, int | None]]:
    """(address, port, pid) of every listening TCP socket, of `pids` and/or on `port` (root sees all pids)."""
    import psutil

    found = []
    for c in psutil.net_connections(kind="inet"):
        if c.status != psutil.CONN_LISTEN:
            continue
        if (pids is None or c.pid in pids) and (port is None or c.laddr.port == port):
            found.append((c.laddr.ip, c.laddr.port, c.pid))
    return found


def prefect_listener(tmp_root: Path) -> Row:
    """`python -m flows server` (flows.server.local_server) listens on 127.0.0.1 and nowhere else."""
    from flows.server import local_server

    with local_server(tmp_root / "prefect-listener", timeout=120) as api_url:
        port = int(api_url.rsplit(":", 1)[1].split("/")[0])
        bound = listeners(port=port)
    row = Row("network exposure", "Prefect server (`python -m flows server`)")
    row.checks = {"listens": bool(bound), "loopback only": {ip for ip, _, _ in bound} <= LOOPBACK}
    row.outcome = f"listens on {', '.join(sorted({ip for ip, _, _ in bound}))} only" if row.ok else f"bound {bound}"
    row.lost = "—"
    row.details = {"bound": bound}
    return row


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


RENDEZVOUS = """
import json, os, psutil
from tasks.train.engine import init_distributed, teardown
init_distributed()
print(json.dumps([[c.laddr.ip, c.laddr.port] for c in psutil.Process().net_connections("inet") if c.status == "LISTEN"]))
teardown()
"""


def rendezvous_listener(tmp_root: Path | None = None) -> Row:
    """A one-rank launch as tasks/train/launch.py sets it up (a file rendezvous, gloo on the loopback): every
    socket it listens on should be loopback."""
    import tempfile

    from tasks.train.launch import free_port

    port = free_port()
    init_file = Path(tempfile.mkdtemp(prefix="forgeline-rdzv-")) / f"rendezvous-{port}"
    env = child_env(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port), RANK="0", LOCAL_RANK="0", WORLD_SIZE="1",
                    DS_ACCELERATOR="cpu", OMP_NUM_THREADS="1", FORGELINE_INIT_FILE=str(init_file),
                    GLOO_SOCKET_IFNAME="lo")
    proc = sh([sys.executable, "-c", RENDEZVOUS], REPO, env)
    bound = json.loads(proc.stdout.strip().splitlines()[-1])
    row = Row("network exposure", "training rendezvous (MASTER_ADDR=127.0.0.1)")
    row.checks = {"listens": bool(bound), "loopback only": {ip for ip, _ in bound} <= LOOPBACK}
    row.outcome = "listens on " + ", ".join(f"[{ip}]:{port}" if ":" in ip else f"{ip}:{port}" for ip, port in bound)
    row.lost = "—"
    row.details = {"bound": bound}
    return row


def test_training_rendezvous_listens_on_loopback_only():
    assert_row(rendezvous_listener())


# ------------------------------------------------------------------------------------------ pickled code
class Payload:
    """Unpickling this runs code: it writes `marker` (what an attacker's checkpoint would do, harmlessly)."""

    def __init__(self, marker: Path):
        self.marker = str(marker)

    def __reduce__(self):
        return exec, (f"open({self.marker!r}, 'w').write('code ran')",)


def malicious(path: Path, marker: Path, wrap: bool = True) -> Path:
    """A torch checkpoint file whose unpickling runs code."""
    path.parent.mkdir(parents=True, exist_ok=True)
    torch.save({"weight": torch.zeros(2), "evil": Payload(marker)} if wrap else Payload(marker), path)
    return path


def test_payload_really_runs_code_when_unpickled_unsafely(tmp_path):
    """The control: without weights_only the file does run code (so the refusals below mean something)."""
    marker = tmp_path / "ran"
    torch.load(malicious(tmp_path / "x.pt", marker), weights_only=False)
    assert marker.read_text() == "code ran"


def pickled_model(tmp_root: Path) -> Row:
    """evaluate/sft/export load model.pt through `weights_only=True`: the payload is refused and never runs."""
    from tasks.eval.generate import load_model

    folder = tmp_root / "pickled-model" / "pretrain"
    shutil.rmtree(folder.parent, ignore_errors=True)
    marker = folder.parent / "ran"
    malicious(folder / "model.pt", marker)
    cfg = {"n_layers": 1, "d_model": 8, "n_heads": 2, "n_kv_heads": 2, "ffn_hidden": 24, "vocab_size": 16,
           "seq_len": 8}
    (folder / "config.json").write_text(json.dumps({"model": cfg}))
    try:
        load_model(folder)
        error = ""
    except pickle.UnpicklingError as exc:
        error = str(exc)
    row = Row("pickled code", "data/pretrain/model.pt (loaded by evaluate)")
    row.checks = {"load refused": "Weights only load failed" in error, "code did not run": not marker.exists()}
    row.outcome = "refused (weights_only=True); code did not run" if row.ok else "FAILED"
    row.lost = "—"
    row.details = {"error": error[:500]}
    return row


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
    assert len(calls) >= 5  # the loaders of model.pt and RNG states exist: the scan sees them
    assert [c for c, safe in calls if not safe] == []


def tampered_deepspeed_checkpoint(tmp_root: Path) -> Row:
    """An attacker who can write the checkpoint folder replaces the model states and rewrites forgeline.json's
    hash: resuming must refuse the file rather than execute it."""
    from tasks.core.files import sha256_file

    ref = pretrain_reference(tmp_root)
    proj = workspace(tmp_root, "tampered-ckpt", which="mixed")
    shutil.copytree(ref / "checkpoints", proj / "checkpoints")
    tag = proj / "checkpoints/pretrain/step000004"
    marker = proj / "code-ran"
    victim = malicious(tag / "mp_rank_00_model_states.pt", marker)
    manifest = json.loads((tag / "forgeline.json").read_text())
    manifest["files"][victim.name] = {"sha256": sha256_file(victim), "bytes": victim.stat().st_size}
    (tag / "forgeline.json").write_text(json.dumps(manifest))
    proc = sh([sys.executable, "-m", "tasks", "--root", str(proj), "pretrain"], proj, check=False)
    row = Row("pickled code", "DeepSpeed model states + forged checkpoint manifest (pretrain resume)")
    row.checks = {"code did not run": not marker.exists()}
    row.outcome = "refused" if row.ok else "code RAN (DeepSpeed loads with weights_only=False)"
    row.lost = "—"
    row.details = {"stderr": proc.stderr[-1500:]}
    return row


@pytest.mark.slow
def test_tampered_deepspeed_checkpoint_with_forged_manifest_does_not_run_code(fault_root):
    assert_row(tampered_deepspeed_checkpoint(fault_root))


# ------------------------------------------------------------------------------------------ PII in token shards
def decoded_shards(mix_dir: Path) -> str:
    """Every train and val token shard of mix, decoded back to text with mix's own tokenizer."""
    from tasks.data.tokenizer import load_tokenizer

    layout = json.loads((mix_dir / "packing.json").read_text())
    tok = load_tokenizer(mix_dir / "tokenizer.json")
    texts = []
    for split in layout["splits"].values():
        for shard in split["shards"]:
            ids = np.fromfile(mix_dir / shard["file"], dtype=np.dtype(layout["dtype"]))
            texts.append(tok.decode(ids.tolist(), skip_special_tokens=False))
    return "\n".join(texts)


def pii_strings() -> list[str]:
    return [*EMAILS, *PHONES, FAKE_KEY, *(e.split("@")[0] for e in EMAILS)]


def test_planted_pii_never_reaches_the_token_shards(fault_root):
    mixed = base_projects(fault_root).mixed
    raw = b"".join(p.read_bytes() for p in sorted((mixed / "data/ingest/shards").glob("*.parquet")))
    assert EMAILS[0].encode() in raw or EMAILS[0].encode() in (mixed / PLANTED_FILE).read_bytes()
    text = decoded_shards(mixed / "data/mix")
    # The planted documents are in the shards (decoding works, they were kept), their PII replaced.
    assert "The harbour master keeps the tide tables" in text and "Write to <EMAIL> or call <PHONE>" in text
    assert "api_key = <SECRET>" in text
    assert [s for s in pii_strings() if s in text] == []


# ------------------------------------------------------------------------------------------ secrets, end to end
def secret_run(tmp_root: Path) -> tuple[Path, subprocess.CompletedProcess]:
    """A fresh clone of the planted project run by the Prefect flow through evaluate, with WANDB_API_KEY set,
    wandb offline (files written), Prefect's state inside the project, the spot-check sampling every note."""
    proj = tmp_root / "secrets"
    shutil.rmtree(proj, ignore_errors=True)
    sh(["git", "clone", "-q", str(base_projects(tmp_root).validated), str(proj)], tmp_root)
    env = child_env(WANDB_API_KEY=WANDB_SECRET, WANDB_MODE="offline", PREFECT_HOME=str(proj / ".prefect"),
                    PREFECT_API_URL=None, FORGELINE_TRACEBACK="1")
    proc = sh([sys.executable, "-m", "flows", "run", "--root", str(proj), "--until", "evaluate",
               "--set", "evaluate.spotcheck.per_stratum=50"], proj, env, check=False, timeout=1200)
    (proj / "flow-console.log").write_text(proc.stdout + proc.stderr)  # the console log is scanned too
    return proj, proc


def allowed_copies(proj: Path) -> set[bytes]:
    """Contents that may hold the planted strings: the input file and ingest's raw records (scrubbing is
    clean's job), wherever DVC keeps a byte-identical copy of them."""
    import hashlib

    allowed = [proj / PLANTED_FILE, *(p for p in (proj / "data/ingest").rglob("*") if p.is_file()
                                      and p.name != "manifest.json")]
    return {hashlib.sha256(p.read_bytes()).digest() for p in allowed}


def leaks(proj: Path, needles: list[str]) -> dict[str, list[str]]:
    """needle -> files under `proj` (git objects aside) whose bytes contain it, allowed copies excluded."""
    import hashlib

    allowed = allowed_copies(proj)
    found: dict[str, list[str]] = {}
    for p in sorted(proj.rglob("*")):
        if not p.is_file() or ".git" in p.relative_to(proj).parts:
            continue
        data = p.read_bytes()
        hits = [n for n in needles if n.encode() in data]
        if hits and hashlib.sha256(data).digest() not in allowed:
            for n in hits:
                found.setdefault(n, []).append(p.relative_to(proj).as_posix())
    return found


def secrets_and_pii(tmp_root: Path) -> Row:
    """The whole-project scan after a flow run (see secret_run)."""
    (proj, proc), took = timed(secret_run, tmp_root)
    prefect_db = b"".join(p.read_bytes() for p in sorted((proj / ".prefect").glob("prefect.db*")))
    spot = (proj / "data/evaluate/spotcheck.jsonl").read_text() if proc.returncode == 0 else ""
    found = leaks(proj, [WANDB_SECRET, FAKE_KEY, *EMAILS, *PHONES])
    shards = decoded_shards(proj / "data/mix") if proc.returncode == 0 else ""
    row = Row("planted secrets + PII", "WANDB_API_KEY in env; key, emails, phones in input (flow to evaluate)",
              recover_s=None)
    row.checks = {
        "flow run succeeded": proc.returncode == 0,
        # What the scan covers really exists: Prefect's logs and artifacts, wandb's offline run, run records.
        "Prefect logs and artifacts were scanned": b"Running stage 'clean'" in prefect_db and b"data-funnel" in prefect_db,
        "wandb offline files were scanned": bool(list((proj / "reports/pretrain").rglob("offline-run-*"))),
        "run records and manifests were scanned": (proj / "runs/evaluate.json").exists()
        and (proj / "data/evaluate/manifest.json").exists(),
        "the planted notes were sampled, scrubbed": "kept:notes/planted-0" in spot and "<EMAIL>" in spot,
        "no secret or PII anywhere but the input and ingest's raw records": found == {},
        "no PII in the spot-check sample": [s for s in pii_strings() if s in spot] == [],
        "no PII in the decoded token shards": bool(shards) and [s for s in pii_strings() if s in shards] == [],
    }
    n_files = sum(1 for p in proj.rglob("*") if p.is_file() and ".git" not in p.relative_to(proj).parts)
    row.outcome = f"not found in {n_files} files (logs, Prefect DB, wandb, records, shards)" if row.ok else "LEAKED"
    row.lost = "—"
    row.details = {"leaks": found, "log": (proc.stdout + proc.stderr)[-2000:], "run_s": took}
    return row


@pytest.mark.slow
@pytest.mark.prefect
def test_secrets_and_pii_stay_out_of_logs_records_artifacts_and_samples(fault_root):
    assert_row(secrets_and_pii(fault_root))
