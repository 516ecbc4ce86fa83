"""GPU telemetry through a fake NVML (tasks/train/loop/nvml.py): stats and decoded throttle reasons, a thermal/power
alert (and none for benign reasons), local ranks mapped to physical GPUs through CUDA_VISIBLE_DEVICES indices,
GPU UUIDs (whole or a unique prefix) and MIG UUIDs, missing GPUs reported as missing, and the Monitor writing
every local GPU into the telemetry rows."""

from __future__ import annotations

import json
import logging
import sys
import types

import pytest
import torch

from specs.train import TelemetrySpec
from tasks.train.loop import nvml as nvml_mod
from tasks.train.loop.monitor import Monitor
from tasks.train.loop.nvml import LocalGpu, gpu_stats, local_gpus, sample_gpus, throttling_alert, visible_devices
from tasks.train.loop.telemetry import gpu_stats as reexported

UUIDS = ["GPU-8932f937-0000-aaaa", "GPU-8932f9ff-1111-bbbb", "GPU-12345678-2222-cccc"]
MIG = "MIG-4f1c5a1e-9999-dddd"  # a MIG instance of GPU 2


class NotFound(Exception):
    pass


def fake_nvml(masks: list[int], fail_power: bool = False) -> types.ModuleType:
    """Three GPUs (temperature 70 + index, so a wrong mapping shows), GPU 2 with one MIG instance. MIG handles
    answer nvmlDeviceGetIndex with their MIG index (0), as NVML does: only the parent has the GPU's index."""
    nv = types.ModuleType("pynvml")
    nv.nvmlInit = lambda: None
    nv.nvmlDeviceGetCount = lambda: len(UUIDS)

    def by_index(i):
        if not 0 <= i < len(UUIDS):
            raise NotFound(f"NVML_ERROR_INVALID_ARGUMENT {i}")
        return ("gpu", i)

    def by_uuid(uuid):
        if uuid in UUIDS:
            return ("gpu", UUIDS.index(uuid))
        if uuid == MIG:
            return ("mig", 2)
        raise NotFound("NVML_ERROR_NOT_FOUND")

    def no_power(h):
        raise NotFound("NVML_ERROR_NOT_SUPPORTED")

    nv.nvmlDeviceGetHandleByIndex, nv.nvmlDeviceGetHandleByUUID = by_index, by_uuid
    nv.nvmlDeviceGetUUID = lambda h: UUIDS[h[1]].encode()  # older bindings return bytes
    nv.nvmlDeviceGetIndex = lambda h: 0 if h[0] == "mig" else h[1]
    nv.nvmlDeviceIsMigDeviceHandle = lambda h: int(h[0] == "mig")
    nv.nvmlDeviceGetDeviceHandleFromMigDeviceHandle = lambda h: ("gpu", h[1])
    nv.nvmlDeviceGetName = lambda h: b"NVIDIA H100 80GB HBM3"
    nv.nvmlDeviceGetTemperature = lambda h, sensor: 70 + h[1]
    nv.nvmlDeviceGetPowerUsage = no_power if fail_power else (lambda h: 699_000)
    nv.nvmlDeviceGetEnforcedPowerLimit = lambda h: 700_000
    nv.nvmlDeviceGetMemoryInfo = lambda h: types.SimpleNamespace(used=60 * 2**30, total=80 * 2**30)
    nv.nvmlDeviceGetClockInfo = lambda h, kind: {1: 1200, 2: 2619}[kind]
    nv.nvmlDeviceGetMaxClockInfo = lambda h, kind: {1: 1980, 2: 2619}[kind]
    nv.nvmlDeviceGetUtilizationRates = lambda h: types.SimpleNamespace(gpu=99, memory=45)
    nv.nvmlDeviceGetCurrentClocksThrottleReasons = lambda h: masks[h[1]]
    return nv


@pytest.fixture
def nvml(monkeypatch):
    def install(module):
        monkeypatch.setitem(sys.modules, "pynvml", module)
        monkeypatch.setattr(nvml_mod, "_nvml", None)
    return install


