"""The planner prices the gradient traffic in the dtype DeepSpeed 0.19.8 sends: under torch_autocast (the CUDA
default) ZeRO-0 all-reduces in engine.communication_data_type, which falls back to fp32 when the bf16 section is
off; ZeRO-1/2/3 reduce each parameter in its `comm_dtype`, which torch_autocast sets to bf16 on the parameters of
exact nn.Linear modules only — the project's block linears at tp 1, not its Column/RowParallelLinear at tp > 1,
its embedding, head or norms. A probe counted the bytes on a 2-rank gloo run (fp32 throughout at ZeRO-0 and at
tp 2); the planner had priced 2 bytes per element for all. These checks run the installed DeepSpeed's own code."""

from __future__ import annotations

from types import SimpleNamespace

import pytest
import torch
from deepspeed.runtime import torch_autocast
from deepspeed.runtime.engine import DeepSpeedEngine

from specs.architecture import ModelConfig
from tasks.train.modeling.model import Transformer
from tasks.train.parallel.tensor_parallel import ColumnParallelLinear, RowParallelLinear
from tasks.train.planning.plan_cost import gradient_comm_bytes

CFG = ModelConfig(vocab_size=64, seq_len=16, n_layers=2, n_heads=2, n_kv_heads=2, d_model=16, ffn_hidden=32)


def engine_dtype(bf16_section: bool, fp16_section: bool = False) -> torch.dtype:
    """DeepSpeedEngine.communication_data_type as the installed DeepSpeed computes it, for forgeline's config
    (no `communication_data_type` key: dsconfig.ds_config writes none)."""
    fake = SimpleNamespace(_config=SimpleNamespace(communication_data_type=None),
                           fp16_enabled=lambda: fp16_section, bfloat16_enabled=lambda: bf16_section)
    return DeepSpeedEngine.communication_data_type.fget(fake)


def test_zero0_reduces_in_fp32_under_torch_autocast_and_in_bf16_in_the_section():
    assert engine_dtype(bf16_section=False) == torch.float32           # torch_autocast: the bf16 section is off
    assert engine_dtype(bf16_section=True) == torch.bfloat16


def tagged_dtypes(monkeypatch, model: torch.nn.Module) -> dict[str, torch.dtype]:
    """Each parameter's comm dtype after the installed torch_autocast.init_autocast_params tags the model."""
    monkeypatch.setattr(torch_autocast, "TORCH_AUTOCAST_INITIALIZED", False)   # a process global: restored
    monkeypatch.setattr(torch_autocast, "TORCH_AUTOCAST_DTYPE", None)
    engine = SimpleNamespace(module=model, zero_quantized_weights=lambda: False)
    torch_autocast.init_autocast_params(engine, torch.bfloat16, None)
    return {name: torch_autocast.get_comm_dtype(p) for name, p in model.named_parameters()}


def test_zero_stages_reduce_only_exact_nn_linear_parameters_in_bf16(monkeypatch):
    dtypes = tagged_dtypes(monkeypatch, Transformer(CFG, seed=0))
    linear = {n for n, m in Transformer(CFG, seed=0).named_modules() if type(m) is torch.nn.Linear}
    assert linear and all(dtypes[n] == torch.bfloat16 for n in dtypes if n.rsplit(".", 1)[0] in linear)
    rest = [n for n in dtypes if n.rsplit(".", 1)[0] not in linear]
    assert rest and all(dtypes[n] == torch.float32 for n in rest)   # embedding, norms, head: fp32
    # tp > 1 swaps the block linears for these, which torch_autocast does not tag: fp32
    assert not any(issubclass(c, torch.nn.Linear) for c in (ColumnParallelLinear, RowParallelLinear))


@pytest.mark.parametrize("autocast, zero, tp, expected", [
    (True, 0, 1, 4 * 1000),                 # engine all-reduce in fp32
    (True, 1, 1, 2 * 600 + 4 * 400),        # block linears bf16, the rest fp32
    (True, 3, 1, 2 * 600 + 4 * 400),
    (True, 1, 2, 4 * 1000),                 # ColumnParallelLinear / RowParallelLinear: untagged, fp32
    (False, 0, 1, 2 * 1000),                # the bf16 section: bf16 everywhere
    (False, 1, 2, 2 * 1000),
])
def test_the_planner_prices_those_dtypes(autocast, zero, tp, expected):
    assert gradient_comm_bytes(1000, 600, "bf16", autocast, zero, tp) == expected
