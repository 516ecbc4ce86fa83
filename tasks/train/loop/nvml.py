"""GPU health through NVML (`pip install forgeline[gpu]`: the `nvidia-ml-py` package, module `pynvml`).

Which physical GPU is a local rank's? Rank r of a node uses `cuda:<LOCAL_RANK>` in its process, and CUDA numbers
only the devices CUDA_VISIBLE_DEVICES lets it see, in that variable's order; NVML ignores the variable and
numbers every GPU of the machine. So `cuda:r` is NVML's GPU named by entry r of CUDA_VISIBLE_DEVICES: an index
("3"), a GPU UUID or a unique prefix of one ("GPU-8932f937-…"), or a MIG instance ("MIG-…", or CUDA 11's
"MIG-GPU-<uuid>/<gi>/<ci>"), whose temperature, power and clocks are its parent GPU's. Unset: CUDA's order is
NVML's (true with CUDA_DEVICE_ORDER=PCI_BUS_ID, and on nodes of one GPU model). A rank whose entry names no GPU
is reported missing, never silently mapped to another.

`sample_gpus` reads every local rank's GPU: temperature, power / limit, SM and memory clocks (current / max),
utilisation, memory-controller busy share, memory used, and the clock-event ("throttle") reasons decoded to
names; thermal or power reasons raise an alert. Without the package, a driver or a GPU everything is empty.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

log = logging.getLogger("forgeline.telemetry")

# NVML clock-event ("throttle") reason bits, nvml.h (nvmlClocksEventReason* / nvmlClocksThrottleReason*).
THROTTLE_REASONS = {
    0x1: "gpu_idle", 0x2: "applications_clocks_setting", 0x4: "sw_power_cap", 0x8: "hw_slowdown",
    0x10: "sync_boost", 0x20: "sw_thermal_slowdown", 0x40: "hw_thermal_slowdown", 0x80: "hw_power_brake_slowdown",
    0x100: "display_clock_setting",
}
THERMAL_OR_POWER = {"sw_power_cap", "hw_slowdown", "sw_thermal_slowdown", "hw_thermal_slowdown",
                    "hw_power_brake_slowdown"}
CLOCK_SM, CLOCK_MEM = 1, 2  # nvmlClockType_t
_nvml: Any = None  # the initialized pynvml module, False when unavailable, None before the first try


def nvml_module() -> Any:
    """The initialised `pynvml` module, or None (no package, no driver, no GPU); tried once per process."""
    global _nvml
    if _nvml is None:
        try:  # imported lazily: absent on CPU machines (it is the optional `gpu` extra)
            import pynvml

            pynvml.nvmlInit()
            _nvml = pynvml
        except Exception as exc:
            log.debug("NVML unavailable: %s", exc)
            _nvml = False
    return _nvml or None


def _text(value: object) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


# ------------------------------------------------------------------------------------------ which device
@dataclass(frozen=True)
class LocalGpu:
    """The GPU one local rank runs on, as NVML knows it (nvml_index None: not found, `problem` says why)."""

    local_rank: int
    visible_as: str | None            # its CUDA_VISIBLE_DEVICES entry; None: the variable is unset
    nvml_index: int | None = None
    mig: str | None = None            # the MIG instance's UUID when the rank runs on one
    problem: str | None = None


def visible_devices(env: Mapping[str, str]) -> list[str] | None:
    """CUDA_VISIBLE_DEVICES as entries (None: unset, every GPU visible). CUDA stops at the first entry that is
    not a device, hiding the rest (so "-1" hides all): the list stops there too."""
    raw = env.get("CUDA_VISIBLE_DEVICES")
    if raw is None:
        return None
    entries = []
    for entry in (e.strip() for e in raw.split(",")):
        if not (entry.isdigit() or entry.startswith(("GPU-", "MIG-"))):
            break
        entries.append(entry)
    return entries


def _uuid_index(nv: Any, uuid: str) -> tuple[int | None, str | None]:
    """(NVML index of the physical GPU, MIG UUID or None) for a GPU UUID, a unique prefix of one, or a MIG UUID."""
    if uuid.startswith("MIG-GPU-"):  # CUDA 11.0–11.3's form: the parent's UUID, then /gpu-instance/compute-instance
        index, _ = _uuid_index(nv, uuid[len("MIG-"):].split("/")[0])
        return index, uuid
    try:
        handle = nv.nvmlDeviceGetHandleByUUID(uuid)
    except Exception:  # CUDA also accepts any unique prefix of a GPU UUID
        hits = [i for i in range(nv.nvmlDeviceGetCount())
                if _text(nv.nvmlDeviceGetUUID(nv.nvmlDeviceGetHandleByIndex(i))).startswith(uuid)]
        return (hits[0], None) if len(hits) == 1 else (None, None)
    if uuid.startswith("MIG-") and nv.nvmlDeviceIsMigDeviceHandle(handle):
        return int(nv.nvmlDeviceGetIndex(nv.nvmlDeviceGetDeviceHandleFromMigDeviceHandle(handle))), uuid
    return int(nv.nvmlDeviceGetIndex(handle)), None


def resolve_gpu(nv: Any, local_rank: int, env: Mapping[str, str]) -> LocalGpu:
    """The physical GPU of `cuda:<local_rank>` under this environment's CUDA_VISIBLE_DEVICES."""
    visible = visible_devices(env)
    if visible is not None and local_rank >= len(visible):
        return LocalGpu(local_rank, None, problem=f"CUDA_VISIBLE_DEVICES lists {len(visible)} device(s), "
                        f"none for local rank {local_rank}")
    entry = None if visible is None else visible[local_rank]
    mig = None
    if entry is None or entry.isdigit():
        index = local_rank if entry is None else int(entry)
    else:
        index, mig = _uuid_index(nv, entry)
        if index is None:
            return LocalGpu(local_rank, entry, problem=f"no GPU (or more than one) has the UUID {entry}")
    count = int(nv.nvmlDeviceGetCount())
    if index >= count:
        return LocalGpu(local_rank, entry, problem=f"NVML sees {count} GPU(s), no index {index}")
    return LocalGpu(local_rank, entry, index, mig)


