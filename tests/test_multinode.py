"""The multi-node path on one machine: the stage's launch on a "head" node starts its torchrun agent (c10d
rendezvous on 127.0.0.1) and logs the command for the other node; a second agent started from that logged line
joins. Each node has its own copy of the code and its own working directory; the data, outputs, checkpoints and
markers are one shared folder (as on a cluster with a shared filesystem). dp 2 × tp 2 with ZeRO-1 over 2 nodes
× 2 ranks.

Checked: global ranks 0..3 with local ranks 0..1 on each node; every file in the shared folder has exactly one
writer, and it is the rank that owns it (shared outputs rank 0, per-rank files their rank; node 1's local rank 0
writes only its own files) — from a write audit of every process (tests/helpers/write_audit); nothing lands in a
node's working directory; losses and weights equal the same run launched on one node (spawn); a run killed after
a checkpoint and relaunched on both nodes ends byte-identical. The DeepSpeed launcher's per-host command (what
its pdsh runner starts on each host of a hostfile) gives the same ranks, writers and bytes."""

from __future__ import annotations

import base64
import json
import os
import re
import shlex
import shutil
import signal
import subprocess
import sys
import time
from collections import defaultdict
from pathlib import Path

import pytest

from specs.pretrain import PretrainJob
from specs.ranks import JobFile
from tasks.train.launch import Nodes, build_command, collect, launch, resolved_precision, wait_for_markers
from tasks.train.launch import free_port
from tasks.train.inputs.synthetic import make_job, synthetic_mix

REPO = Path(__file__).resolve().parents[1]
AUDIT = REPO / "tests" / "helpers" / "write_audit"
SEED = 5
DP, TP, PER_NODE = 2, 2, 2
SPEC = {
    "model": {"flavor": "tiny", "n_layers": 2, "d_model": 32, "n_heads": 4, "n_kv_heads": 2},
    "parallel": {"dp": DP, "tp": TP, "zero_stage": 1, "launcher": "torchrun"},
    "train": {"steps": 4, "micro_batch_size": 2, "log_every": 1, "eval_every": 2, "eval_batches": 2,
              "checkpoint_every": 2, "keep_checkpoints": 3, "optim": {"warmup_steps": 1}},
}
OUTPUTS = ("model.safetensors", "metrics.jsonl", "report.json", "config.json", "ds_config.json", "incidents.jsonl")
# The stage's process on the head node: what tasks/pretrain.py does around the launch.
HEAD = """
import logging, sys
from pathlib import Path
from specs.ranks import JobFile
from tasks.train.launch import launch
logging.basicConfig(level=logging.INFO, format="%(name)s: %(message)s")
job = JobFile.loads(Path(sys.argv[1]).read_text())
result = launch(job, Path(sys.argv[2]), root=Path.cwd())
Path(sys.argv[3]).write_text(result.model_dump_json())
"""
LOGGED = re.compile(r"other 1 nodes, .*?: (python .*)$", re.M)


# ------------------------------------------------------------------------------------------------ fast checks
def test_node_commands_and_refusals(monkeypatch, tmp_path):
    job = tmp_path / "job.json"
    cmd = build_command("torchrun", 8, job, 29501, python="/venv/bin/python", nodes=Nodes(2, "head:29400"))
    assert cmd == ["/venv/bin/python", "-m", "torch.distributed.run", "--nproc_per_node", "4", "--nnodes", "2",
                   "--rdzv_backend", "c10d", "--rdzv_endpoint", "head:29400", "--rdzv_id", "forgeline-pretrain",
                   "-m", "tasks.train.worker", "--job", str(job)]
    single = build_command("torchrun", 8, job, 29501, python="/venv/bin/python", nodes=Nodes.from_env())
    assert single[3:7] == ["--nproc_per_node", "8", "--master_port", "29501"]
    monkeypatch.setenv("FORGELINE_NNODES", "2")
    monkeypatch.setenv("FORGELINE_RDZV_ENDPOINT", "10.0.0.1:29400")
    assert Nodes.from_env() == Nodes(2, "10.0.0.1:29400")
    with pytest.raises(ValueError, match="do not split evenly over 2 nodes"):
        build_command("torchrun", 3, job, 1, nodes=Nodes.from_env())
    for bad, message in (("0", "whole number"), ("two", "whole number")):
        monkeypatch.setenv("FORGELINE_NNODES", bad)
        with pytest.raises(ValueError, match=message):
            Nodes.from_env()
    monkeypatch.setenv("FORGELINE_NNODES", "2")
    monkeypatch.setenv("FORGELINE_RDZV_ENDPOINT", "head")  # no port
    with pytest.raises(ValueError, match="needs FORGELINE_RDZV_ENDPOINT=host:port"):
        Nodes.from_env()
    # spawn is one node: refused before the markers folder is touched
    monkeypatch.setenv("FORGELINE_RDZV_ENDPOINT", "127.0.0.1:1")
    spec = PretrainJob.model_validate({**SPEC, "parallel": {**SPEC["parallel"], "launcher": "spawn"}})
    run = make_job(tmp_path / "s", tmp_path / "mix", spec, SEED)
    Path(run.marker_dir).mkdir(parents=True)
    (Path(run.marker_dir) / "keep").write_text("x")
    with pytest.raises(ValueError, match="launcher: torchrun .*spawn is one node"):
        launch(run, tmp_path / "launch")
    assert (Path(run.marker_dir) / "keep").exists()


