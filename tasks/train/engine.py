"""DeepSpeed set-up for one rank: process groups, topology, the model (plain or pipeline), and a small
`Engine` wrapper with the operations the loop needs (train step, evaluation, save/load, consolidation).

Topology: `PipeModelDataParallelTopology(num_pp=pp, num_mp=tp, num_dp=dp)`; axes (pipe, data, model), model
fastest, so TP peers are neighbouring ranks (same node). With pp > 1 the model is a `PipelineModule` (blocks
split evenly by `partition_method="type:Block"`, the tied embedding/head as DeepSpeed `TiedLayerSpec`s whose
gradients DeepSpeed all-reduces between the first and last stage); TP layers use process groups built over
the topology's model axis. With pp = 1 the plain `Transformer` is used; when tp > 1 a `PipelineParallelGrid`
over the same topology is the `mpu` DeepSpeed needs for its data-parallel groups, and its slice group is the TP
group.
"""

from __future__ import annotations

import logging
import os
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import timedelta
from functools import partial
from typing import Any, Callable, Iterator

import torch
import torch.distributed as dist

from tasks.core import faults
from tasks.train.data import EvalData, TrainData, loss_sums
from tasks.train.dsconfig import make_optimizer, scheduler_factory
from tasks.train.model import (Block, Embedding, FinalNorm, LMHead, ModelConfig, Transformer, head_index,
                               lm_head_forward, lm_loss)
from tasks.train.tensor_parallel import NO_TP, TPContext, gather_full

log = logging.getLogger("forgeline.pretrain")


def disable_shm_comm() -> None:
    """Keep DeepSpeed from JIT-compiling its `deepspeed_shm_comm` op (30–77 s) at the first init_distributed.

    `deepspeed.comm.torch.build_shm_op()` builds it only when `deepspeed.ops.__compatible_ops__` says the op is
    compatible. That dict is probed lazily on first access (compiler checks: ~0.1 s and `ld` noise on stderr);
    we put the entry there first, marked incompatible, so nothing is probed and collectives use plain gloo
    (ops missing from the dict read as incompatible; only the shm op is looked up there when training).
    Set FORGELINE_DS_SHM=1 to allow the op (faster CPU all-reduce once it is built and cached).
    """
    if os.environ.get("FORGELINE_DS_SHM") == "1":
        return
    import deepspeed.ops

    ops = vars(deepspeed.ops)
    if "__compatible_ops__" not in ops:
        ops["__compatible_ops__"] = {}
    ops["__compatible_ops__"]["deepspeed_shm_comm"] = False


def init_distributed(backend: str | None = None) -> None:
    """`deepspeed.init_distributed` from RANK/WORLD_SIZE/MASTER_* in the environment (gloo on CPU)."""
    import deepspeed

    disable_shm_comm()
    if backend is None:
        from deepspeed.accelerator import get_accelerator

        backend = get_accelerator().communication_backend_name()
    init_file = os.environ.get("FORGELINE_INIT_FILE")
    if init_file:  # local ranks: a file rendezvous, so no TCP store listens on every interface (MASTER_PORT)
        deepspeed.init_distributed(dist_backend=backend, timeout=timedelta(minutes=30), init_method=f"file://{init_file}",
                                   rank=int(os.environ["RANK"]), world_size=int(os.environ["WORLD_SIZE"]),
                                   auto_mpi_discovery=False)
    else:
        deepspeed.init_distributed(dist_backend=backend, timeout=timedelta(minutes=30))


def teardown() -> None:
    """Destroy the process groups (before exit: ZeRO-3 runs abort at interpreter exit otherwise, ~3/20) and
    forget DeepSpeed's cached groups, so a later run in the same process (tests, in-process world 1) starts
    clean. `deepspeed.utils.groups` keeps them in module globals; reloading the module resets them in place."""
    import importlib

    if dist.is_available() and dist.is_initialized():
        dist.destroy_process_group()
    import deepspeed.utils.groups as groups

    importlib.reload(groups)


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


