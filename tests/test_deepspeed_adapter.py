"""Version contracts of tasks/train/parallel/deepspeed_adapter.py and deepspeed_optim.py against the installed
DeepSpeed.

Each test pins what one adapter function relies on, so a DeepSpeed upgrade that changes it fails here by name
instead of as a silently different loss, an unsafe checkpoint load or a 60 s op build. Where behaviour is cheap to
observe it is observed, in one world-1 gloo group (no rank launches; a few `deepspeed.initialize` calls on a
tiny model); where it is not (what a source line reads), the source is checked.
"""

from __future__ import annotations

import importlib
import inspect
import os
import sys
from types import SimpleNamespace

import pytest
import torch
from torch import nn

import deepspeed
from deepspeed.pipe import PipelineModule
from deepspeed.runtime.engine import DeepSpeedEngine
from deepspeed.runtime.pipe.engine import PipelineEngine
from deepspeed.runtime.pipe.topology import PipeModelDataParallelTopology
from tasks.train.parallel import deepspeed_adapter as adapter
from tasks.train.parallel import deepspeed_optim
from specs.architecture import ModelConfig
from tasks.train.inputs.data import loss_sums
from tasks.train.modeling.model import Block, FinalNorm, Transformer, head_index, lm_loss
from tasks.train.parallel.parallelize import init_distributed, pipeline_layers, teardown
from tasks.train.launch import free_port

CFG = ModelConfig(vocab_size=32, seq_len=8, n_layers=2, n_heads=2, n_kv_heads=1, d_model=16, ffn_hidden=32)
DS_BASE = {"train_micro_batch_size_per_gpu": 2, "gradient_accumulation_steps": 1, "steps_per_print": 10**9,
           "zero_allow_untested_optimizer": True, "zero_force_ds_cpu_optimizer": False}


@pytest.fixture(scope="module")
def world1(tmp_path_factory):
    """One gloo rank, set up as the training ranks do it (file rendezvous, shm op disabled)."""
    env = {"RANK": "0", "LOCAL_RANK": "0", "WORLD_SIZE": "1", "MASTER_ADDR": "127.0.0.1",
           "MASTER_PORT": str(free_port())}
    old = {k: os.environ.get(k) for k in env}
    os.environ.update(env)
    init_distributed("gloo", init_file=str(tmp_path_factory.mktemp("rdzv") / "rendezvous"))
    try:
        yield
    finally:
        teardown()
        for k, v in old.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v


def batch(seed: int = 0) -> tuple[torch.Tensor, torch.Tensor]:
    gen = torch.Generator().manual_seed(seed)
    return (torch.randint(0, CFG.vocab_size, (2, CFG.seq_len), generator=gen),
            torch.randint(0, CFG.vocab_size, (2, CFG.seq_len), generator=gen))


def engine(model: nn.Module, **config) -> DeepSpeedEngine:
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3, foreach=False)
    ds, *_ = deepspeed.initialize(model=model, optimizer=opt, config={**DS_BASE, **config})
    return ds


# ---------------------------------------------------------------------------------------------- no process group
def test_shm_op_is_built_only_when_compatible_ops_says_so():
    from deepspeed.accelerator import get_accelerator

    ds_torch = importlib.import_module("deepspeed.comm.torch")  # `import ... as` would find the `torch` it imports

    assert "deepspeed.ops.__compatible_ops__.get(builder.NAME, False)" in inspect.getsource(ds_torch.build_shm_op)
    builder = get_accelerator().create_op_builder("ShareMemCommBuilder")
    assert builder is None or builder.NAME == "deepspeed_shm_comm"
    adapter.disable_shm_comm()
    assert deepspeed.ops.__compatible_ops__["deepspeed_shm_comm"] is False
    assert ds_torch.build_shm_op() is None  # returned before any JIT build (the source check above passed first)


def test_cached_groups_are_module_globals_a_reload_resets():
    import deepspeed.utils.groups as groups

    saved = dict(vars(groups))
    try:
        groups._WORLD_GROUP, groups._DATA_PARALLEL_GROUP = "stale", "stale"
        groups._EXPERT_PARALLEL_GROUP["stale"] = "stale"
        adapter.forget_cached_groups()
        assert sys.modules["deepspeed.utils.groups"] is groups  # reset in place: importers see fresh globals
        assert groups._WORLD_GROUP is None and groups._DATA_PARALLEL_GROUP is None
        assert groups._EXPERT_PARALLEL_GROUP == {}
    finally:
        vars(groups).update(saved)


