"""Telemetry: MFU (of specs.architecture.flops_per_token), throughput, metrics logging; NVML device stats with a
throttling alert live in tasks/train/loop/nvml.py (re-exported here).

Only the logging rank (global rank 0) creates a `MetricsLogger`; every rank may read its own `gpu_stats`.
"""

from __future__ import annotations

import json
import logging
import math
import re
import time
from collections import deque
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Literal

from tasks.train.loop.nvml import gpu_stats, throttling_alert  # noqa: F401  (re-exported: the telemetry API)

log = logging.getLogger("forgeline.telemetry")


# Dense peak TFLOP/s per device and math precision (never the 2:4-sparsity figures: training is dense). "fp32" is
# plain FP32 (PyTorch's default for fp32 matmuls); "tf32" applies with torch.set_float32_matmul_precision("high").
DEVICE_PEAK_TFLOPS: dict[str, dict[str, float]] = {
    # NVIDIA H100 Tensor Core GPU datasheet, SXM5: BF16/FP16 989.4 (1,979 sparse), TF32 494.7, FP32 66.9.
    "h100-sxm": {"bf16": 989.4, "fp16": 989.4, "tf32": 494.7, "fp32": 66.9},
    # Same datasheet, PCIe: BF16/FP16 756 (1,513 sparse), TF32 378, FP32 51.2.
    "h100-pcie": {"bf16": 756.0, "fp16": 756.0, "tf32": 378.0, "fp32": 51.2},
    # Same datasheet, NVL (dual-slot PCIe, NVLink bridge): BF16/FP16 835.5 (1,671 sparse), TF32 417.5, FP32 60.
    "h100-nvl": {"bf16": 835.5, "fp16": 835.5, "tf32": 417.5, "fp32": 60.0},
    # NVIDIA H200 datasheet, SXM: the H100 SXM's Hopper compute (989 dense BF16) with 141 GB HBM3e.
    "h200": {"bf16": 989.4, "fp16": 989.4, "tf32": 494.7, "fp32": 66.9},
    # Same datasheet, H200 NVL: the H100 NVL's figures (BF16/FP16 835.5 dense, TF32 417.5, FP32 60).
    "h200-nvl": {"bf16": 835.5, "fp16": 835.5, "tf32": 417.5, "fp32": 60.0},
    # NVIDIA A100 datasheet (SXM and PCIe, 40/80 GB): BF16/FP16 312, TF32 156, FP32 19.5.
    "a100": {"bf16": 312.0, "fp16": 312.0, "tf32": 156.0, "fp32": 19.5},
    # NVIDIA L4 datasheet: BF16/FP16 121 (242 sparse), TF32 60, FP32 30.3.
    "l4": {"bf16": 121.0, "fp16": 121.0, "tf32": 60.0, "fp32": 30.3},
    # NVIDIA L40S datasheet: BF16/FP16 362 (733 sparse), TF32 183, FP32 91.6.
    "l40s": {"bf16": 362.0, "fp16": 362.0, "tf32": 183.0, "fp32": 91.6},
    # NVIDIA A10 datasheet: BF16/FP16 125, TF32 62.5, FP32 31.2.
    "a10": {"bf16": 125.0, "fp16": 125.0, "tf32": 62.5, "fp32": 31.2},
    # A10G (AWS G5) has no NVIDIA datasheet; Baseten's "NVIDIA A10 vs A10G" comparison reports BF16/FP16 70,
    # TF32 35, FP32 35. Measure and pass device_peak_tflops if you need better than that.
    "a10g": {"bf16": 70.0, "fp16": 70.0, "tf32": 35.0, "fp32": 35.0},
    # NVIDIA V100 datasheet, SXM2: FP16 tensor 125 (PCIe 112), FP32 15.7; Volta has no BF16.
    "v100": {"fp16": 125.0, "fp32": 15.7},
    # NVIDIA Ada GPU architecture whitepaper, RTX 4090: FP16/BF16 tensor with FP32 accumulate 165.2 (what
    # PyTorch uses; 330 with FP16 accumulate), TF32 82.6, FP32 82.6.
    "rtx-4090": {"bf16": 165.2, "fp16": 165.2, "tf32": 82.6, "fp32": 82.6},
    # AMD Instinct MI300X data sheet: BF16/FP16 1,307.4 dense, TF32 653.7, FP32 matrix 163.4.
    "mi300x": {"bf16": 1307.4, "fp16": 1307.4, "tf32": 653.7, "fp32": 163.4},
    # AMD Instinct MI250X data sheet (both dies): BF16/FP16 383, FP32 matrix 95.7.
    "mi250x": {"bf16": 383.0, "fp16": 383.0, "fp32": 95.7},
}