def local_gpus(env: Mapping[str, str] | None = None) -> list[LocalGpu]:
    """Every local rank's GPU (LOCAL_WORLD_SIZE ranks — LOCAL_SIZE under the DeepSpeed launcher, which sets
    only that — else the one of LOCAL_RANK); [] without NVML."""
    env = os.environ if env is None else env
    nv = nvml_module()
    if nv is None:
        return []
    size = env.get("LOCAL_WORLD_SIZE") or env.get("LOCAL_SIZE")
    ranks = range(int(size)) if size else [int(env.get("LOCAL_RANK", "0"))]
    return [resolve_gpu(nv, r, env) for r in ranks]


# ------------------------------------------------------------------------------------------------ stats
def gpu_stats(index: int = 0) -> dict[str, Any]:
    """Temperature, power, clocks, utilisation, memory and throttle reasons of NVML GPU `index` ({} without
    NVML). `index` is NVML's (physical) numbering: see `resolve_gpu` for a rank's."""
    nv = nvml_module()
    if nv is None:
        return {}
    try:
        h = nv.nvmlDeviceGetHandleByIndex(index)
    except Exception as exc:
        log.debug("NVML device %d: %s", index, exc)
        return {}
    stats: dict[str, Any] = {"gpu_index": index}
    queries = {  # each on its own: boards that lack one query (e.g. power) still report the rest
        "gpu_name": lambda: _text(nv.nvmlDeviceGetName(h)),
        "temperature_c": lambda: nv.nvmlDeviceGetTemperature(h, 0),  # NVML_TEMPERATURE_GPU
        "power_w": lambda: nv.nvmlDeviceGetPowerUsage(h) / 1000.0,  # mW
        "power_limit_w": lambda: nv.nvmlDeviceGetEnforcedPowerLimit(h) / 1000.0,
        "memory_used_gib": lambda: nv.nvmlDeviceGetMemoryInfo(h).used / 2**30,
        "memory_total_gib": lambda: nv.nvmlDeviceGetMemoryInfo(h).total / 2**30,
        "sm_clock_mhz": lambda: nv.nvmlDeviceGetClockInfo(h, CLOCK_SM),
        "sm_clock_max_mhz": lambda: nv.nvmlDeviceGetMaxClockInfo(h, CLOCK_SM),
        "mem_clock_mhz": lambda: nv.nvmlDeviceGetClockInfo(h, CLOCK_MEM),
        "mem_clock_max_mhz": lambda: nv.nvmlDeviceGetMaxClockInfo(h, CLOCK_MEM),
        "utilization_pct": lambda: nv.nvmlDeviceGetUtilizationRates(h).gpu,
        # Share of time the memory controller was busy: NVML's proxy for memory-bandwidth use.
        "memory_busy_pct": lambda: nv.nvmlDeviceGetUtilizationRates(h).memory,
    }
    for key, query in queries.items():
        try:
            stats[key] = query()
        except Exception as exc:
            log.debug("NVML %s: %s", key, exc)
    reasons_fn = getattr(nv, "nvmlDeviceGetCurrentClocksEventReasons", None) or \
        getattr(nv, "nvmlDeviceGetCurrentClocksThrottleReasons", None)
    try:
        mask = int(reasons_fn(h)) if reasons_fn else 0
        stats["throttle_mask"] = mask
        stats["throttle_reasons"] = [name for bit, name in THROTTLE_REASONS.items() if mask & bit]
    except Exception as exc:
        log.debug("NVML throttle reasons: %s", exc)
    return stats


