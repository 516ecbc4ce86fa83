"""Step-time model of a parallel layout: compute at an assumed MFU plus the communication each axis exposes.

The planner (tasks/train/planning/planner.py) sizes every dp × tp × pp × ZeRO layout's memory; this module estimates how
long one optimizer step of it takes on the described cluster, so the planner can rank the layouts that fit by
time per token instead of by a fixed preference. It is an analytic model in the spirit of Narayanan et al. 2021
("Efficient Large-Scale Language Model Training on GPU Clusters Using Megatron-LM", §3): ring collectives at a
per-link bandwidth, a 1F1B pipeline bubble, gradient traffic partly hidden behind backward. Every constant is
named here with its source; only the host's per-block time (HOST_S_PER_BLOCK) is measured here. Pure Python, no
torch.
"""

from __future__ import annotations

import math

from dataclasses import asdict, dataclass
from typing import TYPE_CHECKING, Any

from specs.batch import BatchGeometry
from tasks.train.loop.telemetry import UnknownDeviceError, canonical_device, peak_flops

if TYPE_CHECKING:
    from tasks.train.planning.cluster import ClusterSpec

# ------------------------------------------------------------------------------------------------ bandwidths
# Bytes/s one device can push in one direction over a link (what a ring all-reduce is bound by).
# NVLink: NVIDIA H100 SXM datasheet, 900 GB/s NVLink 4 bidirectional = 450 GB/s per direction (H200 the same);
# A100 SXM datasheet, 600 GB/s NVLink 3 bidirectional = 300 GB/s per direction. NVL cards link by bridges: H100
# NVL 600 GB/s (300 per direction), H200 NVL 900 GB/s per GPU (450; 2- or 4-way bridges: only that many GPUs).
# V100 SXM2 datasheet: 300 GB/s NVLink 2 = 150 per direction (without it a V100 got Hopper's 450: BLOOM-7B1's
# tp 4 all-reduces were priced 3× too fast).
NVLINK_PER_DIRECTION = {"h100-sxm": 450e9, "h200": 450e9, "a100": 300e9, "h100-nvl": 300e9, "h200-nvl": 450e9,
                        "v100": 150e9}
NVLINK_DEFAULT = 450e9
# PCIe gen4 x16: 32 GB/s per direction on paper, ~25 GB/s achieved by NCCL through the host bridge (no P2P).
PCIE_GEN4 = 25e9
# CPU ranks over shared memory (gloo): no datasheet; ~10 GB/s is a memcpy-bound guess, good only for ranking.
SHM = 10e9
# InfiniBand with one HCA per GPU (DGX reference design): HDR 200 Gb/s = 25 GB/s per GPU (DGX A100), NDR
# 400 Gb/s = 50 GB/s per GPU (DGX H100). Hopper devices get NDR, everything else HDR.
INFINIBAND_HDR_PER_GPU = 25e9
INFINIBAND_NDR_PER_GPU = 50e9
NDR_DEVICES = {"h100-sxm", "h100-pcie", "h100-nvl", "h200", "h200-nvl"}
# 100 GbE: 12.5 GB/s per NIC, and a typical cloud/commodity node has ONE NIC shared by all its GPUs, so every
# device whose collective crosses nodes gets 12.5 GB/s / gpus_per_node (all of them cross at once).
ETHERNET_100G_PER_NODE = 12.5e9