# Names as torch.cuda.get_device_name / NVML report them ("NVIDIA H100 80GB HBM3", "NVIDIA A100-SXM4-80GB",
# "Tesla V100-SXM2-16GB", "AMD Instinct MI300X") → table keys. Order matters: a100 before a10, l40s before l4,
# the NVL cards before their SXM names ("NVIDIA H100 NVL"; GH200's "NVIDIA GH200 480GB" is the SXM part: h200).
_DEVICE_PATTERNS = [
    (r"^cpu$", "cpu"), (r"h100.*pcie", "h100-pcie"), (r"h100.*nvl", "h100-nvl"), (r"h100", "h100-sxm"),
    (r"h200.*nvl", "h200-nvl"), (r"h200", "h200"),
    (r"a100", "a100"), (r"a10g", "a10g"), (r"\ba10\b", "a10"), (r"l40-?s", "l40s"), (r"\bl4\b", "l4"),
    (r"v100", "v100"), (r"4090", "rtx-4090"), (r"mi300x", "mi300x"), (r"mi250x", "mi250x"),
]


class UnknownDeviceError(ValueError):
    """The device has no entry in DEVICE_PEAK_TFLOPS: an MFU against a guessed peak would be fiction."""


def canonical_device(name: str) -> str | None:
    lowered = name.strip().lower()
    if lowered in DEVICE_PEAK_TFLOPS:
        return lowered
    return next((key for pattern, key in _DEVICE_PATTERNS if re.search(pattern, lowered)), None)


@dataclass(frozen=True)
class PeakFlops:
    flops: float | None  # FLOP/s of one device; None: no MFU
    reason: str          # where the number comes from, or why there is none (goes into the run's log)


def peak_flops(device_name: str, precision: str, device_peak_tflops: float | None = None) -> PeakFlops:
    """Dense peak FLOP/s of one device for `precision` (bf16, fp16, fp32 or tf32).

    An explicit `device_peak_tflops` always wins. CPUs get no MFU (no meaningful peak); unknown devices raise.
    """
    if device_peak_tflops is not None:
        return PeakFlops(device_peak_tflops * 1e12, f"device_peak_tflops = {device_peak_tflops:g} (explicit)")
    key = canonical_device(device_name)
    if key == "cpu":
        return PeakFlops(None, "cpu: no MFU (no meaningful peak; set device_peak_tflops to compute one)")
    if key is None:
        raise UnknownDeviceError(
            f"no peak FLOP/s known for device {device_name!r}; known: {', '.join(sorted(DEVICE_PEAK_TFLOPS))}. "
            "Set pretrain.telemetry.device_peak_tflops to its dense peak TFLOP/s for your precision "
            "(from its datasheet, or measured), or add it to tasks/train/loop/telemetry.py with a source.")
    table = DEVICE_PEAK_TFLOPS[key]
    if precision not in table:
        raise UnknownDeviceError(f"{key} has no {precision} peak (it has {', '.join(table)}); "
                                 "choose another precision or set device_peak_tflops")
    return PeakFlops(table[precision] * 1e12, f"{key} {precision} dense peak {table[precision]:g} TFLOP/s")


def mfu(tokens_per_s: float, flops_per_token: float, peak_flops: float | None, n_devices: int) -> float | None:
    """Model FLOPs utilization (Chowdhery et al. 2022): achieved model FLOP/s over the peak of all devices.

    `tokens_per_s` is the global rate (all data-parallel replicas together); `flops_per_token` is the model's
    (specs.architecture.flops_per_token). None when there is no peak.
    """
    if peak_flops is None or peak_flops <= 0 or n_devices <= 0:
        return None
    return tokens_per_s * flops_per_token / (peak_flops * n_devices)


