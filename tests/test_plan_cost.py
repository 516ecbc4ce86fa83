"""The step-time model (tasks/train/planning/plan_cost.py): collective arithmetic by hand, link choice by rank order,
ZeRO traffic ratios, the 1F1B bubble, and what changes with the network."""

from __future__ import annotations

import pytest

from tasks.train.planning.plan_cost import (ASSUMED_MFU, ETHERNET_100G_PER_NODE, INFINIBAND_HDR_PER_GPU, checkpoint_mode,
                                   HOST_S_PER_BLOCK, INFINIBAND_NDR_PER_GPU, MAX_OVERLAP, PCIE_GEN4, describe,
                                   estimate_step, links_of, ring_all_reduce_s, ring_latency_s, tree_all_reduce_s)
from tasks.train.planning.planner import ClusterSpec


def cluster(**kw):
    return ClusterSpec(**{"nodes": 2, "gpus_per_node": 8, "memory_gb": 80, "device": "a100", **kw})


# A toy shape whose numbers are easy by hand: 1e10 FLOPs per token, 8 layers, d 1000, bf16 (8 ms of A100 work per
# block and micro-batch: never host-bound, see test_a_small_model_is_paced_by_the_host).
SHAPE = dict(flops_per_token=10**10, n_layers=8, d_model=1000, act_bytes=2, seq_len=1000, micro_batch=1)
PEAK_A100 = 312e12 * ASSUMED_MFU


def step(c, **kw):
    args = {**SHAPE, "grad_bytes_on_device": 2 * 10**9, "dp": 1, "tp": 1, "pp": 1, "zero_stage": 0,
            "grad_accum": 1, "activation_checkpointing": False, **kw}
    return estimate_step(c, **args)


def test_ring_all_reduce_bandwidth_term():
    assert ring_all_reduce_s(1e9, 4, 1e9) == pytest.approx(1.5)        # 2·3/4 · 1 GB / 1 GB/s
    assert ring_all_reduce_s(1e9, 2, 1e9) == pytest.approx(1.0)
    assert ring_all_reduce_s(1e9, 1, 1e9) == 0.0 and ring_all_reduce_s(0, 8, 1e9) == 0.0
    assert ring_all_reduce_s(1e9, 2, 0.0) == float("inf")               # no link between nodes at all


def test_links_follow_rank_order_and_network():
    c = cluster()
    ln = links_of(c, dp=2, tp=4, pp=2)          # a stage = 8 ranks = one node: dp stays inside it
    assert (ln.tp, ln.dp, ln.pp) == ("nvlink", "nvlink", "infiniband")
    assert ln.tp_bw == 300e9 and ln.pp_bw == INFINIBAND_HDR_PER_GPU     # A100: NVLink 3, HDR
    ln = links_of(c, dp=4, tp=4, pp=1)          # tp·dp = 16 > 8: the data group crosses nodes
    assert ln.dp == "infiniband" and ln.tp == "nvlink" and ln.pp == "-"
    assert links_of(cluster(device="h100-sxm"), 4, 4, 1).dp_bw == INFINIBAND_NDR_PER_GPU
    assert links_of(cluster(inter_node="ethernet"), 4, 4, 1).dp_bw == ETHERNET_100G_PER_NODE / 8
    assert links_of(cluster(intra_node="pcie"), 2, 4, 2).tp_bw == PCIE_GEN4
    one_node = ClusterSpec(nodes=1, gpus_per_node=8, device="a100", inter_node="none")
    assert links_of(one_node, 1, 1, 8).pp == "nvlink"


def test_compute_tensor_and_pipeline_terms_by_hand():
    c = cluster()
    t_mb = 1e10 * 1000 / PEAK_A100                         # 1000 tokens × 1e10 FLOPs on one device
    plain = step(c)
    assert plain.compute_s == pytest.approx(t_mb) and plain.step_s == pytest.approx(t_mb)
    assert plain.tokens == 1000
    act = 1000 * 1000 * 2                                  # B·T·d in bf16
    tp4 = step(c, tp=4)
    # 4 all-reduces × 8 layers, ring over 4 on NVLink 3, each also 8.4 µs + 2·3 steps × 3.4 µs of latency
    tp_comm = 4 * 8 * (2 * 3 / 4 * act / 300e9 + 8.4e-6 + 6 * 3.4e-6)
    assert tp4.tp_comm_s == pytest.approx(tp_comm)
    assert tp4.step_s == pytest.approx(t_mb / 4 + tp_comm)
    ckpt = step(c, tp=4, activation_checkpointing=True)    # forward recomputed: 4/3 compute, 6 all-reduces
    assert ckpt.compute_s == pytest.approx(t_mb / 4 * 4 / 3) and ckpt.tp_comm_s == pytest.approx(tp_comm * 1.5)
    pp4 = step(c, pp=4, grad_accum=12)                     # dp 1: the step is (m + pp − 1) slots
    slot = t_mb / 4 + 2 * (act / INFINIBAND_HDR_PER_GPU + 8.4e-6 + 14e-6)   # a send each way: one network step
    assert pp4.step_s == pytest.approx(15 * slot)
    assert pp4.bubble_s / pp4.step_s == pytest.approx(3 / 15)   # (pp−1)/(m+pp−1)


