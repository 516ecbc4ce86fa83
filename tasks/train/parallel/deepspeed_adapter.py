"""Every DeepSpeed internal forgeline patches or reaches into, in one place (DeepSpeed 0.19).

The rest of tasks/ uses DeepSpeed only through its public API (`deepspeed.initialize`, `init_distributed`,
`PipelineModule` / `LayerSpec` / `TiedLayerSpec`, the engine's `train_batch`, `eval_batch`, `backward`, `step`,
`save_checkpoint`, `load_checkpoint`, `get_global_grad_norm`, `get_lr`, `module`, `optimizer`, `mpu`, the
topology classes) and through the functions below. Each says what of DeepSpeed's it relies on;
tests/test_deepspeed_adapter.py holds one version-contract test per function that fails when an upgrade changes
that, so a DeepSpeed bump breaks there, loudly, and not as a silently different loss or a hang.

    disable_shm_comm        deepspeed.ops.__compatible_ops__, read by deepspeed.comm.torch.build_shm_op
    forget_cached_groups    deepspeed.utils.groups keeps its process groups in module globals
    count_once_per_stage    the `model_parallel` / `ds_pipe_replicated` attributes clip_grad_norm_ reads
    record_clip_norm        DeepSpeedEngine.clip_fp32_gradients and its `_global_grad_norm`
    use_weights_only_loader the engine's `checkpoint_engine.load(path, map_location)`; DeepSpeed's pickled classes
    pipeline_local_layers   PipelineModule._local_start / _local_stop / _layer_specs / tied_modules
    pipeline_eval_sums      PipelineModule.loss_fn and PipelineEngine.total_loss around eval_batch
    full_fp32_param         deepspeed.utils.safe_get_full_fp32_param
    fp16_masters            FP16_(Unfused)Optimizer's `fp16_groups` and `fp32_groups` / `fp32_groups_flat`
    gathered_param          deepspeed.zero.GatheredParameters and ZeRO-3's `ds_id` mark
    pipeline_tied_layers    PipelineModule.tied_modules / _layer_specs (every tied copy on this stage)
    make_grid               deepspeed.runtime.pipe.topology.PipelineParallelGrid, the mpu for pp = 1 × tp > 1

The optimizer-state internals elastic resume reads and writes (Adam's moments under ZeRO 1–3) are in
tasks/train/parallel/deepspeed_optim.py, under the same rule and tested in the same file.
"""

from __future__ import annotations

import importlib
import pickle
from typing import Any, Callable

import torch
from torch import nn


def disable_shm_comm() -> None:
    """Keep DeepSpeed from JIT-compiling its `deepspeed_shm_comm` op (30–77 s) at the first init_distributed.

    Relies on: `deepspeed.comm.torch.build_shm_op()` builds the op only when `deepspeed.ops.__compatible_ops__`
    says it is compatible. That dict is probed lazily by the module's `__getattr__` on first access (compiler
    checks: ~0.1 s and `ld` noise on stderr); we put the entry there first, marked incompatible, so nothing is
    probed and collectives use plain gloo (ops missing from the dict read as incompatible; only the shm op is
    looked up there when training).
    """
    import deepspeed.ops

    ops = vars(deepspeed.ops)
    if "__compatible_ops__" not in ops:
        ops["__compatible_ops__"] = {}
    ops["__compatible_ops__"]["deepspeed_shm_comm"] = False


def forget_cached_groups() -> None:
    """Forget the process groups DeepSpeed cached, so a later run in the same process starts clean.

    Relies on: `deepspeed.utils.groups` keeps its groups in module globals (`_DATA_PARALLEL_GROUP`, ...) that
    nothing resets after `destroy_process_group`; reloading the module resets them in place (importers that
    hold the module object see the fresh globals)."""
    import deepspeed.utils.groups as groups

    importlib.reload(groups)


def count_once_per_stage(module: nn.Module, tp_rank: int) -> None:
    """Make DeepSpeed's global gradient norm count every pipeline stage's replicated parameters.

    Relies on: without ZeRO, `deepspeed.runtime.utils.clip_grad_norm_` counts a parameter when the rank is
    rank 0 of the grid's model-parallel group (pipe × model: only stage 0) or the parameter is "model parallel"
    (`is_model_parallel_parameter`: a true `model_parallel` or `tensor_model_parallel` attribute), then sums over
    that group — so non-TP weights of stages > 0 would be left out and clipping would differ from a pp = 1 run.
    Marking each stage's replicated parameters `model_parallel` on TP rank 0 counts each exactly once (TP shards
    are counted on every TP rank already; the tied head's copy on the last stage, which DeepSpeed marks
    `ds_pipe_replicated`, stays uncounted). The ZeRO 1–2 norm gives the same result with or without it.
    """
    if tp_rank != 0:
        return
    for p in module.parameters():
        if not getattr(p, "tensor_model_parallel", False) and not getattr(p, "ds_pipe_replicated", False):
            p.model_parallel = True  # type: ignore[attr-defined]


