"""Parallel layouts on real CPU ranks (gloo): each must train exactly like the plain single-process reference.

Every engine run is compared with `tests.helpers.train.reference_run` — plain PyTorch, the same global batch
per step (dp·grad_accum micro-batches), AdamW, global-norm clipping (active: the norms here exceed 1) and
schedule — so DeepSpeed's data parallelism, ZeRO partitioning, the pipeline and our tensor-parallel layers are
all checked against one independent yardstick, and `model.safetensors` (merged from the rank shards) against its
weights. Start-up dominates: ~8–12 s per 2-rank launch, ~25–35 s for 8 ranks on 2 cores.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import torch

from specs.pretrain import PretrainJob
from tasks.train.launch import launch
from tasks.train.modeling.model import ModelConfig, Transformer
from tasks.train.inputs.synthetic import make_job
from tests.helpers.train import forward_backward, reference_run, spawn_gloo, tp_forward_check
from tasks.train.checkpointing.weights import load_weights
from tests.helpers.parallel import SEED, STEPS, job_spec


def run_and_compare(tmp_path: Path, mix_dir: Path, spec: PretrainJob, atol: float = 1e-5) -> dict:
    result = launch(make_job(tmp_path, mix_dir, spec, SEED), tmp_path / "launch")
    ref_losses, ref_state = reference_run(spec, mix_dir, SEED)
    start = result.start_step  # > 0 when resumed from a checkpoint
    assert len(result.losses) == STEPS - start
    np.testing.assert_allclose(result.losses, ref_losses[start:], rtol=0, atol=atol)
    rows = [json.loads(x) for x in (tmp_path / "out" / "metrics.jsonl").read_text().splitlines()]
    np.testing.assert_allclose([r["loss"] for r in rows if r["kind"] == "train"], ref_losses, rtol=0, atol=2e-6)
    assert ref_losses[-1] < ref_losses[0]  # it learns
    state = load_weights(tmp_path / "out")
    assert set(state) == set(ref_state)
    for k, v in ref_state.items():
        torch.testing.assert_close(state[k], v, rtol=0, atol=2e-4, msg=k)
    cfg = ModelConfig.from_dict(result.outputs["report"]["model"])
    Transformer(cfg, SEED).load_state_dict(state, strict=True)  # loads into the plain pp = tp = 1 model
    return result


EXTENDED = {"attn_bias": True, "explicit_head_dim": 16, "sliding_window": 8, "rope_type": "llama3",
            "rope_factor": 4.0, "rope_original_max_len": 8}  # Qwen2-, Qwen3- and Mistral-style options


# vocab 256 splits over tp 2 (tests/test_vocab_parallel.py); 255 does not: the table and head stay whole.
# sp: sequence parallelism (norms, residual stream and a whole table's rows on T/2 tokens per rank).
@pytest.mark.parametrize("extras", [{}, EXTENDED, {"qk_norm": True, "explicit_head_dim": 16},
                                    {"tie_embeddings": False}, {"vocab_size": 255},
                                    {"sp": True}, {"sp": True, **EXTENDED},
                                    {"sp": True, "qk_norm": True, "explicit_head_dim": 16},
                                    {"sp": True, "tie_embeddings": False}, {"sp": True, "vocab_size": 255},
                                    {"sp": True, "vocab_size": 255, "tie_embeddings": False}],
                         ids=["plain", "bias-headdim-window-rope", "qk-norm", "untied", "odd-vocab",
                              "sp", "sp-bias-headdim-window-rope", "sp-qk-norm", "sp-untied", "sp-odd-vocab", "sp-odd-vocab-untied"])
def test_tp2_forward_and_grads_equal_tp1(tmp_path, extras):
    extras = dict(extras)
    sequence = extras.pop("sp", False)
    cfg = ModelConfig.from_spec(job_spec({}).model, vocab_size=256, seq_len=32)
    cfg = ModelConfig.from_dict({**cfg.to_dict(), **extras})
    ranks = spawn_gloo(tp_forward_check, 2, (cfg.to_dict(), SEED, sequence), tmp_path)
    plain = Transformer(cfg, SEED)
    logits, loss = forward_backward(plain, cfg, SEED)
    n_logits = 2 * cfg.seq_len * cfg.vocab_size  # the [B·T, V] logits of forward_backward's batch
    for out in ranks:
        torch.testing.assert_close(out["logits"], logits, rtol=0, atol=1e-5)
        torch.testing.assert_close(out["loss"], loss.detach(), rtol=0, atol=1e-6)
        for name, p in plain.named_parameters():
            torch.testing.assert_close(out[f"grad:{name}"], p.grad, rtol=0, atol=1e-6, msg=name)
        # a split vocabulary's loss never saves the [N, V] logits or softmax, only this rank's V/2 columns
        numel, last, _ = out["saved_shapes"].T
        if cfg.vocab_size % 2 == 0:
            assert int(numel.max()) <= n_logits // 2 and (last == cfg.vocab_size // 2).any()
        else:
            assert int(numel.max()) >= n_logits  # kept whole: the probe sees the full logits


def test_sequence_parallel_keeps_half_the_tokens_between_tp_regions(tmp_path):
    """With sequence parallelism a tp 2 loss saves no full-sequence d-wide tensor: the blocks' q/k/v and gate/up
    matmuls and the split head gather inside `gather_linears` and save [B, T/2, d] (before it, 5 whole references
    per block; before the head did too, its gathered input), as do the norms and the residual stream. Without
    it every norm input and output is whole."""
    cfg = ModelConfig.from_spec(job_spec({}).model, vocab_size=256, seq_len=32)
    full, half = 2 * cfg.seq_len * cfg.d_model, cfg.seq_len * cfg.d_model
    counts = {}
    for sequence in (False, True):
        ranks = spawn_gloo(tp_forward_check, 2, (cfg.to_dict(), SEED, sequence), tmp_path / str(sequence))
        numel, last, _ = ranks[0]["saved_shapes"].T
        wide = last == cfg.d_model  # activations [B, T | T/2, d] or a matmul's [B·(T | T/2), d]
        counts[sequence] = (int((wide & (numel == full)).sum()), int((wide & (numel == half)).sum()),
                            int(numel.sum()))
    assert counts[True][0] == 0 < counts[False][0]
    assert counts[True][1] > 0 == counts[False][1]
    assert counts[True][2] < counts[False][2]


@pytest.mark.parametrize("parallel,train", [
    ({"tp": 2}, {}),
    ({"tp": 2, "dp": 2, "zero_stage": 3}, {"model": {"tie_embeddings": False}}),
    ({"tp": 2, "pp": 2}, {"activation_checkpointing": True, "z_loss": 0.05}),
], ids=["tp2", "dp2-tp2-zero3-untied", "pp2-tp2-ckpt-zloss"])
def test_sequence_parallel_trains_like_the_reference(tmp_path, mix_dir, parallel, train):
    """`parallel.sequence_parallel`: same losses and merged weights as the plain reference (a pipeline sends each
    rank's own tokens: DeepSpeed's partitioned sends are switched off, dsconfig)."""
    run_and_compare(tmp_path, mix_dir, job_spec({**parallel, "sequence_parallel": True}, **train))


def test_dp2_zero2(tmp_path, mix_dir):
    result = run_and_compare(tmp_path, mix_dir, job_spec({"dp": 2, "zero_stage": 2}))
    assert result.outputs["report"]["val_loss"] is not None


def test_pp2_tied_embeddings(tmp_path, mix_dir):
    """Two pipeline stages without ZeRO: the tied embedding/head lives on both ends (DeepSpeed TiedLayerSpec)."""
    run_and_compare(tmp_path, mix_dir, job_spec({"pp": 2}, grad_accum=2))


@pytest.mark.parametrize("parallel", [{}, {"pp": 2}, {"tp": 2}, {"pp": 2, "tp": 2}],
                         ids=["pp1", "pp2", "tp2", "pp2-tp2"])
def test_z_loss_matches_the_reference(tmp_path, mix_dir, parallel):
    """z-loss through the engine's forward (pp = 1) and the pipeline's loss_fn (pp = 2) equals the plain
    loop's, and it is really in the trained loss; with tp 2 from the split vocabulary's log-partition
    (`vocab_parallel_cross_entropy`), never the gathered logits. pp 2 × tp 2 at ZeRO-0 also checks that the
    clipping norm counts the tied table's split copy on the last stage once (it counted it twice, 2e-4 off)."""
    result = run_and_compare(tmp_path, mix_dir, job_spec(parallel, z_loss=0.05))
    plain, _ = reference_run(job_spec(parallel), mix_dir, SEED, steps=1)
    assert result.losses[0] > plain[0] + 1e-3