# ------------------------------------------------------------------------------------------- two node agents
def node_checkout(folder: Path) -> Path:
    """A node's own copy of the code (what it imports) and its working directory."""
    for package in ("tasks", "specs"):
        shutil.copytree(REPO / package, folder / package, ignore=shutil.ignore_patterns("__pycache__"))
    return folder


def node_env(node: Path, audit: Path, root: Path, fault: str | None) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("FORGELINE_", "PET_", "TORCHELASTIC"))}
    env.update(PYTHONPATH=os.pathsep.join([str(node), str(AUDIT)]), GLOO_SOCKET_IFNAME="lo",
               FORGELINE_AUDIT_DIR=str(audit), FORGELINE_AUDIT_ROOT=str(root), PYTHONDONTWRITEBYTECODE="1")
    if fault:
        env["FORGELINE_FAULT"] = fault
    return env


def finish(proc: subprocess.Popen, timeout: float) -> int | None:
    """The exit code, or None after killing the session this test started (the agent and its workers) when it
    outlives `timeout`."""
    try:
        return proc.wait(timeout=timeout)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()
        return None


def two_nodes(base: Path, job_json: str, run: str, fault: str | None = None
              ) -> tuple[int | None, int | None, Path, Path]:
    """The head node runs the stage's launch with FORGELINE_NNODES=2; node 1 runs the command the head logged.
    Returns (head exit code, node 1 exit code, the result file, the audit folder)."""
    shared, nodes, driver = base / "shared", [base / "node0", base / "node1"], base / "driver"
    audit, result = base / f"audit-{run}", driver / f"result-{run}.json"
    audit.mkdir()
    driver.mkdir(exist_ok=True)
    (driver / "job-in.json").write_text(job_json)
    env = node_env(nodes[0], audit, base, fault)
    env.update(FORGELINE_NNODES="2", FORGELINE_RDZV_ENDPOINT=f"127.0.0.1:{free_port()}")
    head_log = driver / f"head-{run}.log"
    with open(head_log, "w") as log:
        head = subprocess.Popen([sys.executable, "-c", HEAD, str(driver / "job-in.json"), str(shared / "launch"),
                                 str(result)], cwd=nodes[0], env=env, stdout=log, stderr=subprocess.STDOUT,
                                start_new_session=True)
    other, codes = None, (None, None)
    try:
        deadline = time.monotonic() + 180
        while not (m := LOGGED.search(head_log.read_text())) and head.poll() is None and time.monotonic() < deadline:
            time.sleep(0.2)
        assert m, head_log.read_text()[-3000:]
        cmd = shlex.split(m.group(1))
        with open(driver / f"node1-{run}.log", "w") as log:
            other = subprocess.Popen([sys.executable, *cmd[1:]], cwd=nodes[1],
                                     env=node_env(nodes[1], audit, base, fault), stdout=log,
                                     stderr=subprocess.STDOUT, start_new_session=True)
        codes = finish(head, 400), finish(other, 120)
    finally:
        finish(head, 0.1)
        if other is not None:
            finish(other, 0.1)
    return codes[0], codes[1], result, audit


def audit_rows(audit: Path) -> list[dict]:
    return [json.loads(line) for f in sorted(audit.glob("*.jsonl")) for line in f.read_text().splitlines()]


