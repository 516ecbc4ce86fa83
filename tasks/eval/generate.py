"""Load the pretrained model and continue fixed prompts with seeded temperature / top-k / top-p sampling.

The model has no KV cache, so every new token recomputes the whole context (cropped to the model's seq_len):
O(T²) per continuation, fine for the tiny models this runs on in CI; a cache is the first thing to add for
large ones. Sampling happens on the CPU in float64 from the last position's logits, with one `torch.Generator`
per prompt seeded from (run.seed, prompt id): a prompt's continuation depends neither on the order of the prompts
nor on whether others were added or removed, and not on the device the forward pass ran on (beyond its logits).
"""

from __future__ import annotations

import contextlib
import hashlib
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import torch

from specs.evaluate import PromptSpec, SamplingSpec
from tasks.train.model import ModelConfig, Transformer
from tasks.train.weights import load_weights


def load_model(pretrain_dir: Path, device: str = "cpu") -> tuple[Transformer, ModelConfig]:
    """The consolidated pretrained model (`model.safetensors` + `config.json`), in eval mode."""
    config = json.loads((pretrain_dir / "config.json").read_text())
    cfg = ModelConfig.from_dict(config["model"])
    state = load_weights(pretrain_dir)
    model = Transformer(cfg, seed=0)  # the init seed is irrelevant: every weight is overwritten below
    model.load_state_dict(state, strict=True)
    return model.to(device).eval(), cfg


@contextlib.contextmanager
def torch_threads(n: int) -> Iterator[None]:
    """Run with exactly `n` intra-op threads (restored afterwards): reductions split the same way on every run."""
    before = torch.get_num_threads()
    torch.set_num_threads(n)
    try:
        yield
    finally:
        torch.set_num_threads(before)


def prompt_seed(run_seed: int, prompt_id: str) -> int:
    """A 63-bit seed for one prompt's generator, from the run seed and the prompt id (not its position)."""
    digest = hashlib.blake2b(f"{run_seed}\x1f{prompt_id}".encode(), digest_size=8,
                             person=b"forgeline-eval").digest()
    return int.from_bytes(digest, "big") >> 1


def filter_logits(logits: torch.Tensor, top_k: int | None, top_p: float) -> torch.Tensor:
    """logits [V] with everything outside the top-k and then the top-p nucleus set to -inf."""
    logits = logits.clone()
    V = logits.numel()
    if top_k is not None and top_k < V:
        kth = torch.topk(logits, top_k).values[-1]                      # smallest logit still kept
        logits[logits < kth] = float("-inf")
    if top_p < 1.0:
        sorted_logits, order = torch.sort(logits, descending=True)      # [V], [V]
        cum = torch.softmax(sorted_logits, dim=-1).cumsum(dim=-1)       # [V]
        # Drop a token when the tokens before it already reach top_p; the most likely one always stays.
        drop_sorted = (cum - torch.softmax(sorted_logits, dim=-1)) >= top_p
        drop_sorted[0] = False
        logits[order[drop_sorted]] = float("-inf")
    return logits


def sample_next(logits: torch.Tensor, sampling: SamplingSpec, generator: torch.Generator) -> int:
    """One token id from the last position's logits [V] (temperature 0: the argmax, no draw)."""
    logits = logits.detach().to("cpu", torch.float64)                   # [V]
    if sampling.temperature == 0.0:
        return int(torch.argmax(logits))
    logits = filter_logits(logits / sampling.temperature, sampling.top_k, sampling.top_p)
    probs = torch.softmax(logits, dim=-1)                               # [V], zeros outside the kept set
    return int(torch.multinomial(probs, 1, generator=generator))


@torch.inference_mode()
def generate(model: Transformer, prompt_ids: list[int], sampling: SamplingSpec, generator: torch.Generator,
             eos_id: int | list[int] | None = None) -> tuple[list[int], str]:
    """New token ids after `prompt_ids`, and why generation stopped ("eos" or "length"). `eos_id`: the stop
    token, or several (a chat template's end of turn and the tokenizer's end of text)."""
    stops = {eos_id} if isinstance(eos_id, int) else set(eos_id or ())
    device = next(model.parameters()).device
    T = model.cfg.seq_len
    ids = list(prompt_ids)
    new: list[int] = []
    for _ in range(sampling.max_new_tokens):
        ctx = torch.tensor(ids[-T:], dtype=torch.long, device=device)[None]   # [1, t ≤ T]; no KV cache
        logits = model(ctx)[0, -1]                                      # [V]
        nxt = sample_next(logits, sampling, generator)
        if sampling.stop_at_eos and nxt in stops:
            return new, "eos"
        ids.append(nxt)
        new.append(nxt)
    return new, "length"


def encode_prompt(tokenizer: Any, text: str, eos_id: int | None) -> list[int]:
    """Prompt ids preceded by the end-of-document token: in the packed training stream every document starts
    right after one, so this is how the model saw the start of a text."""
    ids = tokenizer.encode(text, add_special_tokens=False).ids
    return ([eos_id] if eos_id is not None else []) + ids


def run_generations(model: Transformer, tokenizer: Any, prompts: list[PromptSpec], sampling: SamplingSpec,
                    run_seed: int, eos_id: int | None) -> list[dict[str, Any]]:
    """One record per prompt (in the given order): the prompt, its continuation and how it was made."""
    rows = []
    for p in prompts:
        seed = prompt_seed(run_seed, p.id)
        gen = torch.Generator().manual_seed(seed)
        ids = encode_prompt(tokenizer, p.text, eos_id)  # a prompt longer than seq_len is cropped like any context
        new, stop = generate(model, ids, sampling, gen, eos_id)
        rows.append({"id": p.id, "category": p.category, "prompt": p.text,
                     "completion": tokenizer.decode(new, skip_special_tokens=False), "prompt_tokens": len(ids),
                     "new_tokens": len(new), "stop": stop, "seed": seed, "token_ids": new})
    return rows