def test_zero_traffic_as_deepspeed_sends_it():
    """DeepSpeed 0.19.8 under forgeline's config: ZeRO-0 all-reduces once per step after the last backward
    (exposed); ZeRO-1 all-reduces every bucket (`use_multi_rank_bucket_allreduce`, not a reduce-scatter) after the
    last backward and all-gathers the updated weights after the step: 3 ring passes, exposed; ZeRO-2 the same
    all-reduce every micro-batch from its hooks, overlapped with backward (overlap_comm on GPUs), and the gather
    once; ZeRO-3 gathers twice and reduce-scatters once per micro-batch."""
    c = cluster()
    kw = dict(dp=16, tp=1, grad_bytes_on_device=4 * 10**9)     # crosses nodes: HDR 25 GB/s
    # 4 GB of bf16 gradients = 4 buckets of 5e8 elements; each pass (reduce-scatter or all-gather) over 16 ranks
    # pays 8.4 µs + 15 ring steps per bucket: the one that crosses to the other node at 14 µs, the 14 inside a
    # node at NVLink's 3.4 µs (NCCL's ring model). ZeRO-3 gathers per block: 8 collectives per pass. The
    # all-reduces could take NCCL's tree, slower here on bandwidth (4 GB at 0.46 × 25 GB/s).
    lat = 8.4e-6 + 1 * 14e-6 + 14 * 3.4e-6
    ring = ring_all_reduce_s(4e9, 16, INFINIBAND_HDR_PER_GPU)
    allreduce, gather = ring + 2 * 4 * lat, ring / 2 + 4 * lat
    z0, z1, z2, z3 = (step(c, zero_stage=z, **kw) for z in range(4))
    assert z0.dp_comm_s == pytest.approx(allreduce) and z0.dp_exposed_s == z0.dp_comm_s
    assert z1.dp_comm_s == pytest.approx(allreduce + gather) and z1.dp_exposed_s == z1.dp_comm_s
    assert z2.dp_comm_s == pytest.approx(allreduce + gather)         # m = 1: one all-reduce, one gather
    assert z3.dp_comm_s == pytest.approx(1.5 * ring + 3 * 8 * lat)   # + the weights' second all-gather
    # ZeRO-2's all-reduce hides behind backward, its gather does not; far more traffic than backward here.
    backward = 2 / 3 * z2.compute_s
    assert z2.dp_exposed_s == pytest.approx(allreduce - backward + gather)
    assert z0.step_s == pytest.approx(z0.compute_s + z0.dp_exposed_s)
    # Tiny traffic: at most MAX_OVERLAP of ZeRO-2's all-reduce hides; ZeRO-0's none of it.
    small = [step(c, zero_stage=z, dp=16, grad_bytes_on_device=10**6) for z in (0, 2)]
    small_gather = ring_all_reduce_s(10**6, 16, INFINIBAND_HDR_PER_GPU) / 2 + lat
    assert small[1].dp_exposed_s == pytest.approx((1 - MAX_OVERLAP) * (small[1].dp_comm_s - small_gather)
                                                  + small_gather)
    assert small[0].dp_exposed_s == small[0].dp_comm_s
    # ZeRO-2 and ZeRO-3 repeat their traffic every micro-batch (ZeRO-2's gather once); ZeRO-0/1 once per step.
    assert step(c, zero_stage=3, grad_accum=4, **kw).dp_comm_s == pytest.approx(4 * z3.dp_comm_s)
    assert step(c, zero_stage=2, grad_accum=4, **kw).dp_comm_s == pytest.approx(4 * allreduce + gather)
    assert step(c, zero_stage=1, grad_accum=4, **kw).dp_comm_s == pytest.approx(z1.dp_comm_s)