def throttling_alert(stats: dict[str, Any]) -> str | None:
    """A one-line warning when the GPU's clocks are held down for thermal or power reasons, else None."""
    hit = [r for r in stats.get("throttle_reasons", []) if r in THERMAL_OR_POWER]
    if not hit:
        return None
    rank = f"local rank {stats['local_rank']}, " if "local_rank" in stats else ""
    parts = [f"GPU {stats.get('gpu_index', '?')} ({rank}{stats.get('gpu_name', 'unknown')}) clocks throttled by "
             + ", ".join(hit)]
    clock, max_clock = stats.get("sm_clock_mhz"), stats.get("sm_clock_max_mhz")
    if clock and max_clock:
        parts.append(f"SM {clock}/{max_clock} MHz ({clock / max_clock:.0%})")
    if "temperature_c" in stats:
        parts.append(f"{stats['temperature_c']} °C")
    if "power_w" in stats and "power_limit_w" in stats:
        parts.append(f"{stats['power_w']:.0f}/{stats['power_limit_w']:.0f} W")
    detail = f": {', '.join(parts[1:])}" if len(parts) > 1 else ""
    return f"{parts[0]}{detail} — check cooling and power limits; MFU drops with the clock"


@dataclass
class GpuSample:
    """One reading of the local GPUs: numeric metrics `gpu<local rank>_<key>`, one progress line per GPU, and
    the throttling / missing-device alerts."""

    metrics: dict[str, Any] = field(default_factory=dict)
    lines: list[str] = field(default_factory=list)
    alerts: list[str] = field(default_factory=list)


def gpu_line(stats: dict[str, Any]) -> str:
    """`GPU 3 (rank 1): 71 °C, 350/700 W, SM 1980/1980 MHz, mem 2619/2619 MHz, util 99 %, mem busy 45 %, ...`"""
    s = stats
    parts = []
    if "temperature_c" in s:
        parts.append(f"{s['temperature_c']} °C")
    for label, now, top, unit, fmt in (("", "power_w", "power_limit_w", "W", ".0f"),
                                      ("SM ", "sm_clock_mhz", "sm_clock_max_mhz", "MHz", ".0f"),
                                      ("mem ", "mem_clock_mhz", "mem_clock_max_mhz", "MHz", ".0f"),
                                      ("", "memory_used_gib", "memory_total_gib", "GiB", ".1f")):
        if now in s and top in s:
            parts.append(f"{label}{s[now]:{fmt}}/{s[top]:{fmt}} {unit}")
    for label, key in (("util", "utilization_pct"), ("mem busy", "memory_busy_pct")):
        if key in s:
            parts.append(f"{label} {s[key]} %")
    parts.append("throttle: " + (",".join(s.get("throttle_reasons", [])) or "none"))
    return f"GPU {s.get('gpu_index', '?')} (rank {s.get('local_rank', '?')}): {', '.join(parts)}"


def sample_gpus(gpus: list[LocalGpu]) -> GpuSample:
    """Read every GPU of `gpus` (from `local_gpus`): metrics, progress lines and alerts."""
    out = GpuSample()
    for gpu in gpus:
        prefix = f"gpu{gpu.local_rank}_"
        stats = gpu_stats(gpu.nvml_index) if gpu.nvml_index is not None else {}
        if not stats:
            out.metrics[prefix + "missing"] = 1
            out.alerts.append(f"local rank {gpu.local_rank}: no GPU stats ({gpu.problem or 'NVML gave none'})")
            continue
        stats["local_rank"] = gpu.local_rank
        out.metrics.update({prefix + k: v for k, v in stats.items()
                            if isinstance(v, (int, float)) and k != "local_rank"})
        out.lines.append(gpu_line(stats))
        alert = throttling_alert(stats)
        if alert:
            out.alerts.append(alert)
    return out