def record_clip_norm(ds: Any) -> None:
    """fp32 weights without ZeRO (fp32, or bf16 through torch_autocast): clip as DeepSpeed's `clip_grad_norm_`
    does, but without a host synchronisation, and keep the norm, so `get_global_grad_norm()` answers as it does
    under ZeRO and bf16/fp16 — and count a pipeline's tied copies once, as those paths do.

    Relies on: `DeepSpeedEngine._take_model_step` calls `self.clip_fp32_gradients()` (an instance attribute
    lookup, so overridable per engine) in exactly that case, which calls `clip_grad_norm_(parameters=
    self.module.parameters(), max_norm=self.gradient_clipping(), mpu=self.mpu)` and drops the result, and
    `get_global_grad_norm()` returns `self._global_grad_norm`. That `clip_grad_norm_` (0.19) builds two one-element
    tensors from Python lists on the device every step (`torch.tensor([max_norm], device=...)`: a blocking
    host-to-device copy, so the CPU waits for the whole queue) and launches one norm and one multiply per
    parameter; `grad_norm_of` computes the same norm with foreach kernels. It does not skip parameters marked
    `ds_pipe_replicated` (ZeRO 1–2, bf16 and fp16 norms do): a tied table split over TP is "model parallel", so
    the last stage's copy, whose gradient equals the first stage's after the tied all-reduce, would count twice.
    We leave the copies out of the norm, then scale every gradient by the same clip coefficient (its formula:
    min(1, max_norm / (norm + 1e-6)))."""

    def clip_and_record() -> None:
        params = [p for p in ds.module.parameters() if p.grad is not None]
        counted = [p for p in params if not getattr(p, "ds_pipe_replicated", False)]
        norm = grad_norm_of(counted, ds.mpu)
        coef = torch.clamp(ds.gradient_clipping() / (norm + 1e-6), max=1.0)      # a device scalar: no read
        by_device: dict[torch.device, list[torch.Tensor]] = {}
        for p in params:
            by_device.setdefault(p.grad.device, []).append(p.grad)
        for device, grads in by_device.items():
            torch._foreach_mul_(grads, coef.to(device))
        ds._global_grad_norm = norm

    ds.clip_fp32_gradients = clip_and_record


def skip_lone_allreduce(ds: Any, zero_stage: int, pipeline: bool) -> bool:
    """ZeRO-0 with one data-parallel rank (a single GPU, or TP/PP alone): there is nothing to average, but
    DeepSpeed 0.19's engine still copies every gradient into a flat buffer, all-reduces it over a group of one,
    scales it by 1/1 and copies it back, each step — three passes over the gradients. Turned off; returns
    whether it did.

    Relies on: `DeepSpeedEngine._backward_epilogue` (and `step`, outside managed accumulation) call
    `allreduce_gradients()` only while the instance attribute `enable_backward_allreduce` is true (DeepSpeed
    turns it off itself for a pipeline, whose engine reduces in `_exec_reduce_grads`, and without a backend),
    and `dp_world_size` is the data-parallel group's size. ZeRO 1–3 reduce through their optimizers: untouched."""
    if zero_stage != 0 or pipeline or int(getattr(ds, "dp_world_size", 0)) != 1:
        return False
    ds.enable_backward_allreduce = False
    return True


def grad_norm_of(params: list[nn.Parameter], mpu: Any) -> torch.Tensor:
    """The global L2 norm of `params`' gradients as DeepSpeed 0.19's `clip_grad_norm_` computes it — with a model-
    parallel `mpu`, replicated parameters counted on model-parallel rank 0 only and the squares summed over the
    model-parallel group; then averaged over the data-parallel group (its MoE rule: equal norms stay equal) — as
    a 0-d device tensor, with no host read."""
    import torch.distributed as dist
    from deepspeed.accelerator import get_accelerator
    from deepspeed.runtime.utils import is_model_parallel_parameter
    from deepspeed.utils import groups

    device = torch.device(get_accelerator().current_device_name())
    if mpu is not None and mpu.get_model_parallel_rank() != 0:
        params = [p for p in params if is_model_parallel_parameter(p)]
    grads = [p.grad.detach().float() for p in params]
    norms = torch._foreach_norm(grads, 2) if grads else []
    total = torch.stack([n.to(device) for n in norms]).pow(2).sum() if norms else torch.zeros((), device=device)
    if mpu is not None:
        dist.all_reduce(total, op=dist.ReduceOp.SUM, group=mpu.get_model_parallel_group())
    total = total.sqrt()
    group = groups._get_data_parallel_group()
    total = total / float(dist.get_world_size(group=group))
    dist.all_reduce(total, group=group)
    return total


