"""Load the pretrained model and continue fixed prompts with seeded temperature / top-k / top-p sampling.

Prompts are decoded together with a KV cache (`generate_batch`; tasks/train/modeling/kv_cache.py): one prefill over the
right-padded prompts, then one forward of B new tokens per step, each row at its own positions, finished rows
dropped. A context that outgrows the model's seq_len is handled as the model was trained (and as before the
cache): that row re-reads its last seq_len tokens each step. Greedy tokens equal `transformers.generate`'s on
the exported model (tests/test_generate_cache.py). Sampling happens on the CPU in float64 from the last
position's logits, with one `torch.Generator` per prompt seeded from (run.seed, prompt id) and one draw per
token: a prompt's continuation depends neither on the order of the prompts nor on whether others were added or
removed, nor on the batch it was decoded in — up to the last bits of its logits, which batched matmuls may
round differently; a draw changes only if such a difference straddles a sampling boundary (never observed).
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
from tasks.train.modeling.kv_cache import KVCache
from tasks.train.modeling.model import ModelConfig, Transformer
from tasks.train.checkpointing.weights import load_weights, model_from_state

BATCH = 16  # prompts decoded together; greedy outputs are the same for any value (see generate_batch)


def load_model(pretrain_dir: Path, device: str = "cpu") -> tuple[Transformer, ModelConfig]:
    """The consolidated pretrained model (`model.safetensors` + `config.json`), in eval mode."""
    config = json.loads((pretrain_dir / "config.json").read_text())
    cfg = ModelConfig.from_dict(config["model"])
    return model_from_state(cfg, load_weights(pretrain_dir), device), cfg


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


def prefill(model: Transformer, rows: list[list[int]], cache: KVCache, device: torch.device) -> list[torch.Tensor]:
    """Run every row's context through the model at positions 0..len-1 (right-padded), filling `cache`;
    returns each row's last-position logits [V]."""
    L = max(len(r) for r in rows)
    ids = torch.zeros(len(rows), L, dtype=torch.long, device=device)               # [B, L], 0-padded right
    for b, r in enumerate(rows):
        ids[b, :len(r)] = torch.tensor(r, dtype=torch.long)
    pos = torch.arange(L, device=device).expand(len(rows), L)                       # [B, L]
    last = torch.tensor([len(r) - 1 for r in rows], device=device)                  # [B]
    logits = model(ids, position_ids=pos, cache=cache, last=last)                   # [B, 1, V]
    return list(logits[:, -1].unbind(0))


def choose(logits: dict[int, torch.Tensor], rows: list[int], sampling: SamplingSpec,
           generators: list[torch.Generator]) -> list[int]:
    """The next token of each of `rows` from its logits [V]: `sample_next` per row, or for greedy decoding one
    argmax over the batch (the same ids: float32 → float64 is exact and argmax keeps the first maximum)."""
    if sampling.temperature == 0.0:
        return torch.stack([logits[i] for i in rows]).argmax(dim=-1).tolist()
    return [sample_next(logits[i], sampling, generators[i]) for i in rows]