def test_tp2_zero1_untied_activation_checkpointing(tmp_path, mix_dir):
    spec = job_spec({"tp": 2, "zero_stage": 1}, activation_checkpointing=True, model={"tie_embeddings": False})
    run_and_compare(tmp_path, mix_dir, spec)


def test_pp2_zero1_killed_and_resumed(tmp_path, mix_dir, monkeypatch):
    """Every rank is SIGKILLed after step 3 (checkpoints every 2 steps); the rerun resumes from step 2 in fresh
    processes and ends exactly where the uninterrupted reference ends (losses, metrics.jsonl, weights)."""
    spec = job_spec({"pp": 2, "zero_stage": 1}, checkpoint_every=2)
    monkeypatch.setenv("FORGELINE_FAULT", "pretrain.step_done=3")
    with pytest.raises(RuntimeError, match="no result"):
        launch(make_job(tmp_path, mix_dir, spec, SEED), tmp_path / "launch")
    monkeypatch.delenv("FORGELINE_FAULT")
    assert sorted(p.name for p in (tmp_path / "checkpoints").glob("step*")) == ["step000000", "step000002"]
    result = run_and_compare(tmp_path, mix_dir, spec)
    assert result.resumed_from == "step000002" and result.start_step == 2


@pytest.mark.slow
def test_3d_pp2_tp2_dp2_zero1(tmp_path, mix_dir):
    """The full 3D layout on 8 ranks (~35 s, mostly start-up)."""
    result = run_and_compare(tmp_path, mix_dir, job_spec({"pp": 2, "tp": 2, "dp": 2, "zero_stage": 1},
                                                          activation_checkpointing=True))
    assert result.outputs["report"]["val_loss_by_source"].keys() == {"code", "prose"}


@pytest.mark.slow
def test_dp2_zero3(tmp_path, mix_dir):
    run_and_compare(tmp_path, mix_dir, job_spec({"dp": 2, "zero_stage": 3}, grad_accum=2))
