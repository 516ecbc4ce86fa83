"""A CPU-visible census of one eager training step (issue #29 item 5): what a GPU would pay for in kernels and
memory traffic, counted where CI can see it (`benchmarks/step_census.py` prints it; `tests/test_step_census.py`
holds the bar).

`Census` is a `TorchDispatchMode`: it sees every ATen op that reaches a kernel, after autograd and autocast have
done their work (so the backward's ops and autocast's casts are counted, and a composite op is counted as the
kernels it runs on this machine). Per op it records:
  - ops     every op that is not a view or a `detach` (those move no data): about one kernel each;
  - bytes   the storage bytes of the new tensors an op returns (in-place ops and views allocate nothing): the
            memory a step writes and has to read back, where an extra copy shows first;
  - peak    the most bytes of such tensors alive at once (a tensor counts until it is garbage collected), for
            the loss's own working memory;
  - largest the biggest single such tensor (a [B, T, V] logits tensor shows here whatever else is freed).
"""

from __future__ import annotations

import contextlib
import weakref
from collections import Counter
from typing import Any, Callable

import torch
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_flatten

FREE = {"detach", "lift_fresh", "_to_copy_noop", "device"}  # bookkeeping ops that neither compute nor move data
# ("device": only fake tensors dispatch it, as metadata; see census_of_step(fake=True))


class Census(TorchDispatchMode):
    def __init__(self) -> None:
        super().__init__()
        self.ops: Counter[str] = Counter()
        self.bytes: Counter[str] = Counter()
        self.live = 0
        self.peak = 0
        self.largest = 0

    def _gone(self, nbytes: int) -> None:
        self.live -= nbytes

    def __torch_dispatch__(self, func: Any, types: Any, args: Any = (), kwargs: Any = None) -> Any:
        out = func(*args, **(kwargs or {}))
        name = func.overloadpacket.__name__
        if func.is_view or name in FREE:
            return out
        self.ops[name] += 1
        if name.endswith("_"):  # in place: writes into a tensor that exists already
            return out
        for t in tree_flatten(out)[0]:
            if isinstance(t, torch.Tensor):
                n = t.untyped_storage().nbytes()
                self.bytes[name] += n
                self.live += n
                self.largest = max(self.largest, n)
                weakref.finalize(t, self._gone, n)
        self.peak = max(self.peak, self.live)
        return out

    @property
    def total_ops(self) -> int:
        return sum(self.ops.values())

    @property
    def total_bytes(self) -> int:
        return sum(self.bytes.values())


def count(fn: Callable[[], Any]) -> Census:
    """The census of one call of `fn` (run it once before, so lazy first-call work is not counted)."""
    census = Census()
    with census:
        fn()
    return census


def training_step(model: torch.nn.Module, ids: torch.Tensor, labels: torch.Tensor,
                  loss_fn: Callable[..., torch.Tensor] | None = None, bf16: bool = True) -> Callable[[], None]:
    """One eager forward + backward under bf16 autocast (as on a GPU), gradients dropped before each call so
    every call allocates them alike. `loss_fn(model, ids, labels)`: default `model(ids, labels)`."""
    def step() -> None:
        for p in model.parameters():
            p.grad = None
        with torch.autocast("cpu", dtype=torch.bfloat16, enabled=bf16):
            loss = loss_fn(model, ids, labels) if loss_fn else model(ids, labels)
        loss.backward()
    return step


def census_of_step(model: torch.nn.Module, ids: torch.Tensor, labels: torch.Tensor, fake: bool = False,
                   **kw: Any) -> Census:
    """`fake`: run the step on fake tensors (torch's FakeTensorMode: shapes, dtypes and storages, no arithmetic).
    The same ops reach the census and the same bytes are counted (tests/test_step_census.py checks that against a
    real step); it is what makes the 124M-width census affordable on CPUs without bf16 hardware, where a real bf16
    step at vocabulary 50k runs ~100x slower than fp32 (9 min on an AVX2-only machine)."""
    from torch._subclasses.fake_tensor import FakeTensorMode

    # the weights stay real; with `fake`, everything computed from the inputs is fake
    mode = FakeTensorMode(allow_non_fake_inputs=True) if fake else contextlib.nullcontext()
    with mode:
        if fake:
            ids, labels = mode.from_tensor(ids), mode.from_tensor(labels)
        step = training_step(model, ids, labels, **kw)
        step()  # warm-up: RoPE tables, lazy inits
        return count(step)
