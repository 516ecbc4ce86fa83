"""Preference tuning (DPO / IPO / conservative DPO) on packed pair rows, from SFT's weights (dp × tp × ZeRO; no pp).

Data (`prepare`, the same on every rank): SFT's tokenizer and chat template, prefer_data's pairs rendered, fitted
and packed by tasks/train/inputs/pref_data.py (a pair's chosen and rejected in one row, block-diagonal attention), and
the frozen SFT model's log-probs of every answer read from prefer_ref's file — the reference is never a second
model here (with LoRA it is the adapter switched off, i.e. SFT's weights: what that file holds). Rows are ordered
per step by `BatchPlan` (a pure function of (seed, step)), so resuming needs only the step.

Loss: per micro-batch the policy's per-token log-probs (the chunked head, no [m, T, V] logits), summed per answer,
into tasks/train/objectives/dpo_loss.py; Σ over the micro-batch's pairs divided by the step's global pair count (known from
the data: no extra all-reduce), so the step's gradient is that of the mean over the global batch. Each micro-batch
reports a stats vector (loss sum, rewards, correct pairs) that `reduce` sums over dp for the metric row.
Evaluation: every held-out pair, also at step 0 (the SFT model: the "before"; its sigmoid loss is ln 2).
"""

from __future__ import annotations

import hashlib
from pathlib import Path
from typing import TYPE_CHECKING, Any, Iterator

import numpy as np
import torch

from specs.pretrain import shape_problems
from specs.ranks import PreferRun
from tasks.core.files import atomic_path, sha256_file, write_json_atomic, write_text_atomic
from specs.architecture import ModelConfig
from tasks.train.inputs.data import BatchPlan
from tasks.train.objectives.dpo_loss import preference_losses, preference_metrics
from tasks.train.checkpointing.init_weights import ConsolidatedSource
from tasks.train.objectives.base import EvalOutcome, MicroBatch, Prepared, autocast_identity, dropout_seed
from tasks.train.inputs.pref_data import (REF_FILE, all_pair_logps, load_pair_sets, pair_logps, read_reference,
                                   reference_row_len)
from tasks.train.loop.runlog import rounded
from tasks.train.inputs.sft_data import step_loss
from tasks.train.checkpointing.weights import ADAPTER_DIR

if TYPE_CHECKING:
    from tasks.train.loop.seam import StepEngine
    from tasks.train.loop.stability import StabilityGuard

STATS = ("loss_sum", "reward_chosen_sum", "reward_rejected_sum", "correct", "pairs")  # a micro-batch's report
EVAL_KEYS = ("reward_chosen", "reward_rejected", "margin", "reward_accuracy", "accuracy", "accuracy_per_token",
             "chosen_logp_per_token", "rejected_logp_per_token")
CHAT_FILES = ("chat_template.jinja", "chat.json", "hf_stated.json")  # SFT's, carried to this stage's folder for
# export (hf_stated.json: an imported checkpoint's end ids, tasks/train/hf/hf_generation.py)


def file_digest(*paths: Path) -> str:
    h = hashlib.sha256()
    for p in paths:
        h.update(sha256_file(p).encode())
    return h.hexdigest()[:16]


