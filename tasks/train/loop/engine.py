"""The `Engine` the Trainer and objectives talk to: one rank's DeepSpeed engine behind a small step API (forward,
backward + step, skip, grad norm, dp reductions, pipeline step), evaluation, DeepSpeed's own checkpoint files
(`deepspeed_save` / `deepspeed_load`: the checkpoint manager, tasks/train/checkpointing/manager.py, decides what
else a tag holds and when a load reshards) and consolidation. What the loop and the manager need of it are
protocols (tasks/train/loop/seam.py, tasks/train/checkpointing/seam.py), so tests drive them with doubles.

How the engine is built — process groups, topology (`Layout`), tensor parallelism, the pipeline cut and
`deepspeed.initialize` — lives in `parallelize.py`; the DeepSpeed internals reached into here (pipeline layers
and evaluation, fp32 master weights, the weights-only checkpoint loader) go through `deepspeed_adapter.py`.
"""

from __future__ import annotations

import logging
from contextlib import contextmanager
from functools import partial
from pathlib import Path
from typing import Any, Callable, Iterator

import torch
import torch.distributed as dist
from deepspeed.runtime.checkpoint_engine import TorchCheckpointEngine

from specs.architecture import ModelConfig
from specs.ranks import JobSpec
from tasks.train.inputs.data import EvalData, loss_sums
from tasks.train.parallel.deepspeed_adapter import (fp16_masters, full_fp32_param, gathered_param, pipeline_eval_sums,
                                           pipeline_local_layers, use_weights_only_loader)
from tasks.train.checkpointing.seam import EngineFiles
from tasks.train.modeling.fused import split_values
from tasks.train.checkpointing.init_weights import WeightSource
from tasks.train.parallel.parallelize import Layout, build_engine, fused_projections
from tasks.train.parallel.tp_context import TPContext
from tasks.train.parallel.tp_model import vocab_split
from tasks.train.modeling.lora import is_adapter_key, merge_lora
from tasks.train.checkpointing.snapshot import HostBuffers, PendingFile, write_state
from tasks.train.checkpointing.weights import ADAPTER_SHARDS, shard_path, write_shard

log = logging.getLogger("forgeline.pretrain")


def _eval_loss_fn(n_sources: int, tp: TPContext, logits: torch.Tensor, labels: tuple) -> torch.Tensor:
    y, src, w = labels
    return loss_sums(logits, y, src, w, n_sources, tp)


def skipped_steps_of(ds: Any) -> int:
    """Steps the DeepSpeed engine `ds` skipped for an fp16 overflow (its `skipped_steps` counter, +1 at each
    accumulation boundary whose update the loss scaler dropped; restored with a checkpoint). A step overflowed
    when the count grew across it. Engines without the counter never skip."""
    count = getattr(ds, "skipped_steps", 0)
    return int(count) if isinstance(count, int) and not isinstance(count, bool) else 0


def loss_scale_of(ds: Any) -> float | None:
    """The dynamic loss scale now in use (fp16), or None where there is none (bf16, fp32)."""
    scale = getattr(getattr(ds, "optimizer", None), "loss_scale", None)
    return float(scale) if isinstance(scale, (int, float)) and not isinstance(scale, bool) else None


