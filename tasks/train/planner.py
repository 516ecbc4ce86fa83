"""Layout planner: per-device memory of a (dp, tp, pp, ZeRO) layout, and the seed rule that picks one.

Used by `python -m tasks plan` before a run and by the pretrain stage to reject impossible layouts early.
All sizes are bytes; GiB (2**30) only when rendered.
"""

from __future__ import annotations

import textwrap
from dataclasses import dataclass, field
from typing import Literal

from pydantic import Field

from specs.base import StrictModel
from specs.pretrain import ModelSpec, ParallelSpec, layout_problems
from tasks.train.config import ModelConfig, ParamCounts, param_counts

GIB = 1 << 30
BYTES_PER_PARAM = {"fp32": 4, "bf16": 2, "fp16": 2}


class ClusterSpec(StrictModel):
    """The machines a layout is planned for (not part of params: the same run may be planned for many)."""

    nodes: int = Field(1, ge=1, le=4096, description="Nodes (hosts).")
    gpus_per_node: int = Field(1, ge=1, le=64, description="Devices per node (GPUs, or CPU ranks on CPU).")
    memory_gb: float = Field(80.0, gt=0, le=4096, description="Usable memory per device in GiB.")
    device: str = Field("cpu", description="Device name, e.g. h100-sxm, a100, l4, cpu (telemetry's peak table).")
    intra_node: Literal["nvlink", "pcie", "shm"] = Field(
        "nvlink", description="Link between devices of a node: tensor parallel all-reduces run over it.")
    inter_node: Literal["infiniband", "ethernet", "none"] = Field(
        "infiniband", description="Link between nodes: data-parallel all-reduces and pipeline sends cross it.")
    precision: Literal["fp32", "bf16", "fp16"] = Field(
        "bf16", description="Training precision: weights and grads take 4 bytes/param in fp32, 2 in bf16/fp16.")
    overhead_gb: float = Field(
        2.0, ge=0, le=1024, description="Fixed reserve per device in GiB: CUDA context, NCCL and DeepSpeed "
        "communication buckets, allocator fragmentation.")

    @property
    def world_size(self) -> int:
        return self.nodes * self.gpus_per_node


@dataclass(frozen=True)
class MemoryEstimate:
    """Bytes per device on the fullest pipeline stage."""

    parameters: int
    gradients: int
    optimizer: int
    activations: int
    overhead: int
    stage: str                # "only", "first" or "last": which stage is the fullest
    params_on_device: int     # parameters the stage computes with (before ZeRO-3 sharding)

    @property
    def total(self) -> int:
        return self.parameters + self.gradients + self.optimizer + self.activations + self.overhead

    def breakdown_gib(self) -> dict[str, float]:
        keys = ("parameters", "gradients", "optimizer", "activations", "overhead", "total")
        return {k: round(getattr(self, k) / GIB, 3) for k in keys}


