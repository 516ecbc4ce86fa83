"""A tiny Hugging Face checkpoint over the vocabulary of the synthetic clean corpus of tests/helpers/pretrain.py
(`tasks/train/hf/tiny_checkpoint.py` makes it, as `python -m tasks tiny-checkpoint` does), so the pipeline's
mix → pretrain → sft → export can start from it."""

from __future__ import annotations

from pathlib import Path

import pyarrow.parquet as pq

from tasks.train.hf.tiny_checkpoint import CHATML, make_checkpoint as make_tiny

__all__ = ["CHATML", "corpus_texts", "make_checkpoint"]


def corpus_texts(root: Path) -> list[str]:
    return [t for f in sorted((root / "data" / "clean" / "shards").glob("*.parquet"))
            for t in pq.read_table(f).column("text").to_pylist()]


def make_checkpoint(folder: Path, texts: list[str], tied: bool = False, chat_template: str | None = None):
    """A random tiny Llama (2 layers, GQA, d 32, SwiGLU 40) with a 300-token tokenizer."""
    return make_tiny(folder, texts, vocab=300, d_model=32, ffn=40, tied=tied, chat_template=chat_template)
