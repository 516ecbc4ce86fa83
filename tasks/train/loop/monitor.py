"""Rank 0's wall-clock telemetry for a training run: tokens/s, MFU, memory, GPU health, and the metric sinks.

The loop's metrics.jsonl (a DVC out) holds only deterministic values; everything measured with a clock or read
from the device goes here: `reports/<stage>/telemetry.jsonl` (this launch's rows) and wandb (offline by default,
disabled in tests), plus the log line and the StageResult summary.
"""

from __future__ import annotations

import logging
import os
import resource
import sys
from pathlib import Path
from typing import Any

import torch

from specs.train import TelemetrySpec
from tasks.train.loop.nvml import local_gpus, sample_gpus
from tasks.train.loop.telemetry import MetricsLogger, PeakFlops, Throughput, UnknownDeviceError, mfu, peak_flops

log = logging.getLogger("forgeline.telemetry")


def device_name(spec_device: str) -> str:
    if spec_device != "auto":
        return spec_device
    return torch.cuda.get_device_name() if torch.cuda.is_available() else "cpu"


def resolve_peak(spec: TelemetrySpec, precision: str) -> PeakFlops:
    """The device's dense peak for `precision`; an unknown device gives no MFU (logged), never a guessed one."""
    name = device_name(spec.device)
    try:
        return peak_flops(name, precision, spec.device_peak_tflops)
    except UnknownDeviceError as exc:
        return PeakFlops(None, f"MFU unknown: {exc}")


def memory_gib() -> dict[str, float]:
    """Peak memory of this process: the CUDA allocator's on a GPU, the resident set on CPU."""
    if torch.cuda.is_available() and torch.cuda.is_initialized():
        return {"gpu_mem_peak_gib": round(torch.cuda.max_memory_allocated() / 2**30, 3),
                "gpu_mem_reserved_gib": round(torch.cuda.max_memory_reserved() / 2**30, 3)}
    rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss  # KiB on Linux, bytes on macOS
    return {"rss_peak_gib": round(rss / (2**30 if sys.platform == "darwin" else 2**20), 3)}


class Monitor:
    """Feed `step_done` every step, `resync` after non-training pauses (eval, checkpoint), `row` at log steps."""

    def __init__(self, spec: TelemetrySpec, *, precision: str, flops_per_token: float, n_devices: int,
                 tokens_per_step: int, reports_dir: Path, config: dict[str, Any], run_name: str,
                 resume_step: int | None):
        self.spec, self.flops_per_token, self.n_devices = spec, flops_per_token, n_devices
        self.tokens_per_step = tokens_per_step
        self.peak = resolve_peak(spec, precision)
        log.info("MFU peak: %s", self.peak.reason)
        self.throughput = Throughput(spec.throughput_window, spec.warmup_steps)
        self.throughput.start()
        (reports_dir / "telemetry.jsonl").unlink(missing_ok=True)  # this launch's rows only
        # WANDB_MODE in the environment wins over params (tests and CI set it to disabled).
        mode = os.environ.get("WANDB_MODE") or spec.wandb
        self.sink = MetricsLogger(reports_dir, wandb_mode=mode if mode in ("offline", "disabled", "online") else
                                  spec.wandb, project=spec.wandb_project, run_name=run_name,
                                  config=config, jsonl_name="telemetry.jsonl")
        self.mfu_values: list[float] = []
        self.checkpoint_stalls: list[float] = []
        self.alerts: list[str] = []
        self.nvml = spec.nvml and torch.cuda.is_available()
        # Rank 0 reads every local rank's GPU (resolved once through CUDA_VISIBLE_DEVICES; tasks/train/loop/nvml.py).
        self.gpus = local_gpus() if self.nvml else []
        for gpu in self.gpus:
            log.info("local rank %d: NVML GPU %s%s", gpu.local_rank, gpu.nvml_index,
                     f" (CUDA_VISIBLE_DEVICES entry {gpu.visible_as})" if gpu.visible_as else "")

    def step_done(self) -> None:
        self.throughput.update(self.tokens_per_step)

    def resync(self) -> None:
        self.throughput.restart()

    def row(self, step: int, metrics: dict[str, Any]) -> dict[str, Any]:
        """Log `metrics` plus tokens/s, MFU, memory and (GPU) NVML stats; returns the wall-clock part."""
        tps = self.throughput.tokens_per_s
        util = mfu(tps, self.flops_per_token, self.peak.flops, self.n_devices) if tps else None
        if util is not None:
            self.mfu_values.append(util)
        wall: dict[str, Any] = {"tokens_per_s": None if tps is None else round(tps, 1),
                                "step_time_s": self.throughput.step_time, "mfu": util, **memory_gib()}
        if self.gpus:
            sample = sample_gpus(self.gpus)
            wall.update(sample.metrics)                                 # gpu<local rank>_<stat>
            for line in sample.lines:
                log.info("step %d %s", step, line)
            for alert in sample.alerts:
                log.warning("%s", alert)
                self.alerts.append(f"step {step}: {alert}")
        self.sink.log(step, {**metrics, **wall})
        return wall

    def checkpoint_saved(self, step: int, seconds: float) -> None:
        """A checkpoint save stood training still for `seconds` (an async save: its host snapshot and any wait
        for the previous save's writer; tasks/train/checkpointing/async_save.py)."""
        self.checkpoint_stalls.append(seconds)
        self.sink.log(step, {"checkpoint_stall_s": round(seconds, 4)})

    def summary(self) -> dict[str, Any]:
        mean_mfu = sum(self.mfu_values) / len(self.mfu_values) if self.mfu_values else None
        stalls = self.checkpoint_stalls
        return {"mfu": "unknown" if mean_mfu is None else round(mean_mfu, 4), "mfu_peak": self.peak.reason,
                "checkpoint_saves": len(stalls),
                "checkpoint_stall_s": round(sum(stalls) / len(stalls), 4) if stalls else None,
                "throttle_alerts": self.alerts[-5:], **memory_gib()}

    def close(self) -> None:
        self.sink.close()
