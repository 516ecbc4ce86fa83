"""A fake engine (one scalar weight, SGD), a fake objective (squared error to a per-batch target) and a
PretrainRun for them: the Trainer driven with no ranks and no DeepSpeed (tests/test_trainer.py,
tests/test_async_checkpoint.py)."""

from __future__ import annotations

from contextlib import contextmanager
from pathlib import Path
from typing import Any, Iterator

import torch

from specs.pretrain import ModelSpec, ParallelSpec, PretrainJob, PretrainSpec
from specs.ranks import PretrainRun
from specs.architecture import ModelConfig
from tasks.train.objectives.base import EvalOutcome, Prepared
from tasks.train.checkpointing.seam import EngineFiles
from tasks.train.checkpointing.weights import shard_path, write_shard

CFG = ModelConfig(vocab_size=16, seq_len=8, n_layers=1, n_heads=2, n_kv_heads=2, d_model=8, ffn_hidden=32)
LR = 0.1


class FakeLayout:
    rank, world, dp, tp, pp, dp_rank, tp_rank, stage = 0, 1, 1, 1, 1, 0, 0, 0


class FakeEngine:
    """The engine's step API over one weight `w`: gradients accumulate until `grad_accum` backward calls."""

    def __init__(self, grad_accum: int):
        self.layout, self.device, self.grad_accum = FakeLayout(), "cpu", grad_accum
        self.fused = False  # what the checkpoint manager compares a tag's layout with
        self.w = torch.zeros((), requires_grad=True)
        self.calls: list[str] = []
        self.pending = 0
        self.scale = 1.0
        self.overflows = 0
        self.boundaries = 0
        self.overflow_at: set[int] = set()  # boundary counts (1-based) whose update "overflows" (fp16)

    def set_lr_scale(self, scale: float) -> None:
        self.scale = scale

    def backward_and_step(self, loss: torch.Tensor) -> None:
        (loss / self.grad_accum).backward()
        self.calls.append("backward")
        self.pending += 1
        if self.pending == self.grad_accum:
            self.boundaries += 1
            if self.boundaries in self.overflow_at:  # what DeepSpeed's fp16 scaler does: drop, count, no update
                self.w.grad, self.pending = None, 0
                self.overflows += 1
                self.calls.append("overflow")
                return
            with torch.no_grad():
                self.w -= LR * self.scale * self.w.grad
            self.last_norm = float(self.w.grad.abs())
            self.w.grad = None
            self.pending = 0
            self.calls.append("update")

    def skip_update(self) -> None:
        self.calls.append("skip")

    def skipped_steps(self) -> int:
        return self.overflows

    def loss_scale(self) -> float | None:
        return None

    @contextmanager
    def eval_mode(self) -> Iterator[None]:
        self.calls.append("prepass")
        with torch.no_grad():
            yield

    def grad_norm(self) -> float | None:
        return self.last_norm

    def grad_norm_later(self) -> Any:
        held = self.last_norm
        return lambda: held

    @contextmanager
    def deepspeed_save(self, folder: str, tag: str, client_state: dict[str, Any], snapshot: bool = False
                       ) -> Iterator[EngineFiles]:
        (Path(folder) / tag).mkdir(parents=True, exist_ok=True)
        torch.save({"w": self.w.detach().clone()}, Path(folder) / tag / "weights.pt")
        yield EngineFiles([])  # written now, hashed with the manifest

    def deepspeed_load(self, folder: str, tag: str) -> dict[str, Any]:
        self.calls.append(f"load:{tag}")
        with torch.no_grad():
            self.w.copy_(torch.load(Path(folder) / tag / "weights.pt", weights_only=True)["w"])
        return {}

    def write_weight_shard(self, out_dir: Path) -> Path:
        path = shard_path(out_dir, 0, 0)
        write_shard(path, {"layers.0.w": self.w.detach().clone()}, {}, tp=1, tp_rank=0)
        return path


class FakeObjective:
    """Data batch b wants w = target(b); each of its `grad_accum` micro-batches is the same squared error."""

    name, whole_steps = "fake", False

    def __init__(self, grad_accum: int):
        self.grad_accum = grad_accum
        self.seen: list[int] = []

    @staticmethod
    def target(batch: int) -> float:
        return 1.0 + 0.1 * (batch % 3)

    def prepare(self, rank: int) -> Prepared:
        return Prepared(CFG, {"seed": 1}, torch_seed=1, tokens_per_step=8)

    def attach(self, engine: Any, ckpt_dir: Path, tag: str | None) -> None:
        pass

    def start_rows(self, engine: Any, tag: str | None, start: int) -> list[dict[str, Any]]:
        return []

    def micro_batches(self, engine: FakeEngine, batch: int) -> Iterator[Any]:
        self.seen.append(batch)
        for _ in range(self.grad_accum):
            def micro() -> tuple[torch.Tensor, torch.Tensor]:
                loss = (engine.w - self.target(batch)) ** 2
                return loss, loss.detach()
            yield micro

    def reduce(self, engine: Any, batch: int, values: list[torch.Tensor]) -> float:
        return float(torch.stack(values).mean())

    def micro_losses(self, engine: Any, batch: int, values: list[torch.Tensor]) -> list[float]:
        return [float(v) for v in values]

    def whole_step(self, engine: Any, batch: int) -> float:
        raise NotImplementedError

    def doc_ids(self, batch: int) -> list[str]:
        return [f"doc-{batch}"]

    def train_row(self, done: int) -> dict[str, Any]:
        return {}

    def eval_due(self, done: int) -> bool:
        return False

    def evaluate(self, engine: Any, done: int, next_batch: int) -> EvalOutcome:
        return EvalOutcome(rows=[{"kind": "eval", "step": done, "val_loss": float(engine.w.detach()), "val_loss_by_source": {}}])

    def save_state(self, folder: Path) -> None:
        pass

    def restore_state(self, folder: Path) -> None:
        pass

    def finish(self, out_dir: Path, rows: list[dict[str, Any]], guard: Any) -> dict[str, Any]:
        return {"final_w": float(self.engine_w)} if hasattr(self, "engine_w") else {}


def job(tmp: Path, steps: int = 6, grad_accum: int = 1, **stability: Any) -> PretrainRun:
    train = PretrainSpec.model_validate({
        "steps": steps, "grad_accum": grad_accum, "log_every": 1, "eval_every": 100, "checkpoint_every": 2,
        "checkpoint_elastic": False,  # the fake engine has no DeepSpeed state to copy layout-free
        "keep_checkpoints": 5, "optim": {"warmup_steps": 0, "lr": 0.1, "min_lr": 0.1},
        "telemetry": {"wandb": "disabled", "nvml": False},
        "stability": {"window": 5, "min_history": 3, "max_spikes": 2, "max_rollbacks": 1, **stability}})
    spec = PretrainJob(model=ModelSpec(), parallel=ParallelSpec(), train=train)
    (tmp / "out").mkdir(parents=True, exist_ok=True)
    return PretrainRun(spec=spec, mix_dir=str(tmp), out_dir=str(tmp / "out"), ckpt_dir=str(tmp / "ckpt"),
                       reports_dir=str(tmp / "reports"), marker_dir=str(tmp / "markers"), seed=1,
                       objective_ref="tasks.train.objectives.pretrain:PretrainObjective")  # unused: fakes run
