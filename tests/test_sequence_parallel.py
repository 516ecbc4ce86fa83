"""Sequence parallelism's `gather_linears` (tasks/train/parallel/sequence_parallel.py) on real gloo ranks: it equals the
plain linears on the full input, and a sequence-parallel block no longer saves the full-sequence input of its
column-parallel linears (only this rank's T/tp tokens). The model-level equalities (logits, gradients, training
against the plain reference) are in tests/test_train_parallel.py."""

from __future__ import annotations

import pytest
import torch

from tasks.train.modeling.model import ModelConfig
from tasks.train.parallel.sequence_parallel import gather_linears
from tasks.train.parallel.tp_context import NO_TP, TPContext
from tests.helpers.train import spawn_gloo
from tests.helpers.parallel import SEED, job_spec
from tests.helpers.sequence_parallel import block_saved_rank, gather_linears_rank


def test_gather_linears_equals_the_plain_linears_on_the_full_input(tmp_path):
    for r, out in enumerate(spawn_gloo(gather_linears_rank, 2, (SEED,), tmp_path)):
        for key in ("outs", "grad_w", "grad_b"):
            for got, want in zip(out[key], out["ref" if key == "outs" else f"ref_{key}"]):
                torch.testing.assert_close(got, want, rtol=0, atol=1e-12, msg=f"rank {r} {key}")
        torch.testing.assert_close(out["grad_x"], out["ref_grad_x"], rtol=0, atol=1e-12, msg=f"rank {r} dx")


def test_gather_linears_without_sequence_parallelism():
    x, w = torch.randn(2, 4, 8), torch.randn(6, 8)
    assert torch.equal(gather_linears(x, [w], NO_TP)[0], torch.nn.functional.linear(x, w))
    with pytest.raises(ValueError, match="without sequence parallelism"):
        gather_linears(x, [w], TPContext(0, 2, None, sequence=False))


def test_block_saves_no_full_sequence_input_of_its_column_linears(tmp_path):
    """A tp 2 sequence-parallel block's saved [B, ·, d] activations are all [B, T/2, d] (the local input its
    norms and gather_linears keep): before gather_linears the q/k/v and gate/up matmuls saved the norms'
    gathered [B, T, d] outputs. Fails on the gather-in-the-norm code."""
    cfg = ModelConfig.from_spec(job_spec({}).model, vocab_size=256, seq_len=32)
    for r, out in enumerate(spawn_gloo(block_saved_rank, 2, (cfg.to_dict(), SEED), tmp_path)):
        numel, last = out["shapes"].T
        wide = last == cfg.d_model  # [B, ·, d]: the residual stream and the norms' outputs
        assert int((wide & (numel == cfg.seq_len * cfg.d_model)).sum()) == 0, f"rank {r}: a [B, T, d] is saved"
        assert int((wide & (numel == cfg.seq_len // 2 * cfg.d_model)).sum()) > 0
