"""Issue #29 item 5: guards, visible on CPU, against the training step growing kernels or copies again.

The census (tests/helpers/census.py) counts one eager forward + backward under bf16 autocast, as a GPU runs it,
at the 124M shape's widths (d 768, 12 heads, GPT-2's vocabulary) with two blocks (the per-block costs are what a
change moves; 12 blocks take minutes on CPU — `benchmarks/step_census.py` prints the whole shape). The bar is a
compact Llama written the usual way (tests/helpers/reference_llama.py: separate q/k/v, RMSNorm spelled out, the
logits then `F.cross_entropy`): forgeline's training build may dispatch no more ops and write no more bytes.
"""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from specs.pretrain import ModelSpec
from specs.architecture import ModelConfig
from tasks.train.modeling.fused import plain_state, split_values
from tasks.train.modeling.loss import linear_cross_entropy
from tasks.train.modeling.model import Transformer, lm_loss
from tests.helpers.census import census_of_step, count
from tests.helpers.reference_llama import RefLlama

V, T, B = 50304, 128, 2


@pytest.fixture(scope="module")
def batch():
    g = torch.Generator().manual_seed(0)
    return torch.randint(0, V, (B, T), generator=g), torch.randint(0, V, (B, T), generator=g)


def gpt2_widths(n_layers: int = 2) -> ModelConfig:
    return ModelConfig.from_spec(ModelSpec(flavor="gpt2-124m", n_layers=n_layers), V, T)


def test_the_training_step_costs_no_more_than_a_plain_llama(batch):
    cfg = gpt2_widths()
    ours = census_of_step(Transformer(cfg, 0, fused=True), *batch, fake=True)
    ref = census_of_step(RefLlama(V, T, cfg.n_layers, cfg.n_heads, cfg.n_kv_heads, cfg.d_model, cfg.ffn_hidden),
                         *batch, fake=True)
    assert ours.total_ops <= ref.total_ops, (ours.ops.most_common(12), ref.ops.most_common(12))
    assert ours.total_bytes <= ref.total_bytes, (ours.bytes.most_common(8), ref.bytes.most_common(8))
    # where the saving comes from: one GEMM per fused projection, and no [B·T, V] logits or their fp32 copy
    assert ours.ops["mm"] < ref.ops["mm"]
    assert "_log_softmax" in ref.ops and "_log_softmax" not in ours.ops  # no whole-vocabulary softmax pass


def test_fusing_the_projections_removes_kernels(batch):
    cfg = gpt2_widths(1)
    fused, separate = (census_of_step(Transformer(cfg, 0, fused=f), *batch, fake=True) for f in (True, False))
    # per block: q/k/v 3 -> 1 and gate/up 2 -> 1 GEMMs forward, twice as many saved in backward
    assert separate.ops["mm"] - fused.ops["mm"] == 3 * cfg.n_layers * 3
    assert fused.total_bytes < separate.total_bytes


@pytest.mark.parametrize("bf16", [True, False])
def test_a_fake_step_counts_what_a_real_step_runs(bf16):
    """The census above runs on fake tensors (no arithmetic); at narrow widths, where a real bf16 step is cheap,
    it counts exactly the ops and bytes of the real one, for our model and the reference."""
    cfg = ModelConfig.from_spec(ModelSpec(flavor="gpt2-124m", n_layers=2, d_model=128, n_heads=4, n_kv_heads=2), 2048, 32)
    g = torch.Generator().manual_seed(0)
    ids, labels = torch.randint(0, 2048, (2, 32), generator=g), torch.randint(0, 2048, (2, 32), generator=g)
    for make in (lambda: Transformer(cfg, 0, fused=True),
                 lambda: RefLlama(2048, 32, cfg.n_layers, cfg.n_heads, cfg.n_kv_heads, cfg.d_model, cfg.ffn_hidden)):
        real, fake = (census_of_step(make(), ids, labels, fake=f, bf16=bf16) for f in (False, True))
        assert fake.ops == real.ops and fake.bytes == real.bytes and fake.largest == real.largest
        assert real.total_ops > 100  # a whole forward + backward was counted


