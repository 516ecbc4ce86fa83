"""Supervised finetuning: packed chat rows with an assistant-only, per-token loss (dp × tp × ZeRO; no pp).

Data (`prepare_data`, the same on every rank, deterministic): mix's tokenizer extended with the chat role tokens
(tasks/train/inputs/chat.py), instruct's train/held-out conversations rendered and packed into rows of `seq_len`
(tasks/train/inputs/sft_data.py: block-diagonal attention, positions restarting per sample, loss weights only on
assistant tokens). Rows are ordered per step by `BatchPlan` (a pure function of (seed, step), as in pretraining),
so resuming needs only the step.

Loss: Σ weight·cross-entropy over the step's micro-batches on every rank, divided by the step's global token
count — known up front from the data, so no extra all-reduce (see `sft_data.sft_loss_sums`). Evaluation: the
per-token assistant loss over every held-out row, also at step 0 (the curve's starting point). Outputs: the
extended `tokenizer.json` and `chat_template.jinja`.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Iterator

import numpy as np
import torch
from tokenizers import Tokenizer

from specs.init import sft_seq_len_problem
from specs.ranks import SFTRun
from specs.sft import SFTSpec, resolved_dropout
from tasks.core.files import atomic_path, write_json_atomic, write_text_atomic
from tasks.train.inputs.chat import GrownTableSource, extend_tokenizer, jinja_template, vocab_size
from tasks.train.inputs.chat_template import TemplateChat, checkpoint_chat
from tasks.train.hf.hf_generation import STATED
from specs.pretrain import shape_problems
from specs.architecture import ModelConfig
from tasks.train.inputs.data import BatchPlan
from tasks.train.objectives.base import EvalOutcome, MicroBatch, Prepared, autocast_identity, dropout_seed
from tasks.train.loop.runlog import rounded
from tasks.train.inputs.sft_data import Packed, pack_samples, render_records, sft_loss_sums, step_loss
from tasks.train.checkpointing.init_weights import ConsolidatedSource
from tasks.train.checkpointing.weights import ADAPTER_DIR

if TYPE_CHECKING:
    from tokenizers import Tokenizer

    from tasks.train.loop.seam import StepEngine
    from tasks.train.loop.stability import StabilityGuard


@dataclass
class SFTData:
    tokenizer: Tokenizer
    cfg: ModelConfig
    init: GrownTableSource  # the starting weights, read per rank as its slices (never the whole model)
    train: Packed
    heldout: Packed
    stats: dict[str, Any]
    chat: TemplateChat | None = None  # the checkpoint's chat template; None: forgeline's markers


def chat_tokenizer(mix_dir: Path) -> tuple[Tokenizer, dict[str, int], TemplateChat | None, int]:
    """(tokenizer, chat markers added, the checkpoint's template or None, pad id). A tokenizer whose
    tokenizer_config.json (copied by mix from a Hugging Face checkpoint) has a chat template keeps its own
    tokens and template; otherwise forgeline's role markers claim reserved tokens (or are appended)."""
    from tasks.data.mixing.tokenizer import load_tokenizer

    base = load_tokenizer(mix_dir / "tokenizer.json")
    chat = checkpoint_chat(mix_dir, base)
    if chat is not None:
        pad_text = chat.specials.get("pad_token") or chat.specials.get("eos_token")
        pad = base.token_to_id(pad_text) if pad_text else chat.stop_ids()[0]  # padding carries no loss
        return base, {}, chat, pad
    tok, added = extend_tokenizer(base)
    pad = tok.token_to_id("<|pad|>")
    if pad is None:
        raise ValueError("sft: mix's tokenizer has no <|pad|> token")
    return tok, added, None, pad


def read_jsonl(path: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]


def prepare_data(pretrain_dir: Path, mix_dir: Path, instruct_dir: Path, train: SFTSpec, seed: int) -> SFTData:
    """Tokenizer with chat markers, the model config and starting weights, packed train and held-out rows."""
    tok, added, chat, pad = chat_tokenizer(mix_dir)
    pre = json.loads((pretrain_dir / "config.json").read_text())
    from_checkpoint = pre["model"].get("hf_model_type") is not None  # imported weights (tasks/train/hf/hf_import.py)
    limit = pre["model"].get("max_positions")
    if problem := sft_seq_len_problem(train.seq_len, limit):  # a chosen length the checkpoint cannot honour
        raise ValueError(problem)
    base = ModelConfig.from_dict({**pre["model"], "dropout": resolved_dropout(train.dropout, from_checkpoint),
                                  "seq_len": train.seq_len or pre["model"]["seq_len"]})
    # Claimed <|reserved_N|> rows were never inputs in pretraining: start them (and any new rows) at the mean.
    reinit = sorted(i for i in added.values() if i < base.vocab_size)
    init = GrownTableSource(ConsolidatedSource(pretrain_dir), base, max(vocab_size(tok), base.vocab_size), seed,
                            reinit=reinit)
    cfg = init.cfg
    stats: dict[str, Any] = {"added_tokens": dict(sorted(added.items())), "vocab_size": cfg.vocab_size,
                             "chat_template": "checkpoint" if chat else "forgeline", "dropout": cfg.dropout}
    packs = []
    for split in ("train", "heldout"):
        samples, _ids, rejected = render_records(read_jsonl(instruct_dir / f"{split}.jsonl"), tok, chat=chat)
        packed = pack_samples(samples, cfg.seq_len, pad, seed, overflow=train.overflow)
        if split == "train" and not len(packed.rows):
            raise ValueError(f"sft: no trainable rows from {instruct_dir / 'train.jsonl'}")
        stats[split] = {"conversations": len(samples) + len(rejected), "rejected": len(rejected),
                        "rows": len(packed.rows), "loss_tokens": int(packed.weights.sum()), **packed.stats}
        packs.append(packed)
    return SFTData(tok, cfg, init, packs[0], packs[1], stats, chat)


def heldout_loss(engine: StepEngine, rows: Packed, micro: int) -> float | None:
    """Per-token assistant loss over every held-out row (every rank evaluates all of them: identical values)."""
    n = len(rows.rows)
    if n == 0:
        return None
    total, count = 0.0, 0.0
    with engine.eval_mode():
        for lo in range(0, n, micro):
            b = rows.batch(np.arange(lo, min(lo + micro, n)), engine.device)
            logits = engine.forward(b["input_ids"], segment_ids=b["segment_ids"], position_ids=b["position_ids"],
                                    shard_logits=True)                             # [m, T, V/tp]
            s, c = sft_loss_sums(logits, b["targets"], b["weights"], engine.vocab_tp)
            total, count = total + float(s), count + float(c)
    return total / count if count else None


class SFTObjective:
    name = "sft"
    whole_steps = False  # no pipeline: every step is micro-batches the trainer can judge

    def __init__(self, job: SFTRun):
        self.job, self.spec, self.train = job, job.spec, job.spec.train

    def prepare(self, rank: int) -> Prepared:
        t, par, job = self.train, self.spec.parallel, self.job
        self.data = prepare_data(Path(job.pretrain_dir), Path(job.mix_dir), Path(job.instruct_dir), t, job.seed)
        cfg = self.data.cfg
        problems = shape_problems(cfg.n_heads, cfg.n_kv_heads, cfg.ffn_hidden, cfg.n_layers, par,
                                  "the pretrained model's config.json")
        if problems:
            raise ValueError("; ".join(p.replace("parallel.tp", "sft.tp") for p in problems))
        identity = {"model": cfg.to_dict(), "parallel": {"dp": par.dp, "zero_stage": par.zero_stage,
                                                         **({"tp": par.tp} if par.tp > 1 else {})},
                    "train": {"micro_batch_size": t.micro_batch_size, "grad_accum": t.grad_accum,
                              "precision": t.precision, **autocast_identity(t),
                              **({"adapter": t.adapter.model_dump()} if t.adapter.kind != "none" else {})},
                    "data": {k: self.data.stats[k]["loss_tokens"] for k in ("train", "heldout")}, "seed": job.seed,
                    "init": job.pretrain_fingerprint}
        self.plan = BatchPlan(job.seed, len(self.data.train.rows), t.micro_batch_size, t.grad_accum, par.dp)
        return Prepared(cfg, identity, torch_seed=dropout_seed(job.seed, rank, par.dp, par.tp, par.sequence_parallel),
                        init=self.data.init,
                        tokens_per_step=self.plan.geometry.tokens(cfg.seq_len))

    def attach(self, engine: StepEngine, ckpt_dir: Path, tag: str | None) -> None:
        self.layout = engine.layout

    def start_rows(self, engine: StepEngine, tag: str | None, start: int) -> list[dict[str, Any]]:
        if tag is not None:  # a resumed run's rows (from its checkpoint) hold the step-0 row already
            return []
        return self.evaluate(engine, 0, 0).rows  # the starting point of the held-out curve

    # ------------------------------------------------------------------------------------------------ steps
    def micro_batches(self, engine: StepEngine, batch: int) -> Iterator[MicroBatch]:
        rows, t = self.data.train, self.train
        self.count = float(rows.weights[self.plan.positions(batch)].sum())  # every rank's rows: no all-reduce
        for idx in self.plan.micro_indexes(batch, self.layout.dp_rank):
            def micro(idx: np.ndarray = idx) -> tuple[torch.Tensor, torch.Tensor]:
                b = rows.batch(idx, engine.device)
                # Σ weight·cross-entropy straight from the hidden states (tasks/train/modeling/loss.py: no [m, T, V] logits)
                loss_sum = engine.forward(b["input_ids"], b["targets"], segment_ids=b["segment_ids"],
                                          position_ids=b["position_ids"], label_weights=b["weights"])
                return step_loss(loss_sum, self.count, self.layout.dp, t.grad_accum), loss_sum.detach()
            yield micro

    def reduce(self, engine: StepEngine, batch: int, values: list[torch.Tensor]) -> float:
        return engine.dp_sum(torch.stack(values).sum()) / max(self.count, 1.0)

    def micro_losses(self, engine: StepEngine, batch: int, values: list[torch.Tensor]) -> list[float]:
        """Micro-batch i's per-token loss over the dp ranks: Σ loss sums / Σ assistant tokens (one all-reduce)."""
        weights = self.data.train.weights
        counts = [float(weights[idx].sum()) for idx in self.plan.micro_indexes(batch, self.layout.dp_rank)]
        sums = engine.dp_sum_each(torch.tensor([float(v) for v in values] + counts, dtype=torch.float64))
        k = len(values)
        return [s / max(c, 1.0) for s, c in zip(sums[:k], sums[k:])]

    def whole_step(self, engine: StepEngine, batch: int) -> float:
        raise NotImplementedError("sft runs without a pipeline")

    def doc_ids(self, batch: int) -> list[str]:
        return []

    def train_row(self, done: int) -> dict[str, Any]:
        return {}

    # ------------------------------------------------------------------------------------------- evaluation
    def eval_due(self, done: int) -> bool:
        return False

    def evaluate(self, engine: StepEngine, done: int, next_batch: int) -> EvalOutcome:
        held = heldout_loss(engine, self.data.heldout, self.train.micro_batch_size)
        if held is None:
            return EvalOutcome()
        return EvalOutcome(rows=[{"kind": "eval", "step": done, "val_loss": rounded(held), "val_loss_by_source": {}}])

    # ------------------------------------------------------------------------------------------------ state
    def save_state(self, folder: Path) -> None:
        return None  # the data order is a function of (seed, step): nothing beyond the engine's state

    def restore_state(self, folder: Path) -> None:
        return None

    def finish(self, out_dir: Path, rows: list[dict[str, Any]], guard: StabilityGuard) -> dict[str, Any]:
        with atomic_path(out_dir / "tokenizer.json") as tmp:
            self.data.tokenizer.save(str(tmp))
        if self.train.adapter.kind == "lora":  # beside the merged adapter tensors (`tasks/train/checkpointing/weights.py`)
            write_json_atomic(out_dir / ADAPTER_DIR / "adapter.json", self.train.adapter.model_dump())
        chat = self.data.chat
        write_text_atomic(out_dir / "chat_template.jinja", chat.template if chat else jinja_template())
        stated = Path(self.job.mix_dir) / STATED  # a checkpoint's end ids and generation_config.json, for export
        if stated.is_file():
            write_text_atomic(out_dir / STATED, stated.read_text(encoding="utf-8"))
        write_json_atomic(out_dir / "chat.json", {  # how export must check and describe the template
            "template": "checkpoint" if chat else "forgeline", "special_tokens": chat.specials if chat else {},
            "end_of_turn": chat.end_of_turn() if chat else "<|end|>",
            "stop_ids": chat.stop_ids() if chat else [self.data.tokenizer.token_to_id("<|end|>")]})
        evals = [r for r in rows if r["kind"] == "eval"]
        return {"data": self.data.stats,
                "heldout_loss_before": evals[0]["val_loss"] if evals and evals[0]["step"] == 0 else None,
                # with steps: 0 the one evaluation (step 0) is both: the weights are the pretrained ones
                "heldout_loss_after": evals[-1]["val_loss"] if evals else None}