# Latency of a collective, from NCCL's own cost model (src/graph/tuning.cc, Ring algorithm, Simple protocol:
# what large messages use): a base of 8.4 µs per collective plus, per ring step, 3.4 µs over NVLink, 5.7 µs over
# PCIe and 14 µs over the network. A ring all-reduce takes 2·(n−1) steps, an all-gather or reduce-scatter n−1:
# linear in the ranks, so it is what a 2048-way ZeRO-3 gather pays, whatever the bandwidth. A ring over several
# nodes pays the network's figure only on the steps that cross a node (NCCL: n_nodes − 1 for a gather or
# scatter, 2·n_nodes for an all-reduce) and the node's own link's on the rest (before 2026-12-07 every step was
# priced at the network's: 4× too much latency for a data group with 8 ranks per node). CPU ranks (gloo over
# shared memory) have no NCCL figure: PCIe's stands in (they get no estimate anyway).
BASE_LATENCY_S = 8.4e-6
STEP_LATENCY_S = {"nvlink": 3.4e-6, "pcie": 5.7e-6, "shm": 5.7e-6, "infiniband": 14e-6, "ethernet": 14e-6}
# NCCL's Tree algorithm (all-reduce only: a chain inside each node, a double binary tree between nodes), Simple
# protocol: no base, 28 µs per hop inside a node and between nodes, 2·((ranks per node − 1) + log2(nodes)) hops;
# its bus bandwidth is the ring's × 0.92 and half of it is algorithm bandwidth (the ring's is n/(2(n−1))).
# NCCL picks whichever of ring and tree its model says is faster per message: trees win where a ring's 2·(n−1)
# steps dominate (thousands of ranks, small buckets), rings on bandwidth.
TREE_HOP_LATENCY_S = 28e-6
TREE_BANDWIDTH_SHARE = 0.92
# Gradients are reduced in buckets of this many elements (DeepSpeed's default `reduce_bucket_size`, which
# forgeline's generated config keeps): one collective, one latency, per bucket.
GRAD_BUCKET_ELEMENTS = 500_000_000

# ------------------------------------------------------------------------------------------------ assumptions
# Fraction of the dense peak the matmuls reach, before communication and bubbles (which are modelled
# separately): Megatron-LM reports 44–52 % MFU end to end for 175B–1T on A100 (Narayanan et al. 2021, Table 1),
# so 0.5 for the compute alone is a round, slightly optimistic figure. It scales every layout alike.
ASSUMED_MFU = 0.5
# At most this share of a gradient or ZeRO collective hides behind compute (DDP buckets / DeepSpeed
# overlap_comm): the last bucket starts after the last backward kernel, and NCCL kernels steal SMs from compute.
MAX_OVERLAP = 0.8
# Host seconds one block adds to a micro-batch (its forward, backward and share of the optimizer step: Python,
# autograd, kernel launches, DeepSpeed's hooks), per ZeRO stage: measured by benchmarks/zero_host_overhead.py on
# this project's 2-core Intel Xeon (AVX-512) CPU, 2026-12-08, the stage's own engine step on one fp32 CPU rank at a
# negligible width (d_model 64, 8 tokens), the slope between 2 and 10 blocks: 1.49, 1.98, 2.44 and 3.83 ms. The host
# queues kernels ahead of the GPU, so it paces a micro-batch only when its work takes longer than the GPU's: a
# small model on a fast GPU (124M on H100s: ~1.2 ms of GPU work per block and micro-batch of 8 × 1024 tokens), and
# the more so at the higher ZeRO stages, whose gradient hooks (ZeRO-2) and gathers and releases around every block
# (ZeRO-3) run on the host whatever the width. A CPU's tiny kernels stand in for a GPU's launches: a GPU host's
# figure is likely lower at ZeRO-0 (one fused AdamW kernel, no CPU arithmetic), the ZeRO machinery's the same Python.
HOST_S_PER_BLOCK = {0: 1.49e-3, 1: 1.98e-3, 2: 2.44e-3, 3: 3.83e-3}
# Full activation recomputation runs the forward twice: 4/3 of the model FLOPs (Korthikanti et al. 2022, §5).
RECOMPUTE_FACTOR = 4 / 3
BACKWARD_SHARE = 2 / 3   # backward is 4 of the 6·N FLOPs per token
# Activation checkpointing modes the cost and memory models price: none, every other block of a stage
# ("selective per block", torchtitan's layer-frequency AC at 2), every block (forgeline's
# `pretrain.activation_checkpointing: true`).
CHECKPOINTING = ("off", "selective", "full")