def test_the_loss_never_holds_the_logits():
    """At vocabulary 50k: no tensor the size of the [N, V] logits is ever made, the peak is a fraction of the
    logits path's, and the value and both gradients are the same within fp32 rounding, z-loss included."""
    g = torch.Generator().manual_seed(1)
    n, d = 2048, 64
    x = torch.randn(n, d, generator=g, requires_grad=True)
    w = (torch.randn(V, d, generator=g) * 0.05).requires_grad_()
    y = torch.randint(0, V, (n,), generator=g)

    def ours():
        linear_cross_entropy(x, w, y, z_loss=1e-4).backward()

    def logits_path():
        lm_loss(F.linear(x, w), y, z_loss=1e-4).backward()

    fast, slow = count(ours), count(logits_path)
    assert fast.largest < n * V * 4 / 2 <= slow.largest
    assert fast.peak < 0.3 * slow.peak, (fast.peak, slow.peak)
    for grad in (x, w):
        grad.grad = None
    ref = lm_loss(F.linear(x, w), y, z_loss=1e-4)
    ref.backward()
    gx, gw = x.grad.clone(), w.grad.clone()
    x.grad = w.grad = None
    got = linear_cross_entropy(x, w, y, z_loss=1e-4, chunk=300)  # uneven chunks
    got.backward()
    assert abs(got.item() - ref.item()) < 1e-5 * ref.item()
    assert torch.allclose(x.grad, gx, rtol=1e-4, atol=1e-7) and torch.allclose(w.grad, gw, rtol=1e-4, atol=1e-8)


def test_token_weights_and_ignored_labels():
    g = torch.Generator().manual_seed(2)
    x, w = torch.randn(40, 16, generator=g), torch.randn(50, 16, generator=g)
    y = torch.randint(0, 50, (40,), generator=g)
    y[::3] = -100
    want = F.cross_entropy(x @ w.t(), y)  # ignore_index -100: the mean over the rest
    assert torch.allclose(linear_cross_entropy(x, w, y, chunk=7), want, atol=1e-6)
    weights = torch.rand(40, generator=g)
    keep = y != -100
    ce = F.cross_entropy(x[keep] @ w.t(), y[keep], reduction="none")
    assert torch.allclose(linear_cross_entropy(x, w, y, weights, chunk=64), (ce * weights[keep]).sum(), atol=1e-5)


def test_a_second_backward_through_the_loss_is_refused():
    x = torch.randn(4, 8, requires_grad=True)
    loss = linear_cross_entropy(x, torch.randn(10, 8), torch.randint(0, 10, (4,)))
    loss.backward(retain_graph=True)
    with pytest.raises(RuntimeError, match="backward ran twice"):
        loss.backward()


FEATURES = {"mha": {}, "gqa": {"n_kv_heads": 2}, "biases": {"attn_bias": True}, "qk_norm": {"qk_norm": True},
            "sliding": {"sliding_window": 8},
            "llama3_rope": {"rope_type": "llama3", "rope_factor": 8.0, "rope_original_max_len": 16},
            "untied": {"tie_embeddings": False}}


@pytest.mark.parametrize("feature", FEATURES.values(), ids=FEATURES.keys())
def test_the_fast_path_equals_the_reference_path(feature):
    """Fused projections against the separate ones (the form LoRA trains and HF checkpoints map onto): same
    weights under the plain keys, logits within 1e-5 (fp32, CPU), same loss and gradients."""
    cfg = ModelConfig(**{"vocab_size": 97, "seq_len": 32, "n_layers": 2, "n_heads": 4, "n_kv_heads": 4,
                         "d_model": 32, "ffn_hidden": 64, **feature})
    ref, fast = Transformer(cfg, 3), Transformer(cfg, 3, fused=True)
    plain = plain_state(dict(fast.named_parameters()))
    assert plain.keys() == dict(ref.named_parameters()).keys()
    assert all(torch.equal(plain[k], p) for k, p in ref.named_parameters())
    g = torch.Generator().manual_seed(4)
    ids, labels = torch.randint(0, 97, (3, 32), generator=g), torch.randint(0, 97, (3, 32), generator=g)
    assert (ref(ids) - fast(ids)).abs().max() < 1e-5
    ref_loss, fast_loss = lm_loss(ref(ids), labels), fast(ids, labels)
    assert abs(ref_loss.item() - fast_loss.item()) < 1e-6
    ref_loss.backward()
    fast_loss.backward()
    grads = {}
    for key, p in fast.named_parameters():
        grads.update(split_values(key, p, p.grad))
    assert max((grads[k] - p.grad).abs().max().item() for k, p in ref.named_parameters()) < 1e-6