def test_gpu_stats_and_throttling_alert(nvml):
    nvml(fake_nvml([0, 0, 0x40 | 0x4]))  # GPU 2: hw thermal slowdown + sw power cap
    stats = gpu_stats(2)
    assert reexported is gpu_stats
    assert stats["gpu_name"] == "NVIDIA H100 80GB HBM3" and stats["temperature_c"] == 72
    assert stats["power_w"] == 699.0 and stats["memory_used_gib"] == 60 and stats["memory_busy_pct"] == 45
    assert (stats["sm_clock_mhz"], stats["mem_clock_mhz"], stats["mem_clock_max_mhz"]) == (1200, 2619, 2619)
    assert stats["throttle_reasons"] == ["sw_power_cap", "hw_thermal_slowdown"] and stats["throttle_mask"] == 0x44
    alert = throttling_alert(stats)
    assert "hw_thermal_slowdown" in alert and "1200/1980 MHz (61%)" in alert and "72 °C" in alert

    nvml(fake_nvml([0x1 | 0x10, 0, 0], fail_power=True))  # idle + sync boost: not throttling
    stats = gpu_stats(0)
    assert "power_w" not in stats and stats["temperature_c"] == 70  # a missing query drops only its key
    assert stats["throttle_reasons"] == ["gpu_idle", "sync_boost"] and throttling_alert(stats) is None
    assert gpu_stats(5) == {}  # no such GPU


def test_visible_devices_parse_like_cuda():
    assert visible_devices({}) is None
    assert visible_devices({"CUDA_VISIBLE_DEVICES": " 2, 0 "}) == ["2", "0"]
    assert visible_devices({"CUDA_VISIBLE_DEVICES": "1,-1,0"}) == ["1"]  # CUDA hides everything after -1
    assert visible_devices({"CUDA_VISIBLE_DEVICES": ""}) == []
    assert visible_devices({"CUDA_VISIBLE_DEVICES": f"{UUIDS[1]},{MIG}"}) == [UUIDS[1], MIG]


@pytest.mark.parametrize("visible,expected", [
    (None, [(0, None), (1, None)]),                                   # unset: CUDA's order is NVML's
    ("2,0", [(2, None), (0, None)]),                                  # indices, reordered
    (f"{UUIDS[2]},{UUIDS[0]}", [(2, None), (0, None)]),               # whole GPU UUIDs
    ("GPU-8932f9f,GPU-1234", [(1, None), (2, None)]),                  # unique prefixes
    (f"{MIG},1", [(2, MIG), (1, None)]),                              # a MIG instance: its parent's stats
    (f"MIG-{UUIDS[0]}/1/0,0", [(0, f"MIG-{UUIDS[0]}/1/0"), (0, None)]),  # CUDA 11's MIG-GPU-<uuid>/gi/ci
], ids=["unset", "indices", "uuids", "prefixes", "mig", "legacy-mig"])
def test_local_ranks_resolve_to_physical_gpus(nvml, visible, expected):
    nvml(fake_nvml([0, 0, 0]))
    env = {"LOCAL_WORLD_SIZE": "2"} | ({} if visible is None else {"CUDA_VISIBLE_DEVICES": visible})
    gpus = local_gpus(env)
    assert [(g.nvml_index, g.mig) for g in gpus] == expected and not any(g.problem for g in gpus)
    sample = sample_gpus(gpus)  # the stats really are the mapped GPU's (temperature 70 + physical index)
    assert [sample.metrics[f"gpu{r}_temperature_c"] for r in (0, 1)] == [70 + i for i, _ in expected]


