"""Elastic resume: a checkpoint written at one layout (dp × tp × pp, ZeRO stage) resumes at another.

DeepSpeed's own checkpoint files are bound to the layout that wrote them (one optimizer partition per dp rank,
one model file per TP rank and pipeline layer); its "universal checkpoint" targets Megatron's parameter naming
and TP patterns, which our own TP layers and PipelineModule do not carry. So every save also writes a
layout-free copy of the training state, beside DeepSpeed's files, in the tag folder:

    elastic/pp<stage>-tp<rank>-dp<rank>-<part>.safetensors   for every trainable parameter this rank owns (in
                                      files of ≤ ~1 GiB, so a save holds one file's worth of host memory), keyed by
                                      the plain model's name (`layers.<i>.<name>`, as the final weights):
                                      `<key>` its fp32 master, `<key>#exp_avg`, `<key>#exp_avg_sq` (Adam's
                                      moments), TP slices left as slices (split dims in the metadata, as
                                      `tasks/train/checkpointing/weights.py` writes them), and `adam.step` (Adam's step count)
    elastic/state.json                the layout that wrote it, the LR scheduler's state, DeepSpeed's step and
                                      sample counters, the fp16 loss scale, the global batch and the data
                                      position in global samples (rank 0)

`train.checkpoint_elastic: false` skips this copy (the checkpoint manager's `writes_layout_free`,
tasks/train/checkpointing/manager.py); such a checkpoint then resumes only at its own layout (`layout_problems`
refuses another, naming the knob). In an asynchronous save the copy is queued for the background writer like
DeepSpeed's files; what stays in the stall is gathering a ZeRO master (a collective) and, without one, nothing: the
live weights and Adam moments are the ones DeepSpeed's files hold, whose host copy the snapshot shares
(`HostBuffers.begin`).

Who writes what: TP-split tensors by every TP rank, replicated ones by TP rank 0; of those, parameter i of a
rank's list by data-parallel rank i mod dp (the fp32 master and moments of a ZeRO-partitioned parameter are
gathered over dp for every parameter — a collective — and kept only by its writer), so no rank holds more than
its 1/dp share of its slice's state; a pipeline's tied head copy is left out (its values are the embedding's).

Same layout: DeepSpeed's files are loaded as before (bit-exact). Another layout (`needs_reshard`, asked by the
checkpoint manager's `load`): the engine is built as for a fresh run, then each rank reads exactly its new slices —
one tensor at a time from the memory-mapped files, joining or cutting old TP slices — and sets them with
DeepSpeed's `safe_set_full_fp32_param` / `safe_set_full_optimizer_state` (ZeRO 1–3, bf16), or directly into the
parameter and torch AdamW's state (fp32 without ZeRO); see `tasks/train/parallel/deepspeed_optim.py` for the
internals this needs.

The data position: step s's global batch is positions [s·G, (s+1)·G) of the sample stream (tasks/train/inputs/data.py),
so the position is `step × G` global samples and is kept only when the global batch G = micro_batch × grad_accum
× dp is unchanged (`layout_problems` refuses otherwise, naming a grad_accum that keeps it). RNG: the saved
per-rank streams belong to ranks that no longer exist, so after a layout change each rank reseeds torch from
(its run's torch seed, step) — deterministic, and TP peers that share a torch seed still draw the same masks;
with dropout > 0 the masks after the resume differ from the uninterrupted run's (with dropout 0, the default
for pretraining, nothing draws from it).
"""

from __future__ import annotations

import json
from collections import defaultdict
from pathlib import Path
from typing import Any

import torch
import torch.distributed as dist

from specs.batch import BatchGeometry
from tasks.core.files import json_text, write_json_atomic
from tasks.train.checkpointing.resume_rules import FOLDER, STATE, saved_layout
from tasks.train.checkpointing.rng import restore_rng
from tasks.train.checkpointing.seam import CheckpointEngine
from tasks.train.modeling.fused import join_values, split_values
from tasks.train.parallel.deepspeed_adapter import pipeline_local_layers
from tasks.train.parallel.deepspeed_optim import (ADAM_MOMENTS, adam_step, link_adam_state, prime_adam_state,
                                                  set_training_state, training_state)
from tasks.train.parallel.parallelize import Layout, local_layers
from tasks.train.checkpointing.snapshot import HostBuffers, PendingFile, Writer, digest_file
from tasks.train.checkpointing.weights import write_shard