def test_a_small_model_is_paced_by_the_host():
    """The host queues kernels ahead of the GPU: where its work per block (HOST_S_PER_BLOCK, measured by
    benchmarks/zero_host_overhead.py) outlasts the GPU's, a micro-batch takes the host's time, longer at the higher
    ZeRO stages (hooks, gathers and releases around every block); a model with real work per block is not slowed."""
    c = cluster()
    small = dict(flops_per_token=10**8, dp=2, grad_bytes_on_device=2 * 10**6)   # 0.08 ms of A100 work per block
    z0, z3 = (step(c, zero_stage=z, **small) for z in (0, 3))
    assert z0.compute_s == pytest.approx(1e8 * 1000 / PEAK_A100)                 # the GPU's work is unchanged
    assert z0.host_bound and z0.host_s == pytest.approx(8 * HOST_S_PER_BLOCK[0])
    assert z0.step_s == pytest.approx(8 * HOST_S_PER_BLOCK[0] + z0.dp_exposed_s)
    assert z3.step_s > z0.step_s + 8 * (HOST_S_PER_BLOCK[3] - HOST_S_PER_BLOCK[0]) * 0.99
    assert "host-bound" in describe(z0)
    pp2 = step(c, flops_per_token=10**8, pp=2, grad_accum=4)                     # a stage's 4 blocks per slot
    assert pp2.host_s == pytest.approx(4 * HOST_S_PER_BLOCK[0]) and pp2.host_bound
    big = step(c, zero_stage=3, dp=2)                                           # 8 ms of GPU work per block
    assert not big.host_bound and big.step_s == pytest.approx(big.compute_s + big.dp_exposed_s)
    assert "host-bound" not in describe(big)


def test_latency_prices_wide_zero3_gathers():
    """ZeRO-3 over 2048 ranks: each of a block's 3 collectives per micro-batch walks 2047 network steps, so
    even a tiny model pays 3 × 8 blocks × (8.4 µs + 2047 × 14 µs) ≈ 0.69 s per micro-batch on the wire."""
    c = ClusterSpec(nodes=2048, gpus_per_node=1, memory_gb=80, device="a100")
    tiny = step(c, dp=2048, zero_stage=3, grad_bytes_on_device=1000)
    assert tiny.dp_comm_s == pytest.approx(3 * 8 * (8.4e-6 + 2047 * 14e-6), rel=1e-3)
    # ZeRO-1: one bucket's all-reduce (NCCL's tree: 2 · log2(2048) hops of 28 µs) and one ring all-gather
    assert step(c, dp=2048, zero_stage=1, grad_bytes_on_device=1000).dp_comm_s == pytest.approx(
        2 * 11 * 28e-6 + (8.4e-6 + 2047 * 14e-6), rel=1e-3)


def test_the_network_matters_only_where_traffic_crosses_nodes():
    ib, eth = cluster(), cluster(inter_node="ethernet")
    cross = dict(dp=16, zero_stage=1)
    assert step(eth, **cross).step_s > 2 * step(ib, **cross).step_s
    inside = dict(dp=2, tp=4, pp=2, grad_accum=8)           # only the pipeline crosses: a smaller penalty
    assert step(eth, **inside).step_s > step(ib, **inside).step_s
    assert step(eth, dp=1, tp=8).step_s == step(ib, dp=1, tp=8).step_s


def test_no_estimate_without_a_peak():
    assert step(ClusterSpec(device="cpu", inter_node="none", intra_node="shm")) is None
    assert step(ClusterSpec(device="some-npu")) is None


def test_the_head_paces_the_last_pipeline_stage():
    """The output head runs on the last stage: with a pipeline the slot is the larger of the first stage's
    blocks and the last stage's blocks plus the head; without one the head is part of the one stage."""
    c = cluster()
    head = 2 * 10**9                                       # a fifth of the FLOPs per token
    block = (10**10 - head) / 8
    flat = step(c, head_flops_per_token=head)
    assert flat.compute_s == step(c).compute_s             # pp 1: the same total
    pp2 = step(c, pp=2, grad_accum=4, head_flops_per_token=head)
    last_stage = (4 * block + head) * 1000 / PEAK_A100     # 4 blocks + the head, one micro-batch of 1000 tokens
    assert pp2.compute_s == pytest.approx(4 * last_stage)
    assert pp2.compute_s > step(c, pp=2, grad_accum=4).compute_s


