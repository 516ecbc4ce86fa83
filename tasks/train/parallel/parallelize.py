"""Parallelism apart from the model (torchtitan's `parallelize`): model.py builds a plain decoder, this module
turns it into this rank's share and wraps it in a DeepSpeed engine.

    init_distributed        deepspeed.init_distributed (gloo on CPU; a file rendezvous for local ranks)
    build_layout            topology and process groups -> Layout (this rank's coordinates, its TP group)
    (tp_model.py)           apply_tensor_parallel: the TP / vocab / sequence-parallel forms of the layers
    pipeline_layers         the model as LayerSpecs, cut into stages by PipelineModule
    build_module            plain Transformer (pp = 1) or PipelineModule (pp > 1), with TP applied
    build_engine            build_module + the client AdamW + LR schedule + `deepspeed.initialize`
    teardown                destroy the process groups and DeepSpeed's cached ones

Topology: `PipeModelDataParallelTopology(num_pp=pp, num_mp=tp, num_dp=dp)`; axes (pipe, data, model), model
fastest, so TP peers are neighbouring ranks (same node). With pp > 1 the model is a `PipelineModule` (blocks
split evenly by `partition_method="type:Block"`, the tied embedding/head as DeepSpeed `TiedLayerSpec`s whose
gradients DeepSpeed all-reduces between the first and last stage); TP layers use process groups built over
the topology's model axis. With pp = 1 the plain `Transformer` is used; when tp > 1 a `PipelineParallelGrid`
over the same topology is the `mpu` DeepSpeed needs for its data-parallel groups, and its slice group is the TP
group. DeepSpeed internals this needs go through `deepspeed_adapter.py`.

Every layer is built on the meta device (shapes only), TP-swapped there, then materialised with this rank's
slices only (`init_weights.load_local` from a `WeightSource`; the random init's `RandomSource` reproduces the
whole-tensor draw of `Transformer(cfg, seed)` bit for bit, slice by slice), so every layout starts from the
shards of the same weights and no rank ever allocates what it does not hold. With ZeRO-3 each layer is
partitioned right after it is materialised.
"""

from __future__ import annotations

import logging
import os
from dataclasses import dataclass
from datetime import timedelta
from typing import TYPE_CHECKING, Any, Callable, NamedTuple

import torch
import torch.distributed as dist
from torch import nn

from specs.architecture import ModelConfig
from specs.pretrain import ParallelSpec
from specs.ranks import JobSpec
from specs.train import SpeedSpec
from tasks.train.parallel.deepspeed_adapter import (count_once_per_stage, disable_shm_comm, forget_cached_groups, make_grid,
                                           pipeline_local_layers, pipeline_tied_layers, record_clip_norm,
                                           skip_lone_allreduce)
from tasks.train.parallel.dsconfig import compile_blocks, make_optimizer, on_cuda, scheduler_factory
from tasks.train.checkpointing.init_weights import RandomSource, WeightSource, load_local, load_params
from tasks.train.modeling.lora import apply_lora
from tasks.train.modeling.model import Block, Embedding, FinalNorm, LMHead, Transformer, head_index
from tasks.train.parallel.tp_context import NO_TP, TPContext
from tasks.train.parallel.tp_model import VocabParallelLMHead, apply_tensor_parallel, head_loss, tied_head_forward

if TYPE_CHECKING:  # types for readers: specs/sft.py would widen pretrain's deps, deepspeed is imported lazily
    from deepspeed.pipe import LayerSpec

    from specs.train import AdapterSpec

log = logging.getLogger("forgeline.pretrain")


