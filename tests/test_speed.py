"""Precision and speed knobs: the generated DeepSpeed config (fp16 dynamic loss scaling, torch_autocast instead of
the bf16 section, ZeRO communication settings written out, read back by DeepSpeed's own config parser), the fused
AdamW choice, and the fp16 overflow signals read from a DeepSpeed engine."""

from __future__ import annotations

from types import SimpleNamespace

import pytest
import torch

from specs.pretrain import ParallelSpec, PretrainSpec
from tasks.train.parallel.dsconfig import adamw_kwargs, ds_config, make_optimizer
from tasks.train.loop.engine import loss_scale_of, skipped_steps_of


def parsed(cfg: dict):
    """DeepSpeed's reading of a config dict (no process group needed)."""
    from deepspeed.runtime.config import DeepSpeedConfig

    return DeepSpeedConfig(cfg)


def test_fp16_config_is_dynamic_loss_scaling_and_deepspeed_reads_it_so():
    cfg = ds_config(PretrainSpec(precision="fp16", micro_batch_size=2, grad_accum=4), ParallelSpec())
    assert cfg["fp16"] == {"enabled": True, "loss_scale": 0, "initial_scale_power": 16, "loss_scale_window": 1000,
                           "hysteresis": 2, "min_loss_scale": 1}
    assert not cfg["bf16"]["enabled"] and not cfg["torch_autocast"]["enabled"]
    ds = parsed(cfg)
    assert ds.float16_config.enabled and ds.float16_config.loss_scale == 0  # 0 = dynamic
    assert ds.float16_config.initial_scale_power == 16 and not ds.bfloat16_config.enabled
    assert ds.train_batch_size == 8 and ds.gradient_accumulation_steps == 4
    bf16 = ds_config(PretrainSpec(precision="bf16"), ParallelSpec())
    assert bf16["bf16"]["enabled"] and not bf16["fp16"]["enabled"]  # the look-alike: no loss scaler on bf16


def test_torch_autocast_replaces_the_bf16_section_but_not_fp16():
    spec = PretrainSpec(precision="bf16", speed={"mixed_precision": "torch_autocast"})
    cfg = ds_config(spec, ParallelSpec(zero_stage=1))
    assert cfg["torch_autocast"] == {"enabled": True, "dtype": "bfloat16"} and not cfg["bf16"]["enabled"]
    ds = parsed(cfg)
    assert ds.torch_autocast_enabled and ds.torch_autocast_dtype == torch.bfloat16 and not ds.bfloat16_config.enabled
    fp16 = ds_config(PretrainSpec(precision="fp16", speed={"mixed_precision": "torch_autocast"}), ParallelSpec())
    assert fp16["fp16"]["enabled"] and not fp16["torch_autocast"]["enabled"]  # keeps DeepSpeed's loss scaler
    fp32 = ds_config(PretrainSpec(precision="fp32", speed={"mixed_precision": "torch_autocast"}), ParallelSpec())
    assert not fp32["torch_autocast"]["enabled"] and not fp32["bf16"]["enabled"]


@pytest.mark.parametrize("stage,accelerator,overlap,persist", [
    (0, "cuda", False, None), (1, "cuda", False, None), (2, "cuda", True, None), (2, "cpu", False, None),
    (3, "cuda", True, 100_000), (3, "cpu", True, 0)])
def test_zero_communication_knobs_are_written_out(stage, accelerator, overlap, persist):
    cfg = ds_config(PretrainSpec(), ParallelSpec(zero_stage=stage, accelerator=accelerator))
    zero = cfg["zero_optimization"]
    expected = {"stage": stage, "overlap_comm": overlap, "contiguous_gradients": True,
                "reduce_bucket_size": 500_000_000, "allgather_bucket_size": 500_000_000}
    if stage == 3:
        expected.update({"stage3_prefetch_bucket_size": 50_000_000, "stage3_param_persistence_threshold": persist,
                         "sub_group_size": 1_000_000_000})
    assert zero == expected
    z = parsed(cfg).zero_config
    assert z.overlap_comm is overlap and z.reduce_bucket_size == 500_000_000 and z.contiguous_gradients


def test_zero_knobs_set_in_params_win_over_the_defaults():
    speed = {"overlap_comm": False, "contiguous_gradients": False, "reduce_bucket_size": 2_000_000,
             "allgather_bucket_size": 3_000_000, "stage3_prefetch_bucket_size": 7, "stage3_param_persistence_threshold": 11,
             "stage3_sub_group_size": 13}
    zero = ds_config(PretrainSpec(speed=speed), ParallelSpec(zero_stage=3, accelerator="cuda"))["zero_optimization"]
    assert zero == {"stage": 3, **{("sub_group_size" if k == "stage3_sub_group_size" else k): v
                                   for k, v in speed.items()}}
    z = parsed(ds_config(PretrainSpec(speed=speed), ParallelSpec(zero_stage=3))).zero_config
    assert (z.overlap_comm, z.reduce_bucket_size, z.prefetch_bucket_size, z.param_persistence_threshold,
            z.sub_group_size) == (False, 2_000_000, 7, 11, 13)
    with pytest.raises(ValueError):
        PretrainSpec(speed={"reduce_bucket_size": 0})
    with pytest.raises(ValueError):
        PretrainSpec(speed={"bucket": 1})  # unknown keys are refused


def test_fused_adamw_on_cuda_only_by_default():
    optim = PretrainSpec().optim
    assert adamw_kwargs(optim, "auto", "cuda") == {"lr": optim.lr, "betas": (0.9, 0.95), "eps": 1e-8, "fused": True}
    assert adamw_kwargs(optim, "auto", "cpu") == {"lr": optim.lr, "betas": (0.9, 0.95), "eps": 1e-8,
                                                  "foreach": False}
    assert adamw_kwargs(optim, "off", "cuda")["foreach"] is False and "fused" not in adamw_kwargs(optim, "off", "cuda")
    assert adamw_kwargs(optim, "on", "cpu")["fused"] is True


