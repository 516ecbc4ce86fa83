"""What the lent GPU box lacks must not stop a GPU part: its last run lost the pretrain part to `import wandb`
(telemetry's default `wandb: offline`, on a box without wandb). Checked on a CPU with a Python that sees only the
box's packages (benchmarks/gpu/box_env.py), and the telemetry sink's behaviour without wandb."""

from __future__ import annotations

import json
import logging
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tasks.train.loop.telemetry import MetricsLogger

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from benchmarks.gpu.box_env import box_python, carried, closure  # noqa: E402

ABSENT_ON_THE_BOX = ("wandb", "dvc", "prefect", "great_expectations", "pandas", "datasketch", "matplotlib")


@pytest.fixture(scope="module")
def box(tmp_path_factory) -> Path:
    return box_python(tmp_path_factory.mktemp("box") / "venv")


def box_env(tmp_path: Path) -> dict[str, str]:
    """The environment run.sh gives a part: the project on PYTHONPATH, no WANDB_MODE (nothing tells telemetry to
    stay off), a home of its own."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("WANDB_", "PYTHON"))}
    return {**env, "PYTHONPATH": str(REPO), "HOME": str(tmp_path), "DS_ACCELERATOR": "cpu", "OMP_NUM_THREADS": "1"}


def test_metrics_logger_offline_without_wandb_keeps_the_jsonl(tmp_path, monkeypatch, caplog):
    monkeypatch.setitem(sys.modules, "wandb", None)  # `import wandb` raises ImportError, as where it is absent
    with caplog.at_level(logging.WARNING, logger="forgeline.telemetry"):
        with MetricsLogger(tmp_path, wandb_mode="offline") as logger:
            logger.log(1, {"loss": 2.5})
            assert logger.wandb_run is None
    assert [json.loads(x)["loss"] for x in (tmp_path / "metrics.jsonl").read_text().splitlines()] == [2.5]
    assert "wandb is not installed" in caplog.text
    with pytest.raises(RuntimeError, match="online, but wandb is not installed"):
        MetricsLogger(tmp_path / "online", wandb_mode="online")


def test_the_box_python_has_the_box_packages_and_nothing_else(box, tmp_path):
    assert {"deepspeed", "pydantic", "PyYAML", "pyarrow", "nvidia-ml-py"} <= set(carried())
    names = {d.metadata["Name"].lower() for d in closure(["torch"])[0]}
    assert "torch" in names and "wandb" not in names
    probe = ("import importlib.util, json, sys\n"
             "print(json.dumps({m: importlib.util.find_spec(m) is not None for m in sys.argv[1:]}))")
    mods = ["torch", "deepspeed", "pydantic", "yaml", "pyarrow", "tokenizers", *ABSENT_ON_THE_BOX]
    proc = subprocess.run([str(box), "-c", probe, *mods], capture_output=True, text=True, env=box_env(tmp_path),
                          timeout=120)
    assert proc.returncode == 0, proc.stderr[-2000:]
    found = json.loads(proc.stdout)
    assert {m for m, ok in found.items() if ok} == {"torch", "deepspeed", "pydantic", "yaml", "pyarrow", "tokenizers"}


def test_the_pretrain_part_runs_with_only_the_box_packages(box, tmp_path):
    """benchmarks/gpu/pretrain_smoke.py (tasks.pretrain.run end to end: engine, telemetry with its default wandb
    mode, checkpoint, weights) on CPU, in a Python without wandb, dvc, prefect, great expectations, pandas."""
    out = tmp_path / "pretrain.json"
    proc = subprocess.run([str(box), "benchmarks/gpu/pretrain_smoke.py", "--device", "cpu", "--out", str(out)],
                          cwd=REPO, capture_output=True, text=True, env=box_env(tmp_path), timeout=300)
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-3000:]
    assert json.loads(out.read_text())["ok"] is True
    assert "wandb is not installed" in proc.stderr  # the default `wandb: offline` met the box and went on
