"""What the DeepSpeed launcher's other hosts get of the stage's environment (tasks/train/remote_env.py): the ranks'
own variables and forgeline's, the offline and logging switches, the user's `.deepspeed_env` after them — never a
secret — and `--master_addr` from FORGELINE_MASTER_ADDR. The end-to-end case runs the real `deepspeed` CLI on a
two-host hostfile with a stand-in `pdsh` that records the command DeepSpeed would run on each host."""

from __future__ import annotations

import json
import os
import shlex
import stat
import sys
from pathlib import Path

from tasks.train.launch import Nodes, run_external
from tasks.train.remote_env import forwarded, write_env_file
from tasks.train.inputs.synthetic import make_job
from tests.helpers.parallel import job_spec

ENV = {"FORGELINE_FAULT": "pretrain.step_done=3", "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1",
       "WANDB_MODE": "offline", "GLOO_SOCKET_IFNAME": "ib0", "OMP_NUM_THREADS": "4", "TOKENIZERS_PARALLELISM": "false",
       "HF_TOKEN": "hf_secret", "WANDB_API_KEY": "k3y", "FORGELINE_DB_PASSWORD": "pw", "AWS_ACCESS_KEY_ID": "AKIA",
       "HOME": "/home/u", "CUDA_VISIBLE_DEVICES": "0,1", "WANDB_NOTES": 'say "hi" $USER', "PATH": "/usr/bin"}


def test_forwarded_variables_leave_out_secrets_host_specific_and_unquotable_ones(caplog):
    out = forwarded(ENV)
    assert out == {"FORGELINE_FAULT": "pretrain.step_done=3", "GLOO_SOCKET_IFNAME": "ib0", "HF_HUB_OFFLINE": "1",
                   "OMP_NUM_THREADS": "4", "TOKENIZERS_PARALLELISM": "false", "TRANSFORMERS_OFFLINE": "1",
                   "WANDB_MODE": "offline"}
    assert "WANDB_NOTES" in caplog.text and 'say "hi"' not in caplog.text  # named, its value never logged


def test_env_file_puts_the_users_lines_last_in_deepspeeds_order(tmp_path):
    home, root = tmp_path / "home", tmp_path / "project"
    home.mkdir()
    root.mkdir()
    (home / ".deepspeed_env").write_text("NCCL_IB_HCA=mlx5\nOMP_NUM_THREADS=8\n")
    (root / ".deepspeed_env").write_text("# a comment\nWANDB_MODE=online\n")
    path = write_env_file(tmp_path / "launch" / "deepspeed_env", root, {"OMP_NUM_THREADS": "4",
                                                                         "WANDB_MODE": "offline"}, home=home)
    assert path.is_absolute()
    assert path.read_text().splitlines() == ["OMP_NUM_THREADS=4", "WANDB_MODE=offline", "NCCL_IB_HCA=mlx5",
                                             "OMP_NUM_THREADS=8", "WANDB_MODE=online"]
    (root / "mine.env").write_text("X=1\n")  # a user's DS_ENV_FILE names their file instead
    path = write_env_file(tmp_path / "launch" / "deepspeed_env", root, {"DS_ENV_FILE": "mine.env"}, home=home)
    assert path.read_text() == "X=1\n"


RECORDER = """#!{python}
import json, sys
with open({record!r}, "a") as fh:
    fh.write(json.dumps(sys.argv[1:]) + "\\n")
"""


def test_deepspeed_cli_exports_them_to_every_host(tmp_path, mix_dir, monkeypatch):
    """`deepspeed --hostfile` (2 hosts) through the stage's run_external: the command its pdsh runner sends to
    each host exports the forwarded variables and the CPU ranks' own, not the secrets, and meets at
    FORGELINE_MASTER_ADDR (no `ssh host-a hostname -I` to guess the first host's address)."""
    bindir = tmp_path / "bin"
    bindir.mkdir()
    for tool in ("pdsh", "ssh"):  # stand-ins that record their arguments and succeed
        (bindir / tool).write_text(RECORDER.format(python=sys.executable, record=str(tmp_path / f"{tool}.jsonl")))
        (bindir / tool).chmod(stat.S_IRWXU)
    hostfile = tmp_path / "hostfile"
    hostfile.write_text("host-a slots=1\nhost-b slots=1\n")
    spec = job_spec({"dp": 2, "launcher": "deepspeed", "hostfile": str(hostfile), "accelerator": "cpu"})
    job = make_job(tmp_path / "run", mix_dir, spec, 5)
    for name, value in ENV.items():
        if name not in ("HOME", "PATH", "CUDA_VISIBLE_DEVICES"):
            monkeypatch.setenv(name, value)
    monkeypatch.setenv("PATH", f"{bindir}{os.pathsep}{os.environ['PATH']}")
    monkeypatch.setenv("HOME", str(tmp_path / "home"))  # no user file
    monkeypatch.setenv("FORGELINE_MASTER_ADDR", "10.1.2.3")
    monkeypatch.delenv("DS_ENV_FILE", raising=False)
    (tmp_path / "launch").mkdir()
    assert run_external(job, tmp_path / "launch", 29511, Nodes(), tmp_path) is None
    ssh = [json.loads(line) for line in (tmp_path / "ssh.jsonl").read_text().splitlines()]
    assert ssh == [["-o", "PasswordAuthentication=no", "host-a", "hostname"]]  # its reachability check only
    [args] = [json.loads(line) for line in (tmp_path / "pdsh.jsonl").read_text().splitlines()]
    assert args[:5] == ["-S", "-f", "1024", "-w", "host-a,host-b"]
    remote = " ".join(args[5:])
    exports = dict(e.split(" ", 1)[1].split("=", 1) for e in remote.split("; ") if e.startswith("export "))
    want = {"DS_ACCELERATOR": "cpu", "OMP_NUM_THREADS": "1", "FORGELINE_FAULT": "pretrain.step_done=3",
            "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1", "WANDB_MODE": "offline", "GLOO_SOCKET_IFNAME": "ib0",
            "FORGELINE_MASTER_ADDR": "10.1.2.3"}
    assert {k: exports.get(k) for k in want} == want, exports
    for secret in ("hf_secret", "k3y", "AKIA", "=pw"):
        assert secret not in remote
    words = shlex.split(remote.split("deepspeed.launcher.launch", 1)[1])
    assert "--master_addr=10.1.2.3" in words and "tasks.train.worker" in words