class DPOObjective:
    name = "prefer"
    whole_steps = False  # no pipeline: every step is micro-batches the trainer can judge

    def __init__(self, job: PreferRun):
        self.job, self.spec, self.train = job, job.spec, job.spec.train
        self.last = np.zeros(len(STATS))

    def prepare(self, rank: int) -> Prepared:
        t, par, job = self.train, self.spec.parallel, self.job
        sft, data, ref = Path(job.sft_dir), Path(job.data_dir), Path(job.ref_dir)
        self.sets = load_pair_sets(sft, data, reference_row_len(ref), job.seed)  # the tokens the reference scored
        self.ref = read_reference(ref, self.sets)  # split -> [P, 2] float64
        self.rows = self.sets.splits["train"]
        if not len(self.rows.packed.rows):
            raise ValueError(f"prefer: no trainable pair in {data / 'train.jsonl'}")
        cfg = ModelConfig.from_dict({**self.sets.model, "dropout": t.dropout})
        problems = shape_problems(cfg.n_heads, cfg.n_kv_heads, cfg.ffn_hidden, cfg.n_layers, par,
                                  "the SFT model's config.json")
        if problems:
            raise ValueError("; ".join(p.replace("parallel.tp", "prefer.tp") for p in problems))
        self.ref_t = {s: torch.from_numpy(v) for s, v in self.ref.items()}
        self.tokens_t = torch.from_numpy(self.rows.tokens.astype(np.float64))
        identity = {"model": cfg.to_dict(), "parallel": {"dp": par.dp, "zero_stage": par.zero_stage,
                                                         **({"tp": par.tp} if par.tp > 1 else {})},
                    "train": {"micro_batch_size": t.micro_batch_size, "grad_accum": t.grad_accum,
                              "precision": t.precision, "loss": t.loss, "beta": t.beta,
                              "label_smoothing": t.label_smoothing, "row_len": self.sets.row_len,
                              **autocast_identity(t),
                              **({"adapter": t.adapter.model_dump()} if t.adapter.kind != "none" else {})},
                    "data": file_digest(data / "train.jsonl", data / "heldout.jsonl", ref / REF_FILE),
                    "seed": job.seed, "init": job.sft_fingerprint}
        self.plan = BatchPlan(job.seed, len(self.rows.packed.rows), t.micro_batch_size, t.grad_accum, par.dp)
        return Prepared(cfg, identity, torch_seed=dropout_seed(job.seed, rank, par.dp, par.tp, False),
                        init=ConsolidatedSource(sft, name="the SFT model"),
                        tokens_per_step=self.plan.geometry.tokens(self.sets.row_len + 1))

    def attach(self, engine: StepEngine, ckpt_dir: Path, tag: str | None) -> None:
        self.layout = engine.layout

    def start_rows(self, engine: StepEngine, tag: str | None, start: int) -> list[dict[str, Any]]:
        if tag is not None:  # a resumed run's rows (from its checkpoint) hold the step-0 row already
            return []
        return self.evaluate(engine, 0, 0).rows  # step 0: the SFT model, the "before" of every metric

    # ------------------------------------------------------------------------------------------------ steps
    def pair_loss(self, engine: StepEngine, idx: np.ndarray) -> tuple[torch.Tensor, torch.Tensor]:
        """(Σ pair losses of rows `idx`, the stats vector `STATS`)."""
        t = self.train
        logps, pairs = pair_logps(engine.forward, self.rows, idx, engine.device)        # [p, 2]
        ref = self.ref_t["train"][pairs].to(logps.device, logps.dtype)                 # [p, 2]
        n = self.tokens_t[pairs].to(logps.device, logps.dtype)                          # [p, 2]
        s = preference_losses(logps[:, 0], logps[:, 1], ref[:, 0], ref[:, 1], t.beta, t.loss, t.label_smoothing,
                              n[:, 0], n[:, 1])
        loss_sum = s.losses.sum()
        stats = torch.stack([loss_sum.detach(), s.chosen_rewards.sum(), s.rejected_rewards.sum(),
                             s.preferred.sum().to(logps.dtype),
                             torch.tensor(float(len(pairs)), dtype=logps.dtype, device=logps.device)])
        return loss_sum, stats

    def micro_batches(self, engine: StepEngine, batch: int) -> Iterator[MicroBatch]:
        self.count = float(self.rows.pairs_in(self.plan.positions(batch)))  # every rank's rows: no all-reduce
        for idx in self.plan.micro_indexes(batch, self.layout.dp_rank):
            def micro(idx: np.ndarray = idx) -> tuple[torch.Tensor, torch.Tensor]:
                loss_sum, stats = self.pair_loss(engine, idx)
                return step_loss(loss_sum, self.count, self.layout.dp, self.train.grad_accum), stats
            yield micro

    def reduce(self, engine: StepEngine, batch: int, values: list[torch.Tensor]) -> float:
        self.last = np.array(engine.dp_sum_each(torch.stack(values).sum(0)))  # the global batch's stats
        return float(self.last[0]) / max(self.count, 1.0)

    def micro_losses(self, engine: StepEngine, batch: int, values: list[torch.Tensor]) -> list[float]:
        """Micro-batch i's mean pair loss over the dp ranks (one all-reduce)."""
        sums = engine.dp_sum_each(torch.stack([torch.stack([v[0], v[4]]) for v in values]).reshape(-1))
        return [s / max(c, 1.0) for s, c in zip(sums[0::2], sums[1::2])]

    def whole_step(self, engine: StepEngine, batch: int) -> float:
        raise NotImplementedError("prefer runs without a pipeline")

    def doc_ids(self, batch: int) -> list[str]:
        """The pairs of the step's global batch (an incident names them)."""
        rows = self.rows.packed.rows
        return sorted({self.rows.ids[k // 2] for r in self.plan.positions(batch) for k in rows[int(r)][::2]})

    def train_row(self, done: int) -> dict[str, Any]:
        _, chosen, rejected, correct, pairs = self.last
        n = max(pairs, 1.0)
        return {"reward_chosen": rounded(chosen / n), "reward_rejected": rounded(rejected / n),
                "margin": rounded((chosen - rejected) / n), "reward_accuracy": rounded(correct / n)}

    # ------------------------------------------------------------------------------------------- evaluation
    def eval_due(self, done: int) -> bool:
        return False

    def heldout_metrics(self, engine: StepEngine) -> dict[str, Any]:
        """Every held-out pair under the current weights (each rank evaluates all: identical values)."""
        t, rows = self.train, self.sets.splits["heldout"]
        with engine.eval_mode():
            policy = all_pair_logps(engine.forward, rows, t.micro_batch_size, engine.device)
        return preference_metrics(policy, self.ref["heldout"], rows.tokens, t.beta, t.loss, t.label_smoothing)

    def evaluate(self, engine: StepEngine, done: int, next_batch: int) -> EvalOutcome:
        m = self.heldout_metrics(engine)
        if not m["pairs"]:
            return EvalOutcome()
        row = {"kind": "eval", "step": done, "val_loss": rounded(m["loss"]), "val_loss_by_source": {},
               **{k: rounded(m[k]) for k in EVAL_KEYS}}
        return EvalOutcome(rows=[row], sink={f"heldout/{k}": m[k] for k in EVAL_KEYS})

    # ------------------------------------------------------------------------------------------------ state
    def save_state(self, folder: Path) -> None:
        return None  # the data order is a function of (seed, step): nothing beyond the engine's state

    def restore_state(self, folder: Path) -> None:
        return None

    def finish(self, out_dir: Path, rows: list[dict[str, Any]], guard: StabilityGuard) -> dict[str, Any]:
        sft = Path(self.job.sft_dir)
        with atomic_path(out_dir / "tokenizer.json") as tmp:
            self.sets.tokenizer.save(str(tmp))
        for name in CHAT_FILES:  # the same template SFT trained with: export checks it renders as trained
            if (sft / name).is_file():
                write_text_atomic(out_dir / name, (sft / name).read_text(encoding="utf-8"))
        if self.train.adapter.kind == "lora":  # beside the merged adapter tensors (`tasks/train/checkpointing/weights.py`)
            write_json_atomic(out_dir / ADAPTER_DIR / "adapter.json", self.train.adapter.model_dump())
        evals = [r for r in rows if r["kind"] == "eval"]
        stats = {s: {"pairs": len(r.ids), "rows": len(r.packed.rows), "dropped": len(r.dropped),
                     "answer_tokens": int(r.tokens.sum()), "fill": r.packed.stats.get("fill")}
                 for s, r in self.sets.splits.items()}
        return {"data": {**stats, "row_len": self.sets.row_len},
                "before": evals[0] if evals and evals[0]["step"] == 0 else None,
                "after": evals[-1] if evals else None}


__all__ = ["DPOObjective"]