def _ceil_div(a: int, b: int) -> int:
    return -(-a // b)


def block_activation_bytes(seq_len: int, micro_batch: int, d_model: int, n_heads: int, tp: int,
                           act_bytes: int, fused_attention: bool) -> int:
    """Activations one block keeps for backward, per micro-batch.

    Korthikanti et al. 2022, "Reducing Activation Recomputation in Large Transformer Models", eq. 2 and
    Table 2: s·b·h·(10 + 24/t + 5·a·s/(h·t)) bytes with 16-bit activations and tensor parallel size t (no
    sequence parallelism; the 10·sbh of layer-norm inputs and dropout masks stay replicated). It is derived for a
    GPT block with a 4h GELU MLP and dropout, an upper bound for our SwiGLU block without dropout. The
    5·a·s/(h·t) term is the attention-score, softmax and dropout matrices: fused (flash) attention never stores
    them (Dao et al. 2022), so it is dropped when `fused_attention`.
    """
    s, b, h, a = seq_len, micro_batch, d_model, n_heads
    per_sbh = 10 + 24 / tp + (0.0 if fused_attention else 5 * a * s / (h * tp))
    return int(s * b * h * per_sbh * act_bytes / 2)


def estimate_memory(model: ModelSpec, vocab_size: int, seq_len: int, micro_batch: int, precision: str,
                    dp: int, tp: int, pp: int, zero_stage: int, activation_checkpointing: bool,
                    grad_accum: int = 1, overhead_bytes: int = 0, fused_attention: bool = True) -> MemoryEstimate:
    """Memory per device of the fullest pipeline stage (the first holds the embedding and the most micro-batches
    in flight, the last the output head and logits)."""
    r, counts = model.resolved(), param_counts(ModelConfig.from_spec(model, vocab_size, seq_len))
    w_bytes = BYTES_PER_PARAM[precision]
    # Rajbhandari et al. 2020 (ZeRO), §3.1: mixed-precision Adam keeps 2Ψ weights + 2Ψ grads + 12Ψ optimizer
    # states (fp32 master weights, momentum, variance); in plain fp32 the weights are the master: 4Ψ + 4Ψ + 8Ψ.
    # ZeRO-1 shards the optimizer states over dp, ZeRO-2 also the grads, ZeRO-3 also the weights (§5).
    opt_bytes = 8 if precision == "fp32" else 12
    layers = _ceil_div(r["n_layers"], pp)
    block = _ceil_div(counts.block_matrices + counts.block_biases, tp) + counts.block_norms  # norms replicated
    per_block_act = block_activation_bytes(seq_len, micro_batch, r["d_model"], r["n_heads"], tp, w_bytes,
                                           fused_attention)

    def stage_act(in_flight: int) -> int:
        if activation_checkpointing:
            # Full recomputation keeps only each block's input (2·sbh bytes in 16-bit, Korthikanti §4.1) plus
            # one block's full working set while it is recomputed in backward.
            return layers * in_flight * seq_len * micro_batch * r["d_model"] * w_bytes + per_block_act
        return layers * in_flight * per_block_act

    # Logits in compute precision plus the fp32 copy the cross-entropy works on (Korthikanti §4.3 counts 4sbv).
    logits = seq_len * micro_batch * vocab_size * (w_bytes + 4)

    estimates = []
    stages = [("only", True, True)] if pp == 1 else [("first", True, False), ("last", False, True)]
    for name, first, last in stages:
        n = layers * block + (counts.embedding if first else 0)
        if last:
            # Untied: the head lives on the last stage. Tied with a pipeline: the last stage holds its own copy
            # of the table (DeepSpeed TiedLayerSpec all-reduces the two copies' grads). Embeddings are not split
            # over tp (no vocab-parallel embedding).
            n += counts.final_norm + (counts.embedding if model.tie_embeddings and pp > 1 else counts.head)
        # 1F1B (Narayanan et al. 2021, PipeDream-Flush): stage i keeps up to pp − i micro-batches in flight.
        in_flight = min(pp, grad_accum) if first else 1
        estimates.append(MemoryEstimate(
            parameters=_ceil_div(n * w_bytes, dp if zero_stage >= 3 else 1),
            gradients=_ceil_div(n * w_bytes, dp if zero_stage >= 2 else 1),
            optimizer=_ceil_div(n * opt_bytes, dp if zero_stage >= 1 else 1),
            activations=stage_act(in_flight) + (logits if last else 0),
            overhead=overhead_bytes, stage=name, params_on_device=n))
    return max(estimates, key=lambda e: e.total)


def candidate_layouts(world_size: int) -> list[tuple[int, int, int]]:
    """Every (dp, tp, pp) with dp·tp·pp = world_size, least model parallelism first (pp, then tp)."""
    divisors = [d for d in range(1, world_size + 1) if world_size % d == 0]
    return [(world_size // (pp * tp), tp, pp) for pp in divisors for tp in divisors if (world_size // pp) % tp == 0]


def _tp_node_problem(tp: int, gpus_per_node: int) -> str | None:
    # DeepSpeed's PipeModelDataParallelTopology orders ranks [pipe, data, model]: a tensor group is tp
    # consecutive ranks, which stay on one node when tp divides the devices per node. It all-reduces inside every
    # layer, so it must not cross the (slower) inter-node link.
    if tp > gpus_per_node:
        return f"parallel.tp: {tp} > {gpus_per_node} devices per node (tensor parallel stays inside a node)"
    if gpus_per_node % tp:
        return f"parallel.tp: must divide the {gpus_per_node} devices per node, got {tp}"
    return None


def validate_layout(model: ModelSpec, parallel: ParallelSpec, world_size: int,
                    gpus_per_node: int | None = None) -> list[str]:
    """Why `parallel` cannot run `model` on `world_size` ranks (empty when it can), each naming the params key."""
    problems = layout_problems(model, parallel)
    if parallel.world_size != world_size:
        problems.append(f"parallel: dp × tp × pp = {parallel.dp} × {parallel.tp} × {parallel.pp} = "
                        f"{parallel.world_size}, but the world size is {world_size}")
    if gpus_per_node is not None and (p := _tp_node_problem(parallel.tp, gpus_per_node)):
        problems.append(p)
    return problems


@dataclass
class PlanRow:
    dp: int
    tp: int
    pp: int
    zero_stage: int | None          # None: rejected before memory (any stage)
    memory: MemoryEstimate | None
    fits: bool
    reasons: list[str] = field(default_factory=list)


@dataclass
class Plan:
    model_name: str
    params: ParamCounts
    cluster: ClusterSpec
    rows: list[PlanRow]
    chosen: PlanRow | None
    why: str

    def render(self) -> str:
        c = self.cluster
        head = (f"model {self.model_name}, {self.params.total / 1e6:.1f}M parameters "
                f"({self.params.non_embedding / 1e6:.1f}M non-embedding)\n"
                f"cluster: {c.nodes} node(s) × {c.gpus_per_node} {c.device} ({c.memory_gb:g} GiB each, "
                f"{c.intra_node} inside a node, {c.inter_node} between nodes), {c.precision}\n")
        cols = f"{'dp':>4} {'tp':>3} {'pp':>3} {'zero':>4} | {'params':>7} {'grads':>7} {'optim':>7} " \
               f"{'activ':>7} {'total':>7} GiB | fits  | reason"
        lines = [head, cols, "-" * len(cols)]
        for r in self.rows:
            zero = "-" if r.zero_stage is None else str(r.zero_stage)
            if r.memory is None:
                mem = " ".join(f"{'':>7}" for _ in range(5))
            else:
                g = r.memory.breakdown_gib()
                mem = " ".join(f"{g[k]:>7.2f}" for k in ("parameters", "gradients", "optimizer", "activations",
                                                          "total"))
            mark = "yes" if r.fits else "no"
            if r is self.chosen:
                mark += " *"
            row = f"{r.dp:>4} {r.tp:>3} {r.pp:>3} {zero:>4} | {mem}     | {mark:<5} | {'; '.join(r.reasons)}"
            lines.append(row.rstrip())
        lines.append("")
        if self.chosen:
            ch = self.chosen
            lines.append(f"chosen: dp={ch.dp} tp={ch.tp} pp={ch.pp} zero_stage={ch.zero_stage}")
        else:
            lines.append("chosen: none fits")
        lines += textwrap.wrap("why: " + self.why, width=110)
        return "\n".join(lines)


def plan(model: ModelSpec, cluster: ClusterSpec, *, vocab_size: int, seq_len: int, micro_batch: int,
         grad_accum: int = 1, activation_checkpointing: bool = False, fused_attention: bool = True) -> Plan:
    """Every candidate layout × allowed ZeRO stage with its memory, and the one the seed rule picks."""
    world, mem_limit = cluster.world_size, cluster.memory_gb * GIB
    rows: list[PlanRow] = []
    for dp, tp, pp in candidate_layouts(world):
        reasons = layout_problems(model, ParallelSpec.model_construct(dp=dp, tp=tp, pp=pp))
        if p := _tp_node_problem(tp, cluster.gpus_per_node):
            reasons.append(p)
        if reasons:
            rows.append(PlanRow(dp, tp, pp, None, None, False, reasons))
            continue
        # ZeRO shards over dp (nothing to shard at dp = 1); DeepSpeed allows ZeRO ≤ 1 with a pipeline.
        for zero in [0] if dp == 1 else ([0, 1] if pp > 1 else [0, 1, 2, 3]):
            est = estimate_memory(model, vocab_size, seq_len, micro_batch, cluster.precision, dp, tp, pp, zero,
                                  activation_checkpointing, grad_accum, int(cluster.overhead_gb * GIB),
                                  fused_attention)
            fits = est.total <= mem_limit
            why_not = [] if fits else [f"needs {est.total / GIB:.1f} GiB > {cluster.memory_gb:g} GiB per device"]
            rows.append(PlanRow(dp, tp, pp, zero, est, fits, why_not))
    # The seed rule as one ordering: data parallel first (lowest ZeRO stage that fits), then the smallest tensor
    # group inside a node, then the fewest pipeline stages — least model parallelism, least communication.
    fitting = sorted((r for r in rows if r.fits), key=lambda r: (r.pp, r.tp, r.zero_stage))
    chosen = fitting[0] if fitting else None
    counts = param_counts(ModelConfig.from_spec(model, vocab_size, seq_len))
    why = _why(model, cluster, rows, chosen, counts, micro_batch, grad_accum, seq_len)
    r = model.resolved()
    name = (f"{model.flavor} (layers {r['n_layers']}, d_model {r['d_model']}, heads {r['n_heads']}/"
            f"{r['n_kv_heads']} kv, vocab {vocab_size}, seq_len {seq_len}, micro_batch {micro_batch})")
    return Plan(name, counts, cluster, rows, chosen, why)


def _best(rows: list[PlanRow], pred) -> PlanRow | None:
    sized = [r for r in rows if r.memory is not None and pred(r)]
    return min(sized, key=lambda r: r.memory.total) if sized else None


def _why(model, cluster, rows, chosen, counts, micro_batch, grad_accum, seq_len) -> str:
    def gib(row: PlanRow) -> str:
        return f"{row.memory.total / GIB:.1f} GiB"

    dp_best = _best(rows, lambda r: r.tp == 1 and r.pp == 1)
    tp_best = _best(rows, lambda r: r.pp == 1 and r.tp > 1)
    size = f"{model.flavor} ({counts.total / 1e6:.1f}M parameters)"
    if chosen is None:
        best = _best(rows, lambda r: True)
        need = f"the smallest need is {gib(best)} (dp={best.dp} tp={best.tp} pp={best.pp} ZeRO-{best.zero_stage})" \
            if best else "no layout passes the divisibility checks"
        return (f"No layout of {size} fits {cluster.world_size} × {cluster.memory_gb:g} GiB: {need}. Turn on "
                "activation_checkpointing, lower micro_batch_size or seq_len, or plan for more or larger devices.")
    m = chosen.memory
    parts = [(f"{size} needs {gib(chosen)} per device at dp={chosen.dp} tp={chosen.tp} pp={chosen.pp} "
              f"ZeRO-{chosen.zero_stage} (weights {m.parameters / GIB:.1f}, grads {m.gradients / GIB:.1f}, "
              f"optimizer {m.optimizer / GIB:.1f}, activations {m.activations / GIB:.1f}, overhead "
              f"{m.overhead / GIB:.1f}) of {cluster.memory_gb:g} GiB.")]
    if chosen.tp == 1 and chosen.pp == 1:
        parts.append("Data parallel is preferred while the model fits: every rank runs the whole model and only "
                     "gradients are all-reduced, once per step.")
        if chosen.zero_stage:
            parts.append(f"Lower ZeRO stages do not fit; ZeRO-{chosen.zero_stage} shards "
                         + {1: "the optimizer states", 2: "optimizer states and gradients",
                            3: "optimizer states, gradients and weights (re-gathered every forward and backward)"}
                         [chosen.zero_stage] + f" over the {chosen.dp} data-parallel ranks.")
        else:
            parts.append("ZeRO-0 fits, so no sharding traffic is added.")
    elif chosen.pp == 1:
        parts.append(f"Plain data parallel does not fit even with ZeRO-3 (best {gib(dp_best)}). Tensor parallel "
                     f"tp={chosen.tp} splits every block's weights and most activations over {chosen.tp} devices of "
                     f"one node ({cluster.intra_node}); the smallest tp that fits is taken because its all-reduces "
                     "sit inside every layer.")
    else:
        layers = model.resolved()["n_layers"]
        bubble = (chosen.pp - 1) / (grad_accum + chosen.pp - 1)
        tried = f"tensor parallel inside a node (best {gib(tp_best)})" if tp_best else "tensor parallel"
        parts.append(f"Neither plain data parallel (best {gib(dp_best) if dp_best else 'n/a'}) nor {tried} fits. "
                     f"The pipeline cuts the {layers} layers into {chosen.pp} stages of {layers // chosen.pp}; only "
                     f"stage-boundary activations need to cross the {cluster.inter_node} link between nodes. "
                     f"DeepSpeed allows ZeRO ≤ 1 with a pipeline. The 1F1B bubble is (pp−1)/(m+pp−1) = "
                     f"{bubble:.0%} at grad_accum m = {grad_accum}: use m ≥ 4·pp.")
    if m.total > 0.9 * cluster.memory_gb * GIB:
        parts.append(f"That is {m.total / (cluster.memory_gb * GIB):.0%} of the device: little headroom for "
                     "fragmentation; activation_checkpointing or the next ZeRO stage buys some.")
    global_seqs = micro_batch * grad_accum * chosen.dp
    parts.append(f"Global batch = micro_batch {micro_batch} × grad_accum {grad_accum} × dp {chosen.dp} = "
                 f"{global_seqs} sequences ({global_seqs * seq_len:,} tokens) per step.")
    return " ".join(parts)
