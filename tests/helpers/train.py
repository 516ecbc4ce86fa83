"""Test helpers of the training engine: a plain-PyTorch reference trainer, TP forward checks, spawning local gloo
ranks, and what autograd saves for backward.

`reference_run` trains the pp = 1, tp = 1 model with the same data order, AdamW, schedule and clipping as the
engine, in plain PyTorch — the independent yardstick the parallel layouts are compared against.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import Any, Callable

import torch

from tasks.train.launch import free_port


def reference_run(spec: Any, mix_dir: Path, seed: int, steps: int | None = None, drop_adam_at: int | None = None
                  ) -> tuple[list[float], dict[str, torch.Tensor]]:
    """Per-step mean train loss and final state dict of a plain single-process run equivalent to `spec` (a
    PretrainJob) at any layout: each step's global batch as dp·grad_accum micro-batches, mean loss, AdamW +
    global-norm clipping + LambdaLR. `drop_adam_at`: forget Adam's moments and step count before that step (what
    a resume that restored only the weights would do: the yardstick for how much resume tests can tell)."""
    from tasks.train.inputs.data import TrainData
    from tasks.train.parallel.dsconfig import make_optimizer, scheduler_factory
    from tasks.train.objectives.pretrain import data_facts
    from tasks.train.modeling.model import ModelConfig, Transformer

    facts = data_facts(Path(mix_dir))
    cfg = ModelConfig.from_spec(spec.model, facts["vocab_size"], facts["seq_len"])
    t = spec.train
    model = Transformer(cfg, seed)
    opt = make_optimizer(model, t.optim)
    sched = scheduler_factory(t.optim, t.steps)(opt)
    data = TrainData(Path(mix_dir), seed, t.micro_batch_size, t.grad_accum * spec.parallel.dp, 1)
    out = []
    for step in range(steps or t.steps):
        if step == drop_adam_at:
            opt.state.clear()
        batches = data.micro_batches(step, 0)
        losses = []
        for x, y in batches:
            loss = model(x, y, z_loss=t.z_loss)
            (loss / len(batches)).backward()
            losses.append(loss.detach())
        if t.optim.grad_clip > 0:
            torch.nn.utils.clip_grad_norm_(model.parameters(), t.optim.grad_clip)
        opt.step()
        opt.zero_grad(set_to_none=True)
        sched.step()
        out.append(float(torch.stack(losses).mean()))
    return out, {k: v.detach().clone() for k, v in model.state_dict().items()}


def forward_backward(model, cfg, seed: int):
    """Seeded random batch [2, seq_len] through `model`: (logits, loss) with gradients accumulated."""

    gen = torch.Generator().manual_seed(seed)
    ids = torch.randint(0, cfg.vocab_size, (2, cfg.seq_len), generator=gen)
    labels = torch.randint(0, cfg.vocab_size, (2, cfg.seq_len), generator=gen)
    logits = model(ids)
    loss = model(ids, labels)
    loss.backward()
    return logits, loss


def tp_forward_check(rank: int, world: int, cfg_dict: dict[str, Any], seed: int, sequence: bool = False
                     ) -> dict[str, torch.Tensor]:
    """On each of `world` TP ranks: logits, loss and the full (re-gathered) gradients of the TP model
    (`sequence`: with sequence parallelism), and what its loss saves for backward."""
    import torch.distributed as dist

    from tasks.train.modeling.model import ModelConfig, Transformer
    from tasks.train.parallel.tp_model import apply_tensor_parallel
    from tasks.train.parallel.tensor_parallel import gather_full
    from tasks.train.parallel.tp_context import TPContext

    cfg = ModelConfig.from_dict(cfg_dict)
    tp = TPContext(rank, world, dist.new_group(list(range(world))), sequence)
    model = apply_tensor_parallel(Transformer(cfg, seed), tp)
    logits, loss = forward_backward(model, cfg, seed)
    grads = {n: gather_full(p.grad, p.partition_dim, tp) if hasattr(p, "partition_dim") else p.grad
             for n, p in model.named_parameters()}
    return {"logits": logits.detach(), "loss": loss.detach(), "saved_shapes": saved_shapes_of_loss(model, cfg),
            **{f"grad:{k}": v for k, v in grads.items()}}


def saved_shapes_of_loss(model: torch.nn.Module, cfg: Any) -> torch.Tensor:
    """[k, 3] (numel, size of the last dim, number of dims) of every activation autograd saves for backward in
    `model(ids, labels)` on a [2, seq_len] batch: what the loss keeps alive until backward (the parameters a
    matmul saves are left out; a matmul's input may be saved flattened, [B·T, d])."""
    ids = torch.randint(0, cfg.vocab_size, (2, cfg.seq_len), generator=torch.Generator().manual_seed(0))
    _, saved = saved_activations(model, ids, ids, exclude=list(model.parameters()))
    shapes = [(t.numel(), t.shape[-1] if t.dim() else 1, t.dim()) for t in saved]
    return torch.tensor(shapes, dtype=torch.int64)


def _gloo_entry(rank: int, world: int, port: int, fn: Callable, args: tuple, out_dir: str) -> None:
    import torch.distributed as dist

    os.environ.update({"MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(port), "RANK": str(rank),
                       "LOCAL_RANK": str(rank), "WORLD_SIZE": str(world)})
    torch.set_num_threads(1)
    dist.init_process_group("gloo", rank=rank, world_size=world)
    try:
        result = fn(rank, world, *args)
        torch.save(result, Path(out_dir) / f"rank{rank}.pt")
    finally:
        dist.destroy_process_group()
    # The result is on disk: leave without the interpreter's teardown. There, the destructor of a thread a library
    # started (gloo's, DeepSpeed's) can std::terminate — seen once in CI: "terminate called without an active
    # exception" and SIGABRT in both ranks of a ZeRO-3 build after their work was done, failing a passing test.
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)


def spawn_gloo(fn: Callable, world: int, args: tuple, out_dir: Path) -> list[Any]:
    """Run `fn(rank, world, *args)` on `world` local processes in one gloo group (plain torch.distributed,
    no DeepSpeed: starts in ~2 s); returns each rank's return value (tensors/dicts, saved with torch.save)."""
    import torch.multiprocessing as mp

    from tasks.train.launch import environ, rank_env, start_method

    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    with environ(**rank_env("cpu")):  # the CPU ranks' environment: forked from launch's warm forkserver
        mp.start_processes(_gloo_entry, args=(world, free_port(), fn, args, str(out_dir)), nprocs=world,
                           join=True, start_method=start_method("cpu"))
    return [torch.load(out_dir / f"rank{r}.pt", weights_only=True) for r in range(world)]


def saved_activations(fn: Callable, *args: Any, exclude: Any = ()) -> tuple[Any, list[torch.Tensor]]:
    """fn(*args)'s result and every tensor autograd saves for backward while it runs (the references it keeps
    alive until backward), less those sharing storage with `exclude` (a module's parameters: weights saved
    by a matmul are not activations)."""
    skip = {p.untyped_storage().data_ptr() for p in exclude}
    saved: list[torch.Tensor] = []

    def pack(t: torch.Tensor) -> torch.Tensor:
        if t.untyped_storage().data_ptr() not in skip:
            saved.append(t)
        return t

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        out = fn(*args)
    return out, saved


def saved_bytes(saved: list[torch.Tensor]) -> int:
    """The memory `saved_activations`' tensors hold: each storage once (q, k and v's matmuls saving one input
    keep one tensor alive, not three)."""
    storages = {t.untyped_storage().data_ptr(): t.untyped_storage().nbytes() for t in saved}
    return sum(storages.values())