# --------------------------------------------------------------------------------------- process groups, layout
def init_distributed(backend: str | None = None, init_file: str | None = None, allow_shm: bool = False,
                     timeout_s: float = 1800) -> None:
    """`deepspeed.init_distributed` from RANK/WORLD_SIZE/MASTER_* in the environment (gloo on CPU).

    `init_file`: rendezvous through this file (local ranks), so no TCP store listens on every interface
    (MASTER_PORT). `allow_shm`: let DeepSpeed JIT-build its shm collectives op (faster CPU all-reduce once built
    and cached; the first build takes 30–77 s, and training does not need it). `timeout_s`: the default group's
    collective timeout (`parallel.collective_timeout_s`)."""
    import deepspeed

    if not allow_shm:
        disable_shm_comm()
    if backend is None:
        from deepspeed.accelerator import get_accelerator

        backend = get_accelerator().communication_backend_name()
    if init_file:
        deepspeed.init_distributed(dist_backend=backend, timeout=timedelta(seconds=timeout_s),
                                   init_method=f"file://{init_file}", rank=int(os.environ["RANK"]),
                                   world_size=int(os.environ["WORLD_SIZE"]), auto_mpi_discovery=False)
    else:
        deepspeed.init_distributed(dist_backend=backend, timeout=timedelta(seconds=timeout_s))


def teardown() -> None:
    """Destroy the process groups (before exit: ZeRO-3 runs abort at interpreter exit otherwise, ~3/20) and
    forget DeepSpeed's cached groups, so a later run in the same process (tests, in-process world 1) starts
    clean."""
    if dist.is_available() and dist.is_initialized():
        dist.destroy_process_group()
    forget_cached_groups()


@dataclass
class Layout:
    rank: int
    world: int
    dp: int
    tp: int
    pp: int
    dp_rank: int
    tp_rank: int
    stage: int
    topo: Any
    tp_ctx: TPContext
    mpu: Any = None  # the grid (pp = 1, tp > 1); a PipelineModule brings its own

    @property
    def is_first(self) -> bool:
        return self.stage == 0

    @property
    def is_last(self) -> bool:
        return self.stage == self.pp - 1


def build_layout(parallel: ParallelSpec) -> Layout:
    """Topology and groups for this rank; every rank must call it (group creation is collective)."""
    from deepspeed.runtime.pipe.topology import PipeModelDataParallelTopology

    rank, world = dist.get_rank(), dist.get_world_size()
    if world != parallel.world_size:
        raise ValueError(f"world size {world} != dp × tp × pp = {parallel.world_size}")
    topo = PipeModelDataParallelTopology(num_pp=parallel.pp, num_mp=parallel.tp, num_dp=parallel.dp)
    c = topo.get_coord(rank)
    mpu, tp_ctx = None, NO_TP
    sequence = parallel.sequence_parallel  # SFT's layout carries `sft.sequence_parallel` (SFTJob.from_sections)
    if parallel.pp == 1 and parallel.tp > 1:
        mpu = make_grid(topo)
        tp_ctx = TPContext(c.model, parallel.tp, mpu.get_slice_parallel_group(), sequence)
    elif parallel.tp > 1:
        for ranks in topo.get_axis_comm_lists("model"):
            group = dist.new_group(ranks=ranks, timeout=timedelta(seconds=parallel.collective_timeout_s))
            if rank in ranks:
                tp_ctx = TPContext(c.model, parallel.tp, group, sequence)
    return Layout(rank, world, parallel.dp, parallel.tp, parallel.pp, c.data, c.model, c.pipe, topo, tp_ctx, mpu)


# ------------------------------------------------------------------------------------------------- the module
Finish = Callable[[int, nn.Module], nn.Module]  # (global layer index, meta layer) -> this rank's real layer


def staged(spec: LayerSpec, index: int, finish: Finish) -> LayerSpec:
    """`spec` (a DeepSpeed LayerSpec / TiedLayerSpec, not a forgeline spec) made to build its layer on the meta device and hand it to
    `finish` (TP slices, this rank's values), so a pipeline stage allocates only its own layers' own slices.
    The spec's `typename` stays the plain class: `partition_method="type:Block"` and `checkpointable_layers`
    see the same names as before."""
    plain = spec.build

    def build(log: bool = False) -> nn.Module:
        with torch.device("meta"):
            layer = plain(log)
        return finish(index, layer)

    spec.build = build  # PipelineModule calls `spec.build()` on the stage that owns the layer
    return spec


