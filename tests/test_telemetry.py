"""Telemetry: FLOPs/MFU arithmetic, the peak table, throughput, metrics.jsonl and wandb (NVML: test_nvml.py)."""

from __future__ import annotations

import json

import pytest

from specs.pretrain import ModelSpec
from specs.architecture import ModelConfig, flops_per_token, transformer_flops_per_token
from tasks.train.loop.telemetry import (
    DEVICE_PEAK_TFLOPS, MetricsLogger, Throughput, UnknownDeviceError, canonical_device, mfu, peak_flops,
)


def test_mfu_of_gpt2_124m_on_h100():
    # Matmul weights: 12 blocks × (4·768² attention + 3·768·2048 SwiGLU) + the 50257·768 LM head (tied, still a
    # matmul); attention: 12·L·d·T with T = 1024.
    n = 12 * (4 * 768**2 + 3 * 768 * 2048) + 50257 * 768
    fpt = flops_per_token(ModelConfig.from_spec(ModelSpec(flavor="gpt2-124m"), 50257, 1024))
    assert fpt == transformer_flops_per_token(n, 12, 768, 1024) == 6 * n + 12 * 12 * 768 * 1024 == 854_438_400
    peak = peak_flops("NVIDIA H100 80GB HBM3", "bf16")
    assert peak.flops == 989.4e12 and "h100-sxm" in peak.reason
    # 8 GPUs together at 400k tokens/s: 400e3 · 854.4e6 / (8 · 989.4e12) ≈ 4.3 % MFU.
    value = mfu(400_000, fpt, peak.flops, 8)
    assert value == pytest.approx(400_000 * 854_438_400 / (8 * 989.4e12)) and value == pytest.approx(0.0432, abs=1e-4)
    assert mfu(400_000, fpt, None, 8) is None


@pytest.mark.parametrize("name, key", [
    ("NVIDIA H100 80GB HBM3", "h100-sxm"), ("NVIDIA H100 PCIe", "h100-pcie"), ("NVIDIA H200", "h200"),
    ("NVIDIA H100 NVL", "h100-nvl"), ("NVIDIA H200 NVL", "h200-nvl"), ("NVIDIA GH200 480GB", "h200"),
    ("NVIDIA A100-SXM4-80GB", "a100"), ("NVIDIA A10G", "a10g"), ("NVIDIA A10", "a10"), ("NVIDIA L40S", "l40s"),
    ("NVIDIA L4", "l4"), ("Tesla V100-SXM2-16GB", "v100"), ("NVIDIA GeForce RTX 4090", "rtx-4090"),
    ("AMD Instinct MI300X", "mi300x"), ("cpu", "cpu"), ("a100", "a100"),
])
def test_device_names_map_to_table_keys(name, key):
    assert canonical_device(name) == key


def test_unknown_device_is_refused_with_the_known_list_and_the_way_out():
    with pytest.raises(UnknownDeviceError) as exc:
        peak_flops("NVIDIA Quantum Q1000", "bf16")
    msg = str(exc.value)
    assert "h100-sxm" in msg and "mi300x" in msg and "device_peak_tflops" in msg
    with pytest.raises(UnknownDeviceError, match="no bf16 peak"):
        peak_flops("Tesla V100-SXM2-32GB", "bf16")
    explicit = peak_flops("NVIDIA Quantum Q1000", "bf16", device_peak_tflops=500)
    assert explicit.flops == 500e12 and "explicit" in explicit.reason
    assert all(all(v > 0 for v in table.values()) for table in DEVICE_PEAK_TFLOPS.values())


def test_cpu_has_no_mfu_unless_a_peak_is_given():
    cpu = peak_flops("cpu", "fp32")
    assert cpu.flops is None and "no MFU" in cpu.reason
    assert peak_flops("cpu", "fp32", device_peak_tflops=1.5).flops == 1.5e12


def test_throughput_excludes_warmup_and_uses_a_sliding_window():
    now = [0.0]
    meter = Throughput(window=3, warmup_steps=2, clock=lambda: now[0])
    for dt in (5.0, 4.0):  # slow warmup steps (compilation) are not counted
        now[0] += dt
        meter.update(1000)
    assert meter.tokens_per_s is None
    for _ in range(2):
        now[0] += 1.0
        meter.update(1000)
    assert meter.tokens_per_s == pytest.approx(1000.0) and meter.step_time == pytest.approx(1.0)
    for _ in range(3):  # the window now holds only the last 3 steps of 0.5 s
        now[0] += 0.5
        meter.update(1000)
    assert meter.tokens_per_s == pytest.approx(2000.0)
    now[0] += 60  # an evaluation pause
    meter.restart()
    now[0] += 0.25
    meter.update(1000)
    assert meter.tokens_per_s == pytest.approx(4000.0)


def test_metrics_logger_disabled_writes_jsonl_and_resumes(tmp_path):
    with MetricsLogger(tmp_path, wandb_mode="disabled") as logger:
        for step in (10, 20, 30):
            logger.log(step, {"loss": 3.0 - step / 100, "tokens_per_s": 1e5, "mfu": None})
        logger.log(40, {"loss": float("nan")})
        assert logger.wandb_run is None
    rows = [json.loads(line) for line in (tmp_path / "metrics.jsonl").read_text().splitlines()]
    assert [r["step"] for r in rows] == [10, 20, 30, 40] and rows[0]["loss"] == 2.9 and rows[3]["loss"] is None
    # A retry resumed from the step-20 checkpoint rewrites steps after 20 once.
    with MetricsLogger(tmp_path, wandb_mode="disabled", resume_step=20) as logger:
        logger.log(30, {"loss": 2.5})
    rows = [json.loads(line) for line in (tmp_path / "metrics.jsonl").read_text().splitlines()]
    assert [(r["step"], r["loss"]) for r in rows] == [(10, 2.9), (20, 2.8), (30, 2.5)]


def test_metrics_logger_offline_wandb_stays_in_the_run_folder(tmp_path, monkeypatch):
    for var, sub in (("WANDB_CONFIG_DIR", "cfg"), ("WANDB_CACHE_DIR", "cache"), ("WANDB_DATA_DIR", "data")):
        monkeypatch.setenv(var, str(tmp_path / "wandb-home" / sub))
    monkeypatch.setenv("WANDB_MODE", "offline")
    monkeypatch.setenv("WANDB_SILENT", "true")
    secret = "sk-forgeline-test-0123456789abcdef"
    monkeypatch.setenv("FORGELINE_TEST_API_KEY", secret)
    run_dir = tmp_path / "run"
    config = {"model": {"flavor": "tiny"}, "train": {"steps": 3}}
    with MetricsLogger(run_dir, wandb_mode="offline", run_name="t", config=config) as logger:
        for step in (1, 2, 3):
            logger.log(step, {"loss": 4.0 - step * 0.1})
    runs = list((run_dir / "wandb").glob("offline-run-*"))
    assert len(runs) == 1
    assert len((run_dir / "metrics.jsonl").read_text().splitlines()) == 3
    for path in run_dir.rglob("*"):
        if path.is_file():
            assert secret.encode() not in path.read_bytes(), f"environment leaked into {path}"
