"""KV-cache generation (tasks/train/modeling/kv_cache.py, tasks/eval/generate.py): cached logits equal the full forward's
for every architecture option the model has, greedy tokens equal `transformers.generate` on the exported model
(llama with llama3 RoPE scaling, mistral with a window shorter than the sequence, qwen2, qwen3, phi3 with
its fused projections and a window), and batched
decoding gives each prompt what it gets alone — also past seq_len, where a row falls back to re-reading its
window exactly as the uncached loop did."""

from __future__ import annotations

from dataclasses import replace

import pytest
import torch

from specs.evaluate import SamplingSpec
from tasks.eval.generate import generate, generate_batch, sample_next
from specs.architecture import ModelConfig
from tasks.train.hf.hf_export import export_hf
from tasks.train.modeling.kv_cache import KVCache
from tasks.train.modeling.model import Transformer
from tests.helpers.export import make_tokenizer_json, trained_like_state


@pytest.fixture(scope="module")
def tokenizer_json(tmp_path_factory):
    return make_tokenizer_json(tmp_path_factory.mktemp("tok") / "tokenizer.json")


BASE = ModelConfig(vocab_size=320, seq_len=40, n_layers=2, n_heads=4, n_kv_heads=2, d_model=32, ffn_hidden=64,
                   tie_embeddings=False, rope_theta=500.0, norm_eps=1e-6)
FAMILIES = {
    "llama": replace(BASE, rope_type="llama3", rope_factor=8.0, rope_original_max_len=8, rope_theta=5000.0),
    "mistral": replace(BASE, sliding_window=6),             # far shorter than the 40-token sequences below
    "qwen2": replace(BASE, attn_bias=True, tie_embeddings=True),
    "qwen3": replace(BASE, qk_norm=True, explicit_head_dim=16, n_kv_heads=1),
    # exported as Phi3ForCausalLM (fused qkv_proj / gate_up_proj) with a window shorter than the sequences
    "phi3": replace(BASE, sliding_window=6, hf_model_type="phi3"),
}
GREEDY = SamplingSpec(temperature=0.0, top_k=None, top_p=1.0, max_new_tokens=24)


def model_of(cfg: ModelConfig, seed: int = 0) -> Transformer:
    state = trained_like_state(cfg, seed)
    if cfg.attn_bias:  # the export's biases start at zero: give them values so a dropped bias would show
        gen = torch.Generator().manual_seed(seed + 1)
        state = {k: (torch.randn(v.shape, generator=gen) * 0.3 if k.endswith("bias") else v) for k, v in state.items()}
    model = Transformer(cfg, seed=0).eval()
    model.load_state_dict(state, strict=True)
    return model


def prompts(n: int, lengths: list[int], vocab: int, seed: int = 3) -> list[list[int]]:
    gen = torch.Generator().manual_seed(seed)
    return [torch.randint(2, vocab, (lengths[i % len(lengths)],), generator=gen).tolist() for i in range(n)]


def uncached_generate(model: Transformer, ids: list[int], steps: int, eos: int | None = None) -> list[int]:
    """The reference: the whole (seq_len-cropped) context through the model for every token, argmax."""
    ids, new = list(ids), []
    for _ in range(steps):
        nxt = int(model(torch.tensor(ids[-model.cfg.seq_len:])[None])[0, -1].double().argmax())
        if nxt == eos:
            break
        ids.append(nxt)
        new.append(nxt)
    return new


@pytest.mark.parametrize("name", list(FAMILIES))
def test_cached_logits_equal_the_full_forward(name):
    cfg = FAMILIES[name]
    model = model_of(cfg)
    rows = prompts(3, [30, 7, 18], cfg.vocab_size)
    cache = KVCache(cfg.n_layers, 3, cfg.seq_len)
    with torch.no_grad():  # prefill the first 5 tokens of each row together, then one token per step
        full = [model(torch.tensor(r)[None])[0] for r in rows]                      # [len, V] each
        got = [[t] for t in model(torch.tensor([r[:5] for r in rows]), position_ids=torch.arange(5).expand(3, 5),
                                  cache=cache).unbind(0)]
        for p in range(5, 30):
            live = [b for b, r in enumerate(rows) if p < len(r)]
            if len(live) < len(rows):
                cache.keep(live)
            rows, got, full = [rows[b] for b in live], [got[b] for b in live], [full[b] for b in live]
            step = model(torch.tensor([[r[p]] for r in rows]), position_ids=torch.full((len(rows), 1), p),
                         cache=cache)                                                # [B, 1, V]
            for b in range(len(rows)):
                got[b].append(step[b])
    # Batched and one-row matmuls block differently, so fp32 rounding scales with the logits (|logit| up to ~16
    # here: 1.05e-5 seen on one CPU); a cache bug (stale keys, a wrong position) moves logits by 1e-2 or more.
    for g, f in zip(got, full):
        torch.testing.assert_close(torch.cat(g), f, rtol=1e-5, atol=1e-5)


