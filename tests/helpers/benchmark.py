"""A tiny forgeline checkpoint, its Hugging Face export and small lm-eval tasks, for the benchmark tests."""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq

from specs.benchmark import BenchmarkJob, ShippedTasksSpec
from tasks.benchmark import run
from tasks.core.runner import StagePaths
from tasks.data.mixing.tokenizer import save_tokenizer, train_tokenizer
from tasks.eval import lm_eval_tasks as T
from tasks.train.hf.hf_export import export_hf
from tasks.train.modeling.model import ModelConfig, Transformer
from tasks.train.hf.tiny_checkpoint import embedded_texts
from tasks.train.checkpointing.weights import save_weights

# A sharper-than-default init (std 0.2): choices' log-likelihoods then differ by far more than the 1e-6 between two
# implementations, so accuracy parity is a real check, not a tie broken by rounding.
CFG = ModelConfig(vocab_size=512, seq_len=64, n_layers=2, n_heads=4, n_kv_heads=2, d_model=32, ffn_hidden=64,
                  init_std=0.2)
SPECIALS = ["<|endoftext|>", "<|pad|>"]


def checkpoint(folder: Path, texts: list[str] | None = None, cfg: ModelConfig = CFG, seed: int = 3) -> Path:
    """A forgeline checkpoint folder (model.safetensors, config.json, tokenizer.json) of a random model."""
    folder.mkdir(parents=True, exist_ok=True)
    tok = train_tokenizer(texts or embedded_texts(20), cfg.vocab_size, 2, SPECIALS)
    save_tokenizer(tok, folder / "tokenizer.json")
    save_weights(folder, Transformer(cfg, seed=seed).state_dict())
    (folder / "config.json").write_text(json.dumps({"model": cfg.to_dict()}))
    return folder


def export(folder: Path, out: Path) -> Path:
    """`folder`'s checkpoint as a Hugging Face folder (eos = the end-of-document token, mix's convention)."""
    from tasks.train.checkpointing.weights import load_weights

    cfg = ModelConfig.from_dict(json.loads((folder / "config.json").read_text())["model"])
    export_hf(load_weights(folder), cfg, folder / "tokenizer.json", out, card={"name": "tiny"})
    return out


def prose() -> list[str]:
    """Held-out-like prose: embedded literature and encyclopedia texts."""
    return [t for t in embedded_texts(6) if not t.lstrip().startswith(("#", "import", "def", '"""'))][:12]


def write_tasks(folder: Path, rel: str, docs: int = 12, seed: int = 5) -> list[str]:
    """The three shipped tasks, small, over `prose()` and the stdlib, under `folder` (= `rel` from the cwd)."""
    spec = ShippedTasksSpec(docs=docs, context_words=20, continuation_words=6, passage_words=60)
    configs, texts = T.shipped_configs(rel), prose()
    made = {T.DOCSTRING_CLOZE: T.choice_docs(T.docstring_items(seed, docs, set()), 4, seed, T.DOCSTRING_CLOZE),
            T.PROSE_CHOICE: T.prose_choice_items(texts, spec, seed), T.PROSE_PPL: T.prose_ppl_docs(texts, spec)}
    for name, items in made.items():
        T.write_task(folder, configs[name], items)
    return list(made)


def gsm8k_rows(n: int = 6) -> list[dict[str, Any]]:
    """GSM8K-shaped rows (question, answer ending in `#### <number>`)."""
    return [{"question": f"Tom has {i} apples and buys {i + 2} more. How many apples does he have?",
             "answer": f"He has {i} + {i + 2} = {2 * i + 2} apples.\n#### {2 * i + 2}"} for i in range(n)]


SMALL = {"limit": 12, "batch_size": 8,
         "shipped": {"docs": 12, "context_words": 20, "continuation_words": 6, "passage_words": 60}}
TRAINED_MODULE = "stdlib:json/__init__.py"


def make_upstream(root: Path) -> Path:
    """data/{pretrain,sft} (two random checkpoints, one tokenizer), data/mix (tokenizer, packing.json, split
    indexes) and data/clean (prose held out, prose and a stdlib module trained on)."""
    data = root / "data"
    checkpoint(data / "pretrain", seed=3)
    checkpoint(data / "sft", seed=4)
    (data / "mix").mkdir(parents=True)
    shutil.copy(data / "pretrain" / "tokenizer.json", data / "mix" / "tokenizer.json")
    (data / "mix" / "packing.json").write_text(json.dumps({"eos_id": 0}))
    texts = prose()
    rows = [{"id": f"lit/{i}", "source": "lit", "lang": "en", "origin": f"book:{i}", "text": t}
            for i, t in enumerate(texts)]
    rows.append({"id": "code/json/__init__.py", "source": "code", "lang": "python", "origin": TRAINED_MODULE,
                 "text": "import json\n"})
    (data / "clean" / "shards").mkdir(parents=True)
    pq.write_table(pa.Table.from_pylist(rows), data / "clean" / "shards" / "all-00000.parquet")
    val = [r["id"] for r in rows[:-1] if int(r["id"].split("/")[1]) % 4 != 0]  # a quarter of the prose trained on
    train = [r["id"] for r in rows if r["id"] not in val]
    for split, ids in (("val", val), ("train", train)):
        pq.write_table(pa.table({"doc_ids": [[i] for i in ids]}), data / "mix" / f"{split}.idx.parquet")
    return root


def run_stage(root: Path, **bench) -> tuple:
    job = BenchmarkJob(benchmark={**SMALL, **bench})
    result = run(job, StagePaths(root, "benchmark", seed=7))
    return result, json.loads((root / "data" / "benchmark" / "scores.json").read_text())