def build_layout(parallel: Any) -> Layout:
    """Topology and groups for this rank; every rank must call it (group creation is collective)."""
    from deepspeed.runtime.pipe.topology import PipeModelDataParallelTopology, PipelineParallelGrid

    rank, world = dist.get_rank(), dist.get_world_size()
    if world != parallel.world_size:
        raise ValueError(f"world size {world} != dp × tp × pp = {parallel.world_size}")
    topo = PipeModelDataParallelTopology(num_pp=parallel.pp, num_mp=parallel.tp, num_dp=parallel.dp)
    c = topo.get_coord(rank)
    mpu, tp_ctx = None, NO_TP
    if parallel.pp == 1 and parallel.tp > 1:
        mpu = PipelineParallelGrid(topology=topo)
        tp_ctx = TPContext(c.model, parallel.tp, mpu.get_slice_parallel_group())
    elif parallel.tp > 1:
        for ranks in topo.get_axis_comm_lists("model"):
            group = dist.new_group(ranks=ranks)
            if rank in ranks:
                tp_ctx = TPContext(c.model, parallel.tp, group)
    return Layout(rank, world, parallel.dp, parallel.tp, parallel.pp, c.data, c.model, c.pipe, topo, tp_ctx, mpu)


def pipeline_layers(cfg: ModelConfig, seed: int, tp: TPContext) -> list[Any]:
    """LayerSpecs of the whole model, built lazily by PipelineModule on the stage that owns each."""
    from deepspeed.pipe import LayerSpec, TiedLayerSpec

    if cfg.tie_embeddings:
        first = TiedLayerSpec("embed", Embedding, cfg, seed, tied_weight_attr="weight")
        last = TiedLayerSpec("embed", Embedding, cfg, seed, forward_fn=lm_head_forward, tied_weight_attr="weight")
    else:
        first = LayerSpec(Embedding, cfg, seed)
        last = LayerSpec(LMHead, cfg, seed, head_index(cfg))
    blocks = [LayerSpec(Block, cfg, i, seed, tp) for i in range(1, cfg.n_layers + 1)]
    return [first, *blocks, LayerSpec(FinalNorm, cfg), last]


def _count_once_per_stage(module: torch.nn.Module, tp_rank: int) -> None:
    """Make DeepSpeed's global gradient norm count every pipeline stage's replicated parameters.

    Without ZeRO, `deepspeed.runtime.utils.clip_grad_norm_` counts a parameter when the rank is rank 0 of the
    grid's model-parallel group (pipe × model: only stage 0) or the parameter is "model parallel", then sums over
    that group — so the norms, and non-TP weights of stages > 0 would be left out and clipping would differ from
    a pp = 1 run. Marking each stage's replicated parameters `model_parallel` on TP rank 0 counts each exactly
    once (TP shards are counted on every TP rank already; the tied head's copy on the last stage, which DeepSpeed
    marks `ds_pipe_replicated`, stays uncounted). The ZeRO 1–2 norm gives the same result with or without it.
    """
    if tp_rank != 0:
        return
    for p in module.parameters():
        if not getattr(p, "tensor_model_parallel", False) and not getattr(p, "ds_pipe_replicated", False):
            p.model_parallel = True  # type: ignore[attr-defined]


def _record_clip_norm(ds: Any) -> None:
    """fp32 without ZeRO: DeepSpeed clips with `clip_grad_norm_` but drops the norm it computed; keep it so
    `get_global_grad_norm()` answers as it does under ZeRO and bf16/fp16 (same function, same arguments)."""
    from deepspeed.runtime.utils import clip_grad_norm_

    def clip_and_record() -> None:
        ds._global_grad_norm = clip_grad_norm_(parameters=ds.module.parameters(), max_norm=ds.gradient_clipping(),
                                               mpu=ds.mpu)

    ds.clip_fp32_gradients = clip_and_record


def _eval_loss_fn(n_sources: int, logits: torch.Tensor, labels: tuple) -> torch.Tensor:
    y, src, w = labels
    return loss_sums(logits, y, src, w, n_sources)