class Throughput:
    """Tokens/s over the last `window` steps, excluding the first `warmup_steps` (compilation, allocator warmup).

    Call `update(tokens)` at the end of every step; `restart()` after a pause that is not training (evaluation,
    checkpointing) so it is not counted.
    """

    def __init__(self, window: int = 20, warmup_steps: int = 2, clock: Callable[[], float] = time.perf_counter):
        self.window, self.warmup_steps, self._clock = window, warmup_steps, clock
        self._marks: deque[tuple[float, int]] = deque(maxlen=window + 1)  # (end time, tokens of the step)
        self._steps = 0

    def start(self) -> None:
        """Mark the start of the first counted step (only needed with warmup_steps = 0)."""
        self.restart()

    def restart(self) -> None:
        self._marks.clear()
        self._marks.append((self._clock(), 0))

    def update(self, tokens: int) -> None:
        now = self._clock()
        self._steps += 1
        if self._steps <= self.warmup_steps or not self._marks:
            self._marks.clear()
            self._marks.append((now, 0))  # the end of a warmup step is where counting starts
            return
        self._marks.append((now, tokens))

    @property
    def tokens_per_s(self) -> float | None:
        if len(self._marks) < 2:
            return None
        elapsed = self._marks[-1][0] - self._marks[0][0]
        return sum(t for _, t in list(self._marks)[1:]) / elapsed if elapsed > 0 else None

    @property
    def step_time(self) -> float | None:
        if len(self._marks) < 2:
            return None
        return (self._marks[-1][0] - self._marks[0][0]) / (len(self._marks) - 1)


def _json_value(v: object) -> object:
    """Non-finite floats become null, so metrics.jsonl stays strict JSON for DVC plots."""
    if isinstance(v, float) and not math.isfinite(v):
        return None
    return v


def import_wandb(mode: str) -> Any:
    """The wandb module for `mode`, imported only when a run uses it (~1 s), or None: `disabled`, or `offline`
    on a machine without wandb (a GPU box with torch but no registry). Offline files are a copy of what
    metrics.jsonl holds, so going without them is a warning, not a failed stage; `online` was asked for by name,
    so without wandb it fails."""
    if mode == "disabled":
        return None
    try:
        import wandb
    except ImportError as exc:
        if mode == "online":
            raise RuntimeError("telemetry.wandb: online, but wandb is not installed (pip install wandb, or set "
                               "telemetry.wandb: offline/disabled)") from exc
        log.warning("telemetry.wandb: offline, but wandb is not installed: metrics go to the JSONL files only")
        return None
    return wandb


class MetricsLogger:
    """Metric rows to `<run_dir>/metrics.jsonl` (DVC plots) and to wandb (offline by default).

    wandb gets only what is passed here: `config` (the resolved spec, nothing from the environment) and the
    metric rows. Host, program, arguments, git remote, code and console capture are switched off, so neither
    environment variables nor command lines (which may hold tokens) leave the machine.
    `resume_step`: a resumed run first drops rows past the step it resumes from, so a retry rewrites them once.
    """

    def __init__(self, run_dir: str | Path, *, wandb_mode: Literal["offline", "disabled", "online"] = "offline",
                 project: str = "forgeline", run_name: str | None = None, run_id: str | None = None,
                 config: dict[str, Any] | None = None, resume_step: int | None = None,
                 jsonl_name: str = "metrics.jsonl"):
        self.run_dir = Path(run_dir)
        self.run_dir.mkdir(parents=True, exist_ok=True)
        self.path = self.run_dir / jsonl_name
        if resume_step is not None and self.path.exists():
            kept = [line for line in self.path.read_text().splitlines(keepends=True)
                    if line.strip() and json.loads(line).get("step", 0) <= resume_step]
            tmp = self.path.with_suffix(".tmp")
            tmp.write_text("".join(kept))
            tmp.replace(self.path)
        self._fh = open(self.path, "a", encoding="utf-8")
        self.wandb_run = None
        wandb = import_wandb(wandb_mode)
        if wandb is not None:
            settings = wandb.Settings(silent=True, console="off", save_code=False, disable_code=True,
                                      disable_git=True, x_disable_meta=True, x_disable_machine_info=True,
                                      x_disable_stats=True, x_save_requirements=False)
            # mode= is passed explicitly: wandb caches the mode of the first init in a process.
            self.wandb_run = wandb.init(mode=wandb_mode, dir=str(self.run_dir), project=project, name=run_name,
                                        id=run_id, resume="allow" if run_id else None, config=config or {},
                                        settings=settings, reinit="create_new")

    def log(self, step: int, metrics: dict[str, Any]) -> None:
        row = {"step": step, **{k: _json_value(v) for k, v in metrics.items()}}
        self._fh.write(json.dumps(row, sort_keys=True) + "\n")
        self._fh.flush()  # a killed run keeps every row written so far
        if self.wandb_run is not None:
            self.wandb_run.log({k: v for k, v in row.items() if k != "step"}, step=step)

    def close(self) -> None:
        if not self._fh.closed:
            self._fh.close()
        if self.wandb_run is not None:
            self.wandb_run.finish()
            self.wandb_run = None

    def __enter__(self) -> "MetricsLogger":
        return self

    def __exit__(self, *exc) -> None:
        self.close()
