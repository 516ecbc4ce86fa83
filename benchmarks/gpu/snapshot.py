"""A telemetry snapshot of every visible GPU: NVML through forgeline's own reader (`tasks.train.loop.telemetry
.gpu_stats`, the values the training monitor logs, with its throttling alert) and `nvidia-smi`'s view of the same.

    python benchmarks/gpu/snapshot.py --out parts/telemetry.json

Without a GPU (or without NVML and nvidia-smi) it writes what it found and says so; it never fails the run.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

SMI_FIELDS = ("name", "temperature.gpu", "power.draw", "power.limit", "clocks.sm", "clocks.max.sm", "clocks.mem",
              "memory.used", "memory.total", "utilization.gpu", "clocks_throttle_reasons.active")


def nvidia_smi() -> list[dict[str, str]] | str:
    exe = shutil.which("nvidia-smi")
    if exe is None:
        return "nvidia-smi not found"
    proc = subprocess.run([exe, f"--query-gpu={','.join(SMI_FIELDS)}", "--format=csv,noheader,nounits"],
                          capture_output=True, text=True, timeout=20, check=False)
    if proc.returncode:
        return f"nvidia-smi exited {proc.returncode}: {proc.stderr.strip()[:200]}"
    return [dict(zip(SMI_FIELDS, (v.strip() for v in line.split(",")))) for line in proc.stdout.splitlines()]


def nvml(count: int) -> list[dict] | str:
    try:
        from tasks.train.loop.nvml import local_gpus
        from tasks.train.loop.telemetry import gpu_stats, throttling_alert

        # CUDA ordinal i is NVML's index only without CUDA_VISIBLE_DEVICES: resolve it as the ranks' telemetry does
        gpus = local_gpus({**os.environ, "LOCAL_WORLD_SIZE": str(count)})
        out = [{"cuda_device": g.local_rank, "nvml_index": g.nvml_index, **gpu_stats(g.nvml_index)}
               for g in gpus if g.nvml_index is not None]
        return [{**stats, "alert": throttling_alert(stats)} for stats in out] or "NVML: no readings"
    except Exception as exc:  # noqa: BLE001 - a snapshot reports, it does not fail
        return f"NVML: {type(exc).__name__}: {exc}"


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--out", type=Path, required=True)
    args = p.parse_args()
    try:
        import torch

        count = torch.cuda.device_count()
    except Exception:  # noqa: BLE001 - a snapshot reports, it does not fail
        count = 0
    snap = {"cuda_devices": count, "nvml": nvml(count), "nvidia_smi": nvidia_smi()}
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(snap, indent=1, default=str))
    print(json.dumps(snap, default=str))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