MOMENTS = ADAM_MOMENTS
STEP_KEY = "adam.step"
MAX_FILE_BYTES = 1024**3  # per file: bounds the host memory a save holds
RESHARDED = "resharded"  # key of CheckpointManager.load's answer: True when the layout-free state was loaded


def layout_of(layout: Layout, zero_stage: int, fused: bool = False) -> dict[str, int]:
    """What DeepSpeed's own files depend on: the rank grid, the ZeRO stage, and whether the blocks' projections
    are fused (their parameters differ; written only when fused, so older checkpoints read as unfused)."""
    return {"dp": layout.dp, "tp": layout.tp, "pp": layout.pp, "zero_stage": zero_stage,
            **({"fused": True} if fused else {})}


def plain_state_of(key: str, p: torch.Tensor, fp32: torch.Tensor, moments: list[torch.Tensor]
                   ) -> dict[str, torch.Tensor]:
    """A parameter's fp32 value and Adam moments under the plain model's keys (`<key>`, `<key>#<moment>`; a
    fused parameter's parts each under its own key, so any build of the model can read them back)."""
    out: dict[str, torch.Tensor] = {}
    for plain, value in split_values(key, p, fp32.float().cpu()).items():
        out[plain] = value
    for n, v in zip(MOMENTS, moments):
        out.update({f"{plain}#{n}": value for plain, value in split_values(key, p, v.float().cpu()).items()})
    return out


def global_batch_of(engine: CheckpointEngine) -> int:
    return BatchGeometry.of(engine.job.train, engine.layout).global_batch


def saved_layers(engine: CheckpointEngine) -> list[tuple[int, torch.nn.Module]]:
    """(global index, layer) of this rank, each parameter once: a pipeline's tied head copy is left out."""
    m = engine.ds.module
    return list(enumerate(m.layers)) if engine.layout.pp == 1 else pipeline_local_layers(m)


# ----------------------------------------------------------------------------------------------------- save
def save_layout_free(engine: CheckpointEngine, tag_dir: Path, step: int, max_file_bytes: int | None = None,
                     defer: bool = False, buffers: HostBuffers | None = None) -> list[PendingFile]:
    """This rank's part of the layout-free state in `tag_dir/elastic/` (a collective: every rank), in files of
    about `max_file_bytes` each. Returns the files: written and hashed by this rank, or with `defer` (an
    asynchronous save) host copies that the checkpoint writer writes and hashes later (then the rank holds its
    whole part in host memory until written, like the rest of its snapshot). `buffers`: the save's host
    buffers (`CapturingEngine.buffers`, after DeepSpeed's files were snapshotted into them) — live tensors are
    copied through them, so a tensor DeepSpeed's files already hold is not copied again, and the rest go into
    pages reused from save to save."""
    pool = buffers if buffers is not None else HostBuffers()
    L, ds = engine.layout, engine.ds
    adam = adam_step(ds)
    link_adam_state(ds)  # DeepSpeed leaves some param groups' fragments unlinked (see there)
    tensors: dict[str, torch.Tensor] = {}
    split: dict[str, int] = {}
    parts, held, limit = 0, 0, max_file_bytes or MAX_FILE_BYTES
    files: list[PendingFile] = []

    def flush() -> None:  # one file per ~max_file_bytes: host memory stays one file's worth, whatever the model
        nonlocal parts, held
        tensors[STEP_KEY] = torch.tensor([float(adam or 0.0)], dtype=torch.float64)
        path = tag_dir / FOLDER / f"pp{L.stage:03d}-tp{L.tp_rank:03d}-dp{L.dp_rank:03d}-{parts:05d}.safetensors"
        write = shard_writer(dict(tensors), dict(split), L.tp, L.tp_rank)
        files.append(PendingFile(path, state=write) if defer else PendingFile(path, digest=write(path)))
        tensors.clear()
        split.clear()
        parts, held = parts + 1, 0

    params = [(f"layers.{idx}.{name}", p) for idx, layer in saved_layers(engine)
              for name, p in layer.named_parameters() if p.requires_grad]
    for i, (key, p) in enumerate(params):
        dim = getattr(p, "partition_dim", None) if L.tp > 1 else None
        fp32, moments = training_state(ds, p, adam is not None)  # gathered over dp: every dp rank calls it
        if i % L.dp != L.dp_rank or (dim is None and L.tp_rank != 0):
            continue
        mine = plain_state_of(key, p, fp32, moments)
        first = next(iter(mine.values()))
        if defer and first.untyped_storage().data_ptr() == p.untyped_storage().data_ptr():
            # Deferred and live (a CPU run without a ZeRO master: the parameter and torch's Adam state themselves,
            # which training changes before the writer reads them): host copies. A ZeRO master and its moments
            # come gathered into fresh tensors (and `.cpu()` of a GPU tensor is one), which nothing else
            # changes: kept as they are.
            mine = pool.snapshot(f"{FOLDER}/{key}", mine)
        tensors.update(mine)
        if dim is not None:
            split.update({k: int(dim) for k in mine if "#" not in k})
        held += 3 * fp32.numel() * 4
        if held >= limit:
            flush()
    if tensors or parts == 0:
        flush()  # every rank writes at least one file: it carries Adam's step count
    if L.rank == 0:
        sched = {k: v for k, v in ds.lr_scheduler.state_dict().items() if k != "lr_lambdas"}
        scaler = getattr(ds.optimizer, "loss_scaler", None)
        state = {
            "format": "forgeline-elastic-v1", "step": step, "layout": layout_of(L, engine.job.parallel.zero_stage,
                                                                            engine.fused),
            "global_batch": global_batch_of(engine), "global_samples": step * global_batch_of(engine),
            "counters": {k: int(getattr(ds, k, 0)) for k in ("global_steps", "global_samples", "skipped_steps")},
            "scheduler": sched,
            "loss_scaler": {k: float(v) for k, v in vars(scaler).items()
                            if k in ("cur_scale", "cur_iter", "last_overflow_iter", "cur_hysteresis")}
            if scaler is not None else {}}
        if defer:  # a text: the writer writes it, rank 0 hashes it with the manifest
            files.append(PendingFile(tag_dir / FOLDER / STATE, state=json_text(state)))
        else:
            write_json_atomic(tag_dir / FOLDER / STATE, state)
    return files


