"""A torch.profiler trace of a few training steps, after the timed ones (so the profiler's own cost never enters
a tokens/s figure): what still costs time in a step, as the closing note of issue #29 must name it.

`StepTrace(path, cuda)`: `start()` once the timed steps are done and the device is synchronised, `stop()` after
the profiled steps (the device synchronised again). It writes to `path` the top ATen ops and kernels by self
device time (self CPU time on CPU) and returns the figures the table carries: the profiled steps' wall seconds,
the device's busy seconds within them (every kernel, copy and memset, summed; streams that overlap can push it
past the wall, so the fraction is capped at 1) and so the share of the step the device sat idle — time the host
spent between kernels (Python, DeepSpeed's bookkeeping, a synchronisation) rather than time in a kernel.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import torch

ROWS = 40  # rows of the op table: the 12-04 profile's top 30 left the loss's passes cut


def device_us(averages: Any) -> float:
    """The device's busy µs in a profile: the self time of the events that ran on it (kernels, copies, memsets),
    as torch's own table totals it — an ATen op also carries its kernels' time, so CPU-side rows are left out."""
    from torch.autograd import DeviceType

    total = 0.0
    for evt in averages:
        if evt.device_type != DeviceType.CPU and not getattr(evt, "is_user_annotation", False):
            total += float(getattr(evt, "self_device_time_total", getattr(evt, "self_cuda_time_total", 0.0)))
    return total


class StepTrace:
    """torch.profiler over the steps between `start()` and `stop()`."""

    def __init__(self, path: Path, cuda: bool):
        self.path, self.cuda = Path(path), cuda
        self.prof: Any = None
        self.t0 = 0.0

    def start(self) -> None:
        from torch.profiler import ProfilerActivity, profile

        acts = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if self.cuda else [])
        self.prof = profile(activities=acts)
        self.prof.__enter__()
        self.t0 = time.perf_counter()

    def stop(self, steps: int) -> dict[str, Any]:
        """End the trace of `steps` steps (the caller synchronised the device); write the table, return figures."""
        wall = time.perf_counter() - self.t0
        self.prof.__exit__(None, None, None)
        averages = self.prof.key_averages()
        sort = "self_cuda_time_total" if self.cuda else "self_cpu_time_total"
        table = averages.table(sort_by=sort, row_limit=ROWS, max_name_column_width=90)
        busy = device_us(averages) / 1e6 if self.cuda else None
        out = {"file": self.path.name, "steps": steps, "wall_s": wall, "device_busy_s": busy,
               "device_idle_share": None if busy is None else max(0.0, 1.0 - min(busy / wall, 1.0))}
        idle = "" if busy is None else f", device busy {busy:.3f} s ({1 - out['device_idle_share']:.1%})"
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self.path.write_text(f"{steps} profiled steps after the timed ones: wall {wall:.3f} s{idle}\n\n{table}\n")
        return out


def synchronize(cuda: bool) -> None:
    if cuda:
        torch.cuda.synchronize()