class Engine:
    """One rank's DeepSpeed engine plus what the training loop asks of it."""

    def __init__(self, cfg: ModelConfig, job: JobSpec, layout: Layout, seed: int, ds_cfg: dict[str, Any],
                 init: WeightSource | None = None, schedule: list[tuple[int, int]] | None = None):
        """`init`: the weights to start from (SFT: the pretrained model; a Hugging Face checkpoint), read as
        this rank's slices; None is the seeded random init. `schedule`: the LR schedule segments
        (`dsconfig.lr_at`; None: one schedule over `train.steps`)."""
        self.cfg, self.job, self.layout = cfg, job, layout
        self.fused = fused_projections(getattr(job.train, "adapter", None))  # the Blocks' linears (fused.py)
        self.ds, self.optimizer, self.scheduler, self.dp_group = build_engine(cfg, job, layout, seed, ds_cfg, init,
                                                                              schedule)
        # the group the head's vocabulary is split over: what the loss functions take with `shard_logits`
        self.vocab_tp = vocab_split(cfg.vocab_size, layout.tp_ctx)

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
    def device(self) -> torch.device:
        return self.ds.device

    def set_lr_scale(self, scale: float) -> None:
        """Multiply this step's scheduled LR (the scheduler sets the next step's value after its `step()`)."""
        if scale != 1.0:
            for group in self.ds.optimizer.param_groups:
                group["lr"] *= scale

    def forward(self, *args: torch.Tensor, **kwargs: object) -> torch.Tensor:
        """The wrapped module's forward (training mode): logits, or the mean loss when labels are given."""
        return self.ds(*args, **kwargs)

    def backward_and_step(self, loss: torch.Tensor) -> None:
        """Backward of one micro-batch's loss and DeepSpeed's step (it updates at the accumulation boundary)."""
        self.ds.backward(loss)
        self.ds.step()

    def skip_update(self) -> None:
        """Skip this optimizer step; the LR schedule still advances (LR stays a function of the step). Also what
        follows an fp16 overflow, which DeepSpeed skips without advancing the schedule."""
        self.scheduler.step()

    def skipped_steps(self) -> int:
        """Steps DeepSpeed's loss scaler has skipped for fp16 overflow (compare before and after a step:
        tasks/train/loop/step.py)."""
        return skipped_steps_of(self.ds)

    def loss_scale(self) -> float | None:
        return loss_scale_of(self.ds)

    def grad_norm(self) -> float | None:
        """The global gradient norm of the last update (None when unknown or not finite)."""
        return _as_float(self.ds.get_global_grad_norm())

    def grad_norm_later(self) -> Callable[[], float | None]:
        """The last update's grad norm as DeepSpeed holds it (a device tensor on the fp32-weights path), read
        from the device only when the returned function is called: a read right after the update would wait
        for the device to finish it (a host synchronisation per step)."""
        held = self.ds.get_global_grad_norm()
        return lambda: _as_float(held)

    def pipeline_train_batch(self, data_iter: Iterator[tuple[torch.Tensor, torch.Tensor]] | None) -> float:
        """A pipeline's whole optimizer step (`train_batch`): the mean loss over dp, the same on every stage."""
        return float(self.ds.train_batch(data_iter=data_iter).detach().float())

    def dp_sum(self, x: torch.Tensor) -> float:
        """Sum over the data-parallel ranks (every rank gets the same value)."""
        if self.layout.dp > 1:
            x = x.detach().clone().double()
            dist.all_reduce(x, group=self.dp_group)
        return float(x)

    def dp_sum_each(self, x: torch.Tensor) -> list[float]:
        """Element-wise sum over the data-parallel ranks of a small vector (one all-reduce)."""
        x = x.detach().to(self.device, torch.float64)
        if self.layout.dp > 1:
            x = x.clone()
            dist.all_reduce(x, group=self.dp_group)
        return [float(v) for v in x.cpu()]

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
                out = pipeline_eval_sums(self.ds, (b.inputs, (b.labels, b.source, b.weight)),
                                         partial(_eval_loss_fn, S, self.vocab_tp))
                sums = out[0].double() if L.is_last else None
            else:
                self.ds.module.eval()
                with torch.no_grad():
                    logits = self.ds(b.inputs.to(self.ds.device), shard_logits=True)  # [m, T, V/tp]
                    sums = loss_sums(logits, b.labels, b.source, b.weight, S, self.vocab_tp)
                self.ds.module.train()
            if L.is_last and L.tp_rank == 0 and L.dp_rank == 0:
                total += sums.cpu()
        if L.world > 1:  # on the engine's device: NCCL reduces only device tensors
            on_device = total.to(self.ds.device)
            dist.all_reduce(on_device)
            total = on_device.cpu()
        return total

    # ------------------------------------------------------------------------------------------- checkpoints
    @contextmanager
    def deepspeed_save(self, folder: str, tag: str, client_state: dict[str, Any], snapshot: bool = False
                       ) -> Iterator[EngineFiles]:
        """DeepSpeed's `save_checkpoint` of this rank's files into `<folder>/<tag>/`, as a block. `snapshot` False:
        written (and hashed) before the block is entered; True: only copied to host memory, the files' states
        are written later (tasks/train/checkpointing/async_save.py), and training may change the weights
        meanwhile. Inside the block the save's host buffers stay open (`EngineFiles.buffers`), so the checkpoint
        manager's other files of this save (the layout-free copy) share their copies."""
        capture = capturing_engine(self.ds)
        if capture is None:  # a DeepSpeed writer of its own is configured: it writes now, rank 0 hashes
            self.ds.save_checkpoint(folder, tag=tag, client_state=client_state, save_latest=False)
            yield EngineFiles([])
            return
        capture.snapshot = snapshot
        capture.buffers.begin()
        try:
            self.ds.save_checkpoint(folder, tag=tag, client_state=client_state, save_latest=False)
            capture.snapshot = False
            yield EngineFiles(capture.take(), capture.buffers, deferred=snapshot)
        finally:
            capture.snapshot = False
            capture.buffers.end()

    def deepspeed_load(self, folder: str, tag: str) -> dict[str, Any]:
        """DeepSpeed's `load_checkpoint` of `<folder>/<tag>/` (saved at this layout: the checkpoint manager
        reshards another layout's tag itself); its client state."""
        # DeepSpeed's engine unpickles with weights_only=False: a tampered file would run code on resume (the
        # checksum manifest can be forged with it). Load tensors and DeepSpeed's few plain classes only.
        use_weights_only_loader(self.ds)
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
        return pipeline_local_layers(m)  # the tied head is left out: its weight is layer 0's

    def _check_tp_replicas(self, sums: list[float]) -> None:
        """Replicated parameters must be equal on every TP rank (only TP rank 0's copy is written): compare one
        float64 sum per tensor over the TP group, so a divergence (e.g. TP peers drawing different dropout masks
        on replicated activations) fails loudly instead of shipping rank 0's half of two different models."""
        mine = torch.tensor(sums, dtype=torch.float64, device=self.device)
        everyone = [torch.empty_like(mine) for _ in range(self.layout.tp)]
        dist.all_gather(everyone, mine, group=self.layout.tp_ctx.group)
        worst = max(float((e - everyone[0]).abs().max()) if e.numel() else 0.0 for e in everyone)
        if worst > 1e-6 * max(1.0, float(everyone[0].abs().max()) if mine.numel() else 1.0):
            raise RuntimeError(f"tensor-parallel replicas diverged: replicated parameters differ between TP ranks "
                               f"(largest difference of a tensor's sum {worst:.3g})")

    def _local_values(self) -> tuple[dict[str, torch.Tensor], dict[str, int], list[float]]:
        """(plain key → this rank's fp32 value, key → TP split dim, replicated tensors' sums) over its parameters
        (a fused parameter's parts under their own keys: the consolidated format knows no fused tensor).

        A collective: every rank walks its layers in the same order, since the fp32 master of a parameter comes
        from the optimizer (`full_fp32_param`, gathered over dp: ZeRO 1–3 and bf16; `fp16_masters`: fp16
        without ZeRO) and a frozen parameter under ZeRO-3 (LoRA's base) is gathered over dp (`gathered_param`) —
        read from its empty local partition it would save an empty model (peft #297, #2450)."""
        L = self.layout
        values: dict[str, torch.Tensor] = {}
        split: dict[str, int] = {}
        sums: list[float] = []
        fp16 = fp16_masters(self.ds.optimizer)  # fp16 without ZeRO: masters the safe_get API cannot reach
        for idx, layer in self._local_layers():
            for name, p in layer.named_parameters():
                full = full_fp32_param(p)
                full = fp16.get(id(p)) if full is None else full
                value = (gathered_param(p) if full is None else full).float().cpu()
                key = f"layers.{idx}.{name}"
                dim = getattr(p, "partition_dim", None) if L.tp > 1 else None
                if dim is None:
                    if L.tp > 1:
                        sums.append(float(value.double().sum()))
                    if L.tp_rank != 0 and not is_adapter_key(key):  # adapters: every rank merges its own slice
                        continue  # replicated over TP: TP rank 0's copy is the one written
                for plain, part in split_values(key, p, value).items():  # a fused one: its parts (fused.py)
                    values[plain] = part
                    if dim is not None:
                        split[plain] = int(dim)
        return values, split, sums

    def write_weight_shard(self, out_dir: Path) -> Path | None:
        """Write this rank's part of the final fp32 weights (`tasks/train/checkpointing/weights.py`); returns its file, or None
        on ranks of dp > 0, which hold copies. TP slices stay slices (the merge joins them on CPU) and nothing is
        gathered to rank 0. With LoRA the update is merged into the weights written, and the adapter itself goes
        to `<out>/adapter_shards/` (merged into `<out>/adapter/` the same way)."""
        L = self.layout
        values, split, sums = self._local_values()
        if L.tp > 1:
            self._check_tp_replicas(sums)
        adapter = getattr(self.job.train, "adapter", None)
        lora = merge_lora(values, adapter.alpha / adapter.r) if adapter is not None and adapter.kind == "lora" \
            else {}
        if L.dp_rank != 0:
            return None
        path = shard_path(out_dir, L.stage, L.tp_rank)
        write_shard(path, values, {k: d for k, d in split.items() if k in values}, L.tp, L.tp_rank, L.pp)
        if lora:
            mine = {k: v for k, v in lora.items() if k in split or L.tp_rank == 0}
            write_shard(shard_path(out_dir, L.stage, L.tp_rank, ADAPTER_SHARDS), mine,
                        {k: d for k, d in split.items() if k in mine}, L.tp, L.tp_rank, L.pp)
        return path