def shard_writer(tensors: dict[str, torch.Tensor], split: dict[str, int], tp: int, tp_rank: int
                 ) -> Writer:
    """A writer of one layout-free file: writes `tensors` as a weight shard and returns its digest."""
    def write(path: Path) -> dict[str, Any]:
        write_shard(path, tensors, split, tp, tp_rank)
        return digest_file(path)
    return write


# ----------------------------------------------------------------------------------------------------- load
def needs_reshard(tag_dir: Path, layout: Layout, zero_stage: int, fused: bool = False) -> bool:
    saved = saved_layout(tag_dir)
    return saved is not None and saved != layout_of(layout, zero_stage, fused)


class SliceReader:
    """The saved tensors of one tag, read as any new rank's slices (headers indexed once, tensors on demand)."""

    def __init__(self, folder: Path):
        from safetensors import safe_open

        self.pieces: dict[str, list[tuple[int, Path]]] = defaultdict(list)
        self.split: dict[str, int | None] = {}
        self.steps: set[float] = set()
        self.tp = 1
        for f in sorted(Path(folder).glob("*.safetensors")):
            with safe_open(str(f), framework="pt") as fh:
                info = json.loads(fh.metadata()["forgeline"])
                self.tp = int(info["tp"])
                for key in fh.keys():
                    if key == STEP_KEY:
                        self.steps.add(float(fh.get_tensor(key)[0]))
                        continue
                    self.pieces[key].append((int(info["tp_rank"]), f))
                    base = key.split("#")[0]
                    self.split[key] = info["split"].get(base)

    def read(self, key: str, dim: int | None, part: int, parts: int) -> torch.Tensor:
        """Tensor `key` (whole, `dim` None) or its slice `part` of `parts` equal slices along `dim`."""
        from safetensors import safe_open

        if key not in self.pieces:
            raise KeyError(f"elastic resume: the checkpoint holds no `{key}` (was it written by another model?)")
        old = self.split[key]
        ranked = sorted(self.pieces[key])
        if old is None:  # one whole copy: cut the new slice out of it
            with safe_open(str(ranked[0][1]), framework="pt") as fh:
                whole = fh.get_slice(key)
                if dim is None:
                    return whole[:]
                size = whole.get_shape()[dim]
                lo, hi = size * part // parts, size * (part + 1) // parts
                return whole[lo:hi] if dim == 0 else whole[:, lo:hi]
        if dim is not None and dim != old:
            raise ValueError(f"elastic resume: `{key}` was split along dim {old}, this layout splits dim {dim}")
        if [r for r, _ in ranked] != list(range(self.tp)):
            raise ValueError(f"elastic resume: `{key}` has slices of TP ranks {[r for r, _ in ranked]}")
        slices = []
        for _r, f in ranked:  # old TP slices are equal, contiguous chunks (tasks/train/checkpointing/init_weights.py)
            with safe_open(str(f), framework="pt") as fh:
                slices.append(fh.get_slice(key))
        width = slices[0].get_shape()[old]
        size = width * len(slices)
        lo, hi = (0, size) if dim is None else (size * part // parts, size * (part + 1) // parts)
        out = []
        for r, piece in enumerate(slices):
            a, b = max(lo, r * width), min(hi, (r + 1) * width)
            if a < b:
                a, b = a - r * width, b - r * width
                out.append(piece[a:b] if old == 0 else piece[:, a:b])
        return torch.cat(out, dim=old)


def load_layout_free(engine: CheckpointEngine, tag_dir: Path) -> dict[str, Any]:
    """Set this rank's parameters, Adam state, LR schedule and step counters from `tag_dir`'s layout-free state
    (saved at another layout), one tensor at a time."""
    L, ds = engine.layout, engine.ds
    state = json.loads((Path(tag_dir) / FOLDER / STATE).read_text())
    reader = SliceReader(Path(tag_dir) / FOLDER)
    if len(reader.steps) != 1:
        raise ValueError(f"elastic resume: {tag_dir}: ranks saved different Adam step counts {sorted(reader.steps)}")
    adam = reader.steps.pop()
    if int(state["global_batch"]) != global_batch_of(engine):
        raise ValueError(f"elastic resume: {tag_dir} was trained with {state['global_batch']} sequences per step, "
                         f"this run has {global_batch_of(engine)}")
    prime_adam_state(ds, adam)  # Adam's state exists only after a first step: create it empty
    with torch.no_grad():
        for idx, layer in local_layers(ds.module, L):  # every tied copy too: each has its own optimizer state
            for name, p in layer.named_parameters():
                if not p.requires_grad:
                    continue  # frozen (LoRA's base): rebuilt from the starting weights as in a fresh run
                key = f"layers.{idx}.{name}"
                dim = getattr(p, "partition_dim", None) if L.tp > 1 else None
                fp32 = join_values(key, p, lambda k: reader.read(k, dim, L.tp_rank, L.tp))  # fused: parts stacked
                if tuple(fp32.shape) != tuple(p.ds_shape if hasattr(p, "ds_shape") else p.shape):
                    raise ValueError(f"elastic resume: `{key}` is {tuple(fp32.shape)} on TP rank {L.tp_rank}, this "
                                     f"layout's parameter is {tuple(p.shape)}")
                moments = [join_values(key, p, lambda k: reader.read(f"{k}#{m}", dim, L.tp_rank, L.tp))
                           for m in MOMENTS]
                set_training_state(ds, p, fp32, moments, adam)
    ds.lr_scheduler.load_state_dict({**ds.lr_scheduler.state_dict(), **state["scheduler"]})
    for group, lr in zip(ds.lr_scheduler.optimizer.param_groups, ds.lr_scheduler.get_last_lr()):
        group["lr"] = lr  # load_state_dict restores the schedule, not the rate its optimizer applies next
    for k, v in state["counters"].items():
        setattr(ds, k, v)
    scaler = getattr(ds.optimizer, "loss_scaler", None)
    for k, v in state.get("loss_scaler", {}).items():
        if scaler is not None and isinstance(getattr(scaler, k, None), (int, float)):
            setattr(scaler, k, type(getattr(scaler, k))(v))  # fp16's dynamic scale goes on where it was
    if L.world > 1:
        dist.barrier()
    return {"step": int(state["step"]), RESHARDED: True}


def restore_or_reseed_rng(loaded: dict[str, Any] | None, rng_path: Path, torch_seed: int, step: int) -> None:
    """After a load: this rank's saved RNG stream (same layout), or a fresh deterministic seed from
    (torch_seed, step) when the state was resharded (the saved streams belong to ranks of the old layout)."""
    if (loaded or {}).get(RESHARDED):
        torch.manual_seed((torch_seed * 1_000_003 + step) % 2**63)
    else:
        restore_rng(rng_path)
