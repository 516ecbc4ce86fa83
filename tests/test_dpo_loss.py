"""The DPO loss on packed pair rows (tasks/train/inputs/pref_data.py, dpo_loss.py, loss.py's chunked log-probs): equal to
each sequence scored alone, ln 2 at the start, pairs fitted to rows with their reasons, and the formulas."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
import torch.nn.functional as F

from specs.architecture import ModelConfig
from tasks.train.objectives.dpo_loss import preference_losses, preference_metrics
from tasks.train.modeling.loss import linear_token_logprobs
from tasks.train.modeling.model import Transformer
from tasks.train.inputs.pref_data import all_pair_logps, fit_pair, pack_pairs, pair_logps

CFG = ModelConfig(vocab_size=97, d_model=32, n_layers=2, n_heads=4, n_kv_heads=2, seq_len=64, ffn_hidden=48)
PAD = 0


def model(fused: bool = False, seed: int = 0) -> Transformer:
    """O(1) weights (the init's std 0.02 makes every log-prob ≈ -log V and every difference tiny)."""
    m = Transformer(CFG, seed=0, fused=fused)
    gen = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, p in m.named_parameters():
            p.copy_(1 + 0.2 * torch.randn(p.shape, generator=gen) if p.ndim == 1
                    else torch.randn(p.shape, generator=gen) / p.shape[-1] ** 0.5)
    return m


def pairs(n: int, seed: int = 1) -> list[tuple[tuple[list[int], list[int]], tuple[list[int], list[int]]]]:
    """n (chosen, rejected) samples sharing a prompt, answers of other lengths; the pad id occurs *inside*
    answers (a real token there: only the rendered mask says what is padding)."""
    rng = np.random.default_rng(seed)
    out = []
    for _ in range(n):
        prompt = rng.integers(1, CFG.vocab_size, int(rng.integers(2, 9))).tolist()
        sides = []
        for _side in range(2):
            answer = rng.integers(0, CFG.vocab_size, int(rng.integers(1, 12))).tolist()
            answer[len(answer) // 2] = PAD
            sides.append((prompt + answer, [0] * len(prompt) + [1] * len(answer)))
        out.append(tuple(sides))
    return out


def alone_logps(m: Transformer, sample: tuple[list[int], list[int]]) -> torch.Tensor:
    """Σ log p over the sample's loss tokens, the sample run alone (no packing, no segment ids)."""
    ids = torch.tensor(sample[0])[None]
    logp = F.log_softmax(m(ids[:, :-1]).float(), dim=-1)[0]                   # [L-1, V]
    tok = logp.gather(-1, ids[0, 1:, None])[:, 0]                               # [L-1]
    return (tok * torch.tensor(sample[1][1:], dtype=torch.float32)).sum()


def test_chunked_token_logprobs_equal_the_logits_path_with_gradients():
    gen = torch.Generator().manual_seed(0)
    x = torch.randn(3, 70, 16, generator=gen, requires_grad=True)
    w = torch.randn(211, 16, generator=gen, requires_grad=True)
    y = torch.randint(0, 211, (3, 70), generator=gen)
    y[1, :5] = -100
    g = torch.randn(3, 70, generator=gen)
    out = linear_token_logprobs(x, w, y, chunk=64)                                # 4 chunks, the last partial
    (out * g).sum().backward()
    got = (out.detach(), x.grad.clone(), w.grad.clone())
    x.grad, w.grad = None, None
    ref = F.log_softmax(x @ w.t(), dim=-1).gather(-1, y.clamp(min=0)[..., None])[..., 0] * (y != -100)
    (ref * g).sum().backward()
    for a, b in zip(got, (ref.detach(), x.grad, w.grad)):
        torch.testing.assert_close(a, b, atol=1e-5, rtol=1e-5)
    assert (got[0][1, :5] == 0).all()


@pytest.mark.parametrize("fused", [False, True])
def test_transformer_per_token_equals_log_softmax_of_its_logits(fused):
    m = model(fused)
    ids = torch.randint(0, CFG.vocab_size, (2, 40), generator=torch.Generator().manual_seed(3))
    seg = torch.tensor([[0] * 15 + [1] * 25, [0] * 40])
    got = m(ids[:, :-1], ids[:, 1:], segment_ids=seg[:, :-1], per_token=True)
    logits = m(ids[:, :-1], segment_ids=seg[:, :-1])
    want = F.log_softmax(logits.float(), -1).gather(-1, ids[:, 1:, None])[..., 0]
    torch.testing.assert_close(got, want, atol=1e-5, rtol=1e-5)


@pytest.mark.parametrize("kind, smoothing", [("sigmoid", 0.0), ("sigmoid", 0.2), ("ipo", 0.0)])
def test_packed_rows_equal_each_sequence_alone_loss_and_gradients(kind, smoothing):
    """Several pairs per row (block-diagonal attention, positions per sample, padding after) against every
    sequence run alone: log-prob sums, the loss and every parameter's gradient within 1e-5."""
    data = pairs(7)
    policy, ref = model(seed=0), model(seed=5)
    rows = pack_pairs(data, [f"p{i}" for i in range(len(data))], 60, PAD, seed=2)
    assert max(len(r) for r in rows.packed.rows) >= 4, "the rows must really hold several pairs"
    n = torch.tensor(rows.tokens, dtype=torch.float32)
    with torch.no_grad():
        ref_lp = torch.from_numpy(all_pair_logps(ref, rows, 3)).float()

    def loss(logps: torch.Tensor, order: np.ndarray) -> torch.Tensor:
        r, k = ref_lp[order], n[order]
        return preference_losses(logps[:, 0], logps[:, 1], r[:, 0], r[:, 1], 0.1, kind, smoothing,
                                 k[:, 0], k[:, 1]).losses.sum() / len(data)

    packed_lp, order = pair_logps(policy, rows, range(len(rows.packed.rows)))
    packed = loss(packed_lp, order)
    packed.backward()
    grads = {k: p.grad.clone() for k, p in policy.named_parameters()}
    policy.zero_grad()
    alone_lp = torch.stack([torch.stack([alone_logps(policy, c), alone_logps(policy, r)]) for c, r in data])
    alone = loss(alone_lp, np.arange(len(data)))
    alone.backward()
    torch.testing.assert_close(packed_lp, alone_lp[order], atol=1e-5, rtol=0)
    assert abs(float(packed.detach()) - float(alone.detach())) < 1e-5
    for k, p in policy.named_parameters():
        torch.testing.assert_close(grads[k], p.grad, atol=1e-5, rtol=1e-4, msg=k)


@pytest.mark.parametrize("smoothing", [0.0, 0.3])
def test_loss_at_the_start_is_ln2_whatever_the_packing(smoothing):
    """The reference scored every sequence alone, the policy — the same weights — packed 5+ pairs to a row with
    padding after them and the pad id inside answers: every margin is 0 and the loss ln 2."""
    data = pairs(9, seed=4)
    m = model(seed=2)
    packed = pack_pairs(data, [f"p{i}" for i in range(9)], 150, PAD, seed=0)
    assert max(len(r) for r in packed.packed.rows) >= 10 and (packed.packed.input_ids == PAD).any()
    with torch.no_grad():
        ref = torch.stack([torch.stack([alone_logps(m, c), alone_logps(m, r)]) for c, r in data]).double()
        pol = torch.from_numpy(all_pair_logps(m, packed, 2))
    s = preference_losses(pol[:, 0], pol[:, 1], ref[:, 0], ref[:, 1], beta=0.5, label_smoothing=smoothing)
    assert abs(float(s.losses.mean()) - math.log(2)) < 1e-5
    assert float((s.chosen_rewards - s.rejected_rewards).abs().max()) < 1e-5


def test_fit_pair_cuts_to_a_row_and_refuses_with_a_reason():
    sample = lambda p, a, t=50: (list(range(1, p + 1)) + [t] * a, [0] * p + [1] * a)  # noqa: E731
    c, r = fit_pair(sample(4, 10), sample(4, 3, 60), cap=16)
    assert (len(c[0]), len(r[0])) == (9, 7)          # the shorter (7 ≤ 8) whole, the longer the rest
    c, r = fit_pair(sample(4, 20), sample(4, 30, 60), cap=16)
    assert (len(c[0]), len(r[0])) == (8, 8)          # both to half a row, starts kept
    assert c[0] == sample(4, 20)[0][:8] and c[1] == [0] * 4 + [1] * 4
    c, r = fit_pair(sample(2, 40), sample(2, 3, 60), cap=200, longest=10)
    assert len(c[0]) == 10 and len(r[0]) == 5        # each answer first to the model's context
    assert fit_pair(sample(10, 4), sample(10, 5, 60), cap=16).startswith("no_answer_tokens")
    same = (list(range(1, 5)) + [7, 8, 9], [0] * 4 + [1] * 3)
    other = (list(range(1, 5)) + [7, 8, 10], [0] * 4 + [1] * 3)
    assert fit_pair(same, other, cap=12).startswith("identical_tokens")  # the differing tail was cut off


def test_the_formulas():
    pc, pr, rc, rr = (torch.tensor([v], dtype=torch.float64) for v in (-3.0, -5.0, -4.0, -4.5))
    z = 0.2 * ((-3.0 + 4.0) - (-5.0 + 4.5))
    s = preference_losses(pc, pr, rc, rr, beta=0.2, label_smoothing=0.1)
    want = -0.9 * math.log(1 / (1 + math.exp(-z))) - 0.1 * math.log(1 / (1 + math.exp(z)))
    assert abs(float(s.losses) - want) < 1e-12
    assert abs(float(s.chosen_rewards) - 0.2) < 1e-12 and abs(float(s.rejected_rewards) + 0.1) < 1e-12
    n_c, n_r = torch.tensor([2.0], dtype=torch.float64), torch.tensor([4.0], dtype=torch.float64)
    ipo = preference_losses(pc, pr, rc, rr, beta=0.2, kind="ipo", chosen_tokens=n_c, rejected_tokens=n_r)
    assert abs(float(ipo.losses) - ((1.0 / 2 - (-0.5) / 4) - 1 / 0.4) ** 2) < 1e-12
    m = preference_metrics(np.array([[-3.0, -5.0], [-6.0, -2.0]]), np.array([[-4.0, -4.5], [-6.0, -2.0]]),
                           np.array([[2, 4], [3, 1]]), beta=0.2)
    assert (m["accuracy"], m["reward_accuracy"]) == (0.5, 0.5)
    # per token pair 1 flips (-1.5 < -1.25): summed log-probs favour the shorter answer
    assert m["accuracy_per_token"] == 0.0 and abs(m["chosen_logp_per_token"] - (-9.0 / 5)) < 1e-12


def test_a_reference_off_by_float32_rounding_is_no_preference():
    """At step 0 the policy is the reference's model; a reference summed in another process can differ in the
    last bits (once: ≤ 2.4e-4 on sums of a few hundred). That is no preference: reward accuracy stays 0, while a
    margin a thousand times larger still counts."""
    rng = np.random.default_rng(0)
    policy = -rng.uniform(100.0, 600.0, size=(200, 2))                     # summed log-probs of long answers
    noise = rng.uniform(-1.0, 1.0, size=policy.shape) * 2.4e-4
    tokens = np.full(policy.shape, 100)
    m = preference_metrics(policy, policy + noise, tokens, beta=0.1)
    assert m["reward_accuracy"] == 0.0 and abs(m["margin"]) < 1e-4
    moved = policy + np.array([0.3, -0.3])                                  # chosen up, rejected down: Δ = 0.6
    assert preference_metrics(moved, policy + noise, tokens, beta=0.1)["reward_accuracy"] == 1.0
    assert preference_metrics(policy + np.array([-0.3, 0.3]), policy, tokens, beta=0.1)["reward_accuracy"] == 0.0
    s = preference_losses(*(torch.tensor(c) for c in (policy[:, 0], policy[:, 1], policy[:, 0] + noise[:, 0],
                                                      policy[:, 1] + noise[:, 1])), beta=0.1)
    assert not bool(s.preferred.any()) and bool((s.rounding < 0.1 * 0.6 / 10).all())  # ≪ the margin above
