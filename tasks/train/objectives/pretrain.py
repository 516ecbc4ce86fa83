"""Pretraining: next-token loss on mix's packed shards, any layout (dp × tp × pp, ZeRO).

Batches: `TrainData` (tasks/train/inputs/data.py) gives each rank its micro-batches of data batch `b` (a pure function of
(seed, b), so resuming needs only the step); with `mix.adaptive` on, the sampler follows per-source weights
updated from the eval losses (tasks/train/inputs/adaptive.py; its history is saved into each checkpoint). With a
pipeline (pp > 1) `train_batch` runs the whole step. Evaluation: the val loss overall and per source (every rank
evaluates the same micro-batches, so the value does not depend on the layout). Outputs: `report.json` (and the
adaptive weights CSV).
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING, Any, Iterator

import torch

from specs.batch import BatchGeometry
from specs.ranks import PretrainRun
from tasks.core.files import write_json_atomic
from specs.pretrain import ModelSpec, shape_problems
from specs.architecture import ModelConfig
from tasks.train.inputs.data import to_device
from tasks.data.mixing.tokenizer import max_positions
from tasks.train.hf.hf_import import hf_model_config
from tasks.train.checkpointing.init_weights import HFSource
from tasks.train.objectives.base import EvalOutcome, MicroBatch, Prepared, autocast_identity, dropout_seed
from tasks.train.loop.runlog import build_report, eval_row

if TYPE_CHECKING:
    from tasks.train.inputs.adaptive import AdaptiveMixer
    from tasks.train.loop.seam import StepEngine
    from tasks.train.loop.stability import StabilityGuard


def data_facts(mix_dir: Path) -> dict[str, Any]:
    """seq_len, vocab size and a fingerprint of mix's output (layout, train index, tokenizer)."""
    layout = json.loads((mix_dir / "packing.json").read_text())
    vocab = layout["vocab_size"]
    tok_file = mix_dir / "tokenizer.json"
    if tok_file.exists():
        from tasks.data.mixing.tokenizer import load_tokenizer

        tok_vocab = load_tokenizer(tok_file).get_vocab_size()
        if tok_vocab != vocab:
            raise ValueError(f"pretrain: tokenizer.json has {tok_vocab} tokens but packing.json says {vocab}")
    digest = hashlib.sha256()
    for name in ("packing.json", layout["splits"]["train"]["index"], "tokenizer.json"):
        if (mix_dir / name).exists():
            digest.update(name.encode() + b"\0" + (mix_dir / name).read_bytes())
    return {"seq_len": layout["seq_len"], "vocab_size": vocab, "data": digest.hexdigest()[:16]}


def model_and_init(model: ModelSpec, facts: dict[str, Any]) -> tuple[ModelConfig, HFSource | None]:
    """The architecture and starting weights: `model`'s shape with a seeded init, or a Hugging Face checkpoint's
    config.json (trained at mix's seq_len) and its weights. mix encoded with the checkpoint's tokenizer, whose
    ids must all have embedding rows (checkpoints often pad the embedding past the tokenizer: that is fine)."""
    if model.init.kind != "hf":
        return ModelConfig.from_spec(model, facts["vocab_size"], facts["seq_len"]), None
    folder = Path(model.init.path)
    cfg = hf_model_config(folder, seq_len=facts["seq_len"])
    if facts["vocab_size"] > cfg.vocab_size:
        raise ValueError(f"pretrain: mix's tokenizer has {facts['vocab_size']} tokens but {folder / 'config.json'} "
                         f"has vocab_size {cfg.vocab_size} (was mix run with this checkpoint's tokenizer?)")
    cfg = replace(cfg, dropout=model.dropout, max_positions=max_positions(folder))
    return cfg, HFSource(folder, cfg)