def fused_projections(adapter: AdapterSpec | None) -> bool:
    """Whether the Blocks are built with fused q/k/v and gate/up linears (tasks/train/modeling/fused.py: one GEMM each):
    always, except under a LoRA adapter, which targets q, k, v, gate and up one by one."""
    return adapter is None or adapter.kind != "lora"


def pipeline_layers(cfg: ModelConfig, seed: int, finish: Finish | None = None, fused: bool = False) -> list[Any]:
    """LayerSpecs of the whole model, built lazily by PipelineModule on the stage that owns each; `finish`
    (default: the seeded random init, no TP) turns each meta-built layer into this rank's real one; `fused`:
    the Blocks' projections fused (`fused_projections`)."""
    from deepspeed.pipe import LayerSpec, TiedLayerSpec

    if finish is None:
        source = RandomSource(cfg, seed)

        def finish(index: int, layer: nn.Module) -> nn.Module:
            load_local([(index, layer)], 0, 1, source, meta_only=True)
            return layer

    if cfg.tie_embeddings:
        first = staged(TiedLayerSpec("embed", Embedding, cfg, seed, tied_weight_attr="weight"), 0, finish)
        last = staged(TiedLayerSpec("embed", Embedding, cfg, seed, forward_fn=tied_head_forward,
                                    tied_weight_attr="weight"), 0, finish)
    else:
        first = staged(LayerSpec(Embedding, cfg, seed), 0, finish)
        last = staged(LayerSpec(LMHead, cfg, seed, head_index(cfg)), head_index(cfg), finish)
    blocks = [staged(LayerSpec(Block, cfg, i, seed, fused=fused), i, finish) for i in range(1, cfg.n_layers + 1)]
    return [first, *blocks, staged(LayerSpec(FinalNorm, cfg), cfg.n_layers + 1, finish), last]


def local_layers(module: nn.Module, layout: Layout) -> list[tuple[int, nn.Module]]:
    """(global layer index, layer) for every layer this rank holds, each once — with a pipeline, every tied
    copy too (the last stage's head tied to the embedding is listed under the embedding's index 0)."""
    if layout.pp == 1:
        return list(enumerate(module.layers))
    seen, out = set(), []
    for idx, layer in [*pipeline_local_layers(module), *pipeline_tied_layers(module)]:
        if id(layer) not in seen:
            seen.add(id(layer))
            out.append((idx, layer))
    return out


def zero3_dtype(ds_cfg: dict[str, Any]) -> torch.dtype:
    """The dtype ZeRO-3 keeps parameters in (DeepSpeed casts a module it partitions itself; one partitioned
    beforehand must already have it)."""
    if ds_cfg.get("bf16", {}).get("enabled"):
        return torch.bfloat16
    return torch.float16 if ds_cfg.get("fp16", {}).get("enabled") else torch.float32


def partition_zero3(layer: nn.Module, ds_cfg: dict[str, Any], mpu: Any) -> None:
    """Partition `layer`'s parameters over the data-parallel group now, as `deepspeed.initialize` would do for
    the whole module (same `zero.Init(module=...)` call as DeepSpeed's parameter_offload.py), so the rank keeps
    only its 1/dp of this layer before the next one is materialised."""
    import deepspeed

    group = mpu.get_data_parallel_group() if mpu is not None else None
    deepspeed.zero.Init(module=layer, data_parallel_group=group, dtype=zero3_dtype(ds_cfg),
                        config_dict_or_path=ds_cfg, mpu=mpu)


