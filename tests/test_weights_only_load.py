"""The `weights_only` loader that replaces DeepSpeed's checkpoint unpickling (`deepspeed_adapter.load_weights_only`):
it reads what DeepSpeed pickles into a checkpoint — its loss scalers, its ZeRO stage enum, also as Python 3.11.2
pickles it — and refuses anything else. (Through a real engine: test_deepspeed_adapter.py.)"""

from __future__ import annotations

import pickle
from functools import partial

import pytest
import torch

from tasks.train.parallel import deepspeed_adapter as adapter


def test_weights_only_loader_reads_the_fp16_dynamic_loss_scaler(tmp_path):
    """fp16 with ZeRO 1–3 pickles the `DynamicLossScaler` that DeepSpeed's `CreateLossScaler` makes into every
    optimizer file (bf16/fp32 a static `LossScaler`): a resume or rollback of such a run must unpickle it. CPU
    ranks cannot run fp16, so the object is made here as ZeRO makes it."""
    from deepspeed.runtime.fp16.loss_scaler import CreateLossScaler

    args = {"init_scale": 2.0 ** 16, "scale_window": 1000, "min_scale": 1.0, "delayed_shift": 2,
            "consecutive_hysteresis": False}
    scaler = CreateLossScaler(dtype=torch.half, static_loss_scale=0, dynamic_scaling=True, dynamic_loss_args=args)
    scaler.cur_scale, scaler.cur_iter = 4096.0, 17
    path = tmp_path / "optim_states.pt"
    torch.save({"loss_scaler": scaler, "w": torch.ones(2)}, path)
    loaded = adapter.load_weights_only(str(path))["loss_scaler"]
    assert type(loaded) is type(scaler) and (loaded.cur_scale, loaded.cur_iter) == (4096.0, 17)
    assert loaded.dynamic and loaded.dtype == torch.half


class _ByName:
    """Pickles as `getattr(owner, name)`: how Python 3.11.2 (Debian 12's) pickles an IntEnum member."""

    def __init__(self, owner, name):
        self.owner, self.name = owner, name

    def __reduce__(self):
        return getattr, (self.owner, self.name)


def test_weights_only_loader_reads_a_zero_stage_pickled_by_name(tmp_path):
    """A checkpoint written under Python 3.11.2 holds `getattr(ZeroStageEnum, "optimizer_states")` (3.11.7 writes
    `ZeroStageEnum(1)`): resuming it failed with "Unsupported global: GLOBAL getattr"; any other getattr stays
    refused."""
    from deepspeed.runtime.zero.config import ZeroStageEnum
    from deepspeed.runtime.fp16.loss_scaler import LossScaler

    path = tmp_path / "zero.pt"
    torch.save({"zero_stage": _ByName(ZeroStageEnum, "optimizer_states"), "w": torch.ones(2)}, path)
    assert b"getattr" in path.read_bytes()
    assert adapter.load_weights_only(str(path))["zero_stage"] is ZeroStageEnum.optimizer_states
    for owner, name in ((LossScaler, "__init__"), (ZeroStageEnum, "missing"), (ZeroStageEnum, "__class__")):
        torch.save({"x": _ByName(owner, name)}, path)
        with pytest.raises(pickle.UnpicklingError):
            adapter.load_weights_only(str(path))


def test_weights_only_loader_refuses_other_classes(tmp_path):
    path = tmp_path / "evil.pt"
    torch.save({"w": torch.ones(1), "x": partial(print, "ran")}, path)
    with pytest.raises(pickle.UnpicklingError):
        adapter.load_weights_only(str(path))
