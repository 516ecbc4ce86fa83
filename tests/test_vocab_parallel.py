"""Vocab-parallel embedding and LM head under tensor parallelism (`tp_model.split_vocab`): each TP rank holds
V/tp rows of the table (and of an untied head), the forward equals the unsplit model's, and the planner counts
the table and the logits at 1/tp. The loss of a split head never gathers the logits
(`tensor_parallel.vocab_parallel_cross_entropy`, Megatron's): checked here against F.cross_entropy on gloo ranks.
tests/test_train_parallel.py trains tp 2 (vocab 256: split) against the plain reference
and compares tp 2's logits and gradients with the plain model's, tied, untied and at a vocabulary tp does not
divide (kept whole); here the split itself and the planner's count."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from specs.pretrain import ModelSpec
from tasks.train.modeling.model import LMHead, ModelConfig, Transformer
from tasks.train.parallel.tp_model import VocabParallelEmbedding, VocabParallelLMHead, apply_tensor_parallel
from tasks.train.planning.planner import estimate_memory
from tasks.train.parallel.tp_context import TPContext
from tests.helpers.train import spawn_gloo
from tests.helpers.parallel import SEED, job_spec, vocab_ce_case, vocab_ce_rank


def config(**extra) -> ModelConfig:
    cfg = ModelConfig.from_spec(job_spec({}).model, vocab_size=256, seq_len=32)
    return ModelConfig.from_dict({**cfg.to_dict(), **extra})


@pytest.mark.parametrize("tied", [True, False], ids=["tied", "untied"])
def test_a_rank_holds_its_rows_of_the_table_and_the_head(tied):
    cfg = config(tie_embeddings=tied)
    full = Transformer(cfg, SEED)
    # rank 1 of 2: building the split needs no process group (only the forward communicates)
    model = apply_tensor_parallel(Transformer(cfg, SEED), TPContext(rank=1, size=2))
    emb, head = model.layers[0], model.layers[-1]
    assert type(emb) is VocabParallelEmbedding and type(head) is VocabParallelLMHead
    torch.testing.assert_close(emb.weight, full.layers[0].weight[128:], rtol=0, atol=0)
    assert emb.weight.partition_dim == 0 and emb.weight.tensor_model_parallel
    if tied:
        assert head.tied[0] is emb and not list(head.parameters(recurse=False))
    else:
        torch.testing.assert_close(head.weight, full.layers[-1].weight[128:], rtol=0, atol=0)


def test_a_vocabulary_tp_does_not_divide_stays_whole():
    model = apply_tensor_parallel(Transformer(config(vocab_size=255), SEED), TPContext(rank=0, size=2))
    assert type(model.layers[-1]) is LMHead and model.layers[0].weight.shape == (255, 64)


def test_planner_counts_the_split_table_per_rank():
    model = ModelSpec(flavor="1b", tie_embeddings=False)
    args = dict(seq_len=2048, micro_batch=1, precision="bf16", dp=1, pp=1, zero_stage=0,
                activation_checkpointing=True)
    split, whole = (estimate_memory(model, vocab, tp=4, **args) for vocab in (128256, 128257))
    v_d = 2048 * 128256                                     # one V × d table (embedding, and the untied head)
    # 2 tables of V·d parameters at 2 bytes: 3/4 of them gone per rank (the odd vocabulary keeps them whole)
    assert whole.params_on_device - split.params_on_device == pytest.approx(2 * v_d * 3 / 4, rel=1e-3)
    # the split head's loss holds a quarter of the [s·b, V] logits in bf16 + their fp32 copy (6 B each); the
    # whole head's is the fused chunked loss (plan_memory.loss_activation_bytes: no [s·b, V] logits at all)
    whole_loss = (1 << 25) * 6 + 2048 * 2048 * 2 + 128257 * 2048 * 4
    assert whole.activations - split.activations == whole_loss - 2048 * (128256 // 4) * (2 + 4)


@pytest.mark.parametrize("world", [2, 3])
def test_vocab_parallel_cross_entropy_equals_the_whole_logits(tmp_path, world):
    """Per-token cross entropy, log-partition and their gradients from each rank's columns (gloo ranks) equal
    F.cross_entropy / logsumexp over the whole logits, in fp32 and from bf16 logits."""
    full, targets, a, b = vocab_ce_case(SEED, world)
    ranks = spawn_gloo(vocab_ce_rank, world, (SEED,), tmp_path)
    for dtype, atol in ((torch.float32, 2e-5), (torch.bfloat16, 1e-2)):
        x = full.to(dtype).float().detach().clone().requires_grad_()
        ce = F.cross_entropy(x, targets, reduction="none")
        lse = torch.logsumexp(x, dim=-1)
        ((ce * a).sum() + (lse.pow(2) * b).sum()).backward()
        grads = x.grad.to(dtype).float().chunk(world, dim=-1)
        for rank, out in enumerate(ranks):
            got = out[str(dtype)]
            torch.testing.assert_close(got["ce"], ce.detach(), rtol=1e-6, atol=atol)
            torch.testing.assert_close(got["lse"], lse.detach(), rtol=1e-6, atol=atol)
            assert got["grad"].dtype == dtype
            torch.testing.assert_close(got["grad"].float(), grads[rank], rtol=2e-2, atol=atol)