def load_weights_only(path: str, map_location: Any = None) -> Any:
    """`torch.load(weights_only=True)` admitting the few plain classes DeepSpeed pickles into its checkpoints.

    Relies on: a DeepSpeed 0.19 checkpoint holds tensors, builtins and only `LossScaler` (`DynamicLossScaler` in
    fp16 with ZeRO 1–3: `CreateLossScaler`), `ZeroStageEnum` and `fragment_address` objects (at these import
    paths). Some Python 3.11 releases (3.11.2, Debian 12's own; not 3.11.7, 3.10 or 3.12) pickle an IntEnum member
    by name, as `getattr(ZeroStageEnum, "optimizer_states")`: that one `getattr` is read by `_enum_member`."""
    from deepspeed.runtime.fp16.loss_scaler import DynamicLossScaler, LossScaler
    from deepspeed.runtime.zero.config import ZeroStageEnum
    from deepspeed.utils.tensor_fragment import fragment_address

    allowed = [LossScaler, DynamicLossScaler, ZeroStageEnum, fragment_address, (_enum_member, "builtins.getattr")]
    with torch.serialization.safe_globals(allowed):
        return torch.load(path, map_location=map_location, weights_only=True)


def _enum_member(cls: Any, name: Any) -> Any:
    """What a pickled `getattr(cls, name)` stands for in a DeepSpeed checkpoint: a member of its ZeRO stage enum,
    nothing else (any other `getattr` would hand the file's author attributes of whatever it names)."""
    from deepspeed.runtime.zero.config import ZeroStageEnum

    if cls is not ZeroStageEnum or not isinstance(name, str) or name not in ZeroStageEnum.__members__:
        raise pickle.UnpicklingError(f"refusing getattr({cls!r}, {name!r}) in a checkpoint")
    return ZeroStageEnum[name]


def use_weights_only_loader(ds: Any) -> None:
    """Make `ds.load_checkpoint` unpickle with `weights_only=True`.

    DeepSpeed's torch checkpoint engine loads with `weights_only=False`: a tampered file would run code on
    resume (the checksum manifest can be forged with it). Relies on: every read of `load_checkpoint` goes
    through `ds.checkpoint_engine.load(path, map_location=...)` (an instance attribute lookup, so overridable)."""
    ds.checkpoint_engine.load = load_weights_only


def pipeline_local_layers(module: Any) -> list[tuple[int, nn.Module]]:
    """(global layer index, built layer) for the layers of this pipeline stage, in order. A tied layer appears
    at the first index of its key only (the tied head is left out: its weight is the embedding's, layer 0).

    Relies on: `PipelineModule` keeps the stage's index range in `_local_start` / `_local_stop` over the
    `_layer_specs` it was given, registers a built `LayerSpec` layer as submodule `str(index)`, and a
    `TiedLayerSpec` one once per key as `tied_modules[spec.key]`."""
    from deepspeed.pipe import TiedLayerSpec

    first: dict[str, int] = {}
    for idx, spec in enumerate(module._layer_specs):
        if isinstance(spec, TiedLayerSpec):
            first.setdefault(spec.key, idx)
    out = []
    for idx in range(module._local_start, module._local_stop):
        spec = module._layer_specs[idx]
        if isinstance(spec, TiedLayerSpec):
            if first[spec.key] == idx:
                out.append((idx, module.tied_modules[spec.key]))
        else:
            out.append((idx, getattr(module, str(idx))))
    return out


def pipeline_tied_layers(module: Any) -> list[tuple[int, nn.Module]]:
    """(first global index of its key, built layer) for every tied layer this stage holds — including the copy
    on the last stage that `pipeline_local_layers` leaves out (the head tied to the embedding): starting
    weights must reach every copy, since DeepSpeed only synchronises tied copies when it builds the module.

    Relies on: as `pipeline_local_layers`, plus `tied_modules` holding only the keys this stage uses."""
    from deepspeed.pipe import TiedLayerSpec

    first: dict[str, int] = {}
    for idx, spec in enumerate(module._layer_specs):
        if isinstance(spec, TiedLayerSpec):
            first.setdefault(spec.key, idx)
    return [(first[key], layer) for key, layer in sorted(module.tied_modules.items())]