def expected_writer(rel: str) -> int | None:
    """Who must write a shared file, derived from its name (rank = dp_rank · tp + tp_rank with pp = 1)."""
    name = rel.rsplit("/", 1)[-1]
    if rel.startswith("launch/"):
        return None  # the job file: the stage's own process
    if m := re.fullmatch(r"rank-(\d+)\.json|rng-rank(\d+)\.pt", name):
        return int(m.group(1) or m.group(2))
    if m := re.fullmatch(r"zero_pp_rank_(\d+)_mp_rank_(\d+)_optim_states\.pt", name):
        return int(m.group(1)) * TP + int(m.group(2))
    if m := re.fullmatch(r"pp000-tp(\d+)-dp(\d+)-\d+\.safetensors", name):  # elastic.py's layout-free state
        return int(m.group(2)) * TP + int(m.group(1))
    if m := re.fullmatch(r"mp_rank_(\d+)_model_states\.pt|pp000-tp(\d+)\.safetensors", name):
        return int(m.group(1) or m.group(2))
    return 0


def check_ranks_and_writers(rows: list[dict], base: Path) -> dict[str, int]:
    """Asserts the rank placement and the single, owning writer of every file; returns path -> write count."""
    workers = {(r["pid"], r["node"], r["local_rank"], r["rank"], r["cwd"]) for r in rows if r["rank"] is not None}
    placement = sorted((int(node), int(local), int(rank)) for _, node, local, rank, _ in workers)
    assert placement == [(0, 0, 0), (0, 1, 1), (1, 0, 2), (1, 1, 3)]  # one process each
    cwds = {int(node): cwd for _, node, _, _, cwd in workers}
    assert len({cwd for *_, cwd in workers}) == 2 and set(cwds.values()) == {str(base / "node0"), str(base / "node1")}
    shared = str(base / "shared") + "/"
    writers: dict[str, set] = defaultdict(set)
    counts: dict[str, int] = defaultdict(int)
    for r in rows:
        if ".tmp-" in r["path"] or r["path"].startswith(str(base / "driver") + "/"):
            continue  # temp files (their renames count) and the test's own files
        assert r["path"].startswith(shared), f"written outside the shared folder: {r}"  # node dirs stay clean
        rel = r["path"][len(shared):]
        writers[rel].add(None if r["rank"] is None else int(r["rank"]))
        counts[rel] += 1
    wrong = {rel: sorted(w, key=str) for rel, w in writers.items() if w != {expected_writer(rel)}}
    assert not wrong, wrong
    node1_local0 = next(int(rank) for _, node, local, rank, _ in workers if (node, local) == ("1", "0"))
    mine = sorted(rel for rel, w in writers.items() if w == {node1_local0})
    assert mine and all(re.search(r"rank-00002\.json|rng-rank00002\.pt|zero_pp_rank_1_mp_rank_00_|"
                                  r"elastic/pp000-tp000-dp001-", p) for p in mine)
    return counts


def test_the_head_waits_for_ranks_on_other_nodes(tmp_path):
    """A multi-node torchrun agent returns when its own workers are done; rank 0 may live on another node and
    still be merging: the head waits for every rank's marker (a failed rank writes one too), up to a deadline,
    after which `collect` names the missing ranks (as for a crashed one)."""
    import threading

    from tasks.train.loop.trainer import marker_path

    markers = tmp_path / "markers"
    markers.mkdir()
    marker_path(markers, 1).write_text("{}")
    late = threading.Timer(0.3, lambda: marker_path(markers, 0).write_text("{}"))
    late.start()
    t0 = time.monotonic()
    assert wait_for_markers(markers, 2, timeout_s=30, poll_s=0.05) and time.monotonic() - t0 < 10
    late.join()
    t0 = time.monotonic()
    assert not wait_for_markers(markers, 3, timeout_s=0.3, poll_s=0.05) and time.monotonic() - t0 < 5