def test_clip_grad_norm_counts_rank0_or_model_parallel_parameters():
    from deepspeed.runtime import utils as ds_utils

    src = inspect.getsource(ds_utils.clip_grad_norm_)
    assert "(mpu.get_model_parallel_rank() == 0) or is_model_parallel_parameter(p)" in src
    assert "group=mpu.get_model_parallel_group()" in src
    assert list(inspect.signature(ds_utils.clip_grad_norm_).parameters) == ["parameters", "max_norm", "norm_type",
                                                                           "mpu"]
    # the tied head's copy on a later stage is the one DeepSpeed marks replicated
    assert "p.ds_pipe_replicated = True" in inspect.getsource(PipelineModule._index_tied_modules)

    module = nn.ModuleDict({"plain": nn.Linear(2, 2, bias=False), "shard": nn.Linear(2, 2, bias=False),
                            "tied": nn.Linear(2, 2, bias=False)})
    module["shard"].weight.tensor_model_parallel = True
    module["tied"].weight.ds_pipe_replicated = True
    adapter.count_once_per_stage(module, tp_rank=1)
    assert not any(ds_utils.is_model_parallel_parameter(m.weight) for m in (module["plain"], module["tied"]))
    adapter.count_once_per_stage(module, tp_rank=0)
    assert ds_utils.is_model_parallel_parameter(module["plain"].weight)
    assert ds_utils.is_model_parallel_parameter(module["shard"].weight)
    assert not ds_utils.is_model_parallel_parameter(module["tied"].weight)


def test_pipeline_cut_and_checkpointing_match_class_names():
    """build_module's `partition_method="type:Block"` / `checkpointable_layers=["Block"]`: DeepSpeed matches the
    LayerSpec's class name (regex) and the built layer's class name (exact); TP swaps linears inside Blocks."""
    assert "layer.typename.__name__" in inspect.getsource(PipelineModule._find_layer_type)
    src = inspect.getsource(PipelineModule._partition_layers)
    assert "method.startswith('type:')" in src and "self._find_layer_type(layertype)" in src
    assert "f.__class__.__name__ in self.checkpointable_layers" in inspect.getsource(PipelineModule._is_checkpointable)


# ---------------------------------------------------------------------------------------- one world-1 gloo group
def test_record_clip_norm_keeps_the_norm_deepspeed_drops(world1):
    assert "self.clip_fp32_gradients()" in inspect.getsource(DeepSpeedEngine._take_model_step)
    assert ("clip_grad_norm_(parameters=self.module.parameters(), max_norm=self.gradient_clipping(), mpu=self.mpu)"
            in inspect.getsource(DeepSpeedEngine.clip_fp32_gradients))
    assert "return self._global_grad_norm" in inspect.getsource(DeepSpeedEngine.get_global_grad_norm)
    ds = engine(Transformer(CFG, 0), gradient_clipping=1e-3)
    x, y = batch()
    ds.backward(ds(x, y))
    ds.step()
    assert ds.get_global_grad_norm() is None, "DeepSpeed now records the fp32 norm itself: record_clip_norm may go"
    adapter.record_clip_norm(ds)
    ds.backward(ds(x, y))
    expected = torch.linalg.vector_norm(torch.stack([p.grad.norm() for p in ds.module.parameters()]))
    ds.step()
    assert float(ds.get_global_grad_norm()) == pytest.approx(float(expected), rel=1e-5)
    assert adapter.full_fp32_param(next(ds.module.parameters())) is None  # fp32 without ZeRO: no master copy