def checkpoint_mode(value: bool | str) -> str:
    """The mode of a params value (`activation_checkpointing: true/false`) or a mode name."""
    if isinstance(value, bool):
        return "full" if value else "off"
    if value not in CHECKPOINTING:
        raise ValueError(f"activation checkpointing: one of {', '.join(CHECKPOINTING)}, got {value!r}")
    return value


def recomputed_blocks(mode: bool | str, blocks: int) -> int:
    """Blocks of a stage holding `blocks` whose forward is recomputed in backward under `mode`."""
    return {"off": 0, "selective": blocks // 2, "full": blocks}[checkpoint_mode(mode)]


@dataclass(frozen=True)
class Links:
    """Which link and bandwidth (bytes/s per device) each parallel axis's traffic crosses."""

    tp: str
    tp_bw: float
    dp: str
    dp_bw: float
    pp: str
    pp_bw: float
    dp_nodes: int = 1         # nodes a data-parallel group spans (its ring crosses a node this many times)
    intra: str = "nvlink"     # the link inside a node (a cross-node ring's other steps)


@dataclass(frozen=True)
class StepCost:
    """Estimated seconds of one optimizer step (every micro-batch of every data-parallel replica)."""

    compute_s: float          # model FLOPs (and recomputation) at ASSUMED_MFU, all micro-batches
    tp_comm_s: float          # tensor-parallel all-reduces: on the critical path, never overlapped
    pp_comm_s: float          # stage-boundary activation sends and receives
    bubble_s: float           # 1F1B pipeline fill and drain: (pp − 1) micro-batch slots
    dp_comm_s: float          # gradient / ZeRO traffic on the wire
    dp_exposed_s: float       # the part of dp_comm_s not hidden behind backward (or forward, ZeRO-3)
    step_s: float
    tokens: int               # tokens per step (BatchGeometry.tokens)
    links: Links
    tied_comm_s: float = 0.0  # tied embedding's gradient all-reduce between first and last stage: exposed
    host_s: float = 0.0       # host work per micro-batch (HOST_S_PER_BLOCK × the slowest stage's blocks)
    host_bound: bool = False  # the host's work, not the GPU's, paces each micro-batch (a slot is host_s)

    @property
    def tokens_per_s(self) -> float:
        return self.tokens / self.step_s

    @property
    def s_per_token(self) -> float:
        return self.step_s / self.tokens

    def as_dict(self) -> dict[str, Any]:
        d = {k: (round(v, 6) if isinstance(v, float) else v) for k, v in asdict(self).items() if k != "links"}
        d["tokens_per_s"] = round(self.tokens_per_s, 1)
        d["links"] = {"tp": self.links.tp, "dp": self.links.dp, "pp": self.links.pp}
        return d


def intra_bandwidth(link: str, device: str) -> float:
    if link == "nvlink":
        return NVLINK_PER_DIRECTION.get(canonical_device(device) or "", NVLINK_DEFAULT)
    return {"pcie": PCIE_GEN4, "shm": SHM}[link]


def inter_bandwidth(link: str, device: str, gpus_per_node: int) -> float:
    if link == "infiniband":
        return INFINIBAND_NDR_PER_GPU if canonical_device(device) in NDR_DEVICES else INFINIBAND_HDR_PER_GPU
    if link == "ethernet":
        return ETHERNET_100G_PER_NODE / gpus_per_node
    return 0.0  # "none": a single node; nothing may cross


def links_of(cluster: ClusterSpec, dp: int, tp: int, pp: int) -> Links:
    """The link each axis uses. DeepSpeed's topology orders ranks [pipe, data, model] and fills a node before
    the next: a tensor group is tp consecutive ranks, a data group tp·dp consecutive ranks with stride tp."""
    g = cluster.gpus_per_node
    intra = (cluster.intra_node, intra_bandwidth(cluster.intra_node, cluster.device))
    inter = (cluster.inter_node, inter_bandwidth(cluster.inter_node, cluster.device, g))
    unused = ("-", float("inf"))                       # an axis of size 1 sends nothing
    tp_link = unused if tp == 1 else intra if tp <= g else inter  # the planner rejects tp > g; still priced
    dp_link = unused if dp == 1 else intra if tp * dp <= g else inter
    pp_link = unused if pp == 1 else intra if cluster.nodes == 1 else inter  # the slowest boundary paces all
    dp_nodes = -(-tp * dp // g) if dp > 1 and tp * dp > g else 1            # tp·dp consecutive ranks
    return Links(tp_link[0], tp_link[1], dp_link[0], dp_link[1], pp_link[0], pp_link[1], dp_nodes,
                 cluster.intra_node)


def stage_blocks(n_layers: int, pp: int) -> list[int]:
    """Blocks per pipeline stage as DeepSpeed's `partition_method="type:Block"` cuts them: balanced, the first
    `n_layers mod pp` stages one block more (tests/test_pipeline_uneven.py compares with DeepSpeed's own cut)."""
    small, extra = divmod(n_layers, pp)
    return [small + 1] * extra + [small] * (pp - extra)


def ring_all_reduce_s(nbytes: float, ranks: int, bandwidth: float) -> float:
    """Bandwidth term of a ring all-reduce (Patarasuk & Yuan 2009; NCCL's "bus bandwidth"): 2·(n−1)/n · S / B.
    The latency term is `ring_latency_s`."""
    if ranks <= 1 or nbytes <= 0:
        return 0.0
    return 2 * (ranks - 1) / ranks * nbytes / bandwidth if bandwidth > 0 else float("inf")


def ring_latency_s(ranks: int, link: str, steps_per_rank: int = 2, collectives: float = 1, nodes: int = 1,
                   intra: str = "nvlink") -> float:
    """Latency of `collectives` ring collectives over `ranks` ranks on `link`: each BASE_LATENCY_S plus
    steps_per_rank·(n−1) ring steps (2 for an all-reduce, 1 for an all-gather or reduce-scatter). Over `nodes`
    > 1 nodes only the node-crossing steps pay `link`'s figure, the rest `intra`'s (NCCL's ring model)."""
    if ranks <= 1:
        return 0.0
    steps = steps_per_rank * (ranks - 1)
    if nodes <= 1:
        return collectives * (BASE_LATENCY_S + steps * STEP_LATENCY_S.get(link, 0.0))
    crossing = min(steps, 2 * nodes if steps_per_rank == 2 else nodes - 1)
    return collectives * (BASE_LATENCY_S + crossing * STEP_LATENCY_S.get(link, 0.0)
                          + (steps - crossing) * STEP_LATENCY_S.get(intra, 0.0))


def tree_all_reduce_s(nbytes: float, ranks: int, nodes: int, bandwidth: float, collectives: float = 1) -> float:
    """Seconds of `collectives` NCCL Tree all-reduces of `nbytes` each over `ranks` ranks on `nodes` nodes
    (TREE_HOP_LATENCY_S, TREE_BANDWIDTH_SHARE)."""
    if ranks <= 1 or nbytes <= 0:
        return 0.0
    if bandwidth <= 0:
        return float("inf")
    hops = 2 * (ranks // max(nodes, 1) - 1 + math.ceil(math.log2(max(nodes, 1))))
    return collectives * (hops * TREE_HOP_LATENCY_S) + nbytes / (0.5 * TREE_BANDWIDTH_SHARE * bandwidth)


def device_flops(cluster: ClusterSpec) -> tuple[float | None, str]:
    """FLOP/s the cost model assumes per device (peak × ASSUMED_MFU), or None with the reason."""
    given = getattr(cluster, "peak_tflops", None)
    if given:
        return given * 1e12 * ASSUMED_MFU, f"{given:g} TFLOP/s given per device × assumed MFU {ASSUMED_MFU:g}"
    none = (f"no estimate: no dense {cluster.precision} peak FLOP/s for device {cluster.device!r} in "
            "tasks/train/loop/telemetry.py's DEVICE_PEAK_TFLOPS (add it there with its source, or give "
            "--peak-tflops)")
    try:
        peak = peak_flops(cluster.device, cluster.precision)
    except UnknownDeviceError as error:
        if canonical_device(cluster.device) is not None and cluster.precision == "bf16":  # a V100: no bf16 units
            return None, (f"no estimate: {error}; a device without bf16 trains in fp16: plan with --precision "
                          "fp16 and set pretrain.precision: fp16")
        return None, none
    if peak.flops is None:  # CPU: no meaningful peak
        return None, none
    return peak.flops * ASSUMED_MFU, f"{peak.reason} × assumed MFU {ASSUMED_MFU:g}"


def gradient_comm_bytes(params: int, linear_params: int, precision: str, autocast: bool, zero_stage: int,
                        tp: int) -> int:
    """Bytes one data-parallel rank reduces per pass over its `params` gradients, `linear_params` of them the
    block linears' (matrices and biases), as DeepSpeed 0.19.8 sends them (forgeline's ds_config sets no
    `communication_data_type`). The bf16/fp16 sections: every gradient in the weights' 2 bytes; fp32: 4.
    torch_autocast (bf16 with fp32 weights): ZeRO-0 all-reduces in engine.communication_data_type, fp32 when
    the bf16 and fp16 sections are off (engine.py 1719-1730); ZeRO-1/2/3 bucket each parameter by its
    `comm_dtype` (zero/stage_1_and_2.py 610, stage3.py 471), which torch_autocast.init_autocast_params sets to
    bf16 only on the parameters of modules whose class *is* nn.Linear — the block linears at tp 1; tp > 1 runs
    Column/RowParallelLinear, and the embedding, head and norms are never tagged: fp32.
    tests/test_plan_comm_dtype.py runs the installed DeepSpeed's code on the project's model."""
    if not autocast:
        return params * (4 if precision == "fp32" else 2)
    if zero_stage == 0 or tp > 1:
        return 4 * params
    return 2 * linear_params + 4 * (params - linear_params)


def estimate_step(cluster: ClusterSpec, *, flops_per_token: int, n_layers: int, d_model: int, act_bytes: int,
                  grad_bytes_on_device: int, dp: int, tp: int, pp: int, zero_stage: int, micro_batch: int,
                  seq_len: int, grad_accum: int, activation_checkpointing: bool | str,
                  head_flops_per_token: int = 0, sequence_parallel: bool = False,
                  weight_bytes_on_device: int | None = None, tied_grad_bytes: int = 0) -> StepCost | None:
    """Seconds per optimizer step of one layout; None when the device has no known peak (CPU, unknown GPU).

    `grad_bytes_on_device`: gradient bytes of the fullest stage's parameters on one device before ZeRO
    sharding (what one data-parallel rank reduces: `gradient_comm_bytes`); `weight_bytes_on_device`: the same
    parameters' weights, which ZeRO-2 all-gathers once and ZeRO-3 twice per micro-batch in their own dtype (fp32
    under torch_autocast; default: as the gradients). `head_flops_per_token`: the share of `flops_per_token` the
    output head does (6·V·d); with a pipeline it runs on the last stage, so a stage's time is the larger of the
    first stage's blocks and the last stage's blocks plus the head (DeepSpeed balances blocks, not FLOPs; the
    first `n_layers mod pp` stages hold one block more). The slowest stage paces every slot of the pipe.
    `activation_checkpointing`: a CHECKPOINTING mode (or the params' bool). `tied_grad_bytes`: the tied
    embedding's gradient per rank (plan_memory.tied_gradient_bytes), all-reduced once per step between the
    first and last stage over the pipeline's link (`tied_all_reduce_s`).
    """
    flops, _ = device_flops(cluster)
    if flops is None:
        return None
    links, m = links_of(cluster, dp, tp, pp), grad_accum
    mb_tokens = micro_batch * seq_len
    t_mb, recomputed, stage_layers = _slowest_stage_s(flops_per_token, head_flops_per_token, n_layers, pp,
                                                      activation_checkpointing, mb_tokens / (tp * flops))
    act = mb_tokens * d_model * act_bytes                                   # one block's B·T·d output
    # Megatron: 2 all-reduces per block forward (attention and MLP outputs), 2 backward (their inputs' grads);
    # a recomputed block repeats its forward pair. Sequence parallelism swaps each all-reduce for a
    # reduce-scatter + all-gather (the same bytes) and re-gathers the q/k/v and gate/up inputs in backward
    # (gather_linears: two all-gathers, one all-reduce's worth). They sit between dependent matmuls: exposed.
    per_stage = 4 * stage_layers + 2 * recomputed + (stage_layers if sequence_parallel and tp > 1 else 0)
    t_tp = per_stage * (ring_all_reduce_s(act, tp, links.tp_bw) + ring_latency_s(tp, links.tp))
    # Each stage boundary sends B·T·d forward and its gradient back, once per micro-batch.
    t_p2p = 2 * (act / links.pp_bw + ring_latency_s(2, links.pp, 1, 1)) if pp > 1 else 0.0
    host = HOST_S_PER_BLOCK[zero_stage] * stage_layers
    slot = max(t_mb + t_tp + t_p2p, host)      # the host queues ahead of the GPU: the slower of the two paces
    weights = grad_bytes_on_device if weight_bytes_on_device is None else weight_bytes_on_device
    dp_comm, dp_exposed = _gradient_traffic((grad_bytes_on_device, weights), dp, links, zero_stage, m, t_mb,
                                            act_bytes, stage_layers)
    bubble = (pp - 1) * slot            # 1F1B fill and drain: (pp − 1) of the (m + pp − 1) slots of a step
    tied = tied_all_reduce_s(tied_grad_bytes, links) if pp > 1 else 0.0
    step = (m + pp - 1) * slot + dp_exposed + tied
    return StepCost(compute_s=m * t_mb, tp_comm_s=m * t_tp, pp_comm_s=m * t_p2p, bubble_s=bubble,
                    dp_comm_s=dp_comm, dp_exposed_s=dp_exposed, step_s=step,
                    tokens=BatchGeometry(micro_batch, grad_accum, dp).tokens(seq_len),
                    links=links, tied_comm_s=tied, host_s=host, host_bound=host > t_mb + t_tp + t_p2p)


def tied_all_reduce_s(nbytes: int, links: Links) -> float:
    """Seconds of the tied embedding's gradient all-reduce: a 2-rank group (the first and last stage's ranks
    of one data/tensor coordinate; every coordinate's pair at once) over the pipeline's link. It runs in the
    schedule's epilogue (deepspeed pipe/schedule.py: ReduceTiedGrads after the last backward, before
    ReduceGrads and the step), after every micro-batch's work: nothing left to hide it behind."""
    if nbytes <= 0:
        return 0.0
    return ring_all_reduce_s(nbytes, 2, links.pp_bw) + ring_latency_s(2, links.pp)


def _slowest_stage_s(flops_per_token: int, head_flops: int, n_layers: int, pp: int, checkpointing: bool | str,
                     s_per_flop_token: float) -> tuple[float, int, int]:
    """(seconds of one micro-batch on the slowest stage, its recomputed blocks, its blocks).

    A recomputed block runs its forward (2 of its 6 FLOPs per parameter and token) once more."""
    block_f = (flops_per_token - head_flops) / n_layers
    blocks = stage_blocks(n_layers, pp)
    stages = [(blocks[0], head_flops)] if pp == 1 else [(blocks[0], 0), (blocks[-1], head_flops)]

    def seconds(layers: int, extra: float) -> float:
        again = recomputed_blocks(checkpointing, layers)
        return ((layers + again * (RECOMPUTE_FACTOR - 1)) * block_f + extra) * s_per_flop_token

    layers, extra = max(stages, key=lambda st: seconds(*st))
    return seconds(layers, extra), recomputed_blocks(checkpointing, layers), layers


def _gradient_traffic(nbytes: tuple[int, int], dp: int, links: Links, zero_stage: int, m: int, t_mb: float,
                      act_bytes: int, stage_layers: int) -> tuple[float, float]:
    """(gradient/ZeRO seconds on the wire per step, the part not hidden behind compute), as DeepSpeed 0.19.8
    runs forgeline's generated config (`dsconfig.zero_section`: overlap_comm on for ZeRO-3, and for ZeRO-2 on
    GPUs; DeepSpeed's default `use_multi_rank_bucket_allreduce: true`).

    - ZeRO-0: one all-reduce of the gradients per step (2Ψ), after the last backward: the engine's
      `allreduce_gradients` → `buffered_allreduce_fallback` at the accumulation boundary, no hooks. Exposed.
    - ZeRO-1: each bucket *all-reduced* (`average_tensor` with use_multi_rank_bucket_allreduce, not the ZeRO
      paper's reduce-scatter: 2Ψ) in `reduce_gradients` after the last backward (overlap_comm off), then the
      updated partitions all-gathered after the optimizer step (`all_gather_dp_groups`: Ψ of the weights). 3Ψ,
      exposed.
    - ZeRO-2: the same bucket all-reduce from the backward hooks every micro-batch (2Ψ each), overlapped with
      backward (overlap_comm), and the all-gather once after the step (waits).
    - ZeRO-3: the weights all-gathered for forward and again for backward and the gradients reduce-scattered,
      every micro-batch (Rajbhandari et al. 2020, §7: 3Ψ), prefetched behind forward and backward.
    Every all-reduce is `dist.all_reduce`: NCCL may take its tree. `nbytes`: (gradient bytes, weight bytes) of
    one pass, each in the dtype DeepSpeed sends it (`gradient_comm_bytes`; the gathers move the weights)."""
    grad_bytes, weight_bytes = nbytes
    # Latency, per pass over the gradients: one collective per bucket; ZeRO-3 gathers and reduces per block.
    buckets = max(1, -(-grad_bytes // (GRAD_BUCKET_ELEMENTS * act_bytes)))
    latency = ring_latency_s(dp, links.dp, 1, buckets if zero_stage < 3 else max(buckets, stage_layers),
                             links.dp_nodes, links.intra)
    half = ring_all_reduce_s(grad_bytes, dp, links.dp_bw) / 2 + latency       # one reduce-scatter
    gather = ring_all_reduce_s(weight_bytes, dp, links.dp_bw) / 2 + latency   # one all-gather of the weights
    whole = min(2 * half, tree_all_reduce_s(grad_bytes, dp, links.dp_nodes, links.dp_bw, buckets))

    def exposed(comm: float, window: float) -> float:
        return max(comm - window, (1 - MAX_OVERLAP) * comm)

    if zero_stage == 0:
        return whole, whole
    if zero_stage == 1:
        return whole + gather, whole + gather
    if zero_stage == 2:
        return m * whole + gather, m * exposed(whole, BACKWARD_SHARE * t_mb) + gather
    per_mb = 2 * gather + half
    return m * per_mb, m * exposed(per_mb, t_mb)                              # prefetch hides behind fwd + bwd


def describe(cost: StepCost) -> str:
    """One line: where the step's time goes."""
    s, ln = cost.step_s, cost.links
    parts = [f"compute {cost.compute_s / s:.0%}"]
    if cost.host_bound:
        parts.append(f"host-bound: {cost.host_s * 1e3:.3g} ms of host work per micro-batch outlasts the GPU's")
    if cost.tp_comm_s:
        parts.append(f"tp all-reduces {cost.tp_comm_s / s:.0%} ({ln.tp})")
    if cost.pp_comm_s or cost.bubble_s:
        parts.append(f"pipeline bubble {cost.bubble_s / s:.0%} + sends {cost.pp_comm_s / s:.0%} ({ln.pp})")
    if cost.dp_comm_s:
        parts.append(f"exposed gradient/ZeRO traffic {cost.dp_exposed_s / s:.0%} ({ln.dp})")
    if cost.tied_comm_s:
        parts.append(f"tied-embedding all-reduce {cost.tied_comm_s / s:.0%} ({ln.pp})")
    return (f"≈ {s:.3g} s/step, {cost.tokens_per_s:,.0f} tokens/s: " + ", ".join(parts))