def build_module(cfg: ModelConfig, layout: Layout, seed: int, checkpointing: bool = False,
                 init: WeightSource | None = None, z_loss: float = 0.0, adapter: AdapterSpec | None = None,
                 zero3: dict[str, Any] | None = None) -> nn.Module:
    """This rank's model: the plain Transformer (pp = 1) or its pipeline stage, with TP applied.

    Built on the meta device and materialised per layer with this rank's slices only: from `init` (SFT's
    pretrained model; a Hugging Face checkpoint, read as safetensors slices), else the seeded random init
    (`RandomSource`: the same values as `Transformer(cfg, seed)`, generated per slice). Under TP a rank never
    holds a full column/row-parallel weight; a pipeline stage builds only its own layers (its LayerSpecs are
    built, then finished, by PipelineModule); `zero3` (the DeepSpeed config, ZeRO-3, pp = 1): each layer is
    partitioned as soon as it is materialised, so the peak is the rank's share plus about one layer.

    The pipeline cut matches on class names: DeepSpeed's `partition_method="type:Block"` regex-searches each
    LayerSpec's `typename.__name__` (case-insensitive; only `Block` contains "block" here), weighs matches 1
    and balances them over the stages; `checkpointable_layers=["Block"]` compares each built layer's
    `__class__.__name__` exactly. TP swaps linears *inside* the built Blocks, so both see the plain classes.
    `adapter` (SFT's, kind `lora`): the loaded weights are frozen and LoRA pairs added to the targeted linears
    (`tasks/train/modeling/lora.py`)."""
    source = init if init is not None else RandomSource(cfg, seed)
    dtype = zero3_dtype(zero3) if zero3 is not None else None
    if layout.tp_ctx.sequence_parallel and cfg.seq_len % layout.tp:
        raise ValueError(f"sequence parallelism: seq_len {cfg.seq_len} does not split over tp = {layout.tp}")

    def finish(index: int, layer: nn.Module) -> nn.Module:
        apply_tensor_parallel(layer, layout.tp_ctx, cfg.vocab_size)
        load_local([(index, layer)], layout.tp_rank, layout.tp, source, dtype, meta_only=True)
        return layer

    lora, fused = adapter is not None and adapter.kind == "lora", fused_projections(adapter)
    if layout.pp > 1:
        from deepspeed.pipe import PipelineModule

        module = PipelineModule(
            layers=pipeline_layers(cfg, seed, finish, fused), topology=layout.topo,
            loss_fn=head_loss(cfg.vocab_size, layout.tp_ctx, z_loss),
            partition_method="type:Block", activation_checkpoint_interval=1 if checkpointing else 0,
            checkpointable_layers=["Block"])
        for head in [m for m in module.modules() if isinstance(m, VocabParallelLMHead)]:
            head.keep_shard = True  # its logits go to loss_fn only (the tied head's forward_fn keeps them too)
        count_once_per_stage(module, layout.tp_rank)  # after TP: it reads the shards' `tensor_model_parallel`
        if lora:
            apply_lora(module, local_layers(module, layout), adapter, seed, layout.tp_ctx)
        return module
    with torch.device("meta"):
        module = apply_tensor_parallel(Transformer(cfg, seed, checkpointing, fused), layout.tp_ctx)
    if lora:  # on the meta model (it needs shapes only), so ZeRO-3 partitions adapters with their layer
        apply_lora(module, local_layers(module, layout), adapter, seed, layout.tp_ctx)
    for index, layer in local_layers(module, layout):
        if zero3 is None:
            load_local([(index, layer)], layout.tp_rank, layout.tp, source, dtype, meta_only=True)
            continue
        # children before parents: each submodule's own parameters are materialised, then partitioned at once
        # (a parent's zero.Init then skips its already-partitioned children), so the peak is one linear
        for name, sub in reversed(list(layer.named_modules())):
            prefix = f"layers.{index}" + (f".{name}" if name else "")
            if load_params(prefix, sub, layout.tp_rank, layout.tp, source, dtype, meta_only=True, recurse=False):
                partition_zero3(sub, zero3, layout.mpu)
    return module


class DeepSpeedParts(NamedTuple):
    ds: Any            # the DeepSpeed engine (PipelineEngine when pp > 1)
    optimizer: Any     # DeepSpeed's wrapped optimizer
    scheduler: Any     # the LR schedule DeepSpeed steps
    dp_group: dist.ProcessGroup | None  # this rank's data-parallel process group (None: the world, dp = world = 1)


def fetch_blocks_whole(module: nn.Module) -> int:
    """ZeRO-3 (`speed.stage3_fetch: block`): each Block's parameters are gathered and released as one unit, by
    hooks on the Block alone (DeepSpeed's public `set_z3_leaf_modules`; before `deepspeed.initialize`, which
    registers the hooks). Without it every submodule with parameters has its own pair: more host work per layer,
    and each of those hooks, disabled for torch.compile, splits a compiled block into pieces. Returns how many."""
    from deepspeed.utils import set_z3_leaf_modules

    return len(set_z3_leaf_modules(module, [Block], raise_if_not_found=False))


