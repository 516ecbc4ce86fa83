"""Security scenarios: what listens where, pickled code in model files and checkpoints, secrets and planted PII
after a flow run (tests/faults/test_security.py)."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import torch

from tests.faults.scenarios.common import (EMAILS, FAKE_KEY, PHONES, PLANTED_FILE, WANDB_SECRET, Row, base_projects,
                                           child_env, pretrain_reference, sh, timed, workspace)

REPO = Path(__file__).resolve().parents[3]
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


RENDEZVOUS = """
import json, os, sys, psutil
from tasks.train.parallel.parallelize import init_distributed, teardown
init_distributed(init_file=sys.argv[1])
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
                    DS_ACCELERATOR="cpu", OMP_NUM_THREADS="1", GLOO_SOCKET_IFNAME="lo")
    proc = sh([sys.executable, "-c", RENDEZVOUS, str(init_file)], REPO, env)
    bound = json.loads(proc.stdout.strip().splitlines()[-1])
    row = Row("network exposure", "training rendezvous (MASTER_ADDR=127.0.0.1)")
    row.checks = {"listens": bool(bound), "loopback only": {ip for ip, _ in bound} <= LOOPBACK}
    row.outcome = "listens on " + ", ".join(f"[{ip}]:{port}" if ":" in ip else f"{ip}:{port}" for ip, port in bound)
    row.lost = "—"
    row.details = {"bound": bound}
    return row


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


def pickled_model(tmp_root: Path) -> Row:
    """evaluate/sft/export read weights from safetensors only: a pickle planted as `model.pt`, or renamed to
    `model.safetensors`, is refused as weights and its payload never runs."""
    from tasks.eval.generate import load_model

    folder = tmp_root / "pickled-model" / "pretrain"
    shutil.rmtree(folder.parent, ignore_errors=True)
    marker = folder.parent / "ran"
    malicious(folder / "model.pt", marker)
    cfg = {"n_layers": 1, "d_model": 8, "n_heads": 2, "n_kv_heads": 2, "ffn_hidden": 24, "vocab_size": 16,
           "seq_len": 8}
    (folder / "config.json").write_text(json.dumps({"model": cfg}))
    errors = []
    for planted in ("model.pt", "model.safetensors"):
        if planted == "model.safetensors":
            (folder / "model.pt").rename(folder / planted)
        try:
            load_model(folder)
            errors.append("")
        except Exception as exc:  # noqa: BLE001 — any refusal counts; running the payload is the failure
            errors.append(f"{exc.__class__.__name__}: {exc}")
    row = Row("pickled code", "data/pretrain/model.pt or a pickle named model.safetensors (loaded by evaluate)")
    row.checks = {"model.pt never read": "no model.safetensors" in errors[0],
                  "pickle as .safetensors refused": errors[1] != "", "code did not run": not marker.exists()}
    row.outcome = "refused (weights are read from safetensors only); code did not run" if row.ok else "FAILED"
    row.lost = "—"
    row.details = {"errors": [e[:300] for e in errors]}
    return row


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


# ------------------------------------------------------------------------------------------ PII in token shards
def decoded_shards(mix_dir: Path) -> str:
    """Every train and val token shard of mix, decoded back to text with mix's own tokenizer."""
    from tasks.data.mixing.tokenizer import load_tokenizer

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
