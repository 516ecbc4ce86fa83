"""SFT packing (deterministic, whole samples, no loss across boundaries), block-diagonal attention without
leakage between packed samples, and the per-token loss normalization over micro-batches and ranks."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from tasks.train.modeling.masks import positions_from_segments
from tasks.train.modeling.model import ModelConfig, Transformer
from tasks.train.inputs.sft_data import global_token_count, pack_samples, sft_loss_sums, step_loss

PAD = 1


def make_samples(n: int, seed: int, lo: int = 3, hi: int = 20) -> list[tuple[list[int], list[int]]]:
    """Random samples: ids in [2, 60), a prompt part (mask 0) then a reply part (mask 1)."""
    rng = np.random.default_rng(seed)
    out = []
    for _ in range(n):
        L = int(rng.integers(lo, hi))
        cut = int(rng.integers(1, L))
        out.append((rng.integers(2, 60, L).tolist(), [0] * cut + [1] * (L - cut)))
    return out


def tiny_cfg(vocab: int = 64, seq_len: int = 32, **kw) -> ModelConfig:
    base = dict(vocab_size=vocab, seq_len=seq_len, n_layers=2, n_heads=4, n_kv_heads=2, d_model=32, ffn_hidden=96)
    return ModelConfig(**{**base, **kw})


def test_packing_is_deterministic_and_never_splits_a_sample():
    samples = make_samples(60, seed=0) + [([5] * 40, [1] * 40), ([7, 8, 9], [0, 0, 0])]  # too long; no loss
    a, b = pack_samples(samples, 24, PAD, seed=1), pack_samples(samples, 24, PAD, seed=1)
    for k in ("input_ids", "targets", "weights", "segment_ids", "position_ids"):
        assert np.array_equal(getattr(a, k), getattr(b, k)), k
    assert a.rows == b.rows and pack_samples(samples, 24, PAD, seed=2).rows != a.rows
    assert a.dropped == [(60, "too_long: 40 tokens > seq_len + 1 = 25"), (61, "no_loss_tokens")]
    assert a.stats["samples"] == a.stats["packed"] + a.stats["dropped"] == 62
    placed = sorted(k for row in a.rows for k in row)
    assert placed == list(range(60))  # every kept sample exactly once
    N, T = a.input_ids.shape
    assert T == 24 and a.stats["fill"] > 0.8
    full = np.concatenate([a.input_ids, a.targets[:, -1:]], axis=1)           # [N, T+1] the packed rows
    for r, members in enumerate(a.rows):
        at = 0
        for j, k in enumerate(members):  # each sample whole and contiguous, in its own segment
            ids = samples[k][0]
            assert full[r, at:at + len(ids)].tolist() == ids
            assert np.all(a.segment_ids[r, at:min(at + len(ids), T)] == j)
            assert a.position_ids[r, at:min(at + len(ids), T)].tolist() == list(range(min(len(ids), T - at)))
            at += len(ids)
        assert np.all(full[r, at:] == PAD) and np.all(a.segment_ids[r, at:] == len(members))  # padding
    # weights = the target's loss mask inside its own sample; 0 on padding and across a sample boundary
    for r, members in enumerate(a.rows):
        expect, at = np.zeros(T + 1, dtype=np.float32), 0
        for k in members:
            ids, mask = samples[k]
            expect[at + 1:at + len(ids)] = mask[1:]  # a sample's first token is never a target of its own
            at += len(ids)
        assert np.array_equal(a.weights[r], expect[1:]), r
    assert a.stats["loss_tokens"] == int(a.weights.sum())


def test_truncate_mode_keeps_long_samples_cut_to_fit():
    samples = [([5] * 10 + [6] * 30, [0] * 10 + [1] * 30)]
    p = pack_samples(samples, 24, PAD, seed=0, overflow="truncate")
    assert p.stats["truncated"] == 1 and p.dropped == [] and p.rows == [[0]]
    assert p.input_ids[0].tolist() == samples[0][0][:24] and p.targets[0].tolist() == samples[0][0][1:25]
    assert p.weights[0].sum() == 15  # targets 10..24 are reply tokens
    assert pack_samples(samples, 24, PAD, seed=0).dropped[0][1].startswith("too_long")


def test_positions_restart_per_segment():
    seg = torch.tensor([[0, 0, 0, 1, 1, 2, 2, 2, 2], [0, 1, 1, 1, 1, 1, 1, 1, 1]])
    assert positions_from_segments(seg).tolist() == [[0, 1, 2, 0, 1, 0, 1, 2, 3], [0, 0, 1, 2, 3, 4, 5, 6, 7]]


@pytest.mark.parametrize("kw", [{}, {"tie_embeddings": False, "n_kv_heads": 4}])
def test_packed_samples_do_not_see_each_other(kw):
    """Changing sample A leaves sample B's logits unchanged, and they equal B run alone from position 0."""
    torch.manual_seed(0)
    cfg = tiny_cfg(**kw)
    model = Transformer(cfg, seed=4).eval()
    a_ids, b_ids = list(range(10, 21)), list(range(30, 44))                   # 11 + 14 tokens in a 33-token row
    samples = [(a_ids, [0] * 5 + [1] * 6), (b_ids, [0] * 4 + [1] * 10)]
    packed = pack_samples(samples, cfg.seq_len, PAD, seed=0)
    assert len(packed.rows) == 1
    first = packed.rows[0][0]  # whichever sample the seed put first plays "A"
    changed = list(samples)
    changed[first] = ([(t + 7) % 60 + 2 for t in samples[first][0]], samples[first][1])
    repacked = pack_samples(changed, cfg.seq_len, PAD, seed=0)
    assert repacked.rows == packed.rows
    second = 1 - first
    bpos = packed.segment_ids[0] == 1                                                # B's input positions
    with torch.no_grad():
        outs = []
        for p in (packed, repacked):
            batch = p.batch([0])
            outs.append(model(batch["input_ids"], segment_ids=batch["segment_ids"],
                              position_ids=batch["position_ids"])[0])                # [T, V]
        alone = model(torch.tensor([samples[second][0][:int(bpos.sum())]]))[0]        # [n_b, V]
        leaky = [model(p.batch([0])["input_ids"])[0] for p in (packed, repacked)]     # plain causal: leaks
    torch.testing.assert_close(outs[0][bpos], outs[1][bpos], rtol=0, atol=1e-6)
    torch.testing.assert_close(outs[0][bpos], alone, rtol=1e-5, atol=1e-5)
    assert not torch.allclose(leaky[0][bpos], leaky[1][bpos], atol=1e-3)  # the test can see leakage
    assert not torch.allclose(outs[0][~bpos], outs[1][~bpos], atol=1e-3)  # A itself did change