class CapturingEngine(TorchCheckpointEngine):
    """DeepSpeed's torch.save checkpoint engine whose `save` writes now (and records the digest) or, while
    `snapshot` is on, copies the state to host memory and leaves the write to the caller."""

    def __init__(self, zipfile: bool):
        super().__init__(None)
        self.zipfile_serialization = zipfile
        self.buffers = HostBuffers()  # reused by every save of the run (one host copy of this rank's state)
        self.snapshot = False
        self.pending: list[PendingFile] = []

    def create(self, info: Any) -> None:
        return None  # the base class logs a line per save

    def save(self, state_dict: object, path: str) -> None:
        p = Path(path)
        if self.snapshot:
            self.pending.append(PendingFile(p, state=self.buffers.snapshot(p.name, state_dict)))
        else:
            self.pending.append(PendingFile(p, digest=write_state(p, state_dict, self.zipfile_serialization)))

    def take(self) -> list[PendingFile]:
        out, self.pending = self.pending, []
        return out


def capturing_engine(ds: Any) -> CapturingEngine | None:
    """Put a `CapturingEngine` on DeepSpeed engine `ds` (once; its weights-only `load` is kept); None when a
    writer other than the plain torch.save one is configured (its files are then written synchronously by it).

    Relies on: DeepSpeed 0.19 writes every model/optimizer/layer file of a checkpoint through
    `ds.checkpoint_engine.save(state_dict, path)` (an instance attribute, so replaceable) and reads them through
    its `load`; the torch engine's only setting is `zipfile_serialization`."""
    current = ds.checkpoint_engine
    if isinstance(current, CapturingEngine):
        return current
    if type(current) is not TorchCheckpointEngine:
        return None
    engine = CapturingEngine(bool(current.zipfile_serialization))
    if "load" in vars(current):  # `use_weights_only_loader` replaced the instance's load: keep it
        engine.load = vars(current)["load"]
    ds.checkpoint_engine = engine
    return engine


def _as_float(x: torch.Tensor | float | None) -> float | None:
    if x is None:
        return None
    if isinstance(x, torch.Tensor):
        x = x.item()
    x = float(x)
    return x if x == x and x not in (float("inf"), float("-inf")) and x >= 0 else None