@torch.inference_mode()
def generate_batch(model: Transformer, prompts: list[list[int]], sampling: SamplingSpec,
                   generators: list[torch.Generator], eos_id: int | list[int] | None = None
                   ) -> list[tuple[list[int], str]]:
    """(new token ids, "eos" | "length") per prompt, all prompts decoded together with a KV cache.

    Each prompt's context is its last seq_len tokens; its tokens sit at positions 0.. of its own cache row, so
    a row computes exactly what it would alone (greedy results do not depend on the batch; sampled ones draw
    from the row's own generator, one draw per token, as before). A row whose context outgrows seq_len leaves
    the cache and continues as the model was trained: each step re-reads its last seq_len tokens (no cache)."""
    if not all(prompts):
        raise ValueError("generate: every prompt needs at least one token (the model continues a context)")
    stops = {eos_id} if isinstance(eos_id, int) else set(eos_id or ())
    device = next(model.parameters()).device
    T = model.cfg.seq_len
    ids = [list(p) for p in prompts]
    new: list[list[int]] = [[] for _ in prompts]
    stop = ["length"] * len(prompts)
    cache = KVCache(model.cfg.n_layers, len(prompts), T)
    cached = list(range(len(prompts)))                                              # cache row -> prompt
    logits = dict(zip(cached, prefill(model, [p[-T:] for p in ids], cache, device)))  # prompt -> [V]
    active = list(range(len(prompts)))
    for step in range(sampling.max_new_tokens):
        for i, nxt in zip(active, choose(logits, active, sampling, generators)):
            if sampling.stop_at_eos and nxt in stops:
                stop[i] = "eos"
            else:
                ids[i].append(nxt)
                new[i].append(nxt)
        active = [i for i in active if stop[i] != "eos"]
        if step == sampling.max_new_tokens - 1 or not active:
            break
        # The token just appended sits at position len - 1: cached while that is a slot (< T), else re-read.
        keep = [b for b, i in enumerate(cached) if i in active and len(ids[i]) <= T]
        if len(keep) < len(cached):
            cache.keep(keep)
            cached = [cached[b] for b in keep]
        if cached:
            step_ids = torch.tensor([[ids[i][-1]] for i in cached], dtype=torch.long, device=device)  # [B, 1]
            pos = torch.tensor([[len(ids[i]) - 1] for i in cached], dtype=torch.long, device=device)   # [B, 1]
            out = model(step_ids, position_ids=pos, cache=cache)                   # [B, 1, V]
            logits.update({i: out[b, -1] for b, i in enumerate(cached)})
        for i in sorted(set(active) - set(cached)):
            ctx = torch.tensor(ids[i][-T:], dtype=torch.long, device=device)[None]  # [1, T]
            logits[i] = model(ctx)[0, -1]                                           # [V]
    return list(zip(new, stop))


def generate(model: Transformer, prompt_ids: list[int], sampling: SamplingSpec, generator: torch.Generator,
             eos_id: int | list[int] | None = None) -> tuple[list[int], str]:
    """New token ids after `prompt_ids`, and why generation stopped ("eos" or "length"). `eos_id`: the stop
    token, or several (a chat template's end of turn and the tokenizer's end of text)."""
    return generate_batch(model, [prompt_ids], sampling, [generator], eos_id)[0]


def encode_prompt(tokenizer: Any, text: str, eos_id: int | None) -> list[int]:
    """Prompt ids preceded by the end-of-document token: in the packed training stream every document starts
    right after one, so this is how the model saw the start of a text."""
    ids = tokenizer.encode(text, add_special_tokens=False).ids
    return ([eos_id] if eos_id is not None else []) + ids


def run_generations(model: Transformer, tokenizer: Any, prompts: list[PromptSpec], sampling: SamplingSpec,
                    run_seed: int, eos_id: int | None, batch_size: int = BATCH) -> list[dict[str, Any]]:
    """One record per prompt (in the given order): the prompt, its continuation and how it was made. Prompts
    are decoded `batch_size` at a time (one forward per token for the whole batch)."""
    rows = []
    for start in range(0, len(prompts), batch_size):
        chunk = prompts[start:start + batch_size]
        seeds = [prompt_seed(run_seed, p.id) for p in chunk]
        ids = [encode_prompt(tokenizer, p.text, eos_id) for p in chunk]  # longer than seq_len: cropped
        outs = generate_batch(model, ids, sampling, [torch.Generator().manual_seed(s) for s in seeds], eos_id)
        for p, seed, prompt_ids, (new, stop) in zip(chunk, seeds, ids, outs):
            rows.append({"id": p.id, "category": p.category, "prompt": p.text,
                         "completion": tokenizer.decode(new, skip_special_tokens=False),
                         "prompt_tokens": len(prompt_ids), "new_tokens": len(new), "stop": stop, "seed": seed,
                         "token_ids": new})
    return rows


def round_robin(records: list[dict[str, Any]], n: int) -> list[dict[str, Any]]:
    """Up to `n` records, one per source in turn (file order within a source; sources alphabetical)."""
    by_source: dict[str, list[dict[str, Any]]] = {}
    for rec in records:
        by_source.setdefault(rec.get("source", "unknown"), []).append(rec)
    queues = [by_source[s] for s in sorted(by_source)]
    picked: list[dict[str, Any]] = []
    while len(picked) < n and any(queues):
        for q in queues:
            if q and len(picked) < n:
                picked.append(q.pop(0))
    return picked