def test_the_sync_free_clip_equals_deepspeeds(world1):
    """`record_clip_norm` clips with `grad_norm_of` (foreach kernels, the coefficient kept on the device): the same
    norm and the same clipped gradients as DeepSpeed's `clip_grad_norm_`, which it replaces."""
    from deepspeed.runtime.utils import clip_grad_norm_

    model = Transformer(CFG, 0)
    x, y = batch()
    model(x, y).backward()
    grads = [p.grad.clone() for p in model.parameters()]
    want = clip_grad_norm_(parameters=list(model.parameters()), max_norm=1e-3, mpu=None)
    clipped = [p.grad.clone() for p in model.parameters()]
    for p, g in zip(model.parameters(), grads):
        p.grad = g.clone()
    assert float(adapter.grad_norm_of(list(model.parameters()), None)) == pytest.approx(float(want), rel=1e-6)
    ds = engine(model, gradient_clipping=1e-3)
    adapter.record_clip_norm(ds)
    ds.clip_fp32_gradients()
    assert all(torch.allclose(p.grad, c, rtol=1e-6, atol=0) for p, c in zip(model.parameters(), clipped))


def test_a_lone_data_parallel_rank_skips_the_gradient_round_trip(world1, monkeypatch):
    """ZeRO-0 at dp 1: DeepSpeed would flatten, all-reduce over one rank and copy back every gradient each step.
    `skip_lone_allreduce` turns that off through the attribute DeepSpeed checks; the update is the same."""
    assert "if self.enable_backward_allreduce and not self.inside_no_sync_ctxt:" in \
        inspect.getsource(DeepSpeedEngine._backward_epilogue)
    x, y = batch()
    weights = []
    for skip in (False, True):
        ds = engine(Transformer(CFG, 0))
        assert ds.dp_world_size == 1
        calls = []
        monkeypatch.setattr(ds, "allreduce_gradients", lambda *a, **k: calls.append(1))
        if skip:
            assert adapter.skip_lone_allreduce(ds, zero_stage=0, pipeline=False)
        ds.backward(ds(x, y))
        ds.step()
        assert bool(calls) is not skip
        weights.append([p.detach().clone() for p in ds.module.parameters()])
    assert all(torch.equal(a, b) for a, b in zip(*weights))
    assert not adapter.skip_lone_allreduce(engine(Transformer(CFG, 0)), zero_stage=1, pipeline=False)


@pytest.mark.parametrize("config", [{}, {"bf16": {"enabled": True}, "zero_optimization": {"stage": 1}}],
                         ids=["fp32-zero0", "bf16-zero1"])
def test_checkpoints_load_weights_only_through_the_checkpoint_engine(world1, tmp_path, monkeypatch, config):
    from deepspeed.runtime.checkpoint_engine.torch_checkpoint_engine import TorchCheckpointEngine

    assert list(inspect.signature(TorchCheckpointEngine.load).parameters) == ["self", "path", "map_location"]
    assert "self.checkpoint_engine.load(" in inspect.getsource(DeepSpeedEngine._get_all_zero_checkpoint_state_dicts)
    ds = engine(Transformer(CFG, 0), **config)
    x, y = batch()
    ds.backward(ds(x, y))
    ds.step()
    ds.save_checkpoint(str(tmp_path), tag="t", client_state={"step": 1}, save_latest=False)
    real, calls = adapter.load_weights_only, []

    def counting(path, map_location=None):
        calls.append(path)
        return real(path, map_location)

    monkeypatch.setattr(adapter, "load_weights_only", counting)  # what use_weights_only_loader installs
    adapter.use_weights_only_loader(ds)
    path, client = ds.load_checkpoint(str(tmp_path), tag="t", load_optimizer_states=True,
                                      load_lr_scheduler_states=True)
    assert path is not None and client["step"] == 1
    assert calls, "load_checkpoint no longer reads through checkpoint_engine.load"
    if config:
        p = next(ds.module.parameters())
        full = adapter.full_fp32_param(p)
        assert full is not None and full.dtype == torch.float32 and full.shape == p.shape


