"""What the HF export and generation tests share: a small trained tokenizer and O(1) random weights."""

from __future__ import annotations

from pathlib import Path

import torch

from tasks.data.mixing.tokenizer import save_tokenizer, train_tokenizer
from specs.architecture import ModelConfig
from tasks.train.modeling.model import Transformer

SPECIALS = ["<|endoftext|>", "<|pad|>", "<|user|>", "<|assistant|>"]
TEXTS = ["The mill by the river grinds grain.", "def add(a, b):\n    return a + b\n",
         "Ünïcödé text — with dashes; and   spaces."] * 30


def make_tokenizer_json(path: Path) -> Path:
    """A 320-token BPE over TEXTS with SPECIALS, saved at `path`."""
    save_tokenizer(train_tokenizer(TEXTS, vocab_size=320, min_frequency=2, special_tokens=SPECIALS), path)
    return path


def trained_like_state(cfg: ModelConfig, seed: int = 0) -> dict[str, torch.Tensor]:
    """O(1) random weights: the init's std 0.02 gives logits ~1e-3, too small for a 1e-4 check to mean much.
    Norm weights are perturbed too, so swapping the two norms of a block would show."""
    gen = torch.Generator().manual_seed(seed)
    state = {}
    for name, t in Transformer(cfg, seed=0).state_dict().items():
        r = torch.randn(t.shape, generator=gen)
        state[name] = 1 + 0.3 * r if t.ndim == 1 else r / (1.0 if name == "layers.0.weight" else t.shape[1] ** 0.5)
    return state