def test_the_window_is_applied_to_cached_keys():
    """Mistral's window really limits the cached path: without it the same weights give other logits."""
    cfg = FAMILIES["mistral"]
    ids = prompts(1, [30], cfg.vocab_size)[0]
    windowed, unwindowed = (model_of(c) for c in (cfg, replace(cfg, sliding_window=None)))
    outs = []
    for model in (windowed, unwindowed):
        cache = KVCache(cfg.n_layers, 1, cfg.seq_len)
        with torch.no_grad():
            model(torch.tensor([ids[:29]]), position_ids=torch.arange(29)[None], cache=cache)
            outs.append(model(torch.tensor([[ids[29]]]), position_ids=torch.tensor([[29]]), cache=cache)[0, -1])
    assert float((outs[0] - outs[1]).abs().max()) > 1e-2
    with torch.no_grad():
        torch.testing.assert_close(outs[0], windowed(torch.tensor([ids]))[0, -1], rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("name", list(FAMILIES))
def test_greedy_tokens_equal_transformers_generate(name, tmp_path, tokenizer_json):  # noqa: F811
    from transformers import AutoModelForCausalLM

    cfg = FAMILIES[name]
    model = model_of(cfg)
    export_hf(model.state_dict(), cfg, tokenizer_json, tmp_path / "hf", card={"name": "t", "description": "t"})
    hf = AutoModelForCausalLM.from_pretrained(tmp_path / "hf", local_files_only=True, dtype=torch.float32).eval()
    rows = prompts(4, [9, 3, 14, 6], cfg.vocab_size)
    plain = generate_batch(model, rows, GREEDY, [torch.Generator() for _ in rows])
    # Planted stop: a token first produced mid-continuation; that row must stop right before it, in both.
    row, k = next((b, k) for b, (new, _) in enumerate(plain) for k in range(2, len(new)) if new[k] not in new[:k])
    eos = plain[row][0][k]
    ours = generate_batch(model, rows, GREEDY, [torch.Generator() for _ in rows], eos_id=eos)
    assert ours[row] == (plain[row][0][:k], "eos")
    for r, (new, stop) in zip(rows, ours):
        with torch.no_grad():
            out = hf.generate(torch.tensor([r]), attention_mask=torch.ones(1, len(r), dtype=torch.long),
                              do_sample=False, max_new_tokens=GREEDY.max_new_tokens, eos_token_id=eos,
                              pad_token_id=eos)[0, len(r):].tolist()
        assert out == new + ([eos] if stop == "eos" else []), name
        assert new == uncached_generate(model, r, GREEDY.max_new_tokens, eos)


def test_batched_equals_one_by_one_also_past_seq_len():
    cfg = FAMILIES["mistral"]
    model = model_of(cfg)
    # 45 > seq_len (cropped from the start); 30 + 24 new tokens crosses seq_len mid-continuation.
    rows = prompts(5, [4, 45, 30, 12, 1], cfg.vocab_size)
    batched = generate_batch(model, rows, GREEDY, [torch.Generator() for _ in rows])
    for r, (new, stop) in zip(rows, batched):
        assert (new, stop) == generate(model, r, GREEDY, torch.Generator())
        assert new == uncached_generate(model, r, GREEDY.max_new_tokens) and stop == "length"


def test_sampled_rows_draw_from_their_own_generators():
    """Each prompt's continuation with its own seeded generator is the same in any batch, and it is really
    sampled (another seed gives another continuation)."""
    cfg = FAMILIES["qwen3"]
    model = model_of(cfg)
    sampling = SamplingSpec(temperature=1.0, top_k=50, top_p=0.95, max_new_tokens=16)
    rows = prompts(4, [5, 11, 2, 8], cfg.vocab_size)
    together = generate_batch(model, rows, sampling, [torch.Generator().manual_seed(10 + i) for i in range(4)])
    reversed_ = generate_batch(model, rows[::-1], sampling, [torch.Generator().manual_seed(13 - i) for i in range(4)])
    assert together == reversed_[::-1]
    for i, r in enumerate(rows):
        assert together[i] == generate(model, r, sampling, torch.Generator().manual_seed(10 + i))
    assert generate(model, rows[0], sampling, torch.Generator().manual_seed(99)) != together[0]
    # the reference sampler over full-context logits draws the same tokens
    gen, ids = torch.Generator().manual_seed(10), list(rows[0])
    for _ in range(16):
        ids.append(sample_next(model(torch.tensor([ids]))[0, -1], sampling, gen))
    assert ids[len(rows[0]):] == together[0][0]


def test_a_cache_needs_positions_and_refuses_overflow_and_empty_prompts():
    cfg = FAMILIES["llama"]
    model = model_of(cfg)
    with pytest.raises(ValueError, match="position_ids"):
        model(torch.tensor([[1, 2]]), cache=KVCache(cfg.n_layers, 1, 4))
    with pytest.raises(ValueError, match="at least one token"):
        generate_batch(model, [[1, 2], []], GREEDY, [torch.Generator(), torch.Generator()])
    with pytest.raises(IndexError, match="past the cache"):
        model(torch.tensor([[1, 2]]), position_ids=torch.tensor([[3, 4]]), cache=KVCache(cfg.n_layers, 1, 4))