@pytest.mark.parametrize("tied", [True, False], ids=["tied", "untied"])
def test_pipeline_internals_consolidation_and_eval_rely_on(world1, tied):
    cfg = ModelConfig(**{**CFG.to_dict(), "tie_embeddings": tied})
    module = PipelineModule(layers=pipeline_layers(cfg, 0), topology=PipeModelDataParallelTopology(1, 1, 1),
                            loss_fn=lm_loss, partition_method="type:Block", activation_checkpoint_interval=1,
                            checkpointable_layers=["Block"])
    assert module._find_layer_type("Block") == list(range(1, cfg.n_layers + 1))
    assert module._is_checkpointable([getattr(module, "1")]) and not module._is_checkpointable([FinalNorm(cfg)])
    assert isinstance(getattr(module, "1"), Block)

    # consolidation: the stage's layers under their plain-model indices, the tied head left out
    layers = adapter.pipeline_local_layers(module)
    expected = [i for i in range(head_index(cfg) + 1) if not (tied and i == head_index(cfg))]
    assert [i for i, _ in layers] == expected
    plain = Transformer(cfg, 0).state_dict()
    got = {f"layers.{i}.{n}": p for i, layer in layers for n, p in layer.named_parameters()}
    assert got.keys() == plain.keys()
    for k, v in plain.items():
        assert torch.equal(got[k], v), k

    # evaluation: eval_batch with our loss_fn, train loss_fn and total_loss restored
    assert "self.module.loss_fn(outputs, labels)" in inspect.getsource(PipelineEngine._exec_forward_pass)
    assert "self.total_loss = add_to_total_loss(self.total_loss" in inspect.getsource(PipelineEngine._exec_forward_pass)
    ds, *_ = deepspeed.initialize(model=module, optimizer=torch.optim.AdamW(module.parameters(), foreach=False),
                                  config=DS_BASE)
    assert ds.mpu.get_data_parallel_group() is not None  # build_engine's dp group at pp > 1
    x, y = batch()
    assert float(ds.train_batch(data_iter=iter([(x, y)]))) > 0  # leaves a scalar total_loss behind
    src, w = torch.zeros_like(y), torch.ones(y.shape)

    def eval_loss(logits, labels):
        return loss_sums(logits, *labels, 1)

    out = adapter.pipeline_eval_sums(ds, (x, (y, src, w)), eval_loss)
    with torch.no_grad():
        ref = loss_sums(ds.module.forward(x), y, src, w, 1)
    torch.testing.assert_close(out[0], ref)
    assert ds.module.loss_fn is lm_loss and ds.total_loss is None


def test_grid_answers_the_mpu_interface(world1):
    grid = adapter.make_grid(PipeModelDataParallelTopology(1, 1, 1))
    for name in ("get_data_parallel_group", "get_model_parallel_group", "get_model_parallel_rank",
                 "get_model_parallel_world_size", "get_slice_parallel_group", "get_data_parallel_world_size"):
        assert callable(getattr(grid, name)), name
    assert grid.get_model_parallel_rank() == 0 and grid.get_data_parallel_world_size() == 1


@pytest.mark.parametrize("flags", [{}, {"fused": True}, {"capturable": True}], ids=["loop", "fused", "capturable"])
def test_a_set_adam_step_lies_where_torch_puts_it(flags):
    """set_training_state (elastic resume) makes Adam's `step` where torch's own `load_state_dict` would: on the
    parameter's device for a fused or capturable group (the CUDA fused kernel reads it there), else on the CPU.
    A meta-device parameter stands for a GPU's (any device but the CPU tells the two apart)."""
    p = torch.nn.Parameter(torch.zeros(3, device="meta"))
    ds = SimpleNamespace(optimizer=SimpleNamespace(param_groups=[{"params": [p], **flags}], state={}))
    deepspeed_optim.set_training_state(ds, p, torch.zeros(3), [torch.zeros(3), torch.zeros(3)], 5.0)
    step = ds.optimizer.state[p]["step"]
    want = torch.optim.Optimizer._process_value_according_to_param_policy(
        p, torch.tensor(5.0), 0, [{"params": [0], **flags}], "step")
    assert (step.device, step.dtype) == (want.device, torch.float32)


@pytest.mark.parametrize("config", [{}, {"zero_optimization": {"stage": 2}},
                                    {"bf16": {"enabled": True}, "zero_optimization": {"stage": 1}}],
                         ids=["fp32-zero0", "fp32-zero2", "bf16-zero1"])