def test_one_segment_equals_the_causal_path():
    cfg = tiny_cfg()
    model = Transformer(cfg, seed=2).eval()
    ids = torch.randint(0, cfg.vocab_size, (2, cfg.seq_len), generator=torch.Generator().manual_seed(1))
    with torch.no_grad():
        plain = model(ids)
        seg = model(ids, segment_ids=torch.zeros_like(ids))
        pos = model(ids, position_ids=torch.arange(cfg.seq_len).expand(2, -1))
    torch.testing.assert_close(seg, plain, rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(pos, plain, rtol=1e-5, atol=1e-5)


def test_packed_training_step_gives_gradients():
    cfg = tiny_cfg()
    model = Transformer(cfg, seed=0)
    packed = pack_samples(make_samples(12, seed=3), cfg.seq_len, PAD, seed=0)
    b = packed.batch(range(len(packed.rows)))
    logits = model(b["input_ids"], segment_ids=b["segment_ids"], position_ids=b["position_ids"])
    loss_sum, count = sft_loss_sums(logits, b["targets"], b["weights"])
    assert count.item() == packed.stats["loss_tokens"]
    (loss_sum / count).backward()
    assert all(p.grad is not None and torch.isfinite(p.grad).all() for p in model.parameters())


def test_per_token_normalization_equals_the_concatenated_batch():
    """2 dp ranks × 3 micro-batches with very different assistant-token counts: scaling each micro loss by
    dp·grad_accum / global count, then averaging as DeepSpeed does (÷grad_accum, mean over ranks), gives the
    gradient of one batch holding everything — a per-micro-batch mean does not."""
    g = torch.Generator().manual_seed(0)
    V, d, dp, ga = 11, 8, 2, 3
    W = torch.randn(d, V, generator=g, requires_grad=True)
    micro = []
    for r in range(dp):
        for m in range(ga):
            B, T = 2, 5 + 3 * m
            x = torch.randn(B, T, d, generator=g)
            y = torch.randint(0, V, (B, T), generator=g)
            w = (torch.rand(B, T, generator=g) < (0.1 if (r + m) % 2 else 0.9)).float()
            w[0, 0] = 1.0  # every micro-batch has at least one loss token
            micro.append((r, x, y, w))

    def grad_of(fn):
        W.grad = None
        fn().backward()
        return W.grad.clone()

    def concatenated():  # one batch: Σ w·ce / Σ w over every token of every micro-batch and rank
        sums = [sft_loss_sums(x @ W, y, w) for _, x, y, w in micro]
        return sum(s for s, _ in sums) / sum(c for _, c in sums)

    total = global_token_count([w.sum() for _, _, _, w in micro])  # what the all-reduce would return
    assert total.item() == sum(w.sum().item() for _, _, _, w in micro)

    def recipe():  # what each rank backpropagates, with DeepSpeed's ÷grad_accum and the mean over dp ranks
        return sum(step_loss(sft_loss_sums(x @ W, y, w)[0], total, dp, ga) / ga / dp for _, x, y, w in micro)

    def mean_of_means():  # the naive way: each micro-batch's own mean, averaged
        return sum(sft_loss_sums(x @ W, y, w)[0] / w.sum() for _, x, y, w in micro) / len(micro)

    ref = grad_of(concatenated)
    torch.testing.assert_close(grad_of(recipe), ref, rtol=1e-5, atol=1e-6)
    assert not torch.allclose(grad_of(mean_of_means), ref, rtol=1e-3, atol=1e-5)
    assert torch.allclose(recipe(), concatenated(), rtol=1e-5)
