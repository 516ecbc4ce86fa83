"""The pretraining model and the engine's pure parts: shapes, causality, GQA, tying, parameter/FLOP accounting,
deterministic init, LR schedule, data order, DeepSpeed config, checkpoint manifests. No process groups."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest
import torch

from specs.pretrain import ModelSpec, ParallelSpec, PretrainSpec
from specs.train import OptimSpec
from tasks.train.checkpointing.checkpoint import CheckpointStore, identity_problems
from tasks.train.inputs.data import BatchPlan
from tasks.train.parallel.dsconfig import ds_config, lr_at, param_groups
from specs.architecture import ModelConfig, flops_per_token, param_count
from tasks.train.modeling.model import Transformer, repeat_kv


def cfg_of(**kw) -> ModelConfig:
    spec = ModelSpec(**{"flavor": "tiny", "d_model": 32, "n_heads": 4, "n_kv_heads": 2, "n_layers": 2,
                        "ffn_multiple_of": 16, **kw})
    return ModelConfig.from_spec(spec, vocab_size=64, seq_len=16)


def test_shapes_and_loss():
    cfg = cfg_of()
    model = Transformer(cfg, seed=0)
    ids = torch.randint(0, cfg.vocab_size, (3, cfg.seq_len))
    logits = model(ids)
    assert logits.shape == (3, cfg.seq_len, cfg.vocab_size)
    loss = model(ids, torch.randint(0, cfg.vocab_size, (3, cfg.seq_len)))
    assert loss.ndim == 0 and abs(loss.item() - math.log(cfg.vocab_size)) < 0.3  # ~uniform at init
    loss.backward()
    assert all(p.grad is not None for p in model.parameters())


def test_causal_future_tokens_do_not_change_past_logits():
    cfg = cfg_of()
    model = Transformer(cfg, seed=1).eval()
    ids = torch.randint(0, cfg.vocab_size, (2, cfg.seq_len))
    t = 7
    changed = ids.clone()
    changed[:, t + 1:] = torch.randint(0, cfg.vocab_size, (2, cfg.seq_len - t - 1))
    a, b = model(ids), model(changed)
    torch.testing.assert_close(a[:, :t + 1], b[:, :t + 1], rtol=0, atol=1e-6)
    assert not torch.allclose(a[:, t + 1:], b[:, t + 1:])


def test_repeat_kv_order():
    x = torch.arange(2 * 3 * 1 * 1).view(2, 3, 1, 1).float()  # [B, Hkv=3, T, hd]
    y = repeat_kv(x, 2)
    assert y.shape == (2, 6, 1, 1)
    assert y[0, :, 0, 0].tolist() == [0, 0, 1, 1, 2, 2]  # kv head j serves query heads 2j, 2j+1


def test_gqa_equals_mha_with_duplicated_kv_heads():
    """A GQA model equals the multi-head model whose k/v projections repeat each kv head for its query group."""
    gqa_cfg, mha_cfg = cfg_of(n_kv_heads=2), cfg_of(n_kv_heads=4)
    gqa, mha = Transformer(gqa_cfg, seed=3).eval(), Transformer(mha_cfg, seed=3).eval()
    state = gqa.state_dict()
    hd = gqa_cfg.head_dim
    for k, v in list(state.items()):
        if k.endswith(("attn.wk.weight", "attn.wv.weight")):  # [Hkv·hd, d] -> [H·hd, d]
            state[k] = v.view(2, hd, -1).repeat_interleave(2, dim=0).reshape(4 * hd, -1)
    mha.load_state_dict(state)
    ids = torch.randint(0, 64, (2, 16))
    torch.testing.assert_close(gqa(ids), mha(ids), rtol=1e-5, atol=1e-5)


def test_tied_and_untied_head():
    tied = Transformer(cfg_of(), seed=0)
    head, emb = tied.layers[-1], tied.layers[0]
    assert head.tied[0] is emb and not any(n.startswith(f"layers.{len(tied.layers) - 1}.") for n in tied.state_dict())
    untied = Transformer(cfg_of(tie_embeddings=False), seed=0)
    assert untied.layers[-1].weight.data_ptr() != untied.layers[0].weight.data_ptr()
    # gradients of both uses (input embedding and output projection) reach the one tied tensor
    ids = torch.randint(0, 64, (1, 16))
    tied(ids, ids).backward()
    assert emb.weight.grad is not None and emb.weight.grad.abs().sum() > 0


@pytest.mark.parametrize("kw", [{}, {"tie_embeddings": False}, {"n_kv_heads": 4}, {"n_kv_heads": 1}])
def test_param_count_matches_module(kw):
    cfg = cfg_of(**kw)
    model = Transformer(cfg, seed=0)
    assert param_count(cfg) == sum(p.numel() for p in model.parameters())


# Counted by hand for cfg_of() (V 64, T 16, d 32, L 2, H 4 of head_dim 8, ffn 96: int(8·32/3) = 85 rounded up to
# a multiple of 16), as (params, FLOPs per token). Per block: wq 32·32 = 1024, wo 1024, wk = wv = 32·(kv heads·8);
# gate 32·96 = 3072, up 3072, down 96·32 = 3072; norms 2·32 = 64. Embedding 64·32 = 2048, final norm 32.
# FLOPs = 6·N + 12·L·d·T with N = 2 blocks' matrices + the 64·32 head (tied or not: its matmul runs) and
# 12·2·32·16 = 12,288 for attention scores and values.
HAND_COUNTS = [
    # GQA, 2 kv heads: wk = wv = 32·16 = 512; matrices 1024 + 512 + 512 + 1024 + 3·3072 = 12,288 per block.
    # params 2048 + 2·(12,288 + 64) + 32 = 26,784; N = 2·12,288 + 2048 = 26,624; 6·26,624 + 12,288 = 172,032
    ({}, 26_784, 172_032),
    # untied: + the 64·32 head = 28,832 params; FLOPs unchanged (the tied head's matmul was already counted)
    ({"tie_embeddings": False}, 28_832, 172_032),
    # MHA, 4 kv heads: wk = wv = 32·32 = 1024; matrices 4·1024 + 9216 = 13,312 per block.
    # params 2048 + 2·(13,312 + 64) + 32 = 28,832; N = 2·13,312 + 2048 = 28,672; 6·28,672 + 12,288 = 184,320
    ({"n_kv_heads": 4}, 28_832, 184_320),
    # MQA, 1 kv head: wk = wv = 32·8 = 256; matrices 1024 + 256 + 256 + 1024 + 9216 = 11,776 per block.
    # params 2048 + 2·(11,776 + 64) + 32 = 25,760; N = 2·11,776 + 2048 = 25,600; 6·25,600 + 12,288 = 165,888
    ({"n_kv_heads": 1}, 25_760, 165_888),
]


@pytest.mark.parametrize("kw, params, flops", HAND_COUNTS)
def test_param_count_and_flops_per_token_by_hand(kw, params, flops):
    cfg = cfg_of(**kw)
    assert cfg.ffn_hidden == 96
    assert param_count(cfg) == params
    assert flops_per_token(cfg) == flops


def test_flops_per_token_of_the_tiny_flavor_by_hand():
    # tiny: V 8192, T 256, d 128, L 4, 4 heads of 32, 2 kv heads, ffn int(8·128/3) = 341 → 384 (multiple of 64).
    # Per block: wq = wo = 128·128 = 16,384, wk = wv = 128·64 = 8192, gate = up = down = 128·384 = 49,152:
    # 2·16,384 + 2·8192 + 3·49,152 = 196,608. N = 4·196,608 + 8192·128 (head) = 786,432 + 1,048,576 = 1,835,008.
    # 6·1,835,008 + 12·4·128·256 = 11,010,048 + 1,572,864 = 12,582,912
    cfg = ModelConfig.from_spec(ModelSpec(), vocab_size=8192, seq_len=256)
    assert cfg.ffn_hidden == 384
    assert flops_per_token(cfg) == 12_582_912


def test_init_is_a_function_of_seed_and_name():
    a, b, c = Transformer(cfg_of(), 5), Transformer(cfg_of(), 5), Transformer(cfg_of(), 6)
    for (k, va), vb, vc in zip(a.state_dict().items(), b.state_dict().values(), c.state_dict().values()):
        assert torch.equal(va, vb), k
        if va.dim() >= 2:
            assert not torch.equal(va, vc), k


def test_lr_schedule():
    o = OptimSpec(lr=1e-3, min_lr=1e-4, warmup_steps=10)
    assert lr_at(0, o, 100) == pytest.approx(1e-3 / 11)
    assert lr_at(9, o, 100) == pytest.approx(1e-3 * 10 / 11)
    assert lr_at(10, o, 100) == pytest.approx(1e-3)
    assert lr_at(55, o, 100) == pytest.approx(5.5e-4)
    assert lr_at(100, o, 100) == pytest.approx(1e-4) and lr_at(500, o, 100) == pytest.approx(1e-4)


def test_weight_decay_only_on_matrices():
    groups = param_groups(Transformer(cfg_of(), 0), 0.1)
    assert all(p.dim() >= 2 for p in groups[0]["params"]) and groups[0]["weight_decay"] == 0.1
    assert all(p.dim() == 1 for p in groups[1]["params"]) and groups[1]["weight_decay"] == 0.0


def test_batch_plan_is_pure_and_layout_independent():
    plan = BatchPlan(seed=7, n=50, micro_batch=4, grad_accum=2, dp=3)
    again = BatchPlan(seed=7, n=50, micro_batch=4, grad_accum=2, dp=3)
    assert np.array_equal(plan.positions(5), again.positions(5))
    # dp ranks' micro-batches, in rank order, are the dp = 1 run's micro-batches with grad_accum·dp
    single = BatchPlan(seed=7, n=50, micro_batch=4, grad_accum=6, dp=1)
    for step in (0, 3, 9):  # step 9 crosses into the third epoch
        split = [m for r in range(3) for m in plan.micro_indexes(step, r)]
        assert all(np.array_equal(a, b) for a, b in zip(split, single.micro_indexes(step, 0)))
    # each epoch is a permutation: the first n positions cover every sequence once
    stream = np.concatenate([plan.positions(s) for s in range(3)])[:50]
    assert sorted(stream.tolist()) == list(range(50))
    assert not np.array_equal(plan.positions(0), BatchPlan(8, 50, 4, 2, 3).positions(0))


def test_ds_config_from_spec():
    train = PretrainSpec(micro_batch_size=4, grad_accum=3, precision="bf16")
    cfg = ds_config(train, ParallelSpec(dp=2, pp=2, zero_stage=1))
    assert cfg["train_batch_size"] == 24 and cfg["gradient_accumulation_steps"] == 3
    assert cfg["zero_optimization"]["stage"] == 1 and cfg["bf16"]["enabled"] and not cfg["fp16"]["enabled"]
    assert cfg["gradient_clipping"] == 1.0 and "optimizer" not in cfg and "scheduler" not in cfg
    fp16 = ds_config(PretrainSpec(precision="fp16"), ParallelSpec())
    assert fp16["fp16"]["enabled"] and fp16["fp16"]["loss_scale"] == 0  # dynamic loss scaling


def test_identity_problems_name_the_field():
    a = {"model": {"d_model": 128, "n_layers": 4}, "parallel": {"dp": 1, "tp": 1}, "seq_len": 256, "seed": 1}
    b = {"model": {"d_model": 64, "n_layers": 4}, "parallel": {"dp": 1, "tp": 2}, "seq_len": 256, "seed": 2}
    problems = identity_problems(a, b)
    assert any(p.startswith("model.d_model: checkpoint has 128, this run has 64") for p in problems)
    assert any(p.startswith("seed:") for p in problems) and len(problems) == 2  # the layout may change (elastic)
    assert identity_problems(a, json.loads(json.dumps(a))) == []


def test_checkpoint_manifest_verifies_and_detects_corruption(tmp_path):
    store = CheckpointStore(tmp_path)
    for step in (2, 4):
        tag = f"step{step:06d}"
        (tmp_path / tag).mkdir()
        (tmp_path / tag / "state.bin").write_bytes(bytes(range(256)) * 4)
        store.write_manifest(tag, step, {"seed": 1}, {})
        store.publish(tag)
    (tmp_path / "step000006").mkdir()  # a save that never finished: no manifest
    assert store.find_resumable()[0] == "step000004"
    data = bytearray((tmp_path / "step000004" / "state.bin").read_bytes())
    data[100] ^= 0xFF
    (tmp_path / "step000004" / "state.bin").write_bytes(bytes(data))
    tag, manifest, warnings = store.find_resumable()
    assert tag == "step000002" and manifest["step"] == 2
    assert warnings == ["checkpoint step000006 skipped: no manifest (the save did not finish)",
                        "checkpoint step000004 skipped: state.bin does not match its checksum"]
    assert (tmp_path / "latest").read_text() == "step000004"
    assert store.prune(1) == ["step000004", "step000002"]


def test_z_loss_by_hand():
    """Two tokens: logits [0, 0] (label 0) and [ln 3, 0] (label 1). log Z = ln 2 and ln 4; cross entropies ln 2
    and ln 4 - 0; mean CE = 1.5·ln 2; mean (log Z)² = (ln²2 + 4·ln²2) / 2 = 2.5·ln²2."""
    from tasks.train.modeling.model import lm_loss

    logits = torch.tensor([[[0.0, 0.0], [math.log(3.0), 0.0]]])
    labels = torch.tensor([[0, 1]])
    ln2 = math.log(2.0)
    assert float(lm_loss(logits, labels)) == pytest.approx(1.5 * ln2, abs=1e-6)
    assert float(lm_loss(logits, labels, z_loss=0.1)) == pytest.approx(1.5 * ln2 + 0.1 * 2.5 * ln2 ** 2, abs=1e-6)


def test_training_after_generation_under_inference_mode():
    """The RoPE tables are cached per shape; the first caller may be generation under inference_mode. Training
    with the same shape afterwards must still build a graph (an inference tensor in the cache cannot be saved
    for backward)."""
    cfg = cfg_of(d_model=48, n_heads=3, n_kv_heads=3)  # a head size no other test uses: this test fills the cache
    model = Transformer(cfg, seed=0)
    ids = torch.randint(0, cfg.vocab_size, (2, cfg.seq_len))
    with torch.inference_mode():
        model(ids)
    loss = model(ids, ids)
    loss.backward()
    assert all(p.grad is not None for p in model.parameters())