def test_missing_gpus_are_reported_not_remapped(nvml):
    nvml(fake_nvml([0, 0, 0]))
    cases = {"0": "lists 1 device(s), none for local rank 1", "0,GPU-8932f9": "more than one",  # ambiguous
             "0,7": "NVML sees 3 GPU(s), no index 7", f"0,{UUIDS[0][:-1]}X": "has the UUID"}
    for visible, problem in cases.items():
        gpus = local_gpus({"LOCAL_WORLD_SIZE": "2", "CUDA_VISIBLE_DEVICES": visible})
        assert gpus[0].nvml_index == 0 and gpus[1].nvml_index is None and problem in gpus[1].problem, visible
        sample = sample_gpus(gpus)
        assert sample.metrics["gpu1_missing"] == 1 and "gpu1_temperature_c" not in sample.metrics
        assert sample.metrics["gpu0_temperature_c"] == 70
        assert len(sample.alerts) == 1 and "local rank 1" in sample.alerts[0] and problem in sample.alerts[0]
    # the DeepSpeed launcher sets LOCAL_SIZE, not LOCAL_WORLD_SIZE: every local rank's GPU all the same
    assert [g.nvml_index for g in local_gpus({"LOCAL_SIZE": "3", "LOCAL_RANK": "0"})] == [0, 1, 2]
    # LOCAL_RANK alone (no LOCAL_WORLD_SIZE): that one rank's GPU
    assert local_gpus({"LOCAL_RANK": "1", "CUDA_VISIBLE_DEVICES": "2,1"}) == [LocalGpu(1, "1", 1)]


def test_sample_alerts_on_the_throttled_gpu_only(nvml):
    nvml(fake_nvml([0x1, 0x10, 0x20 | 0x80]))  # idle, sync boost, sw thermal + power brake
    sample = sample_gpus(local_gpus({"LOCAL_WORLD_SIZE": "3"}))
    assert [sample.metrics[f"gpu{r}_throttle_mask"] for r in range(3)] == [0x1, 0x10, 0xA0]
    assert len(sample.alerts) == 1
    assert "GPU 2 (local rank 2, " in sample.alerts[0]
    assert "sw_thermal_slowdown, hw_power_brake_slowdown" in sample.alerts[0]
    assert sample.lines[0] == ("GPU 0 (rank 0): 70 °C, 699/700 W, SM 1200/1980 MHz, mem 2619/2619 MHz, "
                               "60.0/80.0 GiB, util 99 %, mem busy 45 %, throttle: gpu_idle")
    assert sample.lines[2].endswith("throttle: sw_thermal_slowdown,hw_power_brake_slowdown")


def test_without_nvml_everything_is_empty(nvml):
    nvml(None)  # `import pynvml` raises ImportError
    assert gpu_stats() == {} and local_gpus({"LOCAL_WORLD_SIZE": "2"}) == []
    assert sample_gpus([]).metrics == {} and throttling_alert({}) is None


def test_monitor_writes_every_local_gpu_into_the_telemetry_rows(nvml, monkeypatch, tmp_path, caplog):
    nvml(fake_nvml([0, 0x40, 0]))
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)  # CUDA is faked; memory stays host RSS
    monkeypatch.setenv("LOCAL_WORLD_SIZE", "2")
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", f"{UUIDS[2]},1")
    spec = TelemetrySpec(device="h100-sxm", wandb="disabled")
    monitor = Monitor(spec, precision="bf16", flops_per_token=1e6, n_devices=2, tokens_per_step=1000,
                      reports_dir=tmp_path, config={}, run_name="t", resume_step=None)
    with caplog.at_level(logging.INFO, logger="forgeline.telemetry"):
        monitor.row(10, {"loss": 1.0})
    monitor.close()
    row = json.loads((tmp_path / "telemetry.jsonl").read_text().splitlines()[-1])
    assert (row["step"], row["gpu0_gpu_index"], row["gpu0_temperature_c"]) == (10, 2, 72)
    assert (row["gpu1_gpu_index"], row["gpu1_temperature_c"], row["gpu1_throttle_mask"]) == (1, 71, 0x40)
    assert len(monitor.alerts) == 1 and monitor.alerts[0].startswith("step 10: GPU 1 (local rank 1")
    assert any("GPU 2 (rank 0): 72 °C" in r.getMessage() for r in caplog.records)