class Engine:
    """One rank's DeepSpeed engine plus what the training loop asks of it."""

    def __init__(self, cfg: ModelConfig, job: Any, layout: Layout, seed: int, ds_cfg: dict[str, Any],
                 init_state: dict[str, torch.Tensor] | None = None):
        """`init_state`: plain-model weights to start from (SFT: the pretrained model; pp = tp = 1 only)."""
        import deepspeed
        from deepspeed.pipe import PipelineModule

        self.cfg, self.job, self.layout = cfg, job, layout
        train = job.train
        if layout.pp > 1:
            module = PipelineModule(
                layers=pipeline_layers(cfg, seed, layout.tp_ctx), topology=layout.topo, loss_fn=lm_loss,
                partition_method="type:Block",
                activation_checkpoint_interval=1 if train.activation_checkpointing else 0,
                checkpointable_layers=["Block"])
            _count_once_per_stage(module, layout.tp_rank)
        else:
            module = Transformer(cfg, seed, layout.tp_ctx, checkpointing=train.activation_checkpointing)
            if init_state is not None:
                if layout.tp > 1:
                    raise ValueError("starting from a plain state dict needs tp = 1")
                module.load_state_dict(init_state, strict=True)
        optimizer = make_optimizer(module, train.optim)
        self.ds, self.optimizer, _, self.scheduler = deepspeed.initialize(
            model=module, optimizer=optimizer, lr_scheduler=scheduler_factory(train.optim, train.steps),
            config=ds_cfg, mpu=layout.mpu if layout.pp == 1 else None)
        if train.precision == "fp32" and job.parallel.zero_stage == 0:
            _record_clip_norm(self.ds)
        if layout.pp > 1:
            self.dp_group = self.ds.mpu.get_data_parallel_group()
        else:
            self.dp_group = layout.mpu.get_data_parallel_group() if layout.mpu is not None else None

    # ------------------------------------------------------------------------------------------------ training
    @property
    def judges_before_update(self) -> bool:
        """One micro-batch per rank and no pipeline: the step's loss is known before any backward, so the
        stability guard can skip or down-weight the update. With gradient accumulation the earlier micro-batches'
        gradients are already reduced (ZeRO) when the last loss is known, and a pipeline's `train_batch` is one
        call; holding every micro-batch's graph to judge first would undo what accumulation saves."""
        return self.layout.pp == 1 and self.job.train.grad_accum == 1

    def _set_lr_scale(self, scale: float) -> None:
        """Multiply this step's scheduled LR (the scheduler sets the next step's value after `step()`)."""
        if scale != 1.0:
            for group in self.ds.optimizer.param_groups:
                group["lr"] *= scale

    def train_step(self, batch: int, data: TrainData, lr_scale: float = 1.0,
                   judge: Callable[[float], Any] | None = None) -> tuple[float, float | None, Any]:
        """One optimizer step on data batch `batch`; returns (mean loss over the global batch, grad norm,
        the judge's decision or None).

        `judge(loss)` is called after the forward and before the backward when `judges_before_update`; a decision
        whose `apply_update` is false skips the backward and the optimizer step (the LR schedule still advances),
        one with a `factor` scales the loss (hence the gradient).
        """
        L = self.layout
        inject = faults.loss_factor(batch + 1)  # 1-based, as in incidents.jsonl
        self._set_lr_scale(lr_scale)
        if L.pp > 1:
            it = data.iterator(batch, L.dp_rank) if (L.is_first or L.is_last) else None
            loss = self.ds.train_batch(data_iter=it).detach().float()  # averaged over dp, on every stage
            return float(loss) * inject, _as_float(self.ds.get_global_grad_norm()), None
        if not self.judges_before_update:
            losses = []
            for x, y in data.micro_batches(batch, L.dp_rank):
                out = self.ds(x.to(self.ds.device), y.to(self.ds.device)) * inject
                self.ds.backward(out)
                self.ds.step()
                losses.append(out.detach().float())
            return self._dp_mean(torch.stack(losses).mean()), _as_float(self.ds.get_global_grad_norm()), None
        (x, y), = data.micro_batches(batch, L.dp_rank)
        out = self.ds(x.to(self.ds.device), y.to(self.ds.device)) * inject
        loss = self._dp_mean(out.detach().float())
        decision = judge(loss) if judge else None
        if decision is not None and not decision.apply_update:
            del out
            self.scheduler.step()  # the step is skipped, not the schedule: LR stays a function of the step
            return loss, None, decision
        factor = getattr(decision, "factor", 1.0)
        self.ds.backward(out * factor if factor != 1.0 else out)
        self.ds.step()
        return loss, _as_float(self.ds.get_global_grad_norm()), decision

    def _dp_mean(self, loss: torch.Tensor) -> float:
        if self.layout.dp > 1:
            loss = loss.clone()
            dist.all_reduce(loss, group=self.dp_group)
            loss = loss / self.layout.dp
        return float(loss)

    def lr(self) -> float:
        return float(self.ds.get_lr()[0])

    # ----------------------------------------------------------------------- the step API objectives build on
    @property
    def device(self) -> Any:
        return self.ds.device

    def set_lr_scale(self, scale: float) -> None:
        """Multiply this step's scheduled LR (the scheduler sets the next step's value after its `step()`)."""
        self._set_lr_scale(scale)

    def forward(self, *args: Any, **kwargs: Any) -> Any:
        """The wrapped module's forward (training mode): logits, or the mean loss when labels are given."""
        return self.ds(*args, **kwargs)

    def backward_and_step(self, loss: torch.Tensor) -> None:
        """Backward of one micro-batch's loss and DeepSpeed's step (it updates at the accumulation boundary)."""
        self.ds.backward(loss)
        self.ds.step()

    def skip_update(self) -> None:
        """Skip this optimizer step; the LR schedule still advances (LR stays a function of the step)."""
        self.scheduler.step()

    def grad_norm(self) -> float | None:
        """The global gradient norm of the last update (None when unknown or not finite)."""
        return _as_float(self.ds.get_global_grad_norm())

    def pipeline_train_batch(self, data_iter: Any) -> float:
        """A pipeline's whole optimizer step (`train_batch`): the mean loss over dp, the same on every stage."""
        return float(self.ds.train_batch(data_iter=data_iter).detach().float())

    def dp_sum(self, x: torch.Tensor) -> float:
        """Sum over the data-parallel ranks (every rank gets the same value)."""
        if self.layout.dp > 1:
            x = x.detach().clone().double()
            dist.all_reduce(x, group=self.dp_group)
        return float(x)

    def dp_mean(self, x: torch.Tensor) -> float:
        return self._dp_mean(x.detach().float())

    @contextmanager
    def eval_mode(self) -> Iterator[None]:
        """Evaluation mode and no autograd for the block; training mode again after."""
        self.ds.module.eval()
        try:
            with torch.no_grad():
                yield
        finally:
            self.ds.module.train()

    # ---------------------------------------------------------------------------------------------- evaluation
    def evaluate(self, ev: EvalData) -> torch.Tensor:
        """[2·S + 2] float64 loss sums and token counts (see data.loss_sums), identical on every rank.

        Every rank evaluates every eval micro-batch (they are few) and one rank per pipeline's last stage
        (dp 0, tp 0) contributes, so the result does not depend on the layout.
        """
        L, S = self.layout, len(ev.sources)
        total = torch.zeros(2 * S + 2, dtype=torch.float64)
        for b in ev.batches:
            if L.pp > 1:
                module = self.ds.module
                module.loss_fn = partial(_eval_loss_fn, S)
                self.ds.total_loss = None  # eval_batch adds to the last train_batch's scalar loss otherwise
                try:
                    out = self.ds.eval_batch(iter([(b.inputs, (b.labels, b.source, b.weight))]), compute_loss=True,
                                             reduce_output=None, bcast_loss=False, num_micro_batches=1)
                finally:
                    module.loss_fn, self.ds.total_loss = lm_loss, None
                sums = out[0].double() if L.is_last else None
            else:
                self.ds.module.eval()
                with torch.no_grad():
                    logits = self.ds(b.inputs.to(self.ds.device))
                self.ds.module.train()
                sums = loss_sums(logits.cpu(), b.labels, b.source, b.weight, S)
            if L.is_last and L.tp_rank == 0 and L.dp_rank == 0:
                total += sums.cpu()
        if L.world > 1:  # on the engine's device: NCCL reduces only device tensors
            on_device = total.to(self.ds.device)
            dist.all_reduce(on_device)
            total = on_device.cpu()
        return total

    # ------------------------------------------------------------------------------------------- checkpoints
    def save(self, folder: str, tag: str, client_state: dict[str, Any]) -> None:
        self.ds.save_checkpoint(folder, tag=tag, client_state=client_state, save_latest=False)

    def load(self, folder: str, tag: str) -> dict[str, Any]:
        # DeepSpeed's engine unpickles with weights_only=False: a tampered file would run code on resume (the
        # checksum manifest can be forged with it). Load tensors and DeepSpeed's few plain classes only.
        self.ds.checkpoint_engine.load = _load_weights_only
        path, client_state = self.ds.load_checkpoint(folder, tag=tag, load_optimizer_states=True,
                                                     load_lr_scheduler_states=True)
        if path is None:
            raise RuntimeError(f"DeepSpeed could not load checkpoint {folder}/{tag}")
        return client_state or {}

    # ---------------------------------------------------------------------------------------- consolidation
    def _local_layers(self) -> list[tuple[int, torch.nn.Module]]:
        m = self.ds.module
        if self.layout.pp == 1:
            return [(i, layer) for i, layer in enumerate(m.layers)]
        from deepspeed.pipe import TiedLayerSpec

        out = []
        for idx in range(m._local_start, m._local_stop):
            spec = m._layer_specs[idx]
            if isinstance(spec, TiedLayerSpec):
                if idx == head_index(self.cfg):
                    continue  # the tied head's weight is layer 0's
                out.append((idx, m.tied_modules[spec.key]))
            else:
                out.append((idx, getattr(m, str(idx))))
        return out

    def consolidated_state_dict(self) -> dict[str, torch.Tensor] | None:
        """The plain model's fp32 state dict (`layers.<i>.<name>`), on global rank 0 (None elsewhere).

        A collective: every rank walks its layers in the same order; fp32 master weights come from the
        optimizer (`safe_get_full_fp32_param`, gathered over dp: ZeRO 1–3 and bf16), TP shards are all-gathered
        over the TP group, and one rank per stage (dp 0, tp 0) sends its stage to rank 0.
        """
        from deepspeed.utils import safe_get_full_fp32_param

        L = self.layout
        part: dict[str, torch.Tensor] = {}
        for idx, layer in self._local_layers():
            for name, p in layer.named_parameters():
                full = safe_get_full_fp32_param(p)
                full = (p.detach() if full is None else full).float()  # on the device: NCCL gathers there
                if hasattr(p, "partition_dim"):
                    full = gather_full(full, p.partition_dim, L.tp_ctx)
                part[f"layers.{idx}.{name}"] = full.cpu().clone()
        keep = L.dp_rank == 0 and L.tp_rank == 0
        if L.world == 1:
            return dict(sorted(part.items(), key=lambda kv: _key_order(kv[0])))
        gathered: list[Any] = [None] * L.world if L.rank == 0 else None  # type: ignore[assignment]
        dist.gather_object(part if keep else {}, gathered, dst=0)
        if L.rank != 0:
            return None
        merged: dict[str, torch.Tensor] = {}
        for piece in gathered:
            merged.update(piece or {})
        return dict(sorted(merged.items(), key=lambda kv: _key_order(kv[0])))


def _load_weights_only(path: str, map_location: Any = None) -> Any:
    from deepspeed.runtime.fp16.loss_scaler import LossScaler
    from deepspeed.runtime.zero.config import ZeroStageEnum
    from deepspeed.utils.tensor_fragment import fragment_address

    with torch.serialization.safe_globals([LossScaler, ZeroStageEnum, fragment_address]):
        return torch.load(path, map_location=map_location, weights_only=True)


def _key_order(key: str) -> tuple[int, str]:
    parts = key.split(".")
    return int(parts[1]), key


def _as_float(x: Any) -> float | None:
    if x is None:
        return None
    if isinstance(x, torch.Tensor):
        x = x.item()
    x = float(x)
    return x if x == x and x not in (float("inf"), float("-inf")) and x >= 0 else None