def test_elastic_state_moves_into_a_fresh_engine(world1, config):
    """adam_step / training_state / prime_adam_state / set_training_state / link_adam_state (elastic resume):
    the fp32 masters, Adam moments and step of a trained engine, set into a fresh engine with other weights, read
    back equal and make the next update identical. Two param groups, as `dsconfig.param_groups` builds them:
    DeepSpeed links the fragments of Adam's state once, after the first group's first update, so the second
    group's stay empty until `link_adam_state` (pinned below: if an upgrade fixes it, drop the workaround)."""
    from tasks.train.parallel.dsconfig import param_groups

    def grouped(seed: int) -> DeepSpeedEngine:
        model = Transformer(CFG, seed)
        opt = torch.optim.AdamW(param_groups(model, 0.1), lr=1e-3, foreach=False)
        return deepspeed.initialize(model=model, optimizer=opt, config={**DS_BASE, **config})[0]

    a = grouped(0)
    for s in range(2):
        x, y = batch(s)
        a.backward(a(x, y))
        a.step()
    assert deepspeed_optim.adam_step(a) == 2.0
    params = list(a.module.parameters())
    if config.get("zero_optimization"):
        with pytest.raises(ValueError, match="not found in optimizer state fragment"):
            deepspeed_optim.training_state(a, params[-1], True)  # a norm weight: the second (no-decay) group
    deepspeed_optim.link_adam_state(a)
    saved = [deepspeed_optim.training_state(a, p, True) for p in params]
    assert all(float(m[1].abs().sum()) > 0 for _, m in saved)  # real moments, not the zeros of a fresh state
    b = grouped(1)
    deepspeed_optim.prime_adam_state(b, 2.0)
    with torch.no_grad():
        for p, (fp32, moments) in zip(b.module.parameters(), saved):
            deepspeed_optim.set_training_state(b, p, fp32, moments, 2.0)
    assert deepspeed_optim.adam_step(b) == 2.0
    for p, (fp32, moments) in zip(b.module.parameters(), saved):
        got, got_moments = deepspeed_optim.training_state(b, p, True)
        assert torch.equal(got, fp32) and all(torch.equal(u, v) for u, v in zip(got_moments, moments))
    x, y = batch(2)
    for e in (a, b):
        e.backward(e(x, y))
        e.step()
    for pa, pb in zip(a.module.parameters(), b.module.parameters()):
        assert torch.equal(pa, pb)


@pytest.mark.parametrize("kind", ["unfused", "fused"])
def test_fp16_masters_are_deepspeeds_fp32_copies_not_the_rounded_parameters(world1, kind):
    """DeepSpeed's own fp16 optimizers (built directly: its CPU accelerator runs no fp16 engine), with every
    master moved off the fp16 grid as training would: `fp16_masters` returns those fp32 values, per parameter and
    in its shape, where the module holds fp16-rounded ones and `safe_get_full_fp32_param` returns None."""
    from deepspeed.runtime.fp16.fused_optimizer import FP16_Optimizer
    from deepspeed.runtime.fp16.unfused_optimizer import FP16_UnfusedOptimizer
    from deepspeed.utils import safe_get_full_fp32_param

    model = nn.Sequential(nn.Linear(4, 3), nn.Linear(3, 5, bias=False)).half()
    cls = FP16_UnfusedOptimizer if kind == "unfused" else FP16_Optimizer
    opt = cls(torch.optim.AdamW(model.parameters(), lr=1e-3, foreach=False), dynamic_loss_scale=True)
    stored = opt.fp32_groups if kind == "unfused" else [[g] for g in opt.fp32_groups_flat]
    with torch.no_grad():
        for group in stored:
            for master in group:
                master.add_(torch.linspace(1e-6, 3e-6, master.numel()).view_as(master))  # below fp16's step
    masters = adapter.fp16_masters(opt)
    assert set(masters) == {id(p) for p in model.parameters()}
    for p in model.parameters():
        assert safe_get_full_fp32_param(p) is None
        m = masters[id(p)]
        assert m.shape == p.shape and m.dtype == torch.float32
        assert not torch.equal(m, p.float()) and torch.allclose(m, p.float(), atol=1e-2)
    flat = torch.cat([masters[id(p)].flatten() for p in model.parameters()])
    assert torch.equal(flat, torch.cat([m.flatten() for group in stored for m in group]))  # DeepSpeed's order
    assert adapter.fp16_masters(torch.optim.AdamW(model.parameters())) == {}  # fp32 / bf16: nothing to add