def test_audit_records_writes_and_the_check_catches_a_second_writer(tmp_path):
    """The audit sees the three ways files get written (open, rename, torch.save); the checker refuses a shared
    output written by another rank than 0, a per-rank file written by a peer, and a write into a node's folder."""
    audit, shared = tmp_path / "audit", tmp_path / "shared"
    audit.mkdir()
    shared.mkdir()
    code = ("import os, torch; open('a.txt', 'w').write('x'); open('b.tmp', 'w').write('y'); "
            "os.replace('b.tmp', 'b.txt'); torch.save({}, 'c.pt'); open('a.txt').read()")
    env = {**os.environ, "PYTHONPATH": str(AUDIT), "FORGELINE_AUDIT_DIR": str(audit),
           "FORGELINE_AUDIT_ROOT": str(tmp_path), "RANK": "3", "LOCAL_RANK": "1", "GROUP_RANK": "1"}
    subprocess.run([sys.executable, "-c", code], cwd=shared, env=env, check=True, timeout=120)
    rows = audit_rows(audit)
    assert sorted((r["op"], Path(r["path"]).name) for r in rows) == [
        ("open", "a.txt"), ("open", "b.tmp"), ("rename", "b.txt"), ("torch.save", "c.pt")]
    assert {(r["rank"], r["local_rank"], r["node"]) for r in rows} == {("3", "1", "1")}

    def row(rank, local, node, rel, where="shared"):
        return {"pid": 100 + rank, "op": "rename", "path": str(tmp_path / where / rel), "rank": str(rank),
                "local_rank": str(local), "node": str(node), "cwd": str(tmp_path / f"node{node}")}

    good = [row(0, 0, 0, "out/config.json"), row(1, 1, 0, "markers/rank-00001.json"),
            row(2, 0, 1, "markers/rank-00002.json"), row(3, 1, 1, "checkpoints/step000002/rng-rank00003.pt"),
            row(2, 0, 1, "checkpoints/step000002/zero_pp_rank_1_mp_rank_00_optim_states.pt")]
    assert check_ranks_and_writers(good, tmp_path)["out/config.json"] == 1
    for bad in (row(2, 0, 1, "out/config.json"), row(1, 1, 0, "markers/rank-00002.json"),
                row(2, 0, 1, "junk.log", where="node1")):
        with pytest.raises(AssertionError):
            check_ranks_and_writers(good + [bad], tmp_path)


@pytest.fixture(scope="module")
def setup(tmp_path_factory):
    base = tmp_path_factory.mktemp("multinode")
    mix = synthetic_mix(base / "mix")
    return base, mix, PretrainJob.model_validate(SPEC)


def fresh(base: Path, mix: Path, spec: PretrainJob, name: str) -> tuple[Path, str]:
    folder = base / name
    node_checkout(folder / "node0")
    node_checkout(folder / "node1")
    return folder, JobFile.dumps(make_job(folder / "shared", mix, spec, SEED))


def outputs(out: Path) -> dict[str, bytes]:
    return {name: (out / name).read_bytes() for name in OUTPUTS}


@pytest.fixture(scope="module")
def two_node_run(setup):
    """The uninterrupted two-node torchrun run: (its folder, rank 0's result, the audit rows, the outputs)."""
    base, mix, spec = setup
    folder, job_json = fresh(base, mix, spec, "whole")
    head_rc, other_rc, result_file, audit = two_nodes(folder, job_json, "whole")
    assert (head_rc, other_rc) == (0, 0), (folder / "driver" / "head-whole.log").read_text()[-3000:]
    return folder, json.loads(result_file.read_text()), audit_rows(audit), outputs(folder / "shared" / "out")


def same_but_launcher(ours: dict[str, bytes], theirs: dict[str, bytes], launchers: tuple[str, str]) -> None:
    """Equal outputs, byte for byte, except the launcher named in report.json's spec."""
    assert {k: v for k, v in theirs.items() if k != "report.json"} == {k: v for k, v in ours.items()
                                                                        if k != "report.json"}
    report, ref = json.loads(ours["report.json"]), json.loads(theirs["report.json"])
    assert (report["spec"]["parallel"].pop("launcher"), ref["spec"]["parallel"].pop("launcher")) == launchers
    assert report == ref  # every figure in it is the same


@pytest.mark.slow
def test_ranks_and_one_writer_per_file(two_node_run):
    folder, result, rows, _ = two_node_run
    assert result["rank0"] and len(result["losses"]) == 4 and result["resumed_from"] is None
    launches = list((folder / "shared" / "markers").iterdir())  # this launch's folder only
    assert len(launches) == 1 and re.fullmatch(r"launch-[0-9a-f]{12}", launches[0].name), launches
    assert sorted(p.name for p in launches[0].iterdir()) == [f"rank-{r:05d}.json" for r in range(4)]
    counts = check_ranks_and_writers(rows, folder)
    for name in ("model.safetensors", "report.json", "config.json", "ds_config.json"):
        assert counts[f"out/{name}"] == 1, name  # written once, not once per node
    assert counts["checkpoints/step000002/mp_rank_00_model_states.pt"] == 1
    assert counts["checkpoints/step000002/forgeline.json"] == 1