class PretrainObjective:
    name = "pretrain"

    def __init__(self, job: PretrainRun):
        self.job, self.spec, self.train = job, job.spec, job.spec.train
        self.mix_dir = Path(job.mix_dir)
        self.whole_steps = job.spec.parallel.pp > 1
        self.mixer: AdaptiveMixer | None = None

    def prepare(self, rank: int) -> Prepared:
        par, t = self.spec.parallel, self.train
        facts = data_facts(self.mix_dir)
        self.cfg, init = model_and_init(self.spec.model, facts)
        problems = shape_problems(self.cfg.n_heads, self.cfg.n_kv_heads, self.cfg.ffn_hidden, self.cfg.n_layers, par,
                                  "the checkpoint's intermediate_size" if init else
                                  "model.ffn_hidden" if self.spec.model.ffn_hidden else "model.ffn_multiple_of")
        if problems:
            raise ValueError("; ".join(problems))
        identity = {"model": {k: v for k, v in self.cfg.to_dict().items()
                              if k not in ("vocab_size", "seq_len", "max_positions")},  # export's fact only
                    "parallel": {"dp": par.dp, "tp": par.tp, "pp": par.pp, "zero_stage": par.zero_stage},
                    "train": {"precision": t.precision, "micro_batch_size": t.micro_batch_size,
                              "grad_accum": t.grad_accum, **autocast_identity(t)},
                    **facts, "seed": self.job.seed, "init": init.fingerprint() if init else "random"}
        geometry = BatchGeometry.of(t, par)
        self.global_batch, self.step_tokens = geometry.global_batch, geometry.tokens(self.cfg.seq_len)
        seed = dropout_seed(self.job.seed, rank, par.dp, par.tp, par.sequence_parallel, par.pp)
        return Prepared(self.cfg, identity, torch_seed=seed, init=init, tokens_per_step=self.step_tokens)

    def attach(self, engine: StepEngine, ckpt_dir: Path, tag: str | None) -> None:
        from tasks.train.inputs.adaptive import AdaptiveMixer
        from tasks.train.inputs.data import EvalData, TrainData

        t = self.train
        self.layout = engine.layout
        self.data = TrainData(self.mix_dir, self.job.seed, t.micro_batch_size, t.grad_accum, self.layout.dp)
        self.mixer = AdaptiveMixer.attach(self.spec.adaptive, t, self.data, ckpt_dir, tag)  # None when off
        self.evald = EvalData(self.mix_dir, t.micro_batch_size, t.eval_batches)

    def start_rows(self, engine: StepEngine, tag: str | None, start: int) -> list[dict[str, Any]]:
        return [self.mixer.row(0)] if self.mixer and tag is None else []

    # ------------------------------------------------------------------------------------------------ steps
    def micro_batches(self, engine: StepEngine, batch: int) -> Iterator[MicroBatch]:
        z = {"z_loss": self.train.z_loss} if self.train.z_loss else {}  # off: the unchanged call
        for x, y in self.data.micro_batches(batch, self.layout.dp_rank):
            def micro(x: torch.Tensor = x, y: torch.Tensor = y) -> tuple[torch.Tensor, torch.Tensor]:
                out = engine.forward(to_device(x, engine.device), to_device(y, engine.device), **z)  # mean loss
                return out, out.detach().float()
            yield micro

    def reduce(self, engine: StepEngine, batch: int, values: list[torch.Tensor]) -> float:
        return engine.dp_mean(torch.stack(values).mean())

    def micro_losses(self, engine: StepEngine, batch: int, values: list[torch.Tensor]) -> list[float]:
        """Micro-batch i's mean loss over the dp ranks (each rank's micro-batch i has the same token count)."""
        return [v / self.layout.dp for v in engine.dp_sum_each(torch.stack(values))]

    def whole_step(self, engine: StepEngine, batch: int) -> float:
        L = self.layout
        it = self.data.iterator(batch, L.dp_rank) if (L.is_first or L.is_last) else None
        return engine.pipeline_train_batch(it)

    def doc_ids(self, batch: int) -> list[str]:
        return self.data.doc_ids(batch)

    def train_row(self, done: int) -> dict[str, Any]:
        return {"tokens": done * self.step_tokens}

    # ------------------------------------------------------------------------------------------- evaluation
    def eval_due(self, done: int) -> bool:
        return bool(self.mixer and self.mixer.due(done))

    def evaluate(self, engine: StepEngine, done: int, next_batch: int) -> EvalOutcome:
        out = EvalOutcome()
        ev = eval_row(engine, self.evald, done)
        if ev:
            out.rows.append(ev)
            if self.mixer and self.mixer.due(done):  # new weights from the next data batch on
                out.rows.append(self.mixer.update(done, ev["val_loss_by_source"], next_batch))
                out.sink.update(self.mixer.log_values())
        return out

    # ------------------------------------------------------------------------------------------------ state
    def save_state(self, folder: Path) -> None:
        if self.mixer:
            self.mixer.save(folder)  # the weight history: a resumed run draws the same batches

    def restore_state(self, folder: Path) -> None:
        if self.mixer:
            self.mixer.restore(folder)

    def finish(self, out_dir: Path, rows: list[dict[str, Any]], guard: StabilityGuard) -> dict[str, Any]:
        report = build_report(rows, self.cfg, self.spec.model_dump(mode="json"), self.train.steps,
                              self.global_batch, self.step_tokens, self.evald.sources, guard)
        if self.mixer:
            self.mixer.write_csv(out_dir, rows)
        write_json_atomic(out_dir / "report.json", report)
        return {"report": report, **({"adaptive_mix": self.mixer.summary()} if self.mixer else {})}