def test_fused_and_plain_adamw_take_the_same_steps_on_cpu():
    """torch's fused AdamW also runs on CPU: same updates as the per-tensor loop (within float rounding)."""
    def trained(fused: str) -> list[torch.Tensor]:
        torch.manual_seed(0)
        model = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.LayerNorm(16), torch.nn.Linear(16, 1))
        opt = make_optimizer(model, PretrainSpec().optim, fused, "cpu")
        assert bool(opt.param_groups[0]["fused"]) is (fused == "on")
        assert [g["weight_decay"] for g in opt.param_groups] == [0.1, 0.0]  # decay on matrices only
        x = torch.randn(32, 8, generator=torch.Generator().manual_seed(1))
        for _ in range(5):
            opt.zero_grad()
            model(x).pow(2).mean().backward()
            opt.step()
        return [p.detach().clone() for p in model.parameters()]

    for a, b in zip(trained("on"), trained("off"), strict=True):
        torch.testing.assert_close(a, b, rtol=1e-5, atol=1e-6)
    assert not torch.equal(trained("off")[0], torch.nn.Linear(8, 16).weight)  # it trained


def test_overflow_signals_read_from_a_deepspeed_engine():
    """`skipped_steps` (DeepSpeed's engine counter, +1 per overflow-skipped step) and the loss scale."""
    ds = SimpleNamespace(skipped_steps=3, optimizer=SimpleNamespace(loss_scale=32768.0))
    assert skipped_steps_of(ds) == 3 and loss_scale_of(ds) == 32768.0
    assert skipped_steps_of(SimpleNamespace()) == 0 and loss_scale_of(SimpleNamespace(optimizer=None)) is None
    assert skipped_steps_of(SimpleNamespace(skipped_steps=True)) == 0  # not a count
    assert loss_scale_of(SimpleNamespace(optimizer=SimpleNamespace(loss_scale=lambda: 1))) is None


def test_torch_autocast_runs_are_a_different_checkpoint_identity():
    from tasks.train.objectives.base import autocast_identity

    auto = PretrainSpec(precision="bf16", speed={"mixed_precision": "torch_autocast"})
    assert autocast_identity(auto) == {"mixed_precision": "torch_autocast"}
    assert autocast_identity(PretrainSpec(precision="bf16")) == {}  # identities from before the option match
    assert autocast_identity(PretrainSpec(precision="fp32", speed={"mixed_precision": "torch_autocast"})) == {}


@pytest.mark.parametrize("capabilities,want", [([(9, 0)], "bf16"), ([(8, 0), (9, 0)], "bf16"),
                                              ([(8, 6), (7, 0)], "fp16"), ([(7, 5)], "fp16")],
                         ids=["h100", "a100+h100", "a10+v100", "t4"])
def test_precision_auto_reads_every_gpus_capability(monkeypatch, capabilities, want):
    """`precision: auto` on GPUs: bf16 only when every visible GPU has it in hardware (capability ≥ 8), else fp16
    with dynamic loss scaling. Never through `torch.cuda.is_bf16_supported`, which counts emulated bf16 (V100, T4)
    and allocates on GPU 0 in the launching process."""
    from tasks.train.launch import resolved_precision
    from tests.helpers.parallel import job_spec

    monkeypatch.setattr(torch.cuda, "device_count", lambda: len(capabilities))
    monkeypatch.setattr(torch.cuda, "get_device_capability", lambda i=None: capabilities[i])
    monkeypatch.setattr(torch.cuda, "is_bf16_supported", lambda *a, **k: pytest.fail("is_bf16_supported called"))
    assert resolved_precision(job_spec({"accelerator": "cuda"}, precision="auto")).train.precision == want


def test_an_in_process_rank_hands_the_cuda_cache_back(monkeypatch):
    """After a rank ran in the launching process (world 1), the CUDA allocator's cached blocks are released, so
    what runs next there (`plan --measure`'s next layout, rank 0 on the same GPU) finds the device free; CPU
    ranks touch no CUDA API."""
    from tasks.train import launch

    calls: list[str] = []
    monkeypatch.setattr(torch.cuda, "empty_cache", lambda: calls.append("empty_cache"))
    launch.free_device_memory("cpu")
    assert calls == []
    launch.free_device_memory("cuda")
    assert calls == ["empty_cache"]


def test_the_collective_timeout_reaches_the_process_groups(monkeypatch):
    """`parallel.collective_timeout_s` is the default group's timeout (what the other ranks wait in while rank 0
    re-hashes a large checkpoint at resume) and the TP groups' (torch's NCCL default for new groups: 10 min)."""
    import deepspeed
    import torch.distributed as dist
    from datetime import timedelta

    from tasks.train.parallel import parallelize
    from tests.helpers.parallel import job_spec

    seen: dict[str, object] = {}
    monkeypatch.setattr(deepspeed, "init_distributed", lambda **kw: seen.update(init=kw["timeout"]))
    parallelize.init_distributed("gloo", timeout_s=7200)
    assert seen["init"] == timedelta(hours=2)
    par = job_spec({"tp": 2, "pp": 2, "collective_timeout_s": 5400}).parallel
    monkeypatch.setattr(dist, "get_rank", lambda: 0)
    monkeypatch.setattr(dist, "get_world_size", lambda: 4)
    monkeypatch.setattr(dist, "new_group", lambda ranks, timeout: seen.setdefault("groups", []).append(timeout))
    parallelize.build_layout(par)
    assert seen["groups"] and set(seen["groups"]) == {timedelta(seconds=5400)}