@pytest.mark.slow
def test_equal_to_the_same_run_on_one_node(two_node_run, setup):
    base, mix, spec = setup
    _, result, _, ours = two_node_run
    one = make_job(base / "one-node", mix, spec.model_copy(update={"parallel": spec.parallel.model_copy(
        update={"launcher": "spawn"})}), SEED)
    single = launch(one, base / "one-node" / "launch")  # the default launcher, one node
    assert single.losses == result["losses"]
    same_but_launcher(ours, outputs(Path(one.out_dir)), ("torchrun", "spawn"))


@pytest.mark.slow
def test_killed_on_both_nodes_resumes_to_the_same_end(two_node_run, setup):
    base, mix, spec = setup
    _, result, _, ours = two_node_run
    folder, job_json = fresh(base, mix, spec, "killed")
    head_rc, _, _, _ = two_nodes(folder, job_json, "killed", fault="pretrain.step_done=3")
    assert head_rc != 0
    ckpts = folder / "shared" / "checkpoints"
    assert sorted(p.name for p in ckpts.glob("step*")) == ["step000000", "step000002"]
    assert not (folder / "shared" / "out" / "model.safetensors").exists()
    head_rc, other_rc, result_file, audit = two_nodes(folder, job_json, "resumed")
    assert (head_rc, other_rc) == (0, 0), (folder / "driver" / "head-resumed.log").read_text()[-3000:]
    resumed = json.loads(result_file.read_text())
    assert resumed["resumed_from"] == "step000002" and resumed["start_step"] == 2
    assert resumed["losses"] == result["losses"][2:]
    assert outputs(folder / "shared" / "out") == ours
    check_ranks_and_writers(audit_rows(audit), folder)


@pytest.mark.slow
def test_deepspeed_launcher_per_node_commands(two_node_run, setup):
    """What the DeepSpeed launcher's pdsh runner starts on each host of a 2-host hostfile (`deepspeed.launcher
    .launch --world_info=... --node_rank=N --no_local_rank --module tasks.train.worker`), here as two local
    processes: the same ranks, writers and outputs as the torchrun run."""
    base, mix, spec = setup
    _, _, _, ours = two_node_run
    ds_spec = spec.model_copy(update={"parallel": spec.parallel.model_copy(update={"launcher": "deepspeed"})})
    ds_spec = resolved_precision(ds_spec)  # what the stage's launch does before it writes the job file
    folder, job_json = fresh(base, mix, ds_spec, "deepspeed")
    shared, audit, port = folder / "shared", folder / "audit-deepspeed", free_port()
    audit.mkdir()
    (shared / "markers").mkdir(parents=True, exist_ok=True)
    (shared / "launch").mkdir()
    (shared / "launch" / "job.json").write_text(job_json)
    info = base64.urlsafe_b64encode(json.dumps({"host-a": [0, 1], "host-b": [0, 1]}).encode()).decode()
    procs = []
    for n in (0, 1):
        cmd = [sys.executable, "-u", "-m", "deepspeed.launcher.launch", f"--world_info={info}", f"--node_rank={n}",
               "--master_addr=127.0.0.1", f"--master_port={port}", "--no_local_rank", "--module",
               "tasks.train.worker", "--job", str(shared / "launch" / "job.json")]
        env = {**node_env(folder / f"node{n}", audit, folder, None), "DS_ACCELERATOR": "cpu", "OMP_NUM_THREADS": "1"}
        with open(folder / f"ds-node{n}.log", "w") as log:
            procs.append(subprocess.Popen(cmd, cwd=folder / f"node{n}", env=env, stdout=log,
                                          stderr=subprocess.STDOUT, start_new_session=True))
    codes = [finish(proc, 400) for proc in procs]
    assert codes == [0, 0], (folder / "ds-node0.log").read_text()[-3000:]
    assert collect(shared / "markers", 4).rank0
    check_ranks_and_writers(audit_rows(audit), folder)
    same_but_launcher(ours, outputs(shared / "out"), ("torchrun", "deepspeed"))