def compile_model(module: nn.Module, scope: str = "blocks") -> str:
    """`speed.compile` on: each LM head's chunked-loss math compiled (tasks/train/modeling/loss.py), and either
    every Block's forward compiled in place (`blocks`: DeepSpeed's hooks, the pipeline cut and the loss's chunk
    loop stay eager) or, for a plain `Transformer`, its whole forward as one graph (`model`: the loss's chunk loop
    is traced too, so the per-chunk math is inlined). Returns the scope applied."""
    for head in [m for m in module.modules() if isinstance(m, LMHead)]:
        head.compiled_loss = True
    if scope == "model" and isinstance(module, Transformer):
        # the forward, not nn.Module.compile(): hooks on the module stay eager, as compile_blocks explains
        module.forward = torch.compile(module.forward)
        return "model"
    compile_blocks(module, Block)
    return "blocks"


def compile_scope(speed: SpeedSpec, layout: Layout, zero_stage: int) -> str:
    """`speed.scope_at` this rank's layout; a whole-model request that falls back to blocks is said in the log."""
    scope = speed.scope_at(layout.pp, layout.tp, zero_stage)
    if scope != speed.compile_scope:
        log.warning("speed.compile_scope 'model' needs pp = 1, tp = 1 and ZeRO 0-2 (here pp %d, tp %d, ZeRO %d): "
                    "compiling each block instead", layout.pp, layout.tp, zero_stage)
    return scope


def build_engine(cfg: ModelConfig, job: JobSpec, layout: Layout, seed: int, ds_cfg: dict[str, Any],
                 init: WeightSource | None = None, schedule: list[tuple[int, int]] | None = None) -> DeepSpeedParts:
    """The module, the client AdamW and schedule, and `deepspeed.initialize` over them for this rank.

    `init`: the weights to start from (SFT: the pretrained model; a Hugging Face checkpoint), any layout."""
    import deepspeed

    train = job.train
    z_loss = getattr(train, "z_loss", 0.0)  # a pretraining knob: SFTSpec has none
    zero3 = ds_cfg if ds_cfg.get("zero_optimization", {}).get("stage") == 3 else None
    adapter = getattr(train, "adapter", None)  # an SFT knob, PretrainSpec has none
    module = build_module(cfg, layout, seed, train.activation_checkpointing, init, z_loss, adapter, zero3)
    if zero3 is not None and train.speed.stage3_fetch == "block" and not (adapter and adapter.kind == "lora"):
        fetch_blocks_whole(module)  # not under LoRA: its adapters' backward found them released (DeepSpeed 0.19.8)
    if train.speed.compiles(on_cuda(job.parallel)):  # `auto`: on CUDA ranks
        compile_model(module, compile_scope(train.speed, layout, job.parallel.zero_stage))
    optimizer = make_optimizer(module, train.optim, train.speed.fused_adamw,
                               "cuda" if on_cuda(job.parallel) else "cpu")
    ds, optimizer, _, scheduler = deepspeed.initialize(
        model=module, optimizer=optimizer, lr_scheduler=scheduler_factory(train.optim, train.steps, schedule),
        config=ds_cfg, mpu=layout.mpu if layout.pp == 1 else None)
    if not (ds_cfg["bf16"]["enabled"] or ds_cfg["fp16"]["enabled"]) and job.parallel.zero_stage == 0:
        record_clip_norm(ds)  # fp32 weights without ZeRO: fp32, or bf16 through torch_autocast
    skip_lone_allreduce(ds, job.parallel.zero_stage, layout.pp > 1)  # dp 1: no gradient copy round trip
    grid = ds.mpu if layout.pp > 1 else layout.mpu  # a PipelineEngine's mpu is its module's grid
    return DeepSpeedParts(ds, optimizer, scheduler, grid.get_data_parallel_group() if grid is not None else None)
