"""Vocab-parallel embedding and LM head under tensor parallelism (`parallelize.split_vocab`): each TP rank holds
V/tp rows of the table (and of an untied head), the forward equals the unsplit model's, and the planner counts
the table at 1/tp. tests/test_train_parallel.py trains tp 2 (vocab 256: split) against the plain reference
and compares tp 2's logits and gradients with the plain model's, tied, untied and at a vocabulary tp does not
divide (kept whole); here the split itself and the planner's count."""

from __future__ import annotations

import pytest
import torch

from specs.pretrain import ModelSpec
from tasks.train.model import LMHead, ModelConfig, Transformer
from tasks.train.parallelize import VocabParallelEmbedding, VocabParallelLMHead, apply_tensor_parallel
from tasks.train.planner import estimate_memory
from tasks.train.tensor_parallel import TPContext
from tests.helpers.parallel import SEED, job_spec


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