@pytest.mark.parametrize("z_loss", [0.0, 1e-3])
def test_the_compiled_chunk_math_equals_the_eager_path(z_loss):
    """`compiled=True` (what `speed.compile` turns on) runs each chunk's elementwise math through torch.compile:
    the same loss and gradients as the eager in-place path, with token weights, ignored labels, z-loss and a
    short last chunk; and under bf16 autocast the same as the eager path within bf16's rounding."""
    g = torch.Generator().manual_seed(3)
    n, d, vocab = 300, 32, 1000
    y = torch.randint(0, vocab, (n,), generator=g)
    y[::5] = -100
    weights = torch.rand(n, generator=g)
    x0, w0 = torch.randn(n, d, generator=g), torch.randn(vocab, d, generator=g) * 0.1

    def run(compiled: bool, bf16: bool, token_weights):
        x, w = x0.clone().requires_grad_(), w0.clone().requires_grad_()
        with torch.autocast("cpu", dtype=torch.bfloat16, enabled=bf16):
            loss = linear_cross_entropy(x, w, y, token_weights, z_loss, chunk=128, compiled=compiled)
        loss.backward()
        return loss.detach(), x.grad, w.grad

    for token_weights in (None, weights):
        eager, fused = run(False, False, token_weights), run(True, False, token_weights)
        for a, b in zip(eager, fused):
            assert torch.allclose(a, b, rtol=1e-5, atol=1e-7), (a - b).abs().max()
        eager, fused = run(False, True, token_weights), run(True, True, token_weights)
        for a, b in zip(eager, fused):
            assert torch.allclose(a.float(), b.float(), rtol=2e-2, atol=2e-3), (a.float() - b.float()).abs().max()


@pytest.mark.parametrize("feature", [*FEATURES.values(), {"packed": True}, {"checkpointing": True},
                                     {"per_token": True}],
                         ids=[*FEATURES.keys(), "packed_sft", "activation_checkpointing", "dpo_logprobs"])
def test_the_whole_model_graph_equals_eager(feature, monkeypatch):
    """`compile_scope: model` traces the whole forward, the chunked loss's autograd function and its loop
    included, as one graph with no break, for every architecture feature, for SFT's packed rows (segment ids,
    assistant-only weights), with activation checkpointing and for preference tuning's per-token log-probs; loss
    and gradients equal eager. Dynamo and AOT autograd only (`aot_eager`: the
    tracing is what a feature can break; inductor's code generation is the slow stage test's)."""
    from functools import partial

    from torch._dynamo.utils import counters

    from tasks.train.parallel.parallelize import compile_model

    monkeypatch.setattr(torch, "compile", partial(torch.compile, backend="aot_eager"))
    packed, checkpointing = feature.get("packed", False), feature.get("checkpointing", False)
    per_token = feature.get("per_token", False)
    cfg = ModelConfig(**{"vocab_size": 97, "seq_len": 32, "n_layers": 2, "n_heads": 4, "n_kv_heads": 4,
                         "d_model": 32, "ffn_hidden": 64,
                         **{k: v for k, v in feature.items() if k not in ("packed", "checkpointing", "per_token")}})
    g = torch.Generator().manual_seed(5)
    ids, labels = torch.randint(0, 97, (3, 32), generator=g), torch.randint(0, 97, (3, 32), generator=g)
    extra = {}
    if packed:
        extra = {"segment_ids": torch.arange(32).div(11, rounding_mode="floor").expand(3, 32),
                 "label_weights": (torch.rand(3, 32, generator=g) > 0.4).float()}

    def run(scope: str | None):
        model = Transformer(cfg, 3, checkpointing, fused=True)
        if scope:
            assert compile_model(model, scope) == scope
        if per_token:  # what DPO sums per sequence
            loss = model(ids, labels, per_token=True).sum()
        else:
            loss = model(ids, labels, z_loss=1e-3, **extra)
        loss.backward()
        return [loss.detach()] + [p.grad for p in model.parameters()]

    torch._dynamo.reset()
    counters.clear()
    eager, whole = run(None), run("model")
    assert counters["stats"]["unique_graphs"] == 1 and not counters["graph_break"], dict(counters["graph_break"])
    for a, b in zip(eager, whole):
        torch.testing.assert_close(b, a, rtol=1e-5, atol=1e-6)
