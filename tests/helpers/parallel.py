"""The small pretrain job that the engine tests on real CPU ranks train at every layout (tests/test_train_parallel.py,
tests/test_elastic_resume.py; their synthetic mix is the session's `mix_dir` fixture in tests/conftest.py)."""

from __future__ import annotations

from typing import Any

from specs.pretrain import PretrainJob

SEED = 3
STEPS = 5


def job_spec(parallel: dict, **train: Any) -> PretrainJob:
    """4 layers × d 64 on the 256-token synthetic mix, 5 steps of 4-sequence micro-batches; `train` overrides the
    train section (`model=` the model section; `checkpoint_every` is 100 unless given)."""
    model = train.pop("model", {})
    return PretrainJob.model_validate({
        "model": {"flavor": "tiny", "n_layers": 4, "d_model": 64, "n_heads": 4, "n_kv_heads": 2, **model},
        "parallel": parallel,
        "train": {"steps": STEPS, "micro_batch_size": 4, "log_every": 1, "eval_every": STEPS, "eval_batches": 2,
                  "checkpoint_every": 100, "optim": {"warmup_steps": 2}, **train},
    })


def vocab_ce_rank(rank: int, world: int, seed: int) -> dict[str, Any]:
    """On TP rank `rank` of `world` (tests/test_vocab_parallel.py): `vocab_parallel_cross_entropy` of its columns
    of seeded logits [N, V] (fp32 and bf16), and the gradient of Σ a·ce + b·lse² with respect to its columns."""
    import torch
    import torch.distributed as dist

    from tasks.train.parallel.tensor_parallel import vocab_parallel_cross_entropy

    from tasks.train.parallel.tp_context import TPContext

    tp = TPContext(rank, world, dist.new_group(list(range(world))))
    full, targets, a, b = vocab_ce_case(seed, world)
    out: dict[str, Any] = {}
    for dtype in (torch.float32, torch.bfloat16):
        x = full.to(dtype).chunk(world, dim=-1)[rank].clone().requires_grad_()
        ce, lse = vocab_parallel_cross_entropy(x, targets, tp)
        ((ce * a).sum() + (lse.pow(2) * b).sum()).backward()
        out[str(dtype)] = {"ce": ce.detach(), "lse": lse.detach(), "grad": x.grad}
    return out


def vocab_ce_case(seed: int, world: int) -> tuple[Any, Any, Any, Any]:
    """Logits [N, V] with one row shifted by 1e4 (the max-shift must hold it) and targets on every shard's first
    and last column, plus random per-token weights a, b."""
    import torch

    gen = torch.Generator().manual_seed(seed)
    n, vocab = 40, 24 * world
    full = torch.randn(n, vocab, generator=gen) * 3
    full[0] += 1e4
    edges = [k * (vocab // world) + off for k in range(world) for off in (0, vocab // world - 1)]
    targets = torch.cat([torch.tensor(edges), torch.randint(0, vocab, (n - len(edges),), generator=gen)])
    return full, targets, torch.rand(n, generator=gen), torch.rand(n, generator=gen) * 0.01