def pipeline_eval_sums(ds: Any, micro_batch: tuple, loss_fn: Callable) -> Any:
    """`ds.eval_batch` over one micro-batch with `loss_fn(outputs, labels)` in place of the training loss; its
    output on the last stage (whatever `loss_fn` returned), not reduced over dp and not broadcast.

    Relies on: `PipelineEngine` computes the loss as `self.module.loss_fn(outputs, labels)` and adds it to
    `self.total_loss`, which `eval_batch` does not reset first (it would add to the last `train_batch`'s
    scalar loss, and a non-scalar `loss_fn` would not even add). Both are restored afterwards."""
    module = ds.module
    train_loss_fn = module.loss_fn
    module.loss_fn, ds.total_loss = loss_fn, None
    try:
        return ds.eval_batch(iter([micro_batch]), compute_loss=True, reduce_output=None, bcast_loss=False,
                             num_micro_batches=1)
    finally:
        module.loss_fn, ds.total_loss = train_loss_fn, None


def full_fp32_param(p: torch.Tensor) -> torch.Tensor | None:
    """The fp32 master copy of parameter `p` (gathered over dp under ZeRO 1–3), or None when the optimizer
    keeps none (fp32 without ZeRO: the parameter itself is the master).

    Relies on: `deepspeed.utils.safe_get_full_fp32_param(param)`; it is a collective under ZeRO-3."""
    from deepspeed.utils import safe_get_full_fp32_param

    return safe_get_full_fp32_param(p)


def fp16_masters(optimizer: Any) -> dict[int, torch.Tensor]:
    """id(parameter) -> its fp32 master under DeepSpeed's fp16 optimizers without ZeRO, whose masters
    `safe_get_full_fp32_param` cannot reach (they carry no `_hp_mapping`); empty for any other optimizer. Without
    it the final weights of an fp16 ZeRO-0 run would be the fp16-rounded module values.

    Relies on: FP16_UnfusedOptimizer's `fp16_groups` / `fp32_groups` (lists of per-parameter tensors, in the same
    order) and FP16_Optimizer's `fp16_groups` / `fp32_groups_flat` (one flat fp32 tensor per group, the
    parameters concatenated in order, as `_flatten_dense_tensors` lays them out)."""
    groups = getattr(optimizer, "fp16_groups", None)
    if groups is None:
        return {}
    masters: dict[int, torch.Tensor] = {}
    if hasattr(optimizer, "fp32_groups_flat"):
        for params, flat in zip(groups, optimizer.fp32_groups_flat):
            offset = 0
            for p in params:
                masters[id(p)] = flat.detach().narrow(0, offset, p.numel()).view_as(p)
                offset += p.numel()
    elif hasattr(optimizer, "fp32_groups"):
        for params, fp32 in zip(groups, optimizer.fp32_groups):
            masters.update({id(p): m.detach() for p, m in zip(params, fp32)})
    return masters


def gathered_param(p: torch.Tensor) -> torch.Tensor:
    """The whole value of parameter `p`: gathered over data parallel when ZeRO-3 partitions it (a collective then:
    every dp rank must call it for the same parameter), else `p` itself.

    Relies on: ZeRO-3 marks its parameters with `ds_id` and `deepspeed.zero.GatheredParameters(params)` makes
    their full data visible inside the block (read-only with `modifier_rank=None`)."""
    if not hasattr(p, "ds_id"):
        return p.detach()
    import deepspeed

    with deepspeed.zero.GatheredParameters([p], modifier_rank=None):
        return p.detach().clone()


def make_grid(topology: Any) -> Any:
    """The process-group grid over `topology`, usable as `deepspeed.initialize(mpu=...)` (collective).

    Relies on: `deepspeed.runtime.pipe.topology.PipelineParallelGrid(topology=...)` builds the groups over the
    default world group and answers the mpu interface DeepSpeed consults (`get_data_parallel_group`,
    `get_model_parallel_group` / `_rank` / `_world_size`, ...) plus `get_slice_parallel_group` (the TP group)."""
    from deepspeed.runtime.pipe.topology import PipelineParallelGrid

    return PipelineParallelGrid(topology=topology)
