"""benchmarks/gpu/: the one-script GPU run, checked without a GPU — shell syntax, every Python entry it calls exists
and takes the flags it passes, the table built from known parts, and (slow) the whole script in its CPU dry run."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
GPU = REPO / "benchmarks" / "gpu"
sys.path.insert(0, str(GPU))

from report import table  # noqa: E402  (benchmarks/gpu is no package)


def calls(script: str) -> dict[str, set[str]]:
    """Python entry -> the flags run.sh passes it (continuation lines joined; the TPUT arrays go to the
    throughput benchmark, whose every call expands them)."""
    text = script.replace("\\\n", " ")
    found: dict[str, set[str]] = {}
    for line in text.splitlines():
        for m in re.finditer(r'"\$PY" (benchmarks/[\w/]+\.py)([^;\n]*)', line):
            found.setdefault(m.group(1), set()).update(re.findall(r"(?<![\w-])--[a-z][\w-]*", m.group(2)))
    arrays = re.findall(r"^\s*TPUT=\((.*)\)$", script, re.M)
    found["benchmarks/pretrain_throughput.py"].update(f for a in arrays for f in re.findall(r"--[a-z][\w-]*", a))
    return found


def test_scripts_parse_and_every_entry_takes_its_flags():
    for name in ("run.sh", "prepare_wheels.sh"):
        proc = subprocess.run(["bash", "-n", str(GPU / name)], capture_output=True, text=True)
        assert proc.returncode == 0, proc.stderr
    entries = calls((GPU / "run.sh").read_text())
    assert {"benchmarks/pretrain_throughput.py", "benchmarks/gpu/pretrain_smoke.py", "benchmarks/gpu/snapshot.py",
            "benchmarks/gpu/report.py", "benchmarks/checkpoint_stall.py"} <= set(entries)
    assert {"--shape", "--device", "--json", "--precision", "--seq"} <= entries["benchmarks/pretrain_throughput.py"]
    for entry, flags in entries.items():
        if entry == "benchmarks/checkpoint_stall.py" and not (REPO / entry).exists():
            continue  # run.sh calls it only when present
        proc = subprocess.run([sys.executable, entry, "--help"], cwd=REPO, capture_output=True, text=True,
                              timeout=120)
        assert proc.returncode == 0, f"{entry}: {proc.stderr[-1500:]}"
        missing = {f for f in flags if not re.search(rf"{re.escape(f)}\b", proc.stdout)}
        assert not missing, f"{entry} does not take {sorted(missing)}"


def test_the_flag_check_catches_a_wrong_flag():
    """The extraction above sees what a typo would break."""
    script = (GPU / "run.sh").read_text().replace("--out \"$PARTS/pretrain.json\"", "--output \"$PARTS/p.json\"")
    assert "--output" in calls(script)["benchmarks/gpu/pretrain_smoke.py"]


def test_table_from_parts(tmp_path):
    (tmp_path / "setup.status").write_text("0 12 90")
    (tmp_path / "setup.log").write_text('noise\n{"python": "3.11.7", "cuda": "12.8", "gpus": 1, "found": '
                                        '{"torch": "2.13.0", "deepspeed": "0.19.8"}, "missing": []}\n')
    (tmp_path / "tput-124m.status").write_text("0 80 140")
    runs = [{"run": "engine", "tokens_per_s": 150_000.0, "mfu": 0.4, "peak_bytes": 3 * 2**30},
            {"run": "plain", "tokens_per_s": 200_000.0, "mfu": None, "peak_bytes": 2 * 2**30},
            {"run": "nanogpt", "tokens_per_s": 120_000.0, "mfu": 0.3, "peak_bytes": 2**30}]
    (tmp_path / "tput-124m.json").write_text(json.dumps({"args": {"shape": "gpt2-124m", "seq": 1024, "batch": 16,
                                                                  "precision": "bf16", "device": "cuda"},
                                                         "results": runs}))
    (tmp_path / "tput-350m.status").write_text("124 150 150")
    (tmp_path / "tput-350m.log").write_text("step 3\nstill compiling | slowly\n")
    (tmp_path / "pretrain.status").write_text("1 30 110")
    (tmp_path / "pretrain.json").write_text(json.dumps({
        "device": "NVIDIA H200", "flavor": "gpt2-124m", "param_count": 124e6, "seq_len": 512, "micro_batch": 8,
        "precision": "bf16", "steps": 2, "losses": [9.1234, 9.0], "peak_gib": 4.5, "wall_s": 20.5,
        "checks": {"finite": True, "checkpoint": False}}))
    (tmp_path / "ckpt-stall.status").write_text("absent 0 0")
    rows = table(tmp_path, 300, dry_run=False).splitlines()
    assert rows[2] == ("| setup | ok | 12 | python 3.11.7, torch 2.13.0 (CUDA 12.8), 1 GPUs, deepspeed 0.19.8 |")
    assert rows[3] == ("| tput-124m | ok | 80 | gpt2-124m seq 1024 × 16, bf16, cuda; engine 150,000 tok/s, MFU 40.0%, "
                       "3.0 GiB; (a) plain 200,000 tok/s, 2.0 GiB; (b) nanoGPT 120,000 tok/s, MFU 30.0%, 1.0 GiB; "
                       "engine/(a) 0.75×; engine/(b) 1.25× |")
    assert rows[4] == "| tput-350m | timed out (150 s) | 150 | still compiling / slowly |"
    assert rows[5] == ("| pretrain | failed (exit 1) | 30 | NVIDIA H200: tasks.pretrain.run, gpt2-124m (124M) seq 512 "
                       "× 8, bf16, 2 steps, loss 9.123 → 9.000, peak 4.5 GiB, 20.5 s; checks 1/2 (failed: "
                       "checkpoint) |")
    assert rows[6] == "| ckpt-stall | absent | - | benchmarks/checkpoint_stall.py not in this tree |"
    assert rows[7] == "| telemetry | not run | - |  |"
    assert rows[-1] == "whole script 300 s"


@pytest.mark.slow
def test_dry_run_on_cpu(tmp_path):
    """The whole script with tiny shapes on CPU, no wheels (this venv has every package): every part runs and
    the one table reports it."""
    if shutil.which("timeout") is None:
        pytest.skip("coreutils timeout missing")
    out = tmp_path / "out"
    env = {"PATH": "/usr/bin:/bin", "HOME": str(tmp_path), "OUT": str(out), "PYTHON": sys.executable,
           "GPU_WHEELS": str(tmp_path / "no-wheels"), "TMPDIR": str(tmp_path)}
    proc = subprocess.run(["bash", str(GPU / "run.sh"), "--dry-run"], cwd=tmp_path, env=env, capture_output=True,
                          text=True, timeout=600)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    rows = {r.split(" | ")[0].lstrip("| "): r.split(" | ") for r in proc.stdout.splitlines() if r.startswith("| ")}
    assert (out / "table.md").read_text().strip() == proc.stdout[proc.stdout.index("| part |"):].strip()
    stall = "ok" if (REPO / "benchmarks" / "checkpoint_stall.py").exists() else "absent"
    assert {k: v[1] for k, v in rows.items() if k != "part" and not k.startswith("---")} == {
        "setup": "ok", "tput-124m": "ok", "tput-350m": "ok", "pretrain": "ok", "ckpt-stall": stall,
        "telemetry": "ok"}
    assert "engine/(a)" in rows["tput-350m"][3] and "tiny seq 64 × 2, fp32, cpu" in rows["tput-350m"][3]
    assert "checks 4/4" in rows["pretrain"][3]
    assert json.loads((out / "parts" / "pretrain.json").read_text())["ok"] is True
    assert "dry run: tiny shapes on CPU" in proc.stdout