def test_selective_recomputes_every_other_block_and_sequence_parallel_regathers():
    c = cluster()
    t_mb = 1e10 * 1000 / PEAK_A100
    sel = step(c, activation_checkpointing="selective")    # 4 of 8 blocks run their forward again
    assert sel.compute_s == pytest.approx(t_mb * (1 + 0.5 / 3))
    assert checkpoint_mode(True) == "full" and checkpoint_mode(False) == "off"
    with pytest.raises(ValueError):
        checkpoint_mode("some")
    base, sp = step(c, tp=4), step(c, tp=4, sequence_parallel=True)
    assert sp.tp_comm_s == pytest.approx(base.tp_comm_s * 5 / 4)  # + one all-reduce's worth per block
    sel_tp = step(c, tp=4, activation_checkpointing="selective")
    assert sel_tp.tp_comm_s == pytest.approx(base.tp_comm_s * (4 * 8 + 2 * 4) / (4 * 8))


def test_a_given_peak_prices_a_device_the_table_lacks():
    cpu = ClusterSpec(device="cpu", inter_node="none", intra_node="shm", peak_tflops=0.1)
    est = step(cpu)
    assert est is not None and est.compute_s == pytest.approx(1e10 * 1000 / (0.1e12 * ASSUMED_MFU))


def test_a_cross_node_ring_pays_the_network_only_where_it_crosses():
    """NCCL's ring model (src/graph/tuning.cc): of a gather's n − 1 steps over 8 ranks per node, n_nodes − 1 cross
    a node at the network's 14 µs and the rest stay on NVLink (3.4 µs); one rank per node: every step crosses."""
    per_node = links_of(ClusterSpec(nodes=256, gpus_per_node=8, memory_gb=80, device="h100-sxm"), 2048, 1, 1)
    assert (per_node.dp, per_node.dp_nodes, per_node.intra) == ("infiniband", 256, "nvlink")
    got = ring_latency_s(2048, per_node.dp, 1, 1, per_node.dp_nodes, per_node.intra)
    assert got == pytest.approx(8.4e-6 + 255 * 14e-6 + (2047 - 255) * 3.4e-6)
    alone = links_of(ClusterSpec(nodes=2048, gpus_per_node=1, memory_gb=80, device="h100-sxm"), 2048, 1, 1)
    assert ring_latency_s(2048, alone.dp, 1, 1, alone.dp_nodes, alone.intra) == pytest.approx(8.4e-6 + 2047 * 14e-6)
    assert links_of(cluster(), 4, 2, 1).dp_nodes == 1 and links_of(cluster(), 8, 2, 1).dp_nodes == 2  # tp·dp / 8
    # an all-reduce over 2 nodes: 2·n_nodes of its 2·(n − 1) steps cross (NCCL), never more than there are
    assert ring_latency_s(16, "infiniband", 2, 1, 2, "nvlink") == pytest.approx(8.4e-6 + 4 * 14e-6 + 26 * 3.4e-6)
    assert ring_latency_s(2, "infiniband", 2, 1, 2, "nvlink") == pytest.approx(8.4e-6 + 2 * 14e-6)


def test_zero0_all_reduce_takes_the_tree_where_nccl_would():
    """4096 H100s on 512 nodes: a 1 GB bucket's ring all-reduce pays 2 × 8191 steps of latency (~19 ms each
    pass) on top of its bandwidth; NCCL's tree, 2·(7 + 9) hops of 28 µs at 0.46 of the bandwidth, is faster, and
    ZeRO-0's and ZeRO-1's all-reduces (DeepSpeed's `all_reduce`) are priced by it, ZeRO-1's all-gather of the
    weights by the ring (NCCL has no tree for it); on 2 nodes the ring wins on bandwidth and ZeRO-0 stays the ring."""
    big = ClusterSpec(nodes=512, gpus_per_node=8, memory_gb=80, device="h100-sxm")
    ln = links_of(big, 4096, 1, 1)
    nbytes = 5e8 * 2
    ring = ring_all_reduce_s(nbytes, 4096, ln.dp_bw) + 2 * ring_latency_s(4096, ln.dp, 1, 1, 512, "nvlink")
    tree = tree_all_reduce_s(nbytes, 4096, 512, ln.dp_bw)
    assert tree == pytest.approx(2 * (7 + 9) * 28e-6 + nbytes / (0.46 * ln.dp_bw))
    assert tree < 0.6 * ring
    z0, z1 = (step(big, dp=4096, zero_stage=z, grad_bytes_on_device=int(nbytes)) for z in (0, 1))
    gather = ring / 2
    assert z0.dp_comm_s == pytest.approx(tree) and z1.dp_comm_s == pytest.approx(tree + gather)
    small = step(cluster(), dp=16, zero_stage=0, grad_bytes_on_device=4 * 10**9)
    assert small.dp_comm_s < tree_all_reduce_s(4e9, 16, 2, INFINIBAND_HDR_PER_GPU, 4)
