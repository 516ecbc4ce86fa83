"""Tied embeddings under a pipeline: DeepSpeed's PipelineModule keeps the table on the first stage (embedding)
and the last (head) — TiedLayerSpec — and all-reduces the two copies' gradients every step
(pipe/engine.py `_exec_reduce_tied_grads`, in the schedule's epilogue after the last backward: nothing to hide
behind). The step-time model had left that traffic out."""

from __future__ import annotations

import pytest

from specs.pretrain import ModelSpec
from tasks.train.planning.cluster import ClusterSpec
from tasks.train.planning.plan_cost import describe
from tasks.train.planning.planner import search

V, D = 128256, 2048
MODEL = dict(flavor="1b", n_layers=16, d_model=D, n_heads=16, n_kv_heads=8, ffn_multiple_of=256)


def chosen(tie: bool, cluster: ClusterSpec, **fixed):
    fixed = {"micro_batch": 1, "checkpointing": "full", **fixed}
    return search(ModelSpec(**MODEL, tie_embeddings=tie), cluster, vocab_size=V, seq_len=4096, global_batch=64,
                  fixed=fixed).chosen


@pytest.mark.parametrize("tp, mode, grad_bytes", [(1, "auto", 4), (2, "auto", 4), (1, "sections", 2)])
def test_a_tied_pipeline_pays_one_all_reduce_of_the_table_gradient_per_step(tp, mode, grad_bytes):
    # 2 nodes of 8 H100s: the pipeline's boundary crosses InfiniBand NDR, 50 GB/s per GPU (one HCA each)
    cluster = ClusterSpec(nodes=2, gpus_per_node=8, device="h100-sxm", mixed_precision=mode)
    layout = {"dp": 16 // (2 * tp), "tp": tp, "pp": 2, "zero_stage": 1}
    tied, untied = chosen(True, cluster, **layout), chosen(False, cluster, **layout)
    # each rank holds V/tp rows (tp divides V); fp32 gradients under torch_autocast, the weights' bf16 at ZeRO-1
    # with the bf16 section. A 2-rank ring all-reduce moves 2·(2−1)/2 = 1× the bytes, plus NCCL's latency:
    # 8.4 µs base + 2 ring steps of 14 µs over the network.
    seconds = V // tp * D * grad_bytes / 50e9 + 8.4e-6 + 2 * 14e-6
    assert tied.cost.tied_comm_s == pytest.approx(seconds, rel=1e-9)
    assert untied.cost.tied_comm_s == 0
    # 1F1B at pp 2: m + 1 slots of one micro-batch's work, then the exposed gradient traffic, then this
    c, m = tied.cost, tied.grad_accum
    slot = (c.compute_s + c.tp_comm_s + c.pp_comm_s) / m
    assert c.bubble_s == pytest.approx(slot)
    assert c.step_s == pytest.approx((m + 1) * slot + c.dp_exposed_s + seconds, rel=1e-9)
    assert "tied-embedding all-reduce" in describe(c)


def test_no_pipeline_no_tied_traffic():
    cluster = ClusterSpec(nodes=1, gpus_per_node=8, device="h100-sxm")
    assert chosen(True, cluster, dp=8, tp=1, pp=1).cost.tied_comm_s == 0
